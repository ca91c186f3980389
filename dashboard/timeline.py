"""The report's timeline: every attempt's wait at the time it was sent, and the server's (and the
load generator's) GPU utilisation, GPU memory and CPU on the same clock, each step a band.

The attempt scatter is downsampled to ``MAX_POINTS``, keeping failures and retries first, and each
resource line to ``MAX_LINE_POINTS`` (the lowest and the highest sample of each stretch), so the
page stays small: a day's samples at one a second made a 30 MB page."""

from __future__ import annotations

from typing import Literal

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from tts_knee.analysis.steps import THROTTLE_STATUSES
from tts_knee.runformat.reader import Attempts, RunDir
from tts_knee.runformat.summary import Summary

from .kit import GIB, esc, is_open_loop, step_label
from .trace import burst_bands

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


def _sample(a: Attempts, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row indices to plot and their category; failures and retries first, then a uniform sample."""
    n = len(a)
    cat = np.zeros(n, dtype=np.int8)
    cat[a["ok"] & (a["attempt"] > 1)] = 1
    status = a["status"]
    cat[~a["ok"]] = 3
    cat[~a["ok"] & np.isin(status, THROTTLE_STATUSES)] = 2
    cat[~a["ok"] & (status < 0)] = 4
    cat[~a["settled"]] = 5
    special = np.flatnonzero((cat >= 1) & (cat <= 4))
    plain = np.flatnonzero((cat == 0) | (cat == 5))
    if len(special) > MAX_POINTS:
        special = np.sort(rng.choice(special, MAX_POINTS, replace=False))
    room = MAX_POINTS - len(special)
    if len(plain) > room:
        plain = np.sort(rng.choice(plain, room, replace=False))
    idx = np.concatenate([special, plain])
    return idx, cat[idx]


def _thin(x: ArrayLike, y: ArrayLike, most: int = MAX_LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A line of at most ``most`` points: past that, each of ``most / 2`` stretches of consecutive
    samples keeps its lowest and its highest, in time order, so a spike still shows."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(y)
    if n <= most:
        return x, y
    width = -(-n // (most // 2))
    padded = np.full(width * -(-n // width), np.nan)
    padded[:n] = y
    rows = padded.reshape(-1, width)
    base = np.arange(len(rows)) * width
    low = base + np.argmin(np.where(np.isnan(rows), np.inf, rows), axis=1)
    high = base + np.argmax(np.where(np.isnan(rows), -np.inf, rows), axis=1)
    keep = np.unique(np.concatenate([low, high]))
    keep = keep[keep < n]
    return x[keep], y[keep]


def _line(fig: go.Figure, x: ArrayLike, y: ArrayLike, **kwargs: object) -> None:
    """A resource line, thinned (:func:`_thin`)."""
    x, y = _thin(x, y)
    fig.add_scatter(x=x, y=y, mode="lines", **kwargs)


def timeline_figure(rd: RunDir, summary: Summary) -> go.Figure:
    a = rd.requests.attempts()
    res = rd.resources
    t_zero = summary["run"]["start"] or (float(np.nanmin(a["t0"])) if len(a) else 0.0)
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        row_heights=[0.4, 0.2, 0.2, 0.2],
        subplot_titles=("Every attempt: wait (ms)", "GPU utilisation (%)", "GPU memory (GiB)", "CPU (%)"),
    )
    open_loop = is_open_loop(summary)
    # an open-loop attempt's concurrency is the number in flight when it was sent
    conc_text = "{} in flight at sending" if open_loop else "concurrency {}"
    idx, cat = _sample(a, np.random.default_rng(0))
    y = a["wait_ms"][idx]
    y = np.where(np.isfinite(y), y, (a["tend"][idx] - a["t0"][idx]) * 1000)
    x = a["t0"][idx] - t_zero
    for ci, (name, colour, symbol) in enumerate(CATEGORIES):
        sel = cat == ci
        if not sel.any():
            continue
        rows = idx[sel]
        hover = [
            f"text {esc(a.texts[t]) if t >= 0 else '-'}<br>{conc_text.format(c)}, attempt {at}, status "
            f"{s if s >= 0 else 'none'}" + (f"<br>{esc(a.errors[e][:160])}" if e >= 0 else "")
            for t, c, at, s, e in zip(
                a["text"][rows], a["concurrency"][rows], a["attempt"][rows], a["status"][rows], a["error"][rows]
            )
        ]
        fig.add_scatter(
            x=x[sel],
            y=y[sel],
            mode="markers",
            name=name,
            text=hover,
            hovertemplate="%{text}<br>%{y:.0f} ms at %{x:.1f} s<extra></extra>",
            marker=dict(color=colour, symbol=symbol, size=5 if ci else 4, opacity=0.5 if ci in (0, 5) else 0.9),
            row=1,
            col=1,
        )
    if len(res):
        srv, cli = res[res["role"] == "server"], res[res["role"] == "client"]
        for host, g in srv.groupby("host"):
            tx = g["ts"] - t_zero
            h = esc(host)
            if g["gpu_util_percent"].notna().any():
                _line(fig, tx, g["gpu_util_percent"], name=f"GPU util {h}", row=2, col=1)
            if g["gpu_mem_used_bytes"].notna().any():
                _line(fig, tx, g["gpu_mem_used_bytes"] / GIB, name=f"GPU memory {h}", row=3, col=1)
                tot = g["gpu_mem_total_bytes"].dropna()
                if len(tot):
                    fig.add_hline(
                        y=float(tot.max()) / GIB,
                        line=dict(color="#999", dash="dot"),
                        row=3,
                        col=1,
                        annotation_text="total",
                        annotation_position="top left",
                    )
            _line(fig, tx, g["cpu_percent"], name=f"server CPU {h}", row=4, col=1)
            _line(
                fig, tx, g["cpu_max_core_percent"], name=f"server busiest core {h}", line=dict(dash="dot"), row=4, col=1
            )
            if g["proc_cpu_percent"].notna().any():
                _line(fig, tx, g["proc_cpu_percent"], name=f"TTS process CPU {h}", line=dict(dash="dash"), row=4, col=1)
        for host, g in cli.groupby("host"):
            _line(
                fig,
                g["ts"] - t_zero,
                g["cpu_percent"],
                name=f"client CPU {esc(host)}",
                line=dict(color="#8c564b"),
                row=4,
                col=1,
            )
    else:
        fig.add_annotation(
            text="no resource samples (resources.jsonl missing)",
            xref="x2 domain",
            yref="y2 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
        )
    if not len(res) or not res["gpu_util_percent"].notna().any():
        for axis in ("yaxis2", "yaxis3"):
            lo, hi = fig.layout[axis].domain
            fig.add_annotation(
                text="no GPU samples: a CPU-only server, or no collector with NVML on it",
                xref="paper",
                yref="paper",
                x=0.5,
                y=(lo + hi) / 2,
                showarrow=False,
                font=dict(color="#777"),
            )
    load: Literal["rate", "concurrency"] = "rate" if open_loop else "concurrency"
    knee = summary["knee"][load]
    # Each step's band on every row, and its label, added in one go: plotly's add_vrect(row="all")
    # re-validates every shape already there, which took seconds for a long sweep.
    bands, labels = [], []
    for i, s in enumerate(summary["steps"]):
        start = s["planned_start"] if s["planned_start"] is not None else (s["window"]["start"])
        end = s["planned_end"] if s["planned_end"] is not None else (s["window"]["end"])
        if start is None or end is None:
            continue
        colour = "#fdecea" if s.get(load) == knee else ("#f2f2f2" if i % 2 else "#e8eef7")
        for row in ("", "2", "3", "4"):
            bands.append(
                dict(
                    type="rect",
                    xref=f"x{row}",
                    yref=f"y{row} domain",
                    x0=start - t_zero,
                    x1=end - t_zero,
                    y0=0,
                    y1=1,
                    fillcolor=colour,
                    opacity=0.6,
                    layer="below",
                    line_width=0,
                )
            )
        labels.append(
            dict(
                x=(start + end) / 2 - t_zero,
                y=1.0,
                xref="x",
                yref="y domain",
                text=(f"{s['speed']:g}x" if s.get("speed") else f"{step_label(s)} req/s")
                if open_loop
                else f"N={s['concurrency']}",
                showarrow=False,
                font=dict(size=11, color="#555"),
            )
        )
    bands += burst_bands(summary, t_zero)  # --trace: where each step replayed the trace's bursts
    fig.update_layout(shapes=list(fig.layout.shapes) + bands, annotations=list(fig.layout.annotations) + labels)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="seconds since run start", row=4, col=1)
    fig.update_layout(
        height=900, margin=dict(t=40, b=40, l=60, r=20), hovermode="closest", legend=dict(orientation="h", y=-0.08)
    )
    return fig
