"""The report's stream health of a streamed run: per step, audio received and played over time for
a typical and the worst stream (the player of :mod:`analysis.playback`), the share of streams
that stalled, and the pre-roll and the peers' figures."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import UNDERRUN_RATE
from tts_knee.analysis.playback import Playback, pick_streams, playback
from tts_knee.runformat.reader import Attempts, RunDir
from tts_knee.runformat.summary import StepSummary

from .kit import esc, stat
from .table import PEER_COLUMNS, PEER_NOTE, peer_rows
from .view import RunView

STREAM_COLOURS = {"typical": "#1f77b4", "worst": "#d62728"}
STREAM_COLS = 4  # subplots per row of the stream-health figure


def stream_figure(rd: RunDir, view: RunView) -> go.Figure | None:
    """Per step, audio received and played (s) over time since t0 (s) of a typical and the worst
    stream; None when no step has a stream with chunk lists."""
    attempts = rd.requests.attempts()
    buffer_ms = rd.playback_buffer_ms()
    drawn: list[tuple[StepSummary, dict[str, tuple[int, Playback]]]] = []
    for step in view.executed:
        number = step["step"]
        assert number is not None, "an executed step has its number"
        played = {
            name: (row, playback(sent_at, audio, buffer_ms))
            for name, (row, sent_at, audio) in pick_streams(attempts, rd.requests, number).items()
        }
        drawn.append((step, {name: (row, heard) for name, (row, heard) in played.items() if heard is not None}))
    if not any(picks for _, picks in drawn):
        return None
    cols = min(STREAM_COLS, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[
            f"{step['concurrency']} stream{'s' if step['concurrency'] != 1 else ''}: "
            + ("-" if step.get("underrun_rate") is None else f"{step['underrun_rate']:.0%} stalled")
            for step, _ in drawn
        ],
        horizontal_spacing=0.05,
        vertical_spacing=0.12,
    )
    shown: set[str] = set()
    for index, (step, picks) in enumerate(drawn):
        for name in ("typical", "worst"):
            if name in picks:
                row, heard = picks[name]
                label = _stream_label(attempts, row, heard, f"{name} stream at {step['concurrency']}")
                _stream_lines(fig, heard, name, label, shown, index // cols + 1, index % cols + 1)
    fig.update_xaxes(title_text="s since sent", rangemode="tozero")
    fig.update_yaxes(title_text="audio s", rangemode="tozero", col=1)
    fig.update_layout(height=300 * rows + 80, margin=dict(t=50, b=40, l=60, r=20))
    return fig


def _stream_label(attempts: Attempts, row: int, heard: Playback, which: str) -> str:
    """A drawn stream's hover text: its text, TTFA and stalls (the client's own, else the player's)."""
    text = attempts["text"][row]
    stalls, silent = attempts["underruns"][row], attempts["underrun_ms"][row]
    if not (np.isfinite(stalls) and np.isfinite(silent)):
        stalls, silent = heard.underruns, heard.underrun_ms
    return (
        f"{which}: text {esc(attempts.texts[text]) if text >= 0 else '?'}, "
        f"TTFA {attempts['ttfa_ms'][row]:.0f} ms, {stalls:.0f} stalls, {silent:.0f} ms silent"
    )


def _stream_lines(fig: go.Figure, heard: Playback, name: str, label: str, shown: set[str], row: int, col: int) -> None:
    """One stream's audio received (a staircase), played (dotted) and its stalls (ticks), in the
    panel at ``row``, ``col``; each legend entry once (``shown``)."""
    colour, drawn = STREAM_COLOURS[name], "text+x+y"
    received = dict(mode="lines", line_shape="hv", line=dict(color=colour, width=1), hoverinfo=drawn)
    played = dict(mode="lines", line=dict(color=colour, width=3, dash="dot"), hoverinfo=drawn)
    stall = dict(mode="markers", marker=dict(color=colour, symbol="line-ns-open", size=9), hoverinfo="text+x")
    lines: list[tuple[str, np.ndarray, np.ndarray, dict[str, Any]]] = [
        ("received", heard.received_t, heard.received, received),
        ("played", heard.played_t, heard.played, played),
    ]
    if heard.underruns:
        lines.append(("stall", heard.stalls_t, heard.stalls, stall))
    for what, times, seconds, style in lines:
        group = f"{what[0]}{name}"
        fig.add_scatter(
            x=times / 1000,
            y=seconds / 1000,
            name=f"{what} ({name})",
            legendgroup=group,
            showlegend=group not in shown,
            hovertext=label,
            row=row,
            col=col,
            **style,
        )
        shown.add(group)


def underrun_figure(view: RunView) -> go.Figure:
    steps = view.executed
    labels = [str(step["concurrency"]) for step in steps]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Streams that stalled (%)", "Stall per stream (ms)"))
    fig.add_bar(
        x=labels,
        y=[None if (rate := step.get("underrun_rate")) is None else 100 * rate for step in steps],
        name="streams with >= 1 underrun",
        marker_color="#d62728",
        row=1,
        col=1,
    )
    fig.add_hline(
        y=100 * UNDERRUN_RATE,
        line=dict(color="#999", dash="dash"),
        row=1,
        col=1,
        annotation_text=f"{UNDERRUN_RATE:.0%}: the step breaks",
    )
    for key, quantile, name in (
        ("underrun_ms", "p95", "p95 stall"),
        ("underrun_ms", "max", "max stall"),
        ("gap_max_ms", "p95", "p95 largest gap between chunks"),
    ):
        values = [stat(step, key, quantile) for step in steps]
        fig.add_scatter(x=labels, y=values, name=name, mode="lines+markers", row=1, col=2)
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def peers_html(view: RunView) -> str:
    """The table of the pre-roll and the peers' figures per step."""
    head = "".join(f"<th>{esc(column)}</th>" for column in PEER_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in peer_rows(view))
    return f"<table><tr>{head}</tr>{body}</table><p class='meta'>{esc(PEER_NOTE)}</p>"


def stream_health_html(rd: RunDir, view: RunView, underruns: str, streams: str) -> str:
    """The section around its two figures and its table as rendered (``streams`` "" when none
    could be drawn)."""
    return (
        f"<h2>Stream health: audio received vs played</h2>{underruns}{peers_html(view)}"
        + (streams or "<p class='meta'>No stream carries chunk arrival times, so none can be drawn.</p>")
        + "<p class='meta'>Per step, the typical (median) and the worst stream, ranked by TTFA plus "
        "total stall. Thin staircase: audio received; dotted: audio played by a player that starts "
        + (f"once {rd.playback_buffer_ms():g} ms of audio is in" if rd.playback_buffer_ms() else "with the first audio")
        + " and plays at 1x, flat while it waits for the next chunk (a stall, marked with a tick).</p>"
    )
