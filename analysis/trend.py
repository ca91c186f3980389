"""Whether a series drifts: the Theil–Sen slope, the Mann–Kendall test, and where a warm-up
ends.

A soak's figures come one per window, a dozen to a few hundred points, and their noise is
neither normal nor free of outliers (a garbage-collector pause, a noisy neighbour, one slow
window). Both tools are rank-based, so one bad window moves neither much, and both mean
something with a dozen points:

- **Theil–Sen slope**: the median of the slopes between every pair of points, with Sen's 95%
  interval (the order statistics of those slopes that the Mann–Kendall variance puts at
  ±1.96 standard deviations).
- **Mann–Kendall test**: S = the number of pairs that rise minus those that fall; under no
  trend S is about normal with the tie-corrected variance n(n-1)(2n+5)/18 - Σ t(t-1)(2t+5)/18,
  which gives a two-sided p-value (with the usual continuity correction). It is Kendall's tau
  between time and value, the standard test for a monotonic trend in a time series.
- **Steady after**: a series that warms up (caches fill, pools grow, then it holds) rises
  fast at first and not after; one that leaks rises at one rate throughout. The last half
  gives the rate the series settles to (its Theil–Sen line, and the lines through its middle
  at either end of the slope's interval) and its scatter about that line (1.4826 x the median
  absolute residual, a robust standard deviation); the warm-up ends after the last point of
  the first half lying more than ``OFF_LINE`` such deviations off all of those lines,
  extended back. The trend is then judged from there on, so a warm-up is not
  called a leak, and a leak after a warm-up is still found.
"""

from __future__ import annotations

import math

import numpy as np

_Z = 1.959963984540054  # the normal's 97.5% point
#: Fewest points a trend is judged on.
MIN_POINTS = 6
#: A point this many robust standard deviations off the last half's line is still warming up.
OFF_LINE = 3.0


def _pairs(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(len(times), k=1)
    return times[j] - times[i], values[j] - values[i]


def _s_variance(values: np.ndarray) -> float:
    n = len(values)
    _, ties = np.unique(values, return_counts=True)
    return (n * (n - 1) * (2 * n + 5) - float(np.sum(ties * (ties - 1) * (2 * ties + 5)))) / 18.0


def mann_kendall(times: np.ndarray, values: np.ndarray) -> float | None:
    """Two-sided p-value of the Mann–Kendall test on ``values`` ordered by ``times``; None with fewer
    than :data:`MIN_POINTS` points or no variance."""
    order = np.argsort(times, kind="stable")
    values = np.asarray(values, dtype=float)[order]
    if len(values) < MIN_POINTS:
        return None
    time_gaps, value_gaps = _pairs(np.asarray(times, dtype=float)[order], values)
    score = float(np.sum(np.sign(value_gaps)))
    var = _s_variance(values)
    if var <= 0:
        return None
    z_score = 0.0 if score == 0 else (score - math.copysign(1.0, score)) / math.sqrt(var)
    return math.erfc(abs(z_score) / math.sqrt(2.0))


def theil_sen(times: np.ndarray, values: np.ndarray) -> tuple[float, float, float] | None:
    """(slope, lo, hi): the median pairwise slope of ``values`` over ``times`` and Sen's 95% interval;
    None with fewer than two distinct times."""
    times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    time_gaps, value_gaps = _pairs(times, values)
    keep = time_gaps != 0
    if not keep.any():
        return None
    slopes = np.sort(value_gaps[keep] / time_gaps[keep])
    n_slopes = len(slopes)
    spread = _Z * math.sqrt(max(_s_variance(values), 0.0))
    lo_i = max(int(round((n_slopes - spread) / 2.0)) - 1, 0)
    hi_i = min(int(round((n_slopes + spread) / 2.0)), n_slopes - 1)
    return float(np.median(slopes)), float(slopes[lo_i]), float(slopes[hi_i])


def steady_from(times: np.ndarray, values: np.ndarray) -> int:
    """The index of the first point from which the series moves as its last half does (see the
    module doc); 0 when it does from the start or there are too few points to tell."""
    times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    n = len(values)
    half = n // 2
    if n < MIN_POINTS:
        return 0
    fit = theil_sen(times[half:], values[half:])
    if fit is None:
        return 0
    slope, lower, upper = fit
    time_mid = float(np.median(times[half:]))
    value_mid = float(np.median(values[half:] - slope * (times[half:] - time_mid)))
    scale = 1.4826 * float(np.median(np.abs(values[half:] - value_mid - slope * (times[half:] - time_mid))))
    # a series that does not move at all has no scatter: only a real step is off its line
    band = OFF_LINE * scale + 1e-9 * max(1.0, abs(value_mid))
    # off every line the last half allows (its slope's interval, through its middle)
    early = times[:half] - time_mid
    ends = np.stack([value_mid + lower * early, value_mid + upper * early])
    below, above = ends.min(axis=0) - band, ends.max(axis=0) + band
    off = np.flatnonzero((values[:half] < below) | (values[:half] > above))
    return int(off[-1]) + 1 if len(off) else 0
