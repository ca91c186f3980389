"""How long ``tts-knee export`` takes against ``tts-knee report`` on the same run.

Run it from the repository root::

    .venv/bin/python bench/export_scale.py                 # 300,000 attempts, 3 rounds
    .venv/bin/python bench/export_scale.py --rounds 5 100000
    .venv/bin/python bench/export_scale.py --json          # the figures as one JSON object

It writes the synthetic run of bench/dashboard_scale.py (8 steps, 1..128 users, some 429s and
retries), then, ``--rounds`` times in turn, runs each command as a fresh process, as a user
would: ``tts-knee report RUN`` (summary.json and report.html), ``tts-knee export RUN --format
parquet`` and ``--format csv``. Figures are medians: wall-clock seconds, and the process's CPU
seconds (all its threads). ``parquet_ratio`` / ``csv_ratio`` pair each export with the report
run just before it (wall clock; under 1: the export is the quicker). Prints::

    attempts jsonl_MiB report_s parquet_s csv_s report_cpu_s parquet_cpu_s csv_cpu_s parquet_ratio csv_ratio
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dashboard_scale import write_run

COMMANDS = {
    "report": ("report", "{run}"),
    "parquet": ("export", "{run}", "--format", "parquet", "--out", "{run}/attempts.parquet"),
    "csv": ("export", "{run}", "--format", "csv", "--out", "{run}/attempts.csv"),
}


def _timed(args: tuple[str, ...], run: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds of ``tts-knee ARGS`` as a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tts_knee", *(a.format(run=run) for a in args)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(attempts: int, rounds: int) -> dict[str, float]:
    """Medians over ``rounds`` of the three commands, run in turn on one synthetic run."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / f"bench-{attempts}"
        write_run(run, attempts)
        size = (run / "requests.jsonl").stat().st_size
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
        for _ in range(rounds):
            for name, args in COMMANDS.items():
                times[name].append(_timed(args, run))
    out = {"attempts": attempts, "jsonl_MiB": size / 2**20}
    for name, pairs in times.items():
        out[f"{name}_s"] = statistics.median(wall for wall, _ in pairs)
        out[f"{name}_cpu_s"] = statistics.median(cpu for _, cpu in pairs)
    for name in ("parquet", "csv"):
        out[f"{name}_ratio"] = statistics.median(e[0] / r[0] for e, r in zip(times[name], times["report"]))
    return out


COLUMNS = ("attempts", "jsonl_MiB", "report_s", "parquet_s", "csv_s", "report_cpu_s", "parquet_cpu_s", "csv_cpu_s")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attempts", nargs="?", type=int, default=300_000, help="attempts in the run (default 300000)")
    parser.add_argument("--rounds", type=int, default=3, help="times each command is run (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    m = measure(args.attempts, args.rounds)
    if args.json:
        print(json.dumps(m))
        return
    names = (*COLUMNS, "parquet_ratio", "csv_ratio")
    print(" ".join(f"{n:>{max(len(n), 8)}}" for n in names))
    print(" ".join(f"{m[n]:>{max(len(n), 8)}}" if n == "attempts" else f"{m[n]:>{max(len(n), 8)}.2f}" for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])
