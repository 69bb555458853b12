"""Merges the per-rank JSON of one benchmark run into the suite's report: one JSON in the schema of
README.md (``command, date, machine, git_commit, rows``), a Markdown table and a PNG plot, written
to OUT_DIR and copied to experiments/bench/results/.

    python3 experiments/bench/report.py OUT_DIR

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
KEY_FIELDS = ("suite", "system", "transport", "variant", "ranks", "bytes_per_peer", "num_warps", "threads")


def merge(out_dir: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    merged: Dict[Tuple, Dict[str, Any]] = {}
    notes: Dict[str, Any] = {"failures": [], "not_run": {}}
    for path in sorted(glob.glob(os.path.join(out_dir, "alltoall-*-rank*.json"))):
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
            for field in ("round_us", "launch_us"):
                if entry.get(field) is not None:
                    current[field] = max(current.get(field) or 0.0, entry[field])
            current["checked"] = current["checked"] and entry["checked"]
    return list(merged.values()), notes


def label(entry: Dict[str, Any]) -> str:
    if entry["system"] == "aboleth":
        return f"aboleth {entry['transport']} {entry['variant']} w{entry['num_warps']}"
    if entry.get("threads"):
        return f"{entry['system']} ({entry['threads']} thr)"
    return entry["system"]


def size_text(length_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if length_bytes >= scale and length_bytes % scale == 0:
            return f"{length_bytes // scale} {unit}"
    return f"{length_bytes} B"


def markdown(rows: List[Dict[str, Any]], header: Dict[str, Any]) -> str:
    sizes = sorted({entry["bytes_per_peer"] for entry in rows if entry["system"] != "flag-round-trip"})
    labels = sorted({label(entry) for entry in rows if entry["system"] != "flag-round-trip"})
    table = {(label(entry), entry["bytes_per_peer"]): entry for entry in rows}
    lines = [f"# All-to-all, {header['machine']}, {header['date']}", "",
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
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict[str, Any]], path: str, title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(10, 6))
    for name in sorted({label(entry) for entry in rows if entry["system"] != "flag-round-trip"}):
        points = sorted((entry["bytes_per_peer"], entry["round_us"]) for entry in rows
                        if label(entry) == name and entry.get("round_us") is not None)
        axes.plot([size for size, _ in points], [value for _, value in points], marker="o", label=name)
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
    out_dir = sys.argv[1]
    rows, notes = merge(out_dir)
    rows.sort(key=lambda entry: (entry["system"], entry["transport"], entry["variant"],
                                 entry.get("num_warps") or 0, entry.get("threads") or 0, entry["bytes_per_peer"]))
    machine = os.environ.get("MACHINE", "unknown")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    header = {"command": os.environ.get("COMMAND", ""), "date": date, "machine": machine,
              "git_commit": os.environ.get("GIT_COMMIT", "unknown")}
    stem = f"{date}-alltoall-{machine}"
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
