#!/usr/bin/env bash
# Warp- and CTA-scope posting on the GPU over the proxy (tests/gpu/doorbell_scope.py), one
# process per GPU, checked bit-exact against thread scope and library style.
#
#   tests/gpu/run_doorbell_scope.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Environment as in common.sh (the transport defaults to proxy here). Writes the rank reports,
# the log and <date>-doorbell-scope-proxy-<machine>.json (also into tests/gpu/results/).
set -u
export ABOLETH_TRANSPORT=${ABOLETH_TRANSPORT:-proxy}
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000}
source "$(dirname "$0")/common.sh"
command="ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/doorbell_scope.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/doorbell_scope.py "$out_dir" 2>&1 | tee "$out_dir/doorbell_scope.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" doorbell_scope doorbell-scope \
    "tests/gpu/doorbell_scope.py: loops of 16 and 64 put+signal chains per peer over $transport, warp/CTA-scope posting against thread scope and passes off, 20 checked rounds each"
exit $status
