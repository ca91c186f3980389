"""The report's comparison with a baseline run (``--baseline``): this run and the baseline overlaid,
and per concurrency (an open-loop run: per offered rate, latency from the schedule) each figure's
change with its significance (see :mod:`analysis.regression`). "" when the summary has no
``regression``."""

from __future__ import annotations

from typing import Literal, TypedDict

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.runformat.summary import Comparison, Summary

from .kit import FAIL_COLOUR, conc_axis, esc, fig_html, is_open_loop, lx, step_axis


class _Point(TypedDict):
    """One level of a run as the comparison figure draws it."""

    at: float
    p95_ms: float | None
    p95_ci: list[float | None] | None
    throughput_rps: float | None


def _key(summary: Summary) -> Literal["rate", "concurrency"]:
    return "rate" if is_open_loop(summary) else "concurrency"


def regression_figure(summary: Summary) -> go.Figure:
    """This run and the baseline overlaid: p95 (with 95% intervals) and throughput."""
    reg = summary.get("regression")
    assert reg is not None, "drawn for a run compared with a baseline"
    key = _key(summary)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("p95 from schedule (ms)" if key == "rate" else "p95 wait (ms)", "throughput (req/s)"),
    )
    base: list[_Point] = [
        {"at": lv[key], "p95_ms": lv["p95_ms"], "p95_ci": lv["p95_ci"], "throughput_rps": lv["throughput_rps"]}
        for lv in reg["baseline"]["levels"]
    ]
    now: list[_Point] = []
    for lv in summary["levels"]:
        lat = lv.get("sched_wait_ms") if key == "rate" else lv.get("latency_ms")
        now.append(
            {
                "at": lv[key],
                "p95_ms": lat.get("p95") if lat else None,
                "p95_ci": lat.get("p95_ci") if lat else None,
                "throughput_rps": lv.get("throughput_rps"),
            }
        )
    for rows, name, colour in (
        (base, f"baseline {reg['baseline']['run_id']}", "#7f7f7f"),
        (now, f"this run {summary['run']['run_id']}", "#1f77b4"),
    ):
        x = lx([r["at"] for r in rows])
        err = dict(
            type="data",
            visible=True,
            thickness=1.2,
            width=4,
            array=[_ci_arm(r, 1) for r in rows],
            arrayminus=[_ci_arm(r, 0) for r in rows],
        )
        fig.add_scatter(
            x=x,
            y=[r["p95_ms"] for r in rows],
            name=esc(name),
            legendgroup=name,
            error_y=err,
            mode="lines+markers",
            line=dict(color=colour),
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=x,
            y=[r["throughput_rps"] for r in rows],
            name=esc(name),
            legendgroup=name,
            showlegend=False,
            mode="lines+markers",
            line=dict(color=colour),
            row=1,
            col=2,
        )
    bad = [r[key] for r in reg["steps"] if r["regression"]]
    for c in bad:
        for col in (1, 2):
            fig.add_vline(x=lx(c), line=dict(color=FAIL_COLOUR, dash="dot", width=1), row=1, col=col)
    every = [{"concurrency": r["at"]} for r in base + now]
    for col in (1, 2):
        conc_axis(fig, every, step_axis(summary), row=1, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=380, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _ci_arm(point: _Point, end: int) -> float | None:
    """How far the p95's interval reaches above (``end`` 1) or below (0) it, None where unbounded."""
    ci, p95 = point["p95_ci"], point["p95_ms"]
    bound = ci[end] if ci else None
    if bound is None:
        return None
    assert p95 is not None, "a p95 with an interval is a p95"
    return bound - p95 if end else p95 - bound


def _fig_cell(f: Comparison | None, unit: str, fmt: str, scale: float = 1.0, points: bool = False) -> str:
    """old -> new (change, p, significance), shaded red for a regression, green for better;
    ``points``: the change in percentage points (error rates) rather than relative."""
    if not f:
        return "<td>-</td>"
    change = f"{100 * f['change']:+.1f} pt" if points else f"{f['change']:+.0%}"
    shade = "#fdecea" if f["regression"] else ("#eaf7ea" if f["improvement"] else None)
    style = f" style='background:{shade}'" if shade else ""
    sig = "significant" if f["significant"] else "not significant"
    return (
        f"<td{style}>{fmt.format(scale * f['old'])} &rarr; {fmt.format(scale * f['new'])}{unit} ({change}, "
        f"p={f['p_value']:.2g}, {sig})</td>"
    )


def regression_html(summary: Summary, plotlyjs) -> str:
    reg = summary.get("regression")
    if not reg:
        return ""
    warn = "".join(f"<div class='warn'>{esc(w)}</div>" for w in reg["warnings"])
    ttfa = any(r.get("ttfa_p95_ms") for r in reg["steps"])
    key = _key(summary)
    wait = "from schedule" if key == "rate" else "wait"
    rows = "".join(
        f"<tr><td>{esc(f'{r[key]:g}')}</td>{_fig_cell(r['p50_ms'], ' ms', '{:.0f}')}"
        f"{_fig_cell(r['p95_ms'], ' ms', '{:.0f}')}"
        + (_fig_cell(r.get("ttfa_p95_ms"), " ms", "{:.0f}") if ttfa else "")
        + f"{_fig_cell(r['throughput_rps'], '', '{:.2f}')}"
        f"{_fig_cell(r['error_rate'], '%', '{:.1f}', scale=100, points=True)}"
        f"<td>{'regression' if r['regression'] else ('better' if r['improvement'] else 'no regression')}</td></tr>"
        for r in reg["steps"]
    )
    return (
        f"<div class='verdict{'' if reg['regressed'] else ' ok'}'>{esc(reg['verdict'])}</div>{warn}"
        f"<table><tr><th>{esc(step_axis(summary))}</th><th>p50 {wait}</th><th>p95 {wait}</th>"
        f"{'<th>p95 TTFA</th>' if ttfa else ''}<th>throughput req/s</th>"
        f"<th>errors</th><th>verdict</th></tr>{rows}</table>"
        f"<p class='meta'>Baseline {esc(reg['baseline']['run_id'])} ({esc(reg['baseline']['path'])}); "
        f"tolerance {reg['tolerance']:.0%}; significant: p &lt; {reg['alpha']}. A regression is a "
        f"significant change beyond the tolerance (see analysis/regression.py).</p>"
        + fig_html(regression_figure(summary), plotlyjs)
    )
