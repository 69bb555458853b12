"""The seed's tier-2 all-to-all kernel, verbatim (shared/seed/aboleth-overview.txt, condensed
from experiments/bench/tier2.py). The seed text lost its indentation; the statements, names and
comments below are the seed's, one per line, indented as Python requires. `make demo` compiles
it with stock Triton 3.6 on the CPU for each simulated rank and runs it (`aboleth sim`); the tests
(python/tests, tests/gpu) load this file."""

import triton
import triton.language as tl
import aboleth.language as aboleth


@triton.jit
def alltoall(endpoints, recv, flags, send, send_key, my_flags, epoch,
             BYTES: tl.constexpr, RANK: tl.constexpr):
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)  # one program per peer
    ep = aboleth.endpoint(endpoints, peer)  # this program owns it
    dst = aboleth.remote(recv, peer)
    flag = aboleth.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8)) + peer * BYTES
    t = aboleth.put(ep, dst.at(RANK * BYTES), src, BYTES, source_key=send_key)
    s = aboleth.signal(ep, flag.at(RANK), epoch, after=t)
    aboleth.wait_signal(my_flags + peer, epoch)  # the peer's slice arrived
    aboleth.wait(s)  # our send buffer is free
