"""The benchmark suite's CPU parts stay buildable (experiments/bench/README.md): its Triton kernels
compile to sm_90 PTX through the aboleth stage for p2p and proxy, passes on and off (and the two
differ, so a benchmark comparing them compares two programs), the per-launch suite's seed kernel
and plain baseline compile (the baseline with no communication in it), every suite script at
least compiles as Python, and report.py merges ranks and writes its Markdown (``--replot``) for
runs with and without per-launch rows. The suite itself needs a GPU: experiments/bench/run.sh on
the GPU machine."""

import importlib.util
import json
import pathlib
import py_compile
import shutil
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "bench"
SIGNATURE = "endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,first_epoch=i64"
#: The seed's signature (examples/triton/alltoall.py), which ``plain_alltoall`` shares.
SEED_SIGNATURE = "endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64"
#: A merged report of a run without per-launch rows (d303f4f).
RESULTS_WITHOUT_PER_LAUNCH = BENCH / "results" / "2026-12-02-bench-nvidia-h200-2ranks-mps-base-at-remote.json"


STREAM_SIGNATURE = ("endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64,"
                    "posting_cycles=*i64")


def ptx(target: str, *options: str, kernel: str = "alltoall_rounds") -> str:
    launch = {"alltoall_rounds": ["--signature", SIGNATURE, "--constexpr", "ROUNDS=8"],
              "stream_chains": ["--signature", STREAM_SIGNATURE, "--constexpr", "CHAINS=16"],
              "alltoall": ["--signature", SEED_SIGNATURE],
              "plain_alltoall": ["--signature", SEED_SIGNATURE]}[kernel]
    result = subprocess.run(
        [sys.executable, "-m", "aboleth", "compile", str(BENCH / "kernels.py"), "--kernel", kernel,
         "--target", target, *launch, "--constexpr", "BYTES=256", "--constexpr", "RANK=1", "--emit", "ptx", *options],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("target", ["p2p", "proxy"])
def test_the_suite_kernel_compiles_passes_on_and_off(target):
    passes_on, passes_off = ptx(target), ptx(target, "--passes-off")
    assert ".entry alltoall_rounds" in passes_on
    assert passes_on != passes_off


def test_the_ablation_kernel_compiles_and_a_disabled_pass_changes_it():
    defaults = ptx("proxy", kernel="stream_chains")
    assert "%clock64" in defaults
    assert defaults != ptx("proxy", "--disable-pass", "batch-commands", kernel="stream_chains")


@pytest.mark.parametrize("script", sorted(path.name for path in BENCH.glob("*.py")))
def test_the_suite_scripts_compile(script, tmp_path):
    py_compile.compile(str(BENCH / script), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


@pytest.mark.parametrize("target", ["p2p", "proxy"])
def test_the_per_launch_kernels_compile_and_only_the_seed_communicates(target):
    seed, plain = ptx(target, kernel="alltoall"), ptx(target, kernel="plain_alltoall")
    assert ".entry alltoall" in seed and ".entry plain_alltoall" in plain
    # The seed's wait polls its flag with an acquire load; the plain kernel has one plain store.
    assert ".acquire" in seed
    assert ".acquire" not in plain and "st.global" in plain
    assert seed != ptx(target, "--passes-off", kernel="alltoall")


def load_report():
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_launch_row(system, transport, variant, size, launch_us, **extra):
    return {"suite": "per-launch", "system": system, "transport": transport, "variant": variant, "ranks": 2,
            "bytes_per_peer": size, "num_warps": 4, "round_us": launch_us, "launch_us": launch_us,
            "checked": launch_us is not None, "launch_us_min": launch_us, **extra}


PER_LAUNCH_ROWS = [
    per_launch_row("plain-triton", "p2p", "eager", 256, 10.0),
    per_launch_row("aboleth", "p2p", "eager-one-block", 256, 10.5),
    per_launch_row("aboleth", "p2p", "eager-block-per-launch", 256, 10.8),
    per_launch_row("plain-triton", "p2p", "graph", 256, 2.0),
    per_launch_row("aboleth", "p2p", "graph", 256, 3.0),
    per_launch_row("plain-triton", "proxy", "eager", 256, 10.0),
    per_launch_row("aboleth", "proxy", "eager-block-per-launch", 256, 30.0),
    per_launch_row("aboleth", "proxy", "graph", 256, None, error="RuntimeError: capture failed: on rank 1"),
]


def test_the_report_shows_per_launch_rows_their_ratios_and_targets():
    report = load_report()
    header = {"machine": "m", "date": "d", "command": "c", "git_commit": "g",
              "not_run": {"nccl": "NCCL refuses two ranks on one GPU"}}
    text = report.markdown(PER_LAUNCH_ROWS, header)
    assert "## Per launch" in text
    assert "| aboleth p2p eager-block-per-launch | 10.80 (1.08x) |" in text
    assert "| aboleth p2p graph | 3.00 (1.50x) |" in text
    assert "| aboleth proxy graph | FAILED |" in text
    assert "- aboleth proxy graph 256 B: RuntimeError: capture failed: on rank 1" in text
    target = "`compilation()` around each launch <= 1.1x plain Triton"
    assert f"| p2p 256 B, {target} | 10.80 vs 10.00 us: **1.08x** | yes |" in text
    assert f"| proxy 256 B, {target} | 30.00 vs 10.00 us: **3.00x** | no |" in text
    assert "3.00 us; NCCL not run here (see Not run)" in text
    assert "- nccl: NCCL refuses two ranks on one GPU" in text


def test_the_report_merges_ranks_slowest_and_keeps_a_ranks_error(tmp_path):
    report = load_report()
    first = per_launch_row("aboleth", "p2p", "graph", 256, 3.0)
    second = dict(first, launch_us=4.0, round_us=4.0, launch_us_min=3.5, checked=False, error="capture failed")
    for rank, entry in enumerate([first, second]):
        (tmp_path / f"per-launch-aboleth-p2p-rank{rank}.json").write_text(
            json.dumps({"rank": rank, "rows": [entry], "not_run": {"nccl": "no"}}))
    rows, notes = report.merge(str(tmp_path))
    assert len(rows) == 1
    assert rows[0]["launch_us"] == 4.0 and rows[0]["launch_us_min"] == 3.5
    assert rows[0]["checked"] is False and rows[0]["error"] == "capture failed"
    assert notes["not_run"] == {"nccl": "no"}


def test_the_ablation_table_shows_the_minimum_when_recorded():
    report = load_report()
    entry = {"suite": "ablation", "system": "aboleth", "transport": "proxy", "variant": "passes-on", "ranks": 2,
             "bytes_per_peer": 256, "num_warps": 4, "round_us": None, "launch_us": 20.0, "checked": True,
             "chains": 16, "posting_cycles": 19000, "posting_us": 9.5, "posting_cycles_min": 18000,
             "posting_us_min": 9.0, "counts": {"reservations": 1, "doorbells": 1, "fences": {"sys": 1}}}
    assert "| passes-on | 9.50 us, min 9.00 (1/1/1) |" in "\n".join(report.ablation_markdown([entry]))
    del entry["posting_us_min"], entry["posting_cycles_min"]
    assert "| passes-on | 9.50 us (1/1/1) |" in "\n".join(report.ablation_markdown([entry]))


@pytest.mark.parametrize("with_per_launch", [False, True])
def test_replot_redraws_a_run_with_and_without_per_launch_rows(tmp_path, with_per_launch):
    path = tmp_path / "run.json"
    shutil.copy(RESULTS_WITHOUT_PER_LAUNCH, path)
    if with_per_launch:
        merged = json.loads(path.read_text())
        merged["rows"] += PER_LAUNCH_ROWS
        path.write_text(json.dumps(merged))
    result = subprocess.run([sys.executable, str(BENCH / "report.py"), "--replot", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "run.md").read_text()
    assert "## All-to-all" in text and "## Pass ablation over proxy" in text
    assert ("## Per launch" in text) == with_per_launch
    assert ("## Per-launch targets (issue 13)" in text) == with_per_launch
