"""The CI gate: ``tts-knee report RUN --slo SPEC --require N`` (or ``--require R/s`` for an
open-loop run).

The SLO holds at N when the level N (its repeats pooled) meets every term *and* every lower
tested concurrency meets it too, i.e. N <= ``slo.max_concurrency``: a limit of N is only safe if
the service also meets the SLO below it.  Exit status (see :func:`require`):

- 0: it holds; prints the claim the way a team would publish it, e.g.
  ``8 concurrent: p95 1.14 s (95% CI 1.10-1.18 s) <= 1.2 s, errors 0.0% <= 1%; GPU memory peak
  9.1 GB, GPU util 62% mean, 89% peak; 2,310 requests at 7.9 req/s``.
- 1: it does not hold: a term fails at N (the sentence names each with its numbers), a term is
  inconclusive at N (its interval straddles the threshold; inconclusive counts as not holding,
  and the sentence says how many more requests would settle it), a lower concurrency does not
  meet it, or N was not tested in this run (nothing can be claimed about it).
- 2 (raised by the CLI, not here): bad input, such as a malformed spec or no SLO at all.

For an open-loop run (``--rates``) the gate takes a rate, ``--require 12/s``: it holds when the
lowest tested rate at or above 12 req/s meets every term on its latency from the schedule (and
its latency did not keep growing) and so does every lower tested rate, i.e. 12 <= ``slo.max_rate``;
a rate above every tested one cannot be claimed (exit 1). A trace replay (``--trace``) takes a
speed too, ``--require 2x``: the gate at the rate that speed offers. The claim reads ``12 req/s offered:
p95 265 ms (95% CI 260-272 ms) <= 400 ms; 130 requests at 12.0 req/s``, and adds where it was
tested when that is a higher rate.

Every number is printed with enough digits that it compares with its threshold the way the
unrounded value does (400.4 ms is never shown as "400 ms > 400 ms").
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tts_knee.runformat.summary import Require, SloVerdict, StepSummary, Summary

from . import openloop, slo as slo_mod

_LABEL = {
    "mean_ms": "mean",
    "p50_ms": "p50",
    "p90_ms": "p90",
    "p95_ms": "p95",
    "p99_ms": "p99",
    "max_ms": "max",
    "e2e_p95_ms": "end-to-end p95",
    "ttfa_p50_ms": "TTFA p50",
    "ttfa_p95_ms": "TTFA p95",
    "tail_p95_ms": "tail p95",
    "underrun_rate": "underruns",
    "preroll_p95_ms": "pre-roll p95",
    "smooth_start_p95_ms": "smooth start p95",
    "cancel_to_quiet_p95_ms": "cancel to quiet p95",
    "error_rate": "errors",
    "rtf_p95": "RTF p95",
    "throughput_rps": "throughput",
    "gpu_mem_gb": "GPU memory peak",
    "gpu_util_pct": "GPU util",
    "wer_mean": "WER mean",
    "wer_p95": "WER p95",
    "cer_mean": "CER mean",
    "similarity_mean": "speaker similarity mean",
    "mos_mean": "naturalness (DNSMOS OVRL) mean",
    "ttfa_audible_p95_ms": "audible TTFA p95",
    "leading_silence_p95_ms": "leading silence p95",
    "silent_rate": "silent answers",
    "runaway_rate": "runaways",
}
_CI_OF = {
    "p50_ms": ("latency_ms", "p50_ci"),
    "p95_ms": ("latency_ms", "p95_ci"),
    "ttfa_p50_ms": ("ttfa_ms", "p50_ci"),
    "ttfa_p95_ms": ("ttfa_ms", "p95_ci"),
}
_OPS = {"<=": lambda v, t: v <= t, "<": lambda v, t: v < t, ">=": lambda v, t: v >= t, ">": lambda v, t: v > t}
_NEG = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}


def _unit(metric: str, ref: float) -> tuple[float, str]:
    """(scale, unit) a metric is shown in; ms become s from 1000 ms on (of the threshold)."""
    if metric.endswith("_ms"):
        return (1e-3, " s") if ref >= 1000 else (1.0, " ms")
    if metric.endswith("_rate") or metric.startswith(("wer_", "cer_")):
        return 100.0, "%"
    if metric == "gpu_util_pct":
        return 1.0, "%"
    if metric == "gpu_mem_gb":
        return 1.0, " GB"
    if metric == "throughput_rps":
        return 1.0, " req/s"
    return 1.0, ""


def _shown(v: float, t: float, op: str, scale: float, base_digits: int) -> str:
    """v (scaled) with the fewest digits >= base_digits that keep ``op(v, t)`` true as shown."""
    truth = _OPS[op](v, t)
    for d in range(base_digits, base_digits + 6):
        s = f"{v * scale:.{d}f}"
        shown = float(s) / scale
        if _OPS[op](shown, t) == truth and (shown != t or v == t):
            return s
    return f"{v * scale:.{base_digits + 6}f}"


def _threshold(t: float, scale: float) -> str:
    x = t * scale
    return f"{x:g}" if abs(x) < 1e6 else f"{x:.0f}"


def _base_digits(metric: str, scale: float) -> int:
    if metric.endswith("_ms"):
        return 2 if scale != 1.0 else 0
    if metric.endswith("_rate") or metric in ("gpu_util_pct", "gpu_mem_gb", "throughput_rps"):
        return 1
    return 2


def term_text(term: slo_mod.Term, level: StepSummary, verdict: SloVerdict) -> str:
    """One term at one level as published: label, value, comparison, threshold."""
    v = verdict["values"].get(term.metric)
    label = _LABEL[term.metric]
    scale, unit = _unit(term.metric, term.value)
    thr = _threshold(term.value, scale) + unit
    if v is None:
        return f"{label} not measured (needed {term.op} {thr})"
    digits = _base_digits(term.metric, scale)
    ci_txt, straddles = "", False
    if term.metric in _CI_OF:
        key, ci_key = _CI_OF[term.metric]
        figures: Mapping[str, object] = level
        dist = figures.get(key)
        ci = dist.get(ci_key) if isinstance(dist, dict) else None
        if ci:
            shown = ["unbounded" if b is None else f"{b * scale:.{digits}f}" for b in ci]
            lo = -math.inf if ci[0] is None else ci[0]
            hi = math.inf if ci[1] is None else ci[1]
            ci_txt = f" (95% CI {shown[0]}-{shown[1]}{unit})"
            straddles = _OPS[term.op](lo, term.value) != _OPS[term.op](hi, term.value)
    if straddles:
        return f"{label} {v * scale:.{digits}f}{unit}{ci_txt} straddles {thr}"
    op = term.op if _OPS[term.op](v, term.value) else _NEG[term.op]
    return f"{label} {_shown(v, term.value, term.op, scale, digits)}{unit}{ci_txt} {op} {thr}"


def _context(level: StepSummary, slo: slo_mod.SLO) -> list[str]:
    """Resource and volume figures that belong in the claim even when no term names them."""
    named = {t.metric for t in slo.terms}
    srv = level.get("server")
    out = []
    res = []
    mem = srv.get("gpu_mem_peak_bytes") if srv else None
    if mem is not None and "gpu_mem_gb" not in named:
        res.append(f"GPU memory peak {mem / 1e9:.1f} GB")
    um, ux = (srv.get("gpu_util_mean"), srv.get("gpu_util_max")) if srv else (None, None)
    if um is not None and "gpu_util_pct" not in named:
        res.append(f"GPU util {um:.0f}% mean" + (f", {ux:.0f}% peak" if ux is not None else ""))
    if res:
        out.append(", ".join(res))
    rps = level.get("throughput_rps")
    vol = f"{level.get('requests') or 0:,} requests" + (f" at {rps:.1f} req/s" if rps is not None else "")
    if level.get("repeats", 1) > 1:
        vol += f" over {level['repeats']} repeats"
    out.append(vol)
    return out


def claim(slo: slo_mod.SLO, level: StepSummary, verdict: SloVerdict, head: str | None = None) -> str:
    """``N concurrent: term, term; context`` for one level (``head`` in place of ``N concurrent``)."""
    terms = ", ".join(term_text(t, level, verdict) for t in slo.terms)
    return (head or f"{level['concurrency']} concurrent") + ": " + "; ".join([terms] + _context(level, slo))


def _gate(concurrency: int, voices: int | None, holds: bool, said: str | None, reason: str) -> Require:
    """``require``: at ``concurrency`` (and ``voices`` in a voice sweep) the claim ``said``
    holds or not, the exit status that calls for, and why."""
    exit_status = 0 if holds else 1
    if voices is None:
        return {"concurrency": concurrency, "holds": holds, "exit": exit_status, "claim": said, "reason": reason}
    return {
        "concurrency": concurrency,
        "voices": voices,
        "holds": holds,
        "exit": exit_status,
        "claim": said,
        "reason": reason,
    }


def _slo_of(summary: Summary) -> tuple[str, slo_mod.SLO, list[SloVerdict]]:
    """The summary's SLO as specified, parsed, and its verdict per level."""
    judged = summary["slo"]
    assert judged is not None, "--require is judged on a run with an SLO (tts-knee report refuses one without)"
    return judged["spec"], slo_mod.parse(judged["spec"]), judged["steps"]


