"""aboleth.moe's low-latency mode on GPUs: every correctness case of issue 15, bit-exact against
aboleth.moe.reference, then the failure cases and a timing at DeepEP's low-latency settings.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=p2p \\
        torchrun --nproc-per-node 2 tests/gpu/moe.py OUT_DIR        (tests/gpu/run_moe.sh does this)

Steps, each rank (every rank derives every rank's inputs from seeds, so it knows what it must
receive):
1. ``cases``: for each routing case (random top-k; every token to rank 0's experts, so other
   ranks receive nothing; only this rank's experts; several top-k experts on one rank; a third
   of the entries -1) and hidden size (2048, 4096, 7168), in BF16 and in FP8 (and FP8 with
   rounded scales, and with UE8M0 scale words, on random routing), three consecutive layers on
   the same buffer: dispatch (recv_x rows, FP8 scales and recv_count exact), the tests' expert
   on the received rows (FP8 dequantized), combine (exact), alternating the zero-copy combine
   buffer and a copy.
2. ``graph`` / ``graph_fp8``: dispatch, expert and combine captured in one CUDA graph, replayed 3
   times with new inputs copied into the captured tensors, each replay checked (epochs advance
   on the device).
3. ``hook``: ``return_recv_hook=True`` for both, with compute between send and hook.
4. ``mismatch``: a buffer whose rank 1 uses another num_max_dispatch_tokens_per_rank: check_errors
   names the peer, the epoch and the settings (no hang).
5. ``helpers``: DeepEP's helpers that move no data (``capture``, ``get_comm_stream``,
   ``is_sm90_compiled``, ``get_local_buffer_tensor``, ``clean_low_latency_buffer``), and their errors.
6. ``timing`` / ``timing_fp8``: DeepEP's low-latency settings (128 tokens, hidden 7168, top-8,
   256 experts), BF16 and FP8 dispatch: dispatch and combine, 20 warm-up and 100 timed calls
   each (CUDA events), and the grids.
7. ``dead_peer`` (last): rank 1 skips a dispatch; rank 0's bounded wait gives up and
   check_errors names rank 1's dispatch and its epoch; rank 0's next call raises at once (the
   Buffer stopped), and after ``restart()`` on both ranks a layer is exact again.

Writes OUT_DIR/moe-rank{R}.json; exit status 0 when every step passed on this rank.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import torch

from aboleth.moe import Buffer
from aboleth.moe.reference import (combine_reference, dispatch_reference, expert_scale, fp8_dequantize,
                                   low_latency_fp8_quantize, ue8m0_pack)

EXPERTS = 16
MAX_TOKENS = 64
TOP_K = 4
HIDDENS = [2048, 4096, 7168]
LAYERS = 3


def inputs(seed: int, rank: int, tokens: int, hidden: int, route: Callable[..., Any], ranks: int) -> Any:
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed * 7919 + rank * 104729 + hidden)
    x = torch.randn(tokens, hidden, generator=generator, device="cuda").to(torch.bfloat16)
    topk = route(generator, rank, tokens, ranks)
    weights = torch.rand(tokens, topk.shape[1], generator=generator, device="cuda")
    return x, topk, weights


def distinct_experts(generator: Any, tokens: int, choices: Any) -> Any:
    """TOP_K distinct experts per token from ``choices`` (a 1-D tensor of expert ids)."""
    scores = torch.rand(tokens, choices.numel(), generator=generator, device="cuda")
    return choices[scores.argsort(dim=1)[:, :TOP_K]].to(torch.int64)


ROUTES: Dict[str, Callable[..., Any]] = {
    "random": lambda g, rank, n, ranks: distinct_experts(g, n, torch.arange(EXPERTS, device="cuda")),
    "all_to_rank_0": lambda g, rank, n, ranks: distinct_experts(g, n, torch.arange(EXPERTS // ranks, device="cuda")),
    "local_only": lambda g, rank, n, ranks: distinct_experts(
        g, n, torch.arange(rank * EXPERTS // ranks, (rank + 1) * EXPERTS // ranks, device="cuda")),
    "masked": lambda g, rank, n, ranks: torch.where(
        torch.rand(n, TOP_K, generator=g, device="cuda") < 0.33, -1,
        distinct_experts(g, n, torch.arange(EXPERTS, device="cuda"))),
}


#: FP8 modes of the dispatch: (use_fp8, round_scale, use_ue8m0) by name.
FP8_MODES = {"bf16": (False, False, False), "fp8": (True, False, False), "fp8_round": (True, True, False),
             "fp8_ue8m0": (True, True, True)}


def compare_rows(name: str, received: Any, expected: Any, counts: Any, first_expert: int) -> List[str]:
    """Each local expert's rows [0, count) of ``received`` against ``expected``, bit for bit."""
    errors = []
    for local in range(counts.numel()):
        count = int(counts[local])
        got, want = received[local, :count].contiguous(), expected[local, :count].contiguous()
        if got.dtype == torch.float8_e4m3fn:
            got, want = got.view(torch.uint8), want.view(torch.uint8)
        if not torch.equal(got, want):
            wrong = (got != want).any(dim=1).nonzero()
            errors.append(f"{name} of expert {first_expert + local}: {wrong.numel()} of {count} rows differ, first "
                          f"row {int(wrong[0]) if wrong.numel() else '?'}")
    return errors


