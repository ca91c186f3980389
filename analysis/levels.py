"""Levels: a run's steps grouped by what they tested (a concurrency, or an open-loop run's
offered rate), in ascending order.

A run's steps need not climb: ``--refine`` tests 6 and 5 after 16, and ``--repeat N`` tests each
concurrency N times.  The knee, the SLO verdicts and the recommendation are judged per *level*
(one per concurrency tested, sorted), while ``summary.json`` ``steps`` keeps every executed step
in the order run.

A level tested by one step is that step's figures.  A level tested by several steps is judged
on their pooled records, so every figure means what it means for one step:

- Everything computed from records (latency, TTFB, end-to-end and TTFA distributions and their
  intervals, requests, failures, error rate, statuses, retries, errors, stages, tiers) is
  computed over the union of those steps' settled records, exactly as for one step.
- Figures that belong to a step's window add the windows up: ``throughput_rps`` and
  ``completed_rps`` are the completions inside the windows over their total length,
  ``audio_s_per_s`` and ``chars_per_s`` likewise, Little's law's effective (and expected) concurrency is the
  window-weighted mean.
- Server and client resources are aggregated over the samples inside any of the windows (peaks
  are the highest, means are over all those samples); the GPU memory level right after the step
  is the last of them's.

``spread`` then shows how far the repeats disagree: min and max over the repeats of p50, p95 and
throughput (and TTFA p95 in a streamed run), with each repeat's figures in ``by_repeat``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import pandas as pd

from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import StepSummary

from .steps import resource_aggregate, step_stats

_POOLED = -2  # the step number pooled records are relabelled with (no record carries it)

# what a pooled level needs beyond step_stats: figures(attempts, entry, stats, steps) (openloop.level_figures)
Figures = Callable[[Attempts, dict[str, Any], StepSummary, list[dict[str, Any]]], dict[str, Any]]


def _repeat_figures(step: StepSummary) -> dict[str, Any]:
    lat: Mapping[str, Any] = step.get("latency_ms") or {}
    ttfa: Mapping[str, Any] = step.get("ttfa_ms") or {}
    return {
        "step": step["step"],
        "phase": step.get("phase"),
        "repeat": step.get("repeat"),
        "p50_ms": lat.get("p50"),
        "p95_ms": lat.get("p95"),
        "throughput_rps": step.get("throughput_rps"),
        "ttfa_p95_ms": ttfa.get("p95"),
        "requests": step.get("requests"),
    }


def _spread(steps: list[StepSummary]) -> dict[str, Any]:
    rows = [_repeat_figures(step) for step in steps]
    out = {}
    for figure in ("p50_ms", "p95_ms", "throughput_rps", "ttfa_p95_ms"):
        vals = [row[figure] for row in rows if row[figure] is not None]
        if vals:
            out[figure] = [min(vals), max(vals)]
    out["by_repeat"] = rows
    return out


def _windowed_res(res: pd.DataFrame, windows: list[tuple[float, float]]) -> pd.DataFrame:
    if not len(res) or not windows:
        return res.iloc[0:0] if len(res) else res
    keep = np.zeros(len(res), dtype=bool)
    sample_ts = res["ts"].to_numpy()
    for start, end in windows:
        keep |= (sample_ts >= start) & (sample_ts <= end)
    return res[keep]


def _pool(
    attempts: Attempts,
    typed_steps: list[StepSummary],
    res: pd.DataFrame,
    settle_s: float | None,
    stats_kwargs: dict[str, Any],
    key: str,
    figures: Figures | None,
) -> StepSummary:
    """One step dict over the pooled records and windows of ``steps`` (see the module doc)."""
    # read and written as open JSON: the windows' figures are filtered for presence (which the
    # checker cannot narrow through a comprehension), and a pooled window has no settle_s
    steps = cast(list[dict[str, Any]], typed_steps)
    nums = [step["step"] for step in steps]
    relabelled = np.where(np.isin(attempts["step"], np.asarray(nums)), _POOLED, attempts["step"])
    # computed afresh: what a live reader keeps is kept per step, not for a pool of them
    pooled = dataclasses.replace(attempts, cols={**attempts.cols, "step": relabelled}, lasting=None)
    concurrency = steps[0]["concurrency"]
    # no start: the window comes from the records; every windowed figure is replaced below
    out = cast(
        dict[str, Any],
        step_stats(
            pooled,
            {"step": _POOLED, "concurrency": concurrency, "start": None, "end": None},
            res.iloc[0:0] if len(res) else res,
            settle_s,
            **stats_kwargs,
        ),
    )
    wins = [step["window"] for step in steps if step["window"].get("duration_s")]
    dur = sum(window["duration_s"] for window in wins)
    spans = [(window["start"], window["end"]) for window in wins]
    done = sum(window["completions"] for window in wins)
    ok_done = sum(window["ok_completions"] for window in wins)
    out.update(
        {
            "step": None,
            "planned_start": None,
            "planned_end": None,
            "window": {
                "start": None,
                "end": None,
                "duration_s": dur or None,
                "source": "pooled",
                "spans": [list(span) for span in spans],
                "completions": done,
                "ok_completions": ok_done,
                "open": any(step["window"].get("open") for step in steps),
            },
            "throughput_rps": ok_done / dur if dur else None,
            "completed_rps": done / dur if dur else None,
        }
    )
    for figure in ("audio_s_per_s", "chars_per_s"):
        per = [
            (step[figure], step["window"]["duration_s"])
            for step in steps
            if step.get(figure) is not None and step["window"].get("duration_s")
        ]
        out[figure] = (
            sum(value * duration for value, duration in per) / sum(duration for _, duration in per) if per else None
        )
    out["rtfx"] = out["audio_s_per_s"]
    out["utterances_per_hour"] = None if out["throughput_rps"] is None else out["throughput_rps"] * 3600.0
    lit = [step["little"] for step in steps if step.get("little")]
    if lit:
        window_s = sum(little["window_s"] for little in lit)
        eff = sum(little["effective_concurrency"] * little["window_s"] for little in lit) / window_s
        expected = (
            sum(little.get("expected_concurrency", concurrency) * little["window_s"] for little in lit) / window_s
        )
        out["little"] = {
            "effective_concurrency": eff,
            "expected_concurrency": expected,
            "ratio": eff / expected,
            "window_s": window_s,
        }
    else:
        out["little"] = None
    inside = _windowed_res(res, spans)
    span_start, span_end = (min(span[0] for span in spans), max(span[1] for span in spans)) if spans else (None, None)
    out["server"] = resource_aggregate(inside, "server", span_start, span_end, stats_kwargs.get("names"))
    out["client"] = resource_aggregate(inside, "client", span_start, span_end)
    if out["server"] is not None:
        last = steps[-1].get("server") or {}
        out["server"]["gpu_mem_fallback_bytes"] = last.get("gpu_mem_fallback_bytes")
    if figures is not None:
        out.update(figures(pooled, {"step": _POOLED, key: steps[0][key]}, cast(StepSummary, out), steps))
    return cast(StepSummary, out)


def levels(
    attempts: Attempts,
    steps: list[StepSummary],
    res: pd.DataFrame,
    settle_s: float | None = None,
    key: str = "concurrency",
    figures: Figures | None = None,
    **stats_kwargs: Any,
) -> list[StepSummary]:
    """One step-like dict per tested level (``step[key]``: its concurrency, its ``rate``, or its
    number of ``voices`` in a voice sweep) with settled requests, ascending (see the module doc);
    each adds ``steps`` (the step numbers pooled, in run order), ``repeats`` and ``spread`` (None
    for a level tested once).  ``steps`` are ``step_stats`` outputs; ``stats_kwargs`` go to
    ``step_stats`` for pooled levels (the options their steps had); ``figures(attempts, entry,
    stats, steps)`` adds what a pooled level needs beyond ``step_stats`` (the open-loop figures),
    over its relabelled records."""
    groups: dict[Any, list[StepSummary]] = {}
    for step in steps:
        if step.get("requests"):
            groups.setdefault(cast(dict[str, Any], step)[key], []).append(step)
    out: list[StepSummary] = []
    for level_value in sorted(groups):
        group = groups[level_value]
        lvl = cast(
            dict[str, Any],
            dict(group[0]) if len(group) == 1 else _pool(attempts, group, res, settle_s, stats_kwargs, key, figures),
        )
        lvl.update(
            {
                key: level_value,
                "steps": [step["step"] for step in group],
                "repeats": len(group),
                "spread": _spread(group) if len(group) > 1 else None,
            }
        )
        out.append(cast(StepSummary, lvl))
    return out
