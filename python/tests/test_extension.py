"""aboleth._aboleth, the Rust extension module, called directly on the committed TTIR corpus
(crates/aboleth-ttir/tests/corpus)."""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import threading
import time

import pytest

import aboleth
from aboleth import _aboleth

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "crates/aboleth-ttir/tests/corpus"
MLX5 = _aboleth.PipelineOptions("mlx5")


def test_version_is_the_package_version():
    assert _aboleth.version() == aboleth.__version__ == importlib.metadata.version("aboleth")


def test_a_module_without_aboleth_calls_comes_back_unchanged_with_a_summary():
    text = (CORPUS / "matmul.after-passes.ttir").read_text()
    new_text, summary = _aboleth.run_stage(text, MLX5, source_name="k.ttir")
    assert new_text == text
    summary = json.loads(summary)
    assert {key: summary[key] for key in ["bridge", "aboleth_version", "changed", "aboleth_calls", "functions",
                                          "config"]} == {
        "bridge": "v1", "aboleth_version": aboleth.__version__, "changed": False, "aboleth_calls": 0,
        "functions": ["matmul"], "config": {"target": "mlx5", "passes_off": False, "disabled_passes": [],
                                             "immediate_signals": False, "packet_signals": False}
    }


def test_the_seed_alltoall_is_compiled_for_p2p_and_its_calls_are_gone():
    text = (CORPUS / "alltoall.after-passes.ttir").read_text()
    new_text, summary = _aboleth.run_stage(text, _aboleth.PipelineOptions("p2p"), source_name="k.ttir")
    summary = json.loads(summary)
    assert summary["changed"] is True and summary["aboleth_calls"] == 9 and summary["kernel"] == "alltoall"
    assert 'libname = "aboleth"' not in new_text
    assert "st.release.sys.global.u64" in new_text and "ld.acquire.sys.global.u64" in new_text
    assert summary["counts"]["fences"] == {"cta": 0, "gpu": 0, "sys": 0}
    assert "p2p.signal" in summary["aboleth_ir"]


def test_the_seed_alltoall_is_compiled_for_mlx5():
    text = (CORPUS / "alltoall.after-passes.ttir").read_text()
    new_text, summary = _aboleth.run_stage(text, MLX5, source_name="k.ttir")
    assert json.loads(summary)["changed"] is True
    assert 'libname = "aboleth"' not in new_text
    assert new_text.count("st.mmio.relaxed.sys.global.b64") == 1


def test_an_unknown_disabled_pass_is_a_configuration_error():
    with pytest.raises(ValueError, match="^aboleth: bad stage configuration: unknown pass 'batch-everything' in "
                                         "--disable-pass"):
        _aboleth.PipelineOptions("p2p", disabled_passes=["batch-everything"])


def test_ttir_that_does_not_parse_raises_value_error_with_the_position():
    with pytest.raises(ValueError) as info:
        _aboleth.run_stage("module {\n  tt.func @k( {\n", MLX5, source_name="k.ttir")
    assert str(info.value) == ("k.ttir:3:1: error: expected '}' to close the region opened at 2:15, "
                               "found the end of the file")


def test_plan_only_options_reach_efa_and_the_stage_refuses_to_generate_code_with_them():
    options = _aboleth.PipelineOptions("efa", plan_only=True)
    assert options.target == "efa"
    ttir = ("module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n"
            "    tt.return loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"k.py\":1:0)\n"
            "#loc1 = loc(\"k.py\":3:4)\n")
    _aboleth.run_stage(ttir, options, source_name="k.ttir", plan_only=True)
    with pytest.raises(NotImplementedError, match="--target efa has no code generation yet"):
        _aboleth.run_stage(ttir, options, source_name="k.ttir")


