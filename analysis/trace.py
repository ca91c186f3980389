"""Trace replay (``--trace``): the trace's bursts, and the summary's ``trace`` section.

**Bursts.** A trace's arrivals are scanned with a window of ``max(1 s, BURST_ARRIVALS / mean
rate)`` (about ten arrivals at the mean rate) starting at each arrival; a window holds a burst
when it holds at least ``BURST_RATIO`` (2x) the arrivals the mean rate gives it and that excess
is more than ``BURST_SIGMAS + sqrt(2 ln(windows))`` standard deviations of a Poisson count (2.5
and the largest of that many Gaussian draws: about 5.4 for a two-minute trace at 5 req/s, 7 for
a day's), so that a Poisson trace at its mean rate shows none, however long. Overlapping burst windows are one burst,
from its first
arrival to its last; the ``MAX_BURSTS`` with the most arrivals above the mean are kept.

**Per step.** A step at speed S that started at T replayed the trace's second x at T + x / S: a
burst's requests are the step's final attempts scheduled inside its window, and its ``p95_ms``
is their latency from the schedule (``sched_wait_ms``) beside ``p95_outside_ms``, the rest of
the step's, so the report shows what the burst did to the callers who came in it.

The section: the trace as run.json has it (``path``, ``rows``, ``duration_s``, ``rate_rps``,
``conversations``, ``bursts``), ``steps`` (``step``, ``speed``, ``rate``, ``bursts``), and the
run's answers on the speed axis: ``knee_speed``, ``recommended_speed`` and, with an SLO,
``max_speed`` (the rates' answers over the trace's rate).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import Summary, TracePart, TraceRows, TraceStep, TraceStepBurst

from .steps import dist, run_end_cut

BURST_ARRIVALS = 10
BURST_RATIO = 2.0
BURST_SIGMAS = 2.5
MAX_BURSTS = 10


def bursts(offsets: Sequence[float], duration_s: float) -> list[dict[str, Any]]:
    """The trace's bursts (see the module doc): ``{start_s, end_s, arrivals, rate_rps,
    times_mean}`` each, in trace order."""
    times = np.asarray(offsets, dtype=float)
    if len(times) < BURST_ARRIVALS or duration_s <= 0:
        return []
    mean = len(times) / duration_s
    width = max(1.0, BURST_ARRIVALS / mean)
    expected = mean * width
    counts = np.searchsorted(times, times + width, side="left") - np.arange(len(times))
    sigmas = BURST_SIGMAS + math.sqrt(2 * math.log(max(duration_s / width, 2.0)))  # more windows, more chances
    hot = (counts >= BURST_RATIO * expected) & (counts - expected > sigmas * math.sqrt(expected))
    found, i = [], 0
    while i < len(times):
        if not hot[i]:
            i += 1
            continue
        start, reach = times[i], times[i] + width
        j = i
        while j + 1 < len(times) and times[j + 1] < reach:
            j += 1
            if hot[j]:
                reach = max(reach, times[j] + width)
        nxt = j + 1
        gap = 1.0 / (BURST_RATIO * mean)  # arrivals further apart than this are not the burst's
        while j > i and times[j] - times[j - 1] > gap:
            j -= 1
        while i < j and times[i + 1] - times[i] > gap:
            i += 1
        start, last = times[i], times[j]
        n = j - i + 1
        span = max(last - start, width / BURST_ARRIVALS)
        found.append(
            {
                "start_s": float(start),
                "end_s": float(last),
                "arrivals": int(n),
                "rate_rps": float(n / span),
                "excess": n - mean * span,
            }
        )
        i = nxt
    found = sorted(sorted(found, key=lambda burst: -burst["excess"])[:MAX_BURSTS], key=lambda burst: burst["start_s"])
    for burst in found:
        burst["times_mean"] = float(burst["rate_rps"] / mean)
        del burst["excess"]
    return found


def section(attempts: Attempts, plan: Sequence[Mapping[str, Any]], info: dict[str, Any], summary: Summary) -> TracePart:
    """The summary's ``trace`` (see the module doc): ``info`` is run.json's ``trace``, ``plan``
    the run's steps (each with its ``rate`` and ``start``), ``summary`` the rest of the summary
    (its knee, recommendation and SLO, on rates)."""
    base = info.get("rate_rps")

    def speed(rate: object) -> float | None:
        return round(rate / base, 6) if isinstance(rate, (int, float)) and base else None

    steps: list[TraceStep] = []
    for planned in plan:
        speed_x = speed(planned.get("rate"))
        if speed_x is None:
            continue
        in_step = (attempts["step"] == planned["step"]) & attempts["final"]
        sched, wait, succeeded = (
            attempts["scheduled"][in_step],
            attempts["sched_wait_ms"][in_step],
            attempts["ok"][in_step],
        )
        inside = np.zeros(len(sched), dtype=bool)
        rows: list[TraceStepBurst] = []
        for burst in info.get("bursts") or []:
            if planned.get("start") is None:
                break
            start, end = planned["start"] + burst["start_s"] / speed_x, planned["start"] + burst["end_s"] / speed_x
            if planned.get("end") is not None and start >= planned["end"]:
                continue  # not replayed: the step's span ended before it
            inb = (sched >= start - 1e-6) & (sched <= end + 1e-6)
            inside |= inb
            lat = dist(wait[inb & succeeded])
            rows.append(
                {
                    "start_s": burst["start_s"],
                    "end_s": burst["end_s"],
                    "requests": int(inb.sum()),
                    "failed": int((inb & ~succeeded).sum()),
                    "p95_ms": lat["p95"] if lat else None,
                }
            )
        rest = dist(wait[~inside & succeeded])
        step: TraceStep = {
            "step": planned["step"],
            "speed": speed_x,
            "rate": planned["rate"],
            "offered_rps": planned.get("offered_rps"),
            "bursts": rows,
            "p95_outside_ms": rest["p95"] if rest else None,
        }
        arrivals = planned.get("arrivals")
        if arrivals is not None:
            step["replayed_rows"] = {
                "planned": arrivals["planned"],
                "sent": arrivals["sent"],
                "recorded": int(in_step.sum()),
                "cut_by_run_end": int((in_step & run_end_cut(attempts)).sum()),
                "dropped": arrivals["dropped"],
                "not_sent": arrivals["not_sent"],
            }
        steps.append(step)
    part: TracePart = {
        "path": info["path"],
        "rows": info["rows"],
        "duration_s": info["duration_s"],
        "rate_rps": info["rate_rps"],
        "conversations": info["conversations"],
        "bursts": info["bursts"],
        "steps": steps,
        "knee_speed": speed(summary["knee"].get("rate")),
        "recommended_speed": speed(summary.get("recommended_rate")),
    }
    slo = summary["slo"]
    if slo is not None:
        part["max_speed"] = speed(slo.get("max_rate"))
    counted = [traced["replayed_rows"] for traced in steps if "replayed_rows" in traced]
    if counted:
        part["replayed_rows"] = _rows_total(counted)
    return part


def _rows_total(per_step: Sequence[TraceRows]) -> TraceRows:
    """The steps' row counts summed."""
    not_sent: Counter[str] = Counter()
    for rows in per_step:
        not_sent.update(rows["not_sent"])
    return {
        "planned": sum(row["planned"] for row in per_step),
        "sent": sum(row["sent"] for row in per_step),
        "recorded": sum(row["recorded"] for row in per_step),
        "cut_by_run_end": sum(row["cut_by_run_end"] for row in per_step),
        "dropped": sum(row["dropped"] for row in per_step),
        "not_sent": dict(sorted(not_sent.items())),
    }
