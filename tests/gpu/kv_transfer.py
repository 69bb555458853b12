"""aboleth.kv.Transfer on the GPU, two ranks, bit-exact: KV-cache blocks of 4 layers (vLLM's
``[2, num_blocks, 16, 8, 128]`` bf16 layout, 32 KiB per block and plane; rank 0 holds 64 blocks,
rank 1 48) moved between the ranks' caches over ``ABOLETH_TRANSPORT``:

    torchrun --nproc-per-node 2 tests/gpu/kv_transfer.py OUT_DIR   (tests/gpu/run_kv_transfer.sh)

Every rank fills its caches from a seed of (rank, layer), so any rank can regenerate any other's
and check, after each case, every block of its own caches: a destination block holds the source
block it was sent, every other block is unchanged. Cases, in order:

1. ``random``: 20 random source blocks of rank 0 into 20 random blocks of rank 1, every layer;
   rank 1 waits for each layer;
2. ``contiguous``: 24 consecutive blocks into 24 consecutive ones (few, long puts);
3. ``both_ways_overlapping``: each rank sends two requests to the other before either waits
   (the flags count two transfers per layer), and the two requests' destinations interleave;
4. ``many_launches``: 40 scattered blocks with at most 8 runs per launch (5 launches per layer,
   only the last adds to the flag);
5. ``wait_before_send``: rank 1 launches its waits for layers 2 and 3, and rank 0 sends them
   only a moment later;
6. ``bad_tables``: a destination block past rank 1's cache and a repeated destination raise
   ``ValueError`` before anything is launched;
7. ``never_sent``: rank 1 waits for layer 1 from rank 0, which never sends it; ``check()`` must
   raise ``TimeoutError`` naming the layer and the peer within a few bounds
   (``ABOLETH_WAIT_TIMEOUT_MS``);
8. ``unregistered_source`` (proxy only, last: it stops rank 0's ring): the send kernel launched
   with a tensor nobody registered as its cache; ``World.check_proxy()`` must name the source
   as not registered (before, the copy engine read it as host memory and the process crashed).

Writes OUT_DIR/kv_transfer-rank{R}.json; exit status 0 when every case passed on this rank.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
import time
import traceback
from typing import Any, Dict, List

import torch

import aboleth
from aboleth.kv import Transfer

LAYERS = 4
SHAPE = (16, 8, 128)  # block size, KV heads, head size
BLOCKS = {0: 64, 1: 48}


def initial_cache(rank: int, layer: int) -> torch.Tensor:
    """Rank ``rank``'s layer ``layer`` before any transfer: random bits from a (rank, layer) seed."""
    generator = torch.Generator(device="cuda").manual_seed(1000 * rank + layer)
    bits = torch.randint(-32768, 32767, (2, BLOCKS[rank], *SHAPE), dtype=torch.int16, device="cuda",
                         generator=generator)
    return bits.view(torch.bfloat16)


