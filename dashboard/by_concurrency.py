"""The top of a closed-loop run's report, its steps standing at a concurrency: the verdict with
the knee methods, the step table, and latency and throughput against concurrency (one point per
tested concurrency, repeats pooled)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import FAILURE_RATE, LATENCY_RISE, LITTLE_TOLERANCE, UNDERRUN_RATE, usl_curve

from .kit import GIB, KNEE_COLOUR, REC_COLOUR, capacity_html, ci_bars, conc_axis, esc, is_streamed, lx, step_row
from .table import TAIL_COLUMN, speech_metric, table_columns, table_rows


def _marks(fig, summary, rows_cols):
    knee, rec = summary["knee"]["concurrency"], summary["recommended_concurrency"]
    for r, c in rows_cols:
        if knee:
            fig.add_vline(x=lx(knee), line=dict(color=KNEE_COLOUR, dash="dash"), row=r, col=c,
                          annotation_text=f"knee {knee}", annotation_position="top left")
        if rec:
            fig.add_vline(x=lx(rec), line=dict(color=REC_COLOUR, dash="dot"), row=r, col=c,
                          annotation_text=f"recommended {rec}", annotation_position="bottom right")


def curves_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary.get("levels") or summary["steps"] if s.get("requests")]  # by concurrency
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Latency (wait, TTFA) vs concurrency"
                                                        if any(s.get("ttfa_ms") for s in steps) else
                                                        "Latency (wait) vs concurrency",
                                                        "Throughput vs concurrency"))
    conc = [s["concurrency"] for s in steps]
    n = lx(conc)
    for q, dash in (("p50", None), ("p90", "dot"), ("p95", None), ("p99", "dot"), ("max", "dash")):
        fig.add_scatter(x=n, y=[(s.get("latency_ms") or {}).get(q) for s in steps], name=f"{q} wait",
                        mode="lines+markers", line=dict(dash=dash), row=1, col=1,
                        error_y=ci_bars(steps, "latency_ms", q) if q in ("p50", "p95") else None)
    fig.add_scatter(x=n, y=[(s.get("e2e_ms") or {}).get("p95") for s in steps], name="p95 end-to-end",
                    mode="lines+markers", line=dict(dash="dashdot", color="#7f7f7f"), row=1, col=1)
    if any(s.get("ttfa_ms") for s in steps):
        for q, dash in (("p50", None), ("p95", "dot")):
            fig.add_scatter(x=n, y=[(s.get("ttfa_ms") or {}).get(q) for s in steps], name=f"{q} TTFA",
                            mode="lines+markers", line=dict(dash=dash, color="#000000", width=2),
                            marker=dict(symbol="star"), row=1, col=1)
    fig.add_scatter(x=n, y=[s.get("throughput_rps") for s in steps], name="throughput (ok req/s)",
                    mode="lines+markers", line=dict(width=3), row=1, col=2)
    if steps and steps[0].get("throughput_rps"):
        x1 = steps[0]["throughput_rps"] / steps[0]["concurrency"]
        fig.add_scatter(x=n, y=[x1 * c for c in conc], name="linear scaling", mode="lines",
                        line=dict(dash="dot", color="#aaaaaa"), row=1, col=2)
    usl = summary.get("usl")
    if usl:
        grid = np.geomspace(max(1, min(conc)), max(conc), 60)
        fig.add_scatter(x=lx(grid), y=usl_curve(usl, grid), name="USL fit", mode="lines",
                        line=dict(dash="dash", color="#9467bd"), row=1, col=2)
    conc_axis(fig, steps, row=1, col=1)
    conc_axis(fig, steps, row=1, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    xs = [s["throughput_rps"] for s in steps if s.get("throughput_rps")]
    fig.update_yaxes(title_text="req/s", range=[0, 1.3 * max(xs)] if xs else None, row=1, col=2)
    _marks(fig, summary, [(1, 1), (1, 2)])
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def step_table_html(summary: dict) -> str:
    knee, rec = summary["knee"]["concurrency"], summary["recommended_concurrency"]
    extra = ("e2e p95", "throttled", "GPU mem peak", "client CPU", "Little")
    head = "".join(f"<th>{esc(c)}</th>" for c in table_columns(summary) + extra)
    rows = []
    for s, r in zip(summary["steps"], table_rows(summary)):
        srv, cli = s.get("server") or {}, s.get("client") or {}
        e2e = (s.get("e2e_ms") or {}).get("p95")
        mem = srv.get("gpu_mem_peak_bytes")
        lit = s.get("little")
        r = r + ["-" if e2e is None else f"{e2e:.0f}", str(s["throttled"]),
                 "-" if mem is None else f"{mem / GIB:.1f} GiB",
                 "-" if cli.get("cpu_mean") is None else f"{cli['cpu_mean']:.0f}",
                 "-" if not lit else f"{lit['ratio']:.2f}"]
        cls = "knee" if s["concurrency"] == knee else ("rec" if s["concurrency"] == rec else "")
        rows.append(step_row(s, r, cls))
    return (f"<table><tr>{head}</tr>{''.join(rows)}</table><p class='meta'>Latencies in ms: wait of "
            f"successful final attempts (t2-t0). rps: successful requests per second of the measured "
            f"window (settle time to step end), counting requests that finished in it. Little: mean busy "
            f"users over the window (end-to-end request time overlapping it) / concurrency. Resource "
            f"figures: the busiest host's."
            + (" ttfa: time to the first audio sample; underrun%: successful streams that ran dry at least "
               "once. Both count the streams that ended before their step did (a stream still playing when "
               "the next step began heard the next step's load). audible: when the listener hears the first "
               "sound (leading silence, lead, delays it)." if is_streamed(summary) else "")
            + (" WER% (CER%): the judged clips' mean error rate; unintel: judged above 50 %." if
               speech_metric(summary) else "")
            + (" tail: from the end of the text (its final flush) to the last audio, what the listener waits once "
               "the text is complete." if TAIL_COLUMN in table_columns(summary) else "") + "</p>")


def verdict_html(summary: dict) -> str:
    d, knee = summary["diagnosis"], summary["knee"]
    ev = "".join(f"<li>{esc(e)}</li>" for e in d["evidence"])
    methods = "".join(f"<tr><td class='l'>{esc(k)}</td><td>{esc(v if v is not None else '-')}</td></tr>"
                      for k, v in knee["methods"].items())
    usl = summary.get("usl")
    usl_txt = "USL fit needs at least 4 steps with throughput." if not usl else (
        f"USL fit: &sigma;={usl['sigma']:.3f}, &kappa;={usl['kappa']:.4f}, "
        f"&lambda;={usl['lambda_rps']:.2f} req/s, R&sup2;={usl['r2'] if usl['r2'] is None else round(usl['r2'], 3)}"
        + (f", predicted peak at concurrency {usl['peak_concurrency']:.1f}" if usl.get("peak_concurrency")
           else ", no peak predicted (&kappa;=0)"))
    lit_bad = [x for x in summary["little_law"] if not x["ok"]]
    lit = (f"Little's law holds at every step (within {LITTLE_TOLERANCE:.0%})." if not lit_bad else
           f"Little's law off by more than {LITTLE_TOLERANCE:.0%} at concurrency " + ", ".join(
               f"{x['concurrency']} ({x['ratio']:.2f})" for x in lit_bad) + ".")
    cls = "verdict ok" if d["kind"] == "no_knee" else "verdict"
    return (f"<div class='{cls}'><div>Knee: <b>{esc(knee['concurrency'] or 'none found')}</b> &middot; "
            f"recommended concurrency: <b>{esc(summary['recommended_concurrency'] or '-')}</b> &middot; "
            f"diagnosis: <span class='kind'>{esc(d['kind'])}</span></div><ul>{ev}</ul>"
            f"<div>{esc(summary['recommendation'])}</div>{capacity_html(summary)}</div>"
            f"<table><tr><th class='l'>knee method</th><th>concurrency</th></tr>{methods}</table>"
            + (f"<p class='meta'>Streamed run: a step breaks when {UNDERRUN_RATE:.0%} or more of its streams "
               f"stall, {FAILURE_RATE:.0%} or more of its attempts fail, or its TTFA p95 stays above "
               f"{LATENCY_RISE}x the lowest step's and above the {knee.get('ttfa_floor_ms') or 0:g} ms floor; "
               f"whole-body time is only a cross-check.</p>" if knee.get("streamed") else "")
            + f"<p class='meta'>Agreeing with the knee: {esc(', '.join(knee['agree']) or 'none')}. {usl_txt} "
            f"{esc(lit)}</p>")
