#!/usr/bin/env bash
# The mlx5 transport over the software NIC on the GPU (tests/gpu/soft_nic.py), two ranks; with
# fewer GPUs than ranks they share one under CUDA MPS. Once per mode in SOFT_NIC_MODES (default
# all five): mlx5 with the CQ collapsed or a ring and the doorbell rung by the GPU or by the host
# (the staged path), and `ionic` (the experimental Ionic transport's generated code on the
# software NIC's Ionic queue pairs).
#
#   tests/gpu/run_soft_nic.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes the rank reports, the logs and <date>-soft-nic-<mode>-<machine>.json per mode (also
# into tests/gpu/results/).
set -u
export ABOLETH_RDMA_DEVICE=soft
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-2000}
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
overall=0
for mode in ${SOFT_NIC_MODES:-collapsed/gpu ring/gpu collapsed/host ring/host ionic}; do
    if [ "$mode" = ionic ]; then
        export ABOLETH_TRANSPORT=ionic ABOLETH_SOFT_NIC_CQ=collapsed ABOLETH_SOFT_NIC_DOORBELL=gpu
        name=ionic
        description="tests/gpu/soft_nic.py over the experimental Ionic transport's generated code and the software NIC's Ionic queue pairs (firmware ABI 2, 1024-entry send queues and CQs): 16-chain streams with passes on and off (static counts and the NIC's doorbell and WQE counters, checked bit-exact), then a rank's NIC stopped and the bounded waits that report it (no write-with-immediate step: Ionic has no such signals)"
    else
        export ABOLETH_TRANSPORT=rdma ABOLETH_SOFT_NIC_CQ=${mode%/*} ABOLETH_SOFT_NIC_DOORBELL=${mode#*/}
        name=rdma-$ABOLETH_SOFT_NIC_CQ-$ABOLETH_SOFT_NIC_DOORBELL
        description="tests/gpu/soft_nic.py over mlx5 and the software NIC, CQ $ABOLETH_SOFT_NIC_CQ, doorbell rung by the $ABOLETH_SOFT_NIC_DOORBELL: 16-chain streams with passes on and off (static counts and the NIC's doorbell and WQE counters, checked bit-exact), write-with-immediate signals, then a rank's NIC stopped and the bounded waits that report it"
    fi
    run_dir="$out_dir/soft-nic-$name"
    mkdir -p "$run_dir"
    command="ABOLETH_TRANSPORT=$ABOLETH_TRANSPORT ABOLETH_RDMA_DEVICE=soft ABOLETH_SOFT_NIC_CQ=$ABOLETH_SOFT_NIC_CQ ABOLETH_SOFT_NIC_DOORBELL=$ABOLETH_SOFT_NIC_DOORBELL ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 200 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/soft_nic.py $run_dir"
    echo "+ $command"
    started=$(date +%s.%N)
    timeout 200 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
        tests/gpu/soft_nic.py "$run_dir" 2>&1 | tee "$out_dir/soft_nic-$name.log"
    status=${PIPESTATUS[0]}
    finished=$(date +%s.%N)
    TRANSPORT=$name STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
        python3 tests/gpu/merge_reports.py "$run_dir" soft_nic soft-nic "$description$mps_note"
    [ "$status" = 0 ] || overall=1
    port=$((port + 1))
done
exit $overall
