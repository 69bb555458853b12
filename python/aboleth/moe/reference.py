"""Plain-torch references for the low-latency mode, computed from every rank's inputs: what
``low_latency_dispatch`` must deliver to a rank and what ``low_latency_combine`` must return.
Used by tests/gpu/moe.py; bit-exact by construction (copies, and sums in the kernels' order)."""

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
