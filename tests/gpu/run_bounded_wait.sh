#!/usr/bin/env bash
# Bounded waits on the GPU (tests/gpu/bounded_wait.py), one process per GPU, with a 200 ms bound.
#
#   tests/gpu/run_bounded_wait.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Environment as in common.sh (ABOLETH_TRANSPORT: p2p or proxy). Writes the rank reports, the log
# and <date>-bounded-wait[-proxy]-<machine>.json (also into tests/gpu/results/).
set -u
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-200}
source "$(dirname "$0")/common.sh"
command="ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 120 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/bounded_wait.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 120 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/bounded_wait.py "$out_dir" 2>&1 | tee "$out_dir/bounded_wait.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" bounded_wait bounded-wait \
    "tests/gpu/bounded_wait.py over $transport: a wait nobody answers gives up after the bound and check_waits raises it; four failing waits in a row end after about one bound (abort_requested)"
exit $status
