"""Plain-torch references, computed from every rank's inputs: what ``low_latency_dispatch`` must
deliver to a rank (BF16, or FP8 rows quantized as ``low_latency_fp8_quantize`` says) and what
``low_latency_combine`` must return, and the same for the normal mode's ``dispatch`` and
``combine`` (below). Used by tests/gpu/moe.py and
tests/gpu/moe_normal.py; bit-exact by construction (copies, and sums in the kernels' order)."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple


def dispatch_reference(xs: List[Any], topk: List[Any], num_experts: int, rank: int,
                       max_tokens: int) -> Tuple[Any, Any]:
    """``(recv_x, recv_count)`` rank ``rank`` must receive, given every rank's ``x`` and
    ``topk_idx``: expert ``j``'s rows are the tokens of rank 0 that chose it (in token order),
    then rank 1's, and so on; the rows past ``recv_count[j]`` are not specified."""
    import torch
    ranks = len(xs)
    local_experts = num_experts // ranks
    hidden = xs[0].shape[1]
    recv_x = torch.zeros(local_experts, ranks * max_tokens, hidden, dtype=xs[0].dtype, device=xs[0].device)
    recv_count = torch.zeros(local_experts, dtype=torch.int32, device=xs[0].device)
    for local in range(local_experts):
        expert = rank * local_experts + local
        rows = [xs[source][(topk[source] == expert).any(dim=1)] for source in range(ranks)]
        block = torch.cat(rows)
        recv_x[local, :block.shape[0]] = block
        recv_count[local] = block.shape[0]
    return recv_x, recv_count


