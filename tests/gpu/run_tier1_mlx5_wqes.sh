#!/usr/bin/env bash
# The mlx5 tier-1 library's posting on one GPU, decoded (tests/gpu/tier1_mlx5_wqes.py): one
# process, no NIC, no MPS. Needs nvcc on the machine.
#
#   tests/gpu/run_tier1_mlx5_wqes.sh [OUT_DIR]    (from the repository root, on the GPU machine)
#
# Writes OUT_DIR/tier1_mlx5_wqes.json and its log.
set -u
NPROC=1
source "$(dirname "$0")/common.sh"
echo "+ MACHINE=$machine python3 tests/gpu/tier1_mlx5_wqes.py $out_dir"
MACHINE=$machine timeout 300 python3 tests/gpu/tier1_mlx5_wqes.py "$out_dir" 2>&1 | tee "$out_dir/tier1_mlx5_wqes.log"
exit "${PIPESTATUS[0]}"
