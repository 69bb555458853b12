"""Kernels with a mistake in them, for the tests of the diagnostics (test_cli.py): each error must
be told at its line of this file. Line numbers matter: append, do not insert."""

import triton
import triton.language as tl
import aboleth.language as aboleth


@triton.jit
def negative_bytes(endpoints, recv, flags, send, send_key, my_flags, epoch, RANK: tl.constexpr):
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep, dst, flag = aboleth.endpoint(endpoints, peer), aboleth.remote(recv, peer), aboleth.remote(flags, peer, tl.int64)
    t = aboleth.put(ep, dst.at(RANK * 256), send.to(tl.pointer_type(tl.int8)), -5, source_key=send_key)
    s = aboleth.signal(ep, flag.at(RANK), epoch, after=t)
    aboleth.wait_signal(my_flags + peer, epoch)
    aboleth.wait(s)
