#!/usr/bin/env bash
# Every MoE check of issue 15 in one device call: the low-latency and the normal mode
# (tests/gpu/run_moe.sh) over p2p and the proxy, then, with DEEPEP_SOURCE (a DeepEP v1.2.1
# checkout; DEEPEP_PREBUILT for an extension built earlier), the MoE benchmark over p2p
# (experiments/bench/run_moe.sh). NPROC ranks (default 2; MPS when they share a GPU).
#
#   [DEEPEP_SOURCE=PATH] tests/gpu/run_moe_all.sh OUT_DIR     (repository root, GPU machine)
#
# Only the merged reports and the benchmark's table land in OUT_DIR: the per-rank files and logs
# stay in a scratch folder (the device tool brings back a limited number of files). Prints each
# run's step lines; exits 1 when any run failed.
set -u
out=${1:-${OUT:-/tmp/aboleth-gpu}}
mkdir -p "$out"
scratch=$(mktemp -d /tmp/aboleth-moe-all-XXXXXX)
status=0
port=${MASTER_PORT:-29900}
for mode in low_latency normal; do
    for transport in p2p proxy; do
        port=$((port + 1))
        run="$scratch/$mode-$transport"
        MOE_MODE=$mode ABOLETH_TRANSPORT=$transport MASTER_PORT=$port tests/gpu/run_moe.sh "$run" \
            > "$run.log" 2>&1 || status=1
        cp "$run"/moe/2*.json "$out"/ 2>/dev/null
        echo "== $mode over $transport"
        grep -E "^rank 0 [a-z_]+:|^report:" "$run.log"
    done
done
if [ -n "${DEEPEP_SOURCE:-}" ]; then
    port=$((port + 1))
    ABOLETH_TRANSPORT=p2p MASTER_PORT=$port experiments/bench/run_moe.sh "$scratch/bench" \
        > "$scratch/bench.log" 2>&1 || status=1
    cp "$scratch"/bench/*-moe-*.json "$scratch"/bench/*-moe-*.md "$out"/ 2>/dev/null
    echo "== benchmark"
    grep -E "^\| (aboleth|deepep|torch|normal|low_latency) |FAILED" "$scratch/bench.log"
fi
echo "scratch (per-rank reports, logs): $scratch"
exit $status
