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
    terms = tuple(t for t in slo.terms if t.metric not in AFTER_RUN)
    if len(terms) == len(slo.terms):
        return slo
    return SLO(",".join(t.text for t in terms), terms) if terms else None


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
        m = _TERM.match(raw)
        if not m:
            raise SLOError(f"SLO term {raw.strip()!r} is malformed; {_valid()}.")
        metric, op, num, pct = m.groups()
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
        terms.append(Term(metric, op, value, f"{metric}{op}{_exact(value)}"))
    return SLO(",".join(t.text for t in terms), tuple(terms))


def _exact(v: float) -> str:
    """A threshold as written back into a spec: the shortest text that parses to the same float
    (1200, 0.01, 1234.5678), so a spec saved in run.json judges the same when read again."""
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def _fmt(v: float) -> str:
    """A number as a person writes it: whole numbers without a fraction, else 4 significant
    digits at most (612.3, 0.01, 1200)."""
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.4g}"


def _value(step: Mapping[str, Any], metric: str) -> float | None:
    key, sub, scale = _SOURCES[metric]
    v = step.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    if v is None or isinstance(v, bool):
        return None
    try:
        v = float(v) * scale
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _interval(step: Mapping[str, Any], metric: str) -> tuple[float, float, int | None, float] | None:
    """(lo, hi, n, q) of the metric's confidence interval when the step has one, q the
    percentile (50, 95); an end too few requests could bound (None) is -inf / inf."""
    if metric not in _CI:
        return None
    key, ci_key = _CI[metric]
    d = step.get(key)
    if not isinstance(d, dict):
        return None
    ci = d.get(ci_key)
    if (
        not isinstance(ci, (list, tuple))
        or len(ci) != 2
        or not all(c is None or (isinstance(c, (int, float)) and not isinstance(c, bool)) for c in ci)
    ):
        return None
    n = d.get("count")
    lo = -math.inf if ci[0] is None else float(ci[0])
    hi = math.inf if ci[1] is None else float(ci[1])
    return lo, hi, (int(n) if isinstance(n, (int, float)) else None), float(ci_key[1:-3])


def _more_requests(
    point: float, lo: float, hi: float, threshold: float, n: int | None, q: float
) -> tuple[int, bool] | None:
    """Requests to add so that the interval no longer reaches the threshold, assuming its
    half-width on the threshold's side shrinks as 1/sqrt(n), and whether that is the estimate
    (True) or only the least (False: that side is unbounded until there are enough requests to
    bound a q-th percentile at all); None when it cannot be told."""
    half = (hi - point) if threshold >= point else (point - lo)
    gap = abs(threshold - point)
    if not n or gap <= 0 or half <= 0:
        return None
    if math.isinf(half):
        from .confidence import min_bounding_n  # numpy: only where an interval is open

        return max(1, min_bounding_n(q) - n), False
    need = n * (half / gap) ** 2
    return max(1, math.ceil(need - n)), True


def _ci_text(lo: float, hi: float) -> str:
    """'95% CI 120-480', with an unbounded end shown as such."""
    return f"95% CI {'unbounded' if math.isinf(lo) else _fmt(lo)}-{'unbounded' if math.isinf(hi) else _fmt(hi)}"


def judge(slo: SLO, step: StepSummary) -> SloVerdict:
    """One step against the SLO (see the module doc for the rules). ``values`` holds each term's
    figure, ``intervals`` the 95% interval of those with one ([lo, hi], an end too few requests
    could bound null)."""
    failed, inconclusive, values, intervals, more = [], [], {}, {}, []
    for t in slo.terms:
        v = _value(step, t.metric)
        values[t.metric] = v
        if v is None:
            failed.append(f"{t.metric} not measured")
            continue
        ok = _OPS[t.op](v, t.value)
        ci = _interval(step, t.metric)
        if ci is not None:
            lo, hi, n, q = ci
            intervals[t.metric] = [None if math.isinf(lo) else lo, None if math.isinf(hi) else hi]
            lo_ok, hi_ok = _OPS[t.op](lo, t.value), _OPS[t.op](hi, t.value)
            if lo_ok != hi_ok:
                est = _more_requests(v, lo, hi, t.value, n, q)
                if est is None:
                    need = "more requests would not settle it: the estimate sits on the threshold"
                elif est[1]:
                    need = f"about {est[0]} more requests would settle it"
                else:
                    need = f"{n} requests cannot bound a p{q:g} on that side: at least {est[0]} more are needed"
                inconclusive.append(f"{t.metric} {_fmt(v)} ({_ci_text(lo, hi)}) straddles {_fmt(t.value)}; {need}")
                if est is not None:
                    more.append(est[0])
                continue
            ok = lo_ok  # the whole interval is on one side
        if not ok:
            failed.append(f"{t.metric} {_fmt(v)} {_NEGATED[t.op]} {_fmt(t.value)}")
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
    for v in verdicts:
        c = v.get(key)
        if c is None:
            continue
        by_level[c] = by_level.get(c, True) and v.get("pass") is True
    best = None
    for c in sorted(by_level):
        if not by_level[c]:
            break
        best = c
    return best
