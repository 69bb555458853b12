#!/usr/bin/env bash
# Runs the benchmark suites on whatever this machine has (experiments/bench/README.md):
#
#   experiments/bench/run.sh OUT_DIR        (from the repository root, on the GPU machine)
#
# NPROC ranks (default 2); with fewer GPUs than ranks they share the GPUs under CUDA MPS
# (started here, stopped at the end; the machine name then says "mps": not NVLink). Builds the
# baselines with nvcc into OUT_DIR/build, installs the aboleth wheel (WHEEL_DIR, as tests/gpu),
# runs the Aboleth rows over p2p and proxy and the baselines, then merges everything into
# OUT_DIR/<date>-bench-<machine>.{json,md,png} (also copied to experiments/bench/results/).
# With 2 ranks it also runs the pass-ablation suite (ablation.py) over the proxy and p2p; the
# per-launch suite (per_launch.py) runs over each transport, NCCL's rows with the first.
# BENCH_SIZES narrows the sizes; BENCH_ABLATE=1 adds each planning pass disabled in turn;
# BENCH_SUITES (comma-separated, default alltoall,tier1,per-launch,ablation,baselines) picks suites;
# tier1 builds the device library per transport (the wheel's `aboleth device-library`) and
# tier1_alltoall.cu against its archive, then runs tier1.py.
set -u
source "$(dirname "$0")/../../tests/gpu/common.sh"
start_mps_if_ranks_share_gpus
here=experiments/bench
build=$out_dir/build
mkdir -p "$build"
status=0
suites=" $(echo "${BENCH_SUITES:-alltoall,tier1,per-launch,ablation,baselines}" | tr ',' ' ') "
wants() { case "$suites" in *" $1 "*) return 0 ;; esac; return 1; }
for suite in $suites; do
    case "$suite" in alltoall | tier1 | per-launch | ablation | baselines) ;;
        *) echo "BENCH_SUITES: unknown suite '$suite' (alltoall, tier1, per-launch, ablation, baselines)"; exit 2 ;;
    esac
done
# The hand-written and NVSHMEM baselines, built with nvcc into $build.
build_baselines() {
    echo "building the baselines with $(nvcc --version | tail -1)"
    nvcc -O3 -arch=sm_90 -Xcompiler -fPIC -shared -o "$build/libhandwritten.so" $here/handwritten.cu \
        2>&1 | tee "$build/handwritten.log" || status=1
    nvshmem_home=$(python3 -c 'import nvidia.nvshmem; print(list(nvidia.nvshmem.__path__)[0])' 2>/dev/null)
    if [ -n "$nvshmem_home" ] && [ -d "$nvshmem_home/include" ]; then
        export LD_LIBRARY_PATH="$nvshmem_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        host_library=$(basename "$(ls "$nvshmem_home"/lib/libnvshmem_host.so* | head -1)")
        nvcc -O3 -arch=sm_90 -rdc=true -Xcompiler -fPIC -shared -I"$nvshmem_home/include" \
            -o "$build/libnvshmem_alltoall.so" $here/nvshmem_alltoall.cu "$nvshmem_home/lib/libnvshmem_device.a" \
            -L"$nvshmem_home/lib" -l:"$host_library" 2>&1 | tee "$build/nvshmem.log" || status=1
    else
        echo "NVSHMEM not found (nvidia-nvshmem-cu13): its rows are not run"
    fi
}
if wants baselines; then build_baselines; fi
run_ranks() {
    echo "+ $launcher --nproc-per-node $nproc $*"
    timeout 540 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" "$@" || status=1
    port=$((port + 1))
}
if wants alltoall; then
    for transport in ${BENCH_TRANSPORTS:-p2p proxy}; do
        run_ranks $here/tier2.py "$out_dir" --transport "$transport"
    done
fi
if wants tier1; then
    for transport in ${BENCH_TRANSPORTS:-p2p proxy}; do
        library=$build/tier1-$transport
        python3 -m aboleth device-library --target "$transport" --out "$library" --nvcc "$(command -v nvcc)" \
            2>&1 | tee "$build/tier1-$transport.log" || status=1
        nvcc -O3 -arch=sm_90 -std=c++17 -rdc=true -Xcompiler -fPIC -shared -DABOLETH_DEVICE_EXTERN \
            -I"$library/include" -o "$build/libtier1_$transport.so" $here/tier1_alltoall.cu \
            "$library/libaboleth_device.a" 2>&1 | tee -a "$build/tier1-$transport.log" || status=1
        run_ranks $here/tier1.py "$out_dir" "$build" --transport "$transport"
    done
fi
if wants per-launch; then
    nccl_option=--nccl  # NCCL's rows once, with the first transport (not_run where it cannot run)
    for transport in ${BENCH_TRANSPORTS:-p2p proxy}; do
        run_ranks $here/per_launch.py "$out_dir" --transport "$transport" $nccl_option
        nccl_option=
    done
fi
if [ "$nproc" = 2 ] && wants ablation; then
    # rdma: mlx5 over the software NIC (the GPU's posting is real, the NIC is a host thread).
    export ABOLETH_RDMA_DEVICE=soft
    for transport in ${BENCH_ABLATION_TRANSPORTS:-proxy p2p rdma}; do
        run_ranks $here/ablation.py "$out_dir" --transport "$transport"
    done
fi
if wants baselines; then
    run_ranks $here/baselines.py "$out_dir" "$build" --systems "${BENCH_BASELINES:-handwritten,flag,nvshmem}"
fi
knobs=""
for knob in BENCH_SUITES BENCH_SIZES BENCH_TRANSPORTS BENCH_BASELINES BENCH_ABLATE BENCH_ABLATION_TRANSPORTS; do
    [ -n "${!knob:-}" ] && knobs="$knobs$knob=${!knob} "
done
export MACHINE=$machine COMMAND="${BENCH_COMMAND:-${knobs}NPROC=$nproc experiments/bench/run.sh OUT_DIR}$mps_note"
python3 $here/report.py "$out_dir" || status=1
exit $status
