"""The KV-cache transfer suite: ``aboleth.kv.Transfer`` against ``torch`` copies through CUDA IPC,
in the same run, for a 7B-class layout (32 layers, 8 KV heads, head size 128, bf16, 16-token
blocks: 32 KiB per block and plane, vLLM's ``[2, num_blocks, 16, 8, 128]`` per layer).

    torchrun --nproc-per-node 2 experiments/bench/kv.py OUT_DIR [--transport p2p|proxy|rdma]
    (experiments/bench/run_kv.sh sets it up, CUDA MPS included when the ranks share a GPU)

Rank 0 (prefill) moves one request's blocks of every layer into rank 1's (decode) caches. Per
request size (BENCH_KV_TOKENS, default 256, 1024, 4096, 16384 tokens) and block layout
(``scattered``: random source and destination blocks, every block its own run; ``contiguous``:
one run), systems:

- ``aboleth``: ``Transfer.send`` of all 32 layers on rank 0 (a ``send_layer`` launch per layer:
  its puts, one signal, a drain), while rank 1 runs ``expect`` and a ``wait_layer`` per layer;
  ``aboleth-layer``: one layer alone (the per-layer latency a pipelined decode waits for);
- ``torch-index``: per layer ``peer[:, destination] = local[:, source]`` on rank 0, where
  ``peer`` is rank 1's cache opened through CUDA IPC (``torch.multiprocessing`` handles): a
  gather and an indexed write straight into the peer's memory, two kernels per layer;
- ``torch-copy``: per layer and run ``peer[:, d:d + n].copy_(local[:, s:s + n])``.

Times are rank 0's CUDA events around the whole transfer (every kernel done: the data is in
rank 1's memory), medians of BENCH_KV_REPETITIONS (default 10) after 2 warm-ups; GB/s counts
the K and V bytes moved. The torch rows have no signal (the receiver is not told). After each
system, rank 0 compares rank 1's destination blocks with its source blocks through the IPC
mapping, bit for bit. Writes OUT_DIR/<date>-kv-<transport>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import rank_environment, timed_repetitions  # noqa: E402

LAYERS = 32
BLOCK_SHAPE = (16, 8, 128)  # tokens per block, KV heads, head size
BLOCK_BYTES = 16 * 8 * 128 * 2
NUM_BLOCKS = 1100
WARMUPS = 2


def tokens_list() -> List[int]:
    text = os.environ.get("BENCH_KV_TOKENS", "")
    return [int(value) for value in text.split(",") if value.strip()] or [256, 1024, 4096, 16384]


def tables(tokens: int, layout: str) -> Dict[str, List[int]]:
    blocks = -(-tokens // 16)
    if layout == "contiguous":
        return {"source": list(range(10, 10 + blocks)), "destination": list(range(50, 50 + blocks))}
    pick = random.Random(tokens)
    return {"source": pick.sample(range(NUM_BLOCKS), blocks), "destination": pick.sample(range(NUM_BLOCKS), blocks)}


def runs_of(table: Dict[str, List[int]]) -> List[Tuple[int, int, int]]:
    """The runs ``Transfer.prepare`` makes of ``table`` (no length limit): what torch-copy copies."""
    from aboleth.kv import block_runs
    return block_runs(table["source"], table["destination"], NUM_BLOCKS, NUM_BLOCKS, 0, 1)


def summary(times_us: List[float], moved_bytes: int) -> Dict[str, Any]:
    values = sorted(times_us)
    middle = values[len(values) // 2]
    return {"median_us": round(middle, 1), "p10_us": round(values[len(values) // 10], 1),
            "p90_us": round(values[len(values) * 9 // 10], 1), "bytes": moved_bytes,
            "gb_per_s": round(moved_bytes / (middle * 1e-6) / 1e9, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--transport", default=os.environ.get("ABOLETH_TRANSPORT", "p2p"),
                        choices=["p2p", "proxy", "rdma"])
    arguments = parser.parse_args()
    rank_environment()
    import aboleth
    from aboleth.kv import Transfer
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, ranks = boot.rank, boot.world_size
    if ranks != 2:
        raise SystemExit("kv.py runs on 2 ranks: rank 0 sends, rank 1 receives")
    world = aboleth.World(rank, ranks, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    dist.init_process_group("gloo")
    repetitions = int(os.environ.get("BENCH_KV_REPETITIONS", "10"))
    caches = [torch.zeros(2, NUM_BLOCKS, *BLOCK_SHAPE, dtype=torch.bfloat16, device="cuda") for _ in range(LAYERS)]
    if rank == 0:
        generator = torch.Generator(device="cuda").manual_seed(5)
        for cache in caches:
            cache.view(torch.int16).copy_(torch.randint(-32768, 32767, cache.shape, dtype=torch.int16, device="cuda",
                                                        generator=generator))
    transfer = Transfer(world, caches)
    # Rank 1's caches, opened on rank 0 through CUDA IPC (the torch baseline and the check).
    handles: List[Any] = [None, None]
    dist.all_gather_object(handles, [reduce_tensor(cache) for cache in caches] if rank == 1 else None)
    peer_caches = [rebuild(*args) for rebuild, args in handles[1]] if rank == 0 else []
    rows: List[Dict[str, Any]] = []
    errors: List[str] = []

    def barrier() -> None:
        dist.barrier()

    def check(system: str, tokens: int, layout: str, table: Dict[str, List[int]], layers: List[int]) -> bool:
        torch.cuda.synchronize()
        barrier()
        good = True
        if rank == 0:
            source = torch.tensor(table["source"], device="cuda")
            destination = torch.tensor(table["destination"], device="cuda")
            for layer in layers:
                if not torch.equal(peer_caches[layer][:, destination].view(torch.int16),
                                   caches[layer][:, source].view(torch.int16)):
                    good = False
                    errors.append(f"{system} {tokens} {layout}: layer {layer} differs")
                    break
        verdict = [None, None]
        dist.all_gather_object(verdict, good)
        if rank == 1:
            for cache in caches:
                cache.zero_()  # the next system starts from a blank destination
        torch.cuda.synchronize()
        barrier()
        return all(verdict)

    def measure(system: str, tokens: int, layout: str, table: Dict[str, List[int]], layers: List[int],
                run: Callable[[], None]) -> None:
        result = timed_repetitions(lambda _: run(), barrier, lambda _: None, lambda _: [], repetitions, WARMUPS,
                                   after=transfer.check if system.startswith("aboleth") else lambda: None)
        checked = check(system, tokens, layout, table, layers)
        if rank == 0:
            moved = len(table["source"]) * 2 * BLOCK_BYTES * len(layers)
            rows.append({"suite": "kv", "system": system, "transport": arguments.transport if system.startswith(
                "aboleth") else "cuda-ipc", "tokens": tokens, "layout": layout, "layers": len(layers),
                "blocks": len(table["source"]), "runs": len(runs_of(table)),
                "checked": checked, **summary(result["times_us"], moved)})
            print(f"[rank 0] {system} {tokens} tokens {layout}: {rows[-1]['median_us']} us, "
                  f"{rows[-1]['gb_per_s']} GB/s, checked {checked}", flush=True)

    every = list(range(LAYERS))
    for tokens in tokens_list():
        for layout in ("scattered", "contiguous"):
            table = tables(tokens, layout)
            plan = transfer.prepare(1, table["source"], table["destination"]) if rank == 0 else None

            def aboleth_run(layers: List[int] = every) -> None:
                if rank == 0:
                    for layer in layers:
                        transfer.send_layer(plan, layer)
                else:
                    transfer.expect(0, layers)
                    for layer in layers:
                        transfer.wait_layer(layer)
            measure("aboleth", tokens, layout, table, every, aboleth_run)
            measure("aboleth-layer", tokens, layout, table, [0], lambda: aboleth_run([0]))
            source = torch.tensor(table["source"], device="cuda")
            destination = torch.tensor(table["destination"], device="cuda")
            runs = runs_of(table)

            def index_run() -> None:
                if rank == 0:
                    for layer in every:
                        peer_caches[layer][:, destination] = caches[layer][:, source]

            def copy_run() -> None:
                if rank == 0:
                    for layer in every:
                        for s, d, n in runs:
                            peer_caches[layer][:, d:d + n].copy_(caches[layer][:, s:s + n])
            measure("torch-index", tokens, layout, table, every, index_run)
            measure("torch-copy", tokens, layout, table, every, copy_run)
    if rank == 0:
        ratios = []
        for row in rows:
            if row["system"] != "aboleth":
                continue
            same = [other for other in rows if other["tokens"] == row["tokens"] and other["layout"] == row["layout"]
                    and other["system"].startswith("torch")]
            best = min(same, key=lambda other: other["median_us"])
            ratios.append({"tokens": row["tokens"], "layout": row["layout"], "aboleth_us": row["median_us"],
                           "best_torch": best["system"], "best_torch_us": best["median_us"],
                           "speedup_vs_best_torch": round(best["median_us"] / row["median_us"], 2),
                           "aboleth_gb_per_s": row["gb_per_s"], "torch_gb_per_s": best["gb_per_s"]})
        machine = os.environ.get("MACHINE", "unknown")
        report = {"command": os.environ.get("COMMAND", " ".join(sys.argv)), "machine": machine,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "git_commit": os.environ.get("GIT_COMMIT") or subprocess.run(
                      ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
                  "settings": {"layers": LAYERS, "block_shape": list(BLOCK_SHAPE), "dtype": "bfloat16",
                               "block_bytes_per_plane": BLOCK_BYTES, "num_blocks": NUM_BLOCKS,
                               "repetitions": repetitions, "warmups": WARMUPS, "parts": transfer.parts,
                               "gpus": torch.cuda.device_count()},
                  "rows": rows, "ratios": ratios, "errors": errors}
        stem = f"{report['date'][:10]}-kv-{arguments.transport}-{machine}"
        os.makedirs(arguments.out_dir, exist_ok=True)
        with open(os.path.join(arguments.out_dir, stem + ".json"), "w") as file:
            json.dump(report, file, indent=1)
        lines = [f"# KV-cache transfer, {arguments.transport}, {machine}, {report['date']} ({report['git_commit']})",
                 "", "| tokens | layout | aboleth us | GB/s | best torch | us | GB/s | speedup |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for ratio in ratios:
            lines.append(f"| {ratio['tokens']} | {ratio['layout']} | {ratio['aboleth_us']} | {ratio['aboleth_gb_per_s']} "
                         f"| {ratio['best_torch']} | {ratio['best_torch_us']} | {ratio['torch_gb_per_s']} | "
                         f"{ratio['speedup_vs_best_torch']}x |")
        lines += ["", "| system | tokens | layout | us | GB/s | checked |", "| --- | --- | --- | --- | --- | --- |"]
        for row in rows:
            lines.append(f"| {row['system']} | {row['tokens']} | {row['layout']} | {row['median_us']} | "
                         f"{row['gb_per_s']} | {row['checked']} |")
        with open(os.path.join(arguments.out_dir, stem + ".md"), "w") as file:
            file.write("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
    dist.barrier()
    os._exit(0 if not errors else 1)


if __name__ == "__main__":
    main()
