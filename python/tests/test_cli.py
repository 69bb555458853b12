"""The `aboleth` command on Triton kernels (`python -m aboleth`, the package's `aboleth` script and
the cargo-built binary are one command line): statistics and Aboleth IR for every target, PTX,
simulation, diagnostics at the kernel's Python line, bind keys by parameter name, and one-line
errors that name the argument."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

SEED = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "triton" / "alltoall.py")
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


def test_efa_plans_the_seed_all_to_all_and_refuses_to_generate_code_for_it():
    result = seed("--target", "efa", "--emit", "stats")
    assert result.returncode == 0, result.stderr
    kernel = json.loads(result.stdout)["kernels"][0]
    assert kernel["target"] == "efa" and kernel["passes"][-1] == "lower-efa"
    counts = kernel["counts"]
    # The put, then the signal in a batch of its own after the put's completion (SRD is
    # unordered): two reservations and doorbells, and every WQE asks for a completion.
    assert (counts["wqes"], counts["reservations"], counts["doorbells"]) == (2, 2, 2)
    assert counts["completions_requested"] == 2
    result = seed("--target", "efa", "--emit", "aboleth")
    assert result.returncode == 0, result.stderr
    assert "efa.wait_completion" in result.stdout and "publishes" in result.stdout
    result = seed("--target", "efa", "--emit", "ptx")
    assert result.returncode == 1
    assert "--target efa has no code generation for Triton kernels yet" in result.stderr


def test_ptx_for_ionic_has_the_64_byte_wqes_and_one_64_bit_doorbell():
    # Experimental: generated for NVIDIA GPUs the way mlx5 is; never run on an Ionic device.
    result = seed("--target", "ionic", "--emit", "ptx")
    assert result.returncode == 0, result.stderr
    ptx = result.stdout
    # The batch (one put and one fetch-add signal per peer) is rung once: a system fence, then
    # the MMIO store of queue id << 24 | producer index.
    assert ptx.count("st.mmio.relaxed.sys.global.b64") == 1
    assert "shl.b64 %ab_qid, %ab_qid, 24;" in ptx
    # Completions are polled from the CQ under the poll lock, checking the lap's color.
    assert "xor.pred %ab_valid, %ab_color, %ab_even;" in ptx


def test_ptx_for_p2p_has_the_release_store_and_the_acquire_poll():
    result = seed("--target", "p2p", "--emit", "ptx")
    assert result.returncode == 0, result.stderr
    assert "st.release.sys.global.u64" in result.stdout and "ld.acquire.sys.global.u64" in result.stdout


def test_ptx_for_mlx5_has_the_byte_swapped_wqe_stores_and_one_doorbell():
    result = seed("--target", "mlx5", "--emit", "ptx")
    assert result.returncode == 0, result.stderr
    assert "prmt.b32" in result.stdout
    assert result.stdout.count("st.mmio.relaxed.sys.global.b64") == 1


def test_a_missing_type_names_the_parameter():
    result = run("--kernel", "alltoall", "--target", "p2p", "--signature", "endpoints=*i64")
    assert result.returncode == 1
    assert result.stderr.startswith("aboleth: error: --signature: give a type (e.g. recv=*i64 or recv=i32) or a "
                                    "--constexpr value for: recv, flags, send, send_key, my_flags, epoch, BYTES, RANK")


def test_an_unknown_kernel_lists_the_kernels_of_the_file():
    result = run("--kernel", "nope", "--target", "p2p")
    assert result.returncode == 1
    assert "no kernel named `nope` (found: alltoall" in result.stderr


REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
SEED_LAUNCH = ["--grid", "ranks-1", "--rank-constexpr", "RANK", "--constexpr", "BYTES=256", "--signature", SIGNATURE,
               "--regions", "send=ranks*256 recv=ranks*256 flags=ranks*8",
               "--bind", "endpoints=endpoints recv=regions:recv flags=regions:flags send=local:send "
                         "send_key=lkey:send my_flags=local:flags epoch=value:epoch",
               "--init", "send=random"]


def aboleth_binary(*arguments: str) -> subprocess.CompletedProcess:
    """The Rust `aboleth` command (built by cargo on first use), with this interpreter for Python."""
    environment = dict(os.environ, ABOLETH_PYTHON=sys.executable)
    return subprocess.run(["cargo", "run", "--quiet", "-p", "aboleth-cli", "--", *arguments], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=900, env=environment)


def test_aboleth_sim_runs_the_seed_triton_kernel_compiled_per_rank_on_simulated_ranks():
    # efa and ionic: lowered and simulated (SRD's unordered writes, Ionic's RC queues modeled);
    # efa has no code generation yet (its TTIR is captured as mlx5's).
    for target in ("p2p", "proxy", "mlx5", "efa", "ionic"):
        result = aboleth_binary("sim", SEED, "--kernel", "alltoall", "--target", target, "--ranks", "3",
                                "--schedules", "5", "--check", *SEED_LAUNCH)
        assert result.returncode == 0, result.stderr
        assert f"alltoall on {target}: 3 ranks, 5 schedule(s) x 2 configurations, seed 0: validated" in result.stdout


def test_aboleth_sim_of_a_python_kernel_names_an_unbound_parameter_at_the_kernel():
    launch = [argument.replace("send=local:send ", "") for argument in SEED_LAUNCH]
    result = aboleth_binary("sim", SEED, "--kernel", "alltoall", "--target", "p2p", "--ranks", "2", *launch)
    assert result.returncode == 1
    # The parameter's name (`send`), not the local variable's (`src = send.to(...)`), at the `def`.
    assert result.stderr.strip() == (f"{SEED}:13:0: error: cannot simulate: argument `send` is not bound; add "
                                     "`send=...` to the kernel's `bind` attribute")


def test_bind_keys_naming_a_local_variable_still_work_with_a_deprecation_note():
    launch = [argument.replace("send=local:send ", "src=local:send ") for argument in SEED_LAUNCH]
    result = aboleth_binary("sim", SEED, "--kernel", "alltoall", "--target", "p2p", "--ranks", "2",
                            "--schedules", "2", "--check", *launch)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (f"{SEED}: warning: bind key `src` names a local variable of the kernel; bind the "
                                     "kernel parameter instead: `send=local:send` (local names are deprecated)")


def test_simulator_reports_point_at_the_kernels_python_lines():
    # A lowering broken on purpose deadlocks in the wait for the send buffer: line 24 of the seed.
    result = aboleth_binary("sim", SEED, "--kernel", "alltoall", "--target", "proxy", "--ranks", "2",
                            "--schedules", "1", "--mutate", "signal-before-data", *SEED_LAUNCH)
    assert result.returncode == 0, result.stderr
    assert f"waits at {SEED}:24:17 (proxy.wait_completion)" in result.stdout, result.stdout
    assert ".lifted.abo" not in result.stdout


NEGATIVE_BYTES = str(pathlib.Path(__file__).resolve().parent / "user_errors.py")


@pytest.mark.parametrize("verb", ["compile", "sim"])
def test_a_user_error_in_a_kernel_is_located_at_its_line_and_not_called_internal(verb):
    arguments = ["--kernel", "negative_bytes", "--target", "p2p", "--signature", SIGNATURE, "--constexpr", "RANK=0"]
    if verb == "sim":
        arguments += ["--regions", "send=ranks*256 recv=ranks*256 flags=ranks*8", "--bind",
                      "endpoints=endpoints recv=regions:recv flags=regions:flags send=local:send send_key=lkey:send "
                      "my_flags=local:flags epoch=value:epoch"]
    else:
        arguments += ["--emit", "ptx"]
    result = subprocess.run([sys.executable, "-m", "aboleth", verb, NEGATIVE_BYTES, *arguments],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"{NEGATIVE_BYTES}:14:79: error: ab.put of -5 bytes: the byte count must not be "
                                     "negative")


@pytest.mark.parametrize("arguments, message", [
    (["--signature", SIGNATURE.replace("endpoints=*i64", "endpoints=*q64")],
     "--signature: `endpoints=*q64`: `*q64` is not a Triton type; use one of i1, i8, i16, i32, i64, u8, u16, u32, "
     "u64, fp16, bf16, fp32, fp64, or `*` and a type for a pointer (*i64, *i8, *fp32)"),
    (["--signature", SIGNATURE + ",recv=*i32"], "--signature: `recv` is given twice; give each parameter once"),
    (["--signature", SIGNATURE, "--constexpr", "BYTES=abc"],
     "--constexpr: `BYTES=abc`: the value must be an integer, a float or true/false"),
    (["--signature", SIGNATURE, "--num-warps", "3"],
     "--num-warps 3: warps per program must be a power of two from 1 to 32"),
    (["--signature", SIGNATURE + ",BYTES=i32", "--constexpr", "BYTES=256"],
     "`BYTES` is given both a --signature type and a --constexpr value; give one"),
])
def test_command_line_mistakes_are_one_line_errors(arguments, message):
    result = run("--kernel", "alltoall", "--target", "p2p", "--constexpr", "RANK=1", *arguments)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == f"aboleth: error: {message}"


def test_the_python_package_has_every_verb_of_the_command_line():
    for arguments, expected in [(["passes"], "batch-commands"),
                                (["plan", "examples/ir/alltoall.abo"], "plan for examples/ir/alltoall.abo"),
                                (["opt", "examples/ir/alltoall.abo", "--target", "p2p"], "p2p."),
                                (["sim", "examples/ir/alltoall.abo", "--schedules", "2", "--check"], "validated")]:
        result = subprocess.run([sys.executable, "-m", "aboleth", *arguments], capture_output=True, text=True,
                                timeout=300, cwd=REPOSITORY)
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout
    script = pathlib.Path(sys.executable).with_name("aboleth")
    result = subprocess.run([str(script), "sim", SEED, "--kernel", "alltoall", "--target", "p2p", "--ranks", "2", "--schedules", "2",
                             "--check", *SEED_LAUNCH], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "alltoall on p2p: 2 ranks, 2 schedule(s) x 2 configurations, seed 0: validated" in result.stdout


def test_aboleth_compile_hands_python_kernels_to_the_python_package():
    result = aboleth_binary("compile", SEED, "--kernel", "alltoall", "--target", "p2p", "--signature", SIGNATURE,
                            "--constexpr", "BYTES=256", "--constexpr", "RANK=1", "--emit", "ptx")
    assert result.returncode == 0, result.stderr
    assert "st.release.sys.global.u64" in result.stdout


def test_immediate_signals_reach_the_stage_from_the_command_line():
    kernels = str(pathlib.Path(__file__).resolve().parent / "ptx_kernels.py")
    signature = "endpoints=*i64,recv=*i64,counters=*i64,send=i64,send_key=i32,my_counters=*i64,epoch=i64"
    wqes = []
    for flag in ([], ["--immediate-signals"]):
        result = subprocess.run([sys.executable, "-m", "aboleth", "compile", kernels, "--kernel", "count_arrivals",
                                 "--signature", signature, "--constexpr", "CHUNK=64", "--constexpr", "RANK=0",
                                 "--target", "mlx5", "--emit", "stats", *flag],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        wqes.append(json.loads(result.stdout)["kernels"][0]["counts"]["wqes"])
    # Four puts and four `add 1` signals; with the declaration each signal rides on its put.
    assert wqes == [8, 4]


def test_packet_signals_reach_simulation_and_code_generation_from_the_command_line():
    result = aboleth_binary("sim", SEED, "--kernel", "alltoall", "--target", "p2p", "--ranks", "3",
                            "--schedules", "5", "--packet-signals", "--check", *SEED_LAUNCH)
    assert result.returncode == 0, result.stderr
    assert "alltoall on p2p: 3 ranks, 5 schedule(s) x 2 configurations, seed 0: validated" in result.stdout
    # Every chain's set travelled in its put's packets: no flag store left.
    assert re.search(r"flag stores \(NVLink\)\s+\d+\s+0\n", result.stdout), result.stdout
    result = aboleth_binary("compile", SEED, "--kernel", "alltoall", "--target", "p2p", "--signature", SIGNATURE,
                            "--constexpr", "BYTES=256", "--constexpr", "RANK=1", "--emit", "ptx", "--packet-signals")
    assert result.returncode == 0, result.stderr
    assert "@%ab_p st.relaxed.sys.global.u64" in result.stdout
