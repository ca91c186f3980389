"""What the live metrics (``--metrics-port``) cost the local runner: CPU per attempt with them on
and scraped each second, against the same run with them off; and how long a scrape takes once a
sweep has filled its histograms.

Run from the repository root (about a minute)::

    .venv/bin/python bench/metrics_cost.py                # 3 pairs, 10 users, 4 s measured each
    .venv/bin/python bench/metrics_cost.py --json         # one JSON object instead of the table

Each pair runs tts-knee's locustfile twice side by side, at the same time against one simulator
that answers at once (as bench/generator_cost.py does), one of them with ``--metrics-port`` and
a scraper here reading its /metrics each second; bench/meter.py reads each process's CPU time and
request count over the same window. The figure is the median of the pairs' ratios::

    pair  on_attempts  on_CPU_us  off_attempts  off_CPU_us  on/off
       1          822      768.7           794       781.5    0.98
       2          620      793.6           554       986.3    0.80
    ...
    CPU per attempt, metrics on / off (median of 5 pairs): 0.98x, pairs 0.80-1.10   (goal <= 1.05x)
    a scrape after a 10-step streamed sweep: 5.0 ms for 307 kB
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from harness import locust, median, simulator

GOAL_RATIO = 1.05
START_S = 5.0
SCRAPE_S = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str, stop: threading.Event, took: list[float], size: list[int]) -> None:
    """GET ``url`` every SCRAPE_S until ``stop``; each answered scrape's seconds and bytes."""
    while not stop.wait(SCRAPE_S):
        started = time.perf_counter()
        try:
            body = urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            continue
        took.append(time.perf_counter() - started)
        size.append(len(body))


def one_pair(host: str, users: int, measure_s: float) -> dict:
    start_at = time.time() + START_S
    run_s = START_S + measure_s + 2.0
    port = _free_port()
    base = ["-H", host, "--steps", str(users), "--step-time", f"{run_s:g}", "--run-dir", "{tmp}/run"]
    stop = threading.Event()
    took: list[float] = []  # each answered scrape's seconds
    size: list[int] = []  # and bytes
    scraper = threading.Thread(target=_scrape, args=(f"http://127.0.0.1:{port}/metrics", stop, took, size))
    scraper.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            runs = {
                kind: pool.submit(locust, "bench/tts_locustfile.py", args, 0.0, measure_s, start_at=start_at)
                for kind, args in (("on", [*base, "--metrics-port", str(port)]), ("off", base))
            }
            out = {kind: r.result() for kind, r in runs.items()}
    finally:
        stop.set()
        scraper.join()
    for kind, r in out.items():
        if not r.get("requests"):
            raise RuntimeError(f"the {kind} run measured nothing (exit {r['returncode']}):\n{r['output'][-2000:]}")
        r["cpu_us_per_attempt"] = r["cpu_s"] / r["requests"] * 1e6
    if not took:
        raise RuntimeError("the metrics were never scraped")
    return out


def sweep_scrape(host: str) -> dict:
    """A 10-step streamed sweep with the metrics on; the scrapes' time at its end."""
    port = _free_port()
    stop = threading.Event()
    took: list[float] = []  # each answered scrape's seconds
    size: list[int] = []  # and bytes
    args = ["-H", host, "--tts-stream", "--steps", ",".join(str(n) for n in range(1, 11)), "--step-time", "2"]
    args += ["--run-dir", "{tmp}/run", "--metrics-port", str(port)]
    scraper = threading.Thread(target=_scrape, args=(f"http://127.0.0.1:{port}/metrics", stop, took, size))
    scraper.start()
    try:
        locust("bench/tts_locustfile.py", args, 0.0, 1.0)
    finally:
        stop.set()
        scraper.join()
    last = took[-5:]  # the sweep's last seconds: most steps' histograms filled
    return {"scrape_ms": median(last) * 1000 if last else None, "scrape_bytes": size[-1] if size else None}


def measure(pairs: int = 3, users: int = 10, measure_s: float = 4.0, show=print) -> dict:
    rows = []
    knobs = ("--slots", "1000", "--base-ms", "0", "--per-char-ms", "0", "--jitter", "0")
    with simulator(*knobs) as (host, _sim):
        show(
            f"{'pair':>4}  {'on_attempts':>11} {'on_CPU_us':>10}  "
            f"{'off_attempts':>12} {'off_CPU_us':>11}  {'on/off':>6}"
        )
        for n in range(1, pairs + 1):
            r = one_pair(host, users, measure_s)
            ratio = r["on"]["cpu_us_per_attempt"] / r["off"]["cpu_us_per_attempt"]
            rows.append({"pair": n, "ratio": ratio, **{f"{k}_us": r[k]["cpu_us_per_attempt"] for k in ("on", "off")}})
            show(
                f"{n:>4}  {r['on']['requests']:>11} {r['on']['cpu_us_per_attempt']:>10.1f}  "
                f"{r['off']['requests']:>12} {r['off']['cpu_us_per_attempt']:>11.1f}  {ratio:>6.2f}"
            )
        scrape = sweep_scrape(host)
    ratios = [row["ratio"] for row in rows]
    return {
        "ratio": median(ratios),
        "ratios": ratios,
        "goal_ratio": GOAL_RATIO,
        "on_us": median([row["on_us"] for row in rows]),
        "off_us": median([row["off_us"] for row in rows]),
        **scrape,
        "pairs": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="pairs of side-by-side runs (default 3)")
    parser.add_argument("--users", type=int, default=10, help="users per run (default 10)")
    parser.add_argument("--measure-s", type=float, default=4.0, help="measured seconds per run (default 4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    m = measure(args.pairs, args.users, args.measure_s, show=(lambda *_: None) if args.json else print)
    if args.json:
        print(json.dumps(m))
        return
    print(
        f"CPU per attempt, metrics on / off (median of {args.pairs} pairs): {m['ratio']:.2f}x, pairs "
        f"{min(m['ratios']):.2f}-{max(m['ratios']):.2f}   (goal <= {GOAL_RATIO}x)"
    )
    print(f"a scrape after a 10-step streamed sweep: {m['scrape_ms']:.1f} ms for {m['scrape_bytes'] / 1000:.0f} kB")


if __name__ == "__main__":
    main()