class Checker:
    """Every rank's expected caches (each rank knows every table: they come from shared seeds),
    from the initial ones with each transfer applied."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.model = {owner: [initial_cache(owner, layer).view(torch.int16).clone() for layer in range(LAYERS)]
                      for owner in BLOCKS}

    def transferred(self, source: int, source_blocks: List[int], destination_blocks: List[int],
                    layers: List[int]) -> None:
        destination = 1 - source
        for layer in layers:
            sent = self.model[source][layer][:, source_blocks].clone()
            self.model[destination][layer][:, destination_blocks] = sent

    def mismatches(self, caches: List[torch.Tensor]) -> List[str]:
        torch.cuda.synchronize()
        found = []
        for layer, (cache, expected) in enumerate(zip(caches, self.model[self.rank])):
            wrong = (cache.view(torch.int16) != expected).flatten(2).any(dim=2)  # [plane, block]
            for plane, block in wrong.nonzero().tolist():
                found.append(f"layer {layer} plane {plane} block {block}")
        return found[:10]


def case(report: Dict[str, Any], name: str, run: Any) -> None:
    started = time.monotonic()
    try:
        result = run()
        result.setdefault("passed", not result.get("mismatches"))
    except Exception:  # noqa: BLE001 - the report says what failed
        result = {"passed": False, "error": traceback.format_exc()[-2000:]}
    result["seconds"] = round(time.monotonic() - started, 3)
    report["cases"][name] = result
    print(f"rank {report['rank']} {name}: {json.dumps(result)[:600]}", flush=True)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, ranks = boot.rank, boot.world_size
    report: Dict[str, Any] = {"rank": rank, "device": torch.cuda.get_device_name(),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "cases": {}, "passed": False}
    try:
        if ranks != 2:
            raise SystemExit("kv_transfer.py runs on exactly 2 ranks")
        world = aboleth.World(rank, ranks, device=torch.cuda.current_device(), bootstrap=boot)
        report["transports"] = world.connect_all(os.environ.get("ABOLETH_TRANSPORT", "p2p"))
        report["compilation_target"] = world.compilation_target()
        caches = [initial_cache(rank, layer).clone() for layer in range(LAYERS)]
        transfer = Transfer(world, {f"layers.{layer}": cache for layer, cache in enumerate(caches)})
        report["parts"] = transfer.parts
        checker = Checker(rank)
        peer = 1 - rank
        every = list(range(LAYERS))
        tables = random.Random(7)

        def one_way(source_blocks: List[int], destination_blocks: List[int], layers: List[int] = every,
                    max_runs: int = transfer.max_runs) -> Dict[str, Any]:
            plan = None
            transfer.max_runs = max_runs
            checker.transferred(0, source_blocks, destination_blocks, layers)  # before the waits, not behind them
            if rank == 0:
                plan = transfer.send(1, source_blocks, destination_blocks, layers)
            else:
                transfer.expect(0, layers)
                for layer in layers:
                    transfer.wait_layer(layer)
            transfer.check()
            world.barrier("kv")
            result = {"mismatches": checker.mismatches(caches)}
            if plan is not None:
                result.update(runs=plan.runs, launches_per_layer=len(plan.chunks))
            return result

        sources = tables.sample(range(BLOCKS[0]), 20)
        destinations = tables.sample(range(BLOCKS[1]), 20)
        case(report, "random", lambda: one_way(sources, destinations))
        case(report, "contiguous", lambda: one_way(list(range(30, 54)), list(range(10, 34))))

        def both_ways() -> Dict[str, Any]:
            # The blocks written on each rank, then sources among the others (a block is never
            # read while the peer writes it).
            written = {owner: tables.sample(range(BLOCKS[owner]), 16) for owner in BLOCKS}
            requests = []
            for source in (0, 1):
                readable = [block for block in range(BLOCKS[source]) if block not in written[source]]
                picked = written[1 - source]
                requests.append((source, tables.sample(readable, 8), picked[0::2]))
                requests.append((source, tables.sample(readable, 8), picked[1::2]))
            for source, source_blocks, destination_blocks in requests:
                if source == rank:
                    transfer.send(peer, source_blocks, destination_blocks)
                else:
                    transfer.expect(peer)
                checker.transferred(source, source_blocks, destination_blocks, every)
            for layer in every:
                transfer.wait_layer(layer)
            transfer.check()
            world.barrier("kv")
            return {"mismatches": checker.mismatches(caches)}
        case(report, "both_ways_overlapping", both_ways)

        scattered_sources = list(range(0, 80, 2))[:40]
        scattered = [block for block in range(0, BLOCKS[1]) if block % 6 != 5][:40]
        case(report, "many_launches", lambda: one_way([b % BLOCKS[0] for b in scattered_sources], scattered,
                                                      max_runs=8))

        def wait_before_send() -> Dict[str, Any]:
            layers = [2, 3]
            source_blocks, destination_blocks = tables.sample(range(BLOCKS[0]), 6), tables.sample(range(BLOCKS[1]), 6)
            # The model first: its indexing copies to the GPU, which would queue behind the waits
            # and hold this host back until they end.
            checker.transferred(0, source_blocks, destination_blocks, layers)
            if rank == 1:
                transfer.expect(0, layers)
                for layer in layers:
                    transfer.wait_layer(layer)
            world.barrier("kv-waits-launched")
            timings = {}
            if rank == 0:
                time.sleep(0.2)
                # Whether this rank's kernels run while the peer's waits spin (they must, under
                # MPS), then the send: host time, and until its kernels are done.
                started = time.monotonic()
                torch.ones(1, device="cuda").add_(1)
                torch.cuda.synchronize()
                timings["probe_kernel_s"] = round(time.monotonic() - started, 4)
                started = time.monotonic()
                transfer.send(1, source_blocks, destination_blocks, layers)
                timings["send_host_s"] = round(time.monotonic() - started, 4)
                torch.cuda.synchronize()
                timings["send_done_s"] = round(time.monotonic() - started, 4)
            started = time.monotonic()
            failure = None
            try:
                transfer.check()
            except TimeoutError as error:
                failure = str(error)
            timings["check_s"] = round(time.monotonic() - started, 4)
            world.barrier("kv")
            flags = transfer.flags.view(LAYERS, ranks).tolist()
            result = {"mismatches": checker.mismatches(caches), "flags_after": flags, **timings}
            if failure:
                result.update(passed=False, failure=failure)
            return result
        case(report, "wait_before_send", wait_before_send)

        def bad_tables() -> Dict[str, Any]:
            messages = []
            for source_blocks, destination_blocks in (([0], [BLOCKS[peer]]), ([0, 1], [3, 3])):
                try:
                    transfer.prepare(peer, source_blocks, destination_blocks)
                    messages.append(None)
                except ValueError as error:
                    messages.append(str(error))
            return {"messages": messages, "passed": all(messages) and "outside rank" in messages[0]
                    and "given twice" in messages[1]}
        case(report, "bad_tables", bad_tables)

        def never_sent() -> Dict[str, Any]:
            started = time.monotonic()
            message = None
            if rank == 1:
                transfer.expect(0, [1])
                transfer.wait_layer(1)
                try:
                    transfer.check()
                except TimeoutError as error:
                    message = str(error)
            seconds = time.monotonic() - started
            world.barrier("kv")
            if rank == 0:
                return {"passed": True, "note": "rank 0 sends nothing"}
            bound_s = int(os.environ.get("ABOLETH_WAIT_TIMEOUT_MS", "2000")) / 1000
            return {"message": message, "seconds_to_error": round(seconds, 2),
                    "passed": bool(message) and "layer layers.1 from rank 0" in message and seconds < 4 * bound_s + 5}
        case(report, "never_sent", never_sent)

        def unregistered_source() -> Dict[str, Any]:
            # The send kernel pointed at a tensor nobody registered: over the proxy the ring must
            # stop with an error naming the source (it made the copy engine read host memory
            # and crash the process), and the kernel's completion wait give up at its bound.
            if report["compilation_target"] != "proxy":
                return {"passed": True, "note": "proxy only"}
            message = None
            if rank == 0:
                stray = torch.zeros(2, 8, *SHAPE, dtype=torch.bfloat16, device="cuda")
                plan = transfer.prepare(1, [0], [0])
                run_sources, run_destinations, run_blocks, runs, _ = plan.launches[0]
                transfer._send.launch(
                    transfer._send_grid,
                    (transfer.endpoints, transfer.cache_regions[0], transfer.flag_regions, stray,
                     transfer.cache_keys[0], run_sources, run_destinations, run_blocks, runs, 1, 0,
                     8 * transfer.block_bytes, transfer.peer_num_blocks[1] * transfer.block_bytes),
                    {"RANK": 0, "RANKS": ranks, "PLANES": 2, "BLOCK_BYTES": transfer.block_bytes,
                     "PARTS": transfer.parts, "MAX_RUNS": transfer.max_runs, "SIGNAL": True})
                torch.cuda.synchronize()
                try:
                    world.check_proxy()
                except RuntimeError as error:
                    message = str(error)
                world.clear_waits()
            world.barrier("kv")
            if rank == 1:
                return {"passed": True, "note": "rank 0 sends from a stray tensor"}
            return {"message": message,
                    "passed": bool(message) and "not inside memory this rank registered" in message}
        case(report, "unregistered_source", unregistered_source)
        report["statistics"] = transfer.statistics()
        try:
            world.close()
        except RuntimeError as error:
            # close() reports the stopped ring again: expected after unregistered_source only.
            expected = report["cases"].get("unregistered_source", {}).get("message")
            if not expected or "not inside memory this rank registered" not in str(error):
                raise
            report["close_reported"] = str(error)[-300:]
        report["passed"] = all(result.get("passed") for result in report["cases"].values())
    except BaseException:  # noqa: BLE001 - the report says what failed
        report["error"] = traceback.format_exc()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"kv_transfer-rank{rank}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {rank}: {'PASSED' if report['passed'] else 'FAILED'}{report.get('error', '')}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
