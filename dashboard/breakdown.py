"""The report's per-step breakdowns: where the time goes (client stages and Server-Timing), retries
and throttling, the failed attempts, GPU memory (baseline, peak, fall-back), latency by text
length, by voice and by language, and audio integrity."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.steps import INTEGRITY_ABS_S, INTEGRITY_REL
from tts_knee.runformat.summary import Summary

from .kit import GIB, Relabelled, conc_axis, esc, figures, fmt, is_open_loop, lx, orphaned_words, step_axis, step_label


def stages_figure(summary: Relabelled) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [step_label(s) for s in steps]
    stages = summary.get("server_timing_stages") or []
    fig = make_subplots(
        rows=1,
        cols=2 if stages else 1,
        subplot_titles=("Client stages, mean ms per step", "Server-Timing stages, mean ms")
        if stages
        else ("Client stages, mean ms per step",),
    )

    def mean(s, k):
        return (s.get(k) or {}).get("mean")

    ttfb = [mean(s, "ttfb_ms") for s in steps]
    wait = [mean(s, "latency_ms") for s in steps]
    body = [None if w is None or t is None else max(0.0, w - t) for w, t in zip(wait, ttfb)]
    for name, vals in (
        ("ttfb", ttfb),
        ("rest of wait (body)", body),
        ("write", [mean(s, "write_ms") for s in steps]),
        ("concat", [mean(s, "concat_ms") for s in steps]),
    ):
        if any(v for v in vals):
            fig.add_bar(x=labels, y=vals, name=name, row=1, col=1)
    for st in stages:
        fig.add_bar(
            x=labels,
            y=[(s["server_timing_ms"].get(st) or {}).get("mean") for s in steps],
            name=f"server: {esc(st)}",
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text=step_axis(summary), type="category")
    fig.update_layout(barmode="stack", height=380, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def has_retry_after(summary: Relabelled) -> bool:
    """Whether any step's answers carried a Retry-After header (else the report says so in a line)."""
    return any((s.get("retry_after_s") or {}).get("max") is not None for s in summary["steps"])


NO_RETRY_AFTER = "<p class='meta'>No answer carried a Retry-After header: there is no Retry-After to draw.</p>"
NO_GPU_MEMORY = (
    "<p class='meta'>No GPU memory was sampled (no collector beside a GPU server, or its GPU does not report "
    "memory): there is nothing to draw.</p>"
)


