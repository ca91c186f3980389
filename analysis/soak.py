"""Drift over a soak (``--soak``): one level held for a long time, cut into windows, and each
figure tested for a trend (:mod:`analysis.trend`: Theil–Sen slope, Mann–Kendall test).

**Windows**: the soak step's settled span (its start plus its settle time, to its end) cut
into windows of ``WINDOW_S`` (a minute), or, for a soak shorter than ``MIN_WINDOWS`` minutes,
into ``MIN_WINDOWS`` equal windows of at least ``MIN_WINDOW_S``, so that even a short soak
has points enough for a trend. A last window shorter than half the others is left out; while
the soak still runs (the live view), so is a last window not yet whole: its figures would be
read from part of it.

**Per window**: the requests sent in it (settled final attempts by ``t0``), how many failed,
and the latency p50/p95 of the successful ones (``wait_ms``; from the schedule,
``sched_wait_ms``, in an open-loop run); ``ttfa_p95_ms`` in a streamed run; throughput (the
successful completions inside it per second, as a step's); and per host the median over the
window's samples of the server's RSS (the collector's watched process), its GPU memory, and
the load generator's RSS (the master's own process, each worker's heartbeat): a median, so one
spike is not a level.

**Trends**: per figure (and host), over the windows from where it is steady on
(:func:`analysis.trend.steady_from`): the Theil–Sen slope per minute with its 95% interval
and the Mann–Kendall p-value. A figure *drifts* when the test says so (p < ``ALPHA``), the
slope goes the bad way (latency and memory up, throughput down), and the change it amounts
to over the steady windows is material: at least ``MIN_CHANGE`` of the figure's level (and,
for memory, ``MIN_MEMORY_BYTES``; for latency, ``MIN_LATENCY_MS``), so that a slope too small
to matter over the soak is not a verdict however significant. Each drift is one sentence in
``drift``, e.g. "server RSS grew 310 MB over 60 min, 5.2 MB/min, steady after 0 min: a leak".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tts_knee.runformat.fields import NotRequired, TypedDict
from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import Soak, SoakTrend, SoakWindow

from . import trend

WINDOW_S = 60.0
MIN_WINDOWS = 12
MIN_WINDOW_S = 5.0
#: The Mann–Kendall level a drift must reach.
ALPHA = 0.01
#: A drift must change its figure by at least this share of the figure's level over the
#: steady windows …
MIN_CHANGE = {"latency": 0.10, "throughput": 0.10, "memory": 0.02}
#: … and by at least this much.
MIN_MEMORY_BYTES = 8e6
MIN_LATENCY_MS = 5.0
MB = 1e6

#: (figure, kind, unit, what it is called, which way is bad)
_FIGURES = (
    ("p50_ms", "latency", "ms", "p50 latency", 1),
    ("p95_ms", "latency", "ms", "p95 latency", 1),
    ("ttfa_p95_ms", "latency", "ms", "p95 time to first audio", 1),
    ("throughput_rps", "throughput", "req/s", "throughput", -1),
)
_MEMORY = (
    ("server_rss_bytes", "server", "proc_rss_bytes", "server RSS", "a leak"),
    ("gpu_mem_bytes", "server", "gpu_mem_used_bytes", "GPU memory", "a leak"),
    ("client_rss_bytes", "client", "proc_rss_bytes", "the load generator's RSS", "the load generator leaks"),
)


def window_s(duration_s: float) -> float:
    """The window length for a soak of ``duration_s`` (see the module doc)."""
    if duration_s >= MIN_WINDOWS * WINDOW_S:
        return WINDOW_S
    return max(MIN_WINDOW_S, duration_s / MIN_WINDOWS)


def _edges(start: float, end: float, width: float, still_open: bool = False) -> list[tuple[float, float]]:
    """The windows of ``width`` from ``start`` to ``end``; a last one of at least half the width
    counts, unless the soak is still running (``still_open``): then only whole windows do."""
    count = int((end - start) // width)
    edges = [(start + i * width, start + (i + 1) * width) for i in range(count)]
    if not still_open and end - (start + count * width) >= width / 2:
        edges.append((start + count * width, end))
    return edges


def _pct(values: np.ndarray, percentile: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, percentile)) if len(finite) else None


class _RequestFigures(TypedDict):
    """A soak window's request figures (:class:`runformat.summary.SoakWindow`'s)."""

    requests: int
    ok: int
    failed: int
    error_rate: float | None
    throughput_rps: float
    p50_ms: float | None
    p95_ms: float | None
    ttfa_p95_ms: NotRequired[float | None]


def _medians(
    res: pd.DataFrame, role: str, column: str, edges: list[tuple[float, float]]
) -> dict[str, list[float | None]]:
    """Per host of ``role``: the median of ``column`` in each window (None where none)."""
    if not len(res):
        return {}
    samples = res[(res["role"] == role) & res[column].notna()]
    out = {}
    for host, host_samples in samples.groupby("host", sort=True):
        sample_ts, vals = host_samples["ts"].to_numpy(), host_samples[column].to_numpy()
        meds: list[float | None] = []
        for start, end in edges:
            sel = vals[(sample_ts >= start) & (sample_ts < end)]
            meds.append(float(np.median(sel)) if len(sel) else None)
        if any(median is not None for median in meds):
            out[str(host)] = meds
    return out


def windows(
    attempts: Attempts, step: Mapping[str, Any], res: pd.DataFrame, open_loop: bool, streamed: bool, width: float
) -> list[SoakWindow]:
    """The soak step's windows of ``width`` seconds (``step``: its step summary, whose
    ``window`` is the settled span), each with its figures (see the module doc). A live
    reader's attempts keep each window's figures and recompute only the windows the rows read
    since fall in."""
    win = step["window"]
    if not win.get("duration_s"):
        return []
    edges = _edges(win["start"], win["end"], width, bool(win.get("open")))
    memory = {name: _medians(res, role, col, edges) for name, role, col, _, _ in _MEMORY}
    figures = _request_figures(attempts, step, edges, open_loop, streamed)

    def at(name: str, i: int) -> dict[str, float]:
        return {host: med for host, meds in memory[name].items() if (med := meds[i]) is not None}

    return [
        {
            "start": start,
            "end": end,
            **figures[i],
            "server_rss_bytes": at("server_rss_bytes", i),
            "gpu_mem_bytes": at("gpu_mem_bytes", i),
            "client_rss_bytes": at("client_rss_bytes", i),
        }
        for i, (start, end) in enumerate(edges)
    ]


def _request_figures(
    attempts: Attempts, step: Mapping[str, Any], edges: list[tuple[float, float]], open_loop: bool, streamed: bool
) -> list[_RequestFigures]:
    """Each window's request figures: from the rows sent in it, and the completions inside it."""
    mine = (attempts["step"] == step["step"]) & attempts["settled"] & attempts["final"]
    done_ok = attempts["final"] & attempts["ok"]
    key = ("soak", step["step"], edges[0][0], edges[0][1] - edges[0][0], open_loop, streamed)
    kept = None if attempts.lasting is None else attempts.lasting.get(key)
    cached: dict[int, tuple[float, _RequestFigures]]
    count = len(attempts)
    if kept is not None and kept[0] <= count:
        rows, cached = kept
        new = slice(rows, count)
        touched = set(_window_of(edges, attempts["t0"][new][mine[new]]).tolist())
        touched |= set(_window_of(edges, attempts["tend"][new][done_ok[new]], right=True).tolist())
    else:
        cached, touched = {}, set(range(len(edges)))
    latency = attempts["sched_wait_ms"] if open_loop else attempts["wait_ms"]
    sent_at, tend = attempts["t0"], attempts["tend"]
    out: list[_RequestFigures] = []
    for i, (start, end) in enumerate(edges):
        if i in cached and i not in touched and cached[i][0] == end:
            out.append(cached[i][1])
            continue
        sent = mine & (sent_at >= start) & (sent_at < end)
        ok_sent = sent & attempts["ok"]
        got, got_ok = int(sent.sum()), int(ok_sent.sum())
        fig: _RequestFigures = {
            "requests": got,
            "ok": got_ok,
            "failed": got - got_ok,
            "error_rate": (got - got_ok) / got if got else None,
            "throughput_rps": int((done_ok & (tend > start) & (tend <= end)).sum()) / (end - start),
            "p50_ms": _pct(latency[ok_sent], 50),
            "p95_ms": _pct(latency[ok_sent], 95),
        }
        if streamed:
            fig["ttfa_p95_ms"] = _pct(attempts["ttfa_ms"][ok_sent], 95)
        cached[i] = (end, fig)
        out.append(fig)
    if attempts.lasting is not None:
        attempts.lasting[key] = (count, cached)
    return out


