#!/usr/bin/env bash
# vLLM's prepare/finalize contract for the aboleth backends (tests/gpu/vllm_contract.py), NPROC
# ranks (default 2; MPS when they share a GPU), with vLLM's Python and its missing dependencies
# from target-carry/vllm/ (tests/gpu/prepare_vllm_carry.sh made it on the CPU machine).
#
#   tests/gpu/run_vllm_contract.sh [OUT_DIR]      (repository root, GPU machine)
#
# Writes OUT_DIR/vllm/<date>-vllm-contract-<machine>.json (the merged per-rank reports).
set -u
source "$(dirname "$0")/common.sh"
start_mps_if_ranks_share_gpus
carry=${VLLM_CARRY:-target-carry/vllm}
vllm_site=/tmp/vllm-site vllm_source=/tmp/vllm-source
[ -f "$carry/vllm-src.tgz" ] || { echo "no $carry/vllm-src.tgz: run tests/gpu/prepare_vllm_carry.sh on the CPU machine"; exit 2; }
rm -rf "$vllm_source" && mkdir -p "$vllm_source" && tar -xzf "$carry/vllm-src.tgz" -C "$vllm_source"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$vllm_site" \
    "$carry"/wheels/*.whl || { echo "cannot install the wheels of $carry/wheels"; exit 2; }
export PYTHONPATH="$PYTHONPATH:$vllm_site:$vllm_source"
# The fault_tolerance step's wait for the rank that skips gives up after this bound.
export ABOLETH_WAIT_TIMEOUT_MS=${ABOLETH_WAIT_TIMEOUT_MS:-10000}
run_dir="$out_dir/vllm"
mkdir -p "$run_dir"
command="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=$transport ABOLETH_WAIT_TIMEOUT_MS=$ABOLETH_WAIT_TIMEOUT_MS timeout 400 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/vllm_contract.py $run_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 400 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/vllm_contract.py "$run_dir" 2>&1 | tee "$out_dir/vllm-contract.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
    python3 tests/gpu/merge_reports.py "$run_dir" vllm-contract vllm-contract "tests/gpu/vllm_contract.py: vLLM 0.33.0's prepare/finalize contract for the aboleth backends (its Python, patched; its compiled kernels not loadable under torch 2.11) against a one-process MoE layer, Standard and BatchedExperts formats, the manager fault-tolerance hooks$mps_note"
exit $status
