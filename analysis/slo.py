"""Service-level objectives: parse a spec, judge a step against it, find the largest level (a
concurrency, an offered rate) that meets it.

A spec is comma-separated terms ``metric<=value`` (also ``<``, ``>=``, ``>``), for example
``p95_ms<=1200,error_rate<=0.01``; a rate may be written as a percentage (``error_rate<=1%``).
The metrics are :data:`METRICS`; each is read from one summary step dict (the output of
``analysis.steps.step_stats``).

Rules :func:`judge` applies to each term:

- The metric's value missing from the step (no successful request, no collector, not a
  streamed run) fails the term: the step cannot be shown to meet it.
- A percentile term whose step carries a confidence interval (``latency_ms.p50_ci`` /
  ``p95_ci``, ``ttfa_ms.p50_ci`` / ``p95_ci``) passes or fails only when the whole interval is
  on one side of the threshold; an interval that straddles it makes the term *inconclusive*,
  with an estimate of how many more requests would settle it (an interval's width shrinks about
  as 1/sqrt(n)).  An end the step's requests were too few to bound (None: a p95 needs 72
  requests before anything bounds it from above) reaches past every threshold on its side, so
  a p95 term cannot pass on fewer, and the estimate is then the least that could.
- Every other term compares the point value.

A step passes (``True``) when every term passes, fails (``False``) when any term fails, and is
inconclusive (``None``) otherwise.  This module is pure: no locust, gevent or I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tts_knee.runformat.summary import SloVerdict, StepSummary

__all__ = ["AFTER_RUN", "METRICS", "SLO", "SLOError", "Term", "judge", "live", "max_level", "parse"]

METRICS: dict[str, str] = {
    "mean_ms": "mean wait latency of successful requests, ms",
    "p50_ms": "median wait latency, ms",
    "p90_ms": "90th percentile wait latency, ms",
    "p95_ms": "95th percentile wait latency, ms",
    "p99_ms": "99th percentile wait latency, ms",
    "max_ms": "largest wait latency, ms",
    "e2e_p95_ms": "95th percentile end-to-end latency (attempts plus backoff), ms",
    "ttfa_p50_ms": "median time to first audio, ms (streamed runs)",
    "ttfa_p95_ms": "95th percentile time to first audio, ms (streamed runs)",
    "tail_p95_ms": "95th percentile wait from the end of the text to the last audio, ms (text sent in pieces)",
    "underrun_rate": "share of streams that ran dry during playback, 0..1",
    "preroll_p95_ms": "95th percentile start-up buffer a stream needed to play without a gap, ms (streamed runs)",
    "smooth_start_p95_ms": "95th percentile TTFA plus that buffer: the wait for gapless audio, ms (streamed runs)",
    "cancel_to_quiet_p95_ms": "95th percentile wait from a cancel to quiet, ms (runs with --barge-in)",
    "error_rate": "share of requests that failed after retries, 0..1",
    "rtf_p95": "95th percentile real-time factor (synthesis s / audio s)",
    "throughput_rps": "successful requests completed per second",
    "gpu_mem_gb": "peak GPU memory on the server, GB (1e9 bytes)",
    "gpu_util_pct": "mean GPU utilisation on the server, %",
    "wer_mean": "mean word error rate of the judged clips, 0..1 (--asr-model)",
    "wer_p95": "95th percentile word error rate of the judged clips, 0..1 (--asr-model)",
    "cer_mean": "mean character error rate of the judged clips, 0..1 (--asr-model, --asr-metric cer)",
    "similarity_mean": "mean speaker similarity of the judged clips to the same texts at the lowest step, "
    "-1..1 (listening; say >=)",
    "mos_mean": "mean predicted naturalness of the judged clips, DNSMOS OVRL 1..5 (listening; say >=)",
    "ttfa_audible_p95_ms": "95th percentile time until the listener hears the first sound, ms",
    "leading_silence_p95_ms": "95th percentile silence before the first sound, ms",
    "silent_rate": "share of requests answered with silent audio, 0..1",
    "runaway_rate": (
        "share of requests whose audio ran away (at least twice the same text's length at the lowest step), 0..1"
    ),
}

# metric -> (step dict key, sub key or None, scale); a value of None is "not measured"
_SOURCES = {
    "mean_ms": ("latency_ms", "mean", 1.0),
    "p50_ms": ("latency_ms", "p50", 1.0),
    "p90_ms": ("latency_ms", "p90", 1.0),
    "p95_ms": ("latency_ms", "p95", 1.0),
    "p99_ms": ("latency_ms", "p99", 1.0),
    "max_ms": ("latency_ms", "max", 1.0),
    "e2e_p95_ms": ("e2e_ms", "p95", 1.0),
    "ttfa_p50_ms": ("ttfa_ms", "p50", 1.0),
    "ttfa_p95_ms": ("ttfa_ms", "p95", 1.0),
    "tail_p95_ms": ("tail_ms", "p95", 1.0),
    "underrun_rate": ("underrun_rate", None, 1.0),
    "preroll_p95_ms": ("preroll_ms", "p95", 1.0),
    "smooth_start_p95_ms": ("smooth_start_ms", "p95", 1.0),
    "cancel_to_quiet_p95_ms": ("cancel_to_quiet_ms", "p95", 1.0),
    "error_rate": ("error_rate", None, 1.0),
    "rtf_p95": ("rtf", "p95", 1.0),
    "throughput_rps": ("throughput_rps", None, 1.0),
    "gpu_mem_gb": ("server", "gpu_mem_peak_bytes", 1e-9),
    "gpu_util_pct": ("server", "gpu_util_mean", 1.0),
    "wer_mean": ("speech", "wer_mean", 1.0),
    "wer_p95": ("speech", "wer_p95", 1.0),
    "cer_mean": ("speech", "cer_mean", 1.0),
    "similarity_mean": ("speech", "similarity_mean", 1.0),
    "mos_mean": ("speech", "mos_mean", 1.0),
    "ttfa_audible_p95_ms": ("ttfa_audible_ms", "p95", 1.0),
    "leading_silence_p95_ms": ("leading_silence_ms", "p95", 1.0),
    "silent_rate": ("silent_rate", None, 1.0),
    "runaway_rate": ("runaway_rate", None, 1.0),
}

# percentile metrics with a confidence interval: metric -> (step dict key, CI key)
_CI = {
    "p50_ms": ("latency_ms", "p50_ci"),
    "p95_ms": ("latency_ms", "p95_ci"),
    "ttfa_p50_ms": ("ttfa_ms", "p50_ci"),
    "ttfa_p95_ms": ("ttfa_ms", "p95_ci"),
}

_OPS = {
    "<=": lambda v, t: v <= t,
    "<": lambda v, t: v < t,
    ">=": lambda v, t: v >= t,
    ">": lambda v, t: v > t,
}
_NEGATED = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}
_TERM = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%?)\s*$")


#: Terms from the ASR judge, whose verdicts come after their step: judged on the finished run.
AFTER_RUN = frozenset(("wer_mean", "wer_p95", "cer_mean", "similarity_mean", "mos_mean"))


def live(slo: SLO) -> SLO | None:
    """``slo`` without the terms only the finished run can judge (:data:`AFTER_RUN`); None when
    none is left."""
    terms = tuple(term for term in slo.terms if term.metric not in AFTER_RUN)
    if len(terms) == len(slo.terms):
        return slo
    return SLO(",".join(term.text for term in terms), terms) if terms else None


class SLOError(ValueError):
    """A spec that cannot be parsed; the message is one sentence naming what is valid."""


@dataclass(frozen=True)
class Term:
    metric: str
    op: str
    value: float
    text: str  # the term as normalised, e.g. "p95_ms<=400"


@dataclass(frozen=True)
class SLO:
    spec: str  # the normalised spec: the terms' texts joined by commas
    terms: tuple[Term, ...]


def _valid() -> str:
    return "terms are metric<=value, <, >= or > joined by commas, and the metrics are " + ", ".join(METRICS)


def parse(spec: str) -> SLO:
    """The SLO written as ``spec``; raises :class:`SLOError` for an empty spec, a malformed
    term or an unknown metric."""
    if not isinstance(spec, str) or not spec.strip():
        raise SLOError(f"The SLO is empty; {_valid()}.")
    terms = []
    for raw in spec.split(","):
        match = _TERM.match(raw)
        if not match:
            raise SLOError(f"SLO term {raw.strip()!r} is malformed; {_valid()}.")
        metric, operator, num, pct = match.groups()
        metric = metric.lower()
        if metric not in METRICS:
            raise SLOError(f"SLO term {raw.strip()!r} names an unknown metric {metric!r}; {_valid()}.")
        value = float(num)
        if pct:
            if not metric.endswith("_rate"):
                raise SLOError(f"SLO term {raw.strip()!r}: only a *_rate metric takes a percentage; {_valid()}.")
            value /= 100.0
        if not math.isfinite(value):
            raise SLOError(f"SLO term {raw.strip()!r} has no finite value; {_valid()}.")
        terms.append(Term(metric, operator, value, f"{metric}{operator}{_exact(value)}"))
    return SLO(",".join(term.text for term in terms), tuple(terms))


def _exact(value: float) -> str:
    """A threshold as written back into a spec: the shortest text that parses to the same float
    (1200, 0.01, 1234.5678), so a spec saved in run.json judges the same when read again."""
    return str(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)


def _fmt(value: float) -> str:
    """A number as a person writes it: whole numbers without a fraction, else 4 significant
    digits at most (612.3, 0.01, 1200)."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.4g}"


