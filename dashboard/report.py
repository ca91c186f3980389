"""The self-contained ``report.html`` of one run.

Every string that comes from the run (text ids, error messages, hosts, the target) is
HTML-escaped before it reaches the page or a Plotly hover label.  The per-attempt scatter is
downsampled to ``MAX_POINTS``, keeping failures and retries first, so the page stays small.
A streamed run adds a stream-health section: per step, the audio received and played over time
for a typical and the worst stream (see :mod:`analysis.playback`), and the share of streams that
stalled.  Audio-integrity mismatches get their own table whenever any attempt was checked.
"""
from __future__ import annotations

import html
import math
import time

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

import runformat

from analysis.knee import FAILURE_RATE, LATENCY_RISE, UNDERRUN_RATE, usl_curve
from runformat.reader import Attempts, RunDir
from analysis.steps import INTEGRITY_ABS_S, INTEGRITY_REL
from analysis.playback import pick_streams, playback
from analysis.summary import is_streamed, table_columns, table_rows

MAX_POINTS = 20000
GIB = 1024 ** 3
KNEE_COLOUR, REC_COLOUR = "#d62728", "#2ca02c"
CATEGORIES = (  # (name, colour, marker symbol) of the timeline scatter
    ("ok", "#1f77b4", "circle"), ("ok after retry", "#17becf", "diamond"),
    ("throttled 429/503", "#ff7f0e", "triangle-up"), ("server error", "#d62728", "x"),
    ("connection error", "#000000", "x-thin-open"), ("warm-up (not settled)", "#bbbbbb", "circle"),
)
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:13px} .verdict{background:#f6f8fa;border-left:4px solid #d62728;
padding:10px 16px;margin:12px 0} .verdict.ok{border-color:#2ca02c} .kind{font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{padding:3px 8px;text-align:right;
border-bottom:1px solid #eee} th{background:#f3f3f3} td.l,th.l{text-align:left}
tr.knee td{background:#fdecea} tr.rec td{background:#eaf7ea} .warn{color:#b35900}
"""
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _fig_html(fig: go.Figure, plotlyjs) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=plotlyjs, config=_PLOT_CONFIG)


def lx(n):
    """Concurrency axes are linear in log2(concurrency): plotly's log axes put shapes and
    annotations in log10 units, which is easy to get wrong."""
    return np.log2(np.asarray(n, dtype=float)) if np.ndim(n) else math.log2(n)


def is_open_loop(summary: dict) -> bool:
    """Whether the run offered rates (``--rates``): its steps stand at an offered rate, not a concurrency."""
    return (summary.get("knee") or {}).get("axis") == "rate"


def step_axis(summary: dict) -> str:
    """The title of a per-step figure's x axis (and of a table's step column)."""
    return "offered rate (req/s)" if is_open_loop(summary) else "concurrency"


def step_label(s: dict) -> str:
    """A step as per-step figures and tables name it: its offered rate (open loop), else its concurrency."""
    return f"{s['rate']:g}" if s.get("rate") is not None else str(s["concurrency"])


def _conc_axis(fig, steps, title="concurrency", **where):
    ticks = sorted({s["concurrency"] for s in steps})
    text = [f"{t:g}" if isinstance(t, float) else str(t) for t in ticks]   # an offered rate: 4, not 4.0
    fig.update_xaxes(tickvals=[lx(t) for t in ticks], ticktext=text, title_text=title, **where)


def ci_bars(steps: list[dict], key: str, q: str) -> dict | None:
    """Plotly error bars for the 95% interval ``{q}_ci`` of ``steps[i][key]``, or None."""
    pts = [s.get(key) or {} for s in steps]
    if not any(p.get(f"{q}_ci") for p in pts):
        return None
    ci = [p.get(f"{q}_ci") for p in pts]
    # an end too few requests could bound (None) gets no bar on that side; the tables say so
    return dict(type="data", visible=True, thickness=1.2, width=4,
                array=[c[1] - p[q] if c and c[1] is not None else None for p, c in zip(pts, ci)],
                arrayminus=[p[q] - c[0] if c and c[0] is not None else None for p, c in zip(pts, ci)])


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
    _conc_axis(fig, steps, row=1, col=1)
    _conc_axis(fig, steps, row=1, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    xs = [s["throughput_rps"] for s in steps if s.get("throughput_rps")]
    fig.update_yaxes(title_text="req/s", range=[0, 1.3 * max(xs)] if xs else None, row=1, col=2)
    _marks(fig, summary, [(1, 1), (1, 2)])
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _sample(a: Attempts, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row indices to plot and their category; failures and retries first, then a uniform sample."""
    n = len(a)
    cat = np.zeros(n, dtype=np.int8)
    cat[a["ok"] & (a["attempt"] > 1)] = 1
    status = a["status"]
    cat[~a["ok"]] = 3
    cat[~a["ok"] & np.isin(status, (429, 503))] = 2
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


def timeline_figure(rd: RunDir, summary: dict) -> go.Figure:
    a = rd.requests.attempts()
    res = rd.resources
    t_zero = summary["run"]["start"] or (float(np.nanmin(a["t0"])) if len(a) else 0.0)
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.035,
                        row_heights=[0.4, 0.2, 0.2, 0.2],
                        subplot_titles=("Every attempt: wait (ms)", "GPU utilisation (%)",
                                        "GPU memory (GiB)", "CPU (%)"))
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
            for t, c, at, s, e in zip(a["text"][rows], a["concurrency"][rows], a["attempt"][rows],
                                      a["status"][rows], a["error"][rows])
        ]
        fig.add_scatter(x=x[sel], y=y[sel], mode="markers", name=name, text=hover,
                        hovertemplate="%{text}<br>%{y:.0f} ms at %{x:.1f} s<extra></extra>",
                        marker=dict(color=colour, symbol=symbol, size=5 if ci else 4,
                                    opacity=0.5 if ci in (0, 5) else 0.9), row=1, col=1)
    if len(res):
        srv, cli = res[res["role"] == "server"], res[res["role"] == "client"]
        for host, g in srv.groupby("host"):
            tx = g["ts"] - t_zero
            h = esc(host)
            if g["gpu_util_percent"].notna().any():
                fig.add_scatter(x=tx, y=g["gpu_util_percent"], name=f"GPU util {h}", mode="lines", row=2, col=1)
            if g["gpu_mem_used_bytes"].notna().any():
                fig.add_scatter(x=tx, y=g["gpu_mem_used_bytes"] / GIB, name=f"GPU memory {h}", mode="lines",
                                row=3, col=1)
                tot = g["gpu_mem_total_bytes"].dropna()
                if len(tot):
                    fig.add_hline(y=float(tot.max()) / GIB, line=dict(color="#999", dash="dot"), row=3, col=1,
                                  annotation_text="total", annotation_position="top left")
            fig.add_scatter(x=tx, y=g["cpu_percent"], name=f"server CPU {h}", mode="lines", row=4, col=1)
            fig.add_scatter(x=tx, y=g["cpu_max_core_percent"], name=f"server busiest core {h}", mode="lines",
                            line=dict(dash="dot"), row=4, col=1)
            if g["proc_cpu_percent"].notna().any():
                fig.add_scatter(x=tx, y=g["proc_cpu_percent"], name=f"TTS process CPU {h}", mode="lines",
                                line=dict(dash="dash"), row=4, col=1)
        for host, g in cli.groupby("host"):
            fig.add_scatter(x=g["ts"] - t_zero, y=g["cpu_percent"], name=f"client CPU {esc(host)}",
                            mode="lines", line=dict(color="#8c564b"), row=4, col=1)
    else:
        fig.add_annotation(text="no resource samples (resources.jsonl missing)", xref="x2 domain",
                           yref="y2 domain", x=0.5, y=0.5, showarrow=False)
    if not len(res) or not res["gpu_util_percent"].notna().any():
        for axis in ("yaxis2", "yaxis3"):
            lo, hi = fig.layout[axis].domain
            fig.add_annotation(text="no GPU samples: a CPU-only server, or no collector with NVML on it",
                               xref="paper", yref="paper", x=0.5, y=(lo + hi) / 2, showarrow=False,
                               font=dict(color="#777"))
    load = "rate" if open_loop else "concurrency"
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
            bands.append(dict(type="rect", xref=f"x{row}", yref=f"y{row} domain", x0=start - t_zero,
                              x1=end - t_zero, y0=0, y1=1, fillcolor=colour, opacity=0.6, layer="below",
                              line_width=0))
        labels.append(dict(x=(start + end) / 2 - t_zero, y=1.0, xref="x", yref="y domain",
                           text=f"{step_label(s)} req/s" if open_loop else f"N={s['concurrency']}",
                           showarrow=False, font=dict(size=11, color="#555")))
    fig.update_layout(shapes=list(fig.layout.shapes) + bands, annotations=list(fig.layout.annotations) + labels)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="seconds since run start", row=4, col=1)
    fig.update_layout(height=900, margin=dict(t=40, b=40, l=60, r=20), hovermode="closest",
                      legend=dict(orientation="h", y=-0.08))
    return fig


