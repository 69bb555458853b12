#!/usr/bin/env bash
# Runs every GPU-side check of the Python host API on one host and writes one JSON report.
#
#   tests/gpu/run_all.sh [OUT_DIR]          (from the repository root, on the GPU machine)
#
# Installs the aboleth wheel built on the CPU machine (WHEEL_DIR, default target-carry/wheels;
# `maturin build --release` there; see common.sh), then runs
# tests/gpu/seed_alltoall.py under torchrun, one process per GPU (NPROC, default 2), bounded by
# `timeout` so that a hung kernel costs seconds. Writes OUT_DIR/seed_alltoall-rank*.json, the log,
# and the merged report OUT_DIR/<date>-seed-alltoall-<machine>.json (also copied to
# tests/gpu/results/). Exit status: 0 when every rank passed.
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
# Over rdma with the software NIC, its modes (transport/soft_rdma.rs) name the report too.
soft_nic_modes="${ABOLETH_RDMA_DEVICE:+ABOLETH_RDMA_DEVICE=$ABOLETH_RDMA_DEVICE }${ABOLETH_SOFT_NIC_CQ:+ABOLETH_SOFT_NIC_CQ=$ABOLETH_SOFT_NIC_CQ }${ABOLETH_SOFT_NIC_DOORBELL:+ABOLETH_SOFT_NIC_DOORBELL=$ABOLETH_SOFT_NIC_DOORBELL }"
label=$transport${ABOLETH_SOFT_NIC_CQ:+-$ABOLETH_SOFT_NIC_CQ}${ABOLETH_SOFT_NIC_DOORBELL:+-$ABOLETH_SOFT_NIC_DOORBELL}
command="ABOLETH_TRANSPORT=$transport ${soft_nic_modes}NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/seed_alltoall.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/seed_alltoall.py "$out_dir" 2>&1 | tee "$out_dir/seed_alltoall.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$label STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$out_dir" seed_alltoall seed-alltoall \
    "tests/gpu/seed_alltoall.py: the seed's host example verbatim over $label, 1000 checked rounds, 8 B..4 MiB per peer$mps_note"
exit $status
