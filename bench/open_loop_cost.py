"""The highest arrival rate one worker process sustains in open loop with send lag p95 under 5 ms.

Run from the repository root (about 40 s)::

    .venv/bin/python bench/open_loop_cost.py                      # rates 50,100,200,400,600,800,1200
    .venv/bin/python bench/open_loop_cost.py --rates 100,300,900 --step-time 5
    .venv/bin/python bench/open_loop_cost.py --json               # one JSON object instead of the table

One headless ``locust`` process (the real ``locustfiles/tts.py``: open-loop user, records,
audio written with the default ``--audio-keep``) offers Poisson arrivals at each rate in turn
against a simulator with many slots and a short fixed service time (``--slots 4000 --base-ms
20``: nothing queues there). Send lag is ``t0 - scheduled`` of every first attempt sent after
the step's settle window; a rate is sustained when its send lag p95 is under ``LAG_GOAL_MS``
and the process served at least 85% of it. On this project's 2-core test machine, shared with
other test runs (load average near 4), one run printed::

    offered/s  served/s  sent  dropped  lag p50 ms  lag p95 ms  lag max ms  sustained
           50      45.0   134        0        0.98        2.28        6.25  yes
          100     103.1   285        0        1.00        4.28       11.94  yes
          200     209.1   565        0        4.63       33.38       47.60  no
          400     294.5  1072        0      169.62      406.45      441.07  no
    ...
    highest rate sustained by one worker process: 100 req/s (send lag p95 < 5 ms)

On that host at that time the closed-loop user (8 users, a target that answers at once) drove
about 220 attempts/s, and the open-loop user at 300 req/s offered about 250 for the same CPU:
what limits the rate is the CPU each attempt costs (reading, checking and writing ~280 KB of
audio), not the scheduler; past it the send lag grows, which is what the figure is for.
The simulator shares the host's CPUs with the generator, so the figure is a floor.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from harness import simulator
from tts_knee.runformat.schema import Attempt, RunInfo

ROOT = Path(__file__).resolve().parent.parent

LAG_GOAL_MS = 5.0
SERVED_MIN = 0.85
TARGET = ("--slots", "4000", "--base-ms", "20", "--per-char-ms", "0", "--jitter", "0")


def measure(rates: list[float], step_time: float = 3.0, show=print) -> dict:
    with simulator(*TARGET) as (host, _sim), tempfile.TemporaryDirectory(prefix="tts-knee-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            str(Path(sys.executable).with_name("locust")),
            "-f",
            str(ROOT / "locustfiles" / "tts.py"),
            "--headless",
            "-H",
            host,
            "--rates",
            ",".join(f"{r:g}" for r in rates),
            "--step-time",
            f"{step_time:g}",
            "--arrival",
            "poisson",
            "--arrival-seed",
            "1",
            "--max-inflight",
            "10000",
            "--run-dir",
            str(run_dir),
            "--skip-preflight",
            "--loglevel",
            "WARNING",
        ]
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60 + 3 * step_time * len(rates),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"locust exited {proc.returncode}:\n{proc.stdout[-2000:]}")
        info: RunInfo = json.loads((run_dir / "run.json").read_text())
        records: list[Attempt] = [
            json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line
        ]
    rows, best = [], None
    for st in info["steps"]:
        end, rate = st["end"], st.get("rate")
        if end is None or rate is None:  # each step of an open-loop run that ended has both
            raise RuntimeError(f"step {st['step']} has no end or no rate: not an ended open-loop run")
        mine = [r for r in records if r["step"] == st["step"] and r["attempt"] == 1 and r["settled"]]
        lag = np.array([(r["t0"] - at) * 1000.0 for r in mine if (at := r.get("scheduled")) is not None])
        settled_from = st["start"] + info["settle_s"]
        served = sum(
            1
            for r in records
            if r["ok"] and r["final"] and (t2 := r.get("t2")) is not None and settled_from < t2 <= end
        ) / (end - settled_from)
        p50, p95, mx = (float(np.percentile(lag, q)) for q in (50, 95, 100)) if len(lag) else (None,) * 3
        ok = p95 is not None and p95 < LAG_GOAL_MS and served >= SERVED_MIN * rate
        if ok and (best is None or rate > best):
            best = rate
        rows.append(
            {
                "rate": rate,
                "served_rps": served,
                "sent": len(mine),
                "dropped": st.get("dropped", 0),
                "lag_p50_ms": p50,
                "lag_p95_ms": p95,
                "lag_max_ms": mx,
                "sustained": ok,
            }
        )
    show("offered/s  served/s  sent  dropped  lag p50 ms  lag p95 ms  lag max ms  sustained")
    for r in rows:
        show(
            f"{r['rate']:>9g}  {r['served_rps']:>8.1f}  {r['sent']:>4}  {r['dropped']:>7}  "
            f"{_f(r['lag_p50_ms']):>10}  {_f(r['lag_p95_ms']):>10}  {_f(r['lag_max_ms']):>10}  "
            f"{'yes' if r['sustained'] else 'no'}"
        )
    show(f"highest rate sustained by one worker process: {_f(best, '{:g}')} req/s (send lag p95 < {LAG_GOAL_MS:g} ms)")
    return {"steps": rows, "highest_sustained_rps": best, "lag_goal_ms": LAG_GOAL_MS}


def _f(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="50,100,200,400,600,800,1200", help="Offered rates to try, req/s.")
    p.add_argument("--step-time", type=float, default=3.0, help="Seconds per rate.")
    p.add_argument("--json", action="store_true", help="Print one JSON object instead of the table.")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    m = measure(rates, args.step_time, show=(lambda *_: None) if args.json else print)
    if args.json:
        print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
