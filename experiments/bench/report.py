"""Merges the per-rank JSON of one benchmark run (every suite's) into the run's report: one JSON in the schema of
README.md (``command, date, machine, git_commit, rows``), a Markdown table and a PNG plot, written
to OUT_DIR and copied to experiments/bench/results/.

    python3 experiments/bench/report.py OUT_DIR
    python3 experiments/bench/report.py --replot experiments/bench/results/REPORT.json

A row merges the ranks' rows of one configuration: ``round_us`` and ``launch_us`` (and the
posting times, and the minima) are the slowest rank's (a round is over when every rank's is),
``checked`` is true only when every rank checked every launch, ``error`` is the first rank's
that has one. The environment gives COMMAND, MACHINE and GIT_COMMIT (run.sh sets them).

Sections: the all-to-all table; the per-launch table (microseconds per launch, each over the
plain Triton kernel of the same run and mode) and issue 13's per-launch targets; the pass
ablation; what was not run. The plot has a second panel for the per-launch rows when there are
any. ``--replot`` redraws both from a merged JSON with or without per-launch rows."""

from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
KEY_FIELDS = ("suite", "system", "transport", "variant", "ranks", "bytes_per_peer", "num_warps", "threads", "chains")
#: Fields merged as the slowest rank's value.
SLOWEST_RANK_FIELDS = ("round_us", "launch_us", "round_us_min", "launch_us_min", "posting_cycles", "posting_us", "posting_cycles_min",
                       "posting_us_min")
#: Issue 13's per-launch targets: ``with world.compilation():`` around each launch at most this
#: many times the plain Triton kernel's launch; a CUDA-graph launch at most this fraction of NCCL's.
BLOCK_PER_LAUNCH_OVER_PLAIN_MAX = 1.1
GRAPH_OVER_NCCL_GRAPH_MAX = 1.0 / 3.0


