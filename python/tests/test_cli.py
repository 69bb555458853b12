"""`python -m aboleth compile KERNEL.py` (what `aboleth compile KERNEL.py` runs): statistics and
Aboleth IR for every target, PTX for p2p, and usage errors that name the argument."""

import json
import pathlib
import subprocess
import sys

SEED = str(pathlib.Path(__file__).resolve().parent / "seed_kernels.py")
SIGNATURE = "endpoints=*i64,recv=*i64,flags=*i64,send=i64,send_key=i32,my_flags=*i64,epoch=i64"


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aboleth", "compile", SEED, *arguments],
                          capture_output=True, text=True, timeout=300)


def seed(*arguments: str) -> subprocess.CompletedProcess:
    return run("--kernel", "alltoall", "--signature", SIGNATURE, "--constexpr", "BYTES=256", "--constexpr", "RANK=1",
               *arguments)


def test_stats_for_mlx5_match_the_plan_of_the_seed_all_to_all():
    result = seed("--target", "mlx5", "--emit", "stats")
    assert result.returncode == 0, result.stderr
    kernel = json.loads(result.stdout)["kernels"][0]
    assert kernel["name"] == "alltoall" and kernel["target"] == "mlx5"
    assert kernel["passes"][-1] == "lower-mlx5"
    counts = kernel["counts"]
    # One owner per queue: one reservation, one doorbell, no GPU atomics, no fences.
    assert (counts["reservations"], counts["doorbells"], counts["atomics"]) == (1, 1, 0)
    assert counts["fences"] == {"cta": 0, "gpu": 0, "sys": 0}


def test_passes_off_stats_pay_what_a_library_pays():
    result = seed("--target", "mlx5", "--emit", "stats", "--passes-off")
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)["kernels"][0]["counts"]
    assert counts["atomics"] > 0 and counts["fences"]["gpu"] > 0


def test_the_aboleth_ir_shows_the_planning_decisions():
    result = seed("--target", "proxy", "--emit", "aboleth")
    assert result.returncode == 0, result.stderr
    assert "proxy.doorbell" in result.stdout and "owner: ab.queue_owner Program" in result.stdout


def test_ptx_for_p2p_has_the_release_store_and_the_acquire_poll():
    result = seed("--target", "p2p", "--emit", "ptx")
    assert result.returncode == 0, result.stderr
    assert "st.release.sys.global.u64" in result.stdout and "ld.acquire.sys.global.u64" in result.stdout


def test_ptx_for_mlx5_is_refused_as_not_built_yet():
    result = seed("--target", "mlx5", "--emit", "ptx")
    assert result.returncode == 1
    assert "TTIR code generation for `mlx5." in result.stderr


def test_a_missing_type_names_the_parameter():
    result = run("--kernel", "alltoall", "--target", "p2p", "--signature", "endpoints=*i64")
    assert result.returncode == 2
    assert result.stderr.startswith("aboleth: error: --signature: give a type (e.g. recv=*i64 or recv=i32) or a "
                                    "--constexpr value for: recv, flags, send, send_key, my_flags, epoch, BYTES, RANK")


def test_an_unknown_kernel_lists_the_kernels_of_the_file():
    result = run("--kernel", "nope", "--target", "p2p")
    assert result.returncode == 2
    assert "no kernel named `nope` (found: alltoall" in result.stderr
