#!/usr/bin/env bash
# Runs aboleth-runtime-gpu-check on one host, one process per GPU (2 by default), and writes
# each rank's JSON report and log to OUT_DIR. Exit status 0 when every rank passed.
#
#   crates/aboleth-runtime/tests/gpu/run_gpu_check.sh [BINARY] [OUT_DIR]
#
# BINARY defaults to target-carry/aboleth-runtime-gpu-check (built on the CPU machine with
# `cargo build --release -p aboleth-runtime --bin aboleth-runtime-gpu-check` and copied there).
set -u
binary=${1:-target-carry/aboleth-runtime-gpu-check}
out_dir=${2:-${OUT:-/tmp/aboleth-gpu-check}}
world_size=${WORLD_SIZE:-2}
# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29611} WORLD_SIZE=$world_size
# A rank that dies makes the others fail within a minute, not the bootstrap's default 300 s.
export ABOLETH_BOOTSTRAP_TIMEOUT_S=${ABOLETH_BOOTSTRAP_TIMEOUT_S:-60}
mkdir -p "$out_dir"
pids=()
for rank in $(seq 0 $((world_size - 1))); do
    RANK=$rank LOCAL_RANK=$rank timeout 240 "$binary" >"$out_dir/rank$rank.json" 2>"$out_dir/rank$rank.log" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
for rank in $(seq 0 $((world_size - 1))); do
    echo "=== rank $rank log ==="
    tail -n 20 "$out_dir/rank$rank.log"
done
echo "=== exit status $status ==="
exit $status
