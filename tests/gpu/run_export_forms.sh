#!/usr/bin/env bash
# The export forms of the seed's tier-2 all-to-all (tests/gpu/export_forms.py) over p2p, NPROC
# ranks (default 2); with fewer GPUs than ranks they share one under CUDA MPS. Needs nvcc and gcc.
#
#   tests/gpu/run_export_forms.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/export-forms/<date>-export-forms-<machine>.json (the merged per-rank reports).
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
run_dir="$out_dir/export-forms"
mkdir -p "$run_dir"
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=$transport timeout 400 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/export_forms.py $run_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 400 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/export_forms.py "$run_dir" 2>&1 | tee "$out_dir/export_forms.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$run_dir" export_forms export-forms \
    "tests/gpu/export_forms.py: the seed's all-to-all exported (aboleth compile --export kernel|fragment|function) and launched through the C launcher, spliced into a host Triton kernel, and called as a device function from a stock Triton kernel; checked bit-exact$mps_note"
exit $status