def require(summary: Summary, n: int, key: Literal["concurrency", "voices"] = "concurrency") -> Require:
    """The gate at concurrency ``n`` for a summary with ``slo``: ``{"concurrency", "holds",
    "exit", "claim" (None when n was not tested), "reason"}`` (see the module doc). In a voice
    sweep (``key`` "voices") ``n`` is a number of voices at the sweep's one load, the answer's
    ``voices``, and "lower" means fewer voices."""
    spec, slo, verdicts = _slo_of(summary)
    levels = summary.get("levels") or []
    tested = [lv[key] for lv in levels]
    voices = key == "voices"
    concurrency = (levels[0]["concurrency"] if levels else 0) if voices else n
    if n not in tested:
        return _gate(
            concurrency,
            n if voices else None,
            False,
            None,
            f"The SLO {spec} cannot be claimed at {n}{' voices' if voices else ''}: this run did not "
            f"test {n} (tested: {', '.join(map(str, tested)) or 'none'}).",
        )
    i = tested.index(n)
    level, verdict = levels[i], verdicts[i]
    load = f"{level['rate']:g} req/s offered" if level.get("rate") else f"{level['concurrency']} concurrent"
    text = claim(slo, level, verdict, f"{n} voices at {load}" if voices else None)
    holds, reason = _held(
        spec,
        levels,
        verdicts,
        i,
        here=str(n),
        held_at=str(n),
        every="tested number of voices" if voices else "tested concurrency",
        below=lambda lv: str(lv[key]),
        unsafe=f"{n} is not a safe limit",
    )
    return _gate(concurrency, n if voices else None, holds, text, reason)


