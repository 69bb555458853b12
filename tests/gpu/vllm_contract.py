"""vLLM's prepare/finalize contract for the aboleth backends (issue 16), with real tensors on the
GPU machine: vLLM 0.33.0's own Python (its source with integrations/vllm/0001-aboleth-all2all-
backend.patch applied, on PYTHONPATH) drives aboleth.integrations.vllm, and each rank's output
must equal a one-process MoE layer over its own tokens.

    torchrun --nproc-per-node 2 tests/gpu/vllm_contract.py OUT_DIR     (tests/gpu/run_vllm_contract.sh)

Steps (each rank writes OUT_DIR/vllm-contract-rank<r>.json):

- ``import``: vLLM's modular-kernel modules and aboleth.integrations.vllm import. vLLM's compiled
  kernels (``vllm._C``, ``vllm._moe_C``) are built for torch 2.14 and cannot load under this
  machine's torch 2.11; the one this path calls, ``moe_sum`` (vLLM's contiguous top-k reduction
  sums over k), is registered here as a torch reference when absent, and the report says so;
- ``rendezvous``: ``world_for_group`` over a gloo group (as vLLM's CPU group): rank 0 publishes a
  store address, every rank joins with ``TcpStoreBootstrap.connect``;
- ``standard``: ``AbolethPrepareAndFinalize`` (normal mode): prepare, a reference expert
  computation (expert ``e`` is ``x @ W[e]``, experts outside this rank dropped through an
  expert_map as vLLM's experts do), finalize with vLLM's ``TopKWeightAndReduceContiguous``;
  several layers, including one where a rank sends no token;
- ``standard_offset_caught``: the same with a wrong ``rank_expert_offset`` must not match (the
  check can fail);
- ``batched``: ``AbolethLowLatencyPrepareAndFinalize`` (low-latency mode, BatchedExperts),
  finalize with ``TopKWeightAndReduceDelegate`` (the combine applies the weights);
- ``manager``: ``AbolethAll2AllManager``'s handles cached per configuration and its
  ``make_prepare_finalize`` picks the class of its mode; every unbuilt member raises saying so;
- ``fault_tolerance``: the manager's ``query_active_mask``/``query_fault``/``clean_buffers`` on
  a low-latency handle: nobody marked after a healthy layer; rank 1 skips a dispatch and rank
  0's mask marks rank 1 once its wait gave up (ABOLETH_WAIT_TIMEOUT_MS, 10 s here), rank 1's
  marks nobody; after ``clean_buffers`` on every rank the masks are clear and a layer is right.

Tolerance: the expert outputs are rounded to BF16 and weighted in BF16 before the reduction (as
vLLM does), the reference is FP32: max |out - ref| <= 2e-2 * max |ref|.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Dict, List

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe import run_steps  # noqa: E402

HIDDEN, EXPERTS, TOP_K, TOKENS, MAX_TOKENS = 2048, 16, 4, 48, 64
TOLERANCE = 2e-2


def import_vllm() -> Dict[str, Any]:
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import (
        TopKWeightAndReduceContiguous,
        TopKWeightAndReduceDelegate,
    )
    stand_in = None
    try:
        torch.ops._moe_C.moe_sum
    except (AttributeError, RuntimeError):
        # vLLM's compiled kernel is not loadable here (see the module docstring): a torch
        # reference with its signature (sums input [m, k, hidden] over k into output).
        library = torch.library.Library("_moe_C", "DEF")
        library.define("moe_sum(Tensor input, Tensor! output, Tensor? topk_ids, Tensor? expert_map) -> ()")

        def moe_sum(input: torch.Tensor, output: torch.Tensor, topk_ids: Any, expert_map: Any) -> None:
            output.copy_(input.float().sum(1).to(output.dtype))

        library.impl("moe_sum", moe_sum, "CUDA")
        globals()["_moe_sum_library"] = library  # kept alive
        stand_in = "torch.ops._moe_C.moe_sum registered as a torch reference (vLLM's compiled ops did not load)"
    from aboleth.integrations import vllm as integration
    return {"mk": mk, "contiguous": TopKWeightAndReduceContiguous, "delegate": TopKWeightAndReduceDelegate,
            "integration": integration, "stand_in": stand_in}


def weights_of_experts() -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(1234)  # the same experts on every rank
    return (torch.randn(EXPERTS, HIDDEN, HIDDEN, generator=generator, device="cuda") / HIDDEN ** 0.5).to(torch.bfloat16)


def tokens_of(rank: int, layer: int, tokens: int) -> Dict[str, torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(100 * layer + rank)
    x = torch.randn(tokens, HIDDEN, generator=generator, device="cuda").to(torch.bfloat16)
    ids = torch.rand(tokens, EXPERTS, generator=generator, device="cuda").argsort(dim=1)[:, :TOP_K]
    weights = torch.rand(tokens, TOP_K, generator=generator, device="cuda")
    return {"x": x, "ids": ids.to(torch.int64), "weights": weights}


def reference(inputs: Dict[str, torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    """The one-process MoE layer: sum over k of weight * (x @ W[id]), in FP32."""
    out = torch.zeros(inputs["x"].shape, dtype=torch.float32, device="cuda")
    for j in range(inputs["ids"].shape[1]):
        per_token = torch.bmm(inputs["x"].float().unsqueeze(1), w[inputs["ids"][:, j]].float()).squeeze(1)
        out += inputs["weights"][:, j:j + 1] * per_token
    return out


def close(out: torch.Tensor, ref: torch.Tensor) -> Dict[str, Any]:
    error = (out.float() - ref).abs().max().item() if ref.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return {"max_abs_error": error, "max_abs_reference": scale, "matches": error <= TOLERANCE * max(scale, 1e-6)}


def standard_layer(v: Dict[str, Any], prepare_finalize: Any, inputs: Dict[str, torch.Tensor], w: torch.Tensor,
                   rank: int, ranks: int) -> torch.Tensor:
    local = EXPERTS // ranks
    expert_map = torch.full((EXPERTS,), -1, dtype=torch.int64, device="cuda")
    expert_map[rank * local:(rank + 1) * local] = torch.arange(local, device="cuda")
    x, scales, meta, ids, weights = prepare_finalize.prepare(
        inputs["x"], inputs["weights"], inputs["ids"], EXPERTS, expert_map, False, None)
    assert scales is None and ids.dtype == torch.int64 and x.shape[1] == HIDDEN, (scales, ids.dtype, x.shape)
    assert meta.expert_num_tokens_cpu.tolist() == meta.expert_num_tokens.tolist()
    fused = torch.zeros(x.shape[0], TOP_K, HIDDEN, dtype=torch.bfloat16, device="cuda")
    for j in range(TOP_K):
        local_ids = expert_map[ids[:, j]]
        mine = local_ids >= 0
        if mine.any():
            rows = x[mine].float().unsqueeze(1)
            fused[mine, j] = torch.bmm(rows, w[ids[mine, j]].float()).squeeze(1).to(torch.bfloat16)
    output = torch.empty(inputs["x"].shape, dtype=torch.bfloat16, device="cuda")
    prepare_finalize.finalize(output, fused, weights, ids, False, v["contiguous"]())
    torch.cuda.synchronize()
    return output


def step_standard(v: Dict[str, Any], buffer: Any, rank: int, ranks: int, w: torch.Tensor) -> Dict[str, Any]:
    prepare_finalize = v["integration"].AbolethPrepareAndFinalize(buffer, num_dispatchers=ranks,
                                                                  rank_expert_offset=rank * (EXPERTS // ranks))
    mk = v["mk"]
    assert prepare_finalize.activation_format == mk.FusedMoEActivationFormat.Standard
    layers: List[Dict[str, Any]] = []
    for layer, tokens in enumerate([TOKENS, 1, 0 if rank == 1 else TOKENS, TOKENS]):
        inputs = tokens_of(rank, layer, tokens)
        result = close(standard_layer(v, prepare_finalize, inputs, w, rank, ranks), reference(inputs, w))
        layers.append({"layer": layer, "tokens": tokens, **result})
    buffer.check_errors()
    return {"passed": all(layer["matches"] for layer in layers), "layers": layers}


def step_standard_offset_caught(v: Dict[str, Any], buffer: Any, rank: int, ranks: int,
                                w: torch.Tensor) -> Dict[str, Any]:
    wrong = v["integration"].AbolethPrepareAndFinalize(buffer, num_dispatchers=ranks, rank_expert_offset=0)
    inputs = tokens_of(rank, 9, TOKENS)
    result = close(standard_layer(v, wrong, inputs, w, rank, ranks), reference(inputs, w))
    matches = torch.tensor([int(result["matches"])])
    dist.all_reduce(matches)
    # Rank 0's offset is 0 anyway; rank 1's ids land on rank 0's experts: the layer is wrong
    # on every rank that receives rank 1's rows.
    return {"passed": int(matches) < ranks, "ranks_that_matched": int(matches), **result}


def step_batched(v: Dict[str, Any], buffer: Any, rank: int, ranks: int, w: torch.Tensor) -> Dict[str, Any]:
    mk = v["mk"]
    prepare_finalize = v["integration"].AbolethLowLatencyPrepareAndFinalize(buffer, max_tokens_per_rank=MAX_TOKENS,
                                                                            num_dispatchers=ranks)
    assert prepare_finalize.activation_format == mk.FusedMoEActivationFormat.BatchedExperts
    local = EXPERTS // ranks
    layers = []
    for layer, tokens in enumerate([TOKENS, MAX_TOKENS, 3]):
        inputs = tokens_of(rank, 20 + layer, tokens)
        x, scales, meta, ids, weights = prepare_finalize.prepare(
            inputs["x"], inputs["weights"], inputs["ids"], EXPERTS, None, False, None)
        assert x.shape == (local, ranks * MAX_TOKENS, HIDDEN) and scales is None and ids is None, x.shape
        counts = meta.expert_num_tokens.tolist()
        fused = torch.zeros_like(x)
        for e in range(local):
            rows = x[e, :counts[e]].float()
            fused[e, :counts[e]] = (rows @ w[rank * local + e].float()).to(torch.bfloat16)
        output = torch.empty(inputs["x"].shape, dtype=torch.bfloat16, device="cuda")
        prepare_finalize.finalize(output, fused, inputs["weights"], inputs["ids"], False, v["delegate"]())
        torch.cuda.synchronize()
        layers.append({"layer": layer, "tokens": tokens, "expert_num_tokens": counts,
                       **close(output, reference(inputs, w))})
    buffer.check_errors()
    return {"passed": all(layer["matches"] for layer in layers), "layers": layers}


def bare_manager(v: Dict[str, Any], cpu_group: Any, rank: int, ranks: int, mode: str) -> Any:
    """The manager without vLLM's parallel state: its base class reads vLLM's DP/TP groups, so
    the fields it sets are given here and only the manager's own methods run."""
    import threading
    integration = v["integration"]
    manager = integration.AbolethAll2AllManager.__new__(integration.AbolethAll2AllManager)
    manager.cpu_group, manager.rank, manager.world_size = cpu_group, rank, ranks
    manager.mode, manager._world, manager._buffers, manager.num_sms = mode, None, {}, None
    manager._mask, manager.support_fault_tolerance, manager._lock = None, True, threading.RLock()
    return manager


