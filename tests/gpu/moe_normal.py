"""aboleth.moe's normal (throughput) mode on GPUs: every correctness case of issue 15, bit-exact
against aboleth.moe.reference, then the failure cases and a timing at DeepEP's settings.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=p2p \\
        torchrun --nproc-per-node 2 tests/gpu/moe_normal.py OUT_DIR   (tests/gpu/run_moe.sh normal does this)

Steps, each rank (every rank derives every rank's inputs from seeds, so it knows what it must
receive):
1. ``cases``: for each routing case (random top-k; every token to rank 0's experts, so other
   ranks receive nothing; only this rank's experts; a third of the entries -1; several top-k
   experts on one rank in all of them), hidden size (2048, 4096, 7168) and dtype (BF16; FP8 e4m3
   with one scale per 128 channels), four consecutive layers on one buffer (about 200 tokens,
   1, 0, then none on rank 0 and 5 on rank 1: a rank with no tokens that receives): the layout against torch, dispatch (recv_x, scales, recv_topk_idx, recv_topk_weights,
   the per-expert counts aligned to 1 or 4), the tests' expert on the received rows, combine
   (output and summed weights; with one bias tensor in the first layer, a pair in the second),
   all exact.
2. ``cached``: a dispatch, a cached dispatch of new hidden states with its handle (DeepEP's
   order: the buffer synchronizes the ranks between two dispatches), then the combine.
3. ``graph``: layout, dispatch with ``num_worst_tokens``, expert and combine captured in one CUDA
   graph, replayed 3 times with new inputs copied in, each replay checked (padding rows: id -1).
4. ``restart``: rank 1's sending kernel fails (injected) after its epoch moved; every rank's
   dispatch raises (rank 1 the failure, the others their wait for rank 1's dispatch of an
   epoch), the next call raises at once naming the stop, and after ``Buffer.restart()`` a layer
   is exact again.
5. ``too_small``: more tokens than a small pool holds gives ValueError before anything is sent;
   more received rows than ``num_worst_tokens`` is reported by check_errors; a pool of another
   size on one rank is refused when the Buffer is made.
6. ``timing``: DeepEP's settings (4096 tokens, hidden 7168, top-8, 256 experts), BF16 and FP8
   dispatch, BF16 combine: medians of 30 calls after 5 warm-up calls, each between barriers,
   the layout outside the timed region as in DeepEP's tests; the kernels' grids.

Writes OUT_DIR/moe-normal-rank{R}.json; exit status 0 when every step passed on this rank.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List

import torch

from aboleth.moe import Buffer
from aboleth.moe.reference import normal_combine_reference, normal_dispatch_reference, normal_expert

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe import EXPERTS, ROUTES, run_steps  # noqa: E402  (the low-latency test's routing cases, its step loop)

HIDDENS = [2048, 4096, 7168]
# MOE_NORMAL_DIRECT=1: the direct sending kernels (Buffer(normal_direct=True), p2p only); 0: the
# staged ones (normal_direct=False); unset: the Buffer's default (direct on p2p, else staged).
DIRECT = {"1": True, "0": False}.get(os.environ.get("MOE_NORMAL_DIRECT", ""))
MAX_TOKENS = 256


def inputs(seed: int, rank: int, tokens: int, hidden: int, route: Callable[..., Any], ranks: int,
           fp8: bool) -> Any:
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed * 7919 + rank * 104729 + hidden + fp8)
    x = torch.randn(tokens, hidden, generator=generator, device="cuda")
    topk = route(generator, rank, tokens, ranks)
    weights = torch.rand(tokens, topk.shape[1], generator=generator, device="cuda")
    if fp8:
        scales = torch.rand(tokens, hidden // 128, generator=generator, device="cuda") + 0.5
        return (x.to(torch.float8_e4m3fn), scales), topk, weights
    return x.to(torch.bfloat16), topk, weights


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(equal(u, v) for u, v in zip(a, b))
    return a.shape == b.shape and torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                                              b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)


def check_layer(buffer: Buffer, seed: int, route: Callable[..., Any], hidden: int, tokens_of: Callable[[int], int],
                fp8: bool, alignment: int, biases: int = 0) -> List[str]:
    """One layer; ``tokens_of(r)`` is rank ``r``'s number of tokens; the combine adds ``biases``
    BF16 bias tensors (0, 1 or 2). Every rank runs the dispatch and the combine whatever it
    found wrong, so that the ranks stay in step."""
    rank, ranks = buffer.rank, buffer.group_size
    tokens = tokens_of(rank)
    everyone = [inputs(seed, r, tokens_of(r), hidden, route, ranks, fp8) for r in range(ranks)]
    x, topk, weights = everyone[rank]
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk, EXPERTS)
    errors = []
    local_experts = EXPERTS // ranks
    expected_in_rank = torch.stack([((topk >= r * local_experts) & (topk < (r + 1) * local_experts)).any(dim=1)
                                    for r in range(ranks)], dim=1)
    if not torch.equal(in_rank, expected_in_rank) or not torch.equal(per_rank, expected_in_rank.sum(0).int()):
        errors.append("get_dispatch_layout: is_token_in_rank or num_tokens_per_rank differ")
    expected_per_expert = torch.stack([(topk == e).any(dim=1).sum() for e in range(EXPERTS)]).int()
    if not torch.equal(per_expert, expected_per_expert):
        errors.append(f"get_dispatch_layout: num_tokens_per_expert {per_expert.tolist()} != "
                      f"{expected_per_expert.tolist()}")
    recv_x, recv_topk, recv_weights, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=topk, topk_weights=weights, expert_alignment=alignment)
    expected_x, expected_topk, expected_weights, expected_counts = normal_dispatch_reference(
        [e[0] for e in everyone], [e[1] for e in everyone], [e[2] for e in everyone], EXPERTS, rank)
    expected_counts = [(c + alignment - 1) // alignment * alignment for c in expected_counts]
    if not equal(recv_x, expected_x):
        errors.append(f"recv_x differs ({(recv_x[0] if fp8 else recv_x).shape[0]} rows, expected "
                      f"{(expected_x[0] if fp8 else expected_x).shape[0]})")
    if not equal(recv_topk, expected_topk) or not equal(recv_weights, expected_weights):
        errors.append("recv_topk_idx or recv_topk_weights differ")
    if counts != expected_counts:
        errors.append(f"num_recv_tokens_per_expert_list {counts} != {expected_counts}")
    outputs = normal_expert(recv_x, recv_topk, recv_weights, rank, local_experts)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed * 31 + rank)
    bias = [torch.randn(tokens, hidden, generator=generator, device="cuda").to(torch.bfloat16)
            for _ in range(biases)]
    bias_argument = None if not bias else bias[0] if len(bias) == 1 else tuple(bias)
    combined, combined_weights, _ = buffer.combine(outputs, handle, topk_weights=recv_weights, bias=bias_argument)
    expected, expected_weights = normal_combine_reference(x, topk, weights, EXPERTS, ranks, bias=bias_argument)
    if not torch.equal(combined, expected):
        wrong = (combined != expected).any(dim=1).nonzero()
        errors.append(f"combine: {wrong.numel()} of {tokens} tokens differ, first {int(wrong[0])}: max |diff| "
                      f"{(combined.float() - expected.float()).abs().max().item()}")
    if not torch.equal(combined_weights, expected_weights):
        errors.append("combine: the summed weights differ")
    buffer.check_errors()
    return errors


def step_cases(buffer: Buffer) -> Dict[str, Any]:
    results, failed = [], 0
    for fp8 in (False, True):
        for name, route in ROUTES.items():
            for hidden in HIDDENS:
                for layer in range(4):
                    # The last layer: rank 0 has no tokens but receives rank 1's.
                    def tokens_of(r: int, layer: int = layer) -> int:
                        return [200 + 9 * r, 1, 0, 5 * r][layer]

                    entry = {"dtype": "fp8" if fp8 else "bf16", "route": name, "hidden": hidden, "layer": layer,
                             "tokens": tokens_of(buffer.rank)}
                    try:
                        # The combine's bias: one tensor in the first layer, a pair in the second.
                        errors = check_layer(buffer, 300 + layer, route, hidden, tokens_of, fp8, 1 + 3 * (layer == 0),
                                             biases=(1, 2, 0, 1)[layer])
                    except RuntimeError as error:
                        results.append({**entry, "passed": False, "errors": [str(error)[:600]]})
                        return {"passed": False, "checked": len(results), "failed": failed + 1, "results": results}
                    failed += bool(errors)
                    results.append({**entry, "passed": not errors, "errors": errors[:3]})
    return {"passed": failed == 0, "checked": len(results), "failed": failed, "results": results}


def step_cached(buffer: Buffer) -> Dict[str, Any]:
    rank, ranks, hidden, tokens = buffer.rank, buffer.group_size, 4096, 128
    everyone = [inputs(21, r, tokens, hidden, ROUTES["random"], ranks, False) for r in range(ranks)]
    later = [inputs(22, r, tokens, hidden, ROUTES["random"], ranks, False)[0] for r in range(ranks)]
    x, topk, weights = everyone[rank]
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk, EXPERTS)
    _, _, recv_weights, _, handle, _ = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                                       num_tokens_per_expert=per_expert, topk_idx=topk,
                                                       topk_weights=weights)
    recv_x, none_topk, _, _, none_handle, _ = buffer.dispatch(later[rank], handle=handle)
    expected_x, expected_topk, _, _ = normal_dispatch_reference(later, [e[1] for e in everyone],
                                                                [e[2] for e in everyone], EXPERTS, rank)
    errors = []
    if not equal(recv_x, expected_x) or none_topk is not None or none_handle is not None:
        errors.append("the cached dispatch's recv_x differs (or it returned top-k or a handle)")
    outputs = normal_expert(recv_x, expected_topk, recv_weights, rank, EXPERTS // ranks)
    combined, _, _ = buffer.combine(outputs, handle)
    expected, _ = normal_combine_reference(later[rank], topk, weights, EXPERTS, ranks)
    if not torch.equal(combined, expected):
        errors.append(f"combine after the cached dispatch: {(combined != expected).any(dim=1).sum().item()} "
                      "tokens differ")
    # A bias of the wrong shape is refused before anything is sent (the ranks stay in step).
    try:
        buffer.combine(outputs, handle, bias=torch.zeros(tokens, hidden + 1, dtype=torch.bfloat16, device="cuda"))
        errors.append("a bias of the wrong shape was accepted")
    except ValueError as error:
        if "bias[0] must be a contiguous CUDA bfloat16 tensor" not in str(error):
            errors.append(f"the wrong bias's message: {error}")
    buffer.check_errors()
    return {"passed": not errors, "errors": errors}


def step_graph(buffer: Buffer) -> Dict[str, Any]:
    rank, ranks, hidden, tokens = buffer.rank, buffer.group_size, 2048, 96
    route = ROUTES["masked"]
    x, topk, weights = (t.clone() for t in inputs(0, rank, tokens, hidden, route, ranks, False))
    worst = ranks * tokens
    local_experts = EXPERTS // ranks
    captured: Dict[str, Any] = {}

    def layer() -> Any:
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk, EXPERTS)
        recv_x, recv_topk, recv_weights, counts, handle, _ = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=topk, topk_weights=weights, num_worst_tokens=worst)
        captured.update(recv_topk=recv_topk, counts=counts)
        outputs = normal_expert(recv_x, recv_topk, recv_weights, rank, local_experts)
        return buffer.combine(outputs, handle)[0]

    layer()  # compiles and warms up outside the capture
    torch.cuda.synchronize()
    buffer.world.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        combined = layer()
    errors = [] if captured["counts"] == [] else ["num_recv_tokens_per_expert_list is not [] with num_worst_tokens"]
    for replay in range(3):
        everyone = [inputs(60 + replay, r, tokens, hidden, route, ranks, False) for r in range(ranks)]
        new_x, new_topk, new_weights = everyone[rank]
        x.copy_(new_x), topk.copy_(new_topk), weights.copy_(new_weights)
        torch.cuda.synchronize()
        buffer.world.barrier()
        graph.replay()
        torch.cuda.synchronize()
        expected, _ = normal_combine_reference(new_x, new_topk, new_weights, EXPERTS, ranks)
        if not torch.equal(combined, expected):
            errors.append(f"replay {replay}: {(combined != expected).any(dim=1).sum().item()} tokens differ")
        _, expected_topk, _, _ = normal_dispatch_reference([e[0] for e in everyone], [e[1] for e in everyone],
                                                           [e[2] for e in everyone], EXPERTS, rank)
        received = expected_topk.shape[0]
        recv_topk = captured["recv_topk"]
        if not torch.equal(recv_topk[:received], expected_topk) or not bool((recv_topk[received:] == -1).all()):
            errors.append(f"replay {replay}: recv_topk_idx differs or its padding rows are not -1")
    buffer.check_errors()
    return {"passed": not errors, "replays": 3, "num_worst_tokens": worst, "errors": errors}


def step_restart(buffer: Buffer) -> Dict[str, Any]:
    """Rank 1's sending kernel fails (injected: its launcher raises) after its dispatch advanced
    the epoch: rank 1's dispatch raises that, the others' name rank 1's dispatch and an epoch
    once their waits give up; the next call raises at once on every rank, naming the stop; after
    ``restart()`` on every rank a layer is exact again."""
    from aboleth.moe import normal_kernels
    rank = buffer.rank
    senders = (normal_kernels.normal_dispatch_send, normal_kernels.normal_dispatch_direct)
    launcher = buffer._aboleth_launcher

    def failing(kernel: Any) -> Any:
        if kernel in senders:
            raise RuntimeError("injected: the sending kernel did not compile")
        return launcher(kernel)

    def layer(seed: int) -> List[str]:
        return check_layer(buffer, seed, ROUTES["random"], 2048, lambda r: 64 + r, False, 1)

    errors: List[str] = []
    result: Dict[str, Any] = {}

    def must_raise(key: str, seed: int, needles: List[str]) -> None:
        """A layer that must raise a RuntimeError naming every needle; its message and seconds
        go into the result under ``key``."""
        started = time.monotonic()
        try:
            layer(seed)
            errors.append(f"{key}: raised nothing")
        except RuntimeError as error:
            result[key] = message = str(error)
            errors.extend(f"{key}: the error does not say {needle!r}: {message[:600]}" for needle in needles
                          if needle not in message)
        result[f"{key}_seconds"] = round(time.monotonic() - started, 2)

    if rank == 1:
        buffer._aboleth_launcher = failing  # type: ignore[method-assign]
    try:
        must_raise("failed_call", 91, ["injected" if rank == 1 else "waiting for rank 1's normal dispatch of epoch"])
    finally:
        if rank == 1:
            del buffer._aboleth_launcher
    must_raise("next_call", 92, [f"this Buffer stopped on rank {rank}", "restart()"])
    if result["next_call_seconds"] > 1:
        errors.append(f"the call after the failure took {result['next_call_seconds']} s to raise")
    buffer.restart()
    errors += [f"after restart(): {error}" for error in layer(93)]
    return {"passed": not errors, "errors": errors, **result}


def step_too_small(world: Any) -> Dict[str, Any]:
    rank, ranks, hidden = world.rank, world.world_size, 2048
    size = Buffer.get_normal_size_hint(16, hidden, ranks, 4, EXPERTS)
    small = Buffer(None, size, 0, world=world, normal_direct=DIRECT)
    x, topk, weights = inputs(3, rank, 17, hidden, ROUTES["random"], ranks, False)
    per_rank, _, per_expert, in_rank, _ = small.get_dispatch_layout(topk, EXPERTS)
    result: Dict[str, Any] = {}
    errors = []
    try:
        small.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                       topk_idx=topk, topk_weights=weights)
        errors.append("17 tokens in a pool for 16: no error")
    except ValueError as error:
        result["too_many_tokens"] = str(error)
        if "nothing was sent" not in str(error) or "get_normal_size_hint" not in str(error):
            errors.append(f"the error does not say what to do: {error}")
    # 16 tokens per rank, most of which reach both ranks (top-4 of 16 experts lands on one rank
    # about 8% of the time), but room for 8 rows: check_errors names num_worst_tokens.
    x, topk, weights = inputs(4, rank, 16, hidden, ROUTES["random"], ranks, False)
    per_rank, _, per_expert, in_rank, _ = small.get_dispatch_layout(topk, EXPERTS)
    _, _, _, _, handle, _ = small.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                           num_tokens_per_expert=per_expert, topk_idx=topk, topk_weights=weights,
                                           num_worst_tokens=8)
    try:
        small.check_errors()
        errors.append("more rows than num_worst_tokens: check_errors raised nothing")
    except RuntimeError as error:
        result["num_worst_tokens"] = str(error)
        if "num_worst_tokens=8" not in str(error):
            errors.append(f"the error does not name num_worst_tokens: {error}")
    small.combine(torch.zeros(8, hidden, dtype=torch.bfloat16, device="cuda"), handle)  # keeps the ranks in step
    torch.cuda.synchronize()
    world.barrier()
    try:
        Buffer(None, size + 4096 * rank, 0, world=world, normal_direct=DIRECT)
        errors.append("pools of different sizes: no error")
    except ValueError as error:
        result["pool_sizes"] = str(error)
        if "same num_nvl_bytes" not in str(error):
            errors.append(f"the error does not say what to do: {error}")
    return {"passed": not errors, "errors": errors, **result}


def step_timing(world: Any) -> Dict[str, Any]:
    rank, ranks = world.rank, world.world_size
    experts, tokens, hidden, k = 256, 4096, 7168, 8
    size = Buffer.get_normal_size_hint(tokens, hidden, ranks, k, experts)
    buffer = Buffer(None, size, 0, world=world, normal_direct=DIRECT)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(rank)
    x = torch.randn(tokens, hidden, generator=generator, device="cuda").to(torch.bfloat16)
    x_fp8 = (x.to(torch.float8_e4m3fn), torch.rand(tokens, hidden // 128, generator=generator, device="cuda"))
    topk = torch.rand(tokens, experts, generator=generator, device="cuda").argsort(dim=1)[:, :k].to(torch.int64)
    weights = torch.rand(tokens, k, generator=generator, device="cuda")
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk, experts)
    arguments = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                     topk_idx=topk, topk_weights=weights)
    results: Dict[str, Any] = {}
    for name, data in (("bf16", x), ("fp8", x_fp8)):
        dispatch_us, combine_us = [], []
        for index in range(35):
            torch.cuda.synchronize()
            world.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            recv_x, _, recv_weights, _, handle, _ = buffer.dispatch(data, **arguments)
            end.record()
            torch.cuda.synchronize()
            if index >= 5:
                dispatch_us.append(start.elapsed_time(end) * 1000)
            outputs = torch.zeros(handle.num_rows, hidden, dtype=torch.bfloat16, device="cuda")
            torch.cuda.synchronize()
            world.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            buffer.combine(outputs, handle, topk_weights=recv_weights)
            end.record()
            torch.cuda.synchronize()
            if index >= 5:
                combine_us.append(start.elapsed_time(end) * 1000)
        row_bytes = hidden * (1 if name == "fp8" else 2) + (hidden // 128 * 4 if name == "fp8" else 0) + k * 12
        sent_rows = int(per_rank.sum()) - int(per_rank[rank])
        results[name] = {"dispatch": summary(dispatch_us), "combine": summary(combine_us),
                         "received_rows": handle.num_rows, "rows_sent_to_peers": sent_rows,
                         "dispatch_bytes_to_peers": sent_rows * row_bytes,
                         "combine_bytes_to_peers": (handle.num_rows - int(per_rank[rank])) * (hidden * 2 + k * 4)}
    buffer.check_errors()
    # Not on the proxy: under torch.profiler (CUPTI) the proxy thread's 59 MB of copies
    # did not complete within the 20 s bound (seen 2026-12-03).
    transport = os.environ.get("ABOLETH_TRANSPORT", "p2p")
    kernels_us = {name: profile_kernels(world, buffer, data, arguments, hidden)
                  for name, data in (("bf16", x), ("fp8", x_fp8))} if transport == "p2p" else \
        "not profiled on the proxy (CUPTI tracing stalls the proxy thread's copies)"
    timeline = dispatch_timeline(world, buffer, x, arguments) if transport == "p2p" else None
    host = host_profile(world, buffer, x, arguments, hidden)
    # Launches through the cached kernels of aboleth/moe/launch.py, and through Triton.
    launches = {getattr(kernel, "__name__", str(kernel)): {"cached": launcher.launches, "through_triton": launcher.misses}
                for kernel, launcher in buffer._launchers.items()}
    sending = (ranks - 1) * buffer.normal_parts
    grids = {"normal_prepare": ranks, "normal_pack": tokens, "normal_dispatch_send": sending,
             "normal_dispatch_direct": sending, "normal_dispatch_wait": 1, "normal_dispatch_receive": "received rows",
             "normal_combine_pack": "received rows", "normal_combine_send": sending, "normal_combine_direct": sending,
             "normal_combine_wait": 1, "normal_combine_reduce": "tokens x hidden / 1024"}
    return {"passed": True, "kernels_us": kernels_us, "dispatch_timeline_us": timeline, "host_profile": host,
            "launches": launches,
            "settings": {"tokens": tokens, "hidden": hidden, "top_k": k, "experts": experts,
                                         "ranks": ranks, "pool_bytes": size}, "results": results,
            "grids": {name: grids[name] for name in launches if name in grids},
            "note": "each call between host barriers; dispatch includes its host synchronization (the output "
                    "size) and the prepare kernel (positions, counts rows), not get_dispatch_layout"}


def profile_kernels(world: Any, buffer: Buffer, x: Any, arguments: Dict[str, Any], hidden: int) -> Dict[str, float]:
    """Mean device time per call of each kernel and copy over 5 dispatch (of `x`, BF16 or FP8) +
    combine rounds (torch.profiler), between barriers."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(5):
            torch.cuda.synchronize()
            world.barrier()
            _, _, recv_weights, _, handle, _ = buffer.dispatch(x, **arguments)
            outputs = torch.zeros(handle.num_rows, hidden, dtype=torch.bfloat16, device="cuda")
            torch.cuda.synchronize()
            world.barrier()
            buffer.combine(outputs, handle, topk_weights=recv_weights)
        torch.cuda.synchronize()
    world.barrier()
    means = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if event.count and device_us:
            means[event.key[:60]] = round(device_us / event.count, 1)
    return dict(sorted(means.items(), key=lambda item: -item[1])[:20])


