"""How much time tts-knee's client adds to what it measures: ``wait_ms`` minus the server's own
time (the ``total`` stage of its Server-Timing header), per attempt, at 1, 64 and 256 users.

Run from the repository root (about 45 s)::

    .venv/bin/python bench/client_overhead.py
    .venv/bin/python bench/client_overhead.py --steps 1,64,256,512 --step-time 6
    .venv/bin/python bench/client_overhead.py --json     # one JSON object instead of the table

One headless ``locust`` process (one worker: the local runner) steps through the users
against a simulator whose service time is fixed (``--base-ms 200 --per-char-ms 0 --jitter 0``,
1000 slots, so nothing queues). The gap is what the server's clock does not see: the client's
send, its event loop noticing the answer, reading the body, and the loopback network. It
prints p50, p95 and max of the gap per step, counting settled attempts only::

    users  attempts  gap_p50_ms  gap_p95_ms  gap_max_ms  failed  floor_p50_ms  floor_p95_ms
        1        24        1.00        1.78        2.10       0          0.95          1.40
       64      1222        4.71       13.66       30.12       0          0.82          2.82
      256      4643        2.88       19.00       62.40       0          3.19         15.71
    CPU over the sweep: locust 19% of a core, simulator 12%
    gap p95 at 256 users: 19.00 ms (floor 15.71 ms)   (goal < 5 ms)

The floor columns come from bench/client_floor.py run against the same simulator for as long:
the same gap measured by a bare geventhttpclient loop (no Locust, no records, no audio file).
What the simulator and the host add (its event loop, writing the response, CPUs shared with
whatever else runs) lands in both; the difference is tts-knee's client.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness import locust, percentile, simulator

GOAL_P95_MS = 5.0
GOAL_USERS = 256
FIXED_TARGET = ("--slots", "1000", "--base-ms", "200", "--per-char-ms", "0", "--jitter", "0")


def measure(steps: str = "1,64,256", step_time: float = 6.0, show=print) -> dict:
    levels = [int(s) for s in steps.split(",")]
    with simulator(*FIXED_TARGET) as (host, sim):
        args = [
            "-H",
            host,
            "--steps",
            steps,
            "--step-time",
            f"{step_time:g}",
            "--run-dir",
            "{tmp}/run",
            "--settle-time",
            f"{min(2.0, step_time / 3):g}",
        ]
        # The meter covers the whole sweep, for the CPU column: start it once the first step runs.
        sim_cpu0, started = _cpu_s(sim), time.perf_counter()
        r = locust(
            "bench/tts_locustfile.py",
            args,
            warm_s=0.5,
            measure_s=step_time * len(levels) - 0.5,
            timeout=60 + step_time * len(levels),
        )
        sim_cpu_percent = 100.0 * (_cpu_s(sim) - sim_cpu0) / (time.perf_counter() - started)
        floors = {users: _floor(host, users, step_time) for users in levels}
    records = r.get("records") or []
    if not records:
        raise RuntimeError(f"the run wrote no records (exit {r['returncode']}):\n{r['output'][-2000:]}")
    show(
        f"{'users':>5} {'attempts':>9} {'gap_p50_ms':>11} {'gap_p95_ms':>11} {'gap_max_ms':>11} {'failed':>7}"
        f"  {'floor_p50_ms':>12} {'floor_p95_ms':>12}"
    )
    rows = []
    for users in levels:
        mine = [x for x in records if x["concurrency"] == users and x["settled"]]
        gaps = [
            x["wait_ms"] - x["server_timing"]["total"]
            for x in mine
            if x["ok"] and x["wait_ms"] is not None and x["server_timing"] and "total" in x["server_timing"]
        ]
        row = {
            "users": users,
            "attempts": len(mine),
            "failed": sum(not x["ok"] for x in mine),
            "gap_p50_ms": percentile(gaps, 0.5),
            "gap_p95_ms": percentile(gaps, 0.95),
            "gap_max_ms": max(gaps, default=float("nan")),
            "floor": floors[users],
        }
        rows.append(row)
        show(
            f"{users:>5} {row['attempts']:>9} {row['gap_p50_ms']:>11.2f} {row['gap_p95_ms']:>11.2f} "
            f"{row['gap_max_ms']:>11.2f} {row['failed']:>7}  {floors[users]['gap_p50_ms']:>12.2f} "
            f"{floors[users]['gap_p95_ms']:>12.2f}"
        )
    cpu_percent = 100.0 * r["cpu_s"] / r["wall_s"] if r.get("wall_s") else None
    at_goal = next((row for row in rows if row["users"] == GOAL_USERS), None)
    return {
        "steps": rows,
        "goal_p95_ms": GOAL_P95_MS,
        "goal_users": GOAL_USERS,
        "p95_at_goal_ms": at_goal["gap_p95_ms"] if at_goal else None,
        "locust_cpu_percent": cpu_percent,
        "sim_cpu_percent": sim_cpu_percent,
    }


def _floor(host: str, users: int, seconds: float) -> dict:
    """bench/client_floor.py against the same simulator: the gap without tts-knee's client."""
    r = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("client_floor.py")),
            host,
            str(users),
            "--seconds",
            f"{seconds:g}",
        ],
        capture_output=True,
        text=True,
        timeout=60 + 2 * seconds,
    )
    if r.returncode != 0:
        raise RuntimeError(f"bench/client_floor.py failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def _cpu_s(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1,64,256", help="users per step (default 1,64,256)")
    parser.add_argument("--step-time", type=float, default=6.0, help="seconds per step (default 6)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    m = measure(args.steps, args.step_time, show=(lambda *_: None) if args.json else print)
    if args.json:
        print(json.dumps(m))
        return
    if m["locust_cpu_percent"] is not None:
        print(
            f"CPU over the sweep: locust {m['locust_cpu_percent']:.0f}% of a core, "
            f"simulator {m['sim_cpu_percent']:.0f}%"
        )
    if m["p95_at_goal_ms"] is not None:
        floor = next(r["floor"]["gap_p95_ms"] for r in m["steps"] if r["users"] == GOAL_USERS)
        print(
            f"gap p95 at {GOAL_USERS} users: {m['p95_at_goal_ms']:.2f} ms (floor {floor:.2f} ms)   "
            f"(goal < {GOAL_P95_MS:g} ms)"
        )


if __name__ == "__main__":
    main()
