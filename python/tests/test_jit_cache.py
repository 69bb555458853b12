"""Configuration changes recompile: a ``@triton.jit`` kernel launched (here: warmed up, which is
``JITFunction.run`` without the launch) under one ``compilation()`` configuration and then under
another is compiled again, and the same configuration still hits the in-memory cache.

Triton 3.6 keys ``JITFunction.device_caches`` by specialization and options only; without the
bridge's per-configuration caches the second configuration would silently reuse the first one's
binary (an ablation would compare a binary with itself). ``JITFunction.run`` needs an active
driver for the device, the stream and the target: a stand-in reports device 0 and sm_90, which
is all that compiling on the CPU needs.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import MockTensor

import aboleth
import seed_kernels
from test_language import SEED_CONSTEXPRS


class _CompileOnlyDriver:
    """What ``JITFunction.run(warmup=True)`` asks of the active driver."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> Any:
        raise RuntimeError("no torch device in the CPU tests")


@pytest.fixture
def compile_only_driver():
    # Put back whatever was active (on the CPU: nothing; `reset_active` would look for a GPU).
    previous = driver._active
    driver.set_active(_CompileOnlyDriver())
    try:
        yield
    finally:
        driver._active = previous


def warm_up_seed(kernel: Any) -> Any:
    """``kernel.warmup`` with the seed's arguments: dtypes stand for tensors (pointers), and
    integers of the widths of the seed's signature (not 1, which Triton would specialize)."""
    int64 = MockTensor(triton.language.int64)
    # endpoints, recv, flags, send, send_key, my_flags, epoch (positional: only those are wrapped).
    arguments = (int64, int64, int64, 2**40 + 8, 7, int64, 2**40 + 3)
    return kernel.warmup(*arguments, **SEED_CONSTEXPRS, grid=(1,))


def ptx_of(compiled: Any) -> str:
    return compiled.asm["ptx"]


def test_a_kernel_warmed_up_under_another_configuration_is_compiled_again(compile_only_driver, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    # A JIT function of its own: no other test has warmed it up or remembered it.
    kernel = triton.jit(seed_kernels.alltoall.fn)
    stages: List[Any] = []
    original = aboleth.hook._run_stage

    def counting_stage(text: str, options, *, source_name: str):
        stages.append(options)
        return original(text, options, source_name=source_name)

    monkeypatch.setattr(aboleth.hook, "_run_stage", counting_stage)
    with aboleth.compilation(target="p2p"):
        planned = warm_up_seed(kernel)
    with aboleth.compilation(target="p2p", passes_off=True):
        library = warm_up_seed(kernel)
    assert len(stages) == 2, "the second configuration must run the aboleth stage again"
    assert stages[1].passes_off and not stages[0].passes_off
    assert library is not planned and ptx_of(library) != ptx_of(planned)
    # The same configuration again: the in-memory kernel, no compilation.
    with aboleth.compilation(target="p2p"):
        again = warm_up_seed(kernel)
    assert again is planned and len(stages) == 2
    with aboleth.compilation(target="p2p", passes_off=True):
        assert warm_up_seed(kernel) is library
    assert len(stages) == 2
    # After the last block the last configuration's kernel stays launchable.
    assert warm_up_seed(kernel) is library


def test_kernels_without_aboleth_calls_keep_one_cache(compile_only_driver, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    @triton.jit
    def plain(x_pointer, BLOCK: triton.language.constexpr):
        offsets = triton.language.arange(0, BLOCK)
        triton.language.store(x_pointer + offsets, offsets)

    with aboleth.compilation(target="p2p"):
        first = plain.warmup(MockTensor(triton.language.int32), BLOCK=64, grid=(1,))
    assert plain not in aboleth.hook._stage_functions
    with aboleth.compilation(target="proxy"):
        # The disk cache directory is salted per configuration, but the in-memory cache of a
        # kernel without aboleth calls is kept: its binary cannot depend on the configuration.
        assert plain.warmup(MockTensor(triton.language.int32), BLOCK=64, grid=(1,)) is first


def test_uninstall_gives_the_post_compile_hook_slot_back():
    def other_tool(**kwargs):
        return None

    triton.knobs.runtime.jit_post_compile_hook = other_tool
    try:
        aboleth.install(target="p2p")
        assert triton.knobs.runtime.jit_post_compile_hook is not other_tool
        aboleth.uninstall()
        assert triton.knobs.runtime.jit_post_compile_hook is other_tool
    finally:
        triton.knobs.runtime.jit_post_compile_hook = None


def test_hook_slots_emptied_while_dormant_are_taken_back(compile_only_driver, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = triton.jit(seed_kernels.alltoall.fn)
    with aboleth.compilation(target="p2p"):
        pass  # dormant from here
    # What knobs.runtime.reset(), a scope() entered before the installation or a profiler
    # restoring None does to the slots.
    knobs.runtime.add_stages_inspection_hook = None
    knobs.runtime.jit_post_compile_hook = None
    with aboleth.compilation(target="p2p"):
        p2p = warm_up_seed(kernel)
    with aboleth.compilation(target="proxy"):
        proxy = warm_up_seed(kernel)
    assert hasattr(p2p.metadata, "aboleth") and hasattr(proxy.metadata, "aboleth")
    # Without the post-compile hook back, the proxy block would find the p2p kernel in memory.
    assert proxy is not p2p and ptx_of(proxy) != ptx_of(p2p)