def _window_of(edges: list[tuple[float, float]], times: np.ndarray, right: bool = False) -> np.ndarray:
    """The index of the window each time falls in (windows are [start, end), or (start, end] with
    ``right``); times outside every window are left out."""
    starts = np.array([start for start, _ in edges])
    ends = np.array([window_end for _, window_end in edges])
    times = times[np.isfinite(times)]
    index = np.searchsorted(starts, times, side="left" if right else "right") - 1
    end = ends[np.clip(index, 0, None)]
    inside = (index >= 0) & ((times <= end) if right else (times < end))
    return index[inside]


def per_host(row: SoakWindow, key: str) -> dict[str, float]:
    """A window's figure per host (``key``: one of the memory figures)."""
    figure: Mapping[str, object] = row
    held = figure.get(key)
    return held if isinstance(held, dict) else {}


def _series(rows: list[SoakWindow], key: str, host: str | None) -> tuple[np.ndarray, np.ndarray]:
    """A window figure (``key``; a host's, for a figure per host) over the windows that have it:
    (the windows' middles, the figure)."""
    times: list[float] = []
    values: list[float] = []
    for row in rows:
        figure: Mapping[str, object] = row
        value = figure.get(key)
        if host is not None:
            value = value.get(host) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            times.append((row["start"] + row["end"]) / 2.0)
            values.append(value)
    return np.array(times, dtype=float), np.array(values, dtype=float)


