"""The top of a voice sweep's report (``--voice-steps``), its steps standing at a number of
distinct voices at one load: the verdict, the step table, and latency, throughput and the
server's voice cache against the number of voices (see :mod:`analysis.voices`)."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import FAILURE_RATE, LATENCY_RISE

from .kit import KNEE_COLOUR, REC_COLOUR, capacity_html, ci_bars, conc_axis, esc, fmt, lx, step_row
from .table import table_columns, table_rows


def as_levels(summary: dict) -> dict:
    """The summary with each step, level and SLO verdict standing at its number of voices, for
    the report's sections that label them by concurrency (the SLO, retries, stages, memory, text
    length, voices)."""
    def at(items):
        return [dict(s, concurrency=s.get("voices")) for s in items or ()]
    sl = summary.get("slo")
    if sl:
        sl = dict(sl, steps=at(sl["steps"]), by_step=at(sl["by_step"]), max_concurrency=sl.get("max_voices"))
    return dict(summary, steps=at(summary["steps"]), levels=at(summary.get("levels")), slo=sl,
                knee=dict(summary["knee"], concurrency=summary["knee"]["voices"]),
                recommended_concurrency=summary.get("recommended_voices"))


def _hit_rate(s: dict) -> float | None:
    roles = (s.get("server") or {}).get("server_roles") or {}
    hits, misses = roles.get("voice_cache_hits"), roles.get("voice_cache_misses")
    if not hits or not misses or hits["mean"] + misses["mean"] <= 0:
        return None
    return 100.0 * hits["mean"] / (hits["mean"] + misses["mean"])


def curves_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary.get("levels") or summary["steps"] if s.get("requests")]
    rates = [_hit_rate(s) for s in steps]
    cache = any(r is not None for r in rates)
    fig = make_subplots(rows=1, cols=3 if cache else 2, subplot_titles=(
        "Latency (wait) vs distinct voices", "Throughput vs distinct voices") + (("Server's voice cache hit rate",)
                                                                                if cache else ()))
    n = lx([s["voices"] for s in steps])
    for q, dash in (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")):
        fig.add_scatter(x=n, y=[(s.get("latency_ms") or {}).get(q) for s in steps], name=f"{q} wait",
                        mode="lines+markers", line=dict(dash=dash), row=1, col=1,
                        error_y=ci_bars(steps, "latency_ms", q) if q in ("p50", "p95") else None)
    fig.add_scatter(x=n, y=[s.get("throughput_rps") for s in steps], name="throughput (ok req/s)",
                    mode="lines+markers", line=dict(width=3), row=1, col=2)
    if cache:
        fig.add_scatter(x=n, y=rates, name="cache hit rate (%)", mode="lines+markers", row=1, col=3)
        fig.update_yaxes(title_text="%", range=[0, 105], row=1, col=3)
    cols = (1, 2, 3) if cache else (1, 2)
    at = [dict(s, concurrency=s["voices"]) for s in steps]
    knee, rec = summary["knee"]["voices"], summary.get("recommended_voices")
    for c in cols:
        conc_axis(fig, at, "distinct voices", row=1, col=c)
        for v, colour, label in ((knee, KNEE_COLOUR, "knee"), (rec, REC_COLOUR, "recommended")):
            if v:
                fig.add_vline(x=lx(v), line=dict(color=colour, dash="dash"), row=1, col=c,
                              annotation_text=f"{label} {v}", annotation_position="top left")
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def step_table_html(summary: dict) -> str:
    knee, rec = summary["knee"]["voices"], summary.get("recommended_voices")
    head = "".join(f"<th>{esc(c)}</th>" for c in table_columns(summary) + ("cache hit%",))
    body = []
    for s, r in zip(summary["steps"], table_rows(summary)):
        cls = "knee" if s.get("voices") == knee else ("rec" if s.get("voices") == rec else "")
        body.append(step_row(s, r + [fmt(_hit_rate(s))], cls))
    return (f"<table><tr>{head}</tr>{''.join(body)}</table><p class='meta'>A voice sweep: every step at the same "
            f"load, its requests drawing their voices from the first N of --voices. cache hit%: the server's own "
            f"voice-cache counters over the step, where it publishes them.</p>")


def verdict_html(summary: dict) -> str:
    d, knee = summary["diagnosis"], summary["knee"]
    ev = "".join(f"<li>{esc(e)}</li>" for e in d["evidence"])
    methods = "".join(f"<tr><td class='l'>{esc(k)}</td><td>{esc(fmt(v))}</td></tr>" for k, v in knee["methods"].items())
    cls = "verdict ok" if d["kind"] == "no_knee" else "verdict"
    return (f"<div class='{cls}'><div>Knee: <b>{esc(fmt(knee['voices']) if knee['voices'] else 'none found')}</b> "
            f"distinct voices at concurrency {esc(fmt(knee['concurrency']))} &middot; recommended voices: "
            f"<b>{esc(fmt(summary.get('recommended_voices')))}</b> &middot; diagnosis: <span class='kind'>"
            f"{esc(d['kind'])}</span></div><ul>{ev}</ul><div>{esc(summary['recommendation'])}</div>{capacity_html(summary)}</div>"
            f"<table><tr><th class='l'>knee method</th><th>distinct voices</th></tr>{methods}</table>"
            f"<p class='meta'>A number of voices breaks when its latency stays above {LATENCY_RISE}x the fewest "
            f"voices' or {FAILURE_RATE:.0%} more of its attempts fail. Agreeing with the knee: "
            f"{esc(', '.join(knee['agree']) or 'none')}.</p>")