def _held(
    spec: str,
    levels: list[StepSummary],
    verdicts: list[SloVerdict],
    i: int,
    here: str,
    held_at: str,
    every: str,
    below: Callable[[StepSummary], str],
    unsafe: str,
) -> tuple[bool, str]:
    """Whether the SLO holds at level ``i`` and at every level below it, and why in one
    sentence (``here``: level i as the sentence names it; ``below(level)`` a lower one)."""
    verdict = verdicts[i]
    if verdict["pass"] is False:
        return False, f"The SLO {spec} does not hold at {here}: {', '.join(verdict['failed'])}."
    if verdict["pass"] is None:
        return False, (
            f"The SLO {spec} is not shown to hold at {here}: {'; '.join(verdict['inconclusive'])}; "
            f"inconclusive counts as not holding."
        )
    lower = next(((lv, v) for lv, v in zip(levels[:i], verdicts[:i]) if v["pass"] is not True), None)
    if lower is None:
        return True, f"The SLO {spec} holds at {held_at} and at every lower {every}."
    lv, v = lower
    why = ", ".join(v["failed"]) if v["pass"] is False else "; ".join(v["inconclusive"]) + ", inconclusive"
    return False, f"The SLO {spec} is met at {here} but not at {below(lv)} below it ({why}), so {unsafe}."


