# The two commands of the quick start: `make demo` and `make test`. Both set themselves up.
CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)
FUZZ_SECONDS ?= 30

.PHONY: demo test setup lint bless fuzz help

help:
	@echo "make demo   - compile the seed's all-to-all and the 16-chain stream; print the plan and what the passes saved"
	@echo "make test   - everything that runs without a GPU (fmt, clippy, unit, golden, rdma-core cross-check, fuzz)"
	@echo "make bless  - rewrite golden .out files from the current compiler (review the diff!)"

# Debian packages the tests need: rdma-core's mlx5dv.h for the WQE cross-check.
setup:
	@dpkg -s libibverbs-dev >/dev/null 2>&1 || { \
	  echo "installing libibverbs-dev (rdma-core headers for the mlx5 cross-check)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev; }

demo:
	$(CARGO) build --release -q -p aboleth-cli
	@echo "== the seed's tier-2 all-to-all (examples/ir/alltoall.abo) =="
	@./target/release/aboleth plan examples/ir/alltoall.abo
	@echo
	@echo "== 16 put+signal chains to one peer (examples/ir/stream_put_signal_16.abo) =="
	@./target/release/aboleth plan examples/ir/stream_put_signal_16.abo
	@echo
	@echo "Counts are static, per program instance, from the compiler (no GPU, no NIC)."

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: setup lint
	$(CARGO) test --workspace
	ABOLETH_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CARGO) test -p aboleth-ir --test fuzz_parser -- --nocapture

bless:
	ABOLETH_BLESS=1 $(CARGO) test -p aboleth-passes --test filetests

fuzz:
	ABOLETH_FUZZ_SECONDS=600 $(CARGO) test --release -p aboleth-ir --test fuzz_parser -- --nocapture
