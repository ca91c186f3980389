"""The report's per-step breakdowns: where the time goes (client stages and Server-Timing), retries
and throttling, the failed attempts, GPU memory (baseline, peak, fall-back), latency by text
length, by voice and by language, and audio integrity."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.steps import INTEGRITY_ABS_S, INTEGRITY_REL

from .kit import GIB, esc, figures, fmt, number, orphaned_words, stat
from .view import RunView


def stages_figure(view: RunView) -> go.Figure:
    labels = [view.labels[step["step"]] for step in view.executed]
    stages = view.summary.get("server_timing_stages") or []
    fig = make_subplots(
        rows=1,
        cols=2 if stages else 1,
        subplot_titles=("Client stages, mean ms per step", "Server-Timing stages, mean ms")
        if stages
        else ("Client stages, mean ms per step",),
    )

    def means(key: str) -> list[float | None]:
        return [stat(step, key, "mean") for step in view.executed]

    ttfb, wait = means("ttfb_ms"), means("latency_ms")
    body = [None if whole is None or first is None else max(0.0, whole - first) for whole, first in zip(wait, ttfb)]
    for name, values in (
        ("ttfb", ttfb),
        ("rest of wait (body)", body),
        ("write", means("write_ms")),
        ("concat", means("concat_ms")),
    ):
        if any(values):
            fig.add_bar(x=labels, y=values, name=name, row=1, col=1)
    for stage in stages:
        fig.add_bar(
            x=labels,
            y=[figures(step["server_timing_ms"].get(stage)).get("mean") for step in view.executed],
            name=f"server: {esc(stage)}",
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text=view.axis.title, type="category")
    fig.update_layout(barmode="stack", height=380, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def has_retry_after(view: RunView) -> bool:
    """Whether any step's answers carried a Retry-After header (else the report says so in a line)."""
    return any(figures(step.get("retry_after_s")).get("max") is not None for step in view.summary["steps"])


NO_RETRY_AFTER = "<p class='meta'>No answer carried a Retry-After header: there is no Retry-After to draw.</p>"
NO_GPU_MEMORY = (
    "<p class='meta'>No GPU memory was sampled (no collector beside a GPU server, or its GPU does not report "
    "memory): there is nothing to draw.</p>"
)