def _value(step: Mapping[str, Any], metric: str) -> float | None:
    key, sub, scale = _SOURCES[metric]
    value = step.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value) * scale
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _interval(step: Mapping[str, Any], metric: str) -> tuple[float, float, int | None, float] | None:
    """(lower, upper, count, percentile) of the metric's confidence interval when the step has
    one, ``percentile`` 50 or 95; an end too few requests could bound (None) is -inf / inf."""
    if metric not in _CI:
        return None
    key, ci_key = _CI[metric]
    dist = step.get(key)
    if not isinstance(dist, dict):
        return None
    interval = dist.get(ci_key)
    if (
        not isinstance(interval, (list, tuple))
        or len(interval) != 2
        or not all(
            bound is None or (isinstance(bound, (int, float)) and not isinstance(bound, bool)) for bound in interval
        )
    ):
        return None
    count = dist.get("count")
    lower = -math.inf if interval[0] is None else float(interval[0])
    upper = math.inf if interval[1] is None else float(interval[1])
    return lower, upper, (int(count) if isinstance(count, (int, float)) else None), float(ci_key[1:-3])


def _more_requests(
    point: float, lower: float, upper: float, threshold: float, count: int | None, percentile: float
) -> tuple[int, bool] | None:
    """Requests to add so that the interval no longer reaches the threshold, assuming its
    half-width on the threshold's side shrinks as 1/sqrt(count), and whether that is the estimate
    (True) or only the least (False: that side is unbounded until there are enough requests to
    bound a q-th percentile at all); None when it cannot be told."""
    half = (upper - point) if threshold >= point else (point - lower)
    gap = abs(threshold - point)
    if not count or gap <= 0 or half <= 0:
        return None
    if math.isinf(half):
        from .confidence import min_bounding_n  # numpy: only where an interval is open

        return max(1, min_bounding_n(percentile) - count), False
    need = count * (half / gap) ** 2
    return max(1, math.ceil(need - count)), True


