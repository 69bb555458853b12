#!/usr/bin/env bash
# Where the proxy's all-to-all round goes (proxy_breakdown.py), once per completion mode
# (markers, then synchronize), 2 ranks; with fewer GPUs than ranks they share one under CUDA
# MPS, as run.sh does. Installs the aboleth wheel from WHEEL_DIR (default target-carry/wheels).
#
#   experiments/bench/run_proxy_breakdown.sh OUT_DIR    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/proxy-breakdown-{markers,synchronize}.json (and the per-rank files) and the log.
# BREAKDOWN_SIZES (comma-separated bytes, default 8,256,16384) and BREAKDOWN_ROUNDS (default 2000)
# narrow it.
set -u
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-10000}
source "$(dirname "$0")/../../tests/gpu/common.sh"
start_mps_if_ranks_share_gpus
status=0
for completion in markers synchronize; do
    echo "+ $launcher --nproc-per-node $nproc experiments/bench/proxy_breakdown.py $out_dir --completion $completion$mps_note"
    timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
        experiments/bench/proxy_breakdown.py "$out_dir" --completion "$completion" \
        --sizes "${BREAKDOWN_SIZES:-8,256,16384}" --rounds "${BREAKDOWN_ROUNDS:-2000}" \
        2>&1 | tee "$out_dir/proxy-breakdown-$completion.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    port=$((port + 1))
done
exit $status
