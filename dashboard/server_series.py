"""The report's section on the server's own metrics: its series on the run's timeline, and per
step its queue against GPU and CPU utilisation (the picture that tells a saturated server from
one whose concurrency limit is too low). Empty when no sample carries ``metrics``."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.server_metrics import timeline
from tts_knee.runformat.reader import RunDir
from tts_knee.runformat.summary import Summary

from .kit import esc, fig_html, step_axis, step_label


def _get(s, *path):
    for p in path:
        s = None if s is None else s.get(p)
    return s


def server_figure(rd: RunDir, summary: Summary) -> go.Figure | None:
    series = timeline(rd.resources)
    if not series:
        return None
    t_zero = summary["run"]["start"] or min(min(xs) for xs, _ in series.values())
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.14,
        row_heights=[0.55, 0.45],
        specs=[[{}], [{"secondary_y": True}]],
        subplot_titles=(
            "The server's own series (counters as per second)",
            "Per step: the server's queue against GPU and CPU",
        ),
    )
    for name, (xs, ys) in series.items():
        fig.add_scatter(x=[x - t_zero for x in xs], y=ys, name=esc(name), mode="lines", connectgaps=False, row=1, col=1)
    steps = [s for s in summary["steps"] if s.get("server")]
    conc = [step_label(s) for s in steps]
    queue = [_get(s, "server", "server_roles", "queue_depth") for s in steps]
    if any(queue):
        label = next(q["series"] for q in queue if q)
        fig.add_bar(
            x=conc,
            y=[q["max"] if q else None for q in queue],
            name=f"{esc(label)} max",
            marker_color="#d62728",
            opacity=0.5,
            row=2,
            col=1,
            secondary_y=False,
        )
        fig.add_bar(
            x=conc,
            y=[q["mean"] if q else None for q in queue],
            name=f"{esc(label)} mean",
            marker_color="#d62728",
            row=2,
            col=1,
            secondary_y=False,
        )
    running = [_get(s, "server", "server_roles", "running") for s in steps]
    if any(running):
        fig.add_scatter(
            x=conc,
            y=[r["max"] if r else None for r in running],
            mode="lines+markers",
            name="running requests max",
            line=dict(color="#9467bd"),
            row=2,
            col=1,
            secondary_y=False,
        )
    for key, name, colour in (
        ("gpu_util_mean", "GPU util mean %", "#2ca02c"),
        ("cpu_mean", "server CPU mean %", "#1f77b4"),
    ):
        ys = [_get(s, "server", key) for s in steps]
        if any(v is not None for v in ys):
            fig.add_scatter(
                x=conc, y=ys, mode="lines+markers", name=name, line=dict(color=colour), row=2, col=1, secondary_y=True
            )
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="%", range=[0, 105], row=2, col=1, secondary_y=True)
    fig.update_xaxes(title_text="seconds since run start", row=1, col=1)
    fig.update_xaxes(title_text=step_axis(summary), type="category", row=2, col=1)
    fig.update_layout(
        height=700, barmode="overlay", margin=dict(t=40, b=40, l=60, r=60), legend=dict(orientation="h", y=-0.12)
    )
    return fig


def server_section(rd: RunDir, summary: Summary) -> str:
    fig = server_figure(rd, summary)
    if fig is None:
        return ""
    return (
        "<h2>The server's own metrics</h2>"
        + fig_html(fig, False)
        + "<p class='meta'>Series scraped from the server's Prometheus endpoint (collector "
        "--scrape or Locust --server-metrics); a break in a line is a scrape that did not "
        "answer. A queue that grows while GPU and CPU stay low is the server's own "
        "concurrency limit; one that grows with them saturated is its capacity.</p>"
    )