def step_manager(v: Dict[str, Any], cpu_group: Any, rank: int, ranks: int) -> Dict[str, Any]:
    integration = v["integration"]
    manager = bare_manager(v, cpu_group, rank, ranks, "normal")
    arguments = dict(max_num_tokens_per_rank=TOKENS, hidden=HIDDEN, num_topk=TOP_K, num_experts=EXPERTS)
    first = manager.get_handle(arguments)
    cached = manager.get_handle(dict(arguments)) is first

    class Moe:  # the FusedMoEConfig fields make_prepare_finalize reads
        max_num_tokens, hidden_dim, experts_per_token, num_experts = TOKENS, HIDDEN, TOP_K, EXPERTS
        num_local_experts = EXPERTS // ranks

    made = integration.make_prepare_finalize(Moe, None, manager)
    refused = []
    for name, call in (("dispatch", lambda: manager.dispatch(None, None, None)),
                       ("combine", lambda: manager.combine(None))):
        try:
            call()
        except NotImplementedError as error:
            refused.append(name if "not built" in str(error) else f"{name}: {error}")
    manager.destroy()
    return {"passed": cached and type(made).__name__ == "AbolethPrepareAndFinalize" and made.buffer is first
            and refused == ["dispatch", "combine"], "handle_cached": cached,
            "made": type(made).__name__, "refused": refused}


