"""The tier-1 device library (aboleth.device_library) without a GPU: its files per transport, the
errors it gives, the bytes of its kernel arguments, and, with nvcc (the pinned
nvidia-cuda-nvcc wheels that `make cuda-setup` installs; required when CI is set), that the
header compiles warning-free for sm_90 with the seed's tier-1 `exchange` kernel verbatim
(tests/gpu/tier1/exchange.cu), header only and linked against libaboleth_device.a. Whether it
runs is tests/gpu/tier1_exchange.py's job."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import aboleth
from aboleth import _aboleth, device_library
from aboleth.language import COMPARISONS

REPOSITORY = Path(__file__).resolve().parents[2]
EXCHANGE = REPOSITORY / "tests" / "gpu" / "tier1" / "exchange.cu"
SEED = REPOSITORY.parent / "shared" / "seed" / "aboleth-overview.txt"
TRANSPORTS = ["p2p", "proxy", "mlx5"]


def nvcc_or_skip() -> str:
    nvcc = device_library.find_nvcc()
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("CI must compile the device library: no nvcc (make cuda-setup installs the pinned wheels)")
        pytest.skip("no nvcc here (make cuda-setup installs it)")
    return nvcc


@pytest.mark.parametrize("target", TRANSPORTS)
def test_the_library_has_its_header_implementation_and_archive_source(tmp_path: Path, target: str) -> None:
    library = device_library.write(target, tmp_path)
    assert library.header == tmp_path / "include" / "aboleth" / "device.cuh"
    header = library.header.read_text()
    assert f'constexpr const char* transport = "{target}";' in header
    assert (tmp_path / "include" / "aboleth" / "detail" / f"device_{target}.cuh").exists()
    assert (tmp_path / "src" / "aboleth_device.cu").exists()
    assert library.archive is None
    assert library.operations == ("put", "put_signal", "signal", "fence", "quiet", "wait_signal")
    for operation in library.operations:
        for suffix in ("", "_warp", "_block"):
            assert f"ABOLETH_DEVICE_API void {operation}{suffix}(DeviceContext ctx" in header
    # Every wait of the library has a distinct site, named by its operation variant.
    sites = [site for site, _, _ in library.wait_sites]
    assert len(sites) == len(set(sites)) and sites
    assert all(variant.startswith(library.operations) for _, variant, _ in library.wait_sites)


def test_the_comparisons_are_nvshmems_in_every_binding(tmp_path: Path) -> None:
    # aboleth::Comparison (from the Rust enum) numbers them as NVSHMEM_CMP_* (EQ 0 ... GE 5), the
    # order of aboleth.language.COMPARISONS, which the Triton and CuTe bindings pass by index.
    header = device_library.write("p2p", tmp_path).header.read_text()
    numbered = ", ".join(f"{name} = {code}" for code, name in enumerate(COMPARISONS))
    assert f"enum class Comparison : uint32_t {{ {numbered} }};" in header
    assert COMPARISONS == ("eq", "ne", "gt", "le", "lt", "ge")
    assert "Comparison comparison = Comparison::ge);" in header


def test_a_transport_without_a_lowering_is_refused_by_name(tmp_path: Path) -> None:
    for target in ("efa", "ionic"):
        with pytest.raises(NotImplementedError, match=f"for --target p2p, proxy and mlx5; --target {target} has no "
                                                      "device library yet"):
            device_library.write(target, tmp_path)
    with pytest.raises(ValueError, match='unknown transport "nvlink"'):
        device_library.write("nvlink", tmp_path)


def test_building_without_nvcc_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_library, "find_nvcc", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"no nvcc to build libaboleth_device.a \(looked in \$NVCC"):
        device_library.build("p2p", tmp_path)


def test_a_failing_nvcc_reports_its_command_and_output(tmp_path: Path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'fake nvcc: no such architecture' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"exited with 3:\nfake nvcc: no such architecture"):
        device_library.build("p2p", tmp_path / "library", nvcc=str(fake))


def test_kernel_arguments_have_the_abi_layouts() -> None:
    context = aboleth._aboleth.device_context_bytes(0x1122334455667788, 3, 8)
    assert context == (0x1122334455667788).to_bytes(8, "little") + (3).to_bytes(4, "little") + (8).to_bytes(4, "little")
    region = aboleth._aboleth.remote_region_bytes(0xABCDEF, 256)
    assert region == (0xABCDEF).to_bytes(8, "little") + (256).to_bytes(8, "little")
    local = aboleth._aboleth.local_region_bytes(0x1000, 7)
    assert local == (0x1000).to_bytes(8, "little") + (7).to_bytes(4, "little") + bytes(4)


class FakeTable:
    """What the argument helpers read from a RegionTable."""

    class Tensor:
        def __init__(self, address: int) -> None:
            self.address = address

        def data_ptr(self) -> int:
            return self.address

    class Local:
        address, lkey = 0x5000, 9

    endpoint_handles = Tensor(0x9000)

    def regions(self, name: str) -> "FakeTable.Tensor":
        return FakeTable.Tensor({"recv": 0x7000}[name])

    def local(self, name: str) -> "FakeTable.Local":
        return FakeTable.Local()


def test_argument_helpers_read_the_tables() -> None:
    class World:
        rank, world_size = 1, 2

    table = FakeTable()
    assert device_library.device_context(World(), table)[:8] == (0x9000).to_bytes(8, "little")
    assert device_library.remote_region(table, "recv", 64) == (0x7000).to_bytes(8, "little") + (64).to_bytes(8, "little")
    assert device_library.local_region(table, "send", 16)[:12] == (0x5010).to_bytes(8, "little") + (9).to_bytes(4, "little")
    with pytest.raises(ValueError, match="offset must be >= 0"):
        device_library.remote_region(table, "recv", -8)


def test_the_exchange_kernel_is_the_seeds_verbatim() -> None:
    if not SEED.exists():
        pytest.skip("the seed text is not beside this checkout")
    seed = SEED.read_text()
    start = seed.index("#include <aboleth/device.cuh>")
    end = seed.index("}", seed.index("aboleth::wait_signal(ctx, my_flag, epoch);")) + 1
    assert seed[start:end] in EXCHANGE.read_text()


@pytest.mark.parametrize("target", TRANSPORTS)
def test_the_seeds_exchange_compiles_against_the_library(tmp_path: Path, target: str) -> None:
    nvcc = nvcc_or_skip()
    library = device_library.build(target, tmp_path / "library", nvcc=nvcc)
    assert library.archive is not None and library.archive.stat().st_size > 0
    include = str(library.include_dir)
    common = [nvcc, "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-I", include]

    def run(*arguments: str) -> None:
        completed = subprocess.run([*common, *arguments], capture_output=True, text=True)
        assert completed.returncode == 0, completed.stdout + completed.stderr

    run("-cubin", str(EXCHANGE), "-o", str(tmp_path / "exchange.cubin"))
    run("-rdc=true", "-DABOLETH_DEVICE_EXTERN", "-c", str(EXCHANGE), "-o", str(tmp_path / "exchange.o"))
    linked = tmp_path / "exchange_linked.cubin"
    run("-dlink", "-cubin", str(tmp_path / "exchange.o"), str(library.archive), "-o", str(linked))
    assert linked.stat().st_size > 0
    # The linked module holds the seed's kernel and the library's operations it calls.
    ptx = tmp_path / "exchange.ptx"
    run("-ptx", str(EXCHANGE), "-o", str(ptx))
    assert re.search(r"\.entry _Z8exchangeN7aboleth13DeviceContext", ptx.read_text())


@pytest.mark.parametrize("target", TRANSPORTS)
def test_the_benchmarks_tier1_kernel_compiles_against_the_archive(tmp_path: Path, target: str) -> None:
    """experiments/bench/tier1_alltoall.cu, as run.sh builds it (the link into a shared library
    needs the CUDA runtime's static libraries, which only the GPU machine has)."""
    nvcc = nvcc_or_skip()
    library = device_library.write(target, tmp_path / "library")
    completed = subprocess.run(
        [nvcc, "-O3", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-rdc=true", "-Xcompiler", "-fPIC",
         "-DABOLETH_DEVICE_EXTERN", "-I", str(library.include_dir), "-c",
         str(REPOSITORY / "experiments" / "bench" / "tier1_alltoall.cu"), "-o", str(tmp_path / "tier1.o")],
        capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_layouts_for_gpu_checks_round_trip_and_name_bad_fields() -> None:
    # What tests/gpu/tier1_mlx5_wqes.py builds its stand-in NIC with: aboleth-abi's layouts.
    handle = _aboleth.layout_bytes("EndpointHandle", {"transport": 1, "qpn": 0x1234, "sq_buffer_address": 1 << 40})
    assert len(handle) == 128
    fields = _aboleth.layout_fields("EndpointHandle", handle)
    assert (fields["transport"], fields["qpn"], fields["sq_buffer_address"], fields["peer_rank"]) == (1, 0x1234,
                                                                                                    1 << 40, 0)
    # Big-endian mlx5 fields read as numbers.
    record = _aboleth.layout_fields("Mlx5DoorbellRecord", bytes([0, 0, 0, 0, 0, 0, 0, 5]))
    assert record == {"receive_counter": 0, "send_counter": 5}
    with pytest.raises(ValueError, match='no layout "Nope"'):
        _aboleth.layout_bytes("Nope", {})
    with pytest.raises(ValueError, match='EndpointHandle has no field "qpm"'):
        _aboleth.layout_bytes("EndpointHandle", {"qpm": 1})
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        _aboleth.layout_bytes("EndpointHandle", {"qpn": 1 << 40})
    with pytest.raises(ValueError, match="is 8 bytes, not 7"):
        _aboleth.layout_fields("Mlx5DoorbellRecord", bytes(7))
    with pytest.raises(ValueError, match="no WQE at basic block 0: ds 0"):
        _aboleth.decode_mlx5_wqe_in_ring(bytes(64 * 64), 64, 0)