def check_layer(buffer: Buffer, seed: int, route: Callable[..., Any], hidden: int, tokens: int, zero_copy: bool,
                hooks: bool = False, mode: str = "bf16") -> List[str]:
    use_fp8, round_scale, use_ue8m0 = FP8_MODES[mode]
    rank, ranks = buffer.rank, buffer.group_size
    everyone = [inputs(seed, r, tokens, hidden, route, ranks) for r in range(ranks)]
    x, topk, weights = everyone[rank]
    local_experts = EXPERTS // ranks
    stats = torch.full((local_experts,), 5, dtype=torch.int32, device="cuda")  # counts are added to it
    received, recv_count, handle, _, hook = buffer.low_latency_dispatch(
        x, topk, MAX_TOKENS, EXPERTS, cumulative_local_expert_recv_stats=stats, use_fp8=use_fp8,
        round_scale=round_scale, use_ue8m0=use_ue8m0, return_recv_hook=hooks)
    if hooks:
        torch.cuda._sleep(1000)  # compute between the send and the receive
        hook()
    topks = [e[1] for e in everyone]
    errors = []
    if use_fp8:
        quantized = [low_latency_fp8_quantize(e[0], round_scale) for e in everyone]
        expected_x, expected_count = dispatch_reference([q for q, _ in quantized], topks, EXPERTS, rank, MAX_TOKENS)
        expected_scales, _ = dispatch_reference([scale for _, scale in quantized], topks, EXPERTS, rank, MAX_TOKENS)
        recv_x, recv_scales = received
        slots = ranks * MAX_TOKENS
        groups = hidden // 128 // (4 if use_ue8m0 else 1)
        # DeepEP's layout: the scales' slots are the innermost dimension in memory.
        if recv_scales.shape != (local_experts, slots, groups) or recv_scales.stride() != (groups * slots, 1, slots):
            errors.append(f"recv_x scales: shape {tuple(recv_scales.shape)} strides {recv_scales.stride()}")
        wanted = (torch.stack([ue8m0_pack(expected_scales[j]) for j in range(local_experts)]) if use_ue8m0
                  else expected_scales)
        errors += compare_rows("scales", recv_scales, wanted, expected_count, rank * local_experts)
        float_scales = expected_scales  # what the rows mean, for the expert and the combine
        rows = fp8_dequantize(recv_x, float_scales)
        home_x = fp8_dequantize(*quantized[rank])
    else:
        recv_x = received
        expected_x, expected_count = dispatch_reference([e[0] for e in everyone], topks, EXPERTS, rank, MAX_TOKENS)
        rows, home_x = recv_x, x
    if not torch.equal(recv_count, expected_count):
        errors.append(f"recv_count {recv_count.tolist()} != {expected_count.tolist()}")
    if not torch.equal(stats, expected_count + 5):
        errors.append(f"cumulative_local_expert_recv_stats {stats.tolist()} != 5 + {expected_count.tolist()}")
    errors += compare_rows("rows", recv_x, expected_x, expected_count, rank * local_experts)
    outputs = (buffer.get_next_low_latency_combine_buffer(handle) if zero_copy
               else torch.empty(rows.shape, dtype=torch.bfloat16, device="cuda"))
    for local in range(local_experts):
        outputs[local] = expert_scale(rows[local], rank * local_experts + local)
    combined, _, hook = buffer.low_latency_combine(outputs, topk, weights, handle, return_recv_hook=hooks)
    if hooks:
        hook()
    expected = combine_reference(home_x, topk, weights, expert_scale)
    if not torch.equal(combined, expected):
        wrong = (combined != expected).any(dim=1).nonzero()
        errors.append(f"combine: {wrong.numel()} of {tokens} tokens differ, first {int(wrong[0])}: max |diff| "
                      f"{(combined.float() - expected.float()).abs().max().item()}")
    buffer.check_errors()
    return errors


