"""Merges the per-rank JSON of one benchmark run (every suite's) into the run's report: one JSON in the schema of
README.md (``command, date, machine, git_commit, rows``), a Markdown table and a PNG plot, written
to OUT_DIR and copied to experiments/bench/results/.

    python3 experiments/bench/report.py OUT_DIR
    python3 experiments/bench/report.py --replot experiments/bench/results/REPORT.json

A row merges the ranks' rows of one configuration: ``round_us`` and ``launch_us`` are the slowest
rank's (a round is over when every rank's is), ``checked`` is true only when every rank checked
every launch. The environment gives COMMAND, MACHINE and GIT_COMMIT (run.sh sets them)."""

from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
KEY_FIELDS = ("suite", "system", "transport", "variant", "ranks", "bytes_per_peer", "num_warps", "threads", "chains")


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
            for field in ("round_us", "launch_us", "posting_cycles", "posting_us"):
                if entry.get(field) is not None:
                    current[field] = max(current.get(field) or 0.0, entry[field])
            current["checked"] = current["checked"] and entry["checked"]
    return list(merged.values()), notes


def label(entry: Dict[str, Any]) -> str:
    if entry["system"] == "aboleth":
        return f"aboleth {entry['transport']} {entry['variant']} w{entry['num_warps']}"
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
        lines += ["", f"## Pass ablation over {transport}", "",
                  "GPU posting time (us at the run's SM clock, cycles where no clock was read) of the posting "
                  "loop, and the stage's reservations / doorbells / system fences for that binary.", "",
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
                counts = entry.get("counts") or {}
                fences = (counts.get("fences") or {}).get("sys", "?")
                cells.append(f"{time_text} ({counts.get('reservations', '?')}/{counts.get('doorbells', '?')}/{fences})"
                             + ("" if entry["checked"] else " WRONG"))
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def markdown(rows: List[Dict[str, Any]], header: Dict[str, Any]) -> str:
    ablation = [entry for entry in rows if entry["suite"] == "ablation"]
    rows = [entry for entry in rows if entry["suite"] == "alltoall"]
    sizes = sorted({entry["bytes_per_peer"] for entry in rows if entry["system"] != "flag-round-trip"})
    labels = sorted({label(entry) for entry in rows if entry["system"] != "flag-round-trip"})
    table = {(label(entry), entry["bytes_per_peer"]): entry for entry in rows}
    lines = [f"# Benchmarks, {header['machine']}, {header['date']}", "", "## All-to-all", "",
             f"Command: `{header['command']}`; commit {header['git_commit']}.", "",
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
    if ablation:
        lines += ablation_markdown(ablation)
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict[str, Any]], path: str, title: str) -> bool:
    rows = [entry for entry in rows if entry["suite"] == "alltoall"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
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
    return True


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
