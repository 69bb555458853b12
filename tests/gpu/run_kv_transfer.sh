#!/usr/bin/env bash
# aboleth.kv.Transfer on the GPU (tests/gpu/kv_transfer.py), two ranks; with fewer GPUs than
# ranks they share one under CUDA MPS. Once per transport in KV_TRANSPORTS (default p2p, proxy
# and rdma over the software NIC).
#
#   tests/gpu/run_kv_transfer.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes the rank reports, the logs and <date>-kv-transfer[-<transport>]-<machine>.json per
# transport (also into tests/gpu/results/).
set -u
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-2000}
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
overall=0
for kind in ${KV_TRANSPORTS:-p2p proxy rdma}; do
    export ABOLETH_TRANSPORT=$kind
    soft=""
    if [ "$kind" = rdma ]; then export ABOLETH_RDMA_DEVICE=soft; soft="ABOLETH_RDMA_DEVICE=soft "; else unset ABOLETH_RDMA_DEVICE; fi
    run_dir="$out_dir/kv-transfer-$kind"
    mkdir -p "$run_dir"
    command="ABOLETH_TRANSPORT=$kind ${soft}ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/kv_transfer.py $run_dir"
    echo "+ $command"
    started=$(date +%s.%N)
    timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
        tests/gpu/kv_transfer.py "$run_dir" 2>&1 | tee "$out_dir/kv_transfer-$kind.log"
    status=${PIPESTATUS[0]}
    finished=$(date +%s.%N)
    TRANSPORT=$kind STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
        python3 tests/gpu/merge_reports.py "$run_dir" kv_transfer kv-transfer \
        "tests/gpu/kv_transfer.py over $kind: aboleth.kv.Transfer moving 4 layers of [2, blocks, 16, 8, 128] bf16 KV-cache blocks between two ranks, bit-exact over every block of both caches: random tables, contiguous runs, overlapping requests both ways, several launches per layer, waits launched before the send, bad tables refused, and a layer never sent reported by name$mps_note"
    [ "$status" = 0 ] || overall=1
    port=$((port + 1))
done
exit $overall
