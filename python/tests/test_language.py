"""aboleth.language: what the builtins emit (the contract table of docs/TRITON_BRIDGE.md), how
handles travel through control flow and helpers, and every trace-time misuse error.

The kernels are traced and compiled to the `ttir` stage only (a capturing hook stops there):
aboleth's stage is not installed, so these tests do not depend on the Rust lowering."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional

import pytest
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError

import aboleth.language as aboleth
import seed_kernels
from helpers import StopCompilation, aboleth_calls, capture_stage_output, compile_kernel

SEED_SIGNATURE = {
    "endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
    "my_flags": "*i64", "epoch": "i64", "BYTES": "constexpr", "RANK": "constexpr"
}
SEED_CONSTEXPRS = {"BYTES": 256, "RANK": 1}


def trace_to_ttir(kernel: Any, signature: Dict[str, str], constexprs: Optional[Dict[str, Any]] = None) -> str:
    """The TTIR text after Triton's ttir passes (what the aboleth stage would receive)."""
    captured: Dict[str, Any] = {}
    capture_stage_output("ttir", captured, stop=True)
    with pytest.raises(StopCompilation):
        compile_kernel(kernel, signature, constexprs)
    return captured["ttir"]


def symbols_and_types(ttir: str) -> List[tuple]:
    return [(call["symbol"], call["types"], call["result"]) for call in aboleth_calls(ttir)]


# ---------------------------------------------------------------------------------------------
# The seed's kernel
# ---------------------------------------------------------------------------------------------


