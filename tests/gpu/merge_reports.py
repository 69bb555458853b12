"""Merges the per-rank JSON reports of one GPU check into one report with the command, date and
machine, written to OUT_DIR and to tests/gpu/results/.

    python3 tests/gpu/merge_reports.py OUT_DIR PREFIX STEM DESCRIPTION

PREFIX names the rank files (OUT_DIR/PREFIX-rank*.json); the report is
<date>-STEM[-TRANSPORT]-<machine>.json (no transport suffix for p2p). The environment gives
TRANSPORT, STATUS (the launcher's exit status), STARTED, FINISHED, COMMAND, MACHINE_KIND, NPROC, and
GIT_COMMIT (else `git rev-parse`: on the GPU machine the copy's HEAD may be stale).
"""

import datetime
import glob
import json
import os
import platform
import subprocess
import sys


def run(*args: str) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as error:  # noqa: BLE001 - the report says what was unavailable
        return f"unavailable: {error}"


def main() -> int:
    out_dir, prefix, stem, description = sys.argv[1:5]
    ranks = []
    for path in sorted(glob.glob(os.path.join(out_dir, f"{prefix}-rank*.json"))):
        with open(path) as file:
            ranks.append(json.load(file))
    status = int(os.environ["STATUS"])
    nproc = int(os.environ["NPROC"])
    transport = os.environ["TRANSPORT"]
    date = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "test": description,
        "transport": transport,
        "command": os.environ["COMMAND"],
        "date": date.isoformat(timespec="seconds"),
        "git_commit": os.environ.get("GIT_COMMIT") or run("git", "rev-parse", "--short", "HEAD"),
        "machine": {
            "kind": os.environ["MACHINE_KIND"],
            "host": platform.node(),
            "gpus": run("nvidia-smi", "--query-gpu=index,name,pci.bus_id,driver_version,memory.total",
                        "--format=csv,noheader"),
            "topology": run("nvidia-smi", "topo", "-m"),
            "python": platform.python_version(),
        },
        "exit_status": status,
        "wall_seconds": round(float(os.environ["FINISHED"]) - float(os.environ["STARTED"]), 3),
        "ranks": ranks,
        "passed": status == 0 and len(ranks) == nproc and all(rank.get("passed") for rank in ranks),
    }
    suffix = "" if transport == "p2p" else f"-{transport}"
    name = f"{date:%Y-%m-%d}-{stem}{suffix}-{os.environ['MACHINE_KIND']}.json"
    text = json.dumps(report, indent=1)
    for directory in (out_dir, "tests/gpu/results"):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), "w") as file:
            file.write(text + "\n")
    print(f"report: {os.path.join(out_dir, name)}: {'PASSED' if report['passed'] else 'FAILED'} "
          f"(exit status {status}, {len(ranks)} rank report(s), {report['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
