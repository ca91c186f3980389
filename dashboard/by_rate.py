"""The top of an open-loop run's report (``--rates``), its steps standing at an offered rate: the
verdict, the step table in requests per second, and latency from schedule, send lag, throughput
against offered and dropped arrivals (see :mod:`analysis.openloop` for the figures and rules)."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import FAILURE_RATE, LATENCY_RISE
from tts_knee.analysis.openloop import GROWTH_RATIO, SHORTFALL

from .kit import KNEE_COLOUR, REC_COLOUR, capacity_html, esc, fmt, stat, step_row
from .table import RATE_COLUMNS, rate_table_rows


def as_levels(summary: dict) -> dict:
    """The summary with each step standing at its offered rate, for the report's figures that
    label steps by concurrency (retries, stages, memory, text length)."""
    steps = [dict(s, concurrency=s.get("rate")) for s in summary["steps"]]
    return dict(summary, steps=steps, levels=steps, knee=dict(summary["knee"], concurrency=summary["knee"]["rate"]),
                recommended_concurrency=summary.get("recommended_rate"))


def curves_figure(summary: dict) -> go.Figure | None:
    steps = [s for s in summary.get("levels") or summary["steps"] if s.get("requests")]   # a soak is not a level
    if not steps:
        return None
    steps = sorted(steps, key=lambda s: s["rate"])
    x = [s["rate"] for s in steps]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Latency from schedule (ms)", "Served against offered (req/s)"))
    for q, dash in (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")):
        fig.add_scatter(x=x, y=[stat(s, "sched_wait_ms", q) for s in steps], name=f"{q} from schedule",
                        mode="lines+markers", line=dict(dash=dash), row=1, col=1)
    fig.add_scatter(x=x, y=[stat(s, "latency_ms", "p95") for s in steps], name="p95 wait (t2-t0)",
                    mode="lines+markers", line=dict(dash="dashdot", color="#7f7f7f"), row=1, col=1)
    fig.add_scatter(x=x, y=[stat(s, "send_lag_ms", "p95") for s in steps], name="p95 send lag (t0-scheduled)",
                    mode="lines+markers", line=dict(color="#8c564b"), row=1, col=1)
    fig.add_scatter(x=x, y=[s.get("throughput_rps") for s in steps], name="served (ok req/s)",
                    mode="lines+markers", line=dict(width=3), row=1, col=2)
    fig.add_scatter(x=[0, max(x)], y=[0, max(x)], name="offered", mode="lines",
                    line=dict(dash="dot", color="#aaaaaa"), row=1, col=2)
    fig.add_scatter(x=[0, max(x)], y=[0, (1 - SHORTFALL) * max(x)], name=f"{1 - SHORTFALL:.0%} of offered",
                    mode="lines", line=dict(dash="dash", color="#dddddd"), row=1, col=2)
    if any(s.get("dropped") for s in steps):
        fig.add_bar(x=x, y=[s.get("dropped") for s in steps], name="dropped arrivals", marker_color="#ff7f0e",
                    opacity=0.5, row=1, col=2)
    knee, rec = summary["knee"]["rate"], summary.get("recommended_rate")
    for col in (1, 2):
        for v, colour, label in ((knee, KNEE_COLOUR, "knee"), (rec, REC_COLOUR, "recommended")):
            if v is not None:
                fig.add_vline(x=v, line=dict(color=colour, dash="dash"), row=1, col=col,
                              annotation_text=label, annotation_position="top")
        fig.update_xaxes(title_text="offered rate (req/s)", rangemode="tozero", row=1, col=col)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def step_table_html(summary: dict) -> str:
    knee, rec = summary["knee"]["rate"], summary.get("recommended_rate")
    head = "".join(f"<th>{esc(c)}</th>" for c in RATE_COLUMNS)
    body = []
    for s, r in zip(summary["steps"], rate_table_rows(summary)):
        cls = "knee" if s.get("rate") == knee else ("rec" if s.get("rate") == rec else "")
        body.append(step_row(s, r, cls))
    return (f"<table><tr>{head}</tr>{''.join(body)}</table><p class='meta'>Open loop: each arrival was sent on "
            f"its schedule whether or not earlier requests had finished. From schedule: t2 - scheduled of "
            f"successful requests (what a caller arriving on time waited); wait: t2 - t0; send lag: t0 - "
            f"scheduled (the load generator's own lateness). Dropped: arrivals not sent because --max-inflight "
            f"requests were in flight (not requests, so not in Locust's counts). Growing: median latency from "
            f"schedule rose over the step's thirds, the last above {GROWTH_RATIO}x the first.</p>")


def verdict_html(summary: dict) -> str:
    d, knee = summary["diagnosis"], summary["knee"]
    ev = "".join(f"<li>{esc(e)}</li>" for e in d["evidence"])
    methods = "".join(f"<tr><td class='l'>{esc(k)}</td><td>{esc(fmt(v, '{:g}'))}</td></tr>"
                      for k, v in knee["methods"].items())
    cls = "verdict ok" if d["kind"] == "no_knee" else "verdict"
    rate = fmt(knee["rate"], "{:g}") if knee["rate"] is not None else "none found"
    return (f"<div class='{cls}'><div>Knee: <b>{esc(rate)} req/s</b> &middot; recommended rate: "
            f"<b>{esc(fmt(summary.get('recommended_rate'), '{:g}'))} req/s</b> &middot; concurrency it implies: "
            f"<b>{esc(fmt(summary.get('recommended_concurrency')))}</b> &middot; dropped arrivals: "
            f"<b>{esc(summary.get('dropped') or 0)}</b> &middot; diagnosis: <span class='kind'>{esc(d['kind'])}"
            f"</span></div><ul>{ev}</ul><div>{esc(summary['recommendation'])}</div>{capacity_html(summary)}</div>"
            f"<table><tr><th class='l'>knee method</th><th>offered req/s</th></tr>{methods}</table>"
            f"<p class='meta'>A rate breaks when served throughput is more than {SHORTFALL:.0%} short of "
            f"offered, latency keeps growing within the step, p95 latency from schedule stays above {LATENCY_RISE}x "
            f"the lowest rate's, or failures rise by {FAILURE_RATE:.0%} or more. Agreeing with the knee: "
            f"{esc(', '.join(knee['agree']) or 'none')}.</p>")