def stages_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [step_label(s) for s in steps]
    stages = summary.get("server_timing_stages") or []
    fig = make_subplots(rows=1, cols=2 if stages else 1,
                        subplot_titles=("Client stages, mean ms per step", "Server-Timing stages, mean ms")
                        if stages else ("Client stages, mean ms per step",))

    def mean(s, k):
        return (s.get(k) or {}).get("mean")
    ttfb = [mean(s, "ttfb_ms") for s in steps]
    wait = [mean(s, "latency_ms") for s in steps]
    body = [None if w is None or t is None else max(0.0, w - t) for w, t in zip(wait, ttfb)]
    for name, vals in (("ttfb", ttfb), ("rest of wait (body)", body), ("write", [mean(s, "write_ms") for s in steps]),
                       ("concat", [mean(s, "concat_ms") for s in steps])):
        if any(v for v in vals):
            fig.add_bar(x=labels, y=vals, name=name, row=1, col=1)
    for st in stages:
        fig.add_bar(x=labels, y=[(s["server_timing_ms"].get(st) or {}).get("mean") for s in steps],
                    name=f"server: {esc(st)}", row=1, col=2)
    fig.update_xaxes(title_text=step_axis(summary), type="category")
    fig.update_layout(barmode="stack", height=380, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def retries_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [step_label(s) for s in steps]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("Attempts by status", "Retry-After (s)",
                                                        "Attempt 1 vs retries"))
    statuses = sorted({k for s in steps for k in s["status_counts"]})
    for st in statuses:
        fig.add_bar(x=labels, y=[s["status_counts"].get(st, 0) for s in steps], name=f"status {esc(st)}",
                    legendgroup="status", row=1, col=1)
    for q, sym in (("mean", "circle"), ("max", "triangle-up")):
        fig.add_scatter(x=labels, y=[(s.get("retry_after_s") or {}).get(q) for s in steps],
                        name=f"Retry-After {q}", mode="markers+lines", marker=dict(symbol=sym), row=1, col=2)
    for k in ("1", "2", "3+"):
        fig.add_bar(x=labels, y=[s["attempts_by_number"][k] for s in steps], name=f"attempt {k}",
                    row=1, col=3)
    fig.update_xaxes(title_text=step_axis(summary), type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(barmode="stack", height=360, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def memory_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("server")]
    labels = [step_label(s) for s in steps]
    fig = go.Figure()
    g = lambda s, k: None if (s["server"].get(k) is None) else s["server"][k] / GIB  # noqa: E731
    fig.add_bar(x=labels, y=[g(s, "gpu_mem_peak_bytes") for s in steps], name="peak during step",
                marker_color="#9467bd")
    fig.add_scatter(x=labels, y=[g(s, "gpu_mem_fallback_bytes") for s in steps], name="right after the step (the next step's, when steps follow each other)",
                    mode="lines+markers", line=dict(color="#ff7f0e", width=3))
    base = summary.get("gpu_memory_baseline_bytes")
    if base is not None:
        fig.add_hline(y=base / GIB, line=dict(color="#2ca02c", dash="dash"), annotation_text="baseline before load")
    after = summary.get("gpu_memory_after_run_bytes")
    if after is not None:
        fig.add_hline(y=after / GIB, line=dict(color="#d62728", dash="dash"), annotation_text="after the run",
                      annotation_position="bottom right")
    tot = next((g(s, "gpu_mem_total_bytes") for s in steps if g(s, "gpu_mem_total_bytes")), None)
    if tot:
        fig.add_hline(y=tot, line=dict(color="#999", dash="dot"), annotation_text="total")
    fig.update_layout(title="GPU memory per step (GiB)", height=340, xaxis_title=step_axis(summary),
                      xaxis_type="category", margin=dict(t=40, b=40, l=60, r=20))
    return fig


def tier_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    tiers = sorted({t for s in steps for t in s["latency_by_tier_ms"]})
    fig = go.Figure()
    for t in tiers:
        for q, dash in (("p50", None), ("p95", "dot")):
            fig.add_scatter(x=lx([s["concurrency"] for s in steps]),
                            y=[(s["latency_by_tier_ms"].get(t) or {}).get(q) for s in steps],
                            name=f"{esc(t)} {q}", mode="lines+markers", line=dict(dash=dash))
    _conc_axis(fig, steps, step_axis(summary))
    fig.update_layout(title="Wait by text-length tier (ms)", height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


STREAM_COLOURS = {"typical": "#1f77b4", "worst": "#d62728"}
STREAM_COLS = 4  # subplots per row of the stream-health figure


def stream_figure(rd: RunDir, summary: dict) -> go.Figure | None:
    """Per step, audio received and played (s) over time since t0 (s) of a typical and the worst
    stream; None when no step has a stream with chunk lists."""
    steps = [s for s in summary["steps"] if s.get("requests")]
    a = rd.requests.attempts()
    buffer_ms = rd.playback_buffer_ms()
    drawn = []
    for s in steps:
        picks = {name: (row, playback(at, audio, buffer_ms)) for name, (row, at, audio)
                 in pick_streams(a, rd.requests, s["step"]).items()}
        drawn.append((s, {k: v for k, v in picks.items() if v[1] is not None}))
    if not any(p for _, p in drawn):
        return None
    cols = min(STREAM_COLS, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[
        f"{s['concurrency']} stream{'s' if s['concurrency'] != 1 else ''}: "
        + ("-" if s.get("underrun_rate") is None else f"{s['underrun_rate']:.0%} stalled") for s, _ in drawn], horizontal_spacing=0.05, vertical_spacing=0.12)
    shown = set()
    for i, (s, picks) in enumerate(drawn):
        r, c = i // cols + 1, i % cols + 1
        for name in ("typical", "worst"):
            if name not in picks:
                continue
            row, pb = picks[name]
            tid = a["text"][row]
            runs, silent = a["underruns"][row], a["underrun_ms"][row]  # the client's own figures
            runs, silent = (runs, silent) if np.isfinite(runs) and np.isfinite(silent) else (pb.underruns,
                                                                                            pb.underrun_ms)
            label = (f"{name} stream at {s['concurrency']}: text {esc(a.texts[tid]) if tid >= 0 else '?'}, "
                     f"TTFA {a['ttfa_ms'][row]:.0f} ms, {runs:.0f} stalls, {silent:.0f} ms silent")
            colour = STREAM_COLOURS[name]
            fig.add_scatter(x=pb.received_t / 1000, y=pb.received / 1000, mode="lines", line_shape="hv",
                            line=dict(color=colour, width=1), name=f"received ({name})", legendgroup=f"r{name}",
                            showlegend=f"r{name}" not in shown, hovertext=label, hoverinfo="text+x+y",
                            row=r, col=c)
            fig.add_scatter(x=pb.played_t / 1000, y=pb.played / 1000, mode="lines",
                            line=dict(color=colour, width=3, dash="dot"), name=f"played ({name})",
                            legendgroup=f"p{name}", showlegend=f"p{name}" not in shown, hovertext=label,
                            hoverinfo="text+x+y", row=r, col=c)
            if pb.underruns:
                fig.add_scatter(x=pb.stalls_t / 1000, y=pb.stalls / 1000, mode="markers",
                                marker=dict(color=colour, symbol="line-ns-open", size=9), name=f"stall ({name})",
                                legendgroup=f"s{name}", showlegend=f"s{name}" not in shown, hovertext=label,
                                hoverinfo="text+x", row=r, col=c)
                shown.add(f"s{name}")
            shown |= {f"r{name}", f"p{name}"}
    fig.update_xaxes(title_text="s since sent", rangemode="tozero")
    fig.update_yaxes(title_text="audio s", rangemode="tozero", col=1)
    fig.update_layout(height=300 * rows + 80, margin=dict(t=50, b=40, l=60, r=20))
    return fig


def underrun_figure(summary: dict) -> go.Figure:
    steps = [s for s in summary["steps"] if s.get("requests")]
    labels = [str(s["concurrency"]) for s in steps]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Streams that stalled (%)", "Stall per stream (ms)"))
    fig.add_bar(x=labels, y=[None if s.get("underrun_rate") is None else 100 * s["underrun_rate"] for s in steps],
                name="streams with >= 1 underrun", marker_color="#d62728", row=1, col=1)
    fig.add_hline(y=100 * UNDERRUN_RATE, line=dict(color="#999", dash="dash"), row=1, col=1,
                  annotation_text=f"{UNDERRUN_RATE:.0%}: the step breaks")
    for key, q, name in (("underrun_ms", "p95", "p95 stall"), ("underrun_ms", "max", "max stall"),
                         ("gap_max_ms", "p95", "p95 largest gap between chunks")):
        fig.add_scatter(x=labels, y=[(s.get(key) or {}).get(q) for s in steps], name=name,
                        mode="lines+markers", row=1, col=2)
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=340, margin=dict(t=40, b=40, l=60, r=20))
    return fig


def integrity_html(summary: dict) -> str:
    steps = [s for s in summary["steps"] if (s.get("integrity") or {}).get("checked")]
    if not steps:
        return ""
    lowest = "among the attempts sent with the fewest requests in flight" if is_open_loop(summary) \
        else "at the lowest concurrency"
    rule = (f"Audio length against the same text's median {lowest}; a mismatch is off by more "
            f"than {INTEGRITY_REL:.0%} (at least {INTEGRITY_ABS_S} s).")
    if not any(s["integrity"]["mismatched"] for s in steps):
        checked = sum(s["integrity"]["checked"] for s in steps)
        return f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)} No mismatches in {checked} checked attempts.</p>"
    rows = []
    for s in steps:
        it = s["integrity"]
        ex = "; ".join(f"{e['text_id']}: {e['expected_s']:.2f} s expected, {e['got_s']:.2f} s got"
                       for e in it["examples"])
        rows.append(f"<tr><td>{esc(step_label(s))}</td><td>{it['checked']}</td><td>{it['mismatched']}</td>"
                    f"<td>{100 * (it['rate'] or 0):.1f}</td><td class='l'>{esc(ex)}</td></tr>")
    return (f"<h2>Audio integrity</h2><p class='meta'>{esc(rule)}</p><table><tr><th>{esc(step_axis(summary))}</th>"
            f"<th>checked</th><th>mismatched</th><th>%</th><th class='l'>examples</th></tr>{''.join(rows)}</table>")


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
        rows.append(f"<tr class='{cls}'>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
    return (f"<table><tr>{head}</tr>{''.join(rows)}</table><p class='meta'>Latencies in ms: wait of "
            f"successful final attempts (t2-t0). rps: successful requests per second of the measured "
            f"window (settle time to step end), counting requests that finished in it. Little: mean busy "
            f"users over the window (end-to-end request time overlapping it) / concurrency. Resource "
            f"figures: the busiest host's."
            + (" ttfa: time to the first audio sample; underrun%: successful streams that ran dry at least "
               "once. Both count the streams that ended before their step did (a stream still playing when "
               "the next step began heard the next step's load)." if is_streamed(summary) else "") + "</p>")


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
    lit = ("Little's law holds at every step (within 25%)." if not lit_bad else
           "Little's law off by more than 25% at concurrency " + ", ".join(
               f"{x['concurrency']} ({x['ratio']:.2f})" for x in lit_bad) + ".")
    cls = "verdict ok" if d["kind"] == "no_knee" else "verdict"
    return (f"<div class='{cls}'><div>Knee: <b>{esc(knee['concurrency'] or 'none found')}</b> &middot; "
            f"recommended concurrency: <b>{esc(summary['recommended_concurrency'] or '-')}</b> &middot; "
            f"diagnosis: <span class='kind'>{esc(d['kind'])}</span></div><ul>{ev}</ul>"
            f"<div>{esc(summary['recommendation'])}</div></div>"
            f"<table><tr><th class='l'>knee method</th><th>concurrency</th></tr>{methods}</table>"
            + (f"<p class='meta'>Streamed run: a step breaks when {UNDERRUN_RATE:.0%} or more of its streams "
               f"stall, {FAILURE_RATE:.0%} or more of its attempts fail, or its TTFA p95 stays above "
               f"{LATENCY_RISE}x the lowest step's and above the {knee.get('ttfa_floor_ms') or 0:g} ms floor; "
               f"whole-body time is only a cross-check.</p>" if knee.get("streamed") else "")
            + f"<p class='meta'>Agreeing with the knee: {esc(', '.join(knee['agree']) or 'none')}. {usl_txt} "
            f"{esc(lit)}</p>")


def errors_html(summary: dict) -> str:
    rows = [f"<tr><td>{esc(step_label(s))}</td><td>{esc(e['count'])}</td><td class='l'>{esc(e['error'])}</td></tr>"
            for s in summary["steps"] for e in s.get("errors", [])]
    if not rows:
        return "<p class='meta'>No failed attempts.</p>"
    return (f"<table><tr><th>{esc(step_axis(summary))}</th><th>attempts</th><th class='l'>error</th></tr>"
            + "".join(rows) + "</table>")


def page(title: str, body: str, head_extra: str = "") -> str:
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>{head_extra}"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


def _meta_html(rd: RunDir, summary: dict) -> str:
    run = summary["run"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(run["start"])) + " UTC" if run.get("start") else "?"
    bad = summary["bad_lines"]
    notes = []
    if run["in_progress"]:
        notes.append("run in progress: the last step is still open")
    if bad["requests"] or bad["resources"]:
        notes.append(f"skipped bad lines: requests.jsonl {bad['requests']}, resources.jsonl {bad['resources']}")
    if run.get("run_json_error"):
        notes.append(run["run_json_error"])
    workers = run.get("workers") if isinstance(run.get("workers"), list) else []
    lost = [w for w in workers if isinstance(w, dict) and w.get("lost_at")]
    if lost:
        notes.append(f"{len(lost)} worker(s) went away mid-run: " + ", ".join(str(w.get("id")) for w in lost))
    note = "".join(f"<div class='warn'>{esc(n)}</div>" for n in notes)
    return (f"<div class='meta'>target {esc(run.get('target'))} &middot; started {esc(when)} &middot; "
            f"{summary['records']['attempts']} attempts &middot; {len(workers) or 1} load process(es)</div>{note}")


def report_html(rd: RunDir, summary: dict, plotlyjs="embed", live_script: str = "") -> str:
    """The report page.  ``plotlyjs``: "embed" (self-contained) or a URL to load plotly.js from."""
    first = True if plotlyjs == "embed" else plotlyjs
    from . import openloop_report as ol   # it builds on this module's helpers
    open_loop = is_open_loop(summary)
    by_step = ol.as_levels(summary) if open_loop else summary   # other figures: one point per rate
    figs = [ol.curves_figure(summary) if open_loop else curves_figure(summary), timeline_figure(rd, summary),
            stages_figure(by_step), retries_figure(by_step), memory_figure(by_step), tier_figure(by_step)]
    if is_streamed(summary):
        figs += [underrun_figure(summary), stream_figure(rd, summary)]
    parts = []
    for f in figs:
        parts.append(_fig_html(f, first) if f is not None else "")
        first = first if f is None else False
    run_id = summary["run"]["run_id"]
    stream = ""
    if is_streamed(summary):
        stream = (f"<h2>Stream health: audio received vs played</h2>{parts[6]}"
                  + (parts[7] or "<p class='meta'>No stream carries chunk arrival times, so none can be "
                                 "drawn.</p>")
                  + f"<p class='meta'>Per step, the typical (median) and the worst stream, ranked by TTFA plus "
                    f"total stall. Thin staircase: audio received; dotted: audio played by a player that starts "
                    + (f"once {rd.playback_buffer_ms():g} ms of audio is in" if rd.playback_buffer_ms()
                       else "with the first audio")
                    + " and plays at 1x, flat while it waits for the next chunk (a stall, marked with a tick).</p>")
    from .server_report import server_section  # both build on this module's helpers
    from .slo_report import sections
    body = (f"<h1>tts-knee &middot; {esc(run_id)}</h1>{_meta_html(rd, summary)}"
            f"<h2>Verdict</h2>{ol.verdict_html(summary) if open_loop else verdict_html(summary)}"
            f"<h2>Steps</h2>{ol.step_table_html(summary) if open_loop else step_table_html(summary)}"
            f"<h2>Latency and throughput</h2>{parts[0]}{sections(summary)}{stream}{integrity_html(summary)}"
            f"<h2>Timeline: client and server on one clock</h2>{parts[1]}{server_section(rd, summary)}"
            f"<h2>Where the time goes</h2>{parts[2]}"
            f"<h2>Retries and throttling</h2>{parts[3]}{errors_html(by_step)}"
            f"<h2>GPU memory: baseline, peak, fall-back</h2>{parts[4]}"
            f"<h2>Latency by text length</h2>{parts[5]}{live_script}")
    return page(f"tts-knee {run_id}", body)


def write_report(rd: RunDir, summary: dict) -> "Path":  # noqa: F821
    out = rd.path / runformat.REPORT_HTML
    tmp = out.with_suffix(".html.tmp")
    html = report_html(rd, summary)
    try:
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(out)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return out
