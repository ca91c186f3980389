"""The master's cost while it receives workers' records in a distributed run.

    .venv/bin/python bench/distributed_master.py [--workers 2] [--users 256] [--seconds 20]

Starts a fast simulator, a headless Locust master and N worker processes on loopback, runs
one step at the given concurrency, and prints attempts per second, the records the master
wrote, and the master's CPU (percent of one core) over the step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tts_knee.runformat.schema import Attempt

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).with_name("locust"))
LOCUSTFILE = str(ROOT / "locustfiles" / "tts.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--users", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tts_knee.testbed.sim",
                "--port",
                "0",
                "--slots",
                "100000",
                "--base-ms",
                "20",
                "--per-char-ms",
                "0",
                "--jitter",
                "0",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert sim.stdout is not None  # stdout=PIPE
        url = sim.stdout.readline().split()[-1]
        port = free_port()
        master = subprocess.Popen(
            [
                LOCUST,
                "-f",
                LOCUSTFILE,
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                str(args.workers),
                "--headless",
                "-H",
                url,
                "--steps",
                str(args.users),
                "--step-time",
                str(args.seconds),
                "--settle-time",
                "2",
                "--run-dir",
                str(tmp / "run"),
            ],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=env,
        )
        workers = [
            subprocess.Popen(
                [LOCUST, "-f", LOCUSTFILE, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=env,
            )
            for _ in range(args.workers)
        ]
        mp = psutil.Process(master.pid)
        info_path = tmp / "run" / "run.json"
        started_by = time.monotonic() + 60
        while not (info_path.exists() and json.loads(info_path.read_text())["steps"]):
            if time.monotonic() > started_by or master.poll() is not None:
                raise SystemExit("distributed_master: the master planned no step within 60 s (or exited)")
            time.sleep(0.1)
        time.sleep(2)  # past spawning
        c0, w0 = sum(mp.cpu_times()[:2]), time.monotonic()
        time.sleep(args.seconds - 4)
        c1, w1 = sum(mp.cpu_times()[:2]), time.monotonic()
        master.wait(120)
        for w in workers:
            w.wait(60)
        sim.terminate()
        records: list[Attempt] = [
            json.loads(line) for line in (tmp / "run" / "requests.jsonl").read_text().splitlines()
        ]
        settled = [r for r in records if r["settled"]]
        # an attempt that failed to connect or was cut at the run's end has no t2
        span = max(t2 for r in settled if (t2 := r["t2"]) is not None) - min(r["t0"] for r in settled)
        print(
            f"workers {args.workers}, users {args.users}: {len(records)} attempt records, "
            f"{len(settled) / span:.0f} attempts/s settled, all ok: {all(r['ok'] for r in records)}"
        )
        print(f"master CPU while receiving: {100 * (c1 - c0) / (w1 - w0):.1f}% of one core")


if __name__ == "__main__":
    main()
