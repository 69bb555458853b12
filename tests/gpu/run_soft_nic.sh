#!/usr/bin/env bash
# The mlx5 transport over the software NIC on the GPU (tests/gpu/soft_nic.py), two ranks; with
# fewer GPUs than ranks they share one under CUDA MPS.
#
#   tests/gpu/run_soft_nic.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes the rank reports, the log and <date>-soft-nic-rdma-<machine>.json (also into
# tests/gpu/results/).
set -u
export ABOLETH_TRANSPORT=rdma ABOLETH_RDMA_DEVICE=soft
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-2000}
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
command="ABOLETH_TRANSPORT=rdma ABOLETH_RDMA_DEVICE=soft ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 200 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/soft_nic.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 200 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/soft_nic.py "$out_dir" 2>&1 | tee "$out_dir/soft_nic.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=rdma STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" soft_nic soft-nic \
    "tests/gpu/soft_nic.py: mlx5 over the software NIC: 16-chain streams with passes on and off (static counts and the NIC's doorbell and WQE counters, checked bit-exact), then a rank's NIC stopped and the bounded waits that report it$mps_note"
exit $status