def step_fault_tolerance(v: Dict[str, Any], cpu_group: Any, rank: int, ranks: int, w: torch.Tensor) -> Dict[str, Any]:
    """vLLM's fault-tolerance hooks on a low-latency manager: a healthy layer marks nobody; rank
    1 skips a dispatch, rank 0's wait gives up (ABOLETH_WAIT_TIMEOUT_MS) and rank 0's mask marks
    rank 1 (rank 1's marks nobody); clean_buffers on every rank clears the masks and a layer
    after it is right again."""
    manager = bare_manager(v, cpu_group, rank, ranks, "low_latency")
    buffer = manager.get_handle(dict(max_num_tokens_per_rank=MAX_TOKENS, hidden=HIDDEN, num_topk=TOP_K,
                                     num_experts=EXPERTS))

    def state() -> List[Any]:
        return [manager.query_active_mask().tolist(), bool(manager.query_fault())]

    healthy = step_batched(v, buffer, rank, ranks, w)
    before = state()
    if rank == 0:
        inputs = tokens_of(rank, 40, TOKENS)
        buffer.low_latency_dispatch(inputs["x"], inputs["ids"], MAX_TOKENS, EXPERTS, use_fp8=False)
        torch.cuda.synchronize()  # the dispatch's wait for rank 1 gives up
    dist.barrier(group=cpu_group)
    after_fault = state()
    manager.clean_buffers()
    cleaned = state()
    again = step_batched(v, buffer, rank, ranks, w)
    manager.destroy()
    clear = [[0] * ranks, False]
    expected = [[0, 1] + [0] * (ranks - 2), True] if rank == 0 else clear
    return {"passed": healthy["passed"] and before == clear and after_fault == expected and cleaned == clear
            and again["passed"], "before": before, "after_fault": after_fault, "expected_after_fault": expected,
            "after_clean_buffers": cleaned, "healthy_layers": healthy["layers"], "layers_after": again["layers"]}


