#!/usr/bin/env bash
# The KV-cache transfer suite (experiments/bench/kv.py) over each of KV_TRANSPORTS (default p2p
# and proxy), two ranks (with fewer GPUs they share one under CUDA MPS: not NVLink).
#
#   experiments/bench/run_kv.sh [OUT_DIR]   (repository root, GPU machine)
#
# Writes OUT_DIR/<date>-kv-<transport>-<machine>.{json,md}.
set -u
source "$(dirname "$0")/../../tests/gpu/common.sh"
start_mps_if_ranks_share_gpus
overall=0
for kind in ${KV_TRANSPORTS:-p2p proxy}; do
    soft=""
    if [ "$kind" = rdma ]; then export ABOLETH_RDMA_DEVICE=soft; soft="ABOLETH_RDMA_DEVICE=soft "; fi
    command="${soft}NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 $launcher --nproc-per-node 2 experiments/bench/kv.py $out_dir --transport $kind"
    echo "+ $command"
    MACHINE=$machine COMMAND="$command" timeout "${KV_BENCH_TIMEOUT_S:-280}" $launcher --nproc-per-node 2 \
        --master-addr 127.0.0.1 --master-port "$port" experiments/bench/kv.py "$out_dir" --transport "$kind" \
        2>&1 | tee "$out_dir/kv-bench-$kind.log"
    [ "${PIPESTATUS[0]}" = 0 ] || overall=1
    port=$((port + 1))
done
exit $overall
