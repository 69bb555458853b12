"""The host API (aboleth.World, aboleth.TcpStoreBootstrap; python/aboleth/runtime.py and
crates/aboleth-python/src/runtime.rs) on a machine without a GPU, a CUDA driver or torch: imports,
the bootstrap's environment errors and a one-rank rendezvous, the error for a missing CUDA driver,
argument validation, the tensor rules of register() (with stand-in tensors), the device-table
view, and which target compilation() picks. The GPU paths run in tests/gpu/seed_alltoall.py."""

from __future__ import annotations

import ctypes
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import aboleth
from aboleth import _aboleth
from aboleth import runtime

BOOTSTRAP_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def cuda_driver_present() -> bool:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


@pytest.fixture
def bootstrap_env(monkeypatch):
    """A one-rank job on a free port, with a short bootstrap timeout; returns a setter."""
    for name in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "ABOLETH_JOB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    values = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "1",
              "ABOLETH_BOOTSTRAP_TIMEOUT_S": "10"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def bootstrap(bootstrap_env):
    boot = aboleth.TcpStoreBootstrap.from_env()
    yield boot
    boot.close()


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def test_the_seed_names_are_exported():
    assert aboleth.TcpStoreBootstrap is _aboleth.TcpStoreBootstrap
    assert aboleth.World is runtime.World
    for name in ("World", "TcpStoreBootstrap", "RegionTable", "Registration", "Region", "LocalRegion"):
        assert name in aboleth.__all__
    assert callable(aboleth.TcpStoreBootstrap.from_env)


