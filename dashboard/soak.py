"""The report's soak section (``--soak``): the drift verdicts, each window's latency,
throughput and memory, and the trend found in each figure (``summary["soak"]``, from
:mod:`analysis.soak`)."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.soak import per_host
from tts_knee.runformat.summary import Soak

from .kit import Renderer, esc, fmt
from .table import soak_headline
from .view import RunView

MB = 1e6
_UNITS = {"ms": ("ms", 1.0, "{:.1f}"), "req/s": ("req/s", 1.0, "{:.2f}"), "bytes": ("MB", MB, "{:.2f}")}
_MEMORY = (
    ("server_rss_bytes", "server RSS"),
    ("gpu_mem_bytes", "GPU memory"),
    ("client_rss_bytes", "load generator RSS"),
)


def soak_figure(soak: Soak) -> go.Figure:
    windows = soak["windows"]
    start = soak.get("start") or (windows[0]["start"] if windows else 0.0)
    minutes = [((window["start"] + window["end"]) / 2 - start) / 60.0 for window in windows]
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("Latency per window (ms)", "Throughput (req/s)", "Memory (MB)"),
    )
    figures: list[Mapping[str, object]] = [*windows]
    for key, name, dash in (("p50_ms", "p50", None), ("p95_ms", "p95", "dot"), ("ttfa_p95_ms", "TTFA p95", "dash")):
        if any(window.get(key) is not None for window in figures):
            fig.add_scatter(
                x=minutes,
                y=[window.get(key) for window in figures],
                name=name,
                mode="lines+markers",
                line=dict(dash=dash),
                row=1,
                col=1,
            )
    throughput = [window["throughput_rps"] for window in windows]
    fig.add_scatter(x=minutes, y=throughput, name="throughput", mode="lines+markers", row=2, col=1)
    for key, name in _MEMORY:
        by_host = [per_host(window, key) for window in windows]
        for host in sorted({host for held in by_host for host in held}):
            fig.add_scatter(
                x=minutes,
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
    for trend in soak["trends"]:
        unit, scale, spec = _UNITS.get(trend["unit"], (trend["unit"], 1.0, "{:.2f}"))
        low, high = trend["slope_ci"]
        out.append(
            f"<tr{' class=knee' if trend['drift'] else ''}><td class='l'>{esc(trend['figure'])}</td>"
            f"<td class='l'>{esc(trend['host'] or '')}</td><td class='l'>{esc(unit)}</td>"
            f"<td>{fmt(trend['first'] / scale, spec)}</td><td>{fmt(trend['last'] / scale, spec)}</td>"
            f"<td>{fmt(trend['slope_per_min'] / scale, spec)} {esc(unit)}/min</td>"
            f"<td>{fmt(low / scale, spec)} to {fmt(high / scale, spec)}</td><td>{fmt(trend['p_value'], '{:.3g}')}</td>"
            f"<td>{fmt(trend['steady_after_s'] / 60.0, '{:.1f}')}</td>"
            f"<td>{'drift' if trend['drift'] else '-'}</td></tr>"
        )
    return "".join(out)


def soak_html(view: RunView, render: Renderer) -> str:
    """The section (empty for a run without a soak)."""
    soak = view.summary.get("soak")
    if not soak:
        return ""
    verdicts = soak["drift"]
    lines = (
        "".join(f"<div class='kind'>{esc(verdict)}</div>" for verdict in verdicts)
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
        f"{render(soak_figure(soak))}<p class='meta'>{esc(soak['method'])}.</p>{table}"
    )
