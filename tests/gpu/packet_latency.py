"""Round-trip latency of one signalled put over NVLink, with flag-in-data packets against release
stores and library style: a ping-pong of ITERS put+signal exchanges inside one kernel (rank 0
sends, rank 1 waits and answers; each exchange uses its own flag and destination chunk), so the
time per round trip is the kernel time over ITERS with launch skew amortized.

    ABOLETH_TRANSPORT=p2p torchrun --nproc-per-node 2 tests/gpu/packet_latency.py OUT_DIR

For each size (PACKET_LATENCY_BYTES, default 8,64,512) and variant: REPEATS launches (the first
warms up), every byte and flag of every exchange checked after each launch; reports the median
microseconds per round trip. Writes OUT_DIR/packet_latency-rank{R}.json; exit status 0 when
every check passed. Needs exactly 2 ranks.
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
from packet_signals import VARIANTS, payload

ITERS = int(os.environ.get("PACKET_LATENCY_ITERS", "2000"))
REPEATS = int(os.environ.get("PACKET_LATENCY_REPEATS", "6"))
SIZES = tuple(int(size) for size in os.environ.get("PACKET_LATENCY_BYTES", "8,64,512").split(","))


@triton.jit
def ping_pong(endpoints, recv, flags, send, send_key, my_flags, epoch, BYTES: tl.constexpr, ITERS: tl.constexpr,
              RANK: tl.constexpr, VARIANT: tl.constexpr):
    peer = 1 - RANK
    ep = al.endpoint(endpoints, peer)
    dst = al.remote(recv, peer)
    flag = al.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in range(ITERS):
        if RANK == 1:
            al.wait_signal(my_flags + i, epoch)
        t = al.put(ep, dst.at(i * BYTES), src + i * BYTES, BYTES, source_key=send_key)
        al.signal(ep, flag.at(i), epoch, after=t)
        if RANK == 0:
            al.wait_signal(my_flags + i, epoch)
    al.drain(ep)


def run_size(world: Any, boot: Any, size: int, variant: str) -> Dict[str, Any]:
    passes_off, packet_signals = VARIANTS[variant]
    data_bytes = ITERS * size
    flag_bytes = 8 * ITERS
    buf = torch.zeros(2 * data_bytes + flag_bytes + aboleth.packet_staging_bytes(flag_bytes), dtype=torch.uint8,
                      device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=data_bytes),
        "recv": world.region("recv", reg, offset=data_bytes, length=data_bytes),
        "flags": world.region("flags", reg, offset=2 * data_bytes, length=flag_bytes, packet_slots=True),
    })
    send, recv = buf[:data_bytes], buf[data_bytes:2 * data_bytes]
    my_flags = buf[2 * data_bytes:2 * data_bytes + flag_bytes].view(torch.int64)
    result: Dict[str, Any] = {"bytes": size, "variant": variant, "iters": ITERS, "mismatches": 0}
    per_round_trip_us = []
    for repeat in range(REPEATS):
        epoch = repeat + 1
        send.copy_(payload(boot.rank, repeat, data_bytes).cuda())
        recv.zero_()
        torch.cuda.synchronize()
        world.barrier(f"packet_latency/{size}/{variant}/{repeat}")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with world.compilation(passes_off=passes_off, packet_signals=packet_signals):
            start.record()
            kernel = ping_pong[(1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                     table.regions("flags"), table.local("send").address, table.local("send").lkey,
                                     my_flags, epoch, BYTES=size, ITERS=ITERS, RANK=boot.rank,
                                     VARIANT=list(VARIANTS).index(variant))
            end.record()
        torch.cuda.synchronize()
        world.check_waits()
        per_round_trip_us.append(start.elapsed_time(end) * 1e3 / ITERS)
        if not torch.equal(recv.cpu(), payload(1 - boot.rank, repeat, data_bytes)):
            result["mismatches"] += 1
        if not bool((my_flags.cpu() == epoch).all()):
            result["mismatches"] += 1
        world.barrier(f"packet_latency/{size}/{variant}/{repeat}/checked")
    result["packet_code"] = kernel.asm["ptx"].count("@%ab_p st.relaxed.sys.global.u64") > 0
    result["median_round_trip_us"] = round(statistics.median(per_round_trip_us[1:]), 3)
    result["round_trip_us"] = [round(value, 3) for value in per_round_trip_us]
    result["passed"] = result["mismatches"] == 0 and result["packet_code"] == packet_signals
    return result


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    boot = aboleth.TcpStoreBootstrap.from_env()
    report: Dict[str, Any] = {"rank": boot.rank, "transport": os.environ.get("ABOLETH_TRANSPORT", "p2p"),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "runs": [], "passed": False}
    try:
        if boot.world_size != 2:
            raise RuntimeError(f"packet_latency.py is a ping-pong: run it on 2 ranks, not {boot.world_size}")
        world = aboleth.World(boot.rank, 2, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(report["transport"])
        for size in SIZES:
            for variant in VARIANTS:
                run = run_size(world, boot, size, variant)
                report["runs"].append(run)
                print(f"rank {boot.rank}: {size} B {variant}: {'ok' if run['passed'] else 'FAILED'} "
                      f"{run['median_round_trip_us']} us per round trip", flush=True)
        report["passed"] = all(run["passed"] for run in report["runs"])
        world.close()
    except Exception:
        report["error"] = traceback.format_exc()
        print(report["error"], flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"packet_latency-rank{report['rank']}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {report['rank']}: {'PASSED' if report['passed'] else 'FAILED'}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