def low_latency_fp8_quantize(x: Any, round_scale: bool = False) -> Tuple[Any, Any]:
    """What ``low_latency_dispatch(use_fp8=True)`` sends for BF16 rows ``x [tokens, hidden]``:
    ``(e4m3 [tokens, hidden], float32 scales [tokens, hidden / 128])``, per group of 128 channels
    ``scale = max(amax, 1e-4) / 448`` (``round_scale``: the power of two at or above it, exactly)
    and ``q = x / scale`` rounded to e4m3 (both divisions correctly rounded, as the kernel's)."""
    import torch
    tokens, hidden = x.shape
    values = x.to(torch.float32).view(tokens, hidden // 128, 128)
    amax = values.abs().amax(dim=2).clamp(min=1e-4)
    # A tensor divisor: torch divides by a Python scalar as a multiplication by its reciprocal,
    # which is not the correctly rounded quotient the kernel computes.
    scales = amax / torch.full_like(amax, 448.0)
    if round_scale:
        bits = scales.view(torch.int32)
        exponent = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
        scales = (exponent << 23).view(torch.float32)
    quantized = (values / scales[:, :, None]).to(torch.float8_e4m3fn).view(tokens, hidden)
    return quantized, scales


def ue8m0_pack(scales: Any) -> Any:
    """Power-of-two float32 scales ``[rows, groups]`` as DeepEP's UE8M0 words ``[rows, groups /
    4]`` int32: group ``4 w + i``'s exponent byte in byte ``i`` of word ``w``."""
    import torch
    exponents = (scales.contiguous().view(torch.int32) >> 23) & 0xFF
    rows, groups = exponents.shape
    shifts = torch.arange(4, device=scales.device, dtype=torch.int32) * 8
    return (exponents.view(rows, groups // 4, 4) << shifts).sum(dim=2, dtype=torch.int64).to(torch.int32)


def fp8_dequantize(quantized: Any, scales: Any) -> Any:
    """BF16 rows from e4m3 rows and their float32 scales (one per 128 channels): each value times
    its scale in FP32, rounded to BF16 once."""
    import torch
    rows, hidden = quantized.shape[-2], quantized.shape[-1]
    shape = quantized.shape
    values = quantized.to(torch.float32).reshape(-1, rows, hidden // 128, 128)
    return (values * scales.reshape(-1, rows, hidden // 128)[..., None]).reshape(shape).to(torch.bfloat16)


def combine_reference(x: Any, topk_idx: Any, topk_weights: Any, expert: Callable[[Any, int], Any]) -> Any:
    """What ``low_latency_combine`` returns on a rank whose tokens are ``x`` when expert ``e``
    maps a row ``v`` to ``expert(v, e)``: sum over k, in k order, in FP32, of the weight rounded
    to BF16 times the output (each product exact, so fused or not the sum is the same)."""
    import torch
    total = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for k in range(topk_idx.shape[1]):
        for e in topk_idx[:, k].unique().tolist():
            if e < 0:
                continue
            rows = topk_idx[:, k] == e
            weight = topk_weights[rows, k].to(torch.bfloat16).to(torch.float32)[:, None]
            total[rows] = total[rows] + weight * expert(x[rows], e).to(torch.float32)
    return total.to(torch.bfloat16)


def expert_scale(v: Any, e: int) -> Any:
    """The tests' expert: a row times ``1 + e / 64``, in BF16 (deterministic, differs per expert)."""
    import torch
    return (v.to(torch.float32) * (1.0 + e / 64.0)).to(torch.bfloat16)


# ---- the normal mode --------------------------------------------------------------------------

def _rows_for_rank(x: Any, topk: Any, weights: Any, rank: int, local_experts: int) -> Tuple[Any, Any, Any, Any]:
    """The rows a home rank's tokens send to ``rank``: ``(mask over tokens, x rows, local ids
    (-1 for another rank's experts), weights (0 there))``."""
    import torch
    local = topk - rank * local_experts
    mine = (topk >= 0) & (local >= 0) & (local < local_experts)
    mask = mine.any(dim=1)
    ids = torch.where(mine, local, torch.full_like(local, -1))[mask]
    kept = torch.where(mine, weights.to(torch.float32), torch.zeros_like(weights, dtype=torch.float32))[mask]
    return mask, x[mask], ids, kept


def normal_dispatch_reference(xs: List[Any], topk: List[Any], weights: List[Any], num_experts: int,
                              rank: int) -> Tuple[Any, Any, Any, List[int]]:
    """What a normal ``dispatch`` delivers to ``rank`` from every rank's ``x`` (a tensor, or an
    FP8 ``(x, scales)`` pair: then ``recv_x`` is one too), ``topk_idx`` and ``topk_weights``:
    ``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list)``, the
    sources in rank order, each source's tokens in token order, each token once; the
    per-expert counts are not rounded up to an expert alignment (the caller rounds)."""
    import torch
    local_experts = num_experts // len(xs)
    fp8 = isinstance(xs[0], tuple)
    rows, scales, ids, kept = [], [], [], []
    for source in range(len(xs)):
        data = xs[source][0] if fp8 else xs[source]
        mask, x_rows, source_ids, source_weights = _rows_for_rank(data, topk[source], weights[source], rank,
                                                                  local_experts)
        rows.append(x_rows)
        if fp8:
            scales.append(xs[source][1][mask])
        ids.append(source_ids)
        kept.append(source_weights)
    recv_ids = torch.cat(ids)
    per_expert = [int((recv_ids == j).any(dim=1).sum()) for j in range(local_experts)]
    recv_x = (torch.cat(rows), torch.cat(scales)) if fp8 else torch.cat(rows)
    return recv_x, recv_ids, torch.cat(kept), per_expert


def normal_expert(recv_x: Any, recv_topk_idx: Any, recv_topk_weights: Any, rank: int, local_experts: int) -> Any:
    """The tests' expert computation on a rank's received rows (row by row, capturable in a
    CUDA graph): the sum over k, in k order, in FP32, of ``bf16(weight) * expert_scale(x,
    e)`` for the rank's experts ``e`` among the row's (rows of another rank's experts: 0).
    FP8 rows are dequantized first (one scale per 128 channels)."""
    import torch
    if isinstance(recv_x, tuple):
        data, scales = recv_x
        rows, hidden = data.shape
        x = (data.to(torch.float32).view(rows, scales.shape[1], hidden // scales.shape[1])
             * scales[:, :, None]).view(rows, hidden)
        x = x.to(torch.bfloat16)
    else:
        x = recv_x
    total = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for k in range(recv_topk_idx.shape[1]):
        ids = recv_topk_idx[:, k:k + 1]
        valid = ids >= 0
        scale = 1.0 + (rank * local_experts + ids.clamp(min=0)).to(torch.float32) / 64.0
        scaled = (x.to(torch.float32) * scale).to(torch.bfloat16).to(torch.float32)
        weight = recv_topk_weights[:, k:k + 1].to(torch.bfloat16).to(torch.float32)
        total = total + torch.where(valid, weight * scaled, torch.zeros_like(scaled))
    return total.to(torch.bfloat16)


def normal_combine_reference(x: Any, topk: Any, weights: Any, num_experts: int, ranks: int,
                             expert: Callable[..., Any] = normal_expert, bias: Any = None) -> Tuple[Any, Any]:
    """What a normal ``combine`` returns on a home rank with tokens ``x``, ``topk_idx`` and
    ``topk_weights`` when every rank applies ``expert(rows, ids, weights, rank,
    local_experts)`` to what it received: the outputs summed per token over the ranks it went
    to, in rank order, in FP32, then ``bias`` (none, a tensor or a pair, in order) added, rounded
    to BF16 once; and the weights summed the same way."""
    import torch
    local_experts = num_experts // ranks
    data = x[0] if isinstance(x, tuple) else x
    total = torch.zeros(data.shape, dtype=torch.float32, device=data.device)
    weight_total = torch.zeros(topk.shape, dtype=torch.float32, device=data.device)
    for rank in range(ranks):
        mask, _, ids, kept = _rows_for_rank(data, topk, weights, rank, local_experts)
        rows = (x[0][mask], x[1][mask]) if isinstance(x, tuple) else x[mask]
        total[mask] = total[mask] + expert(rows, ids, kept, rank, local_experts).to(torch.float32)
        weight_total[mask] = weight_total[mask] + kept
    for value in ([] if bias is None else list(bias) if isinstance(bias, (tuple, list)) else [bias]):
        if value is not None:
            total = total + value.to(torch.float32)
    return total.to(torch.bfloat16), weight_total
