"""The MoE suite (issue 15): aboleth.moe's dispatch and combine against, in the same run, a torch
``all_to_all_single`` dispatch/combine (NCCL) and DeepEP v1 intranode built from its source.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 experiments/bench/moe.py OUT_DIR [--transport p2p|proxy] \\
        [--deepep-source PATH]       (experiments/bench/run_moe.sh does this)

DeepEP's settings: normal mode 4096 tokens per rank, hidden 7168, top-8 of 256 experts, BF16
and FP8 (e4m3, a scale per 128 channels) dispatch, BF16 combine; low-latency mode 128 tokens.
Every system runs the same routing (the same seeds), each call between a device synchronize and
a host barrier, timed with CUDA events: median, p10 and p90 of ``MOE_BENCH_CALLS`` (30) calls
after 5 warm-up calls; a row's time is the slowest rank's median. Each system's output is
checked once against what it must give (aboleth: bit-exact against aboleth.moe.reference;
the baselines: a combine of the identity experts' outputs must give ``x`` times the number of
ranks the token went to). ``sms`` is what the system's kernels occupy: DeepEP's ``num_sms``,
Aboleth's grids (its copy kernels are plain Triton grids that finish and leave; only the waits
spin, one program each), NCCL's channels are its own. On p2p the normal mode runs twice, each
with its own Buffer: ``aboleth`` (the default there: direct, the rows put from the caller's
tensors) and ``aboleth-staged`` (``Buffer(normal_direct=False)``: every row packed into the pool
first, as on the queue transports).

The baselines and why one may not run: NCCL refuses two ranks on one GPU, so the
``all_to_all_single`` rows need a GPU per rank; DeepEP (``--deepep-source``, a checkout of tag
v1.2.1: only its ``csrc`` and ``deep_ep`` folders are read) is built on this machine with
``torch.utils.cpp_extension`` and ``-DDISABLE_NVSHMEM`` (intranode normal mode only: its
low-latency mode needs NVSHMEM), over a gloo group; ``moe.py --build-deepep SOURCE DIR`` builds
only the extension, which ``DEEPEP_PREBUILT=DIR/deep_ep_cpp.so`` then loads. A system that fails to build or run is a
``not_run`` entry with the reason, never a silent gap.

Writes OUT_DIR/<date>-moe-<machine>.{json,md} (rank 0, the merged rows and the ratios).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import rank_environment, timed_repetitions  # noqa: E402
from per_launch import nccl_not_run_reason  # noqa: E402

TOKENS, HIDDEN, TOP_K, EXPERTS = 4096, 7168, 8, 256
LOW_LATENCY_TOKENS = 128
CALLS = int(os.environ.get("MOE_BENCH_CALLS", "30"))
WARMUPS = 5


def routing(rank: int, tokens: int) -> Dict[str, Any]:
    """This rank's inputs: x (BF16 and FP8 with scales), top-k distinct experts, weights."""
    generator = torch.Generator(device="cuda")
    generator.manual_seed(1234 + rank)
    x = torch.randn(tokens, HIDDEN, generator=generator, device="cuda").to(torch.bfloat16)
    scales = torch.rand(tokens, HIDDEN // 128, generator=generator, device="cuda") + 0.5
    scores = torch.rand(tokens, EXPERTS, generator=generator, device="cuda")
    topk = scores.topk(TOP_K, dim=1).indices.to(torch.int64)
    weights = torch.rand(tokens, TOP_K, generator=generator, device="cuda")
    return {"x": x, "x_fp8": (x.to(torch.float8_e4m3fn), scales), "topk": topk, "weights": weights}


def summary(times_us: List[float]) -> Dict[str, float]:
    values = sorted(times_us)
    return {"median_us": round(values[len(values) // 2], 1), "p10_us": round(values[len(values) // 10], 1),
            "p90_us": round(values[len(values) * 9 // 10], 1)}


def barrier() -> None:
    dist.barrier()


class Rows:
    def __init__(self, rank: int, ranks: int, transport: str) -> None:
        self.rank, self.ranks, self.transport = rank, ranks, transport
        self.rows: List[Dict[str, Any]] = []
        self.not_run: Dict[str, str] = {}

    def add(self, system: str, mode: str, dtype: str, phase: str, result: Dict[str, Any], sms: Any,
            checked: bool, **extra: Any) -> None:
        self.rows.append({"suite": "moe", "system": system, "transport": self.transport if system.startswith("aboleth")
                          else "cuda-ipc" if system == "deepep" else "nccl", "mode": mode, "dtype": dtype,
                          "phase": phase, "ranks": self.ranks, **summary(result["times_us"]), "sms": sms,
                          "checked": checked and not result["errors"], "errors": result["errors"][:3], **extra})


def time_pair(dispatch: Callable[[int], Any], combine: Callable[[Any], Any]) -> Dict[str, Any]:
    """Times ``dispatch`` then, on its result, ``combine``, alternating as a layer does (both
    systems' buffers need that order); each call is its own timed repetition."""
    state: Dict[str, Any] = {}
    results: Dict[str, Any] = {"dispatch": {"times_us": [], "errors": []}, "combine": {"times_us": [], "errors": []}}
    for index in range(WARMUPS + CALLS):
        first = timed_repetitions(lambda _: state.update(out=dispatch(index)), barrier, lambda _: None,
                                  lambda _: [], 1, 0)
        second = timed_repetitions(lambda _: combine(state["out"]), barrier, lambda _: None, lambda _: [], 1, 0)
        if index >= WARMUPS:
            results["dispatch"]["times_us"] += first["times_us"]
            results["combine"]["times_us"] += second["times_us"]
    return results


# ---- aboleth ----------------------------------------------------------------------------------

def bench_aboleth(world: Any, rows: Rows, inputs: Dict[str, Any], low_latency_inputs: Dict[str, Any]) -> None:
    from aboleth.moe import Buffer
    from aboleth.moe.reference import normal_combine_reference, normal_dispatch_reference, normal_expert
    rank, ranks = world.rank, world.world_size
    size = Buffer.get_normal_size_hint(TOKENS, HIDDEN, ranks, TOP_K, EXPERTS)
    # The normal mode as a user gets it (the default: direct on p2p, staged on the queue
    # transports), and on p2p also staged (Buffer(normal_direct=False): every row packed into the
    # pool first), each its own Buffer and kernels.
    p2p = world.compilation_target() == "p2p"
    for direct in ((True, False) if p2p else (False,)):
        system = "aboleth" if direct == p2p else "aboleth-staged"
        buffer = Buffer(None, size, 0, world=world, normal_direct=direct)
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(inputs["topk"], EXPERTS)
        arguments = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                         topk_idx=inputs["topk"], topk_weights=inputs["weights"])
        everyone = [routing(r, TOKENS) for r in range(ranks)]
        grids = (f"send {(ranks - 1) * buffer.normal_parts} programs, waits 1 each; "
                 + ("receive, reduce" if direct else "pack, receive, reduce") + ": plain grids over tokens / rows")
        for dtype, key in (("bf16", "x"), ("fp8", "x_fp8")):
            # Checked once, bit-exact, before timing.
            recv_x, recv_topk, recv_weights, _, handle, _ = buffer.dispatch(inputs[key], **arguments)
            expected_x, expected_topk, expected_weights, _ = normal_dispatch_reference([e[key] for e in everyone],
                                                                        [e["topk"] for e in everyone],
                                                                        [e["weights"] for e in everyone], EXPERTS, rank)
            outputs = normal_expert(recv_x, recv_topk, recv_weights, rank, EXPERTS // ranks)
            combined, _, _ = buffer.combine(outputs, handle)
            expected, _ = normal_combine_reference(inputs[key], inputs["topk"], inputs["weights"], EXPERTS, ranks)
            same_x = all(torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                                     b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
                         for a, b in (zip(recv_x, expected_x) if dtype == "fp8" else [(recv_x, expected_x)]))
            checked = (same_x and torch.equal(recv_topk, expected_topk) and torch.equal(recv_weights, expected_weights)
                       and torch.equal(combined, expected))
            buffer.check_errors()
            zeros = torch.zeros(handle.num_rows, HIDDEN, dtype=torch.bfloat16, device="cuda")
            result = time_pair(lambda index: buffer.dispatch(inputs[key], **arguments),
                               lambda out: buffer.combine(zeros, out[4]))
            buffer.check_errors()
            rows.add(system, "normal", dtype, "dispatch", result["dispatch"], grids, checked,
                     received_rows=handle.num_rows)
            if dtype == "bf16":
                rows.add(system, "normal", "bf16", "combine", result["combine"], grids, checked)
    # The low-latency mode at its settings.
    size = Buffer.get_low_latency_rdma_size_hint(LOW_LATENCY_TOKENS, HIDDEN, ranks, EXPERTS)
    low = Buffer(None, 0, size, low_latency_mode=True, world=world)
    x, topk, weights = low_latency_inputs["x"], low_latency_inputs["topk"], low_latency_inputs["weights"]

    def combine(out: Any) -> Any:
        handle = out[2]
        return low.low_latency_combine(low.get_next_low_latency_combine_buffer(handle), topk, weights, handle)

    sms = f"send {(ranks - 1) * low.parts}, receive {low.num_sms}"
    # BF16, then FP8 (DeepEP's default: quantized on the send side); the combine is BF16 both times.
    for dtype, use_fp8 in (("bf16", False), ("fp8", True)):
        result = time_pair(lambda index: low.low_latency_dispatch(x, topk, LOW_LATENCY_TOKENS, EXPERTS,
                                                                  use_fp8=use_fp8), combine)
        low.check_errors()
        rows.add("aboleth", "low_latency", dtype, "dispatch", result["dispatch"], sms, True)
        if not use_fp8:
            rows.add("aboleth", "low_latency", "bf16", "combine", result["combine"], sms, True)


# ---- torch all_to_all_single --------------------------------------------------------------------

def bench_all_to_all(rows: Rows, inputs: Dict[str, Any], group: Any) -> None:
    """The baseline every framework has: tokens sorted by destination rank, counts exchanged,
    then all_to_all_single of the rows, the local top-k ids and the weights; the combine sends
    the outputs back and adds them per token."""
    ranks = dist.get_world_size()
    local_experts = EXPERTS // ranks
    topk, weights = inputs["topk"], inputs["weights"]

    def dispatch(x: Any) -> Dict[str, Any]:
        owners = topk // local_experts
        in_rank = torch.stack([(owners == r).any(dim=1) for r in range(ranks)], dim=1)
        destination, token = in_rank.t().nonzero(as_tuple=True)
        send_counts = in_rank.sum(0)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        received = sum(recv_splits)
        local = topk[token] - destination[:, None] * local_experts
        local = torch.where((local >= 0) & (local < local_experts), local, -1)
        out: Dict[str, Any] = {"token": token, "send_splits": send_splits, "recv_splits": recv_splits,
                               "in_rank": in_rank}
        out["x"] = x.new_empty(received, x.shape[1])
        dist.all_to_all_single(out["x"], x[token], recv_splits, send_splits, group=group)
        out["topk"] = local.new_empty(received, TOP_K)
        dist.all_to_all_single(out["topk"], local, recv_splits, send_splits, group=group)
        out["weights"] = weights.new_empty(received, TOP_K)
        dist.all_to_all_single(out["weights"], torch.where(local >= 0, weights[token], 0.0), recv_splits,
                               send_splits, group=group)
        return out

    def combine(out: Any, outputs: Any) -> Any:
        back = outputs.new_empty(len(out["token"]), HIDDEN)
        dist.all_to_all_single(back, outputs, out["send_splits"], out["recv_splits"], group=group)
        total = torch.zeros(topk.shape[0], HIDDEN, dtype=torch.float32, device="cuda")
        total.index_add_(0, out["token"], back.to(torch.float32))
        return total.to(torch.bfloat16)

    x = inputs["x"]
    out = dispatch(x)
    combined = combine(out, out["x"])
    checked = torch.equal(combined, (x.float() * out["in_rank"].sum(1, keepdim=True)).to(torch.bfloat16))
    result = time_pair(lambda index: dispatch(x), lambda out: combine(out, out["x"]))
    rows.add("torch-all-to-all", "normal", "bf16", "dispatch", result["dispatch"], "NCCL's channels", checked)
    rows.add("torch-all-to-all", "normal", "bf16", "combine", result["combine"], "NCCL's channels", checked)


# ---- DeepEP -------------------------------------------------------------------------------------

def compile_deepep(source: str, build: str) -> Any:
    """DeepEP's extension compiled from ``source`` into ``build`` (torch.utils.cpp_extension,
    ninja; intranode only: ``-DDISABLE_NVSHMEM``); returns the loaded module."""
    from torch.utils.cpp_extension import load
    os.makedirs(build, exist_ok=True)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    flags = ["-O3", "-DDISABLE_NVSHMEM", "-DDISABLE_AGGRESSIVE_PTX_INSTRS"]
    sources = [os.path.join(source, "csrc", name) for name in
               ("deep_ep.cpp", "kernels/runtime.cu", "kernels/layout.cu", "kernels/intranode.cu")]
    return load("deep_ep_cpp", sources, extra_cflags=flags + ["-Wno-deprecated-declarations"],
                extra_cuda_cflags=flags + ["-Xcompiler", "-O3"], extra_include_paths=[os.path.join(source, "csrc")],
                build_directory=build, verbose=False)


def build_deepep(source: str, rank: int) -> Any:
    """DeepEP's Python package over its extension: ``DEEPEP_PREBUILT`` (a deep_ep_cpp .so this
    script built earlier with ``--build-deepep``) when set, else compiled here (rank 0 builds,
    the others load the same build)."""
    prebuilt = os.environ.get("DEEPEP_PREBUILT")
    if prebuilt:
        import importlib.util
        spec = importlib.util.spec_from_file_location("deep_ep_cpp", prebuilt)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        build = os.environ.get("DEEPEP_BUILD_DIR", "/tmp/deepep-build")
        if rank != 0:
            dist.barrier()  # rank 0 builds first
        started = time.monotonic()
        module = compile_deepep(source, build)
        if rank == 0:
            print(f"[rank 0] DeepEP built in {time.monotonic() - started:.0f} s", flush=True)
            dist.barrier()
    sys.modules["deep_ep_cpp"] = module
    sys.path.insert(0, source)
    import deep_ep
    return deep_ep


def bench_deepep(deep_ep: Any, rows: Rows, inputs: Dict[str, Any], group: Any) -> None:
    buffer = deep_ep.Buffer(group, int(1e9), 0)
    topk, weights = inputs["topk"], inputs["weights"]
    per_rank, per_rdma, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk, EXPERTS)
    arguments = dict(num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma, is_token_in_rank=in_rank,
                     num_tokens_per_expert=per_expert, topk_idx=topk, topk_weights=weights)
    sms = f"num_sms {deep_ep.Buffer.num_sms}"
    for dtype, key in (("bf16", "x"), ("fp8", "x_fp8")):
        recv_x, _, _, _, handle, _ = buffer.dispatch(inputs[key], **arguments)
        checked = True
        if dtype == "bf16":
            combined, _, _ = buffer.combine(recv_x, handle)
            checked = torch.equal(combined, (inputs["x"].float() * in_rank.sum(1, keepdim=True)).to(torch.bfloat16))
        else:
            buffer.combine(torch.zeros(recv_x[0].shape, dtype=torch.bfloat16, device="cuda"), handle)
        rows_received = (recv_x[0] if dtype == "fp8" else recv_x).shape[0]
        outputs = torch.zeros(rows_received, HIDDEN, dtype=torch.bfloat16, device="cuda")
        result = time_pair(lambda index: buffer.dispatch(inputs[key], **arguments),
                           lambda out: buffer.combine(outputs, out[4]))
        rows.add("deepep", "normal", dtype, "dispatch", result["dispatch"], sms, checked, received_rows=rows_received)
        if dtype == "bf16":
            rows.add("deepep", "normal", "bf16", "combine", result["combine"], sms, checked)


# ---- the report ---------------------------------------------------------------------------------

def merge(all_rows: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """One row per configuration: the slowest rank's times, checked only if every rank's was."""
    merged: Dict[tuple, Dict[str, Any]] = {}
    for rank_rows in all_rows:
        for entry in rank_rows:
            key = (entry["system"], entry["mode"], entry["dtype"], entry["phase"])
            if key not in merged:
                merged[key] = dict(entry)
                continue
            current = merged[key]
            for field in ("median_us", "p10_us", "p90_us"):
                current[field] = max(current[field], entry[field])
            current["checked"] = current["checked"] and entry["checked"]
    return list(merged.values())


def ratios(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Aboleth's median over each baseline's of the same mode, dtype and phase (below 1: faster)."""
    found = []
    for entry in rows:
        if entry["system"].startswith("aboleth"):
            continue
        for ours in rows:
            same = all(ours[f] == entry[f] for f in ("mode", "dtype", "phase"))
            if ours["system"].startswith("aboleth") and same:
                found.append({"system": ours["system"], "mode": entry["mode"], "dtype": entry["dtype"], "phase": entry["phase"],
                              "baseline": entry["system"], "aboleth_us": ours["median_us"],
                              "baseline_us": entry["median_us"],
                              "aboleth_over_baseline": round(ours["median_us"] / entry["median_us"], 3)})
    return found


def markdown(report: Dict[str, Any]) -> str:
    lines = [f"# MoE dispatch and combine, {report['date']}, {report['machine']}", "",
             f"`{report['command']}` at {report['git_commit']}", "",
             "| system | transport | mode | dtype | phase | median us | p10 | p90 | sms | checked |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["rows"]:
        lines.append(f"| {r['system']} | {r['transport']} | {r['mode']} | {r['dtype']} | {r['phase']} | "
                     f"{r['median_us']} | {r['p10_us']} | {r['p90_us']} | {r['sms']} | {r['checked']} |")
    lines += ["", "| system | mode | dtype | phase | baseline | aboleth us | baseline us | aboleth / baseline |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["ratios"]:
        lines.append(f"| {r['system']} | {r['mode']} | {r['dtype']} | {r['phase']} | {r['baseline']} | {r['aboleth_us']} | "
                     f"{r['baseline_us']} | {r['aboleth_over_baseline']} |")
    if report["not_run"]:
        lines += ["", "Not run:"] + [f"- {name}: {why}" for name, why in report["not_run"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    if sys.argv[1:2] == ["--build-deepep"]:
        # experiments/bench/moe.py --build-deepep SOURCE BUILD_DIR: only the extension (to carry).
        started = time.monotonic()
        module = compile_deepep(sys.argv[2], sys.argv[3])
        print(f"built {module.__file__} in {time.monotonic() - started:.0f} s", flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--transport", default=os.environ.get("ABOLETH_TRANSPORT", "p2p"), choices=["p2p", "proxy"])
    parser.add_argument("--deepep-source", default=os.environ.get("DEEPEP_SOURCE"),
                        help="a DeepEP v1.2.1 checkout (csrc/ and deep_ep/), built here without NVSHMEM")
    parser.add_argument("--systems", default="aboleth,all-to-all,deepep")
    arguments = parser.parse_args()
    environment = rank_environment()
    import aboleth
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, ranks = boot.rank, boot.world_size
    world = aboleth.World(rank, ranks, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    nccl_reason = nccl_not_run_reason(ranks)
    dist.init_process_group("gloo" if nccl_reason else "cpu:gloo,cuda:nccl")
    group = dist.group.WORLD
    rows = Rows(rank, ranks, arguments.transport)
    systems = arguments.systems.split(",")
    inputs = routing(rank, TOKENS)
    low_latency_inputs = routing(rank, LOW_LATENCY_TOKENS)

    def attempt(name: str, run: Callable[[], None]) -> None:
        started = time.monotonic()
        try:
            run()
            print(f"[rank {rank}] {name}: done ({time.monotonic() - started:.0f} s)", flush=True)
        except Exception:  # noqa: BLE001 - the report says what failed
            rows.not_run[name] = traceback.format_exc()[-1500:]
            print(f"[rank {rank}] {name}: FAILED\n{rows.not_run[name]}", flush=True)

    if "aboleth" in systems:
        attempt("aboleth", lambda: bench_aboleth(world, rows, inputs, low_latency_inputs))
    if "all-to-all" in systems:
        if nccl_reason:
            rows.not_run["torch-all-to-all"] = nccl_reason
        else:
            attempt("torch-all-to-all", lambda: bench_all_to_all(rows, inputs, group))
    if "deepep" in systems:
        if not arguments.deepep_source:
            rows.not_run["deepep"] = "no --deepep-source given (a DeepEP v1.2.1 checkout)"
        else:
            attempt("deepep", lambda: bench_deepep(build_deepep(arguments.deepep_source, rank), rows, inputs, group))
        rows.not_run.setdefault("deepep low-latency", "DeepEP's low-latency mode needs NVSHMEM (built without it)")
    gathered: List[Any] = [None] * ranks
    dist.all_gather_object(gathered, {"rows": rows.rows, "not_run": rows.not_run})
    if rank == 0:
        not_run: Dict[str, str] = {}
        for entry in gathered:
            not_run.update(entry["not_run"])
        merged = merge([entry["rows"] for entry in gathered])
        machine = os.environ.get("MACHINE", "unknown")
        report = {"command": os.environ.get("COMMAND", " ".join(sys.argv)), "machine": machine,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "git_commit": os.environ.get("GIT_COMMIT") or subprocess.run(
                      ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
                  "settings": {"tokens": TOKENS, "hidden": HIDDEN, "top_k": TOP_K, "experts": EXPERTS,
                               "low_latency_tokens": LOW_LATENCY_TOKENS, "calls": CALLS, "warmups": WARMUPS,
                               "ranks": ranks, "gpus": torch.cuda.device_count()},
                  "rows": merged, "ratios": ratios(merged), "not_run": not_run}
        stem = f"{report['date'][:10]}-moe-{arguments.transport}-{machine}"
        os.makedirs(arguments.out_dir, exist_ok=True)
        with open(os.path.join(arguments.out_dir, stem + ".json"), "w") as file:
            json.dump(report, file, indent=1)
        with open(os.path.join(arguments.out_dir, stem + ".md"), "w") as file:
            file.write(markdown(report))
        print(markdown(report), flush=True)
    dist.barrier()
    del environment
    os._exit(0)


if __name__ == "__main__":
    main()