def main() -> int:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    dist.init_process_group("gloo")  # vLLM's managers hold a CPU (gloo) group like this one
    path = os.path.join(out_dir, f"vllm-contract-rank{rank}.json")
    report: Dict[str, Any] = {"rank": rank, "ranks": ranks, "transport": os.environ.get("ABOLETH_TRANSPORT", "p2p"),
                              "steps": {}}

    def fail_early(name: str) -> int:
        report["steps"][name] = {"passed": False, "exception": traceback.format_exc()[-3000:]}
        report["passed"] = False
        print(f"rank {rank} {name}: FAILED\n{report['steps'][name]['exception']}", flush=True)
        with open(path, "w") as file:
            json.dump(report, file, indent=1)
        return 1

    try:
        v = import_vllm()
        import vllm
        report["steps"]["import"] = {"passed": True, "vllm": getattr(vllm, "__version__", "unknown"),
                                     "stand_in": v["stand_in"], "torch": torch.__version__}
        print(f"rank {rank} import: passed ({report['steps']['import']})", flush=True)
    except Exception:  # noqa: BLE001 - the report says what is missing
        return fail_early("import")
    try:
        world = v["integration"].world_for_group(dist.group.WORLD)
        report["steps"]["rendezvous"] = {"passed": True, "world_size": world.world_size}
    except Exception:  # noqa: BLE001
        return fail_early("rendezvous")
    from aboleth.moe import Buffer
    w = weights_of_experts()
    normal = Buffer(num_nvl_bytes=Buffer.get_normal_size_hint(TOKENS, HIDDEN, ranks, TOP_K, EXPERTS), world=world)
    low = Buffer(num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(MAX_TOKENS, HIDDEN, ranks, EXPERTS),
                 low_latency_mode=True, world=world)
    steps = [("standard", lambda: step_standard(v, normal, rank, ranks, w)),
             ("standard_offset_caught", lambda: step_standard_offset_caught(v, normal, rank, ranks, w)),
             ("batched", lambda: step_batched(v, low, rank, ranks, w)),
             ("manager", lambda: step_manager(v, dist.group.WORLD, rank, ranks)),
             ("fault_tolerance", lambda: step_fault_tolerance(v, dist.group.WORLD, rank, ranks, w))]
    os._exit(run_steps(world, report, steps, path))


if __name__ == "__main__":
    sys.exit(main())
