"""Confidence intervals for percentiles, and the tests that compare two runs' figures.

**Percentile intervals** (``latency_ms.p50_ci`` / ``p95_ci``, the same in ``ttfa_ms``): 95%
intervals, chosen by the number of values ``n``:

- ``BOOTSTRAP_MIN_N <= n <= BOOTSTRAP_MAX_N`` (200 to 1000): the percentile bootstrap,
  ``BOOTSTRAP_RESAMPLES`` (1000) resamples drawn at once as one index matrix (numpy, seeded
  with ``SEED``, so a summary is reproducible), each resample's percentile taken the way the
  point value is (numpy's linear interpolation); the interval is the 2.5th and 97.5th
  percentile of those.  At most 1000 x 1000 values: one row-wise sort, about 30 ms.
- otherwise: the order-statistic (binomial) interval, which needs no resampling: the number of
  values below the true q-quantile is Binomial(n, q), so the sorted values at the binomial's
  2.5% and 97.5% points bracket it with at least 95% probability, whatever the distribution.
  The binomial is computed exactly (its log-pmf by recurrence), so 10^5 values cost a sort.
  With few values a point can lie beyond the sample: a p95 needs 72 values before anything
  bounds it from above (1 - 0.95^n >= 0.975), a p50 6 from either side.  That end is then
  None (unbounded), never the largest value seen.

Below 200 values the bootstrap is too narrow at the top, because it cannot reach above the
largest value seen (p95 coverage 0.77 at n = 30, 0.84 at 60, 0.89 at 100), which is why it is
not used there.  Both kinds are clamped to contain the point value (a bootstrap interval can
miss it by a hair when values tie); ``ci_n`` says how many values an interval rests on and
``ci_method`` which kind it is.  Coverage measured on lognormal data with a known p95
(``bench/bootstrap_coverage.py``, 1000 trials each; the test is ``tests/test_slo_confidence.py``).

**Comparing two samples** (``tts-knee report RUN --baseline OLD``): for a percentile, the
ratio new / old with a 95% interval and a two-sided p-value, by the bootstrap (both samples
resampled ``BOOTSTRAP_RESAMPLES`` times; p = twice the smaller share of resampled ratios on one
side of 1, counted as (2k + 1) / (B + 1) so that it is never 0, and never below 2 / C(n + m, n),
the chance that two samples of n and m values from one distribution do not overlap at all, which
is as strong as so few values can show) when both have at most
``BOOTSTRAP_MAX_N`` values, otherwise by a normal
approximation on the log scale with each side's standard error read off its order-statistic
interval.  Rates (throughput, errors) use the usual two-sample Poisson and two-proportion z-tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from .incremental import percentiles

LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_MIN_N = 200
BOOTSTRAP_MAX_N = 1000
SEED = 0
_Z = 1.959963984540054  # the normal's 97.5% point


def _finite(values: npt.ArrayLike) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    finite: np.ndarray = array[np.isfinite(array)]
    return finite


#: The binomial's mass is computed this many standard deviations either side of its mean (and
#: over everything for small n): beyond, it is below what a double holds next to 1.
_BINOM_SPAN_SD = 40.0


def _binom_cdf(trials: int, chance: float) -> tuple[int, np.ndarray]:
    """(first, cdf): P(K <= k) for k = first, first + 1, …, K ~ Binomial(trials, chance),
    0 < chance < 1, over the span where its mass is (all of 0..trials for few trials)."""
    half = _BINOM_SPAN_SD * math.sqrt(trials * chance * (1 - chance)) + 1
    first, end = max(0, int(trials * chance - half)), min(trials, int(trials * chance + half) + 1)
    start = (
        math.lgamma(trials + 1)
        - math.lgamma(first + 1)
        - math.lgamma(trials - first + 1)
        + first * math.log(chance)
        + (trials - first) * math.log1p(-chance)
    )
    count = np.arange(first, end, dtype=float)
    steps = np.log((trials - count) / (count + 1)) + math.log(chance / (1 - chance))
    logpmf = np.concatenate([[start], start + np.cumsum(steps)])
    pmf = np.exp(logpmf - logpmf.max())
    return first, np.cumsum(pmf) / pmf.sum()


def _order_interval(v_sorted: np.ndarray, percentile: float) -> tuple[float | None, float | None]:
    """Order-statistic interval for the q-th percentile (q in 0..100) of sorted values; an end
    the sample is too small to bound is None."""
    count = len(v_sorted)
    share = min(max(percentile / 100.0, 1e-9), 1 - 1e-9)
    first, cdf = _binom_cdf(count, share)
    alpha = 1 - LEVEL
    lo_i = first + int(np.searchsorted(cdf, alpha / 2)) - 1  # x_(l) with l the binomial's alpha/2 point
    hi_i = first + int(np.searchsorted(cdf, 1 - alpha / 2))  # x_(u) with u - 1 its 1 - alpha/2 point
    return (float(v_sorted[lo_i]) if lo_i >= 0 else None), (float(v_sorted[hi_i]) if hi_i < count else None)


def min_bounding_n(percentile: float) -> int:
    """The fewest values whose order-statistic interval bounds the q-th percentile (q in 0..100)
    on both sides: the far end needs 1 - max(p, 1 - p)^n >= 1 - (1 - LEVEL) / 2."""
    share = max(percentile / 100.0, 1 - percentile / 100.0)
    return math.ceil(math.log((1 - LEVEL) / 2) / math.log(share))


def _bootstrap(values: np.ndarray, percents: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Percentiles ``percents`` of ``BOOTSTRAP_RESAMPLES`` resamples of ``values``: shape (len(percents), B).

    Each resample is sorted and interpolated as ``np.percentile`` does (linear): one row sort
    is several times faster than ``np.percentile`` along an axis."""
    count = len(values)
    resamples = values[rng.integers(0, count, size=(BOOTSTRAP_RESAMPLES, count), dtype=np.int32)]
    resamples.sort(axis=1)
    out = []
    for percentile in percents:
        position = (count - 1) * percentile / 100.0
        below = int(math.floor(position))
        above = min(below + 1, count - 1)
        out.append(resamples[:, below] + (position - below) * (resamples[:, above] - resamples[:, below]))
    return np.array(out)