@pytest.mark.parametrize("target, options, message", [
    ("rdma", {}, 'unknown target "rdma", expected one of mlx5, proxy, p2p, ionic'),
    ("efa", {}, 'target "efa" is lowered and simulated but has no code generation for Triton kernels yet'),
    ("tcp", {}, 'unknown target "tcp", expected one of mlx5, proxy, p2p, ionic'),
    ("p2p", {"immediate_signals": True}, "immediate signals (--immediate-signals, immediate_signals=True)"),
    ("proxy", {"passes_off": True, "disabled_passes": ["batch-commands"]}, "disabling passes (batch-commands)"),
])
def test_a_bad_configuration_raises_value_error(target, options, message):
    with pytest.raises(ValueError) as raised:
        _aboleth.PipelineOptions(target, **options)
    assert str(raised.value).startswith(f"aboleth: bad stage configuration: {message}")


@pytest.mark.parametrize("options", [{"passes_off": "yes"}, {"disabled_passes": "batch-commands"},
                                     {"disabled_passes": [1]}, {"packets": True}])
def test_options_of_the_wrong_type_raise_type_error(options):
    with pytest.raises(TypeError):
        _aboleth.PipelineOptions("p2p", **options)


def test_pipeline_options_read_back_normalized():
    options = _aboleth.PipelineOptions("mlx5", disabled_passes=["coalesce-doorbells", "batch-commands",
                                                                "batch-commands"], immediate_signals=True)
    assert (options.target, options.passes_off, options.disabled_passes, options.immediate_signals,
            options.packet_signals) == ("mlx5", False, ["batch-commands", "coalesce-doorbells"], True, False)
    assert repr(options) == ("PipelineOptions('mlx5', passes_off=False, disabled_passes=['batch-commands', "
                             "'coalesce-doorbells'], immediate_signals=True, packet_signals=False)")


def test_plan_only_plans_but_leaves_the_ttir():
    text = (CORPUS / "alltoall.after-passes.ttir").read_text()
    new_text, summary = _aboleth.run_stage(text, _aboleth.PipelineOptions("p2p"), plan_only=True)
    summary = json.loads(summary)
    assert new_text == text
    assert summary["changed"] is False and summary["aboleth_calls"] == 9 and "p2p.signal" in summary["aboleth_ir"]


def test_the_gil_is_released_while_rust_works():
    """While one thread is inside run_stage on a large module, another keeps running Python.

    The main thread notes each millisecond in which it ran. Had run_stage kept the GIL, the main
    thread could run only in the last switch interval (5 ms) of the call's window, after Rust
    returned; with the GIL released it runs through the window, as far as the machine's load
    lets it."""
    text = (CORPUS / "matmul.after-passes.ttir").read_text()
    lines = text.splitlines(keepends=True)
    start = next(index for index, line in enumerate(lines) if "tt.func" in line)
    end = max(index for index, line in enumerate(lines) if line.startswith("  } loc("))
    function = "".join(lines[start:end + 1])
    big = ("".join(lines[:start]) + "".join(function.replace("@matmul", f"@matmul_{index}") for index in range(2000)) +
           "".join(lines[end + 1:]))
    result = {}

    def call() -> None:
        result["enter"] = time.perf_counter()
        result["summary"] = _aboleth.run_stage(big, MLX5)[1]
        result["exit"] = time.perf_counter()

    thread = threading.Thread(target=call)
    milliseconds_running = set()
    thread.start()
    while thread.is_alive():
        milliseconds_running.add(int(time.perf_counter() * 1000))
    thread.join()
    assert len(json.loads(result["summary"])["functions"]) == 2000
    first, last = int(result["enter"] * 1000) + 1, int(result["exit"] * 1000) - 1
    window = last - first
    if window < 100:
        pytest.skip(f"run_stage took {window} ms: too short to observe")
    inside = sum(1 for millisecond in milliseconds_running if first <= millisecond <= last)
    # Held GIL: at most a switch interval's worth (~5 ms). Released: most of the window, less
    # when other processes load the machine; 50 ms separates the two whatever the load.
    assert inside >= 50, (inside, window)


def test_packet_staging_bytes_follow_the_slot_layout_and_refuse_ragged_regions():
    assert aboleth.packet_staging_bytes(16) == 2 * 1056
    assert aboleth.packet_staging_bytes(24) == 8 + 3 * 1056  # padded to 16 bytes first
    for length in (12, 2**62):
        with pytest.raises(ValueError, match="whole 8-byte flags"):
            aboleth.packet_staging_bytes(length)
