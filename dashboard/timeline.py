"""The report's timeline: every attempt's wait at the time it was sent, and the server's (and the
load generator's) GPU utilisation, GPU memory and CPU on the same clock, each step a band (and
each burst of a replayed trace).

The attempt scatter is downsampled to ``MAX_POINTS``, keeping failures and retries first, and each
resource line to ``MAX_LINE_POINTS`` (the lowest and the highest sample of each stretch), so the
page stays small: a day's samples at one a second made a 30 MB page."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from tts_knee.analysis.steps import THROTTLE_STATUSES
from tts_knee.runformat.reader import Attempts, RunDir
from tts_knee.runformat.summary import StepSummary, Summary

from .kit import GIB, esc, fmt
from .view import RunView

MAX_POINTS = 20000
MAX_LINE_POINTS = 4000
CATEGORIES = (  # (name, colour, marker symbol) of the timeline scatter
    ("ok", "#1f77b4", "circle"),
    ("ok after retry", "#17becf", "diamond"),
    ("throttled 429/503", "#ff7f0e", "triangle-up"),
    ("server error", "#d62728", "x"),
    ("connection error", "#000000", "x-thin-open"),
    ("warm-up (not settled)", "#bbbbbb", "circle"),
)
ROWS = ("", "2", "3", "4")  # the figure's rows, as plotly suffixes their axes


def timeline_figure(rd: RunDir, view: RunView) -> go.Figure:
    attempts, resources = rd.requests.attempts(), rd.resources
    t_zero = view.summary["run"]["start"] or (float(np.nanmin(attempts["t0"])) if len(attempts) else 0.0)
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        row_heights=[0.4, 0.2, 0.2, 0.2],
        subplot_titles=("Every attempt: wait (ms)", "GPU utilisation (%)", "GPU memory (GiB)", "CPU (%)"),
    )
    _attempt_markers(fig, attempts, t_zero, view.open_loop)
    _resource_lines(fig, resources, t_zero)
    if not len(resources) or not resources["gpu_util_percent"].notna().any():
        _no_gpu_notes(fig)
    _step_bands(fig, view, t_zero)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="seconds since run start", row=4, col=1)
    fig.update_layout(
        height=900, margin=dict(t=40, b=40, l=60, r=20), hovermode="closest", legend=dict(orientation="h", y=-0.08)
    )
    return fig


def _sample(attempts: Attempts, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row indices to plot and their index into :data:`CATEGORIES`; failures and retries first,
    then a uniform sample."""
    failed = ~attempts["ok"]
    category = np.zeros(len(attempts), dtype=np.int8)
    category[attempts["ok"] & (attempts["attempt"] > 1)] = 1
    category[failed] = 3
    category[failed & np.isin(attempts["status"], THROTTLE_STATUSES)] = 2
    category[failed & (attempts["status"] < 0)] = 4
    category[~attempts["settled"]] = 5
    marked = np.flatnonzero((category >= 1) & (category <= 4))  # retried or failed, settled
    plain = np.flatnonzero((category == 0) | (category == 5))
    if len(marked) > MAX_POINTS:
        marked = np.sort(rng.choice(marked, MAX_POINTS, replace=False))
    room = MAX_POINTS - len(marked)
    if len(plain) > room:
        plain = np.sort(rng.choice(plain, room, replace=False))
    rows = np.concatenate([marked, plain])
    return rows, category[rows]


