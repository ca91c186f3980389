"""tts-knee's own memory over a long run, and whether it records every attempt.

    .venv/bin/python bench/own_memory.py                           # an hour (about 62 minutes)
    .venv/bin/python bench/own_memory.py --duration 5m --report 1m --warm-up 1m   # make test's

A Locust master, one worker and a collector sampling at 1 Hz (watching the simulator), all
tts-knee as a user runs it: ``--master --expect-workers 1 --steps 64 --soak DURATION``, 64
users against a simulator with 64 slots of 400 ms (160 requests a second). Every ``SAMPLE_S``
the benchmark reads each process's resident set (psutil); per report interval (5 minutes) it
prints their medians and the attempts recorded. Then:

- growth after the warm-up, per process: the last interval's median against the first
  interval's after the warm-up (10 minutes), in percent (goal: under 2 % over the last 50
  minutes of an hour);
- records: the lines of requests.jsonl against Locust's own request count (--json-file);
  they must be equal;
- the soak's own drift verdicts (the dashboard's, on the same run): the simulator is clean,
  so there should be none for the server, and none for the load generator.

The last line with ``--json`` is all of it as one JSON object::

    {"duration_s", "report_s", "warm_up_s", "intervals": [{"minute", "master_MiB", "worker_MiB",
     "collector_MiB", "attempts"}], "growth_pct": {"master", "worker", "collector"}, "records",
     "locust_requests", "drift": [...]}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from locust.util.timespan import parse_timespan

ROOT = Path(__file__).resolve().parent.parent

LOCUST = str(Path(sys.executable).with_name("locust"))
LOCUSTFILE = str(ROOT / "locustfiles" / "tts.py")
#: How often each process's RSS is read.
SAMPLE_S = 5.0
USERS = 64
SIM = ["--slots", "64", "--base-ms", "400", "--per-char-ms", "0", "--jitter", "0.05"]
_LISTENING = re.compile(r"listening on (http://\S+)")
PROCESSES = ("master", "worker", "collector")
MIB = 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """``python -m ARGS``, once it prints its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115 - the child's, for its life
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None  # stdout=PIPE
    m = _LISTENING.search(proc.stdout.readline())
    if not m:
        proc.kill()
        raise RuntimeError(f"{' '.join(args)} did not start: {log.read_text()[-500:]}")
    return proc, m.group(1)


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def _locust(args: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [LOCUST, "-f", LOCUSTFILE, *args],
        cwd=cwd,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def run(duration_s: float, report_s: float, warm_up_s: float, tmp: Path) -> dict:
    sim, url = _serve(["tts_knee.testbed.sim", "--port", "0", *SIM], tmp / "sim.log")
    collector, col_url = _serve(
        ["tts_knee.collectors", "--port", "0", "--interval", "1", "--pid", str(sim.pid)], tmp / "collector.log"
    )
    port = _free_port()
    run_dir = tmp / "run"
    master = _locust(
        [
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            "1",
            "--headless",
            "-H",
            url,
            "--steps",
            str(USERS),
            "--soak",
            f"{int(duration_s)}s",
            "--collector",
            col_url,
            "--run-dir",
            str(run_dir),
            "--json-file",
            str(tmp / "locust"),
        ],
        tmp / "master.log",
        tmp,
    )
    worker = _locust(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], tmp / "worker.log", tmp)
    procs = {
        "master": psutil.Process(master.pid),
        "worker": psutil.Process(worker.pid),
        "collector": psutil.Process(collector.pid),
    }
    samples: list[tuple[float, dict]] = []
    started = time.monotonic()
    try:
        while master.poll() is None and time.monotonic() - started < duration_s + 600:
            try:
                samples.append((time.monotonic() - started, {k: p.memory_info().rss for k, p in procs.items()}))
            except psutil.Error:
                break
            time.sleep(SAMPLE_S)
        master.wait(60)
        worker.wait(60)
    finally:
        _stop(master, worker, collector, sim)
    if master.returncode != 0:
        raise RuntimeError(f"the master exited {master.returncode}: {(tmp / 'master.log').read_text()[-2000:]}")
    intervals = []
    for k in range(int(duration_s // report_s)):
        lo, hi = k * report_s, (k + 1) * report_s
        inside = [rss for t, rss in samples if lo <= t < hi]
        if inside:
            intervals.append(
                {
                    "minute": hi / 60,
                    **{f"{name}_MiB": statistics.median(r[name] for r in inside) / MIB for name in PROCESSES},
                }
            )
    after = [iv for iv in intervals if iv["minute"] * 60 - report_s >= warm_up_s]
    growth = {
        name: 100.0 * (after[-1][f"{name}_MiB"] / after[0][f"{name}_MiB"] - 1.0) if len(after) > 1 else None
        for name in PROCESSES
    }
    records = _lines(run_dir / "requests.jsonl")
    locust_requests = sum(e["num_requests"] for e in json.loads((tmp / "locust.json").read_text()))
    from tts_knee.analysis.summary import analyze, load

    summary = analyze(load(run_dir))
    soak = summary.get("soak")
    start = soak["start"] if soak else None
    by_minute = _attempts_by_minute(run_dir, start or 0.0, [iv["minute"] for iv in intervals])
    for iv, n in zip(intervals, by_minute):
        iv["attempts"] = n
    return {
        "duration_s": duration_s,
        "report_s": report_s,
        "warm_up_s": warm_up_s,
        "intervals": intervals,
        "growth_pct": growth,
        "records": records,
        "locust_requests": locust_requests,
        "drift": soak["drift"] if soak else [],
        "soak_trends": soak["trends"] if soak else [],
    }


def _attempts_by_minute(run_dir: Path, start: float, minutes: list[float]) -> list[int]:
    """Attempts sent up to each interval's end (the soak's clock)."""
    import numpy as np

    from tts_knee.runformat.reader import RunDir

    rd = RunDir(run_dir)
    rd.refresh()
    t0 = np.sort(rd.requests.attempts()["t0"])
    return [int(np.searchsorted(t0, start + m * 60)) for m in minutes]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="1h", help="how long the soak holds 64 users (default 1h)")
    ap.add_argument("--report", default="5m", help="the report interval (default 5m)")
    ap.add_argument("--warm-up", default="10m", help="left out of the growth (default 10m)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args(argv)
    duration, report, warm = (float(parse_timespan(v)) for v in (args.duration, args.report, args.warm_up))
    with tempfile.TemporaryDirectory(prefix="tts-knee-own-memory-") as tmp:
        m = run(duration, report, warm, Path(tmp))
    print(f"{'minute':>6} {'master_MiB':>10} {'worker_MiB':>10} {'collector_MiB':>13} {'attempts':>9}")
    for iv in m["intervals"]:
        print(
            f"{iv['minute']:>6.1f} {iv['master_MiB']:>10.1f} {iv['worker_MiB']:>10.1f} "
            f"{iv['collector_MiB']:>13.1f} {iv['attempts']:>9}"
        )
    span = (duration - warm) / 60
    print(
        f"growth over the last {span:g} min (after {warm / 60:g} min of warm-up): "
        + ", ".join(f"{k} {'-' if v is None else f'{v:+.2f}%'}" for k, v in m["growth_pct"].items())
        + "  (goal < 2%)"
    )
    equal = m["records"] == m["locust_requests"]
    print(
        f"records: requests.jsonl {m['records']} lines, Locust {m['locust_requests']} requests: "
        f"{'equal' if equal else 'NOT EQUAL'}"
    )
    print("soak drift: " + ("; ".join(m["drift"]) if m["drift"] else "none"))
    if args.json:
        print(json.dumps(m))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
