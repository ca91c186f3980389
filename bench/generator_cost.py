"""What tts-knee's user costs the load generator: CPU per attempt, against a bare Locust user.

Run from the repository root (about 50 s)::

    .venv/bin/python bench/generator_cost.py             # 3 A/B pairs, 8 users, 4 s measured each
    .venv/bin/python bench/generator_cost.py --pairs 5 --users 16
    .venv/bin/python bench/generator_cost.py --json      # one JSON object instead of the table

Both users POST the same OpenAI-shaped body for the same corpus, in the same order, to one
simulator that answers at once (``--base-ms 0 --per-char-ms 0``, 1000 slots): (A) tts-knee's
``TTSUser`` (timestamps, audio check, audio written with the default ``--audio-keep``, one
record per attempt to requests.jsonl, the host sampler) and (B) ``bench/bare_locustfile.py``,
a ``FastHttpUser`` that only reads the body. Each run is a fresh headless ``locust`` process;
after a warm-up, bench/meter.py reads the process's own CPU time (user + system) and Locust's
request count over a fixed window. Runs alternate A, B, A, B … and the figures are medians::

    run  user  attempts  CPU_s  CPU_us/attempt  attempts/s
      1  tts       9844  3.542           359.8        2461
      1  bare     11012  3.600           326.9        2753
    ...
    CPU per attempt, tts / bare (median of 3 pairs): 1.06x   (goal <= 1.0x)
    one worker process against the fast target: 2452 attempts/s (tts), 2753 (bare)

The simulator shares the host's CPUs, so attempts/s is a floor for what a worker can drive;
CPU per attempt is the figure that does not depend on the target.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import locust, median, simulator  # noqa: E402

GOAL_RATIO = 1.0
FAST_TARGET = ("--slots", "1000", "--base-ms", "0", "--per-char-ms", "0", "--jitter", "0")


def one_run(kind: str, host: str, users: int, warm_s: float, measure_s: float) -> dict:
    run_s = warm_s + measure_s + 1.5
    if kind == "tts":
        args = ["-H", host, "--steps", str(users), "--step-time", str(run_s), "--run-dir", "{tmp}/run"]
        r = locust("bench/tts_locustfile.py", args, warm_s, measure_s)
    else:
        args = ["-H", host, "-u", str(users), "-r", "1000", "-t", f"{run_s:g}s"]
        r = locust("bench/bare_locustfile.py", args, warm_s, measure_s)
    if not r.get("requests"):
        raise RuntimeError(f"the {kind} run measured nothing (exit {r['returncode']}):\n{r['output'][-2000:]}")
    r.pop("records", None)
    return {"user": kind, "cpu_s": r["cpu_s"], "sys_s": r["sys_s"], "attempts": r["requests"],
            "cpu_us_per_attempt": r["cpu_s"] / r["requests"] * 1e6, "rps": r["requests"] / r["wall_s"]}


def measure(pairs: int = 3, users: int = 8, warm_s: float = 1.5, measure_s: float = 4.0,
            show=print) -> dict:
    runs = []
    with simulator(*FAST_TARGET) as (host, _sim):
        show(f"{'run':>3}  {'user':<5} {'attempts':>8} {'CPU_s':>6} {'of_it_sys_s':>11} {'CPU_us/attempt':>15} "
             f"{'attempts/s':>11}")
        for n in range(1, pairs + 1):
            for kind in ("tts", "bare"):
                r = one_run(kind, host, users, warm_s, measure_s)
                runs.append({"pair": n, **r})
                show(f"{n:>3}  {kind:<5} {r['attempts']:>8} {r['cpu_s']:>6.3f} {r['sys_s']:>11.3f} "
                     f"{r['cpu_us_per_attempt']:>15.1f} {r['rps']:>11.0f}")
    by = lambda kind, key: [r[key] for r in runs if r["user"] == kind]  # noqa: E731
    ratios = [a / b for a, b in zip(by("tts", "cpu_us_per_attempt"), by("bare", "cpu_us_per_attempt"))]
    return {"ratio": median(ratios), "ratios": ratios, "goal_ratio": GOAL_RATIO,
            "tts_cpu_us_per_attempt": median(by("tts", "cpu_us_per_attempt")),
            "bare_cpu_us_per_attempt": median(by("bare", "cpu_us_per_attempt")),
            "tts_rps": median(by("tts", "rps")), "bare_rps": median(by("bare", "rps")),
            "users": users, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs of runs (default 3)")
    parser.add_argument("--users", type=int, default=8, help="users per run (default 8)")
    parser.add_argument("--measure-s", type=float, default=4.0, help="measured seconds per run (default 4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    m = measure(args.pairs, args.users, measure_s=args.measure_s,
                show=(lambda *_: None) if args.json else print)
    if args.json:
        print(json.dumps(m))
        return
    print(f"CPU per attempt, tts / bare (median of {args.pairs} pairs): {m['ratio']:.2f}x   "
          f"(goal <= {GOAL_RATIO}x)")
    print(f"one worker process against the fast target: {m['tts_rps']:.0f} attempts/s (tts), "
          f"{m['bare_rps']:.0f} (bare)")


if __name__ == "__main__":
    main()
