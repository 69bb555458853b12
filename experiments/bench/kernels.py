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
