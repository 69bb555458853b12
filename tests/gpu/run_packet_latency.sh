#!/usr/bin/env bash
# Round-trip latency of packet signals over NVLink (tests/gpu/packet_latency.py), a ping-pong
# between 2 GPUs inside one kernel, against release-store signals and library style.
#
#   tests/gpu/run_packet_latency.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Environment as in common.sh (p2p). Writes the rank reports,
# the log and <date>-packet-latency-<machine>.json (also into tests/gpu/results/).
set -u
export ABOLETH_TRANSPORT=${ABOLETH_TRANSPORT:-p2p}
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-5000}
source "$(dirname "$0")/common.sh"
command="ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/packet_latency.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/packet_latency.py "$out_dir" 2>&1 | tee "$out_dir/packet_latency.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" packet_latency packet-latency \
    "tests/gpu/packet_latency.py: ping-pong of 2000 put+signal round trips in one kernel over $transport, 8/64/512 B, packet signals against release stores and passes off, every byte and flag checked"
exit $status