def percentile_cis(
    values: npt.ArrayLike, percents: Sequence[int] = (50, 95), sorted_v: np.ndarray | None = None
) -> dict[str, Any]:
    """``{"p50_ci": [lo, hi], "p95_ci": [lo, hi], "ci_method", "ci_n"}`` for the finite values
    (see the module doc; an end too few values can bound is None); empty when there are fewer
    than 2. ``sorted_v``: the same values sorted, when kept (no sort then)."""
    finite = _finite(values)
    count = len(finite)
    if count < 2:
        return {}
    points = np.percentile(finite, percents) if sorted_v is None else percentiles(sorted_v, percents)
    if BOOTSTRAP_MIN_N <= count <= BOOTSTRAP_MAX_N:
        boot = _bootstrap(finite, percents, np.random.default_rng(SEED))
        alpha = 100 * (1 - LEVEL) / 2
        bounds = [tuple(np.percentile(resampled, [alpha, 100 - alpha])) for resampled in boot]
        method = "bootstrap"
    else:
        sorted_finite = np.sort(finite) if sorted_v is None else sorted_v
        bounds = [_order_interval(sorted_finite, percentile) for percentile in percents]
        method = "order_statistic"
    out: dict[str, Any] = {}
    for percentile, point, (lower, upper) in zip(percents, points, bounds):
        out[f"p{percentile}_ci"] = [
            None if lower is None else float(min(lower, point)),
            None if upper is None else float(max(upper, point)),
        ]
    out["ci_method"], out["ci_n"] = method, count
    return out


def ci_range(interval: Iterable[float | None], fmt: str = ".0f") -> str:
    """An interval as text, '120-480', an end too few values could bound shown 'unbounded'."""
    return "-".join("unbounded" if bound is None else format(bound, fmt) for bound in interval)


class PercentileChange(TypedDict):
    """:func:`compare_percentile`'s answer."""

    old: float
    new: float
    ratio: float
    ratio_ci: list[float | None]
    p_value: float
    method: str


class RateChange(TypedDict):
    """:func:`compare_rates`'s answer."""

    old: float
    new: float
    ratio: float
    p_value: float


class ProportionChange(TypedDict):
    """:func:`compare_proportions`'s answer."""

    old: float
    new: float
    change: float
    p_value: float


