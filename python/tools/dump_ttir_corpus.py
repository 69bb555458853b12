"""Write the TTIR corpus for the Rust TTIR bridge (crates/aboleth-ttir/tests/corpus/).

Compiles a fixed set of @triton.jit kernels with stock Triton 3.6.0 on a CPU-only machine
(target GPUTarget("cuda", 90, 32); no GPU, driver or torch is needed) and records, for each
kernel, the module text at the `ttir` stage exactly as a stage hook sees it:

  NAME.ttir               the input of the `ttir` stage (frontend output, before Triton's ttir
                          passes: inliner, canonicalizer, combine, CSE, loop unroll)
  NAME.after-passes.ttir  the output of the `ttir` stage, i.e. what an `aboleth` stage inserted
                          after `ttir` receives (written only when it differs)

The text is `module.str()`, the same call the aboleth stage makes. Compilation is stopped
after the `ttir` stage: later stages are not needed, and kernels with aboleth extern calls
cannot reach a cubin anyway (ptxas: unresolved extern function).

The kernels with aboleth calls use the real builtins of `aboleth.language`, so run it with a
Python that has `pip install triton==3.6.0` and the aboleth package (`maturin develop`, see
python/tests/README), from any directory; it re-runs itself from the repository root so that
kernel locations carry the relative path `python/tools/dump_ttir_corpus.py`:

    /path/to/venv-with-triton-3.6.0-and-aboleth/bin/python python/tools/dump_ttir_corpus.py

Locations inside Triton's own library code (`tl.sum`, `tl.argmax`, `tl.zeros` ...) keep the
absolute path of the installed `triton/language/standard.py`; only those lines differ when the
corpus is regenerated on another machine. The output is otherwise deterministic.

The corpus is committed; CI reads the files and never needs Triton.
"""

import os
import pathlib
import runpy
import sys
import tempfile

# Must be set before triton is imported: knobs read the environment at import time.
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
os.environ["TRITON_BACKENDS_IN_TREE"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="aboleth-ttir-corpus-"))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler.compiler import ASTSource  # noqa: E402

import aboleth.language as aboleth  # noqa: E402

if triton.__version__ != "3.6.0":
    sys.exit(f"this corpus is pinned to triton 3.6.0, found {triton.__version__}")

TARGET = GPUTarget("cuda", 90, 32)
CORPUS_DIRECTORY = pathlib.Path(__file__).resolve().parents[2] / "crates/aboleth-ttir/tests/corpus"

# ---------------------------------------------------------------------------------------------
# Kernels.
# ---------------------------------------------------------------------------------------------


@triton.jit
def masked_vector_add(x_pointer, y_pointer, out_pointer, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_pointer + offsets, mask=mask, other=0.0)
    y = tl.load(y_pointer + offsets, mask=mask, other=1.0)
    tl.store(out_pointer + offsets, x + y, mask=mask)


