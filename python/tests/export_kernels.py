"""Kernels for test_export.py and tests/gpu/export_forms.py: a host kernel with a stub where the
seed's all-to-all fragment is spliced, and a Triton kernel that calls the all-to-all exported as
a device function (through extern_libs)."""

import triton
import triton.language as tl
from triton.language import core


@triton.jit(noinline=True)
def communication(endpoints, recv, flags, send, send_key, my_flags, epoch):
    """The stub the fragment replaces (aboleth.export.splice_fragment(..., "communication"))."""
    pass


@triton.jit
def scale_then_exchange(x, y, n, endpoints, recv, flags, send, send_key, my_flags, epoch, BLOCK: tl.constexpr):
    """Compute (y = 2 x), then the communication spliced in."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y + offsets, tl.load(x + offsets, mask=mask) * 2, mask=mask)
    communication(endpoints, recv, flags, send, send_key, my_flags, epoch)


HOST_SIGNATURE = {"x": "*fp32", "y": "*fp32", "n": "i32", "endpoints": "*i64", "recv": "*i64", "flags": "*i64",
                  "send": "i64", "send_key": "i32", "my_flags": "*i64", "epoch": "i64", "BLOCK": "constexpr"}

#: Where the device function's LLVM IR is; set before compiling ``call_alltoall_function``.
FUNCTION_PATH = {"path": ""}


@core.extern
def alltoall_function(endpoints, recv, flags, send, send_key, my_flags, epoch, _semantic=None):
    """The exported ``int alltoall_function(...)``: pointers as 64-bit addresses."""
    return core.extern_elementwise(
        "alltoall_function", FUNCTION_PATH["path"], [endpoints, recv, flags, send, send_key, my_flags, epoch],
        {(core.int64, core.int64, core.int64, core.int64, core.int32, core.int64, core.int64):
         ("alltoall_function", core.int32)}, is_pure=False, _semantic=_semantic)


@triton.jit
def call_alltoall_function(endpoints, recv, flags, send, send_key, my_flags, epoch):
    # Scalars cast to the function's types: Triton specializes small integers to i32 or constants.
    alltoall_function(endpoints.to(tl.int64, bitcast=True), recv.to(tl.int64, bitcast=True),
                      flags.to(tl.int64, bitcast=True), tl.cast(send, tl.int64), tl.cast(send_key, tl.int32),
                      my_flags.to(tl.int64, bitcast=True), tl.cast(epoch, tl.int64))


FUNCTION_CALLER_SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
                             "my_flags": "*i64", "epoch": "i64"}

#: The seed's all-to-all, exported (examples/triton/alltoall.py): its signature and constexprs.
SEED_SIGNATURE = "endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64"
