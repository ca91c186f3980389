"""What tts-knee's user costs the load generator: CPU per attempt, against the locustfile a user
would write without tts-knee.

Run from the repository root (a few minutes)::

    .venv/bin/python bench/generator_cost.py                  # 9 pairs each way, 10 users, 4 s measured
    .venv/bin/python bench/generator_cost.py --mode alone --pairs 15
    .venv/bin/python bench/generator_cost.py --json           # one JSON object instead of the tables

Both users POST the same OpenAI-shaped body for the same corpus, in the same order, to one
simulator that answers at once (``--base-ms 0 --per-char-ms 0``, 1000 slots; ``--target-ms``
sets its latency instead): (A) tts-knee's ``TTSUser`` (timestamps, audio check, audio written
with the default ``--audio-keep``, one record per attempt to requests.jsonl, the host sampler)
and (B) ``bench/bare_locustfile.py``, a ``FastHttpUser`` with Locust's defaults whose task is
``self.client.post(..., json=...)``, reading the whole WAV body. bench/meter.py reads each
process's CPU time (user + system, all its threads) and Locust's request count over one window.
Two ways, each the median of its pairs' ratios with their spread:

- **alone** (``--mode alone``): the two one after the other, each alone with the target, the
  order turned every pair: what a user who runs tts-knee gets. Pairs taken tens of seconds apart
  on a shared host move with the host; many short pairs and their median, on a quiet host.
- **side by side** (``--mode side``): both at the same time against the same simulator, over the
  same window: the host's other load falls on both alike, but on two cores they contend, and the
  contention flatters whichever process batches its wake-ups better.

::

    pair      order  tts_CPU_us  bare_CPU_us  tts/bare
       1   tts-bare       531.6        598.0      0.89
    ...
    CPU per attempt, tts / bare, each alone in turn (median of 9 pairs): 0.89x, pairs 0.85-0.94   (goal <= 1.0x)

The simulator shares the host's CPUs, so attempts/s is a floor for what a worker can drive;
CPU per attempt is the figure that does not depend on the target.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from harness import LocustRun, locust, median, simulator

GOAL_RATIO = 1.0
#: Seconds from launching a pair until both processes measure: both have started their users.
START_S = 5.0
#: Alone: seconds from the test's start until the window (users started, connections open).
ALONE_WARM_S = 3.0


def _knobs(target_ms: float) -> tuple[str, ...]:
    return "--slots", "1000", "--base-ms", f"{target_ms:g}", "--per-char-ms", "0", "--jitter", "0"


#: What each kind runs for ``run_s`` seconds: its locustfile and Locust's arguments.
_RUN = {
    "tts": lambda host, users, run_s: (
        "bench/tts_locustfile.py",
        ["-H", host, "--steps", str(users), "--step-time", f"{run_s:g}", "--run-dir", "{tmp}/run"],
    ),
    "bare": lambda host, users, run_s: (
        "bench/bare_locustfile.py",
        ["-H", host, "-u", str(users), "-r", "1000", "-t", f"{run_s:g}s"],
    ),
}


def one_pair(host: str, users: int, measure_s: float) -> dict:
    """Both users at once over one window: ``{"tts": reading, "bare": reading}``."""
    start_at = time.time() + START_S
    run_s = START_S + measure_s + 2.0
    with ThreadPoolExecutor(2) as pool:
        runs = {
            kind: pool.submit(locust, *_RUN[kind](host, users, run_s), 0.0, measure_s, start_at=start_at)
            for kind in ("tts", "bare")
        }
        out = {kind: r.result() for kind, r in runs.items()}
    for kind, r in out.items():
        if not r.get("requests"):
            raise RuntimeError(f"the {kind} run measured nothing (exit {r['returncode']}):\n{r['output'][-2000:]}")
        r.pop("records", None)
        r["cpu_us_per_attempt"] = r["cpu_s"] / r["requests"] * 1e6
        r["rps"] = r["requests"] / r["wall_s"]
    return out


def one_alone(host: str, kind: str, users: int, measure_s: float) -> LocustRun:
    """One user kind alone with the target over one window (after ALONE_WARM_S)."""
    locustfile, args = _RUN[kind](host, users, ALONE_WARM_S + measure_s + 2.0)
    r = locust(locustfile, args, ALONE_WARM_S, measure_s)
    if not r.get("requests"):
        raise RuntimeError(f"the {kind} run measured nothing (exit {r['returncode']}):\n{r['output'][-2000:]}")
    r.pop("records", None)
    r["cpu_us_per_attempt"] = r["cpu_s"] / r["requests"] * 1e6
    r["rps"] = r["requests"] / r["wall_s"]
    return r


def measure_alone(pairs: int = 9, users: int = 10, measure_s: float = 4.0, target_ms: float = 0.0, show=print) -> dict:
    """The two run one after the other, each alone with the target, the order turned every
    pair (tts first, then bare first …): a user runs tts-knee alone, and side by side the
    contention flatters whichever process batches its wake-ups better. The figure is the median
    of the pairs' ratios, with their spread."""
    rows = []
    with simulator(*_knobs(target_ms)) as (host, _sim):
        show(f"{'pair':>4}  {'order':>9} {'tts_CPU_us':>11} {'bare_CPU_us':>12}  {'tts/bare':>8}")
        for n in range(1, pairs + 1):
            order = ("tts", "bare") if n % 2 else ("bare", "tts")
            r = {kind: one_alone(host, kind, users, measure_s) for kind in order}
            ratio = r["tts"]["cpu_us_per_attempt"] / r["bare"]["cpu_us_per_attempt"]
            rows.append(
                {"pair": n, "ratio": ratio, **{f"{k}_cpu_us_per_attempt": r[k]["cpu_us_per_attempt"] for k in r}}
            )
            show(
                f"{n:>4}  {'-'.join(order):>9} {r['tts']['cpu_us_per_attempt']:>11.1f} "
                f"{r['bare']['cpu_us_per_attempt']:>12.1f}  {ratio:>8.2f}"
            )
    ratios = [row["ratio"] for row in rows]
    return {
        "ratio": median(ratios),
        "ratios": ratios,
        "goal_ratio": GOAL_RATIO,
        "tts_cpu_us_per_attempt": median([row["tts_cpu_us_per_attempt"] for row in rows]),
        "bare_cpu_us_per_attempt": median([row["bare_cpu_us_per_attempt"] for row in rows]),
        "users": users,
        "target_ms": target_ms,
        "pairs": rows,
    }


