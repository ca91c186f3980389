"""The report's soak section (``--soak``): the drift verdicts, each window's latency,
throughput and memory, and the trend found in each figure (``summary["soak"]``, from
:mod:`analysis.soak`)."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.soak import per_host
from tts_knee.runformat.summary import Soak, Summary

from .kit import esc, fig_html, fmt
from .table import soak_headline

MB = 1e6
_UNITS = {"ms": ("ms", 1.0, "{:.1f}"), "req/s": ("req/s", 1.0, "{:.2f}"), "bytes": ("MB", MB, "{:.2f}")}
_MEMORY = (
    ("server_rss_bytes", "server RSS"),
    ("gpu_mem_bytes", "GPU memory"),
    ("client_rss_bytes", "load generator RSS"),
)


def soak_figure(soak: Soak) -> go.Figure:
    rows = soak["windows"]
    t0 = soak.get("start") or (rows[0]["start"] if rows else 0.0)
    x = [((r["start"] + r["end"]) / 2 - t0) / 60.0 for r in rows]
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("Latency per window (ms)", "Throughput (req/s)", "Memory (MB)"),
    )
    figures: list[Mapping[str, object]] = [*rows]
    for key, name, dash in (("p50_ms", "p50", None), ("p95_ms", "p95", "dot"), ("ttfa_p95_ms", "TTFA p95", "dash")):
        if any(r.get(key) is not None for r in figures):
            fig.add_scatter(
                x=x,
                y=[r.get(key) for r in figures],
                name=name,
                mode="lines+markers",
                line=dict(dash=dash),
                row=1,
                col=1,
            )
    fig.add_scatter(x=x, y=[r["throughput_rps"] for r in rows], name="throughput", mode="lines+markers", row=2, col=1)
    for key, name in _MEMORY:
        by_host = [per_host(r, key) for r in rows]
        for host in sorted({h for held in by_host for h in held}):
            fig.add_scatter(
                x=x,
                y=[None if held.get(host) is None else held[host] / MB for held in by_host],
                name=f"{name} {esc(host)}",
                mode="lines+markers",
                row=3,
                col=1,
            )
    fig.update_xaxes(title_text="minutes into the soak", row=3, col=1)
    fig.update_layout(height=720, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.1))
    return fig


def _trend_rows(soak: Soak) -> str:
    out = []
    for t in soak["trends"]:
        unit, scale, spec = _UNITS.get(t["unit"], (t["unit"], 1.0, "{:.2f}"))
        lo, hi = t["slope_ci"]
        out.append(
            f"<tr{' class=knee' if t['drift'] else ''}><td class='l'>{esc(t['figure'])}</td>"
            f"<td class='l'>{esc(t['host'] or '')}</td><td class='l'>{esc(unit)}</td>"
            f"<td>{fmt(t['first'] / scale, spec)}</td>"
            f"<td>{fmt(t['last'] / scale, spec)}</td><td>{fmt(t['slope_per_min'] / scale, spec)} {esc(unit)}/min</td>"
            f"<td>{fmt(lo / scale, spec)} to {fmt(hi / scale, spec)}</td><td>{fmt(t['p_value'], '{:.3g}')}</td>"
            f"<td>{fmt(t['steady_after_s'] / 60.0, '{:.1f}')}</td><td>{'drift' if t['drift'] else '-'}</td></tr>"
        )
    return "".join(out)


def soak_html(summary: Summary) -> str:
    """The section (empty for a run without a soak); plotly.js is loaded by an earlier figure."""
    soak = summary.get("soak")
    if not soak:
        return ""
    verdicts = soak["drift"]
    lines = (
        "".join(f"<div class='kind'>{esc(v)}</div>" for v in verdicts)
        or "<div class='kind'>No drift: latency, throughput and memory held over the soak.</div>"
    )
    table = (
        f"<table><tr><th class='l'>figure</th><th class='l'>host</th><th class='l'>unit</th>"
        "<th>first window</th><th>last window</th>"
        f"<th>slope</th><th>95% interval</th><th>p (Mann-Kendall)</th><th>steady after (min)</th><th></th></tr>"
        f"{_trend_rows(soak)}</table>"
    )
    return (
        f"<h2>Soak: drift over time</h2><div class='verdict{'' if verdicts else ' ok'}'>"
        f"<div class='meta'>{esc(soak_headline(soak))}</div>{lines}</div>"
        f"{fig_html(soak_figure(soak), False)}<p class='meta'>{esc(soak['method'])}.</p>{table}"
    )
