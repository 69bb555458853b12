"""The benchmark suite's CPU parts stay buildable (experiments/bench/README.md): its Triton kernel
compiles to sm_90 PTX through the aboleth stage for p2p and proxy, passes on and off (and the two
differ, so a benchmark comparing them compares two programs), and every suite script at least
compiles as Python. The suite itself needs a GPU: experiments/bench/run.sh on the GPU machine."""

import pathlib
import py_compile
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "bench"
SIGNATURE = "endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,first_epoch=i64"


STREAM_SIGNATURE = ("endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64,"
                    "posting_cycles=*i64")


def ptx(target: str, *options: str, kernel: str = "alltoall_rounds") -> str:
    launch = (["--signature", SIGNATURE, "--constexpr", "ROUNDS=8"] if kernel == "alltoall_rounds"
              else ["--signature", STREAM_SIGNATURE, "--constexpr", "CHAINS=16"])
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
