"""Warp- and CTA-scope posting on the GPU, over a real transport: a loop of N put+signal chains
to each peer, whose commands the `choose-doorbell-scope` pass spreads over a warp (N <= 32) or
the whole program (N > 32), checked bit-exact against the same kernel with that pass disabled
(the program's thread 0 writes every command) and library-style (passes off).

    ABOLETH_TRANSPORT=proxy torchrun --nproc-per-node 2 tests/gpu/doorbell_scope.py OUT_DIR

On p2p the pass does not fire (its copies already use every thread); the proxy executes the
ring entries the GPU threads wrote, so a command written late, twice or at the wrong slot shows
up as wrong bytes, a wrong flag or a hang (bounded by ABOLETH_WAIT_TIMEOUT_MS). For each N and
variant: ROUNDS launches with fresh payloads, each checked; the PTX is checked for the scope's
code (a `bar.warp.sync` for warp scope, `%ntid.x` for CTA scope) so a silent fallback to thread
scope cannot pass; per-launch medians are reported (informational: the proxy's completion
round trip dominates them). Writes OUT_DIR/doorbell_scope-rank{R}.json; exit status 0 when
every check passed. DOORBELL_SCOPE_TRIPS (16,64), DOORBELL_SCOPE_VARIANTS (all),
DOORBELL_SCOPE_ROUNDS (20) and DOORBELL_SCOPE_TRACE (print each round) narrow a run down.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Dict

import torch
import triton
import triton.language as tl

import aboleth
import aboleth.language as al

CHUNK = 64
ROUNDS = int(os.environ.get("DOORBELL_SCOPE_ROUNDS", "20"))
TRIPS = tuple(int(trips) for trips in os.environ.get("DOORBELL_SCOPE_TRIPS", "16,64").split(","))
#: Variant -> (passes_off, disabled passes). The VARIANT constexpr keeps their compilations apart.
VARIANTS = {
    "scoped": (False, ()),
    "thread_scope": (False, ("choose-doorbell-scope",)),
    "passes_off": (True, ()),
}


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


def run_trip(world: Any, boot: Any, n: int, trips: int, variant: str) -> Dict[str, Any]:
    passes_off, disabled = VARIANTS[variant]
    data_bytes = n * trips * CHUNK
    buf = torch.zeros(2 * data_bytes + 8 * n * trips, dtype=torch.uint8, device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=data_bytes),
        "recv": world.region("recv", reg, offset=data_bytes, length=data_bytes),
        "flags": world.region("flags", reg, offset=2 * data_bytes, length=8 * n * trips),
    })
    send, recv = buf[:data_bytes], buf[data_bytes:2 * data_bytes]
    my_flags = buf[2 * data_bytes:].view(torch.int64)
    arguments = (table.endpoint_handles.view(torch.int64), table.regions("recv"), table.regions("flags"),
                 table.local("send").address, table.local("send").lkey, my_flags)
    result: Dict[str, Any] = {"n": trips, "variant": variant, "mismatches": 0, "rounds": ROUNDS}
    times_us = []
    kernel = None
    for round_index in range(ROUNDS):
        if os.environ.get("DOORBELL_SCOPE_TRACE"):
            print(f"rank {boot.rank}: N={trips} {variant} round {round_index}", flush=True)
        epoch = round_index + 1
        send.copy_(payload(boot.rank, round_index, data_bytes).cuda())
        recv.zero_()
        torch.cuda.synchronize()
        world.barrier(f"doorbell_scope/{trips}/{variant}/{round_index}")
        started = time.perf_counter()
        with world.compilation(passes_off=passes_off, disabled_passes=disabled):
            kernel = stream_loop[(n - 1,)](*arguments, epoch, CHUNK=CHUNK, N=trips, RANK=boot.rank,
                                           VARIANT=list(VARIANTS).index(variant))
        torch.cuda.synchronize()
        times_us.append((time.perf_counter() - started) * 1e6)
        if os.environ.get("DOORBELL_SCOPE_TRACE"):
            print(f"rank {boot.rank}: N={trips} {variant} round {round_index}: {times_us[-1]:.1f} us", flush=True)
        world.check_waits()
        received = recv.cpu()
        for source in range(n):
            if source == boot.rank:
                continue
            expected_all = payload(source, round_index, data_bytes)
            # Source sent its chunks for us from (us * N + i) * CHUNK; they land at (source * N + i) * CHUNK.
            sent = expected_all[boot.rank * trips * CHUNK:(boot.rank + 1) * trips * CHUNK]
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
        world.barrier(f"doorbell_scope/{trips}/{variant}/{round_index}/checked")
    ptx = kernel.asm["ptx"]
    result["ptx"] = {"bar.warp.sync": ptx.count("bar.warp.sync"), "%ntid.x": ptx.count("%ntid.x")}
    result["median_launch_us"] = round(statistics.median(times_us[1:]), 1)
    result["launch_us"] = [round(value, 1) for value in times_us]
    scope_code_present = (result["ptx"]["bar.warp.sync"] > 0 if trips <= 32 else result["ptx"]["%ntid.x"] > 0)
    # Only the scoped variant on a queue transport may carry the scope's code.
    expects_scope = variant == "scoped" and world.compilation_target() != "p2p"
    result["scope_code_as_expected"] = scope_code_present == expects_scope
    result["passed"] = result["mismatches"] == 0 and result["scope_code_as_expected"]
    return result


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    transport = os.environ.get("ABOLETH_TRANSPORT", "proxy")
    report: Dict[str, Any] = {"rank": boot.rank, "transport": transport, "chunk_bytes": CHUNK,
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "runs": [], "passed": False}
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(transport)
        chosen = os.environ.get("DOORBELL_SCOPE_VARIANTS", ",".join(VARIANTS)).split(",")
        for trips in TRIPS:
            for variant in chosen:
                run = run_trip(world, boot, n, trips, variant)
                report["runs"].append(run)
                print(f"rank {boot.rank}: N={trips} {variant}: {'ok' if run['passed'] else 'FAILED'} {run}", flush=True)
        report["passed"] = all(run["passed"] for run in report["runs"])
        world.close()
    except Exception:
        report["error"] = traceback.format_exc()
        print(report["error"], flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"doorbell_scope-rank{report['rank']}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {report['rank']}: {'PASSED' if report['passed'] else 'FAILED'}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
