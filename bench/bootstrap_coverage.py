"""How often the dashboard's 95% intervals for p50 and p95 contain the true value, and what they cost.

Run it from the repository root::

    .venv/bin/python bench/bootstrap_coverage.py          # 1000 trials per size
    .venv/bin/python bench/bootstrap_coverage.py 200      # fewer trials (coverage +-3%)

Each trial draws n latencies from a lognormal (median 200 ms, sigma 0.5: true p50 200 ms, true
p95 = 200 * exp(0.5 * 1.645) = 455.6 ms), asks ``analysis.confidence.percentile_cis`` for the
intervals and counts the trials whose interval contains the true value (an unbounded end
contains everything beyond it).  One line per n; the width is over the trials whose p95
interval is bounded on both sides, ``p95_bounded`` the share of those::

    n      method           p50_coverage  p95_coverage  p95_bounded  p95_width_ms  ms_per_call
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from tts_knee.analysis.confidence import percentile_cis

SIZES = (30, 60, 72, 100, 199, 200, 500, 1000, 1001, 5000, 100000)
MEDIAN_MS, SIGMA = 200.0, 0.5
TRUE_P95 = MEDIAN_MS * math.exp(SIGMA * 1.6448536269514722)


def _inside(ci, v) -> bool:
    lo, hi = ci
    return (lo is None or lo <= v) and (hi is None or v <= hi)


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(
        f"{'n':>6}  {'method':<15}  p50_coverage  p95_coverage  p95_bounded  p95_width_ms  ms_per_call  "
        f"({trials} trials)"
    )
    for n in SIZES:
        rng = np.random.default_rng(n)
        hit50 = hit95 = bounded = 0
        width, method = 0.0, "-"
        reps = trials if n <= 5000 else max(20, trials // 10)
        t = time.perf_counter()
        for _ in range(reps):
            ci = percentile_cis(MEDIAN_MS * rng.lognormal(0.0, SIGMA, n))
            hit50 += _inside(ci["p50_ci"], MEDIAN_MS)
            hit95 += _inside(ci["p95_ci"], TRUE_P95)
            if None not in ci["p95_ci"]:
                bounded += 1
                width += ci["p95_ci"][1] - ci["p95_ci"][0]
            method = ci["ci_method"]
        ms = (time.perf_counter() - t) / reps * 1000
        w = f"{width / bounded:>12.1f}" if bounded else f"{'-':>12}"
        print(
            f"{n:>6}  {method:<15}  {hit50 / reps:>12.3f}  {hit95 / reps:>12.3f}  "
            f"{bounded / reps:>11.2f}  {w}  {ms:>11.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