def require_rate(summary: Summary, rate: float) -> Require:
    """The gate at ``rate`` req/s for an open-loop summary with ``slo``: ``{"concurrency": 0,
    "rate", "holds", "exit", "claim" (None when no tested rate reaches it), "reason"}`` (see
    the module doc)."""
    spec, slo, verdicts = _slo_of(summary)
    levels = summary.get("levels") or []
    r = f"{rate:g} req/s"
    at = next((i for i, lv in enumerate(levels) if lv["rate"] >= rate), None)
    if at is None:
        tested = ", ".join(f"{lv['rate']:g}" for lv in levels) or "none"
        return {
            "concurrency": 0,
            "rate": rate,
            "holds": False,
            "exit": 1,
            "claim": None,
            "reason": f"The SLO {spec} cannot be claimed at {r}: this run offered no rate that high "
            f"(tested: {tested} req/s).",
        }
    level, verdict = levels[at], verdicts[at]
    where = "" if level["rate"] == rate else f" (tested at {level['rate']:g} req/s, the lowest tested rate above it)"
    text = claim(slo, openloop.judged(level), verdict, f"{r} offered{where}")
    holds, reason = _held(
        spec,
        levels,
        verdicts,
        at,
        here=f"{level['rate']:g} req/s",
        held_at=r,
        every="tested rate",
        below=lambda lv: f"{lv['rate']:g} req/s",
        unsafe=f"{r} is not a safe rate",
    )
    return {"concurrency": 0, "rate": rate, "holds": holds, "exit": 0 if holds else 1, "claim": text, "reason": reason}


def require_speed(summary: Summary, speed: float) -> Require:
    """The gate at ``speed`` times a trace's pace (``--require 2x``, a ``--trace`` run): the gate
    at the rate that speed offers (:func:`require_rate`), named as the speed."""
    base = summary["trace"]["rate_rps"]
    out = require_rate(summary, speed * base)
    out["speed"] = speed
    out["reason"] = f"At {speed:g}x the trace's pace ({speed * base:.3g} req/s): {out['reason']}"
    return out


@dataclass(frozen=True)
class Speed:
    """``--require 2x``: a speed of a replayed trace."""

    factor: float


_SPEED = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*x\s*$")


@dataclass(frozen=True)
class Rate:
    """``--require 12/s``: an offered rate, requests per second."""

    per_s: float


_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(?:/s|req/s|rps)\s*$")


def requirement(s: str) -> int | Rate | Speed:
    """argparse type for ``--require``: a concurrency (a whole number >= 1), a rate (``12/s``) or a
    speed of a replayed trace (``2x``)."""
    m = _SPEED.match(s)
    if m and float(m.group(1)) > 0:
        return Speed(float(m.group(1)))
    m = _RATE.match(s)
    if m:
        rate = float(m.group(1))
        if rate > 0 and math.isfinite(rate):
            return Rate(rate)
    try:
        f = float(s)
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or f != int(f) or f < 1:
        raise argparse.ArgumentTypeError(
            f"must be a concurrency, a whole number >= 1, a rate such as 12/s or a trace's speed such as 2x, got {s!r}"
        )
    return int(f)