def compare_percentile(old: npt.ArrayLike, new: npt.ArrayLike, percentile: float) -> PercentileChange | None:
    """The q-th percentile of two samples: ``{"old", "new", "ratio", "ratio_ci", "p_value",
    "method"}`` (see the module doc), or None when either has fewer than 2 finite values or a
    percentile of 0."""
    old_values, new_values = _finite(old), _finite(new)
    if len(old_values) < 2 or len(new_values) < 2:
        return None
    old_point, new_point = float(np.percentile(old_values, percentile)), float(np.percentile(new_values, percentile))
    if old_point <= 0 or new_point <= 0:
        return None
    if max(len(old_values), len(new_values)) <= BOOTSTRAP_MAX_N:
        rng = np.random.default_rng(SEED)
        old_boot, new_boot = _bootstrap(old_values, [percentile], rng)[0], _bootstrap(new_values, [percentile], rng)[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = new_boot / old_boot
        ratios = ratios[np.isfinite(ratios)]
        lower, upper = np.percentile(ratios, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
        # two-sided, with the usual +1 so that B resamples never claim p = 0
        p_value = min(1.0, (2 * min(int((ratios <= 1).sum()), int((ratios >= 1).sum())) + 1) / (len(ratios) + 1))
        # A handful of values cannot show more than a full separation of the two samples does:
        # its chance when both come from one distribution, 2 / C(n + m, n), bounds p below.
        p_value = max(p_value, min(1.0, 2 / math.comb(len(old_values) + len(new_values), len(old_values))))
        method = "bootstrap"
    else:

        def se_log(values: np.ndarray, point: float) -> float:
            lo_, hi_ = _order_interval(np.sort(values), percentile)
            if lo_ is None or hi_ is None:  # too few values to bound it: nothing can be told
                return math.inf
            lo_, hi_ = max(min(lo_, point), 1e-12), max(hi_, point)
            return (math.log(hi_) - math.log(lo_)) / (2 * _Z)

        std_error = math.hypot(se_log(old_values, old_point), se_log(new_values, new_point))
        log_ratio = math.log(new_point / old_point)
        if math.isinf(std_error):
            lower = upper = None
            p_value = 1.0
        else:
            lower, upper = math.exp(log_ratio - _Z * std_error), math.exp(log_ratio + _Z * std_error)
            p_value = (
                math.erfc(abs(log_ratio) / std_error / math.sqrt(2)) if std_error > 0 else (0.0 if log_ratio else 1.0)
            )
        method = "order_statistic"
    return {
        "old": old_point,
        "new": new_point,
        "ratio": new_point / old_point,
        "ratio_ci": [None if lower is None else float(lower), None if upper is None else float(upper)],
        "p_value": float(p_value),
        "method": method,
    }


def compare_rates(k_old: int, t_old: float, k_new: int, t_new: float) -> RateChange | None:
    """Two event rates (k events over t seconds): ``{"old", "new", "ratio", "p_value"}`` by the
    two-sample Poisson z-test; None when a duration is missing or a rate is 0."""
    if not t_old or not t_new or not k_old or not k_new:
        return None
    old_rate, new_rate = k_old / t_old, k_new / t_new
    std_error = math.sqrt(k_old / t_old**2 + k_new / t_new**2)
    p_value = math.erfc(abs(new_rate - old_rate) / std_error / math.sqrt(2)) if std_error > 0 else 1.0
    return {"old": old_rate, "new": new_rate, "ratio": new_rate / old_rate, "p_value": p_value}


def compare_proportions(k_old: int, n_old: int, k_new: int, n_new: int) -> ProportionChange | None:
    """Two proportions (k of n): ``{"old", "new", "change", "p_value"}`` by the two-proportion
    z-test (pooled); None when either n is 0."""
    if not n_old or not n_new:
        return None
    old_share, new_share = k_old / n_old, k_new / n_new
    pool = (k_old + k_new) / (n_old + n_new)
    std_error = math.sqrt(pool * (1 - pool) * (1 / n_old + 1 / n_new))
    p_value = math.erfc(abs(new_share - old_share) / std_error / math.sqrt(2)) if std_error > 0 else 1.0
    return {"old": old_share, "new": new_share, "change": new_share - old_share, "p_value": p_value}
