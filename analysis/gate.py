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


def _shown(value: float, threshold: float, operator: str, scale: float, base_digits: int) -> str:
    """v (scaled) with the fewest digits >= base_digits that keep ``op(v, t)`` true as shown."""
    truth = _OPS[operator](value, threshold)
    for digits in range(base_digits, base_digits + 6):
        text = f"{value * scale:.{digits}f}"
        shown = float(text) / scale
        if _OPS[operator](shown, threshold) == truth and (shown != threshold or value == threshold):
            return text
    return f"{value * scale:.{base_digits + 6}f}"


def _threshold(threshold: float, scale: float) -> str:
    scaled = threshold * scale
    return f"{scaled:g}" if abs(scaled) < 1e6 else f"{scaled:.0f}"


def _base_digits(metric: str, scale: float) -> int:
    if metric.endswith("_ms"):
        return 2 if scale != 1.0 else 0
    if metric.endswith("_rate") or metric in ("gpu_util_pct", "gpu_mem_gb", "throughput_rps"):
        return 1
    return 2


def term_text(term: slo_mod.Term, level: StepSummary, verdict: SloVerdict) -> str:
    """One term at one level as published: label, value, comparison, threshold."""
    value = verdict["values"].get(term.metric)
    label = _LABEL[term.metric]
    scale, unit = _unit(term.metric, term.value)
    thr = _threshold(term.value, scale) + unit
    if value is None:
        return f"{label} not measured (needed {term.op} {thr})"
    digits = _base_digits(term.metric, scale)
    ci_txt, straddles = "", False
    if term.metric in _CI_OF:
        key, ci_key = _CI_OF[term.metric]
        figures: Mapping[str, object] = level
        dist = figures.get(key)
        interval = dist.get(ci_key) if isinstance(dist, dict) else None
        if interval:
            shown = ["unbounded" if bound is None else f"{bound * scale:.{digits}f}" for bound in interval]
            lower = -math.inf if interval[0] is None else interval[0]
            upper = math.inf if interval[1] is None else interval[1]
            ci_txt = f" (95% CI {shown[0]}-{shown[1]}{unit})"
            straddles = _OPS[term.op](lower, term.value) != _OPS[term.op](upper, term.value)
    if straddles:
        return f"{label} {value * scale:.{digits}f}{unit}{ci_txt} straddles {thr}"
    operator = term.op if _OPS[term.op](value, term.value) else _NEG[term.op]
    return f"{label} {_shown(value, term.value, term.op, scale, digits)}{unit}{ci_txt} {operator} {thr}"


def _context(level: StepSummary, slo: slo_mod.SLO) -> list[str]:
    """Resource and volume figures that belong in the claim even when no term names them."""
    named = {term.metric for term in slo.terms}
    srv = level.get("server")
    out = []
    res = []
    mem = srv.get("gpu_mem_peak_bytes") if srv else None
    if mem is not None and "gpu_mem_gb" not in named:
        res.append(f"GPU memory peak {mem / 1e9:.1f} GB")
    util_mean, util_max = (srv.get("gpu_util_mean"), srv.get("gpu_util_max")) if srv else (None, None)
    if util_mean is not None and "gpu_util_pct" not in named:
        res.append(f"GPU util {util_mean:.0f}% mean" + (f", {util_max:.0f}% peak" if util_max is not None else ""))
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
    terms = ", ".join(term_text(term, level, verdict) for term in slo.terms)
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


def require(summary: Summary, wanted: int, key: Literal["concurrency", "voices"] = "concurrency") -> Require:
    """The gate at concurrency ``wanted`` for a summary with ``slo``: ``{"concurrency", "holds",
    "exit", "claim" (None when it was not tested), "reason"}`` (see the module doc). In a voice
    sweep (``key`` "voices") ``wanted`` is a number of voices at the sweep's one load, the answer's
    ``voices``, and "lower" means fewer voices."""
    spec, slo, verdicts = _slo_of(summary)
    levels = summary.get("levels") or []
    tested = [tested_level[key] for tested_level in levels]
    voices = key == "voices"
    concurrency = (levels[0]["concurrency"] if levels else 0) if voices else wanted
    if wanted not in tested:
        return _gate(
            concurrency,
            wanted if voices else None,
            False,
            None,
            f"The SLO {spec} cannot be claimed at {wanted}{' voices' if voices else ''}: this run did not "
            f"test {wanted} (tested: {', '.join(map(str, tested)) or 'none'}).",
        )
    index = tested.index(wanted)
    level, verdict = levels[index], verdicts[index]
    load = f"{level['rate']:g} req/s offered" if level.get("rate") else f"{level['concurrency']} concurrent"
    text = claim(slo, level, verdict, f"{wanted} voices at {load}" if voices else None)
    holds, reason = _held(
        spec,
        levels,
        verdicts,
        index,
        here=str(wanted),
        held_at=str(wanted),
        every="tested number of voices" if voices else "tested concurrency",
        below=lambda tested_level: str(tested_level[key]),
        unsafe=f"{wanted} is not a safe limit",
    )
    return _gate(concurrency, wanted if voices else None, holds, text, reason)


