# The two commands of the quick start: `make demo` and `make test`. Both set themselves up.
CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)
FUZZ_SECONDS ?= 30

.PHONY: demo test setup python-setup cuda-setup vllm-source rdma-core-source python-test stubs lint bless fuzz bench help
VENV ?= .venv
PYTHON ?= python3

help:
	@echo "make demo   - compile the seed's Triton all-to-all on the CPU, run it on 8 simulated ranks per transport, library-style vs Aboleth"
	@echo "make test   - everything that runs without a GPU (fmt, clippy, unit, golden, rdma-core cross-checks of mlx5, EFA and Ionic, fuzz)"
	@echo "make bless  - rewrite golden .out files, the tier-1 bitcode and the extension's stubs from the current compiler (review the diff!)"
	@echo "make stubs  - regenerate python/aboleth/_aboleth.pyi from crates/aboleth-python"
	@echo "make bench  - how to run the benchmark suites on the GPU machine (experiments/bench)"

# Debian packages the tests need: rdma-core's mlx5dv.h for the WQE cross-check, and clang 16
# (CUDA device compilation to LLVM bitcode) for the check that the packaged tier-1 bitcode is
# what the compiler generates.
setup:
	@dpkg -s libibverbs-dev clang-16 >/dev/null 2>&1 || { \
	  echo "installing libibverbs-dev (rdma-core headers for the mlx5 cross-check) and clang-16 (tier-1 bitcode)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev clang-16; }

SEED_LAUNCH = --kernel alltoall --grid ranks-1 --rank-constexpr RANK --constexpr BYTES=256 \
  --signature endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64 \
  --regions "send=ranks*256 recv=ranks*256 flags=ranks*8" --init "send=random" \
  --bind "endpoints=endpoints recv=regions:recv flags=regions:flags send=local:send send_key=lkey:send my_flags=local:flags epoch=value:epoch"

# The demo runs the `aboleth` command the Python package installs (the same command line as the
# cargo-built binary: every verb, .abo and .py inputs).
ABOLETH = $(VENV)/bin/aboleth

demo: python-setup
	@VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop -q --release
	@echo "== the seed's tier-2 all-to-all: what the passes decide (examples/ir/alltoall.abo) =="
	@$(ABOLETH) plan examples/ir/alltoall.abo
	@echo
	@echo "== the seed's Triton kernel (examples/triton/alltoall.py), compiled by stock Triton 3.6 on this CPU =="
	@echo "== for each rank, run on 8 simulated ranks, 4 launches, 20 random schedules per lowering, checked =="
	@for target in mlx5 proxy p2p efa ionic; do \
	  $(ABOLETH) sim examples/triton/alltoall.py --target $$target \
	    --ranks 8 --rounds 4 --schedules 20 --check $(SEED_LAUNCH) || exit 1; \
	  echo; done
	@echo "== 16 put+signal chains to one peer (examples/ir/stream_put_signal_16.abo), mlx5 =="
	@$(ABOLETH) sim examples/ir/stream_put_signal_16.abo --ranks 2 --rounds 4 --schedules 20 --target mlx5 --check
	@echo
	@echo "== arrival counters with --immediate-signals (examples/ir/count_arrivals.abo), mlx5: each add-1 rides on its put =="
	@$(ABOLETH) sim examples/ir/count_arrivals.abo --ranks 4 --rounds 4 --schedules 20 --target mlx5 --immediate-signals --check
	@echo
	@echo "== the same 16 chains with --packet-signals, p2p: each set travels in its put's data as LL packets =="
	@echo "== (no barrier or flag store per chain; the receiver unpacks, which costs more than it saves for 64-byte chunks) =="
	@$(ABOLETH) sim examples/ir/stream_put_signal_16.abo --ranks 2 --rounds 4 --schedules 20 --target p2p --packet-signals --check
	@echo
	@echo "Everything above ran on the simulator (crates/aboleth-sim): no GPU, no NIC. mlx5, ionic, efa (SRD:"
	@echo "writes land in any order; experimental, no code generation) and proxy are simulated and"
	@echo "cross-checked against rdma-core's layouts, not run on hardware here; simulated"
	@echo "time comes from the documented cost model (crates/aboleth-sim/src/cost_model.rs). The same p2p"
	@echo "and proxy kernels ran on 2 x H200, and the mlx5 ones on one H200 over the software NIC (a host"
	@echo "thread executing the GPU's WQEs, not a NIC): tests/gpu/results/."

# The Python package (aboleth.language, the Triton stage hook, the extension module) in a local
# venv: Triton 3.6.0 compiles for sm_90 on CPU, so these tests need no GPU.
python-setup:
	@[ -x $(VENV)/bin/python ] || { echo "creating $(VENV) (maturin, pytest, triton==3.6.0)"; \
	  $(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q --upgrade pip && \
	  $(VENV)/bin/pip install -q "maturin>=1.9.4,<2" "pytest>=8" "triton==3.6.0"; }

# nvcc for sm_90 from NVIDIA's wheels (CUDA 13.0, the GPU machine's version; about 110 MB), in
# the venv: python/tests/test_device_library.py compiles the tier-1 library and the seed's CUDA
# `exchange` kernel with it (no GPU needed). aboleth.device_library.find_nvcc() finds it there.
# CuTe DSL (about 105 MB) compiles python/tests/test_tier1_cute.py's kernel for sm_90a on the CPU.
CUDA_WHEELS = nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88
CUTE_DSL = nvidia-cutlass-dsl==4.8.1
cuda-setup: python-setup
	@[ -x $(VENV)/lib/python*/site-packages/nvidia/cu13/bin/nvcc ] || { echo "installing nvcc 13.0 into $(VENV) ($(CUDA_WHEELS))"; \
	  $(VENV)/bin/pip install -q $(CUDA_WHEELS); }
	@$(VENV)/bin/python -c "import cutlass.cute" 2>/dev/null || { echo "installing CuTe DSL into $(VENV) ($(CUTE_DSL))"; \
	  $(VENV)/bin/pip install -q $(CUTE_DSL); }

# The source of the vLLM release integrations/vllm/0001-aboleth-all2all-backend.patch is made
# against (47 MB, pinned by SHA-256, into .cache/vllm/): python/tests/test_vllm_integration.py
# applies the patch to it.
vllm-source:
	@$(PYTHON) integrations/vllm/fetch_source.py >/dev/null

# rdma-core's providers/efa (56.1) and providers/ionic (61.0) headers (pinned source releases),
# for the EFA and Ionic encoders' cross-checks.
rdma-core-source:
	@$(PYTHON) crates/aboleth-abi/tests/c/fetch_rdma_core.py >/dev/null

python-test: python-setup cuda-setup vllm-source
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop -q
	$(VENV)/bin/pytest -q python/tests

# The type stubs of aboleth._aboleth, generated from the extension's cdylib by PyO3's
# introspection (crates/aboleth-python/tests/python_stubs.rs, which fails when they are stale).
stubs:
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-python --test python_stubs

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: setup lint rdma-core-source
	$(CARGO) test --workspace
	$(MAKE) python-test
	ABOLETH_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CARGO) test -p aboleth-ir --test fuzz_parser -- --nocapture
	ABOLETH_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CARGO) test -p aboleth-passes --test type_shuffle_fuzz -- --nocapture