def measure(pairs: int = 5, users: int = 10, measure_s: float = 4.0, target_ms: float = 0.0, show=print) -> dict:
    rows = []
    with simulator(*_knobs(target_ms)) as (host, _sim):
        show(
            f"{'pair':>4}  {'tts_attempts':>12} {'tts_CPU_us':>11}  {'bare_attempts':>13} {'bare_CPU_us':>12}"
            f"  {'tts/bare':>8}"
        )
        for n in range(1, pairs + 1):
            r = one_pair(host, users, measure_s)
            ratio = r["tts"]["cpu_us_per_attempt"] / r["bare"]["cpu_us_per_attempt"]
            rows.append(
                {
                    "pair": n,
                    "ratio": ratio,
                    **{
                        f"{k}_{f}": r[k][f]
                        for k in ("tts", "bare")
                        for f in ("requests", "cpu_s", "sys_s", "cpu_us_per_attempt", "rps")
                    },
                }
            )
            show(
                f"{n:>4}  {r['tts']['requests']:>12} {r['tts']['cpu_us_per_attempt']:>11.1f}  "
                f"{r['bare']['requests']:>13} {r['bare']['cpu_us_per_attempt']:>12.1f}  {ratio:>8.2f}"
            )
    by = lambda key: [row[key] for row in rows]  # noqa: E731
    return {
        "ratio": median(by("ratio")),
        "ratios": by("ratio"),
        "goal_ratio": GOAL_RATIO,
        "tts_cpu_us_per_attempt": median(by("tts_cpu_us_per_attempt")),
        "bare_cpu_us_per_attempt": median(by("bare_cpu_us_per_attempt")),
        "tts_rps": median(by("tts_rps")),
        "bare_rps": median(by("bare_rps")),
        "users": users,
        "target_ms": target_ms,
        "pairs": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="pairs of runs each way (default 9)")
    parser.add_argument("--users", type=int, default=10, help="users per run (default 10)")
    parser.add_argument("--measure-s", type=float, default=4.0, help="measured seconds per run (default 4)")
    parser.add_argument(
        "--target-ms",
        type=float,
        default=0.0,
        help="the simulator's latency per request, ms (default 0: answers at once)",
    )
    parser.add_argument(
        "--mode",
        choices=("alone", "side", "both"),
        default="both",
        help="alone: the two in turn, each alone with the target; side: at the same time (default both)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    show = (lambda *_: None) if args.json else print
    out = {}
    if args.mode in ("alone", "both"):
        out["alone"] = m = measure_alone(args.pairs, args.users, args.measure_s, args.target_ms, show=show)
        show(
            f"CPU per attempt, tts / bare, each alone in turn (median of {args.pairs} pairs): {m['ratio']:.2f}x, "
            f"pairs {min(m['ratios']):.2f}-{max(m['ratios']):.2f}   (goal <= {GOAL_RATIO}x)"
        )
    if args.mode in ("side", "both"):
        out["side"] = m = measure(args.pairs, args.users, args.measure_s, args.target_ms, show=show)
        show(
            f"CPU per attempt, tts / bare, side by side (median of {args.pairs} pairs): {m['ratio']:.2f}x, pairs "
            f"{min(m['ratios']):.2f}-{max(m['ratios']):.2f}   (goal <= {GOAL_RATIO}x)"
        )
        target = "the fast target" if not args.target_ms else f"a {args.target_ms:g} ms target"
        show(f"side by side against {target}: {m['tts_rps']:.0f} attempts/s (tts), {m['bare_rps']:.0f} (bare)")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