def test_the_seed_alltoall_kernel_traces_to_the_contract_extern_calls():
    ttir = trace_to_ttir(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    assert symbols_and_types(ttir) == [
        ("__aboleth_v1__endpoint", "!tt.ptr<i64>, i32", "i64"),
        ("__aboleth_v1__remote__e1", "!tt.ptr<i64>, i32", "i64"),
        ("__aboleth_v1__remote__e8", "!tt.ptr<i64>, i32", "i64"),
        ("__aboleth_v1__at__e1", "i64, i32", "i64"),
        ("__aboleth_v1__put", "i64, i64, !tt.ptr<i8>, i32, i32", "i64"),
        ("__aboleth_v1__at__e8", "i64, i32", "i64"),
        ("__aboleth_v1__signal_after__set", "i64, i64, i64, i64", "i64"),
        ("__aboleth_v1__wait_signal", "!tt.ptr<i64>, i64", "i32"),
        ("__aboleth_v1__wait", "i64", "i32"),
    ]
    # Data flow: the put uses the endpoint and the at() result; the signal waits for the put's
    # token; wait() takes the signal's token.
    results = {}
    for line in ttir.splitlines():
        if "libname = \"aboleth\"" in line:
            name, rest = line.strip().split(" = ", 1)
            symbol = rest.split('symbol = "', 1)[1].split('"', 1)[0]
            operands = rest.split("{", 1)[0].removeprefix("tt.extern_elementwise").strip()
            results[symbol] = (name, [operand.strip() for operand in operands.split(",")])
    endpoint_name = results["__aboleth_v1__endpoint"][0]
    put_name, put_operands = results["__aboleth_v1__put"]
    assert put_operands[0] == endpoint_name
    assert put_operands[1] == results["__aboleth_v1__at__e1"][0]
    assert put_operands[4] == "%send_key"
    signal_operands = results["__aboleth_v1__signal_after__set"][1]
    assert signal_operands[0] == endpoint_name
    assert signal_operands[1] == results["__aboleth_v1__at__e8"][0]
    assert signal_operands[2] == "%epoch"
    assert signal_operands[3] == put_name
    assert results["__aboleth_v1__wait"][1] == [results["__aboleth_v1__signal_after__set"][0]]


def test_the_seed_kernel_file_is_the_seed_text():
    """Guards the verbatim copy: every kernel statement of the seed, in order."""
    source = inspect.getsource(seed_kernels.alltoall.fn)
    statements = [line.strip() for line in source.splitlines()[1:]]
    assert statements == [
        "def alltoall(endpoints, recv, flags, send, send_key, my_flags, epoch,",
        "BYTES: tl.constexpr, RANK: tl.constexpr):",
        "pid = tl.program_id(0)",
        "peer = pid + (pid >= RANK).to(tl.int32)  # one program per peer",
        "ep = aboleth.endpoint(endpoints, peer)  # this program owns it",
        "dst = aboleth.remote(recv, peer)",
        "flag = aboleth.remote(flags, peer, tl.int64)",
        "src = send.to(tl.pointer_type(tl.int8)) + peer * BYTES",
        "t = aboleth.put(ep, dst.at(RANK * BYTES), src, BYTES, source_key=send_key)",
        "s = aboleth.signal(ep, flag.at(RANK), epoch, after=t)",
        "aboleth.wait_signal(my_flags + peer, epoch)  # the peer's slice arrived",
        "aboleth.wait(s)  # our send buffer is free",
    ]


# ---------------------------------------------------------------------------------------------
# The rest of the contract table
# ---------------------------------------------------------------------------------------------


@triton.jit
def every_other_builtin(endpoints, regions, src, flag_pointer, n, key, value):
    peer = tl.program_id(0)
    ep = aboleth.endpoint(endpoints, peer.to(tl.int64))
    region = aboleth.remote(regions, peer, tl.int64)
    bytes_region = aboleth.remote(regions, peer, dtype=tl.float16)
    t1 = aboleth.put(ep, bytes_region.at(n.to(tl.int64)), src, n, source_key=key, predicate=peer > 0)
    t2 = aboleth.put(ep, bytes_region.at(0), src, 64, source_key=0, predicate=peer)
    aboleth.signal(ep, region.at(1), value)
    aboleth.signal(ep, region.at(2), 1, op="add")
    t3 = aboleth.signal(ep, region.at(3), value, op="add", after=t1)
    aboleth.wait(t2)
    aboleth.wait(t3)
    aboleth.wait_signal(flag_pointer, 7)
    aboleth.wait_signal(flag_pointer, value, comparison="ne")
    aboleth.drain(ep)
    aboleth.quiet(ep)
    aboleth.fence(ep)


def test_every_other_builtin_emits_its_symbol_and_operand_types():
    ttir = trace_to_ttir(every_other_builtin, {
        "endpoints": "*i64", "regions": "*u64", "src": "*fp32", "flag_pointer": "*i64", "n": "i32", "key": "i32",
        "value": "i64"
    })
    assert symbols_and_types(ttir) == [
        ("__aboleth_v1__endpoint", "!tt.ptr<i64>, i64", "i64"),
        ("__aboleth_v1__remote__e8", "!tt.ptr<i64>, i32", "i64"),
        ("__aboleth_v1__remote__e2", "!tt.ptr<i64>, i32", "i64"),
        ("__aboleth_v1__at__e2", "i64, i64", "i64"),
        ("__aboleth_v1__put_if", "i64, i64, !tt.ptr<f32>, i32, i32, i1", "i64"),
        ("__aboleth_v1__at__e2", "i64, i32", "i64"),
        ("__aboleth_v1__put_if", "i64, i64, !tt.ptr<f32>, i32, i32, i32", "i64"),
        ("__aboleth_v1__at__e8", "i64, i32", "i64"),
        ("__aboleth_v1__signal__set", "i64, i64, i64", "i64"),
        ("__aboleth_v1__at__e8", "i64, i32", "i64"),
        ("__aboleth_v1__signal__add", "i64, i64, i32", "i64"),
        ("__aboleth_v1__at__e8", "i64, i32", "i64"),
        ("__aboleth_v1__signal_after__add", "i64, i64, i64, i64", "i64"),
        ("__aboleth_v1__wait", "i64", "i32"),
        ("__aboleth_v1__wait", "i64", "i32"),
        ("__aboleth_v1__wait_signal", "!tt.ptr<i64>, i32", "i32"),
        ("__aboleth_v1__wait_signal__ne", "!tt.ptr<i64>, i64", "i32"),
        ("__aboleth_v1__drain", "i64", "i32"),
        ("__aboleth_v1__drain", "i64", "i32"),
        ("__aboleth_v1__fence", "i64", "i32"),
    ]
    # Every call is impure, so none is folded away or merged even when its result is unused.
    assert ttir.count('libname = "aboleth"') == 20
    assert "pure = true" not in ttir


@triton.jit
def address_region(region, offset):
    return region.at(offset)


@triton.jit(noinline=True)
def noinline_signal(ep, flag, value):
    aboleth.signal(ep, flag, value)


@triton.jit
def handles_through_control_flow(endpoints, regions, src, n, key):
    peer = tl.program_id(0)
    ep = aboleth.endpoint(endpoints, peer)
    dst = aboleth.remote(regions, peer)
    flags = aboleth.remote(regions, peer, tl.int64)
    token = aboleth.put(ep, dst.at(0), src, 64, source_key=key)
    for chunk in range(1, n):  # a token carried through scf.for
        token = aboleth.put(ep, address_region(dst, chunk * 64), src + chunk * 64, 64, source_key=key)
    if peer > 2:  # and through scf.if
        token = aboleth.signal(ep, flags.at(peer), 1, after=token)
    noinline_signal(ep, flags.at(0), n)  # handles as arguments of a separate tt.func
    aboleth.wait(token)


def test_tokens_and_regions_keep_their_kind_through_loops_branches_and_helpers():
    ttir = trace_to_ttir(handles_through_control_flow, {
        "endpoints": "*i64", "regions": "*i64", "src": "*i8", "n": "i32", "key": "i32"
    })
    # The loop and the branch carry the token as an i64.
    assert "scf.for" in ttir and "scf.if" in ttir
    loop_line = next(line for line in ttir.splitlines() if "scf.for" in line)
    assert "-> (i64)" in loop_line
    # The noinline helper takes the handles as i64 arguments and emits its own signal.
    helper = next(line for line in ttir.splitlines() if "tt.func private" in line and "noinline_signal" in line)
    assert helper.count(": i64") >= 2
    symbols = [call["symbol"] for call in aboleth_calls(ttir)]
    assert symbols.count("__aboleth_v1__put") == 2
    assert symbols.count("__aboleth_v1__signal_after__set") == 1
    assert symbols.count("__aboleth_v1__signal__set") == 1
    assert symbols[-1] in ("__aboleth_v1__wait", "__aboleth_v1__signal__set")
    assert "tt.call" in ttir


# ---------------------------------------------------------------------------------------------
# Trace-time misuse: one kernel per rule, each checked for its exact message
# ---------------------------------------------------------------------------------------------

MISUSE_SIGNATURE = {"endpoints": "*i64", "regions": "*i64", "src": "*i8", "flags": "*i64", "key": "i32", "epoch": "i64"}


@triton.jit
def block_nbytes(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst.at(0), src, tl.arange(0, 128), source_key=key)


@triton.jit
def float_nbytes(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst.at(0), src, 1.5, source_key=key)


@triton.jit
def wrong_flag_pointer(endpoints, regions, src, flags, key, epoch):
    aboleth.wait_signal(flags.to(tl.pointer_type(tl.int32)), epoch)


@triton.jit
def endpoint_table_not_a_pointer(endpoints, regions, src, flags, key, epoch):
    aboleth.endpoint(epoch, 0)


@triton.jit
def endpoint_table_of_int8(endpoints, regions, src, flags, key, epoch):
    aboleth.endpoint(src, 0)


@triton.jit
def block_of_endpoint_tables(endpoints, regions, src, flags, key, epoch):
    aboleth.endpoint(endpoints + tl.arange(0, 4), 0)


@triton.jit
def after_a_plain_tensor(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    flag = aboleth.remote(regions, 0, tl.int64)
    aboleth.signal(ep, flag.at(0), epoch, after=epoch)


@triton.jit
def after_an_endpoint(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    flag = aboleth.remote(regions, 0, tl.int64)
    aboleth.signal(ep, flag.at(0), epoch, after=ep)


@triton.jit
def unknown_signal_op(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    flag = aboleth.remote(regions, 0, tl.int64)
    aboleth.signal(ep, flag.at(0), epoch, op="xor")


@triton.jit
def signal_op_not_a_string(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    flag = aboleth.remote(regions, 0, tl.int64)
    aboleth.signal(ep, flag.at(0), epoch, op=1)


@triton.jit
def unknown_wait_comparison(endpoints, regions, src, flags, key, epoch):
    aboleth.wait_signal(flags, epoch, comparison=">=")


@triton.jit
def signal_on_a_byte_region(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    flag = aboleth.remote(regions, 0)
    aboleth.signal(ep, flag.at(0), epoch)


@triton.jit
def wait_on_a_plain_tensor(endpoints, regions, src, flags, key, epoch):
    aboleth.wait(epoch)


@triton.jit
def put_to_a_local_pointer(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    aboleth.put(ep, src, src, 8, source_key=key)


@triton.jit
def put_to_a_region_without_at(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst, src, 8, source_key=key)


@triton.jit
def put_on_a_peer_number(endpoints, regions, src, flags, key, epoch):
    dst = aboleth.remote(regions, 0)
    aboleth.put(tl.program_id(0), dst.at(0), src, 8, source_key=key)


@triton.jit
def put_without_source_key(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst.at(0), src, 8)


@triton.jit
def put_from_an_integer(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst.at(0), epoch, 8, source_key=key)


@triton.jit
def float_predicate(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.put(ep, dst.at(0), src, 8, source_key=key, predicate=0.5)


@triton.jit
def int16_peer(endpoints, regions, src, flags, key, epoch):
    aboleth.remote(regions, tl.program_id(0).to(tl.int16))


@triton.jit
def bool_region_dtype(endpoints, regions, src, flags, key, epoch):
    aboleth.remote(regions, 0, tl.int1)


@triton.jit
def block_index(endpoints, regions, src, flags, key, epoch):
    dst = aboleth.remote(regions, 0)
    dst.at(tl.arange(0, 16))


@triton.jit
def remote_pointer_arithmetic(endpoints, regions, src, flags, key, epoch):
    dst = aboleth.remote(regions, 0)
    ep = aboleth.endpoint(endpoints, 0)
    aboleth.put(ep, dst.at(0) + 8, src, 8, source_key=key)


@triton.jit
def drain_a_token(endpoints, regions, src, flags, key, epoch):
    ep = aboleth.endpoint(endpoints, 0)
    dst = aboleth.remote(regions, 0)
    aboleth.drain(aboleth.put(ep, dst.at(0), src, 8, source_key=key))


_TOKEN = "a token returned by aboleth.put or aboleth.signal"

MISUSES = [
    (block_nbytes, TypeError, "aboleth.put: argument 'nbytes' must be a scalar, got a block of shape [128]"),
    (float_nbytes, TypeError,
     "aboleth.put: argument 'nbytes' must be a 32- or 64-bit integer scalar, got a scalar of type fp32"),
    (wrong_flag_pointer, TypeError,
     "aboleth.wait_signal: argument 'ptr' must be a pointer to int64 (a local signal word), got pointer<int32>"),
    (endpoint_table_not_a_pointer, TypeError, "aboleth.endpoint: argument 'endpoints' must be a pointer to int64 "
     "(the endpoint table), got a scalar of type int64"),
    (endpoint_table_of_int8, TypeError,
     "aboleth.endpoint: argument 'endpoints' must be a pointer to int64 (the endpoint table), got pointer<int8>"),
    (block_of_endpoint_tables, TypeError,
     "aboleth.endpoint: argument 'endpoints' must be a scalar, got a block of shape [4]"),
    (after_a_plain_tensor, TypeError, f"aboleth.signal: argument 'after' must be {_TOKEN}, got a scalar of type int64"),
    (after_an_endpoint, TypeError, f"aboleth.signal: argument 'after' must be {_TOKEN}, got an aboleth endpoint"),
    (unknown_signal_op, ValueError, "aboleth.signal: argument 'op' must be \"set\" or \"add\", got \"xor\""),
    (signal_op_not_a_string, TypeError,
     "aboleth.signal: argument 'op' must be a constant string, \"set\" or \"add\", got int 1"),
    (unknown_wait_comparison, ValueError, "aboleth.wait_signal: argument 'comparison' must be \"eq\", \"ne\", "
     "\"gt\", \"le\", \"lt\" or \"ge\", got \">=\""),
    (signal_on_a_byte_region, TypeError,
     "aboleth.signal: argument 'flag' must be a remote pointer to a 64-bit signal word (take it from "
     "aboleth.remote(..., tl.int64)), got an aboleth remote pointer (1-byte elements)"),
    (wait_on_a_plain_tensor, TypeError, f"aboleth.wait: argument 'token' must be {_TOKEN}, got a scalar of type int64"),
    (put_to_a_local_pointer, TypeError, "aboleth.put: argument 'dst' must be a remote pointer returned by "
     "region.at(index), got a scalar of type pointer<int8>"),
    (put_to_a_region_without_at, TypeError, "aboleth.put: argument 'dst' must be a remote pointer returned by "
     "region.at(index), got an aboleth remote region (1-byte elements)"),
    (put_on_a_peer_number, TypeError,
     "aboleth.put: argument 'ep' must be an endpoint returned by aboleth.endpoint, got a scalar of type int32"),
    (put_without_source_key, TypeError, "aboleth.put: argument 'source_key' is required: the memory key of the "
     "source buffer (an i32 or i64 scalar; 0 where the transport needs none)"),
    (put_from_an_integer, TypeError,
     "aboleth.put: argument 'src' must be a pointer to local memory, got a scalar of type int64"),
    (float_predicate, TypeError,
     "aboleth.put: argument 'predicate' must be a boolean or 32-bit integer scalar, got a scalar of type fp32"),
    (int16_peer, TypeError,
     "aboleth.remote: argument 'peer' must be a 32- or 64-bit integer scalar, got a scalar of type int16"),
    (bool_region_dtype, TypeError, "aboleth.remote: argument 'dtype' must be an element type of whole bytes such as "
     "tl.int8 or tl.int64, got the type int1"),
    (block_index, TypeError, "region.at: argument 'index' must be a scalar, got a block of shape [16]"),
    (remote_pointer_arithmetic, TypeError, "an aboleth remote pointer (1-byte elements) is opaque: it supports no "
     "arithmetic (use region.at(index) to address into a remote region)"),
    (drain_a_token, TypeError,
     "aboleth.drain: argument 'ep' must be an endpoint returned by aboleth.endpoint, got an aboleth token"),
]


@pytest.mark.parametrize("kernel, error_type, message", MISUSES, ids=[kernel.__name__ for kernel, _, _ in MISUSES])
def test_misuse_is_reported_at_trace_time(kernel, error_type, message):
    with pytest.raises(CompilationError) as info:
        compile_kernel(kernel, MISUSE_SIGNATURE)
    cause = info.value.__cause__
    assert type(cause) is error_type
    assert str(cause) == message
    # Triton's error names the kernel line and repeats the message.
    assert message in str(info.value)
    assert kernel.__name__ in str(info.value) or "aboleth" in str(info.value)


def test_builtins_refuse_to_run_outside_a_kernel():
    with pytest.raises(ValueError, match="Did you forget to add @triton.jit"):
        aboleth.endpoint(None, 0)


def test_kernels_using_aboleth_have_a_jit_cache_key():
    """The JIT's dependency walk (DependenciesFinder) accepts the builtins: they are Triton
    builtins, which it skips (so a change to aboleth.language reaches the cache only through the
    aboleth cache salt, see aboleth.hook)."""
    for kernel in [seed_kernels.alltoall, every_other_builtin, handles_through_control_flow]:
        assert len(kernel.cache_key) == 64
