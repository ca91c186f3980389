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


def _repeat_figures(s: StepSummary) -> dict[str, Any]:
    lat: Mapping[str, Any] = s.get("latency_ms") or {}
    ttfa: Mapping[str, Any] = s.get("ttfa_ms") or {}
    return {
        "step": s["step"],
        "phase": s.get("phase"),
        "repeat": s.get("repeat"),
        "p50_ms": lat.get("p50"),
        "p95_ms": lat.get("p95"),
        "throughput_rps": s.get("throughput_rps"),
        "ttfa_p95_ms": ttfa.get("p95"),
        "requests": s.get("requests"),
    }


def _spread(steps: list[StepSummary]) -> dict[str, Any]:
    rows = [_repeat_figures(s) for s in steps]
    out = {}
    for k in ("p50_ms", "p95_ms", "throughput_rps", "ttfa_p95_ms"):
        vals = [r[k] for r in rows if r[k] is not None]
        if vals:
            out[k] = [min(vals), max(vals)]
    out["by_repeat"] = rows
    return out


def _windowed_res(res: pd.DataFrame, windows: list[tuple[float, float]]) -> pd.DataFrame:
    if not len(res) or not windows:
        return res.iloc[0:0] if len(res) else res
    keep = np.zeros(len(res), dtype=bool)
    ts = res["ts"].to_numpy()
    for s, e in windows:
        keep |= (ts >= s) & (ts <= e)
    return res[keep]


def _pool(
    a: Attempts,
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
    nums = [s["step"] for s in steps]
    relabelled = np.where(np.isin(a["step"], np.asarray(nums)), _POOLED, a["step"])
    # computed afresh: what a live reader keeps is kept per step, not for a pool of them
    pooled = dataclasses.replace(a, cols={**a.cols, "step": relabelled}, lasting=None)
    c = steps[0]["concurrency"]
    # no start: the window comes from the records; every windowed figure is replaced below
    out = cast(
        dict[str, Any],
        step_stats(
            pooled,
            {"step": _POOLED, "concurrency": c, "start": None, "end": None},
            res.iloc[0:0] if len(res) else res,
            settle_s,
            **stats_kwargs,
        ),
    )
    wins = [s["window"] for s in steps if s["window"].get("duration_s")]
    dur = sum(w["duration_s"] for w in wins)
    spans = [(w["start"], w["end"]) for w in wins]
    done = sum(w["completions"] for w in wins)
    ok = sum(w["ok_completions"] for w in wins)
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
                "spans": [list(x) for x in spans],
                "completions": done,
                "ok_completions": ok,
                "open": any(s["window"].get("open") for s in steps),
            },
            "throughput_rps": ok / dur if dur else None,
            "completed_rps": done / dur if dur else None,
        }
    )
    for k in ("audio_s_per_s", "chars_per_s"):
        per = [
            (s[k], s["window"]["duration_s"]) for s in steps if s.get(k) is not None and s["window"].get("duration_s")
        ]
        out[k] = sum(x * d for x, d in per) / sum(d for _, d in per) if per else None
    out["rtfx"] = out["audio_s_per_s"]
    out["utterances_per_hour"] = None if out["throughput_rps"] is None else out["throughput_rps"] * 3600.0
    lit = [s["little"] for s in steps if s.get("little")]
    if lit:
        w = sum(x["window_s"] for x in lit)
        eff = sum(x["effective_concurrency"] * x["window_s"] for x in lit) / w
        expected = sum(x.get("expected_concurrency", c) * x["window_s"] for x in lit) / w
        out["little"] = {
            "effective_concurrency": eff,
            "expected_concurrency": expected,
            "ratio": eff / expected,
            "window_s": w,
        }
    else:
        out["little"] = None
    inside = _windowed_res(res, spans)
    lo, hi = (min(x[0] for x in spans), max(x[1] for x in spans)) if spans else (None, None)
    out["server"] = resource_aggregate(inside, "server", lo, hi, stats_kwargs.get("names"))
    out["client"] = resource_aggregate(inside, "client", lo, hi)
    if out["server"] is not None:
        last = steps[-1].get("server") or {}
        out["server"]["gpu_mem_fallback_bytes"] = last.get("gpu_mem_fallback_bytes")
    if figures is not None:
        out.update(figures(pooled, {"step": _POOLED, key: steps[0][key]}, cast(StepSummary, out), steps))
    return cast(StepSummary, out)


def levels(
    a: Attempts,
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
    for s in steps:
        if s.get("requests"):
            groups.setdefault(cast(dict[str, Any], s)[key], []).append(s)
    out: list[StepSummary] = []
    for c in sorted(groups):
        group = groups[c]
        lvl = cast(
            dict[str, Any],
            dict(group[0]) if len(group) == 1 else _pool(a, group, res, settle_s, stats_kwargs, key, figures),
        )
        lvl.update(
            {
                key: c,
                "steps": [s["step"] for s in group],
                "repeats": len(group),
                "spread": _spread(group) if len(group) > 1 else None,
            }
        )
        out.append(cast(StepSummary, lvl))
    return out
