"""aboleth.install / aboleth.compilation: the `aboleth` stage after `ttir`, its fast path, the
chaining with other hooks, the cache salt, and (with a substitute for the Rust call) the path
that parses new TTIR back into the module."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any, Dict, List

import pytest
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import Language

import aboleth
import aboleth.hook as hook_module
from aboleth import _aboleth
import seed_kernels
from helpers import StopCompilation, capture_stage_output, chain_hook, compile_kernel
from test_language import SEED_CONSTEXPRS, SEED_SIGNATURE


@triton.jit
def vector_add(x_pointer, y_pointer, out_pointer, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_pointer + offsets, mask=mask)
    y = tl.load(y_pointer + offsets, mask=mask)
    tl.store(out_pointer + offsets, x + y, mask=mask)


VECTOR_ADD = (vector_add, {"x_pointer": "*fp32", "y_pointer": "*fp32", "out_pointer": "*fp32", "n_elements": "i32",
                           "BLOCK": "constexpr"}, {"BLOCK": 256})


@triton.jit
def matmul(a_pointer, b_pointer, c_pointer, K, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    accumulator = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        a = tl.load(a_pointer + offsets[:, None] * K + (k + offsets)[None, :])
        b = tl.load(b_pointer + (k + offsets)[:, None] * BLOCK + offsets[None, :])
        accumulator = tl.dot(a, b, accumulator)
    tl.store(c_pointer + offsets[:, None] * BLOCK + offsets[None, :], accumulator)


MATMUL = (matmul, {"a_pointer": "*fp16", "b_pointer": "*fp16", "c_pointer": "*fp32", "K": "i32",
                   "BLOCK": "constexpr"}, {"BLOCK": 64})


# ---------------------------------------------------------------------------------------------
# The stage on kernels with aboleth calls: compiled for every transport, the Rust call's input
# ---------------------------------------------------------------------------------------------


def ptx_lines(kernel: Any) -> List[str]:
    """The PTX lines, without the failure record of a timed-out bounded wait (it has its own
    release store and atomic, which run only when a wait gives up)."""
    return [line.strip() for line in kernel.asm["ptx"].splitlines() if "%ab_rec" not in line]


def test_the_seed_kernel_compiles_to_cubin_for_p2p_with_the_planned_orderings_only():
    aboleth.install(target="p2p")
    kernel = compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    assert kernel.asm["cubin"]
    ptx = "\n".join(ptx_lines(kernel))
    # The signal is one release store by one elected thread; the wait one acquire poll.
    assert ptx.count("st.release.sys.global.u64") == 1
    assert "setp.eq.u32 %ab_leader, %ab_tid, 0;" in ptx
    assert ptx.count("ld.acquire.sys.global.u64") >= 1 and "ld.volatile" not in ptx  # LLVM may peel the poll
    # The wait is bounded: it reads %globaltimer and records a failure in the log.
    assert "%globaltimer" in ptx and "exit;" in kernel.asm["ptx"]
    # Nothing stronger than planned: no fences, no volatile stores.
    assert "fence.sc.sys" not in ptx and "fence.acq_rel" not in ptx and "st.volatile" not in ptx
    summary = json.loads(kernel.metadata.aboleth) if isinstance(kernel.metadata.aboleth, str) else kernel.metadata.aboleth
    assert summary["changed"] is True


def test_the_library_style_seed_kernel_pays_the_fences_a_library_pays():
    aboleth.install(target="p2p", passes_off=True)
    kernel = compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    ptx = "\n".join(ptx_lines(kernel))
    assert "st.release" not in ptx and "ld.acquire" not in ptx
    assert "st.volatile.global.u64" in ptx and "ld.volatile.global.u64" in ptx
    assert ptx.count("fence.sc.sys") == 2  # before the flag store, and the wait on the put (quiet)
    assert ptx.count("fence.acq_rel.gpu") == 1  # after the volatile poll (the poll loop may be peeled)


def test_the_seed_kernel_compiles_to_cubin_for_mlx5():
    aboleth.install(target="mlx5")
    kernel = compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    assert kernel.asm["cubin"]
    ptx = "\n".join(ptx_lines(kernel))
    # One owner: no reservation atomic; one doorbell record (release) and one UAR doorbell.
    assert ptx.count("st.release.sys.global.b32") == 1
    assert ptx.count("st.mmio.relaxed.sys.global.b64") == 1
    assert "atom.relaxed.gpu.global.add" not in ptx


def test_the_stage_receives_the_ttir_stage_output():
    captured: Dict[str, Any] = {}
    capture_stage_output("ttir", captured)
    aboleth.install(target="proxy")
    seen: Dict[str, Any] = {}

    def fake_run_stage(text: str, options, *, source_name: str):
        seen["text"], seen["options"], seen["source_name"] = text, options, source_name
        raise NotImplementedError("stop here")

    original = hook_module._run_stage
    hook_module._run_stage = fake_run_stage
    try:
        with pytest.raises(NotImplementedError, match="stop here"):
            compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    finally:
        hook_module._run_stage = original
    assert seen["text"] == captured["ttir"]
    options = seen["options"]
    assert isinstance(options, _aboleth.PipelineOptions)
    assert (options.target, options.passes_off, options.disabled_passes, options.immediate_signals,
            options.packet_signals) == ("proxy", False, [], False, False)
    assert seen["source_name"] == "alltoall.ttir"


# ---------------------------------------------------------------------------------------------
# Fast path and identity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel, signature, constexprs", [VECTOR_ADD, MATMUL], ids=["vector_add", "matmul"])
def test_a_kernel_without_aboleth_calls_compiles_to_the_same_ptx(kernel, signature, constexprs):
    options = {"num_stages": 3} if kernel is matmul else None
    without = compile_kernel(kernel, signature, constexprs, options)
    aboleth.install(target="mlx5", disabled_passes=["batch-commands"])
    with_hook = compile_kernel(kernel, signature, constexprs, options)
    assert with_hook.asm["ptx"] == without.asm["ptx"]
    assert with_hook.asm["cubin"] == without.asm["cubin"]
    # The stage ran, right after ttir, and returned its input.
    assert list(with_hook.asm) == ["source", "ttir", "aboleth", "ttgir", "llir", "ptx", "cubin"]
    assert with_hook.asm["aboleth"] == with_hook.asm["ttir"]
    assert "aboleth" not in without.asm
    # Fast path: no Rust call, no metadata.
    assert "aboleth" not in with_hook.metadata._asdict()


def test_the_fast_path_returns_the_module_object_untouched(monkeypatch):
    def no_rust_call(text, options, *, source_name):
        raise AssertionError("the fast path must not call the Rust stage")

    monkeypatch.setattr(hook_module, "_run_stage", no_rust_call)
    aboleth.install(target="p2p")
    captured: Dict[str, Any] = {}
    capture_stage_output("aboleth", captured, stop=True)
    with pytest.raises(StopCompilation):
        compile_kernel(*VECTOR_ADD)
    assert captured["aboleth.module"] is captured["aboleth.input"]
    assert "aboleth" not in captured["aboleth.metadata"]


# ---------------------------------------------------------------------------------------------
# The slow path's plumbing, with a substitute for the Rust call
# ---------------------------------------------------------------------------------------------


def test_new_ttir_from_the_rust_side_is_parsed_back_and_the_summary_stored(monkeypatch):
    def rename_wait_to_fence(text: str, options, *, source_name: str):
        assert text.count('"__aboleth_v1__wait"') == 1
        return text.replace('"__aboleth_v1__wait"', '"__aboleth_v1__fence"'), '{"changed": true}'

    monkeypatch.setattr(hook_module, "_run_stage", rename_wait_to_fence)
    aboleth.install(target="mlx5")
    captured: Dict[str, Any] = {}
    capture_stage_output("aboleth", captured, stop=True)
    with pytest.raises(StopCompilation):
        compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    assert captured["aboleth.module"] is not captured["aboleth.input"]
    assert '"__aboleth_v1__wait"' not in captured["aboleth"]
    assert captured["aboleth"].count('"__aboleth_v1__fence"') == 1
    assert captured["aboleth.module"].context is captured["aboleth.input"].context
    assert captured["aboleth.metadata"]["aboleth"] == '{"changed": true}'


def test_unchanged_text_from_the_rust_side_keeps_the_module_and_stores_the_summary(monkeypatch):
    monkeypatch.setattr(hook_module, "_run_stage", lambda text, options, *, source_name: (text, '{"changed": false}'))
    aboleth.install(target="mlx5")
    captured: Dict[str, Any] = {}
    capture_stage_output("aboleth", captured, stop=True)
    with pytest.raises(StopCompilation):
        compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    assert captured["aboleth.module"] is captured["aboleth.input"]
    assert captured["aboleth.metadata"]["aboleth"] == '{"changed": false}'


def test_ttir_that_triton_cannot_parse_is_reported(monkeypatch):
    monkeypatch.setattr(hook_module, "_run_stage", lambda text, options, *, source_name: ("module { bogus.op }", "{}"))
    aboleth.install(target="mlx5")
    with pytest.raises(RuntimeError, match="aboleth: Triton cannot parse the TTIR returned by the aboleth stage"):
        compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)


def test_the_summary_survives_in_the_compiled_kernel_metadata_and_cache_hits(monkeypatch):
    """A kernel whose aboleth calls the substitute removes compiles to a cubin; the summary is in
    CompiledKernel.metadata, also when it comes from the cache."""

    @triton.jit
    def one_call(endpoints, out):
        ep = aboleth_language.endpoint(endpoints, 0)
        aboleth_language.fence(ep)
        tl.store(out, 1)

    def drop_calls(text: str, options, *, source_name: str):
        kept = [line for line in text.splitlines() if 'libname = "aboleth"' not in line]
        return "\n".join(kept) + "\n", '{"removed": 2}'

    monkeypatch.setattr(hook_module, "_run_stage", drop_calls)
    aboleth.install(target="mlx5")
    signature = {"endpoints": "*i64", "out": "*i32"}
    first = compile_kernel(one_call, signature)
    assert first.metadata.aboleth == '{"removed": 2}'
    assert 'libname = "aboleth"' not in first.asm["aboleth"]
    again = compile_kernel(one_call, signature)  # a cache hit: the hook is not called
    assert again.metadata.aboleth == '{"removed": 2}'


import aboleth.language as aboleth_language  # noqa: E402  (used by the kernel above)

# ---------------------------------------------------------------------------------------------
# Chaining
# ---------------------------------------------------------------------------------------------


def test_the_hook_chains_to_a_previously_installed_hook():
    calls: List[List[str]] = []
    previous = chain_hook(lambda stages: calls.append(list(stages)))
    aboleth.install(target="mlx5")
    assert knobs.runtime.add_stages_inspection_hook is not previous
    kernel = compile_kernel(*VECTOR_ADD)
    # The previous hook ran first (before the aboleth stage was added), exactly once.
    assert calls == [["ttir", "ttgir", "llir", "ptx", "cubin"]]
    assert "aboleth" in kernel.asm
    assert aboleth.uninstall() is True
    assert knobs.runtime.add_stages_inspection_hook is previous
    assert aboleth.uninstall() is False


def test_a_hook_chained_on_top_of_aboleth_keeps_working_after_uninstall():
    aboleth.install(target="mlx5")
    seen: List[List[str]] = []
    on_top = chain_hook(lambda stages: seen.append(list(stages)))
    compile_kernel(*VECTOR_ADD)
    assert seen[-1] == ["ttir", "aboleth", "ttgir", "llir", "ptx", "cubin"]
    aboleth.uninstall()
    assert knobs.runtime.add_stages_inspection_hook is on_top
    kernel = compile_kernel(*VECTOR_ADD)
    assert seen[-1] == ["ttir", "ttgir", "llir", "ptx", "cubin"]
    assert "aboleth" not in kernel.asm


def test_installing_twice_does_not_stack_hooks():
    aboleth.install(target="mlx5")
    first = knobs.runtime.add_stages_inspection_hook
    aboleth.install(target="p2p", passes_off=True)
    assert knobs.runtime.add_stages_inspection_hook is first
    stages = {name: None for name in ["ttir", "ttgir", "llir", "ptx", "cubin"]}
    first(object(), stages, None, Language.TRITON, 90)
    assert list(stages) == ["ttir", "aboleth", "ttgir", "llir", "ptx", "cubin"]
    assert stages["aboleth"].keywords["config"] == aboleth.Config(target="p2p", passes_off=True)


def test_other_languages_are_left_alone():
    aboleth.install(target="mlx5")
    gluon_stages = {name: None for name in ["ttgir", "llir", "ptx", "cubin"]}
    knobs.runtime.add_stages_inspection_hook(object(), gluon_stages, None, Language.GLUON, 90)
    assert list(gluon_stages) == ["ttgir", "llir", "ptx", "cubin"]


def test_the_zero_argument_call_returns_a_cache_key():
    config = aboleth.install(target="mlx5")
    assert knobs.runtime.add_stages_inspection_hook() == ("aboleth", aboleth.cache_salt(config))
    aboleth.uninstall()
    chain_hook(lambda stages: None)  # its zero-argument answer is ("test", "0")
    config = aboleth.install(target="proxy")
    expected = hashlib.sha256(f"0\0{aboleth.cache_salt(config)}".encode()).hexdigest()
    assert knobs.runtime.add_stages_inspection_hook() == ("test+aboleth", expected)


# ---------------------------------------------------------------------------------------------
# Configuration and the cache salt
# ---------------------------------------------------------------------------------------------


def test_the_cache_salt_differs_across_configurations_and_is_stable_for_one():
    configurations = [
        aboleth.Config(target="mlx5"),
        aboleth.Config(target="proxy"),
        aboleth.Config(target="p2p"),
        aboleth.Config(target="mlx5", passes_off=True),
        aboleth.Config(target="mlx5", disabled_passes=("batch-commands", )),
        aboleth.Config(target="mlx5", disabled_passes=("coalesce-doorbells", )),
        aboleth.Config(target="mlx5", disabled_passes=("batch-commands", "coalesce-doorbells")),
    ]
    salts = [aboleth.cache_salt(config) for config in configurations]
    assert len(set(salts)) == len(salts)
    assert salts == [aboleth.cache_salt(config) for config in configurations]
    # Same meaning, same salt: pass order and duplicates do not matter.
    assert aboleth.cache_salt(aboleth.Config(target="mlx5", disabled_passes=(
        "coalesce-doorbells", "batch-commands", "batch-commands"))) == salts[-1]


def test_the_cache_directory_is_salted_while_installed_and_restored_after():
    base = os.environ["TRITON_CACHE_DIR"]
    assert knobs.cache.dir == base
    config = aboleth.install(target="mlx5")
    assert knobs.cache.dir == os.path.join(base, f"aboleth-{aboleth.cache_salt(config)}")
    other = aboleth.install(target="p2p")
    assert knobs.cache.dir == os.path.join(base, f"aboleth-{aboleth.cache_salt(other)}")
    aboleth.uninstall()
    assert knobs.cache.dir == base
    assert os.environ["TRITON_CACHE_DIR"] == base
    assert "dir" not in vars(knobs.cache)


def test_changing_the_configuration_recompiles_and_the_same_one_hits_the_cache():
    compilations: List[str] = []
    chain_hook(lambda stages: compilations.append(aboleth.current_config().target))
    for target in ["mlx5", "mlx5", "p2p", "mlx5", "p2p", "proxy"]:
        aboleth.install(target=target)
        compile_kernel(*VECTOR_ADD)
    # The hook runs only on a cache miss: once per configuration.
    assert compilations == ["mlx5", "p2p", "proxy"]


def test_bad_configurations_are_rejected_before_anything_changes():
    with pytest.raises(ValueError, match="aboleth: target must be one of mlx5, proxy, p2p, ionic, got 'rdma'"):
        aboleth.install(target="rdma")
    with pytest.raises(TypeError, match="disabled_passes must be a sequence of pass names, not one string"):
        aboleth.install(target="mlx5", disabled_passes="batch-commands")
    with pytest.raises(TypeError, match="passes_off must be a bool"):
        aboleth.install(target="mlx5", passes_off="yes")
    with pytest.raises(TypeError, match="disabled_passes must hold pass names"):
        aboleth.install(target="mlx5", disabled_passes=[3])
    with pytest.raises(TypeError, match="immediate_signals must be a bool, got 'yes'"):
        aboleth.install(target="mlx5", immediate_signals="yes")
    assert not aboleth.is_installed()
    assert knobs.runtime.add_stages_inspection_hook is None


def test_compilation_blocks_nest_and_the_last_one_leaves_the_hook_dormant():
    assert aboleth.current_config() is None
    with aboleth.compilation(target="mlx5") as outer:
        assert aboleth.current_config() == outer
        with aboleth.compilation(target="p2p", passes_off=True) as inner:
            assert aboleth.current_config() == inner
        assert aboleth.current_config() == outer
    assert not aboleth.is_installed() and aboleth.current_config() is None
    # Dormant: still in the slot, but every compilation passes through unchanged.
    assert knobs.runtime.add_stages_inspection_hook is not None
    assert "aboleth" not in compile_kernel(VECTOR_ADD[0], VECTOR_ADD[1], {"BLOCK": 64}).asm
    assert aboleth.uninstall() is True
    assert knobs.runtime.add_stages_inspection_hook is None
    assert "dir" not in vars(knobs.cache)
    explicit = aboleth.install(target="proxy")
    with aboleth.compilation(target="mlx5"):
        assert aboleth.current_config().target == "mlx5"
    assert aboleth.current_config() == explicit


def test_compilation_blocks_may_end_out_of_order():
    first = aboleth.compilation(target="mlx5")
    second = aboleth.compilation(target="p2p")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert aboleth.current_config().target == "p2p"
    second.__exit__(None, None, None)
    assert not aboleth.is_installed()


def test_a_block_around_every_launch_installs_once_and_uninstall_restores(monkeypatch):
    from aboleth import hook

    captures: List[str] = []
    original = hook._SavedCacheDir.capture.__func__

    def counting_capture(cls):
        captures.append(knobs.cache.dir)
        return original(cls)

    monkeypatch.setattr(hook._SavedCacheDir, "capture", classmethod(counting_capture))
    base = os.environ["TRITON_CACHE_DIR"]
    slot = []
    for index in range(50):
        config = aboleth.Config(target="p2p", passes_off=index % 2 == 1)
        with aboleth.compilation(target="p2p", passes_off=config.passes_off):
            assert aboleth.current_config() == config
            assert knobs.cache.dir == os.path.join(base, f"aboleth-{aboleth.cache_salt(config)}")
            slot.append(knobs.runtime.add_stages_inspection_hook)
        assert aboleth.current_config() is None
        # The salted directory is the knob's override only, never the environment's.
        assert os.environ["TRITON_CACHE_DIR"] == base
    assert captures == [base]
    assert all(hook is slot[0] for hook in slot)
    aboleth.uninstall()
    assert knobs.cache.dir == base and "dir" not in vars(knobs.cache)
    assert knobs.runtime.add_stages_inspection_hook is None


def test_a_block_after_the_cache_directory_moved_uses_the_new_one(tmp_path, monkeypatch):
    with aboleth.compilation(target="p2p"):
        pass
    # Moved by the knob while dormant: the next block salts under it, uninstall gives it back.
    moved = str(tmp_path / "moved-by-the-knob")
    knobs.cache.dir = moved
    with aboleth.compilation(target="p2p") as config:
        assert knobs.cache.dir == os.path.join(moved, f"aboleth-{aboleth.cache_salt(config)}")
    aboleth.uninstall()
    assert knobs.cache.dir == moved
    del knobs.cache.dir
    # Moved by the environment once uninstalled: the next installation starts from it.
    elsewhere = str(tmp_path / "moved-by-the-environment")
    monkeypatch.setenv("TRITON_CACHE_DIR", elsewhere)
    with aboleth.compilation(target="p2p") as config:
        assert knobs.cache.dir == os.path.join(elsewhere, f"aboleth-{aboleth.cache_salt(config)}")
    aboleth.uninstall()
    assert knobs.cache.dir == elsewhere


def test_a_hook_chained_on_top_of_a_dormant_installation_keeps_both_working():
    with aboleth.compilation(target="p2p"):
        pass
    calls: List[List[str]] = []
    on_top = chain_hook(lambda stages: calls.append(list(stages)))
    with aboleth.compilation(target="mlx5"):
        assert knobs.runtime.add_stages_inspection_hook is on_top
        kernel = compile_kernel(*VECTOR_ADD)
    assert calls == [["ttir", "aboleth", "ttgir", "llir", "ptx", "cubin"]]
    assert "aboleth" in kernel.asm
    # A kernel not compiled in the block (another BLOCK): dormant, the stage is not added.
    kernel = compile_kernel(VECTOR_ADD[0], VECTOR_ADD[1], {"BLOCK": 128})
    assert calls[-1] == ["ttir", "ttgir", "llir", "ptx", "cubin"] and "aboleth" not in kernel.asm
    aboleth.uninstall()
    assert knobs.runtime.add_stages_inspection_hook is on_top


def test_an_exit_after_uninstall_leaves_another_threads_entry_of_the_block_alone():
    import threading

    block = aboleth.compilation(target="p2p")
    inside, left = threading.Event(), threading.Event()

    def first_thread() -> None:
        block.__enter__()
        inside.set()
        left.wait()
        block.__exit__(None, None, None)  # its block was ended by uninstall() meanwhile

    thread = threading.Thread(target=first_thread)
    thread.start()
    inside.wait()
    aboleth.uninstall()
    with block as config:
        left.set()
        thread.join()
        assert aboleth.current_config() == config
    assert aboleth.current_config() is None


def test_a_cache_directory_moved_in_the_environment_while_dormant_is_the_next_base(tmp_path, monkeypatch):
    with aboleth.compilation(target="p2p"):
        pass
    assert aboleth.is_dormant()
    moved = str(tmp_path / "next-test")
    monkeypatch.setenv("TRITON_CACHE_DIR", moved)
    with aboleth.compilation(target="p2p") as config:
        assert knobs.cache.dir == os.path.join(moved, f"aboleth-{aboleth.cache_salt(config)}")
    aboleth.uninstall()
    assert knobs.cache.dir == moved and not aboleth.is_dormant()


def test_an_emptied_stage_slot_is_taken_back_by_the_next_block():
    with aboleth.compilation(target="mlx5"):
        pass
    with knobs.runtime.scope():
        knobs.runtime.add_stages_inspection_hook = None
        with aboleth.compilation(target="mlx5"):
            assert compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS).asm["cubin"]


def test_a_compilation_block_can_be_entered_again_and_nested():
    block = aboleth.compilation(target="p2p")
    assert aboleth.compilation(target="p2p") is block  # one per configuration
    with block:
        pass
    with block as config:
        with block:
            assert aboleth.current_config() == config
        with aboleth.compilation(target="mlx5"):
            assert aboleth.current_config().target == "mlx5"
        assert aboleth.current_config() == config
    assert aboleth.current_config() is None and not aboleth.is_installed()


def test_a_kernel_compiled_inside_a_compilation_block_goes_through_the_stage():
    with aboleth.compilation(target="mlx5"):
        assert compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS).asm["cubin"]
    assert not aboleth.is_installed()
    with aboleth.compilation(target="p2p"):
        assert compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS).asm["cubin"]


@pytest.mark.parametrize("arguments, message", [
    (dict(target="p2p", immediate_signals=True),
     "immediate signals (--immediate-signals, immediate_signals=True) let mlx5 signals ride on their puts as RDMA "
     "write-with-immediate; the p2p transport has no such operation: drop the option, or compile for mlx5"),
    (dict(target="mlx5", packet_signals=True),
     "packet signals (--packet-signals, packet_signals=True) let p2p signals travel in their puts' data as LL "
     "packets over NVLink stores; the mlx5 transport does not store to peer memory: drop the option, or compile "
     "for p2p"),
    (dict(target="proxy", passes_off=True, disabled_passes=["batch-commands"]),
     "disabling passes (batch-commands) has no effect with passes off (--passes-off, passes_off=True), which "
     "already skips every planning pass; give one or the other"),
    (dict(target="proxy", disabled_passes=["no-such-pass"]), "unknown pass 'no-such-pass' in --disable-pass"),
])
def test_a_configuration_that_cannot_take_effect_is_refused_where_it_is_written(arguments, message):
    for make in (aboleth.Config, aboleth.install, aboleth.compilation):
        with pytest.raises(ValueError) as raised:
            with contextlib.ExitStack() as stack:
                made = make(**arguments)
                if make is aboleth.compilation:
                    stack.enter_context(made)
        assert message in str(raised.value)
    assert not aboleth.is_installed()