def _held(
    spec: str,
    levels: list[StepSummary],
    verdicts: list[SloVerdict],
    index: int,
    here: str,
    held_at: str,
    every: str,
    below: Callable[[StepSummary], str],
    unsafe: str,
) -> tuple[bool, str]:
    """Whether the SLO holds at level ``i`` and at every level below it, and why in one
    sentence (``here``: level i as the sentence names it; ``below(level)`` a lower one)."""
    verdict = verdicts[index]
    if verdict["pass"] is False:
        return False, f"The SLO {spec} does not hold at {here}: {', '.join(verdict['failed'])}."
    if verdict["pass"] is None:
        return False, (
            f"The SLO {spec} is not shown to hold at {here}: {'; '.join(verdict['inconclusive'])}; "
            f"inconclusive counts as not holding."
        )
    lower = next(
        (
            (failed_level, failed_verdict)
            for failed_level, failed_verdict in zip(levels[:index], verdicts[:index])
            if failed_verdict["pass"] is not True
        ),
        None,
    )
    if lower is None:
        return True, f"The SLO {spec} holds at {held_at} and at every lower {every}."
    failed_level, failed_verdict = lower
    why = (
        ", ".join(failed_verdict["failed"])
        if failed_verdict["pass"] is False
        else "; ".join(failed_verdict["inconclusive"]) + ", inconclusive"
    )
    return False, f"The SLO {spec} is met at {here} but not at {below(failed_level)} below it ({why}), so {unsafe}."


def require_rate(summary: Summary, rate: float) -> Require:
    """The gate at ``rate`` req/s for an open-loop summary with ``slo``: ``{"concurrency": 0,
    "rate", "holds", "exit", "claim" (None when no tested rate reaches it), "reason"}`` (see
    the module doc)."""
    spec, slo, verdicts = _slo_of(summary)
    levels = summary.get("levels") or []
    rate_text = f"{rate:g} req/s"
    first_at = next((index for index, tested_level in enumerate(levels) if tested_level["rate"] >= rate), None)
    if first_at is None:
        tested = ", ".join(f"{tested_level['rate']:g}" for tested_level in levels) or "none"
        return {
            "concurrency": 0,
            "rate": rate,
            "holds": False,
            "exit": 1,
            "claim": None,
            "reason": f"The SLO {spec} cannot be claimed at {rate_text}: this run offered no rate that high "
            f"(tested: {tested} req/s).",
        }
    level, verdict = levels[first_at], verdicts[first_at]
    where = "" if level["rate"] == rate else f" (tested at {level['rate']:g} req/s, the lowest tested rate above it)"
    text = claim(slo, openloop.judged(level), verdict, f"{rate_text} offered{where}")
    holds, reason = _held(
        spec,
        levels,
        verdicts,
        first_at,
        here=f"{level['rate']:g} req/s",
        held_at=rate_text,
        every="tested rate",
        below=lambda tested_level: f"{tested_level['rate']:g} req/s",
        unsafe=f"{rate_text} is not a safe rate",
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


def requirement(text: str) -> int | Rate | Speed:
    """argparse type for ``--require``: a concurrency (a whole number >= 1), a rate (``12/s``) or a
    speed of a replayed trace (``2x``)."""
    match = _SPEED.match(text)
    if match and float(match.group(1)) > 0:
        return Speed(float(match.group(1)))
    match = _RATE.match(text)
    if match:
        rate = float(match.group(1))
        if rate > 0 and math.isfinite(rate):
            return Rate(rate)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise argparse.ArgumentTypeError(
            f"must be a concurrency, a whole number >= 1, a rate such as 12/s or a trace's speed such as 2x, "
            f"got {text!r}"
        )
    return int(number)