def test_import_does_not_need_torch():
    # torch = None in sys.modules makes every `import torch` fail: importing aboleth must not try.
    code = ("import sys; sys.modules['torch'] = None; import aboleth; "
            "assert aboleth.World and aboleth.TcpStoreBootstrap; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------------
# TcpStoreBootstrap
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", BOOTSTRAP_VARIABLES)
def test_from_env_names_a_missing_variable(bootstrap_env, missing):
    bootstrap_env.delenv(missing)
    with pytest.raises(ValueError, match=f"environment variable {missing} is not set"):
        aboleth.TcpStoreBootstrap.from_env()


@pytest.mark.parametrize("name, value", [("RANK", "1"), ("RANK", "-1"), ("MASTER_PORT", "port"),
                                         ("WORLD_SIZE", "0"), ("MASTER_ADDR", " ")])
def test_from_env_names_an_invalid_variable(bootstrap_env, name, value):
    bootstrap_env.setenv(name, value)
    with pytest.raises(ValueError, match=f"environment variable {name}=.* is invalid"):
        aboleth.TcpStoreBootstrap.from_env()


def test_a_one_rank_rendezvous_and_close(bootstrap):
    assert (bootstrap.rank, bootstrap.world_size, bootstrap.available) == (0, 1, True)
    assert "rank=0" in repr(bootstrap)
    bootstrap.close()
    assert not bootstrap.available
    bootstrap.close()  # a second close does nothing


def test_a_rendezvous_given_in_code_needs_no_environment(bootstrap_env):
    for name in BOOTSTRAP_VARIABLES:
        bootstrap_env.delenv(name)
    port = free_port()
    boot = aboleth.TcpStoreBootstrap.connect("127.0.0.1", port, 0, 1)
    assert (boot.rank, boot.world_size, boot.available) == (0, 1, True)
    boot.close()


@pytest.mark.parametrize("arguments, message", [(("", 29500, 0, 1), "master_address"),
                                                (("127.0.0.1", 0, 0, 1), "master_port"),
                                                (("127.0.0.1", 29500, 1, 1), "rank"),
                                                (("127.0.0.1", 29500, 0, 0), "world_size")])
def test_a_rendezvous_given_in_code_names_a_bad_argument(arguments, message):
    with pytest.raises(ValueError, match=f"^{message}=.* is invalid"):
        aboleth.TcpStoreBootstrap.connect(*arguments)


def test_a_rank_that_never_arrives_is_a_timeout_named_and_the_gil_is_released(bootstrap_env):
    bootstrap_env.setenv("WORLD_SIZE", "2")
    bootstrap_env.setenv("ABOLETH_BOOTSTRAP_TIMEOUT_S", "1")
    ticks = []
    done = threading.Event()

    def count() -> None:
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with pytest.raises(TimeoutError, match=r"rank 1 of 2 did not arrive"):
            aboleth.TcpStoreBootstrap.from_env()
    finally:
        done.set()
        counter.join()
    # About 1 s of waiting: a thread that needs the GIL ran many times meanwhile.
    assert len(ticks) > 50


# ---------------------------------------------------------------------------------------------
# World: construction
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(cuda_driver_present(), reason="this machine has a CUDA driver")
def test_world_without_a_cuda_driver_says_so(bootstrap):
    with pytest.raises(RuntimeError, match="the CUDA driver library was not found.*needs an NVIDIA GPU"):
        aboleth.World(0, 1, device=0, bootstrap=bootstrap)
    assert not bootstrap.available  # the World took it over (and closed it when it failed)


def test_world_rank_and_size_must_agree_with_the_bootstrap(bootstrap):
    with pytest.raises(ValueError, match=r"World\(rank=0, size=2\) does not match its bootstrap \(rank 0 of 1\)"):
        aboleth.World(0, 2, device=0, bootstrap=bootstrap)


@pytest.mark.skipif(cuda_driver_present(), reason="this machine has a CUDA driver")
def test_a_bootstrap_serves_one_world(bootstrap):
    with pytest.raises((RuntimeError, ValueError)):
        aboleth.World(0, 1, device=0, bootstrap=bootstrap)  # no driver here
    with pytest.raises(ValueError, match="already serves a World or was closed"):
        aboleth.World(0, 1, device=0, bootstrap=bootstrap)


@pytest.mark.parametrize("arguments, error, message", [
    ((1, 1), ValueError, r"World\(rank=1\) must be below size=1"),
    ((-1, 1), ValueError, r"World\(rank\) must be >= 0"),
    (("0", 1), TypeError, r"World\(rank\) must be an int, got str"),
    ((0, 0), ValueError, r"World\(size\) must be at least 1"),
    ((0, True), TypeError, r"World\(size\) must be an int, got bool"),
])
def test_world_checks_rank_and_size(bootstrap, arguments, error, message):
    with pytest.raises(error, match=message):
        aboleth.World(*arguments, device=0, bootstrap=bootstrap)
    assert bootstrap.available  # refused before taking the bootstrap over


def test_world_needs_a_tcpstore_bootstrap():
    with pytest.raises(TypeError, match=r"World\(bootstrap=...\) must be an aboleth.TcpStoreBootstrap"):
        aboleth.World(0, 1, device=0)
    with pytest.raises(TypeError, match="got dict"):
        aboleth.World(0, 1, device=0, bootstrap={"rank": 0})


@pytest.mark.parametrize("device, error, message", [
    ("cuda", TypeError, r"World\(device=...\) must be an int, got str"),
    (-1, ValueError, r"World\(device=...\) must be >= 0"),
])
def test_world_checks_the_device(bootstrap, device, error, message):
    with pytest.raises(error, match=message):
        aboleth.World(0, 1, device=device, bootstrap=bootstrap)


def test_a_cpu_torch_device_is_refused(bootstrap):
    class CpuDevice:
        type, index = "cpu", None

        def __str__(self) -> str:
            return "cpu"

    with pytest.raises(TypeError, match="must be a CUDA device, got cpu"):
        aboleth.World(0, 1, device=CpuDevice(), bootstrap=bootstrap)


# ---------------------------------------------------------------------------------------------
# World methods over a stand-in for the Rust World (no GPU here)
# ---------------------------------------------------------------------------------------------


class FakeTensor:
    """What tensor_span reads of a torch tensor."""

    def __init__(self, is_cuda: bool = True, contiguous: bool = True, numel: int = 64, element_size: int = 4,
                 address: int = 0x7F0000000000, device: str = "cuda:0") -> None:
        self.is_cuda, self._contiguous, self._numel = is_cuda, contiguous, numel
        self._element_size, self._address, self.device = element_size, address, device

    def data_ptr(self) -> int:
        return self._address

    def is_contiguous(self) -> bool:
        return self._contiguous

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self._element_size


class FakeRawWorld:
    """Records what aboleth.World passes to the Rust World."""

    def __init__(self, rank: int = 0, world_size: int = 2) -> None:
        self.rank, self.world_size, self.device = rank, world_size, 0
        self.calls: List[Tuple[str, Any]] = []
        self.transports = ["p2p"] * world_size

    def connect_all(self, kind: str) -> List[str]:
        self.calls.append(("connect_all", kind))
        return list(self.transports)

    def register(self, address: int, length_bytes: int) -> Any:
        self.calls.append(("register", (address, length_bytes)))
        return ("registration", address, length_bytes)

    def exchange_regions(self, items: Any) -> Any:
        self.calls.append(("exchange_regions", items))
        return None

    def close(self) -> None:
        self.calls.append(("close", None))


def fake_world(rank: int = 0, world_size: int = 2) -> Tuple[aboleth.World, FakeRawWorld]:
    raw = FakeRawWorld(rank, world_size)
    world = aboleth.World.__new__(aboleth.World)
    world._attach(raw)
    return world, raw


def test_register_passes_the_tensors_address_and_bytes_and_keeps_it():
    world, raw = fake_world()
    tensor = FakeTensor(numel=96, element_size=8, address=0x7F0000001000)
    assert world.register(tensor) == ("registration", 0x7F0000001000, 768)
    assert raw.calls == [("register", (0x7F0000001000, 768))]
    assert world._registered == [tensor]
    world.close()
    assert world._registered == [] and raw.calls[-1] == ("close", None)


@pytest.mark.parametrize("tensor, error, message", [
    (FakeTensor(is_cuda=False, device="cpu"), TypeError,
     r"register\(\) takes a tensor in GPU memory, but this one is on cpu"),
    (FakeTensor(contiguous=False), TypeError, r"register\(\) takes a contiguous tensor, but this one is a non-contiguous view"),
    (bytearray(16), TypeError, r"register\(\) takes a torch tensor in GPU memory, got bytearray"),
    (FakeTensor(numel=0), ValueError, r"register\(\) was given an empty tensor"),
])
def test_register_refuses_what_peers_cannot_write_into(tensor, error, message):
    world, raw = fake_world()
    with pytest.raises(error, match=message):
        world.register(tensor)
    assert raw.calls == []


def test_region_checks_its_arguments_before_the_runtime():
    world, raw = fake_world()
    with pytest.raises(TypeError, match=r"region\(registration\) must be what World.register returned"):
        world.region("send", ("registration", 0, 16), offset=0, length=8)
    with pytest.raises(TypeError, match=r"region\(name\) must be a str"):
        world.region(b"send", None)
    assert raw.calls == []


def test_exchange_regions_takes_a_dict_of_regions():
    world, raw = fake_world()
    with pytest.raises(TypeError, match=r"exchange_regions\(\) takes a dict of name -> world.region"):
        world.exchange_regions([("send", None)])
    with pytest.raises(TypeError, match="'send': int"):
        world.exchange_regions({"send": 3})
    assert raw.calls == []


def test_connect_all_checks_the_kind_type_and_records_the_transports():
    world, raw = fake_world()
    with pytest.raises(TypeError, match=r"connect_all\(kind\) must be one of 'rdma', 'proxy', 'p2p', 'efa', 'ionic', 'auto'"):
        world.connect_all(3)
    assert world.transports is None
    assert world.connect_all("p2p") == ["p2p", "p2p"]
    assert world.transports == ["p2p", "p2p"] and raw.calls == [("connect_all", "p2p")]


def test_compilation_needs_a_connected_world():
    world, _ = fake_world()
    with pytest.raises(RuntimeError, match=r"needs a connected World: call connect_all\(...\) first"):
        world.compilation()


def test_compilation_is_aboleth_compilation_for_p2p():
    world, _ = fake_world()
    world.connect_all("p2p")
    assert world.compilation_target() == "p2p"
    with world.compilation() as config:
        assert config.target == "p2p" and aboleth.current_config() == config
    assert not aboleth.is_installed()
    with world.compilation(passes_off=True) as config:
        assert config.passes_off


def test_compilation_gives_one_block_per_configuration_until_the_world_reconnects():
    world, raw = fake_world(rank=0, world_size=2)
    world.connect_all("p2p")
    block = world.compilation()
    assert world.compilation() is block and world.compilation(passes_off=True) is not block
    assert world.compilation(disabled_passes=()) is block
    raw.transports = ["p2p", "proxy"]
    world.connect_all("auto")
    with world.compilation() as config:
        assert config.target == "proxy"
    with pytest.raises(TypeError, match="passes_off must be a bool"):
        world.compilation(passes_off=None)


def test_a_one_rank_world_compiles_for_p2p():
    world, raw = fake_world(rank=0, world_size=1)
    world.connect_all("auto")
    assert world.compilation_target() == "p2p"


def test_a_proxy_world_compiles_for_proxy():
    world, raw = fake_world(rank=0, world_size=2)
    raw.transports = ["p2p", "proxy"]
    world.connect_all("auto")
    assert world.compilation_target() == "proxy"


def test_an_rdma_world_compiles_for_mlx5():
    # connect_all returns mlx5 only over the software NIC (ABOLETH_RDMA_DEVICE=soft).
    world, raw = fake_world(rank=0, world_size=2)
    raw.transports = ["p2p", "mlx5"]
    world.connect_all("auto")
    assert world.compilation_target() == "mlx5"


@pytest.mark.parametrize("transports, message", [
    (["p2p", "efa"], r"the runtime has no efa transport to run kernels yet"),
    (["p2p", "p2p", "proxy"], r"over several transports \(0: p2p, 1: p2p, 2: proxy\)"),
])
def test_compilation_refuses_transports_without_code_generation(transports, message):
    world, raw = fake_world(rank=0, world_size=len(transports))
    raw.transports = transports
    world.connect_all("auto")
    with pytest.raises(NotImplementedError, match=message):
        world.compilation()
    assert not aboleth.is_installed()


# ---------------------------------------------------------------------------------------------
# Device tables
# ---------------------------------------------------------------------------------------------


class FakeTable:
    address, entry_count, entry_bytes = 0x7F0000002000, 4, 32


def test_a_device_table_is_exposed_as_int64_words_per_entry():
    owner = object()
    view = runtime._CudaArray(FakeTable(), owner)
    assert view.owner is owner
    assert view.__cuda_array_interface__ == {"shape": (4, 4), "typestr": "<i8", "data": (0x7F0000002000, False),
                                             "strides": None, "version": 2}


def test_a_table_entry_must_be_whole_words():
    class Odd(FakeTable):
        entry_bytes = 12

    with pytest.raises(RuntimeError, match="not a multiple of 8"):
        runtime._CudaArray(Odd(), None)


def test_the_rust_classes_have_no_python_constructor():
    for cls in (_aboleth.Registration, _aboleth.Region, _aboleth.LocalRegion, _aboleth.DeviceTable,
                _aboleth.ExchangedRegions):
        with pytest.raises(TypeError):
            cls()


class FakeProxyWorld(FakeRawWorld):
    """A raw World whose proxy thread has run: proxy_statistics as the extension returns it."""

    def proxy_statistics(self) -> Dict[str, int]:
        self.calls.append(("proxy_statistics", None))
        return {"commands_executed": 3, "copy_ns": 1500, "idle_ns": 10}


def test_proxy_statistics_is_the_runtime_dict_with_integer_values():
    raw = FakeProxyWorld()
    world = aboleth.World.__new__(aboleth.World)
    world._attach(raw)
    statistics = world.proxy_statistics()
    assert statistics == {"commands_executed": 3, "copy_ns": 1500, "idle_ns": 10}
    assert all(type(value) is int for value in statistics.values())
    assert raw.calls == [("proxy_statistics", None)]
    # A copy: changing it does not change what the next call reads.
    statistics["copy_ns"] = 0
    assert world.proxy_statistics()["copy_ns"] == 1500
