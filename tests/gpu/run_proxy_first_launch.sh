#!/usr/bin/env bash
# A first launch queued behind proxy kernels in flight (tests/gpu/proxy_first_launch.py), once
# with CUDA's default (lazy) module loading and once with CUDA_MODULE_LOADING=EAGER, 2 ranks; with
# fewer GPUs than ranks they share one under CUDA MPS. The waits' bound is 3 s so a hang costs
# seconds.
#
#   tests/gpu/run_proxy_first_launch.sh [OUT_DIR]    (from the repository root, on the GPU machine)
set -u
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-3000} ABOLETH_TRANSPORT=${ABOLETH_TRANSPORT:-proxy}
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
status=0
for loading in LAZY EAGER; do
    mkdir -p "$out_dir/$loading"
    echo "+ CUDA_MODULE_LOADING=$loading $launcher --nproc-per-node $nproc tests/gpu/proxy_first_launch.py$mps_note"
    CUDA_MODULE_LOADING=$loading timeout 200 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 \
        --master-port "$port" tests/gpu/proxy_first_launch.py "$out_dir/$loading" 2>&1 | tee "$out_dir/$loading.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    port=$((port + 1))
done
exit $status