def pool_words(buffer: Buffer) -> Dict[str, List[int]]:
    """The epochs and flags of the buffer's pool (for the report of a failed layer)."""
    layout = buffer._layout
    words = {}
    for part in ("epochs", "dispatch_flags", "combine_flags"):
        offset, length = layout.parts()[part]
        words[part] = buffer.pool[offset:offset + length].view(torch.int64).tolist()
    return words


def step_cases(buffer: Buffer) -> Dict[str, Any]:
    results, failed = [], 0
    separate = os.environ.get("MOE_BARRIER_BETWEEN_LAYERS") == "1"
    # Every route and hidden size in BF16 and in FP8 (DeepEP's default); the rounded scales and
    # UE8M0 words on random routing.
    configurations = [(name, hidden, mode) for mode in ("bf16", "fp8") for name in ROUTES for hidden in HIDDENS]
    configurations += [("random", hidden, mode) for mode in ("fp8_round", "fp8_ue8m0") for hidden in (2048, 7168)]
    for name, hidden, mode in configurations:
        route = ROUTES[name]
        for layer in range(LAYERS):
            tokens = [MAX_TOKENS, 1, 37][layer]
            entry = {"route": name, "hidden": hidden, "mode": mode, "layer": layer, "tokens": tokens}
            layer_started = time.monotonic()
            try:
                errors = check_layer(buffer, 1000 + layer, route, hidden, tokens, zero_copy=layer % 2 == 0,
                                     mode=mode)
            except RuntimeError as error:
                errors = [str(error)[:600]]
                entry["pool"] = pool_words(buffer)
                results.append({**entry, "passed": False, "errors": errors})
                return {"passed": False, "checked": len(results), "failed": failed + 1, "results": results}
            failed += bool(errors)
            entry["seconds"] = round(time.monotonic() - layer_started, 3)
            results.append({**entry, "passed": not errors, "errors": errors[:3]})
            if separate:
                torch.cuda.synchronize()
                buffer.world.barrier()
    return {"passed": failed == 0, "checked": len(results), "failed": failed, "results": results}


def step_graph(buffer: Buffer, use_fp8: bool) -> Dict[str, Any]:
    rank, ranks, hidden, tokens = buffer.rank, buffer.group_size, 2048, MAX_TOKENS
    route = ROUTES["random"]
    x, topk, weights = (t.clone() for t in inputs(0, rank, tokens, hidden, route, ranks))
    local_experts = EXPERTS // ranks
    scales = torch.tensor([1.0 + (rank * local_experts + j) / 64.0 for j in range(local_experts)], device="cuda")

    def layer() -> Any:
        received, _, handle, _, _ = buffer.low_latency_dispatch(x, topk, MAX_TOKENS, EXPERTS, use_fp8=use_fp8)
        rows = fp8_dequantize(*received) if use_fp8 else received
        outputs = buffer.get_next_low_latency_combine_buffer(handle)
        outputs.copy_((rows.to(torch.float32) * scales[:, None, None]).to(torch.bfloat16))
        return buffer.low_latency_combine(outputs, topk, weights, handle)[0]

    layer()  # compiles and warms up outside the capture
    torch.cuda.synchronize()
    buffer.world.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        combined = layer()
    errors = []
    for replay in range(3):
        new_x, new_topk, new_weights = inputs(50 + replay, rank, tokens, hidden, route, ranks)
        x.copy_(new_x), topk.copy_(new_topk), weights.copy_(new_weights)
        torch.cuda.synchronize()
        buffer.world.barrier()
        graph.replay()
        torch.cuda.synchronize()
        home_x = fp8_dequantize(*low_latency_fp8_quantize(new_x)) if use_fp8 else new_x
        expected = combine_reference(home_x, new_topk, new_weights, expert_scale)
        if not torch.equal(combined, expected):
            errors.append(f"replay {replay}: {(combined != expected).any(dim=1).sum().item()} tokens differ")
    buffer.check_errors()
    return {"passed": not errors, "replays": 3, "errors": errors}


