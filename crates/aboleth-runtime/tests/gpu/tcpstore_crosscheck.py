#!/usr/bin/env python3
"""Cross-checks aboleth-runtime's TCPStore client and server against real PyTorch.

Needs torch (the GPU machine has 2.11) but no GPU. Run from the repository root:

    python3 crates/aboleth-runtime/tests/gpu/tcpstore_crosscheck.py \
        --probe target/release/aboleth-bootstrap-probe

(build the probe on the CPU machine with
`cargo build --release -p aboleth-runtime --bin aboleth-bootstrap-probe` and take it along).
Last run: 2026-11-30 on the GPU machine, torch 2.11.0+cu130: 9/9 checks passed in 76 s.

Checks, each printed as PASS or FAIL (exit status 1 if any fails):
 1. our client against torch's servers: a `torch.distributed.TCPStore(is_master=True)` (libuv
    and legacy backends) holds MASTER_PORT, and every probe rank, rank 0 included, joins it as
    a client (rank 0 finds the port taken) and all-gathers;
 2. our client against torchrun's agent store: `torchrun --no-python` runs the probe, once with
    the static rendezvous (MASTER_PORT) and once `--standalone` (c10d rendezvous), so the ranks
    use the agent's store under /worker/attempt_0/;
 3. torch's client against our server: probe rank 0 hosts our store and waits for rank 1,
    meanwhile torch's TCPStore client runs set/get/add/compare_set/check/wait/delete_key/
    num_keys/append/multi_set/multi_get against it; then rank 1 is started and both finish;
 4. our job-token refusal through torch's server: a probe with another ABOLETH_JOB_TOKEN is
    refused and named.
"""

import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

import torch.distributed as dist

RESULTS = []


def report(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))
    sys.stdout.flush()


def free_port():
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


def probe_environment(port, rank, world_size, token="crosscheck", timeout_seconds="20"):
    # Only what a launcher would set: no inherited TORCHELASTIC_* variables.
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHELASTIC_", "MASTER_", "ABOLETH_"))
        and key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    environment.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        ABOLETH_JOB_TOKEN=token,
        ABOLETH_BOOTSTRAP_TIMEOUT_S=timeout_seconds,
    )
    return environment


def start_probe(probe, port, rank, world_size, **kwargs):
    return subprocess.Popen(
        [probe],
        env=probe_environment(port, rank, world_size, **kwargs),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def gathered_everything(stdout, world_size):
    return all(
        any(line.startswith(f"gathered {index}: rank={index} ") for line in stdout.splitlines())
        for index in range(world_size)
    )


def finish(process, limit_seconds=60):
    try:
        stdout, stderr = process.communicate(timeout=limit_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return process.returncode, stdout, stderr


def check_torch_server(probe, use_libuv, world_size=3):
    port = free_port()
    kwargs = dict(is_master=True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    try:
        store = dist.TCPStore("127.0.0.1", port, None, use_libuv=use_libuv, **kwargs)
    except TypeError:  # very old torch without use_libuv
        store = dist.TCPStore("127.0.0.1", port, None, **kwargs)
    processes = [start_probe(probe, port, rank, world_size) for rank in range(world_size)]
    outcomes = [finish(process) for process in processes]
    name = f"our client vs torch {'libuv' if use_libuv else 'legacy'} server, {world_size} ranks"
    ok = all(code == 0 and gathered_everything(out, world_size) for code, out, _ in outcomes)
    ok = ok and all("hosting the store: false" in out for _, out, _ in outcomes)
    report(name, ok, repr(outcomes))
    # Our keys are visible to torch, under our namespace.
    session = store.get("aboleth/0/session").decode()
    report("session record readable by torch", session.startswith("aboleth-bootstrap-v1 "), session)
    return store, port


def check_wrong_token_through_torch(probe):
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30),
                          wait_for_workers=False)
    host = start_probe(probe, port, 0, 2, token="job-a", timeout_seconds="3")
    time.sleep(0.5)
    stray = start_probe(probe, port, 1, 2, token="job-b", timeout_seconds="3")
    host_code, _, host_err = finish(host)
    stray_code, _, stray_err = finish(stray)
    report(
        "wrong job token refused through torch's server",
        stray_code != 0 and "rank 1 refused: its job token" in stray_err
        and host_code != 0 and "a process claiming rank 1 was refused" in host_err,
        f"host: {host_err!r} stray: {stray_err!r}",
    )
    del store


def check_torchrun(probe, standalone):
    command = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--nproc-per-node", "2"]
    if standalone:
        command.append("--standalone")
    else:
        command += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    command.append(probe)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("TORCHELASTIC_", "MASTER_", "ABOLETH_"))}
    environment["ABOLETH_BOOTSTRAP_TIMEOUT_S"] = "30"
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    name = f"our client vs torchrun agent store ({'standalone c10d' if standalone else 'static'})"
    ok = (result.returncode == 0 and gathered_everything(result.stdout, 2)
          and "hosting the store: false" in result.stdout)
    report(name, ok, output[-3000:])


