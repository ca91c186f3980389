"""The report's section on the server's own metrics: its series on the run's timeline, and per
step its queue against GPU and CPU utilisation (the picture that tells a saturated server from
one whose concurrency limit is too low); for a server of stages, each stage's queue and compute
on the timeline and per step (which stage's queue grew). Empty when no sample carries
``metrics``."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.server_metrics import stage_timeline, timeline
from tts_knee.runformat.metric_roles import ServerNames
from tts_knee.runformat.reader import RunDir
from tts_knee.runformat.summary import StepSummary

from .kit import Renderer, esc
from .view import RunView


def _get(part: object, *path: str) -> Any:
    """``part[path[0]][path[1]]…``, None where any of them is missing."""
    for key in path:
        part = part.get(key) if isinstance(part, dict) else None
    return part


def server_figure(rd: RunDir, view: RunView) -> go.Figure | None:
    series = timeline(rd.resources)
    if not series:
        return None
    t_zero = view.summary["run"]["start"] or min(min(times) for times, _ in series.values())
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
    for name, (times, values) in series.items():
        since = [time - t_zero for time in times]
        fig.add_scatter(x=since, y=values, name=esc(name), mode="lines", connectgaps=False, row=1, col=1)
    steps = [step for step in view.summary["steps"] if step.get("server")]
    labels = [view.labels[step["step"]] for step in steps]
    queue = [_get(step, "server", "server_roles", "queue_depth") for step in steps]
    if any(queue):
        label = next(role["series"] for role in queue if role)
        fig.add_bar(
            x=labels,
            y=[role["max"] if role else None for role in queue],
            name=f"{esc(label)} max",
            marker_color="#d62728",
            opacity=0.5,
            row=2,
            col=1,
            secondary_y=False,
        )
        fig.add_bar(
            x=labels,
            y=[role["mean"] if role else None for role in queue],
            name=f"{esc(label)} mean",
            marker_color="#d62728",
            row=2,
            col=1,
            secondary_y=False,
        )
    running = [_get(step, "server", "server_roles", "running") for step in steps]
    if any(running):
        fig.add_scatter(
            x=labels,
            y=[role["max"] if role else None for role in running],
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
        values = [_get(step, "server", key) for step in steps]
        if any(value is not None for value in values):
            style = dict(mode="lines+markers", line=dict(color=colour), row=2, col=1, secondary_y=True)
            fig.add_scatter(x=labels, y=values, name=name, **style)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="%", range=[0, 105], row=2, col=1, secondary_y=True)
    fig.update_xaxes(title_text="seconds since run start", row=1, col=1)
    fig.update_xaxes(title_text=view.axis.title, type="category", row=2, col=1)
    fig.update_layout(
        height=700, barmode="overlay", margin=dict(t=40, b=40, l=60, r=60), legend=dict(orientation="h", y=-0.12)
    )
    return fig


#: A stage's colour, by its place among the stages (Plotly's default cycle).
STAGE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _staged(steps: list[StepSummary]) -> tuple[str, list[str]] | None:
    """(the stage label, the stages the summary kept, in order of first appearance); None for a
    server of one stage."""
    label, kept = None, {}
    for step in steps:
        server = step.get("server")
        if server and server.get("stages"):
            label = label or server.get("stage_label")
            kept.update(dict.fromkeys(server.get("stages") or {}))
    return (label or "stage", list(kept)) if kept else None


def stage_figure(rd: RunDir, view: RunView) -> go.Figure | None:
    """Each stage's queue over the run and, per step, its queue time and compute time per request."""
    steps = [step for step in view.summary["steps"] if step.get("server")]
    staged = _staged(steps)
    if staged is None:
        return None
    label, kept = staged
    lines = stage_timeline(rd.resources, ServerNames(stage_label=label))
    t_zero = view.summary["run"]["start"] or 0.0
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.16,
        specs=[[{}], [{"secondary_y": True}]],
        subplot_titles=(
            f"Each stage over the run (by {esc(label)}): requests waiting (lines) and in compute (dots)",
            "Per step: each stage's queue time (bars) and compute time (lines) per request",
        ),
    )
    labels = [view.labels[step["step"]] for step in steps]
    for index, stage in enumerate(kept):
        colour, name = STAGE_COLOURS[index % len(STAGE_COLOURS)], esc(f"{label} {stage}")
        own = lines.get(stage, {})
        queue = "queue_depth" if "queue_depth" in own else "queue_ms"
        for role, what, dash in (
            (queue, "waiting" if queue == "queue_depth" else "queue ms", None),
            ("busy", "in compute", "dot"),
        ):
            if role in own:
                times, values = own[role]
                fig.add_scatter(
                    x=[time - t_zero for time in times],
                    y=values,
                    name=f"{name} {what}",
                    mode="lines",
                    line=dict(color=colour, dash=dash),
                )
        for key, secondary, trace in (("queue_ms", False, "bar"), ("compute_ms", True, "line")):
            values = [_get(step, "server", "stages", stage, key, "mean") for step in steps]
            if not any(value is not None for value in values):
                continue
            shown = f"{name} {'queue' if key == 'queue_ms' else 'compute'} ms"
            if trace == "bar":
                fig.add_bar(x=labels, y=values, name=shown, marker_color=colour, row=2, col=1, secondary_y=secondary)
            else:
                fig.add_scatter(
                    x=labels,
                    y=values,
                    name=shown,
                    mode="lines+markers",
                    line=dict(color=colour, dash="dot"),
                    row=2,
                    col=1,
                    secondary_y=secondary,
                )
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="queue ms", rangemode="tozero", row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="compute ms", rangemode="tozero", row=2, col=1, secondary_y=True)
    fig.update_xaxes(title_text="seconds since run start", row=1, col=1)
    fig.update_xaxes(title_text=view.axis.title, type="category", row=2, col=1)
    fig.update_layout(
        height=640, barmode="group", margin=dict(t=40, b=40, l=60, r=60), legend=dict(orientation="h", y=-0.14)
    )
    return fig


def _one_stage_note(view: RunView) -> str:
    """Said once where the server's roles are read but its stages cannot be told apart."""
    steps = view.summary["steps"]
    if _staged(steps) is not None or not any(_get(step, "server", "server_roles") for step in steps):
        return ""
    return (
        "<p class='meta'>One stage: the server's series carry no stage label (Triton's model, vLLM-Omni's "
        "stage, or the one --server-stage-label names) that tells two stages apart, so its queue is read as "
        "one.</p>"
    )


def server_section(rd: RunDir, view: RunView, render: Renderer) -> str:
    fig = server_figure(rd, view)
    if fig is None:
        return ""
    stages = stage_figure(rd, view)
    return (
        "<h2>The server's own metrics</h2>"
        + render(fig)
        + "<p class='meta'>Series scraped from the server's Prometheus endpoint (collector "
        "--scrape or Locust --server-metrics); a break in a line is a scrape that did not "
        "answer. A queue that grows while GPU and CPU stay low is the server's own "
        "concurrency limit; one that grows with them saturated is its capacity.</p>"
        + _one_stage_note(view)
        + (
            ""
            if stages is None
            else "<h3>The server's stages</h3>"
            + render(stages)
            + "<p class='meta'>Each stage's own series (its queue, the time a request waited in it and "
            "the time it computed): the stage whose queue grows while the others hold is the one that "
            "broke; the verdict names it.</p>"
        )
    )