def step_hook(buffer: Buffer) -> Dict[str, Any]:
    errors = check_layer(buffer, 77, ROUTES["random"], 4096, MAX_TOKENS, zero_copy=True, hooks=True)
    return {"passed": not errors, "errors": errors}


def step_mismatch(buffer_bytes: int) -> Dict[str, Any]:
    """Rank 1 says 32 tokens, the others 64: each rank's check names a peer and the settings."""
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mismatched = Buffer(None, 0, buffer_bytes, low_latency_mode=True, world=WORLD["world"])
    max_tokens = 32 if rank == 1 else 64
    x, topk, _ = inputs(5, rank, 16, 2048, ROUTES["random"], ranks)
    mismatched.low_latency_dispatch(x, topk, max_tokens, EXPERTS, use_fp8=False)
    try:
        mismatched.check_errors()
        return {"passed": False, "errors": ["check_errors() raised nothing"]}
    except RuntimeError as error:
        message = str(error)
        ok = "another configuration" in message and "num_max_dispatch_tokens_per_rank" in message
        return {"passed": ok, "message": message}


def step_helpers(buffer: Buffer) -> Dict[str, Any]:
    """DeepEP's helpers that move no data (aboleth/moe/compat.py), on a real Buffer."""
    errors: List[str] = []
    event = Buffer.capture()
    event.current_stream_wait()
    if event.event is None:
        errors.append("Buffer.capture() holds no event")
    if buffer.get_comm_stream() != torch.cuda.current_stream():
        errors.append("get_comm_stream() is not the current stream")
    if not Buffer.is_sm90_compiled():  # the GPU machines are Hopper (H100, H200)
        errors.append(f"is_sm90_compiled() is False on compute capability {torch.cuda.get_device_capability()}")
    words = buffer.get_local_buffer_tensor(torch.int64, torch.Size([4, 2]), offset=3)
    if tuple(words.shape) != (4, 2) or words.data_ptr() != buffer.pool.data_ptr() + 3 * 8:
        errors.append(f"get_local_buffer_tensor(int64, [4, 2], offset=3): {tuple(words.shape)} at "
                      f"{words.data_ptr() - buffer.pool.data_ptr()} bytes")
    if buffer.get_local_buffer_tensor(torch.bfloat16, use_rdma_buffer=True).numel() != buffer.pool.numel() // 2:
        errors.append("get_local_buffer_tensor(bfloat16, use_rdma_buffer=True) is not the whole pool")
    try:
        buffer.get_local_buffer_tensor(torch.int32, (buffer.pool.numel(),))
        errors.append("a view larger than the pool was given")
    except ValueError as error:
        if "the pool has" not in str(error):
            errors.append(f"the too-large view's message: {error}")
    buffer.clean_low_latency_buffer(MAX_TOKENS, max(HIDDENS), EXPERTS)
    try:
        buffer.clean_low_latency_buffer(MAX_TOKENS * 64, max(HIDDENS), EXPERTS)
        errors.append("clean_low_latency_buffer accepted a configuration the pool cannot hold")
    except ValueError as error:
        if "get_low_latency_rdma_size_hint" not in str(error):
            errors.append(f"the configuration too large's message: {error}")
    return {"passed": not errors, "errors": errors}


