#!/usr/bin/env bash
# Flag-in-data (LL packet) signals on the GPU over NVLink (tests/gpu/packet_signals.py), one
# process per GPU, checked bit-exact against release-store signals and library style.
#
#   tests/gpu/run_packet_signals.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Environment as in common.sh (p2p). Writes the rank reports,
# the log and <date>-packet-signals-<machine>.json (also into tests/gpu/results/).
set -u
export ABOLETH_TRANSPORT=${ABOLETH_TRANSPORT:-p2p}
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000}
source "$(dirname "$0")/common.sh"
command="ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/packet_signals.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/packet_signals.py "$out_dir" 2>&1 | tee "$out_dir/packet_signals.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" packet_signals packet-signals \
    "tests/gpu/packet_signals.py: loops of 1, 16 and 64 put+signal chains per peer over $transport, packet signals against release stores and passes off, 20 checked rounds each, and a flag region without packet slots"
exit $status
