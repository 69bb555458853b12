"""aboleth.frontends.triton.tier1 without a GPU: a stock Triton 3.6 kernel calling the tier-1
operations compiles for sm_90 with each transport's bitcode linked (the transport's code is in
the PTX), the packaged bitcode is what the current compiler and clang generate (clang 16 or
later; required when CI is set: `make setup` installs it), and a transport without bitcode is
refused by name. tests/gpu/tier1_exchange.py runs the same kernel on the GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

from aboleth.frontends.triton import tier1
from aboleth.language import COMPARISONS

SIGNATURE = {"handles": "*i64", "rank": "i32", "world_size": "i32", "peer": "i32", "recv": "*i64", "dst_offset": "i64",
             "send": "i64", "send_key": "i32", "nbytes": "i64", "flags": "*i64", "flag_offset": "i64",
             "my_flag": "*i64", "epoch": "i64"}


@triton.jit
def exchange(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset, my_flag,
             epoch):
    tier1.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                     epoch)
    tier1.quiet(handles, rank, world_size, peer)
    tier1.wait_signal(handles, rank, world_size, my_flag, epoch)


@triton.jit
def every_operation(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                    my_flag, epoch):
    tier1.put(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes)
    tier1.fence(handles, rank, world_size, peer)
    tier1.put_signal_add(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags,
                         flag_offset, epoch)
    tier1.signal(handles, rank, world_size, peer, flags, flag_offset, epoch)
    tier1.signal_add(handles, rank, world_size, peer, flags, flag_offset, epoch)
    tier1.quiet(handles, rank, world_size, peer)
    tier1.wait_signal(handles, rank, world_size, my_flag, epoch)


def ptx(kernel, transport: str) -> str:
    source = triton.compiler.ASTSource(fn=kernel, signature=SIGNATURE, constexprs={})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "extern_libs": tier1.extern_libs(transport)})
    return compiled.asm["ptx"]


def test_the_seeds_exchange_pattern_compiles_with_each_transports_bitcode() -> None:
    p2p, proxy, mlx5 = ptx(exchange, "p2p"), ptx(exchange, "proxy"), ptx(exchange, "mlx5")
    # p2p: the flag is a release store to the peer; the proxy: a ring entry and its doorbell;
    # mlx5: WQEs, the doorbell record and the UAR's MMIO store.
    assert "st.release.sys.global.u64" in p2p and "atom.release.sys.global.max.u64" not in p2p
    assert "atom.release.sys.global.max.u64" in proxy
    assert "st.mmio.relaxed.sys.global.b64" in mlx5 and "st.release.sys.global.b32" in mlx5
    assert "st.mmio" not in p2p + proxy
    # The wait polls with acquire and can give up (the wait-failure record's exit).
    for text in (p2p, proxy, mlx5):
        assert "ld.acquire.sys.global.u64" in text and "%globaltimer" in text and "exit;" in text


@pytest.mark.parametrize("transport", tier1.TRANSPORTS)
def test_every_operation_compiles(transport: str) -> None:
    text = ptx(every_operation, transport)
    assert ".entry every_operation" in text


def test_a_transport_without_bitcode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not 'efa'"):
        tier1.extern_libs("efa")


def clang_or_skip() -> str:
    for name in (os.environ.get("ABOLETH_CLANG"), "clang++-16", "clang++"):
        if name and shutil.which(name):
            version = subprocess.run([shutil.which(name), "--version"], capture_output=True, text=True).stdout
            if "clang version 16." in version:
                return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail("CI must check the packaged tier-1 bitcode: no clang 16 (make setup installs clang-16)")
    pytest.skip("no clang 16 here (make setup installs it)")


@pytest.mark.parametrize("transport", tier1.TRANSPORTS)
def test_the_packaged_bitcode_is_what_the_compiler_generates(tmp_path: Path, transport: str) -> None:
    clang = clang_or_skip()
    completed = subprocess.run(
        [sys.executable, "-m", "aboleth", "device-library", "--target", transport, "--out", str(tmp_path),
         "--header-only", "--bitcode", "--clang", clang], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    for operation in tier1.OPERATIONS:
        generated = (tmp_path / "bitcode" / f"{operation}.bc").read_bytes()
        packaged = Path(tier1.extern_libs(transport)[f"aboleth_tier1_{operation}"]).read_bytes()
        assert generated == packaged, (f"{transport}/{operation}.bc is stale: `make bless` regenerates the "
                                       "packaged bitcode")


def test_arguments_triton_specializes_to_constants_still_compile() -> None:
    """Triton makes an integer argument equal to 1 a constant (rank 1, peer 1, epoch 1)."""
    signature = dict(SIGNATURE, rank="constexpr", peer="constexpr", epoch="constexpr")
    source = triton.compiler.ASTSource(fn=exchange, signature=signature, constexprs={"rank": 1, "peer": 1, "epoch": 1})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "extern_libs": tier1.extern_libs("p2p")})
    assert "st.release.sys.global.u64" in compiled.asm["ptx"]


@triton.jit
def wait_with(handles, rank, world_size, my_flag, epoch, COMPARISON: tl.constexpr):
    tier1.wait_signal(handles, rank, world_size, my_flag, epoch, COMPARISON)


def wait_ptx(comparison: str) -> str:
    signature = {"handles": "*i64", "rank": "i32", "world_size": "i32", "my_flag": "*i64", "epoch": "i64",
                 "COMPARISON": "constexpr"}
    source = triton.compiler.ASTSource(fn=wait_with, signature=signature, constexprs={"COMPARISON": comparison})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "extern_libs": tier1.extern_libs("p2p")})
    return compiled.asm["ptx"]


def test_each_comparison_compiles_to_its_own_wait_and_the_choice_folds_away() -> None:
    texts = {comparison: wait_ptx(comparison) for comparison in COMPARISONS}
    # Six different polls; the run-time switch over the comparison (and its refusal of an
    # unknown one) is gone when the comparison is a constant.
    assert len(set(texts.values())) == len(COMPARISONS)
    for comparison, text in texts.items():
        assert "not one of" not in text, comparison
        assert "%globaltimer" in text and "ld.acquire.sys.global.u64" in text, comparison


def test_an_unknown_comparison_is_refused_with_the_choices() -> None:
    with pytest.raises(triton.compiler.errors.CompilationError) as caught:
        wait_ptx("approximately")
    # Triton reports it at the user's call (the outer error) caused by the binding's refusal.
    messages, error = [], caught.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    assert "tier1.wait_signal(handles, rank, world_size, my_flag, epoch, COMPARISON)" in messages[0]
    assert any("comparison 'approximately' is not one of eq, ne, gt, le, lt, ge" in m for m in messages), messages