def _attempt_markers(fig: go.Figure, attempts: Attempts, t_zero: float, open_loop: bool) -> None:
    """The top row: each attempt (:func:`_sample`'s) at the time it was sent, its wait (where it has
    none, its time to the end), marked by what came of it."""
    rows, category = _sample(attempts, np.random.default_rng(0))
    wait = attempts["wait_ms"][rows]
    wait = np.where(np.isfinite(wait), wait, (attempts["tend"][rows] - attempts["t0"][rows]) * 1000)
    sent = attempts["t0"][rows] - t_zero
    # an open-loop attempt's concurrency is the number in flight when it was sent
    load = "{} in flight at sending" if open_loop else "concurrency {}"
    for index, (name, colour, symbol) in enumerate(CATEGORIES):
        in_category = category == index
        if not in_category.any():
            continue
        fig.add_scatter(
            x=sent[in_category],
            y=wait[in_category],
            mode="markers",
            name=name,
            text=_hover(attempts, rows[in_category], load),
            hovertemplate="%{text}<br>%{y:.0f} ms at %{x:.1f} s<extra></extra>",
            marker=dict(color=colour, symbol=symbol, size=5 if index else 4, opacity=0.5 if index in (0, 5) else 0.9),
            row=1,
            col=1,
        )


def _hover(attempts: Attempts, rows: np.ndarray, load: str) -> list[str]:
    """Each attempt's hover text: its text, ``load`` (a format of its concurrency), its attempt
    number and status, and its error."""
    columns = (attempts[name][rows] for name in ("text", "concurrency", "attempt", "status", "error"))
    return [
        f"text {esc(attempts.texts[text]) if text >= 0 else '-'}<br>{load.format(concurrency)}, attempt {number}, "
        f"status {status if status >= 0 else 'none'}"
        + (f"<br>{esc(attempts.errors[error][:160])}" if error >= 0 else "")
        for text, concurrency, number, status, error in zip(*columns)
    ]


