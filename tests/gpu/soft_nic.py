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
2. ``immediate``: ``counted_chains`` (16 puts of 256 B, each followed by ``add 1`` on the
   peer's counter for this rank: a small constant, so with ``immediate_signals=True`` each
   signal rides on its put as an RDMA write with immediate, which the peer's NIC delivers into
   this rank's receive CQ and this rank's wait applies), compiled with and without immediate
   signals, 10 launches each on a fresh counter, checked bit-exact (slices, and the counter at
   16 per launch). Passes: every launch correct, and with immediates the stage writes and the
   NIC executes 16 WQEs per launch, without them 32.
3. ``nic_stopped``: rank 0 stops its NIC thread (``World.stop_soft_nic``), then both ranks launch
   the seed's all-to-all (examples/triton/alltoall.py). Rank 0's put and signal are never
   executed, so rank 1's wait for rank 0's flag must give up at the bound and ``check_waits``
   name rank 1, the flag and the epoch; rank 0's wait for its signal's completion must give up
   too (naming the completion wait on its queue to rank 1). Both kernels must end within a few
   bounds.

``ABOLETH_TRANSPORT=ionic`` runs it over the experimental Ionic transport instead: the code
generated for Ionic (64-byte WQEs with the lap's color, the 64-bit doorbell, CQ polls by color)
on the software NIC's Ionic queue pairs (``aboleth_nic::ionic::IonicDevice``, firmware ABI 2);
step 2 is skipped (Ionic has no write-with-immediate signals), and the CQ and doorbell modes do
not apply.

``ABOLETH_SOFT_NIC_CQ=ring`` runs it all with a CQ ring of 1024 CQEs (owner bits, the generated
code following it in the management block) instead of the collapsed CQ, and
``ABOLETH_SOFT_NIC_DOORBELL=host`` on the staged path (``ENDPOINT_FLAG_HOST_RINGS_DOORBELL``: the
GPU stores only the doorbell record, the NIC thread rings; the handle has no UAR address), where
``host_doorbells_rung`` counts instead of ``doorbells_observed``.

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
import triton
import triton.language as tl

import aboleth
import aboleth.language as ab

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "experiments", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "triton"))

from alltoall import alltoall  # noqa: E402
from kernels import stream_chains  # noqa: E402

CHAINS = 16
BYTES_PER_CHAIN = 256
LAUNCHES = 10
#: The soft QPs' modes (transport/soft_rdma.rs): a CQ ring instead of the collapsed CQ, and the
#: staged path (the GPU stores only the doorbell record; the NIC thread rings).
CQ_MODE = os.environ.get("ABOLETH_SOFT_NIC_CQ", "collapsed")
DOORBELL_MODE = os.environ.get("ABOLETH_SOFT_NIC_DOORBELL", "gpu")
STAGED = DOORBELL_MODE == "host"
#: "rdma" (mlx5) or "ionic" (the experimental Ionic transport on the software NIC).
TRANSPORT = os.environ.get("ABOLETH_TRANSPORT", "rdma")