bless:
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-passes --test filetests
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-cli --test command_line_goldens
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-codegen --test codegen_goldens
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-codegen --test device_library_goldens
	@for transport in p2p proxy mlx5; do \
	  rm -rf target/bless-bitcode-$$transport && \
	  $(CARGO) run -q -p aboleth-cli -- device-library --target $$transport --out target/bless-bitcode-$$transport \
	    --header-only --bitcode && \
	  cp target/bless-bitcode-$$transport/bitcode/*.bc python/aboleth/frontends/bitcode/$$transport/ || exit 1; done
	$(MAKE) stubs

fuzz:
	ABOLETH_FUZZ_SECONDS=600 $(CARGO) test --release -p aboleth-ir --test fuzz_parser -- --nocapture
	ABOLETH_FUZZ_SECONDS=600 $(CARGO) test --release -p aboleth-passes --test type_shuffle_fuzz -- --nocapture

# The benchmark suites need a GPU; this says how to run them there. Their CPU parts (the kernels
# compiled for sm_90, the scripts) are checked by python/tests/test_bench_suite.py in `make test`.
bench:
	@echo "On the GPU machine, from the repository root, with the wheel built here and carried:"
	@echo "  CARGO_TARGET_DIR=/work/target-release VIRTUAL_ENV=\$$PWD/.venv .venv/bin/maturin build --release -o target-carry/wheels"
	@echo "  NPROC=2 experiments/bench/run.sh OUT_DIR"
	@echo "See experiments/bench/README.md for the suites, the methodology and the latest results."
