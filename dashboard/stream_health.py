"""The report's stream health of a streamed run: per step, audio received and played over time for
a typical and the worst stream (the player of :mod:`analysis.playback`), the share of streams
that stalled, and the pre-roll and the peers' figures."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import UNDERRUN_RATE
from tts_knee.analysis.playback import pick_streams, playback
from tts_knee.runformat.reader import RunDir
from tts_knee.runformat.summary import Summary

from .kit import esc, stat
from .table import PEER_COLUMNS, PEER_NOTE, peer_rows

STREAM_COLOURS = {"typical": "#1f77b4", "worst": "#d62728"}
STREAM_COLS = 4  # subplots per row of the stream-health figure


def stream_figure(rd: RunDir, summary: Summary) -> go.Figure | None:
    """Per step, audio received and played (s) over time since t0 (s) of a typical and the worst
    stream; None when no step has a stream with chunk lists."""
    steps = [s for s in summary["steps"] if s.get("requests")]
    a = rd.requests.attempts()
    buffer_ms = rd.playback_buffer_ms()
    drawn = []
    for s in steps:
        number = s["step"]
        assert number is not None, "an executed step has its number"
        candidates = {
            name: (row, playback(at, audio, buffer_ms))
            for name, (row, at, audio) in pick_streams(a, rd.requests, number).items()
        }
        drawn.append((s, {k: (row, pb) for k, (row, pb) in candidates.items() if pb is not None}))
    if not any(p for _, p in drawn):
        return None
    cols = min(STREAM_COLS, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[
            f"{s['concurrency']} stream{'s' if s['concurrency'] != 1 else ''}: "
            + ("-" if s.get("underrun_rate") is None else f"{s['underrun_rate']:.0%} stalled")
            for s, _ in drawn
        ],
        horizontal_spacing=0.05,
        vertical_spacing=0.12,
    )
    shown = set()
    for i, (s, picks) in enumerate(drawn):
        r, c = i // cols + 1, i % cols + 1
        for name in ("typical", "worst"):
            if name not in picks:
                continue
            row, pb = picks[name]
            tid = a["text"][row]
            runs, silent = a["underruns"][row], a["underrun_ms"][row]  # the client's own figures
            runs, silent = (
                (runs, silent) if np.isfinite(runs) and np.isfinite(silent) else (pb.underruns, pb.underrun_ms)
            )
            label = (
                f"{name} stream at {s['concurrency']}: text {esc(a.texts[tid]) if tid >= 0 else '?'}, "
                f"TTFA {a['ttfa_ms'][row]:.0f} ms, {runs:.0f} stalls, {silent:.0f} ms silent"
            )
            colour = STREAM_COLOURS[name]
            fig.add_scatter(
                x=pb.received_t / 1000,
                y=pb.received / 1000,
                mode="lines",
                line_shape="hv",
                line=dict(color=colour, width=1),
                name=f"received ({name})",
                legendgroup=f"r{name}",
                showlegend=f"r{name}" not in shown,
                hovertext=label,
                hoverinfo="text+x+y",
                row=r,
                col=c,
            )
            fig.add_scatter(
                x=pb.played_t / 1000,
                y=pb.played / 1000,
                mode="lines",
                line=dict(color=colour, width=3, dash="dot"),
                name=f"played ({name})",
                legendgroup=f"p{name}",
                showlegend=f"p{name}" not in shown,
                hovertext=label,
                hoverinfo="text+x+y",
                row=r,
                col=c,
            )
            if pb.underruns:
                fig.add_scatter(
                    x=pb.stalls_t / 1000,
                    y=pb.stalls / 1000,
                    mode="markers",
                    marker=dict(color=colour, symbol="line-ns-open", size=9),
                    name=f"stall ({name})",
                    legendgroup=f"s{name}",
                    showlegend=f"s{name}" not in shown,
                    hovertext=label,
                    hoverinfo="text+x",
                    row=r,
                    col=c,
                )
                shown.add(f"s{name}")
            shown |= {f"r{name}", f"p{name}"}
    fig.update_xaxes(title_text="s since sent", rangemode="tozero")
    fig.update_yaxes(title_text="audio s", rangemode="tozero", col=1)
    fig.update_layout(height=300 * rows + 80, margin=dict(t=50, b=40, l=60, r=20))
    return fig


def underrun_figure(summary: Summary) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [str(s["concurrency"]) for s in steps]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Streams that stalled (%)", "Stall per stream (ms)"))
    fig.add_bar(
        x=labels,
        y=[None if (rate := s.get("underrun_rate")) is None else 100 * rate for s in steps],
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
    for key, q, name in (
        ("underrun_ms", "p95", "p95 stall"),
        ("underrun_ms", "max", "max stall"),
        ("gap_max_ms", "p95", "p95 largest gap between chunks"),
    ):
        fig.add_scatter(x=labels, y=[stat(s, key, q) for s in steps], name=name, mode="lines+markers", row=1, col=2)
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def peers_html(summary: Summary) -> str:
    """The table of the pre-roll and the peers' figures per step."""
    head = "".join(f"<th>{esc(c)}</th>" for c in PEER_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in peer_rows(summary))
    return f"<table><tr>{head}</tr>{body}</table><p class='meta'>{esc(PEER_NOTE)}</p>"


def stream_health_html(rd: RunDir, summary: Summary, underruns: str, streams: str) -> str:
    """The section around its two figures and its table as rendered (``streams`` "" when none
    could be drawn)."""
    return (
        f"<h2>Stream health: audio received vs played</h2>{underruns}{peers_html(summary)}"
        + (streams or "<p class='meta'>No stream carries chunk arrival times, so none can be drawn.</p>")
        + "<p class='meta'>Per step, the typical (median) and the worst stream, ranked by TTFA plus "
        "total stall. Thin staircase: audio received; dotted: audio played by a player that starts "
        + (f"once {rd.playback_buffer_ms():g} ms of audio is in" if rd.playback_buffer_ms() else "with the first audio")
        + " and plays at 1x, flat while it waits for the next chunk (a stall, marked with a tick).</p>"
    )
