#!/usr/bin/env bash
# aboleth.moe's low-latency mode (tests/gpu/moe.py), or with MOE_MODE=normal its normal mode
# (tests/gpu/moe_normal.py), over ABOLETH_TRANSPORT (p2p or proxy), NPROC ranks (default 2); with
# fewer GPUs than ranks they share one under CUDA MPS. The dead-peer step waits for
# ABOLETH_WAIT_TIMEOUT_MS (5000 here) before its wait gives up.
#
#   [MOE_MODE=normal [MOE_NORMAL_DIRECT=1|0]] tests/gpu/run_moe.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/moe/<date>-moe[-normal]-<machine>.json (the merged per-rank reports).
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
script=tests/gpu/moe.py stem=moe prefix=moe
description="tests/gpu/moe.py: aboleth.moe low-latency dispatch (BF16 and FP8: float, rounded and UE8M0 scales) and combine, every routing case and hidden size bit-exact against aboleth.moe.reference, CUDA-graph replay (BF16 and FP8), receive hooks, a mismatched configuration and a dead peer reported, timings at DeepEP's low-latency settings (BF16 and FP8 dispatch)"
if [ "${MOE_MODE:-low_latency}" = normal ]; then
    # No dead-peer step here; a first 4096-token dispatch over the proxy took 3.2 s (first use
    # of its kernels and of the pool's copies), past the 5 s bound when the ranks start apart.
    export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-20000}
    script=tests/gpu/moe_normal.py stem=moe-normal prefix=moe-normal
    # MOE_NORMAL_DIRECT=1: the direct sending kernels (Buffer(normal_direct=True), p2p only); 0:
    # the staged ones (normal_direct=False); unset: the Buffer's default (direct on p2p).
    [ "${MOE_NORMAL_DIRECT:-}" = 1 ] && stem=moe-normal-direct
    [ "${MOE_NORMAL_DIRECT:-}" = 0 ] && stem=moe-normal-staged
    # ABOLETH_MOE_BLOCKING_HOST_WAIT=1: the host's waits block, as before the polling (to compare).
    [ "${ABOLETH_MOE_BLOCKING_HOST_WAIT:-}" = 1 ] && stem=$stem-blocking-host-wait
    description="tests/gpu/moe_normal.py: aboleth.moe normal-mode layout, dispatch (BF16 and FP8) and combine, every routing case and hidden size over consecutive layers bit-exact against aboleth.moe.reference, a cached dispatch, CUDA-graph replay with num_worst_tokens, too-small buffers reported, a timing at DeepEP's normal-mode settings"
fi
run_dir="$out_dir/moe"
mkdir -p "$run_dir"
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ${MOE_NORMAL_DIRECT:+MOE_NORMAL_DIRECT=$MOE_NORMAL_DIRECT }${ABOLETH_MOE_BLOCKING_HOST_WAIT:+ABOLETH_MOE_BLOCKING_HOST_WAIT=$ABOLETH_MOE_BLOCKING_HOST_WAIT }ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000} timeout 500 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port $script $run_dir"
echo "+ $command"
started=$(date +%s.%N)
ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000} timeout 500 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    "$script" "$run_dir" 2>&1 | tee "$out_dir/$stem.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$run_dir" "$prefix" "$stem" "$description$mps_note"
exit $status
