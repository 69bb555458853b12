#!/usr/bin/env bash
# aboleth.moe's low-latency mode (tests/gpu/moe.py) over ABOLETH_TRANSPORT (p2p or proxy), NPROC
# ranks (default 2); with fewer GPUs than ranks they share one under CUDA MPS. The dead-peer step
# waits for ABOLETH_WAIT_TIMEOUT_MS (5000 here) before its wait gives up.
#
#   tests/gpu/run_moe.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/moe/<date>-moe-<machine>.json (the merged per-rank reports).
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
run_dir="$out_dir/moe"
mkdir -p "$run_dir"
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000} timeout 500 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/moe.py $run_dir"
echo "+ $command"
started=$(date +%s.%N)
ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000} timeout 500 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/moe.py "$run_dir" 2>&1 | tee "$out_dir/moe.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$run_dir" moe moe \
    "tests/gpu/moe.py: aboleth.moe low-latency dispatch and combine, every routing case and hidden size bit-exact against aboleth.moe.reference, CUDA-graph replay, receive hooks, a mismatched configuration and a dead peer reported, a timing at DeepEP's low-latency settings$mps_note"
exit $status