def step_timing(world: Any, use_fp8: bool) -> Dict[str, Any]:
    rank, ranks = world.rank, world.world_size
    experts, tokens, hidden, k = 256, 128, 7168, 8
    size = Buffer.get_low_latency_rdma_size_hint(tokens, hidden, ranks, experts)
    buffer = Buffer(None, 0, size, low_latency_mode=True, world=world)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(rank)
    x = torch.randn(tokens, hidden, generator=generator, device="cuda").to(torch.bfloat16)
    topk = torch.rand(tokens, experts, generator=generator, device="cuda").argsort(dim=1)[:, :k].to(torch.int64)
    weights = torch.rand(tokens, k, generator=generator, device="cuda")
    times: Dict[str, List[float]] = {"dispatch": [], "combine": []}
    warmup_ms: List[float] = []
    for index in range(120):
        torch.cuda.synchronize()
        world.barrier()
        start, middle, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        _, _, handle, _, _ = buffer.low_latency_dispatch(x, topk, tokens, experts, use_fp8=use_fp8)
        middle.record()
        outputs = buffer.get_next_low_latency_combine_buffer(handle)
        torch.cuda.synchronize()
        world.barrier()
        combine_start = torch.cuda.Event(enable_timing=True)
        combine_start.record()
        buffer.low_latency_combine(outputs, topk, weights, handle)
        end.record()
        torch.cuda.synchronize()
        if index < 20:
            warmup_ms.append(round(start.elapsed_time(end), 3))
        if index >= 20:
            times["dispatch"].append(start.elapsed_time(middle) * 1000)
            times["combine"].append(combine_start.elapsed_time(end) * 1000)
    buffer.check_errors()
    kernels_us = profile_kernels(world, buffer, x, topk, weights, tokens, experts, use_fp8)
    graph_us = graph_layer_us(world, buffer, x, topk, weights, tokens, experts, use_fp8)
    local_experts = experts // ranks
    row_bytes = hidden + hidden // 128 * 4 if use_fp8 else hidden * 2
    sent_bytes = int((topk // local_experts != rank).sum()) * row_bytes
    summary = {}
    for name, values in times.items():
        values.sort()
        summary[name] = {"median_us": values[len(values) // 2], "p10_us": values[len(values) // 10],
                         "p90_us": values[len(values) * 9 // 10]}
    return {"passed": True, "warmup_ms": warmup_ms, "max_us": {n: max(v) for n, v in times.items()}, "settings": {"tokens": tokens, "hidden": hidden, "top_k": k, "experts": experts,
                                         "ranks": ranks, "dispatch": "fp8" if use_fp8 else "bf16"}, "us": summary, "bytes_sent_by_this_rank": sent_bytes,
            "kernels_us": kernels_us, "graph_layer_us": graph_us,
            "grids": {"pack_tokens_fp8" if use_fp8 else "pack_tokens": tokens if use_fp8 else tokens * k, "dispatch_send": (ranks - 1) * buffer.parts,
                      "dispatch_receive": buffer.num_sms, "combine_send": (ranks - 1) * buffer.parts,
                      "combine_reduce": buffer.num_sms},
            "note": "includes the torch routing ops and, for combine, the reduce; sms: the grids are programs, "
                    "each one CTA"}


def graph_layer_us(world: Any, buffer: Buffer, x: Any, topk: Any, weights: Any, tokens: int,
                   experts: int, use_fp8: bool) -> Dict[str, float]:
    """A dispatch and a combine captured in one CUDA graph (no host launch cost, as DeepEP's
    low-latency mode is used): microseconds per replay, median of 50, each between barriers."""
    def layer() -> None:
        _, _, handle, _, _ = buffer.low_latency_dispatch(x, topk, tokens, experts, use_fp8=use_fp8)
        buffer.low_latency_combine(buffer.get_next_low_latency_combine_buffer(handle), topk, weights, handle)

    layer()
    torch.cuda.synchronize()
    world.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer()
    values = []
    for _ in range(60):
        torch.cuda.synchronize()
        world.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        values.append(start.elapsed_time(end) * 1000)
    values = sorted(values[10:])
    buffer.check_errors()
    return {"median_us": round(values[len(values) // 2], 1), "p10_us": round(values[len(values) // 10], 1),
            "p90_us": round(values[len(values) * 9 // 10], 1)}


def profile_kernels(world: Any, buffer: Buffer, x: Any, topk: Any, weights: Any, tokens: int,
                    experts: int, use_fp8: bool) -> Dict[str, float]:
    """Mean device time per call of each kernel over 10 dispatch + combine rounds (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    world.barrier()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(10):
            _, _, handle, _, _ = buffer.low_latency_dispatch(x, topk, tokens, experts, use_fp8=use_fp8)
            buffer.low_latency_combine(buffer.get_next_low_latency_combine_buffer(handle), topk, weights, handle)
        torch.cuda.synchronize()
    world.barrier()
    means = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if event.count and device_us:
            means[event.key[:60]] = round(device_us / event.count, 1)
    return dict(sorted(means.items(), key=lambda item: -item[1])[:16])


def step_dead_peer(buffer: Buffer) -> Dict[str, Any]:
    rank, ranks = buffer.rank, buffer.group_size
    # Hidden 4096, the hook step's: a call with another layout meets the other ranks at a host
    # barrier first, which the rank that skips would not reach.
    x, topk, _ = inputs(9, rank, 16, 4096, ROUTES["random"], ranks)
    result: Dict[str, Any] = {"role": "skipped the dispatch"} if rank == 1 else {}
    errors: List[str] = []
    if rank != 1:
        started = time.monotonic()
        buffer.low_latency_dispatch(x, topk, MAX_TOKENS, EXPERTS, use_fp8=False)
        try:
            buffer.check_errors()
            errors.append("check_errors() raised nothing")
        except RuntimeError as error:
            result.update(message=str(error)[:2000], seconds=time.monotonic() - started)
            if "gave up" not in str(error) or "rank 1's low-latency dispatch of epoch" not in str(error):
                errors.append("the error does not name rank 1's dispatch and its epoch")
        try:
            buffer.low_latency_dispatch(x, topk, MAX_TOKENS, EXPERTS, use_fp8=False)
            errors.append("the call after the failed wait raised nothing")
        except RuntimeError as error:
            result["next_call"] = str(error)[:600]
            if "this Buffer stopped" not in str(error):
                errors.append("the call after the failed wait does not say the Buffer stopped")
    buffer.restart()
    errors += [f"after restart(): {error}" for error in check_layer(buffer, 78, ROUTES["random"], 4096, MAX_TOKENS,
                                                                    zero_copy=True)]
    return {"passed": not errors, "errors": errors, **result}


WORLD: Dict[str, Any] = {}


def main() -> int:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    import aboleth
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    boot = aboleth.TcpStoreBootstrap.from_env()
    world = aboleth.World(rank, ranks, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(os.environ.get("ABOLETH_TRANSPORT", "p2p"))
    WORLD["world"] = world
    buffer_bytes = Buffer.get_low_latency_rdma_size_hint(MAX_TOKENS, max(HIDDENS), ranks, EXPERTS)
    report: Dict[str, Any] = {"rank": rank, "ranks": ranks, "transport": os.environ.get("ABOLETH_TRANSPORT", "p2p"),
                              "steps": {}}
    buffer = Buffer(None, 0, buffer_bytes, low_latency_mode=True, world=world)
    steps = [("cases", lambda: step_cases(buffer)), ("graph", lambda: step_graph(buffer, False)),
             ("graph_fp8", lambda: step_graph(buffer, True)), ("hook", lambda: step_hook(buffer)),
             ("mismatch", lambda: step_mismatch(buffer_bytes)), ("helpers", lambda: step_helpers(buffer)),
             ("timing", lambda: step_timing(world, False)),
             ("timing_fp8", lambda: step_timing(world, True)), ("dead_peer", lambda: step_dead_peer(buffer))]

    def after(name: str) -> None:
        if name == "mismatch":
            # The mismatched buffer's epochs are out of step; the others are untouched.
            torch.cuda.synchronize()
            world.clear_waits()
            world.barrier()

    # A rank that skipped the dispatch stays mapped until the others gave up (the final barrier);
    # the dead-peer step leaves a peer waiting in nothing, so no teardown runs.
    os._exit(run_steps(world, report, steps, os.path.join(out_dir, f"moe-rank{rank}.json"), after))


def run_steps(world: Any, report: Dict[str, Any], steps: List[Any], path: str,
              after: Callable[[str], None] = lambda name: None) -> int:
    """Runs ``steps`` (name, callable) in order, or the subset ``MOE_STEPS`` names, recording
    each result (or its exception) in ``report["steps"]`` and writing ``report`` to ``path``
    after each; ``after(name)`` runs after each step. Meets the other ranks at a barrier at the
    end and returns the exit status (0 when every step passed). Shared with moe_normal.py."""
    wanted = os.environ.get("MOE_STEPS")  # a comma-separated subset, for a focused rerun
    if wanted:
        steps = [(name, step) for name, step in steps if name in wanted.split(",")]
    status = 0
    for name, step in steps:
        started = time.monotonic()
        try:
            result = step()
        except Exception:  # noqa: BLE001 - the report says what failed
            result = {"passed": False, "exception": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.monotonic() - started, 2)
        report["steps"][name] = result
        print(f"rank {report['rank']} {name}: {'passed' if result['passed'] else 'FAILED'} "
              f"({result['seconds']} s)", flush=True)
        status |= not result["passed"]
        with open(path, "w") as file:
            json.dump(report, file, indent=1)
        after(name)
    report["passed"] = status == 0
    world.barrier()
    with open(path, "w") as file:
        json.dump(report, file, indent=1)
    return status


if __name__ == "__main__":
    main()
