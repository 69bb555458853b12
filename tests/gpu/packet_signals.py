"""Flag-in-data (LL packet) signals on the GPU over NVLink: a loop of N put+signal chains to each
peer compiled with `packet_signals=True` (each set travels in its put's data as LL16 packets into
the flag's staging slot, and the receiver's wait unpacks it), checked bit-exact against the same
kernel with release-store signals (the default) and library-style (passes off).

    ABOLETH_TRANSPORT=p2p torchrun --nproc-per-node 2 tests/gpu/packet_signals.py OUT_DIR

The flag region is declared with `world.region(..., packet_slots=True)` and its registration
holds `aboleth.packet_staging_bytes(length)` more bytes. For each N and variant: ROUNDS launches
with fresh payloads and increasing epochs (so every slot is reused across launches), every byte
and flag checked; the PTX is checked for the variant's code (packet stores and no release store
for packets; a release store otherwise) so a silent fallback cannot pass; per-launch kernel
times from CUDA events are reported (informational: they include waiting for the peer).
Then a packet kernel on a flag region declared WITHOUT packet slots must give up at once and
`World.check_waits()` must raise naming the missing slots, with the receive buffer untouched.
Writes OUT_DIR/packet_signals-rank{R}.json; exit status 0 when every check passed.
PACKET_SIGNALS_TRIPS (1,16,64), PACKET_SIGNALS_ROUNDS (20) narrow a run down.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import traceback
from typing import Any, Dict

import torch
import triton
import triton.language as tl

import aboleth
import aboleth.language as al

CHUNK = 64
ROUNDS = int(os.environ.get("PACKET_SIGNALS_ROUNDS", "20"))
TRIPS = tuple(int(trips) for trips in os.environ.get("PACKET_SIGNALS_TRIPS", "1,16,64").split(","))
#: Variant -> (passes_off, packet_signals). The VARIANT constexpr keeps their compilations apart.
VARIANTS = {
    "packets": (False, True),
    "release_store": (False, False),
    "passes_off": (True, False),
}
PACKET_STORE = "@%ab_p st.relaxed.sys.global.u64"


@triton.jit
def stream_loop(endpoints, recv, flags, send, send_key, my_flags, epoch, CHUNK: tl.constexpr, N: tl.constexpr,
                RANK: tl.constexpr, VARIANT: tl.constexpr):
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep = al.endpoint(endpoints, peer)
    dst = al.remote(recv, peer)
    flag = al.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in range(N):
        t = al.put(ep, dst.at((RANK * N + i) * CHUNK), src + (peer * N + i) * CHUNK, CHUNK, source_key=send_key)
        al.signal(ep, flag.at(RANK * N + i), epoch, after=t)
    for i in range(N):
        al.wait_signal(my_flags + peer * N + i, epoch)
    al.drain(ep)


def payload(rank: int, round_index: int, length: int) -> torch.Tensor:
    """What `rank` sends in round `round_index`: a pattern every rank can recompute."""
    positions = torch.arange(length, dtype=torch.int64)
    return ((positions * 7 + rank * 131 + round_index * 17) % 251).to(torch.uint8)


def buffers(world: Any, n: int, trips: int, packet_slots: bool) -> Dict[str, Any]:
    data_bytes = n * trips * CHUNK
    flag_bytes = 8 * n * trips
    staging = aboleth.packet_staging_bytes(flag_bytes)
    buf = torch.zeros(2 * data_bytes + flag_bytes + staging, dtype=torch.uint8, device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=data_bytes),
        "recv": world.region("recv", reg, offset=data_bytes, length=data_bytes),
        "flags": world.region("flags", reg, offset=2 * data_bytes, length=flag_bytes, packet_slots=packet_slots),
    })
    return {"buf": buf, "table": table, "data_bytes": data_bytes,
            "send": buf[:data_bytes], "recv": buf[data_bytes:2 * data_bytes],
            "my_flags": buf[2 * data_bytes:2 * data_bytes + flag_bytes].view(torch.int64)}


def run_trip(world: Any, boot: Any, n: int, trips: int, variant: str) -> Dict[str, Any]:
    passes_off, packet_signals = VARIANTS[variant]
    b = buffers(world, n, trips, packet_slots=True)
    table, send, recv, my_flags, data_bytes = b["table"], b["send"], b["recv"], b["my_flags"], b["data_bytes"]
    arguments = (table.endpoint_handles.view(torch.int64), table.regions("recv"), table.regions("flags"),
                 table.local("send").address, table.local("send").lkey, my_flags)
    result: Dict[str, Any] = {"n": trips, "variant": variant, "mismatches": 0, "rounds": ROUNDS}
    kernel_us = []
    kernel = None
    for round_index in range(ROUNDS):
        epoch = round_index + 1
        send.copy_(payload(boot.rank, round_index, data_bytes).cuda())
        recv.zero_()
        torch.cuda.synchronize()
        world.barrier(f"packet_signals/{trips}/{variant}/{round_index}")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with world.compilation(passes_off=passes_off, packet_signals=packet_signals):
            start.record()
            kernel = stream_loop[(n - 1,)](*arguments, epoch, CHUNK=CHUNK, N=trips, RANK=boot.rank,
                                           VARIANT=list(VARIANTS).index(variant))
            end.record()
        torch.cuda.synchronize()
        kernel_us.append(start.elapsed_time(end) * 1e3)
        world.check_waits()
        received = recv.cpu()
        for source in range(n):
            if source == boot.rank:
                continue
            sent = payload(source, round_index, data_bytes)[boot.rank * trips * CHUNK:(boot.rank + 1) * trips * CHUNK]
            landed = received[source * trips * CHUNK:(source + 1) * trips * CHUNK]
            if not torch.equal(sent, landed):
                result["mismatches"] += 1
                result.setdefault("first_mismatch", {"round": round_index, "from": source,
                                                     "byte": int((sent != landed).nonzero()[0])})
            flags_seen = my_flags[source * trips:(source + 1) * trips].cpu()
            if not bool((flags_seen == epoch).all()):
                result["mismatches"] += 1
                result.setdefault("first_flag_mismatch", {"round": round_index, "from": source,
                                                          "flags": flags_seen.tolist()})
        world.barrier(f"packet_signals/{trips}/{variant}/{round_index}/checked")
    ptx = kernel.asm["ptx"]
    result["ptx"] = {"packet_stores": ptx.count(PACKET_STORE), "st.release.sys": ptx.count("st.release.sys"),
                     "bar.sync": ptx.count("bar.sync")}
    # Packets: packet stores, and the only release stores are the unpacking wait's and the
    # wait-failure record's; the others: no packet store, a release (or fenced) flag store.
    result["code_as_expected"] = (result["ptx"]["packet_stores"] > 0) == packet_signals
    result["median_kernel_us"] = round(statistics.median(kernel_us[1:]), 2)
    result["kernel_us"] = [round(value, 2) for value in kernel_us]
    result["passed"] = result["mismatches"] == 0 and result["code_as_expected"]
    return result


def run_missing_slots(world: Any, boot: Any, n: int) -> Dict[str, Any]:
    """Packet signals into a flag region declared without slots: every program gives up at once,
    nothing is stored, and check_waits names the missing slots."""
    b = buffers(world, n, 1, packet_slots=False)
    table, send, recv, my_flags = b["table"], b["send"], b["recv"], b["my_flags"]
    send.copy_(payload(boot.rank, 0, b["data_bytes"]).cuda())
    before = b["buf"][2 * b["data_bytes"]:].clone()
    torch.cuda.synchronize()
    world.barrier("packet_signals/missing_slots")
    with world.compilation(packet_signals=True):
        stream_loop[(n - 1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"), table.regions("flags"),
                              table.local("send").address, table.local("send").lkey, my_flags, 1,
                              CHUNK=CHUNK, N=1, RANK=boot.rank, VARIANT=0)
    torch.cuda.synchronize()
    result: Dict[str, Any] = {"variant": "missing_slots"}
    try:
        world.check_waits()
        result["error"] = None
    except RuntimeError as error:
        result["error"] = str(error).splitlines()[0][:400]
    world.clear_waits()
    result["recv_untouched"] = bool((recv == 0).all())
    result["flags_and_after_untouched"] = bool(torch.equal(b["buf"][2 * b["data_bytes"]:], before))
    result["passed"] = (result["error"] is not None and "no packet slots" in result["error"]
                        and result["recv_untouched"] and result["flags_and_after_untouched"])
    world.barrier("packet_signals/missing_slots/checked")
    return result


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    transport = os.environ.get("ABOLETH_TRANSPORT", "p2p")
    report: Dict[str, Any] = {"rank": boot.rank, "transport": transport, "chunk_bytes": CHUNK,
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "runs": [], "passed": False}
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(transport)
        for trips in TRIPS:
            for variant in VARIANTS:
                run = run_trip(world, boot, n, trips, variant)
                report["runs"].append(run)
                print(f"rank {boot.rank}: N={trips} {variant}: {'ok' if run['passed'] else 'FAILED'} {run}", flush=True)
        run = run_missing_slots(world, boot, n)
        report["runs"].append(run)
        print(f"rank {boot.rank}: missing slots: {'ok' if run['passed'] else 'FAILED'} {run}", flush=True)
        report["passed"] = all(run["passed"] for run in report["runs"])
        world.close()
    except Exception:
        report["error"] = traceback.format_exc()
        print(report["error"], flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"packet_signals-rank{report['rank']}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {report['rank']}: {'PASSED' if report['passed'] else 'FAILED'}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
