"""The Triton kernels of the benchmark suites, apart from the suites so that they load without
torch (the command line compiles them on the CPU: `make bench-check`, and CI, keep them compiling
for sm_90).

- ``alltoall_rounds``: the seed's tier-2 all-to-all (examples/triton/alltoall.py), its round
  repeated ROUNDS times inside one launch with epochs first_epoch .. first_epoch + ROUNDS - 1
  (``first_epoch`` is not specialized, so every launch of one size runs one binary).
- ``alltoall``: the seed's kernel itself, one round per launch, loaded from
  examples/triton/alltoall.py (the one copy of the seed's text), for the per-launch suite.
- ``plain_alltoall``: the seed's signature and launch grid with no aboleth calls, the per-launch
  suite's baseline (what a Triton launch from Python costs anyway).
- ``stream_chains``: the pass-ablation suite's put+signal chains."""

import importlib.util
import pathlib

import triton
import triton.language as tl

import aboleth.language as ab

_SEED_PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "triton" / "alltoall.py"
_SEED_SPEC = importlib.util.spec_from_file_location("aboleth_examples_triton_alltoall", _SEED_PATH)
assert _SEED_SPEC is not None and _SEED_SPEC.loader is not None, f"cannot load the seed's kernel from {_SEED_PATH}"
_SEED_MODULE = importlib.util.module_from_spec(_SEED_SPEC)
_SEED_SPEC.loader.exec_module(_SEED_MODULE)

#: The seed's kernel, verbatim (``@triton.jit`` without ``do_not_specialize``: Triton specializes
#: ``epoch`` when it is 1 or a multiple of 16, so a run of launches with increasing epochs uses two
#: binaries; the per-launch suite warms both up, and ``plain_alltoall`` specializes the same way).
alltoall = _SEED_MODULE.alltoall


@triton.jit
def plain_alltoall(endpoints, recv, flags, send, send_key, my_flags, epoch, BYTES: tl.constexpr, RANK: tl.constexpr):
    """The seed's signature, no communication (tests/gpu/config_recompile.py's ``plain``): program
    0 stores ``epoch`` into this rank's own flag, which the per-launch suite checks."""
    if tl.program_id(0) == 0:
        tl.store(my_flags + RANK, epoch)


@triton.jit(do_not_specialize=["first_epoch"])
def alltoall_rounds(endpoints, recv, flags, send, send_key, my_flags, first_epoch,
                    BYTES: tl.constexpr, RANK: tl.constexpr, ROUNDS: tl.constexpr):
    """The seed's all-to-all (examples/triton/alltoall.py), its round repeated ROUNDS times with
    epochs first_epoch .. first_epoch + ROUNDS - 1."""
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)  # one program per peer
    ep = ab.endpoint(endpoints, peer)  # this program owns it
    dst = ab.remote(recv, peer)
    flag = ab.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8)) + peer * BYTES
    for round_index in range(ROUNDS):
        epoch = first_epoch + round_index
        t = ab.put(ep, dst.at(RANK * BYTES), src, BYTES, source_key=send_key)
        s = ab.signal(ep, flag.at(RANK), epoch, after=t)
        ab.wait_signal(my_flags + peer, epoch)  # the peer's slice arrived
        ab.wait(s)  # our send buffer is free


@triton.jit
def _clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["epoch"])
def stream_chains(endpoints, recv, flags, send, send_key, my_flags, epoch, posting_cycles,
                  BYTES: tl.constexpr, RANK: tl.constexpr, CHAINS: tl.constexpr):
    """CHAINS put+signal chains from this rank to the other of two, each to its own slice and
    flag, then the waits for the other rank's CHAINS flags and for the last signal's completion.
    ``posting_cycles[pid]`` receives the SM clock cycles the posting loop took (clock64 around
    it): the GPU posting time the pass-ablation suite reports."""
    pid = tl.program_id(0)
    peer = 1 - RANK
    ep = ab.endpoint(endpoints, peer)
    dst = ab.remote(recv, peer)
    flag = ab.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    start = _clock()
    for chain in range(CHAINS):
        t = ab.put(ep, dst.at((RANK * CHAINS + chain) * BYTES), src + chain * BYTES, BYTES, source_key=send_key)
        ab.signal(ep, flag.at(RANK * CHAINS + chain), epoch, after=t)
    end = _clock()
    tl.store(posting_cycles + pid, end - start)
    for chain in range(CHAINS):
        ab.wait_signal(my_flags + peer * CHAINS + chain, epoch)
