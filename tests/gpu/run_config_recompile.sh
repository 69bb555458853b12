#!/usr/bin/env bash
# A configuration change recompiles on the GPU, and what compilation() around each launch costs
# (tests/gpu/config_recompile.py), NPROC ranks (default 2). On a machine with fewer GPUs than
# ranks the ranks share them under CUDA MPS (started here, stopped at the end).
#
#   tests/gpu/run_config_recompile.sh [OUT_DIR]    (from the repository root, on the GPU machine)
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/config_recompile.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/config_recompile.py "$out_dir" 2>&1 | tee "$out_dir/config_recompile.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" config_recompile config-recompile \
    "tests/gpu/config_recompile.py: the seed's kernel under passes on/off/on/off with compilation() around each launch recompiles per configuration and finds its kernels again, every round checked; per-launch cost from Python$mps_note"
exit $status