def check_torch_client_against_our_server(probe):
    port = free_port()
    host = start_probe(probe, port, 0, 2, timeout_seconds="60")
    # Connects with retries while rank 0's server starts.
    client = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30))
    failures = []

    def expect(name, got, want):
        if got != want:
            failures.append(f"{name}: got {got!r}, want {want!r}")

    client.set("x", b"1")
    expect("get", client.get("x"), b"1")
    expect("add", client.add("counter", 5), 5)
    expect("add again", client.add("counter", 2), 7)
    expect("get counter", client.get("counter"), b"7")
    expect("compare_set new", client.compare_set("cas", "", "a"), b"a")
    expect("compare_set wrong", client.compare_set("cas", "b", "c"), b"a")
    expect("compare_set right", client.compare_set("cas", "a", "c"), b"c")
    expect("check present", client.check(["x", "counter"]), True)
    expect("check missing", client.check(["x", "nothing"]), False)
    client.wait(["x"], datetime.timedelta(seconds=5))
    started = time.monotonic()
    try:
        client.wait(["never"], datetime.timedelta(milliseconds=200))
        failures.append("wait on a missing key did not time out")
    except Exception:  # torch raises DistStoreError / RuntimeError on timeout
        if time.monotonic() - started > 5:
            failures.append("wait timeout took too long")
    client.set("after-timeout", b"ok")
    expect("get after a cancelled wait", client.get("after-timeout"), b"ok")
    client.append("appended", b"ab")
    client.append("appended", b"cd")
    expect("append", client.get("appended"), b"abcd")
    if hasattr(client, "multi_set"):
        client.multi_set(["m1", "m2"], [b"v1", b"v2"])
        expect("multi_get", client.multi_get(["m1", "m2"]), [b"v1", b"v2"])
    expect("delete_key", client.delete_key("x"), True)
    expect("delete_key again", client.delete_key("x"), False)
    if client.num_keys() < 5:
        failures.append(f"num_keys {client.num_keys()} is too small")
    report("torch client vs our server: store operations", not failures, "; ".join(failures))

    rank1 = start_probe(probe, port, 1, 2, timeout_seconds="60")
    host_code, host_out, host_err = finish(host)
    rank1_code, rank1_out, rank1_err = finish(rank1)
    del client
    report(
        "probe ranks complete after torch used our server",
        host_code == 0 and rank1_code == 0 and "hosting the store: true" in host_out
        and gathered_everything(host_out, 2) and gathered_everything(rank1_out, 2),
        f"{host_err!r} {rank1_err!r}",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", default="target/release/aboleth-bootstrap-probe",
                        help="path to the aboleth-bootstrap-probe binary")
    arguments = parser.parse_args()
    probe = os.path.abspath(arguments.probe)
    import torch
    print(f"torch {torch.__version__}, probe {probe}")
    for use_libuv in (True, False):
        try:
            check_torch_server(probe, use_libuv)
        except Exception as error:  # report and go on with the other checks
            report(f"torch server (use_libuv={use_libuv})", False, repr(error))
    for check in (lambda: check_wrong_token_through_torch(probe),
                  lambda: check_torchrun(probe, standalone=False),
                  lambda: check_torchrun(probe, standalone=True),
                  lambda: check_torch_client_against_our_server(probe)):
        try:
            check()
        except Exception as error:
            report(getattr(check, "__name__", "check"), False, repr(error))
    print(f"{sum(RESULTS)}/{len(RESULTS)} checks passed")
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