def merge(out_dir: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    merged: Dict[Tuple, Dict[str, Any]] = {}
    notes: Dict[str, Any] = {"failures": [], "not_run": {}}
    for path in sorted(glob.glob(os.path.join(out_dir, "*-rank*.json"))):
        with open(path) as file:
            report = json.load(file)
        notes["failures"] += [f"rank {report['rank']}: {failure}" for failure in report.get("failures", [])]
        notes["not_run"].update(report.get("not_run", {}))
        for entry in report["rows"]:
            key = tuple(entry.get(field) for field in KEY_FIELDS)
            if key not in merged:
                merged[key] = dict(entry)
                continue
            current = merged[key]
            for field in SLOWEST_RANK_FIELDS:
                if entry.get(field) is not None:
                    current[field] = max(current.get(field) or 0.0, entry[field])
            current["checked"] = current["checked"] and entry["checked"]
            if entry.get("error") and not current.get("error"):
                current["error"] = entry["error"]
    return list(merged.values()), notes


def label(entry: Dict[str, Any]) -> str:
    if entry["suite"] == "per-launch":
        return f"{entry['system']} {entry['transport']} {entry['variant']}"
    if entry["system"] == "aboleth":
        return f"aboleth {entry['transport']} {entry['variant']} w{entry['num_warps']}"
    if entry["system"] == "aboleth-tier1":
        return f"aboleth-tier1 {entry['transport']} {entry['variant']}"
    if entry["system"] == "hand-written-probe":
        return f"hand-written-probe {entry['variant']}"
    if entry.get("threads"):
        return f"{entry['system']} ({entry['threads']} thr)"
    return entry["system"]


def size_text(length_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if length_bytes >= scale and length_bytes % scale == 0:
            return f"{length_bytes // scale} {unit}"
    return f"{length_bytes} B"


def ablation_markdown(rows: List[Dict[str, Any]]) -> List[str]:
    """The pass-ablation table: per transport, a line per variant, per chain count the GPU
    posting time and the stage's reservations / doorbells / system fences."""
    lines: List[str] = []
    for transport in sorted({entry["transport"] for entry in rows}):
        chosen = [entry for entry in rows if entry["transport"] == transport]
        chains = sorted({entry["chains"] for entry in chosen})
        variants = list(dict.fromkeys(entry["variant"] for entry in chosen))
        table = {(entry["variant"], entry["chains"]): entry for entry in chosen}
        nic_note = (" Over rdma (mlx5 on the software NIC: the GPU's posting is real, the NIC is a host thread), "
                    "`NIC` gives per launch the UAR stores the NIC thread observed (at most the doorbells rung) and "
                    "the WQEs it executed." if transport == "rdma" else "")
        lines += ["", f"## Pass ablation over {transport}", "",
                  "GPU posting time (us at the run's SM clock, cycles where no clock was read) of the posting "
                  "loop, the median and, where recorded, the minimum over the timed launches, and the stage's "
                  "reservations / doorbells / system fences for that binary." + nic_note, "",
                  "| variant | " + " | ".join(f"{count} chains" for count in chains) + " |",
                  "| --- | " + " | ".join("---:" for _ in chains) + " |"]
        for variant in variants:
            cells = []
            for count in chains:
                entry = table.get((variant, count))
                if entry is None:
                    cells.append("")
                    continue
                time_text = (f"{entry['posting_us']:.2f} us" if entry.get("posting_us") is not None
                             else f"{entry['posting_cycles']:.0f} cyc")
                if entry.get("posting_us_min") is not None:
                    time_text += f", min {entry['posting_us_min']:.2f}"
                elif entry.get("posting_cycles_min") is not None:
                    time_text += f", min {entry['posting_cycles_min']:.0f}"
                counts = entry.get("counts") or {}
                fences = (counts.get("fences") or {}).get("sys", "?")
                nic = ""
                if entry.get("nic_doorbells_observed_per_launch") is not None:
                    # The software NIC's own counts (rdma): UAR stores it saw, WQEs it executed.
                    nic = (f" NIC {entry['nic_doorbells_observed_per_launch']:g} db, "
                           f"{entry['nic_wqes_executed_per_launch']:g} WQEs")
                cells.append(f"{time_text} ({counts.get('reservations', '?')}/{counts.get('doorbells', '?')}/{fences})"
                             + nic + ("" if entry["checked"] else " WRONG"))
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def plain_baseline(rows: List[Dict[str, Any]], entry: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The plain Triton row an Aboleth per-launch row is compared with: same run (transport),
    size and mode (eager for the eager variants, graph for graph)."""
    mode = "graph" if entry["variant"] == "graph" else "eager"
    for candidate in rows:
        if (candidate["system"] == "plain-triton" and candidate["transport"] == entry["transport"]
                and candidate["bytes_per_peer"] == entry["bytes_per_peer"] and candidate["variant"] == mode):
            return candidate
    return None


def ratio(numerator: Optional[Dict[str, Any]], denominator: Optional[Dict[str, Any]]) -> Optional[float]:
    if not numerator or not denominator or not numerator.get("launch_us") or not denominator.get("launch_us"):
        return None
    return numerator["launch_us"] / denominator["launch_us"]


def per_launch_markdown(rows: List[Dict[str, Any]]) -> List[str]:
    """The per-launch table: microseconds per launch (median; the slowest rank), and for Aboleth
    the ratio to the plain Triton kernel of the same run and mode."""
    sizes = sorted({entry["bytes_per_peer"] for entry in rows})
    transports, modes, systems = ["p2p", "proxy", "nccl"], ["eager", "eager-one-block", "eager-block-per-launch"], [
        "plain-triton", "aboleth", "nccl"]

    def known(values: List[str], value: str) -> int:
        return values.index(value) if value in values else len(values)

    def position(entry: Dict[str, Any]) -> Tuple:
        # Per transport, eager before graph, plain Triton first: each Aboleth line under its baseline.
        return (known(transports, entry["transport"]), entry["variant"] == "graph", known(systems, entry["system"]),
                known(modes, entry["variant"]), label(entry))

    labels = list(dict.fromkeys(label(entry) for entry in sorted(rows, key=position)))
    table = {(label(entry), entry["bytes_per_peer"]): entry for entry in rows}
    lines = ["", "## Per launch", "",
             "Microseconds per launch of the seed's all-to-all from Python (one round per launch; the median "
             "repetition / launches per repetition, the slowest rank); for Aboleth, in parentheses, that over the "
             "plain Triton kernel (same signature, no aboleth calls) of the same run, eager or graph. `FAILED` rows "
             "are listed below the table.", "",
             "| system | " + " | ".join(size_text(size) for size in sizes) + " |",
             "| --- | " + " | ".join("---:" for _ in sizes) + " |"]
    failed = []
    for name in labels:
        cells = []
        for size in sizes:
            entry = table.get((name, size))
            if entry is None:
                cells.append("")
            elif entry.get("launch_us") is None:
                cells.append("FAILED")
                failed.append(f"- {name} {size_text(size)}: {entry.get('error', 'no time recorded')}")
            else:
                text = f"{entry['launch_us']:.2f}"
                over = ratio(entry, plain_baseline(rows, entry)) if entry["system"] == "aboleth" else None
                if over is not None:
                    text += f" ({over:.2f}x)"
                cells.append(text + ("" if entry["checked"] else " WRONG"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if failed:
        lines += ["", "Failed rows:", ""] + failed
    return lines


def per_launch_targets(rows: List[Dict[str, Any]], not_run: Dict[str, str]) -> List[str]:
    """Issue 13's per-launch targets, one line per transport and size."""
    lines = ["", "## Per-launch targets (issue 13)", "", "| target | measured | met |", "| --- | --- | --- |"]
    nccl_graph = {entry["bytes_per_peer"]: entry for entry in rows
                  if entry["system"] == "nccl" and entry["variant"] == "graph"}
    for entry in rows:
        if entry["system"] != "aboleth" or entry["variant"] not in ("eager-block-per-launch", "graph"):
            continue
        where = f"{entry['transport']} {size_text(entry['bytes_per_peer'])}"
        if entry["variant"] == "eager-block-per-launch":
            plain = plain_baseline(rows, entry)
            over = ratio(entry, plain)
            target = f"{where}, `compilation()` around each launch <= {BLOCK_PER_LAUNCH_OVER_PLAIN_MAX}x plain Triton"
            if over is None:
                lines.append(f"| {target} | not measured ({entry.get('error') or 'no plain row'}) | — |")
            else:
                met = "yes" if over <= BLOCK_PER_LAUNCH_OVER_PLAIN_MAX and entry["checked"] else "no"
                lines.append(f"| {target} | {entry['launch_us']:.2f} vs {plain['launch_us']:.2f} us: **{over:.2f}x** "
                             f"| {met} |")
            continue
        target = f"{where}, graph launch <= 1/3 NCCL graph launch"
        nccl = nccl_graph.get(entry["bytes_per_peer"])
        over = ratio(entry, nccl)
        if over is not None:
            met = "yes" if over <= GRAPH_OVER_NCCL_GRAPH_MAX and entry["checked"] else "no"
            lines.append(f"| {target} | {entry['launch_us']:.2f} vs {nccl['launch_us']:.2f} us: **{over:.2f}x** "
                         f"| {met} |")
        elif entry.get("launch_us") is None:
            lines.append(f"| {target} | not measured ({entry.get('error', 'no time recorded')}) | — |")
        else:
            reason = ("not run here (see Not run)" if "nccl" in not_run
                      else (nccl or {}).get("error") or "no NCCL graph row in this run")
            lines.append(f"| {target} | {entry['launch_us']:.2f} us; NCCL {reason} | — |")
    return lines


def markdown(rows: List[Dict[str, Any]], header: Dict[str, Any]) -> str:
    ablation = [entry for entry in rows if entry["suite"] == "ablation"]
    per_launch = [entry for entry in rows if entry["suite"] == "per-launch"]
    rows = [entry for entry in rows if entry["suite"] == "alltoall"]
    sizes = sorted({entry["bytes_per_peer"] for entry in rows if entry["system"] != "flag-round-trip"})
    labels = sorted({label(entry) for entry in rows if entry["system"] != "flag-round-trip"})
    table = {(label(entry), entry["bytes_per_peer"]): entry for entry in rows}
    lines = [f"# Benchmarks, {header['machine']}, {header['date']}", ""]
    command = f"Command: `{header['command']}`; commit {header['git_commit']}."
    if not rows:  # a run of other suites only (BENCH_SUITES)
        lines.append(command)
    else:
        lines += ["## All-to-all", "", command, "",
                  "Microseconds per round (the slowest rank), rounds inside one launch; every cell checked bit-exact "
                  "unless marked `WRONG`.", "",
                  "| system | " + " | ".join(size_text(size) for size in sizes) + " |",
                  "| --- | " + " | ".join("---:" for _ in sizes) + " |"]
    for name in labels:
        cells = []
        for size in sizes:
            entry = table.get((name, size))
            if entry is None or entry.get("round_us") is None:
                cells.append("")
            else:
                cells.append(f"{entry['round_us']:.2f}" + ("" if entry["checked"] else " WRONG"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for entry in rows:
        if entry["system"] == "flag-round-trip":
            lines += ["", f"GPU<->CPU flag round trip (the proxy's floor): {entry['round_us']:.2f} us."]
    not_run = header.get("not_run") or {}
    if per_launch:
        lines += per_launch_markdown(per_launch) + per_launch_targets(per_launch, not_run)
    if ablation:
        lines += ablation_markdown(ablation)
    if not_run:
        lines += ["", "## Not run", ""] + [f"- {name}: {reason}" for name, reason in sorted(not_run.items())]
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict[str, Any]], path: str, title: str) -> bool:
    """The all-to-all rows (us per round against bytes per peer), and a second panel with the
    per-launch rows (us per launch) when there are any. False without matplotlib."""
    per_launch = [entry for entry in rows if entry["suite"] == "per-launch"]
    rows = [entry for entry in rows if entry["suite"] == "alltoall"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if per_launch and not rows:
        figure, launch_axes = plt.subplots(figsize=(10, 6))
        plot_per_launch(launch_axes, per_launch, plt.get_cmap("tab10"))
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return True
    if per_launch:
        figure, (axes, launch_axes) = plt.subplots(1, 2, figsize=(17, 6), gridspec_kw={"width_ratios": [10, 7]})
        plot_per_launch(launch_axes, per_launch, plt.get_cmap("tab10"))
    else:
        figure, axes = plt.subplots(figsize=(10, 6))
    names = sorted({label(entry) for entry in rows if entry["system"] != "flag-round-trip"})
    colors = plt.get_cmap("tab20")
    for index, name in enumerate(names):
        points = sorted((entry["bytes_per_peer"], entry["round_us"]) for entry in rows
                        if label(entry) == name and entry.get("round_us") is not None)
        # Aboleth solid, baselines dashed: twenty colors, so no two lines look alike.
        style = "-" if name.startswith("aboleth") else "--"
        axes.plot([size for size, _ in points], [value for _, value in points], style, marker="o", markersize=3,
                  color=colors(index % 20), label=name)
    for entry in rows:
        if entry["system"] == "flag-round-trip":
            axes.axhline(entry["round_us"], color="black", linestyle=":", label="GPU<->CPU flag round trip")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("bytes per peer")
    axes.set_ylabel("us per round (slowest rank)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_per_launch(axes: Any, rows: List[Dict[str, Any]], colors: Any) -> None:
    """The per-launch panel: us per launch against bytes per peer, a line per system, transport
    and variant (Aboleth solid, plain Triton dashed, NCCL dotted; graph rows with square markers)."""
    names = sorted({label(entry) for entry in rows})
    for index, name in enumerate(names):
        points = sorted((entry["bytes_per_peer"], entry["launch_us"]) for entry in rows
                        if label(entry) == name and entry.get("launch_us") is not None)
        if not points:
            continue
        style = {"aboleth": "-", "plain-triton": "--", "nccl": ":"}.get(name.split(" ")[0], "-.")
        axes.plot([size for size, _ in points], [value for _, value in points], style,
                  marker="s" if name.endswith(" graph") else "o", markersize=4, color=colors(index % 10), label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("bytes per peer")
    axes.set_ylabel("us per launch (slowest rank)")
    axes.set_title("per launch from Python (one round per launch)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--replot":
        # Redraws the table and plot of a merged report (results/*.json) in place.
        with open(sys.argv[2]) as file:
            report = json.load(file)
        stem = sys.argv[2][:-len(".json")]
        with open(f"{stem}.md", "w") as file:
            file.write(markdown(report["rows"], report))
        plot(report["rows"], f"{stem}.png", f"all-to-all, {report['machine']}")
        return 0
    out_dir = sys.argv[1]
    rows, notes = merge(out_dir)
    rows.sort(key=lambda entry: (entry["suite"], entry["system"], entry["transport"], entry.get("chains") or 0,
                                 entry["variant"], entry.get("num_warps") or 0, entry.get("threads") or 0,
                                 entry["bytes_per_peer"]))
    machine = os.environ.get("MACHINE", "unknown")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    header = {"command": os.environ.get("COMMAND", ""), "date": date, "machine": machine,
              "git_commit": os.environ.get("GIT_COMMIT", "unknown")}
    stem = f"{date}-bench-{machine}"
    report = {**header, "rows": rows, **notes}
    header = {**header, "not_run": notes["not_run"]}
    results = os.path.join(HERE, "results")
    os.makedirs(results, exist_ok=True)
    outputs = [os.path.join(out_dir, f"{stem}.json"), os.path.join(out_dir, f"{stem}.md")]
    with open(outputs[0], "w") as file:
        json.dump(report, file, indent=1)
    with open(outputs[1], "w") as file:
        file.write(markdown(rows, header))
    if plot(rows, os.path.join(out_dir, f"{stem}.png"), f"all-to-all, {machine}"):
        outputs.append(os.path.join(out_dir, f"{stem}.png"))
    for output in outputs:
        shutil.copy(output, results)
    print(open(outputs[1]).read())
    print(f"{len(rows)} rows; {len(notes['failures'])} failures; not run: {notes['not_run'] or 'none'}")
    return 0 if not notes["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