@triton.jit(do_not_specialize=["launch"])
def counted_chains(endpoints, recv, counters, send, send_key, my_counters, launch, BYTES: tl.constexpr,
                   RANK: tl.constexpr, CHAINS: tl.constexpr):
    """CHAINS puts to the other of two ranks, each followed by ``add 1`` on the peer's counter for
    this rank, then the wait for CHAINS per launch from the peer and the last completion."""
    peer = 1 - RANK
    ep = ab.endpoint(endpoints, peer)
    dst = ab.remote(recv, peer)
    counter = ab.remote(counters, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for chain in range(CHAINS):
        t = ab.put(ep, dst.at((RANK * CHAINS + chain) * BYTES), src + chain * BYTES, BYTES, source_key=send_key)
        ab.signal(ep, counter.at(RANK), 1, op="add", after=t)
    ab.wait_signal(my_counters + peer, CHAINS * launch)
    ab.drain(ep)


def pattern(source: int, destination: int, length: int) -> torch.Tensor:
    values = (torch.arange(length, device="cuda", dtype=torch.int64) * (2 * source + 3) + 7 * destination + 1) % 251
    return values.to(torch.uint8)


def counters(world: Any) -> Dict[str, int]:
    statistics = world.soft_nic_statistics()
    if statistics is None:
        raise RuntimeError("this World has no software NIC: run with ABOLETH_TRANSPORT=rdma (or ionic) "
                           "ABOLETH_RDMA_DEVICE=soft")
    return statistics


def stage_counts(compiled: Any) -> Dict[str, Any]:
    """The stage's static counts of a compiled kernel (its summary in the metadata)."""
    summary = getattr(compiled.metadata, "aboleth", None)
    return (json.loads(summary) if isinstance(summary, str) else summary or {}).get("counts", {})


def nic_per_launch(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, float]:
    """The NIC's counters between two readings, per counted launch."""
    return {name: (after[name] - before[name]) / LAUNCHES
            for name in ("doorbells_observed", "host_doorbells_rung", "wqes_executed", "wqes_failed")}


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
        counts, per_launch = stage_counts(compiled), nic_per_launch(before, after)
        result[variant] = {"static": {name: counts.get(name) for name in
                                      ("wqes", "doorbells", "doorbell_record_updates", "completions_requested")},
                           "nic_per_launch": per_launch}
        if per_launch["wqes_failed"] != 0:
            errors.append(f"{variant}: {per_launch['wqes_failed']} WQEs failed per launch")
    on = result["passes-on"]
    # On the staged path the GPU stores no doorbell: the NIC thread rings on the record.
    rung, not_rung = (("host_doorbells_rung", "doorbells_observed") if STAGED
                      else ("doorbells_observed", "host_doorbells_rung"))
    result["one_doorbell_per_batch"] = (on["static"]["doorbells"] == 1
                                        and 0 < on["nic_per_launch"][rung] <= 1
                                        and on["nic_per_launch"][not_rung] == 0)
    if not result["one_doorbell_per_batch"]:
        errors.append(f"passes-on: stage doorbells {on['static']['doorbells']}, NIC {on['nic_per_launch']} per "
                      f"launch; expected 1 {rung} and no {not_rung}")
    result["errors"] = errors
    result["passed"] = not errors
    result["next_epoch"] = epoch
    return result


def immediate(world: Any, rank: int, n: int) -> Dict[str, Any]:
    peer = 1 - rank
    capacity = CHAINS * BYTES_PER_CHAIN
    result: Dict[str, Any] = {"chains": CHAINS, "bytes_per_chain": BYTES_PER_CHAIN, "launches": LAUNCHES}
    errors: List[str] = []
    for variant, immediate_signals in (("immediate-signals", True), ("atomic-signals", False)):
        buf = torch.zeros(2 * n * capacity + 8 * n, dtype=torch.uint8, device="cuda")
        reg = world.register(buf)
        table = world.exchange_regions({
            "send": world.region("send", reg, offset=0, length=n * capacity),
            "recv": world.region("recv", reg, offset=n * capacity, length=n * capacity),
            "counters": world.region("counters", reg, offset=2 * n * capacity, length=8 * n),
        })
        send, recv_all = table.local("send"), buf[n * capacity:2 * n * capacity]
        my_counters = buf[2 * n * capacity:].view(torch.int64)
        buf[:capacity].copy_(pattern(rank, peer, capacity))
        before, compiled = None, None
        for launch in range(1, LAUNCHES + 2):  # the first launch compiles; it is not counted
            recv_all.fill_(launch & 0xFF)
            torch.cuda.synchronize()
            world.barrier()
            if launch == 2:
                before = counters(world)
            with world.compilation(immediate_signals=immediate_signals):
                compiled = counted_chains[(1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                                table.regions("counters"), send.address, send.lkey, my_counters,
                                                launch, BYTES=BYTES_PER_CHAIN, RANK=rank, CHAINS=CHAINS)
            torch.cuda.synchronize()
            world.check_waits()
            if not torch.equal(recv_all[peer * capacity:(peer + 1) * capacity], pattern(peer, rank, capacity)):
                errors.append(f"{variant} launch {launch}: the peer's data differs")
            seen = int(my_counters[peer].item())
            if seen != CHAINS * launch:
                errors.append(f"{variant} launch {launch}: counter {seen}, expected {CHAINS * launch}")
        world.barrier()
        after = counters(world)
        counts, per_launch = stage_counts(compiled), nic_per_launch(before, after)
        result[variant] = {"static": {name: counts.get(name) for name in ("wqes", "doorbells")},
                           "nic_per_launch": per_launch}
        expected_wqes = CHAINS if immediate_signals else 2 * CHAINS
        if counts.get("wqes") != expected_wqes or per_launch["wqes_executed"] != expected_wqes:
            errors.append(f"{variant}: stage WQEs {counts.get('wqes')}, NIC executed "
                          f"{per_launch['wqes_executed']} per launch; expected {expected_wqes}")
        if per_launch["wqes_failed"] != 0:
            errors.append(f"{variant}: {per_launch['wqes_failed']} WQEs failed per launch")
    result["errors"] = errors
    result["passed"] = not errors
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
                              "timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "cq": CQ_MODE,
                              "doorbell": DOORBELL_MODE, "transport": TRANSPORT, "steps": {}, "passed": False}
    try:
        if n != 2:
            raise SystemExit("soft_nic.py runs on exactly 2 ranks (each streams to the other)")
        world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        report["transports"] = world.connect_all(TRANSPORT)
        report["compilation_target"] = world.compilation_target()
        report["steps"]["streams"] = streams(world, rank, n, epoch=1)
        print(f"rank {rank} streams: {json.dumps(report['steps']['streams'])}", flush=True)
        if TRANSPORT == "ionic":
            report["skipped"] = {"immediate": "Ionic has no write-with-immediate signals"}
        else:
            report["steps"]["immediate"] = immediate(world, rank, n)
            print(f"rank {rank} immediate: {json.dumps(report['steps']['immediate'])}", flush=True)
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