def _thin(times: ArrayLike, values: ArrayLike, most: int = MAX_LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A line of at most ``most`` points: past that, each of ``most / 2`` stretches of consecutive
    samples keeps its lowest and its highest, in time order, so a spike still shows."""
    times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    count = len(values)
    if count <= most:
        return times, values
    width = -(-count // (most // 2))
    padded = np.full(width * -(-count // width), np.nan)
    padded[:count] = values
    stretches = padded.reshape(-1, width)
    starts = np.arange(len(stretches)) * width
    lowest = starts + np.argmin(np.where(np.isnan(stretches), np.inf, stretches), axis=1)
    highest = starts + np.argmax(np.where(np.isnan(stretches), -np.inf, stretches), axis=1)
    keep = np.unique(np.concatenate([lowest, highest]))
    keep = keep[keep < count]
    return times[keep], values[keep]


def _line(fig: go.Figure, times: ArrayLike, values: ArrayLike, **style: object) -> None:
    """A resource line, thinned (:func:`_thin`)."""
    times, values = _thin(times, values)
    fig.add_scatter(x=times, y=values, mode="lines", **style)


def _resource_lines(fig: go.Figure, resources: pd.DataFrame, t_zero: float) -> None:
    """Rows 2 to 4: each server's GPU utilisation, GPU memory and CPU, and the load generators' CPU."""
    if not len(resources):
        fig.add_annotation(
            text="no resource samples (resources.jsonl missing)",
            xref="x2 domain",
            yref="y2 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
        )
        return
    for host, samples in resources[resources["role"] == "server"].groupby("host"):
        _server_lines(fig, esc(host), samples, samples["ts"] - t_zero)
    for host, samples in resources[resources["role"] == "client"].groupby("host"):
        style = dict(line=dict(color="#8c564b"), row=4, col=1)
        _line(fig, samples["ts"] - t_zero, samples["cpu_percent"], name=f"client CPU {esc(host)}", **style)


def _server_lines(fig: go.Figure, host: str, samples: pd.DataFrame, times: pd.Series) -> None:
    """One server host's lines, each where its samples carry it."""
    if samples["gpu_util_percent"].notna().any():
        _line(fig, times, samples["gpu_util_percent"], name=f"GPU util {host}", row=2, col=1)
    if samples["gpu_mem_used_bytes"].notna().any():
        _line(fig, times, samples["gpu_mem_used_bytes"] / GIB, name=f"GPU memory {host}", row=3, col=1)
        total = samples["gpu_mem_total_bytes"].dropna()
        if len(total):
            fig.add_hline(
                y=float(total.max()) / GIB,
                line=dict(color="#999", dash="dot"),
                row=3,
                col=1,
                annotation_text="total",
                annotation_position="top left",
            )
    _line(fig, times, samples["cpu_percent"], name=f"server CPU {host}", row=4, col=1)
    busiest = dict(name=f"server busiest core {host}", line=dict(dash="dot"), row=4, col=1)
    _line(fig, times, samples["cpu_max_core_percent"], **busiest)
    if samples["proc_cpu_percent"].notna().any():
        process = dict(name=f"TTS process CPU {host}", line=dict(dash="dash"), row=4, col=1)
        _line(fig, times, samples["proc_cpu_percent"], **process)


def _no_gpu_notes(fig: go.Figure) -> None:
    """A line in each GPU row saying why it is empty."""
    for axis in ("yaxis2", "yaxis3"):
        low, high = fig.layout[axis].domain
        fig.add_annotation(
            text="no GPU samples: a CPU-only server, or no collector with NVML on it",
            xref="paper",
            yref="paper",
            x=0.5,
            y=(low + high) / 2,
            showarrow=False,
            font=dict(color="#777"),
        )


def _band(start: float, end: float, colour: str, opacity: float) -> list[dict]:
    """A band from ``start`` to ``end`` (s since the run's start) on every row (plotly shapes)."""
    return [
        dict(
            type="rect",
            xref=f"x{row}",
            yref=f"y{row} domain",
            x0=start,
            x1=end,
            y0=0,
            y1=1,
            fillcolor=colour,
            opacity=opacity,
            layer="below",
            line_width=0,
        )
        for row in ROWS
    ]


def _step_bands(fig: go.Figure, view: RunView, t_zero: float) -> None:
    """Each step as a band on every row (the knee's shaded red) with its load above it, and a
    replayed trace's bursts."""
    # Every band and label added in one go: plotly's add_vrect(row="all") re-validates every
    # shape already there, which took seconds for a long sweep.
    bands, labels = [], []
    for index, step in enumerate(view.summary["steps"]):
        start = step["planned_start"] if step["planned_start"] is not None else step["window"]["start"]
        end = step["planned_end"] if step["planned_end"] is not None else step["window"]["end"]
        if start is None or end is None:
            continue
        colour = "#fdecea" if step.get(view.key) == view.knee else ("#f2f2f2" if index % 2 else "#e8eef7")
        bands += _band(start - t_zero, end - t_zero, colour, 0.6)
        labels.append(
            dict(
                x=(start + end) / 2 - t_zero,
                y=1.0,
                xref="x",
                yref="y domain",
                text=_load_label(step, view.open_loop),
                showarrow=False,
                font=dict(size=11, color="#555"),
            )
        )
    bands += _burst_bands(view.summary, t_zero)
    fig.update_layout(shapes=list(fig.layout.shapes) + bands, annotations=list(fig.layout.annotations) + labels)


def _load_label(step: StepSummary, open_loop: bool) -> str:
    """The load a step held, above its band: ``N=4``, an offered rate ``2.5 req/s`` or a trace's speed ``2x``."""
    if not open_loop:
        return f"N={step['concurrency']}"
    return f"{step['speed']:g}x" if step.get("speed") else f"{fmt(step.get('rate'), '{:g}')} req/s"


def _burst_bands(summary: Summary, t_zero: float) -> list[dict]:
    """Each burst of a replayed trace (``--trace``) as each step replayed it."""
    trace = summary.get("trace")
    if not trace:
        return []
    starts = {step["step"]: step.get("planned_start") for step in summary["steps"]}
    bands = []
    for step in trace["steps"]:
        start = starts.get(step["step"])
        if start is None:
            continue
        for burst in step["bursts"]:
            first = start + burst["start_s"] / step["speed"] - t_zero
            last = start + burst["end_s"] / step["speed"] - t_zero
            bands += _band(first, max(last, first + 0.2), "#f6c343", 0.35)
    return bands
