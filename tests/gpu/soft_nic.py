"""The mlx5 transport over the software NIC on the GPU: ``connect_all("rdma")`` with
``ABOLETH_RDMA_DEVICE=soft``. The GPU writes the WQEs, the doorbell record and the UAR word
(host-pinned memory); the NIC thread of each rank executes them with copy-engine copies into the
peer's memory (CUDA IPC) and a compare-and-swap kernel for the atomics. Run two ranks on one host:

    ABOLETH_TRANSPORT=rdma ABOLETH_RDMA_DEVICE=soft ABOLETH_WAIT_TIMEOUT_MS=2000 \\
        torchrun --nproc-per-node 2 tests/gpu/soft_nic.py OUT_DIR

(``tests/gpu/run_soft_nic.sh`` sets this up, CUDA MPS included when the ranks share a GPU.)
Steps, each rank:

1. ``streams``: experiments/bench/kernels.py's ``stream_chains`` (16 put+signal chains of
   256 B to the other rank, then the waits for its 16 flags and the last signal's completion),
   compiled with the passes on and with them off; 10 launches each, every one checked bit-exact
   (the peer's 16 slices, its 16 flags). Per configuration: the stage's static counts (WQEs,
   doorbells, doorbell-record stores) and the NIC's counters per launch (UAR stores observed:
   at most the doorbells rung, since two stores between two polls are seen as one; WQEs
   executed; WQEs failed). Passes: every launch correct, no WQE failed, and with the passes on
   the NIC observes at most the one doorbell per launch the stage counted.
2. ``nic_stopped``: rank 0 stops its NIC thread (``World.stop_soft_nic``), then both ranks launch
   the seed's all-to-all (examples/triton/alltoall.py). Rank 0's put and signal are never
   executed, so rank 1's wait for rank 0's flag must give up at the bound and ``check_waits``
   name rank 1, the flag and the epoch; rank 0's wait for its signal's completion must give up
   too (naming the completion wait on its queue to rank 1). Both kernels must end within a few
   bounds.

Writes OUT_DIR/soft_nic-rank{R}.json; exit status 0 when every step passed on this rank.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List

import torch

import aboleth

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "experiments", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "triton"))

from alltoall import alltoall  # noqa: E402
from kernels import stream_chains  # noqa: E402

CHAINS = 16
BYTES_PER_CHAIN = 256
LAUNCHES = 10


def pattern(source: int, destination: int, length: int) -> torch.Tensor:
    values = (torch.arange(length, device="cuda", dtype=torch.int64) * (2 * source + 3) + 7 * destination + 1) % 251
    return values.to(torch.uint8)


def counters(world: Any) -> Dict[str, int]:
    statistics = world.soft_nic_statistics()
    if statistics is None:
        raise RuntimeError("this World has no software NIC: run with ABOLETH_TRANSPORT=rdma ABOLETH_RDMA_DEVICE=soft")
    return statistics


def streams(world: Any, rank: int, n: int, epoch: int) -> Dict[str, Any]:
    peer = 1 - rank
    capacity = CHAINS * BYTES_PER_CHAIN
    buf = torch.zeros(2 * n * capacity + 8 * n * CHAINS, dtype=torch.uint8, device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=n * capacity),
        "recv": world.region("recv", reg, offset=n * capacity, length=n * capacity),
        "flags": world.region("flags", reg, offset=2 * n * capacity, length=8 * n * CHAINS),
    })
    send, recv_all = table.local("send"), buf[n * capacity:2 * n * capacity]
    my_flags = buf[2 * n * capacity:].view(torch.int64)
    buf[:capacity].copy_(pattern(rank, peer, capacity))
    posting_cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    result: Dict[str, Any] = {"chains": CHAINS, "bytes_per_chain": BYTES_PER_CHAIN, "launches": LAUNCHES}
    errors: List[str] = []
    for variant, options in (("passes-on", {}), ("passes-off", {"passes_off": True})):
        before, compiled = None, None
        for index in range(LAUNCHES + 1):  # the first launch compiles; it is not counted
            recv_all.fill_(index & 0xFF)
            torch.cuda.synchronize()
            world.barrier()
            if index == 1:
                before = counters(world)
            with world.compilation(**options):
                compiled = stream_chains[(1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                               table.regions("flags"), send.address, send.lkey, my_flags, epoch,
                                               posting_cycles, BYTES=BYTES_PER_CHAIN, RANK=rank, CHAINS=CHAINS)
            torch.cuda.synchronize()
            world.check_waits()
            got = recv_all[peer * capacity:(peer + 1) * capacity]
            if not torch.equal(got, pattern(peer, rank, capacity)):
                errors.append(f"{variant} launch {index}: the peer's data differs")
            flags = my_flags[peer * CHAINS:(peer + 1) * CHAINS].tolist()
            if any(value != epoch for value in flags):
                errors.append(f"{variant} launch {index}: flags {flags}, expected {epoch}")
            epoch += 1
        # Both ranks' NICs have executed everything: the peer's flags arrived, and each rank
        # waited for its own last signal's completion.
        world.barrier()
        after = counters(world)
        summary = getattr(compiled.metadata, "aboleth", None)
        counts = (json.loads(summary) if isinstance(summary, str) else summary or {}).get("counts", {})
        per_launch = {name: (after[name] - before[name]) / LAUNCHES
                      for name in ("doorbells_observed", "wqes_executed", "wqes_failed")}
        result[variant] = {"static": {name: counts.get(name) for name in
                                      ("wqes", "doorbells", "doorbell_record_updates", "completions_requested")},
                           "nic_per_launch": per_launch}
        if per_launch["wqes_failed"] != 0:
            errors.append(f"{variant}: {per_launch['wqes_failed']} WQEs failed per launch")
    on = result["passes-on"]
    result["one_doorbell_per_batch"] = (on["static"]["doorbells"] == 1
                                        and 0 < on["nic_per_launch"]["doorbells_observed"] <= 1)
    if not result["one_doorbell_per_batch"]:
        errors.append(f"passes-on: stage doorbells {on['static']['doorbells']}, NIC observed "
                      f"{on['nic_per_launch']['doorbells_observed']} per launch; expected 1")
    result["errors"] = errors
    result["passed"] = not errors
    result["next_epoch"] = epoch
    return result


def nic_stopped(world: Any, rank: int, n: int, epoch: int) -> Dict[str, Any]:
    BYTES = 256
    buf = torch.zeros(2 * n * BYTES + 8 * n, dtype=torch.uint8, device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=n * BYTES),
        "recv": world.region("recv", reg, offset=n * BYTES, length=n * BYTES),
        "flags": world.region("flags", reg, offset=2 * n * BYTES, length=8 * n),
    })
    send = table.local("send")
    my_flags = buf[2 * n * BYTES:].view(torch.int64)
    world.clear_waits()
    world.barrier()
    if rank == 0:
        world.stop_soft_nic()
    world.barrier()
    started = time.monotonic()
    with world.compilation():
        alltoall[(n - 1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"), table.regions("flags"),
                           send.address, send.lkey, my_flags, epoch, BYTES=BYTES, RANK=rank)
    torch.cuda.synchronize()
    seconds = time.monotonic() - started
    bound_s = float(os.environ.get("ABOLETH_WAIT_TIMEOUT_MS", "10000")) / 1000
    result: Dict[str, Any] = {"kernel_seconds": round(seconds, 3), "bound_seconds": bound_s, "epoch": epoch}
    try:
        world.check_waits()
        result["check_waits"] = "did not raise"
        message = ""
    except RuntimeError as error:
        message = str(error)
        result["check_waits"] = message
    if rank == 0:
        expected = "for a completion on its queue to rank 1" in message
    else:
        expected = f"rank {rank}" in message and f">= {epoch}" in message and "last saw 0" in message
    result["passed"] = expected and seconds < 4 * bound_s + 10
    world.clear_waits()
    return result


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    report: Dict[str, Any] = {"rank": rank, "device": torch.cuda.get_device_name(),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "steps": {}, "passed": False}
    try:
        if n != 2:
            raise SystemExit("soft_nic.py runs on exactly 2 ranks (each streams to the other)")
        world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        report["transports"] = world.connect_all(os.environ.get("ABOLETH_TRANSPORT", "rdma"))
        report["compilation_target"] = world.compilation_target()
        report["steps"]["streams"] = streams(world, rank, n, epoch=1)
        print(f"rank {rank} streams: {json.dumps(report['steps']['streams'])}", flush=True)
        report["steps"]["nic_stopped"] = nic_stopped(world, rank, n, report["steps"]["streams"]["next_epoch"])
        print(f"rank {rank} nic_stopped: {json.dumps(report['steps']['nic_stopped'])}", flush=True)
        report["nic_counters_at_end"] = world.soft_nic_statistics()
        world.close()
        report["passed"] = all(step.get("passed") for step in report["steps"].values())
    except BaseException:  # noqa: BLE001 - the report says what failed
        report["error"] = traceback.format_exc()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"soft_nic-rank{rank}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {rank}: {'PASSED' if report['passed'] else 'FAILED'}{report.get('error', '')}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
