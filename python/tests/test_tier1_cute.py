"""aboleth.frontends.cute without a GPU: a CuTe DSL kernel (nvidia-cutlass-dsl 4.8.1, which `make
cuda-setup` installs; required when CI is set) calling the tier-1 operations compiles for sm_90a
with each transport's bitcode linked: every operation is defined in the PTX (nothing external but
vprintf), the kernel calls them in order, the transport's code is there, and ptxas made a cubin.
A transport without bitcode is refused by name. On the GPU machine, `tests/gpu/tier1_exchange.py`'s
`cute` step runs such a kernel (TIER1_CUTE=1, tests/gpu/README.md)."""

import os

import pytest

try:
    import cutlass.cute as cute
    from cutlass import Int32, Uint32, Uint64
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("no CuTe DSL here (make cuda-setup installs nvidia-cutlass-dsl)", allow_module_level=True)

from aboleth.frontends import cute as tier1_cute

LIBRARIES = {transport: tier1_cute.library(transport) for transport in tier1_cute.TRANSPORTS}


def make_kernel(lib):
    @cute.kernel
    def exchange(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, recv: Uint64, dst_offset: Uint64,
                 send: Uint64, send_key: Uint32, nbytes: Uint64, flags: Uint64, flag_offset: Uint64, my_flag: Uint64,
                 epoch: Uint64):
        lib.put(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes)
        lib.fence(handles, rank, world_size, peer)
        lib.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                       epoch)
        lib.signal(handles, rank, world_size, peer, flags, flag_offset, epoch, add=True)
        lib.quiet(handles, rank, world_size, peer)
        lib.wait_signal(handles, rank, world_size, my_flag, epoch)
        lib.wait_signal(handles, rank, world_size, my_flag, epoch, comparison="ne")

    @cute.jit
    def launch(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, recv: Uint64, dst_offset: Uint64,
               send: Uint64, send_key: Uint32, nbytes: Uint64, flags: Uint64, flag_offset: Uint64, my_flag: Uint64,
               epoch: Uint64):
        exchange(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                 my_flag, epoch).launch(grid=(1, 1, 1), block=(128, 1, 1))

    return launch


def body(ptx: str, symbol: str) -> str:
    """The PTX of ``.func symbol``'s definition."""
    start = ptx.index(f".func {symbol}(")
    return ptx[start:ptx.index("\n}\n", start)]


@pytest.mark.parametrize("transport", tier1_cute.TRANSPORTS)
def test_a_cute_kernel_calling_tier1_compiles_with_the_bitcode_linked(tmp_path, transport) -> None:
    launch = make_kernel(LIBRARIES[transport])
    # The dump directory must exist, or __ptx__ holds its path instead of the text.
    compiled = cute.compile(launch, Uint64(0), Uint32(0), Uint32(2), Int32(1), Uint64(0), Uint64(0), Uint64(0),
                            Uint32(0), Uint64(64), Uint64(0), Uint64(0), Uint64(0), Uint64(1),
                            options=f"--gpu-arch sm_90a --keep-ptx --keep-cubin --dump-dir {tmp_path}")
    ptx, cubin = compiled.__ptx__, compiled.__cubin__
    assert ".target sm_90a" in ptx
    # The proxy's and mlx5's fences are empty (their queues execute in order), so nothing of
    # them is left.
    linked = ("put", "put_signal", "signal", "quiet", "wait_signal") + (("fence",) if transport == "p2p" else ())
    for operation in linked:
        assert f".func aboleth_tier1_{operation}_block(" in ptx, operation
    externs = [line for line in ptx.splitlines() if line.startswith(".extern .func")]
    assert all(line.rstrip().endswith(" vprintf") for line in externs), externs
    assert "ld.acquire.sys.global.u64" in body(ptx, "aboleth_tier1_wait_signal_block")
    if transport == "p2p":
        assert "st.release.sys.global.u64" in body(ptx, "aboleth_tier1_put_signal_block")
        assert "red.release.sys.global.add.u64" in body(ptx, "aboleth_tier1_signal_block")
    elif transport == "proxy":
        assert "atom.release.sys.global.max.u64" in body(ptx, "aboleth_tier1_put_signal_block")
    else:
        # mlx5: the doorbell record, then the UAR's MMIO store.
        assert "st.mmio.relaxed.sys.global.b64" in body(ptx, "aboleth_tier1_put_signal_block")
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"


def test_an_unknown_comparison_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="comparison '>=' is not one of eq, ne, gt, le, lt, ge"):
        LIBRARIES["p2p"].wait_signal(0, 0, 2, 0, 1, comparison=">=")


def test_a_transport_without_bitcode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not 'efa'"):
        tier1_cute.library("efa")
