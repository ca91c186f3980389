"""The report's comparison with a baseline run (``--baseline``): this run and the baseline overlaid,
and per concurrency (an open-loop run: per offered rate, latency from the schedule) each figure's
change with its significance (see :mod:`analysis.regression`). "" when the summary has no
``regression``."""

from __future__ import annotations

from typing import Literal, TypedDict

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.runformat.summary import Comparison

from .kit import FAIL_COLOUR, Renderer, ci_bars, esc
from .view import RunView


class _Point(TypedDict):
    """One level of a run as the comparison figure draws it."""

    at: float
    p95_ms: float | None
    p95_ci: list[float | None] | None
    throughput_rps: float | None


def _key(view: RunView) -> Literal["rate", "concurrency"]:
    """The field a regression's levels stand at: an open loop's offered rate, else the concurrency."""
    return "rate" if view.open_loop else "concurrency"


def regression_figure(view: RunView) -> go.Figure:
    """This run and the baseline overlaid: p95 (with 95% intervals) and throughput."""
    summary = view.summary
    regression = summary.get("regression")
    assert regression is not None, "drawn for a run compared with a baseline"
    key = _key(view)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("p95 from schedule (ms)" if key == "rate" else "p95 wait (ms)", "throughput (req/s)"),
    )
    base: list[_Point] = [
        {
            "at": level[key],
            "p95_ms": level["p95_ms"],
            "p95_ci": level["p95_ci"],
            "throughput_rps": level["throughput_rps"],
        }
        for level in regression["baseline"]["levels"]
    ]
    now: list[_Point] = []
    for level in summary["levels"]:
        latency = level.get("sched_wait_ms") if key == "rate" else level.get("latency_ms")
        now.append(
            {
                "at": level[key],
                "p95_ms": latency.get("p95") if latency else None,
                "p95_ci": latency.get("p95_ci") if latency else None,
                "throughput_rps": level.get("throughput_rps"),
            }
        )
    for points, name, colour in (
        (base, f"baseline {regression['baseline']['run_id']}", "#7f7f7f"),
        (now, f"this run {summary['run']['run_id']}", "#1f77b4"),
    ):
        places = view.axis.at([point["at"] for point in points])
        p95 = [point["p95_ms"] for point in points]
        fig.add_scatter(
            x=places,
            y=p95,
            name=esc(name),
            legendgroup=name,
            error_y=ci_bars(p95, [point["p95_ci"] for point in points]),
            mode="lines+markers",
            line=dict(color=colour),
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=places,
            y=[point["throughput_rps"] for point in points],
            name=esc(name),
            legendgroup=name,
            showlegend=False,
            mode="lines+markers",
            line=dict(color=colour),
            row=1,
            col=2,
        )
    for regressed in [row[key] for row in regression["steps"] if row["regression"]]:
        for col in (1, 2):
            fig.add_vline(x=view.axis.at(regressed), line=dict(color=FAIL_COLOUR, dash="dot", width=1), row=1, col=col)
    for col in (1, 2):
        view.axis.draw(fig, [point["at"] for point in base + now], row=1, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=380, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _fig_cell(compared: Comparison | None, unit: str, spec: str, scale: float = 1.0, points: bool = False) -> str:
    """old -> new (change, p, significance), shaded red for a regression, green for better;
    ``points``: the change in percentage points (error rates) rather than relative."""
    if not compared:
        return "<td>-</td>"
    change = f"{100 * compared['change']:+.1f} pt" if points else f"{compared['change']:+.0%}"
    shade = "#fdecea" if compared["regression"] else ("#eaf7ea" if compared["improvement"] else None)
    style = f" style='background:{shade}'" if shade else ""
    significant = "significant" if compared["significant"] else "not significant"
    return (
        f"<td{style}>{spec.format(scale * compared['old'])} &rarr; {spec.format(scale * compared['new'])}{unit} "
        f"({change}, p={compared['p_value']:.2g}, {significant})</td>"
    )


def regression_html(view: RunView, render: Renderer) -> str:
    regression = view.summary.get("regression")
    if not regression:
        return ""
    warn = "".join(f"<div class='warn'>{esc(warning)}</div>" for warning in regression["warnings"])
    ttfa = any(row.get("ttfa_p95_ms") for row in regression["steps"])
    key = _key(view)
    wait = "from schedule" if key == "rate" else "wait"
    rows = "".join(
        f"<tr><td>{esc(f'{row[key]:g}')}</td>{_fig_cell(row['p50_ms'], ' ms', '{:.0f}')}"
        f"{_fig_cell(row['p95_ms'], ' ms', '{:.0f}')}"
        + (_fig_cell(row.get("ttfa_p95_ms"), " ms", "{:.0f}") if ttfa else "")
        + f"{_fig_cell(row['throughput_rps'], '', '{:.2f}')}"
        f"{_fig_cell(row['error_rate'], '%', '{:.1f}', scale=100, points=True)}"
        f"<td>{'regression' if row['regression'] else ('better' if row['improvement'] else 'no regression')}</td></tr>"
        for row in regression["steps"]
    )
    return (
        f"<div class='verdict{'' if regression['regressed'] else ' ok'}'>{esc(regression['verdict'])}</div>{warn}"
        f"<table><tr><th>{esc(view.axis.title)}</th><th>p50 {wait}</th><th>p95 {wait}</th>"
        f"{'<th>p95 TTFA</th>' if ttfa else ''}<th>throughput req/s</th>"
        f"<th>errors</th><th>verdict</th></tr>{rows}</table>"
        f"<p class='meta'>Baseline {esc(regression['baseline']['run_id'])} ({esc(regression['baseline']['path'])}); "
        f"tolerance {regression['tolerance']:.0%}; significant: p &lt; {regression['alpha']}. A regression is a "
        f"significant change beyond the tolerance (see analysis/regression.py).</p>" + render(regression_figure(view))
    )