def retries_figure(view: RunView) -> go.Figure:
    """Attempts by status, Retry-After per step where any answer carried one, attempt 1 vs retries."""
    steps = view.executed
    labels = [view.labels[step["step"]] for step in steps]
    retry_after = has_retry_after(view)
    titles = ("Attempts by status", "Retry-After (s)", "Attempt 1 vs retries")
    fig = make_subplots(rows=1, cols=3 if retry_after else 2, subplot_titles=titles if retry_after else titles[::2])
    for status in sorted({status for step in steps for status in step["status_counts"]}):
        fig.add_bar(
            x=labels,
            y=[step["status_counts"].get(status, 0) for step in steps],
            name=f"status {esc(status)}",
            legendgroup="status",
            row=1,
            col=1,
        )
    for figure, symbol in (("mean", "circle"), ("max", "triangle-up")) if retry_after else ():
        fig.add_scatter(
            x=labels,
            y=[figures(step.get("retry_after_s")).get(figure) for step in steps],
            name=f"Retry-After {figure}",
            mode="markers+lines",
            marker=dict(symbol=symbol),
            row=1,
            col=2,
        )
    for attempt in ("1", "2", "3+"):
        fig.add_bar(
            x=labels,
            y=[step["attempts_by_number"][attempt] for step in steps],
            name=f"attempt {attempt}",
            row=1,
            col=3 if retry_after else 2,
        )
    fig.update_xaxes(title_text=view.axis.title, type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(barmode="stack", height=360, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def errors_html(view: RunView) -> str:
    rows = [
        f"<tr><td>{esc(view.labels[step['step']])}</td><td>{esc(error['count'])}</td>"
        f"<td class='l'>{esc(error['error'])}</td></tr>"
        for step in view.summary["steps"]
        for error in step.get("errors", [])
    ]
    if not rows:
        return "<p class='meta'>No failed attempts.</p>"
    return (
        f"<table><tr><th>{esc(view.axis.title)}</th><th>attempts</th><th class='l'>error</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def memory_figure(view: RunView) -> go.Figure | None:
    """GPU memory per step (peak, right after, baseline, after the run); None where none was sampled."""
    sampled = [(step, server) for step in view.summary["steps"] if (server := step.get("server"))]
    if not any(server.get("gpu_mem_peak_bytes") is not None for _, server in sampled):
        return None
    labels = [view.labels[step["step"]] for step, _ in sampled]

    def gib(key: str) -> list[float | None]:
        return [None if (held := number(server, key)) is None else held / GIB for _, server in sampled]

    fig = go.Figure()
    fig.add_bar(x=labels, y=gib("gpu_mem_peak_bytes"), name="peak during step", marker_color="#9467bd")
    fig.add_scatter(
        x=labels,
        y=gib("gpu_mem_fallback_bytes"),
        name="right after the step (the next step's, when steps follow each other)",
        mode="lines+markers",
        line=dict(color="#ff7f0e", width=3),
    )
    baseline = view.summary.get("gpu_memory_baseline_bytes")
    if baseline is not None:
        fig.add_hline(y=baseline / GIB, line=dict(color="#2ca02c", dash="dash"), annotation_text="baseline before load")
    after = view.summary.get("gpu_memory_after_run_bytes")
    if after is not None:
        fig.add_hline(
            y=after / GIB,
            line=dict(color="#d62728", dash="dash"),
            annotation_text="after the run",
            annotation_position="bottom right",
        )
    total = next((held for held in gib("gpu_mem_total_bytes") if held), None)
    if total:
        fig.add_hline(y=total, line=dict(color="#999", dash="dot"), annotation_text="total")
    fig.update_layout(
        title="GPU memory per step (GiB)",
        height=340,
        xaxis_title=view.axis.title,
        xaxis_type="category",
        margin=dict(t=40, b=40, l=60, r=20),
    )
    return fig


#: Most labels (voices, languages) one breakdown draws: the most requested.
GROUP_LINES = 12


def tier_figure(view: RunView) -> go.Figure | None:
    return group_figure(view, "latency_by_tier_ms", "text-length tier")


def group_figure(view: RunView, key: str, what: str, fewest: int = 1) -> go.Figure | None:
    """p50 and p95 wait per step of each label of ``key`` (``latency_by_voice_ms`` …), the
    GROUP_LINES most requested of them; None when the steps have fewer than ``fewest`` labels
    (one voice, the run's default, is no mix)."""
    steps = view.executed
    groups = [figures(step.get(key)) for step in steps]
    counts: dict[str, int] = {}
    for group in groups:
        for label in group:
            counts[label] = counts.get(label, 0) + stat(group, label, "count")
    if not counts or len(counts) < fewest:
        return None
    shown = sorted(sorted(counts, key=lambda label: counts[label], reverse=True)[:GROUP_LINES])
    levels = [step.get(view.key) for step in steps]
    fig = go.Figure()
    for label in shown:
        for quantile, dash in (("p50", None), ("p95", "dot")):
            fig.add_scatter(
                x=view.axis.at(levels),
                y=[figures(group.get(label)).get(quantile) for group in groups],
                name=f"{esc(label)} {quantile}",
                mode="lines+markers",
                line=dict(dash=dash),
            )
    view.axis.draw(fig, levels)
    more = f", the {len(shown)} most requested of {len(counts)}" if len(counts) > len(shown) else ""
    fig.update_layout(title=f"Wait by {what} (ms{more})", height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def integrity_html(view: RunView) -> str:
    checked = [
        (step, integrity)
        for step in view.summary["steps"]
        if (integrity := step.get("integrity")) and integrity["checked"]
    ]
    if not checked:
        return ""
    lowest = (
        "among the attempts sent with the fewest requests in flight" if view.open_loop else "at the lowest concurrency"
    )
    rule = (
        f"Audio length (from the first sound on) against the same text's median {lowest}; a mismatch is off by more "
        f"than {INTEGRITY_REL:.0%} (at least {INTEGRITY_ABS_S} s)."
    )
    if not any(integrity["mismatched"] for _, integrity in checked):
        attempts = sum(integrity["checked"] for _, integrity in checked)
        return f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)} No mismatches in {attempts} checked attempts.</p>"
    rows = []
    for step, integrity in checked:
        examples = "; ".join(
            f"{example['text_id']}: {example['expected_s']:.2f} s expected, {example['got_s']:.2f} s got"
            for example in integrity["examples"]
        )
        rows.append(
            f"<tr><td>{esc(view.labels[step['step']])}</td><td>{integrity['checked']}</td><td>{integrity['mismatched']}</td>"
            f"<td>{100 * (integrity['rate'] or 0):.1f}</td><td class='l'>{esc(examples)}</td></tr>"
        )
    return (
        f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)}</p><table><tr><th>{esc(view.axis.title)}</th>"
        f"<th>checked</th><th>mismatched</th><th>%</th><th class='l'>examples</th></tr>{''.join(rows)}</table>"
    )


def barge_in_html(view: RunView) -> str:
    """The listener's interruptions (--barge-in): per step, the cancels and how fast they went
    quiet, and the work they orphaned on the server."""
    barge = view.summary.get("barge_in")
    if not barge:
        return ""
    work = barge["orphaned_work_s"]
    said = f"Orphaned work: {esc(orphaned_words(barge))}" + (
        f" ({esc(work['method'])}, from {esc(work['series'])})."
        if work is not None and work["per_cancel_s"] is not None
        else "."
    )
    rows = []
    for step in view.executed:
        rows.append(
            f"<tr><td>{esc(view.labels[step['step']])}</td><td>{step.get('cancelled', 0)}</td><td>{step['ok']}</td>"
            f"<td>{fmt(stat(step, 'cancel_to_quiet_ms', 'p50'))}</td>"
            f"<td>{fmt(stat(step, 'cancel_to_quiet_ms', 'p95'))}</td></tr>"
        )
    head = (
        f"{barge['cancelled']} utterances were interrupted (--barge-in {barge['fraction']:g}, cancelled by "
        f"{esc(barge.get('cancel_by') or 'close')}"
        + (f"; {barge['unacknowledged']} never acknowledged" if barge["unacknowledged"] else "")
        + "). "
    )
    return (
        f"<h2>Barge-in</h2><p class='meta'>{head}{said}</p><table><tr><th>{esc(view.axis.title)}</th>"
        f"<th>cancelled</th><th>ok</th><th>cancel to quiet p50 ms</th><th>p95 ms</th></tr>{''.join(rows)}</table>"
    )
