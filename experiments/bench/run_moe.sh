#!/usr/bin/env bash
# The MoE suite (experiments/bench/moe.py) over ABOLETH_TRANSPORT (p2p or proxy), NPROC ranks
# (default 2; with fewer GPUs they share one under CUDA MPS: not NVLink). DEEPEP_SOURCE: a DeepEP
# v1.2.1 checkout to build and compare against (optional).
#
#   [DEEPEP_SOURCE=PATH] experiments/bench/run_moe.sh [OUT_DIR]   (repository root, GPU machine)
#
# Writes OUT_DIR/<date>-moe-<transport>-<machine>.{json,md}.
set -u
source "$(dirname "$0")/../../tests/gpu/common.sh"
start_mps_if_ranks_share_gpus
deepep=()
[ -n "${DEEPEP_SOURCE:-}" ] && deepep=(--deepep-source "$DEEPEP_SOURCE")
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 $launcher --nproc-per-node $nproc experiments/bench/moe.py $out_dir --transport $transport ${deepep[*]}"
echo "+ $command"
MACHINE=$machine COMMAND="$command" timeout "${MOE_BENCH_TIMEOUT_S:-560}" $launcher --nproc-per-node "$nproc" \
    --master-addr 127.0.0.1 --master-port "$port" experiments/bench/moe.py "$out_dir" --transport "$transport" \
    "${deepep[@]}" 2>&1 | tee "$out_dir/moe-bench-$transport.log"
exit "${PIPESTATUS[0]}"
