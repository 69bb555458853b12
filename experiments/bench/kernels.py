"""The Triton kernels of the benchmark suites, apart from the suites so that they load without
torch (the command line compiles them on the CPU: `make bench-check`, and CI, keep them compiling
for sm_90).

- ``alltoall_rounds``: the seed's tier-2 all-to-all (examples/triton/alltoall.py), its round
  repeated ROUNDS times inside one launch with epochs first_epoch .. first_epoch + ROUNDS - 1
  (``first_epoch`` is not specialized, so every launch of one size runs one binary)."""

import triton
import triton.language as tl

import aboleth.language as ab


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