def _ci_text(lower: float, upper: float) -> str:
    """'95% CI 120-480', with an unbounded end shown as such."""
    return (
        f"95% CI {'unbounded' if math.isinf(lower) else _fmt(lower)}-"
        f"{'unbounded' if math.isinf(upper) else _fmt(upper)}"
    )


def judge(slo: SLO, step: StepSummary) -> SloVerdict:
    """One step against the SLO (see the module doc for the rules). ``values`` holds each term's
    figure, ``intervals`` the 95% interval of those with one ([lo, hi], an end too few requests
    could bound null)."""
    failed, inconclusive, values, intervals, more = [], [], {}, {}, []
    for term in slo.terms:
        value = _value(step, term.metric)
        values[term.metric] = value
        if value is None:
            failed.append(f"{term.metric} not measured")
            continue
        ok = _OPS[term.op](value, term.value)
        interval = _interval(step, term.metric)
        if interval is not None:
            lower, upper, count, percentile = interval
            intervals[term.metric] = [None if math.isinf(lower) else lower, None if math.isinf(upper) else upper]
            lo_ok, hi_ok = _OPS[term.op](lower, term.value), _OPS[term.op](upper, term.value)
            if lo_ok != hi_ok:
                est = _more_requests(value, lower, upper, term.value, count, percentile)
                if est is None:
                    need = "more requests would not settle it: the estimate sits on the threshold"
                elif est[1]:
                    need = f"about {est[0]} more requests would settle it"
                else:
                    need = (
                        f"{count} requests cannot bound a p{percentile:g} on that side: "
                        f"at least {est[0]} more are needed"
                    )
                inconclusive.append(
                    f"{term.metric} {_fmt(value)} ({_ci_text(lower, upper)}) straddles {_fmt(term.value)}; {need}"
                )
                if est is not None:
                    more.append(est[0])
                continue
            ok = lo_ok  # the whole interval is on one side
        if not ok:
            failed.append(f"{term.metric} {_fmt(value)} {_NEGATED[term.op]} {_fmt(term.value)}")
    verdict = False if failed else (None if inconclusive else True)
    return {
        "concurrency": step.get("concurrency"),
        "step": step.get("step"),
        "pass": verdict,
        "failed": failed,
        "inconclusive": inconclusive,
        "values": values,
        "intervals": intervals,
        "more_requests": max(more) if more and not failed else None,
    }


def max_level(verdicts: Sequence[Mapping[str, Any]], key: str = "concurrency") -> Any:  # the level's own type
    """The largest level (``v[key]``: a concurrency, an offered rate) that passes with every
    lower tested level passing; None when the lowest one does not pass.  Verdicts may come in
    any order and a level may appear several times: it passes only if every verdict for it
    passes."""
    by_level: dict[str, Any] = {}
    for verdict in verdicts:
        level_value = verdict.get(key)
        if level_value is None:
            continue
        by_level[level_value] = by_level.get(level_value, True) and verdict.get("pass") is True
    best = None
    for level_value in sorted(by_level):
        if not by_level[level_value]:
            break
        best = level_value
    return best