@triton.jit
def matmul(a_pointer, b_pointer, c_pointer, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
           stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_pointer + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_pointer + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_pointer + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def softmax(out_pointer, in_pointer, in_row_stride, out_row_stride, n_columns, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n_columns
    x = tl.load(in_pointer + row * in_row_stride + offsets, mask=mask, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    numerator = tl.exp(shifted)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_pointer + row * out_row_stride + offsets, numerator / denominator, mask=mask)


@triton.jit
def row_argmax(in_pointer, out_index_pointer, out_sum_pointer, n_columns, ROWS: tl.constexpr,
               BLOCK: tl.constexpr):
    # A 2-D reduction along axis 1 plus argmax: tt.reduce with two results (%x:2 = "tt.reduce").
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    columns = tl.arange(0, BLOCK)
    mask = columns[None, :] < n_columns
    x = tl.load(in_pointer + rows[:, None] * n_columns + columns[None, :], mask=mask, other=0.0)
    tl.store(out_index_pointer + rows, tl.argmax(x, axis=1))
    tl.store(out_sum_pointer + rows, tl.sum(x, axis=1))


@triton.jit
def for_loop_carry(x_pointer, out_pointer, n_iterations, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK, ), dtype=tl.float32)
    running_max = tl.full((BLOCK, ), -float("inf"), dtype=tl.float32)
    count = 0
    for i in tl.range(0, n_iterations, 1, num_stages=2):
        x = tl.load(x_pointer + i * BLOCK + offsets)
        total += x
        running_max = tl.maximum(running_max, x)
        count += 1
    for j in tl.static_range(2):
        total = total * 2.0
    tl.store(out_pointer + offsets, total + running_max + count)


@triton.jit
def while_loop(flag_pointer, x_pointer, out_pointer, limit, expected):
    # A data-dependent while (condition region with a load) and a spin-wait on an atomic.
    i = 0
    value = tl.load(x_pointer)
    while value < limit:
        value = value * 2 + i
        i += 1
    while tl.atomic_add(flag_pointer, 0, sem="acquire", scope="sys") < expected:
        pass
    tl.store(out_pointer, value + i)


@triton.jit
def if_else(x_pointer, out_pointer, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    if pid == 0:
        y = tl.load(x_pointer + offsets)
    else:
        y = tl.zeros((BLOCK, ), dtype=tl.float32) + n
    if n > 4:
        tl.store(out_pointer + offsets, y)


@triton.jit(noinline=True)
def scaled_copy_helper(x_pointer, out_pointer, scale):
    # noinline: stays a separate tt.func reached by tt.call even after the inliner runs. noinline
    # functions take scalar arguments only.
    offsets = tl.arange(0, 128)
    tl.store(out_pointer + offsets, tl.load(x_pointer + offsets) * scale)


@triton.jit
def inlined_helper(x):
    return x + 1.0


@triton.jit
def helper_call(x_pointer, out_pointer, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_pointer + offsets, inlined_helper(tl.load(x_pointer + offsets)))
    scaled_copy_helper(x_pointer, out_pointer + BLOCK, 3.0)


@triton.jit
def aboleth_extern_calls(endpoints, regions, src_pointer, flag_pointer, n_chunks, source_key,
                         CHUNK_BYTES: tl.constexpr):
    # Every aboleth builtin on scalar operands: a put per loop iteration whose token is carried out
    # of the loop, a predicated put, signals (add and set, each after a token), a wait on a local
    # flag and on a token, a fence and a quiet.
    pid = tl.program_id(0)
    ep = aboleth.endpoint(endpoints, pid)
    dst = aboleth.remote(regions, pid)
    flags = aboleth.remote(regions, pid, tl.int64)
    token = aboleth.put(ep, dst.at(0), src_pointer, CHUNK_BYTES, source_key=source_key)
    for chunk in range(1, n_chunks):
        offset = (pid * n_chunks + chunk) * CHUNK_BYTES
        token = aboleth.put(ep, dst.at(offset), src_pointer + offset, CHUNK_BYTES, source_key=source_key)
    last = aboleth.put(ep, dst.at(n_chunks * CHUNK_BYTES), src_pointer, 8, source_key=source_key, predicate=pid > 0)
    aboleth.signal(ep, flags.at(pid), 1, op="add", after=token)
    done = aboleth.signal(ep, flags.at(0), 1, after=last)
    aboleth.wait_signal(flag_pointer + pid, 1)
    aboleth.wait(done)
    aboleth.fence(ep)
    aboleth.quiet(ep)


# The seed's tier-2 all-to-all (shared/seed/aboleth-overview.txt; examples/ir/alltoall.abo), one
# program per peer, verbatim (python/tests/seed_kernels.py holds the same text).
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


@triton.jit
def strings_and_inline_asm(x_pointer, token_pointer, out_pointer, BLOCK: tl.constexpr):
    # String attributes with characters a line-and-bracket parser must not trip on: braces,
    # quotes, `//`, `#loc`, `$0`. device_assert is emitted only with debug=True.
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_pointer + offsets)
    tl.device_print("x} {\"q\" // #loc1", x)
    tl.device_assert(x >= 0, "negative {x} // \"oops\"")
    token = tl.load(token_pointer)
    ordered = tl.inline_asm_elementwise("mov.b64 $0, $1; // {keep}", "=l,l,r", [token_pointer, token],
                                       dtype=tl.int64, is_pure=False, pack=1)
    left, right = tl.split(tl.reshape(tl.join(x, x * 2.0), (BLOCK, 2)))
    swapped = tl.trans(tl.reshape(left + right, (BLOCK // 16, 16)))
    tl.debug_barrier()
    previous = tl.atomic_cas(token_pointer, token, token + 1, sem="acq_rel", scope="gpu")
    tl.store(out_pointer + offsets, tl.reshape(swapped, (BLOCK, )) + previous + ordered.to(tl.float32))


@triton.jit
def block_pointers(a_pointer, out_pointer, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # tt.make_tensor_ptr / tt.advance before the ttir passes; rewritten to plain pointers after.
    block = tl.make_block_ptr(a_pointer, shape=(M, N), strides=(stride_m, 1), offsets=(0, 0),
                              block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, N, BLOCK_N):
        accumulator += tl.load(block, boundary_check=(0, 1), padding_option="zero")
        block = tl.advance(block, (0, BLOCK_N))
    tl.store(out_pointer + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :],
             accumulator)


DIVISIBLE = [["tt.divisibility", 16]]

# Waits with every comparison (NVSHMEM's signal_wait_until); the endpoint gives the waits their
# bound (the wait-failure log), as the tier-1 library's wait_signal does.
@triton.jit
def wait_comparisons(endpoints, my_flags, epoch, RANK: tl.constexpr):
    aboleth.endpoint(endpoints, RANK)
    aboleth.wait_signal(my_flags, epoch, comparison="eq")
    aboleth.wait_signal(my_flags + 1, epoch, comparison="ne")
    aboleth.wait_signal(my_flags + 2, epoch, comparison="gt")
    aboleth.wait_signal(my_flags + 3, epoch, comparison="le")
    aboleth.wait_signal(my_flags + 4, epoch, comparison="lt")
    aboleth.wait_signal(my_flags + 5, epoch, comparison="ge")


# aboleth.moe's dispatch shape: per peer, one put per expert of a size loaded at run time (no
# command for a token that stays), then one counter add; p2p copies it with whole tiles split
# from the rest, so the run-time size still moves 16-byte vectors.
@triton.jit
def compacted_puts(endpoints, regions, send, send_key, counts, ROW_BYTES: tl.constexpr, EXPERTS: tl.constexpr,
                   RANK: tl.constexpr):
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep = aboleth.endpoint(endpoints, peer)
    rows = aboleth.remote(regions, peer)
    flags = aboleth.remote(regions, peer, tl.int64)
    for expert in range(EXPERTS):
        count = tl.minimum(tl.load(counts + peer * EXPERTS + expert), 64)
        aboleth.put(ep, rows.at(expert * 64 * ROW_BYTES), send + (peer * EXPERTS + expert) * 64 * ROW_BYTES,
                    count * ROW_BYTES, source_key=send_key)
    aboleth.signal(ep, flags.at(RANK), 1, op="add")


# (file name, kernel, signature, constexprs, attrs, options)
KERNELS = [
    ("masked_vector_add", masked_vector_add,
     {"x_pointer": "*fp32", "y_pointer": "*fp32", "out_pointer": "*fp32", "n_elements": "i32", "BLOCK": "constexpr"},
     {"BLOCK": 1024}, {(0, ): DIVISIBLE, (1, ): DIVISIBLE, (2, ): DIVISIBLE}, {}),
    ("matmul", matmul,
     {"a_pointer": "*fp16", "b_pointer": "*fp16", "c_pointer": "*fp16", "M": "i32", "N": "i32", "K": "i32",
      "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
      "stride_cm": "i32", "stride_cn": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
      "BLOCK_K": "constexpr", "GROUP_M": "constexpr"},
     {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
     {(0, ): DIVISIBLE, (1, ): DIVISIBLE, (2, ): DIVISIBLE, (3, ): DIVISIBLE, (4, ): DIVISIBLE, (5, ): DIVISIBLE},
     {"num_warps": 8, "num_stages": 3}),
    ("softmax", softmax,
     {"out_pointer": "*fp32", "in_pointer": "*fp32", "in_row_stride": "i32", "out_row_stride": "i32",
      "n_columns": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, {}, {}),
    ("row_argmax", row_argmax,
     {"in_pointer": "*fp32", "out_index_pointer": "*i32", "out_sum_pointer": "*fp32", "n_columns": "i32",
      "ROWS": "constexpr", "BLOCK": "constexpr"}, {"ROWS": 4, "BLOCK": 256}, {}, {}),
    ("for_loop_carry", for_loop_carry,
     {"x_pointer": "*fp32", "out_pointer": "*fp32", "n_iterations": "i32", "BLOCK": "constexpr"},
     {"BLOCK": 256}, {}, {}),
    ("while_loop", while_loop,
     {"flag_pointer": "*i32", "x_pointer": "*i32", "out_pointer": "*i32", "limit": "i32", "expected": "i32"},
     {}, {}, {}),
    ("if_else", if_else,
     {"x_pointer": "*fp32", "out_pointer": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, {}, {}),
    ("helper_call", helper_call,
     {"x_pointer": "*fp32", "out_pointer": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128}, {}, {}),
    ("strings_and_inline_asm", strings_and_inline_asm,
     {"x_pointer": "*fp32", "token_pointer": "*i64", "out_pointer": "*fp32", "BLOCK": "constexpr"},
     {"BLOCK": 64}, {}, {"debug": True}),
    ("block_pointers", block_pointers,
     {"a_pointer": "*fp32", "out_pointer": "*fp32", "M": "i32", "N": "i32", "stride_m": "i32",
      "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}, {"BLOCK_M": 32, "BLOCK_N": 64}, {}, {}),
    ("aboleth_extern_calls", aboleth_extern_calls,
     {"endpoints": "*i64", "regions": "*i64", "src_pointer": "*i8", "flag_pointer": "*i64", "n_chunks": "i32",
      "source_key": "i32", "CHUNK_BYTES": "constexpr"}, {"CHUNK_BYTES": 256}, {}, {}),
    # `send` is an address (the seed passes `send.address`), turned into a pointer in the kernel.
    ("alltoall", alltoall,
     {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
      "my_flags": "*i64", "epoch": "i64", "BYTES": "constexpr", "RANK": "constexpr"},
     {"BYTES": 256, "RANK": 1}, {}, {}),
    ("wait_comparisons", wait_comparisons,
     {"endpoints": "*i64", "my_flags": "*i64", "epoch": "i64", "RANK": "constexpr"}, {"RANK": 0}, {}, {}),
    ("compacted_puts", compacted_puts,
     {"endpoints": "*i64", "regions": "*i64", "send": "*i8", "send_key": "i32", "counts": "*i64",
      "ROW_BYTES": "constexpr", "EXPERTS": "constexpr", "RANK": "constexpr"},
     {"ROW_BYTES": 256, "EXPERTS": 4, "RANK": 0}, {(2, ): DIVISIBLE}, {}),
]


class StopAfterTtir(Exception):
    """Raised by the hooked `ttir` stage: later stages are not needed for the corpus."""


captured = {}


def stages_hook(*arguments):
    # With no arguments (the Triton 3.7 contract) a hook returns a cache key; 3.6 never does that.
    if not arguments:
        return ("aboleth-ttir-corpus", "0")
    backend, stages, options, language, capability = arguments
    original_ttir_stage = stages["ttir"]

    def ttir_stage(module, metadata):
        captured["before"] = module.str()
        result = original_ttir_stage(module, metadata)
        captured["after"] = result.str()
        raise StopAfterTtir()

    stages["ttir"] = ttir_stage


def main():
    triton.knobs.runtime.add_stages_inspection_hook = stages_hook
    CORPUS_DIRECTORY.mkdir(parents=True, exist_ok=True)
    failures = []
    for name, kernel, signature, constexprs, attrs, options in KERNELS:
        captured.clear()
        try:
            triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=TARGET, options=options)
        except StopAfterTtir:
            pass
        except Exception as error:  # recorded, not fatal: the report says which kernel failed and why
            failures.append(f"{name}: {type(error).__name__}: {error}")
            continue
        before, after = captured["before"], captured["after"]
        (CORPUS_DIRECTORY / f"{name}.ttir").write_text(before)
        after_path = CORPUS_DIRECTORY / f"{name}.after-passes.ttir"
        if after != before:
            after_path.write_text(after)
        elif after_path.exists():
            after_path.unlink()
        print(f"{name}: {len(before.splitlines())} lines before passes, {len(after.splitlines())} after")
    for failure in failures:
        print("FAILED", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    # Re-run this file under its repository-relative name: Triton takes the location file name
    # from the kernel's co_filename, which Python makes absolute for a script's own functions.
    repository_root = pathlib.Path(__file__).resolve().parents[2]
    os.chdir(repository_root)
    module_globals = runpy.run_path("python/tools/dump_ttir_corpus.py", run_name="ttir_corpus")
    sys.exit(module_globals["main"]())