def dispatch_timeline(world: Any, buffer: Buffer, x: Any, arguments: Dict[str, Any]) -> Dict[str, Any]:
    """One BF16 dispatch under torch.profiler (after two unprofiled dispatch + combine rounds, so
    that it follows a combine: a dispatch right after a dispatch synchronizes and meets the other
    ranks first), between barriers: when each of its kernels and copies ran on the device, and
    when the host call returned, in us from the host call's start (torch.profiler puts both on
    one clock): where the device waits for the host, and the host for the device."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def combine(handle: Any, recv_weights: Any) -> None:
        outputs = torch.zeros(handle.num_rows, x.shape[1], dtype=torch.bfloat16, device="cuda")
        torch.cuda.synchronize()
        world.barrier()
        buffer.combine(outputs, handle, topk_weights=recv_weights)

    for index in range(3):
        torch.cuda.synchronize()
        world.barrier()
        if index < 2:
            _, _, recv_weights, _, handle, _ = buffer.dispatch(x, **arguments)
            combine(handle, recv_weights)
            continue
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            with record_function("aboleth.dispatch"):
                _, _, recv_weights, _, handle, _ = buffer.dispatch(x, **arguments)
            torch.cuda.synchronize()
    combine(handle, recv_weights)
    torch.cuda.synchronize()
    world.barrier()
    events = list(profiler.events())
    # The host's range (torch.profiler also puts the label on the device's timeline).
    (call,) = [event for event in events if event.name == "aboleth.dispatch" and str(event.device_type).endswith("CPU")]
    origin = call.time_range.start
    device = sorted((event for event in events if str(event.device_type).endswith("CUDA")
                     and event.name != "aboleth.dispatch" and event.time_range.elapsed_us() > 0),
                    key=lambda event: event.time_range.start)
    return {"host_call": [0.0, round(call.time_range.end - origin, 1)],
            "device": [[event.name[:40], round(event.time_range.start - origin, 1), round(event.time_range.end - origin, 1)]
                       for event in device]}


def host_profile(world: Any, buffer: Buffer, x: Any, arguments: Dict[str, Any], hidden: int) -> Dict[str, Any]:
    """Where a dispatch's host time goes: 10 BF16 dispatch + combine rounds under cProfile on
    every rank, between barriers. Returns the 15 functions with the most own time (us per
    dispatch, cProfile's overhead included) and the wall time of a dispatch call without the
    profiler (perf_counter; it ends after the call's host synchronization)."""
    import cProfile
    import pstats
    import time
    rounds, walls, stats = 10, [], None
    for index in range(rounds + 10):
        torch.cuda.synchronize()
        world.barrier()
        profiler = cProfile.Profile() if index >= 10 else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        _, _, recv_weights, _, handle, _ = buffer.dispatch(x, **arguments)
        if profiler is not None:
            profiler.disable()
            if stats is None:
                stats = pstats.Stats(profiler)
            else:
                stats.add(profiler)
        else:
            walls.append((time.perf_counter() - started) * 1e6)
        outputs = torch.zeros(handle.num_rows, hidden, dtype=torch.bfloat16, device="cuda")
        torch.cuda.synchronize()
        world.barrier()
        buffer.combine(outputs, handle, topk_weights=recv_weights)
    torch.cuda.synchronize()
    world.barrier()
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():
        rows.append({"function": f"{os.path.basename(file)}:{line}:{name}", "calls_per_dispatch": calls / rounds,
                     "own_us": round(own / rounds * 1e6, 1), "cumulative_us": round(cumulative / rounds * 1e6, 1)})
    rows.sort(key=lambda row: -row["own_us"])
    return {"dispatch_wall_us": summary(walls[5:]), "top_own_time": rows[:15]}


def summary(values: List[float]) -> Dict[str, float]:
    values = sorted(values)
    return {"median_us": round(values[len(values) // 2], 1), "p10_us": round(values[len(values) // 10], 1),
            "p90_us": round(values[len(values) * 9 // 10], 1)}


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
    report: Dict[str, Any] = {"rank": rank, "ranks": ranks, "transport": os.environ.get("ABOLETH_TRANSPORT", "p2p"),
                              "normal_direct": {True: "direct", False: "staged", None: "default"}[DIRECT],
                              "steps": {}}
    size = Buffer.get_normal_size_hint(MAX_TOKENS, max(HIDDENS), ranks, 4, EXPERTS)
    buffer = Buffer(None, size, 0, world=world, normal_direct=DIRECT)
    steps = [("cases", lambda: step_cases(buffer)), ("cached", lambda: step_cached(buffer)),
             ("graph", lambda: step_graph(buffer)), ("restart", lambda: step_restart(buffer)),
             ("too_small", lambda: step_too_small(world)),
             ("timing", lambda: step_timing(world))]
    os._exit(run_steps(world, report, steps, os.path.join(out_dir, f"moe-normal-rank{rank}.json")))


if __name__ == "__main__":
    main()
