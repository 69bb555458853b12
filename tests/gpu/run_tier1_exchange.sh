#!/usr/bin/env bash
# The seed's tier-1 example (tests/gpu/tier1_exchange.py) over p2p and then the proxy (or
# TIER1_TRANSPORTS, e.g. rdma with ABOLETH_RDMA_DEVICE=soft: mlx5 on the software NIC), NPROC ranks
# (default 2); with fewer GPUs than ranks they share one under CUDA MPS. Needs nvcc on the machine.
#
#   tests/gpu/run_tier1_exchange.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/tier1_exchange-{p2p,proxy}.json (merged per-rank reports) and the logs.
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
# The bounded-wait step waits this long for a signal that never comes.
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-3000}
overall=0
for transport in ${TIER1_TRANSPORTS:-p2p proxy}; do
    export ABOLETH_TRANSPORT=$transport
    run_dir="$out_dir/tier1-$transport"
    mkdir -p "$run_dir"
    # rdma runs over the software NIC (ABOLETH_RDMA_DEVICE=soft), whose modes name the report.
    soft_nic_modes="${ABOLETH_RDMA_DEVICE:+ABOLETH_RDMA_DEVICE=$ABOLETH_RDMA_DEVICE }${ABOLETH_SOFT_NIC_CQ:+ABOLETH_SOFT_NIC_CQ=$ABOLETH_SOFT_NIC_CQ }${ABOLETH_SOFT_NIC_DOORBELL:+ABOLETH_SOFT_NIC_DOORBELL=$ABOLETH_SOFT_NIC_DOORBELL }"
    label=$transport
    [ "$transport" = rdma ] && label=$transport${ABOLETH_SOFT_NIC_CQ:+-$ABOLETH_SOFT_NIC_CQ}${ABOLETH_SOFT_NIC_DOORBELL:+-$ABOLETH_SOFT_NIC_DOORBELL}
    command="${soft_nic_modes}NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS timeout 400 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/tier1_exchange.py $run_dir"
    echo "+ $command"
    started=$(date +%s.%N)
    timeout 400 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
        tests/gpu/tier1_exchange.py "$run_dir" 2>&1 | tee "$out_dir/tier1_exchange-$transport.log"
    status=${PIPESTATUS[0]}
    finished=$(date +%s.%N)
    TRANSPORT=$label STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
        python3 tests/gpu/merge_reports.py "$run_dir" tier1_exchange tier1-exchange \
        "tests/gpu/tier1_exchange.py: the seed's tier-1 exchange kernel, verbatim, against world.device_library() ($label), header only and linked with libaboleth_device.a; warp and block variants; rounds inside one launch timed; a bounded wait reported$mps_note"
    [ "$status" = 0 ] || overall=1
    port=$((port + 1))
done
exit $overall