def _minutes(seconds: float) -> str:
    minutes = seconds / 60.0
    return f"{minutes:.0f} min" if minutes >= 10 or minutes == int(minutes) else f"{minutes:.1f} min"


def _amount(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / MB:.0f} MB" if abs(value) >= 10 * MB else f"{value / MB:.1f} MB"
    if unit == "req/s":
        return f"{value:.2f} req/s"
    return f"{value:.0f} ms"


def _trend(
    rows: list[SoakWindow],
    key: str,
    host: str | None,
    kind: str,
    unit: str,
    name: str,
    bad_sign: int,
    meaning: str,
    duration_s: float,
    named: bool = False,
) -> SoakTrend | None:
    """One figure's trend (see the module doc); ``named``: the verdict names the host (the
    figure has several)."""
    times, values = _series(rows, key, host)
    if len(values) < trend.MIN_POINTS:
        return None
    steady_index = trend.steady_from(times, values)
    fit = trend.theil_sen(times[steady_index:], values[steady_index:])
    if fit is None:
        return None
    slope, lower, upper = (per_second * 60.0 for per_second in fit)  # per minute
    p_value = trend.mann_kendall(times[steady_index:], values[steady_index:])
    span_min = (times[-1] - times[steady_index]) / 60.0
    level = float(np.median(values[steady_index:]))
    change = slope * span_min
    floor = {"memory": MIN_MEMORY_BYTES, "latency": MIN_LATENCY_MS}.get(kind, 0.0)
    drifts = (
        p_value is not None
        and p_value < ALPHA
        and slope * bad_sign > 0
        and abs(change) >= max(MIN_CHANGE[kind] * abs(level), floor)
    )
    out: SoakTrend = {
        "figure": key,
        "host": host,
        "unit": unit,
        "windows": int(len(values)),
        "first": float(values[0]),
        "last": float(values[-1]),
        "steady_after_s": float(times[steady_index] - times[0]),
        "slope_per_min": slope,
        "slope_ci": [lower, upper],
        "p_value": p_value,
        "drift": bool(drifts),
        "verdict": None,
    }
    if drifts:
        who = f"{name} ({host})" if named else name
        moved = values[-1] - values[0]
        if kind == "memory":
            what = f"grew {_amount(moved, unit)}"
        elif kind == "latency":
            what = f"rose from {_amount(values[0], unit)} to {_amount(values[-1], unit)}"
        else:
            what = f"fell from {_amount(values[0], unit)} to {_amount(values[-1], unit)}"
        rate = _amount(slope, unit) + "/min"
        out["verdict"] = (
            f"{who} {what} over {_minutes(duration_s)}, {rate}, "
            f"steady after {_minutes(times[steady_index] - times[0])}: {meaning}"
        )
    return out


def soak(
    attempts: Attempts,
    step: Mapping[str, Any],
    res: pd.DataFrame,
    open_loop: bool,
    streamed: bool,
    planned_s: float | None = None,
) -> Soak:
    """The summary's ``soak`` for the soak step ``step`` (its step summary); ``planned_s``: the
    soak's length as run (``--soak``), which sizes the windows (else the span they cover)."""
    win = step["window"]
    duration = win.get("duration_s") or 0.0
    width = window_s(planned_s or duration) if duration else None
    rows = windows(attempts, step, res, open_loop, streamed, width) if width else []
    trends = []
    for key, kind, unit, name, sign in _FIGURES:
        if key == "ttfa_p95_ms" and not streamed:
            continue
        meaning = (
            "requests slow down as the run goes on"
            if kind == "latency"
            else "the server serves less as the run goes on"
        )
        got = _trend(rows, key, None, kind, unit, name, sign, meaning, duration)
        if got:
            trends.append(got)
    for key, _, _, name, meaning in _MEMORY:
        hosts = sorted({host_name for row in rows for host_name in per_host(row, key)})
        for host in hosts:
            got = _trend(rows, key, host, "memory", "bytes", name, 1, meaning, duration, len(hosts) > 1)
            if got:
                trends.append(got)
    return {
        "step": step["step"],
        "concurrency": step["concurrency"],
        "rate": step.get("rate"),
        "start": win.get("start"),
        "end": win.get("end"),
        "duration_s": duration or None,
        "window_s": width,
        "windows": rows,
        "trends": trends,
        "drift": [
            verdict
            for figure_trend in trends
            if figure_trend["drift"] and (verdict := figure_trend["verdict"]) is not None
        ],
        "method": (
            f"Theil-Sen slope and Mann-Kendall test (p < {ALPHA:g}) over each figure's windows "
            f"from where it is steady on"
        ),
    }