def retries_figure(summary: Relabelled) -> go.Figure:
    """Attempts by status, Retry-After per step where any answer carried one, attempt 1 vs retries."""
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [step_label(s) for s in steps]
    retry_after = has_retry_after(summary)
    titles = ("Attempts by status", "Retry-After (s)", "Attempt 1 vs retries")
    fig = make_subplots(rows=1, cols=3 if retry_after else 2, subplot_titles=titles if retry_after else titles[::2])
    statuses = sorted({k for s in steps for k in s["status_counts"]})
    for st in statuses:
        fig.add_bar(
            x=labels,
            y=[s["status_counts"].get(st, 0) for s in steps],
            name=f"status {esc(st)}",
            legendgroup="status",
            row=1,
            col=1,
        )
    for q, sym in (("mean", "circle"), ("max", "triangle-up")) if retry_after else ():
        fig.add_scatter(
            x=labels,
            y=[(s.get("retry_after_s") or {}).get(q) for s in steps],
            name=f"Retry-After {q}",
            mode="markers+lines",
            marker=dict(symbol=sym),
            row=1,
            col=2,
        )
    for k in ("1", "2", "3+"):
        fig.add_bar(
            x=labels,
            y=[s["attempts_by_number"][k] for s in steps],
            name=f"attempt {k}",
            row=1,
            col=3 if retry_after else 2,
        )
    fig.update_xaxes(title_text=step_axis(summary), type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(barmode="stack", height=360, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def errors_html(summary: Relabelled) -> str:
    rows = [
        f"<tr><td>{esc(step_label(s))}</td><td>{esc(e['count'])}</td><td class='l'>{esc(e['error'])}</td></tr>"
        for s in summary["steps"]
        for e in s.get("errors", [])
    ]
    if not rows:
        return "<p class='meta'>No failed attempts.</p>"
    return (
        f"<table><tr><th>{esc(step_axis(summary))}</th><th>attempts</th><th class='l'>error</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def memory_figure(summary: Relabelled) -> go.Figure | None:
    """GPU memory per step (peak, right after, baseline, after the run); None where none was sampled."""
    steps = [s for s in summary["steps"] if s.get("server")]
    if not any(s["server"].get("gpu_mem_peak_bytes") is not None for s in steps):
        return None
    labels = [step_label(s) for s in steps]
    fig = go.Figure()
    g = lambda s, k: None if (s["server"].get(k) is None) else s["server"][k] / GIB  # noqa: E731
    fig.add_bar(
        x=labels, y=[g(s, "gpu_mem_peak_bytes") for s in steps], name="peak during step", marker_color="#9467bd"
    )
    fig.add_scatter(
        x=labels,
        y=[g(s, "gpu_mem_fallback_bytes") for s in steps],
        name="right after the step (the next step's, when steps follow each other)",
        mode="lines+markers",
        line=dict(color="#ff7f0e", width=3),
    )
    base = summary.get("gpu_memory_baseline_bytes")
    if base is not None:
        fig.add_hline(y=base / GIB, line=dict(color="#2ca02c", dash="dash"), annotation_text="baseline before load")
    after = summary.get("gpu_memory_after_run_bytes")
    if after is not None:
        fig.add_hline(
            y=after / GIB,
            line=dict(color="#d62728", dash="dash"),
            annotation_text="after the run",
            annotation_position="bottom right",
        )
    tot = next((g(s, "gpu_mem_total_bytes") for s in steps if g(s, "gpu_mem_total_bytes")), None)
    if tot:
        fig.add_hline(y=tot, line=dict(color="#999", dash="dot"), annotation_text="total")
    fig.update_layout(
        title="GPU memory per step (GiB)",
        height=340,
        xaxis_title=step_axis(summary),
        xaxis_type="category",
        margin=dict(t=40, b=40, l=60, r=20),
    )
    return fig


#: Most labels (voices, languages) one breakdown draws: the most requested.
GROUP_LINES = 12


def tier_figure(summary: Relabelled) -> go.Figure:
    return group_figure(summary, "latency_by_tier_ms", "text-length tier")


def group_figure(summary: Relabelled, key: str, what: str, fewest: int = 1) -> go.Figure | None:
    """p50 and p95 wait per step of each label of ``key`` (``latency_by_voice_ms`` …), the
    GROUP_LINES most requested of them; None when the steps have fewer than ``fewest`` labels
    (one voice, the run's default, is no mix)."""
    steps = [s for s in summary["steps"] if s.get("requests")]
    counts: dict[str, int] = {}
    for s in steps:
        for label, d in (s.get(key) or {}).items():
            counts[label] = counts.get(label, 0) + d["count"]
    if not counts or len(counts) < fewest:
        return None
    shown = sorted(sorted(counts, key=lambda label: counts[label], reverse=True)[:GROUP_LINES])
    fig = go.Figure()
    for t in shown:
        for q, dash in (("p50", None), ("p95", "dot")):
            fig.add_scatter(
                x=lx([s["concurrency"] for s in steps]),
                y=[((s.get(key) or {}).get(t) or {}).get(q) for s in steps],
                name=f"{esc(t)} {q}",
                mode="lines+markers",
                line=dict(dash=dash),
            )
    conc_axis(fig, steps, step_axis(summary))
    more = f", the {len(shown)} most requested of {len(counts)}" if len(counts) > len(shown) else ""
    fig.update_layout(title=f"Wait by {what} (ms{more})", height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def integrity_html(summary: Summary) -> str:
    steps = [s for s in summary["steps"] if (s.get("integrity") or {}).get("checked")]
    if not steps:
        return ""
    lowest = (
        "among the attempts sent with the fewest requests in flight"
        if is_open_loop(summary)
        else "at the lowest concurrency"
    )
    rule = (
        f"Audio length (from the first sound on) against the same text's median {lowest}; a mismatch is off by more "
        f"than {INTEGRITY_REL:.0%} (at least {INTEGRITY_ABS_S} s)."
    )
    if not any(s["integrity"]["mismatched"] for s in steps):
        checked = sum(s["integrity"]["checked"] for s in steps)
        return f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)} No mismatches in {checked} checked attempts.</p>"
    rows = []
    for s in steps:
        it = s["integrity"]
        ex = "; ".join(
            f"{e['text_id']}: {e['expected_s']:.2f} s expected, {e['got_s']:.2f} s got" for e in it["examples"]
        )
        rows.append(
            f"<tr><td>{esc(step_label(s))}</td><td>{it['checked']}</td><td>{it['mismatched']}</td>"
            f"<td>{100 * (it['rate'] or 0):.1f}</td><td class='l'>{esc(ex)}</td></tr>"
        )
    return (
        f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)}</p><table><tr><th>{esc(step_axis(summary))}</th>"
        f"<th>checked</th><th>mismatched</th><th>%</th><th class='l'>examples</th></tr>{''.join(rows)}</table>"
    )


def barge_in_html(summary: Summary) -> str:
    """The listener's interruptions (--barge-in): per step, the cancels and how fast they went
    quiet, and the work they orphaned on the server."""
    barge = summary.get("barge_in")
    if not barge:
        return ""
    work = barge["orphaned_work_s"]
    said = f"Orphaned work: {esc(orphaned_words(barge))}" + (
        f" ({esc(work['method'])}, from {esc(work['series'])})."
        if work is not None and work["per_cancel_s"] is not None
        else "."
    )
    rows = []
    for s in summary["steps"]:
        if not s.get("requests"):
            continue
        q = figures(s.get("cancel_to_quiet_ms"))
        rows.append(
            f"<tr><td>{esc(step_label(s))}</td><td>{s.get('cancelled', 0)}</td><td>{s['ok']}</td>"
            f"<td>{fmt(q.get('p50'))}</td><td>{fmt(q.get('p95'))}</td></tr>"
        )
    head = (
        f"{barge['cancelled']} utterances were interrupted (--barge-in {barge['fraction']:g}, cancelled by "
        f"{esc(barge.get('cancel_by') or 'close')}"
        + (f"; {barge['unacknowledged']} never acknowledged" if barge["unacknowledged"] else "")
        + "). "
    )
    return (
        f"<h2>Barge-in</h2><p class='meta'>{head}{said}</p><table><tr><th>{esc(step_axis(summary))}</th>"
        f"<th>cancelled</th><th>ok</th><th>cancel to quiet p50 ms</th><th>p95 ms</th></tr>{''.join(rows)}</table>"
    )
