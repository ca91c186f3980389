"""The report's service-level objective: the verdict per tested level (a concurrency, or an
open-loop run's offered rate; repeats pooled) with each term's own figure and interval, the gate
(``--require``), one figure per term against its threshold, and the spread between repeats.
"" when the summary has no SLO."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.confidence import min_bounding_n
from tts_knee.analysis.slo import METRICS, parse
from tts_knee.runformat.summary import Slo, SloVerdict

from .kit import FAIL_COLOUR, PASS_COLOUR, UNSURE_COLOUR, Renderer, ci_bars, esc, fmt
from .view import RunView

_WORD = {True: "pass", False: "fail", None: "inconclusive"}
_COLOUR = {True: PASS_COLOUR, False: FAIL_COLOUR, None: UNSURE_COLOUR}


def _name(view: RunView, level: float | None) -> str:
    return f"{level:g} req/s" if view.key == "rate" and level is not None else str(level)


def _metrics(slo: Slo) -> list[str]:
    """The SLO's metrics, each once, in the spec's order."""
    return list(dict.fromkeys(term.metric for term in parse(slo["spec"]).terms))


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def slo_figure(view: RunView) -> go.Figure:
    """Each SLO term's own figure per level, as it was judged (its value, its 95% interval where
    it has one), coloured by the level's verdict, with the term's threshold drawn."""
    slo = view.summary["slo"]
    assert slo is not None, "drawn for a run judged against an SLO"
    verdicts, terms, metrics = slo["steps"], parse(slo["spec"]).terms, _metrics(slo)
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12 / len(metrics),
        subplot_titles=[esc(f"{metric}: {METRICS[metric]}") for metric in metrics],
    )
    levels = [verdict.get(view.key) for verdict in verdicts]
    colours = [_COLOUR[verdict["pass"]] for verdict in verdicts]
    for row, metric in enumerate(metrics, 1):
        values = [verdict["values"].get(metric) for verdict in verdicts]
        bars = ci_bars(values, [(verdict.get("intervals") or {}).get(metric) for verdict in verdicts])
        fig.add_scatter(
            x=view.axis.at(levels),
            y=values,
            name=esc(metric) + (" (95% CI)" if bars else ""),
            mode="lines+markers",
            error_y=bars,
            line=dict(color="#555", width=1),
            marker=dict(size=10, color=colours),
            row=row,
            col=1,
        )
        for term in terms:
            if term.metric == metric:
                fig.add_hline(
                    y=term.value,
                    line=dict(color=FAIL_COLOUR, dash="dot"),
                    row=row,
                    col=1,
                    annotation_text=esc(term.text),
                    annotation_position="top left",
                )
        fig.update_yaxes(rangemode="tozero", row=row, col=1)
    best = view.slo_met_to
    if best:
        fig.add_vline(
            x=view.axis.at(best),
            line=dict(color=PASS_COLOUR, dash="dash"),
            annotation_text=esc(f"meets the SLO up to {_name(view, best)}"),
        )
    view.axis.draw(fig, levels, row=len(metrics), col=1)
    fig.update_layout(
        height=160 + 230 * len(metrics),
        margin=dict(t=40, b=40, l=60, r=20),
        showlegend=False,
        title=f"The SLO's terms per {view.level_noun} (green pass, red fail, orange inconclusive)",
    )
    return fig


def _verdict_row(view: RunView, verdict: SloVerdict, metrics: list[str], requests: object) -> str:
    """One level's row: its steps and requests, each term's figure [95% interval], the verdict."""
    cells = []
    for metric in metrics:
        interval = (verdict.get("intervals") or {}).get(metric)
        shown = _fmt(verdict["values"].get(metric))
        if interval:
            low, high = ("unbounded" if end is None else _fmt(end) for end in interval)
            shown += f" [{low}-{high}]"
        cells.append(f"<td>{esc(shown)}</td>")
    notes = "; ".join(verdict["failed"] + verdict["inconclusive"])
    return (
        f"<tr><td>{esc(_name(view, verdict.get(view.key)))}</td><td>{esc(', '.join(map(str, verdict['steps'])))}</td>"
        f"<td>{esc(requests)}</td>{''.join(cells)}"
        f"<td style='color:{_COLOUR[verdict['pass']]};font-weight:600'>{_WORD[verdict['pass']]}</td>"
        f"<td class='l'>{esc(notes)}</td></tr>"
    )


def slo_html(view: RunView, render: Renderer) -> str:
    """Verdict per level (repeats pooled) with each term's figure, and the figure."""
    summary = view.summary
    slo = summary.get("slo")
    if not slo:
        return ""
    metrics = _metrics(slo)
    requests = {level.get(view.key): level.get("requests") for level in summary["levels"]}
    rows = [_verdict_row(view, verdict, metrics, requests[verdict.get(view.key)]) for verdict in slo["steps"]]
    best, noun = view.slo_met_to, view.level_noun
    met = (
        f"met up to <b>{esc(_name(view, best))}</b> (every lower tested {noun} meeting it too)"
        if best
        else f"no tested {noun} meets it"
    )
    head = (
        f"<div class='verdict{' ok' if best else ''}'>SLO <b>{esc(slo['spec'])}</b>: {met}. "
        f"{esc(summary['recommendation'])}</div>"
    )
    terms = "".join(f"<th>{esc(metric)} [95% CI]</th>" for metric in metrics)
    schedule = (
        " Latency terms read latency from the schedule (what a caller arriving on time waited), and a "
        "rate whose latency kept growing through its step fails whatever its percentiles."
        if view.key == "rate"
        else ""
    )
    table = (
        f"<table><tr><th>{esc(view.axis.title)}</th><th>steps</th><th>requests</th>{terms}"
        "<th>SLO</th><th class='l'>failed or inconclusive terms</th></tr>" + "".join(rows) + "</table>"
        f"<p class='meta'>Each {noun} is judged on the pooled records of every step that tested it.{schedule} "
        "A percentile term whose 95% interval straddles its threshold is inconclusive, and counts as "
        "not meeting the SLO; the interval narrows about as 1/sqrt(requests), which gives the "
        f"estimate of how many more requests would settle it. Fewer than {min_bounding_n(95)} requests "
        "cannot bound a p95 from above (nothing says the slowest 5% are not slower than the slowest request "
        "seen): such "
        "an interval is open at the top, and a p95 term cannot pass on it.</p>"
    )
    gate = summary.get("require")
    gate_html = (
        ""
        if not gate
        else (
            f"<div class='verdict{' ok' if gate['holds'] else ''}'><b>--require "
            f"{esc(_name(view, gate['rate']) if view.key == 'rate' else gate['concurrency'])}</b>: "
            f"{esc(gate['claim'] or '')}<br>{esc(gate['reason'])}</div>"
        )
    )
    return head + gate_html + table + render(slo_figure(view)) + repeats_html(view)


def repeats_html(view: RunView) -> str:
    """Each repeat's figures where a level was tested more than once."""
    rows = []
    for level in view.summary.get("levels") or []:
        spread = level.get("spread")
        if not spread:
            continue
        for repeat in spread["by_repeat"]:
            rows.append(
                f"<tr><td>{esc(_name(view, level.get(view.key)))}</td><td>{esc(repeat['step'])}</td>"
                f"<td>{esc(repeat['phase'] or '-')}</td><td>{esc(repeat['repeat'] or '-')}</td>"
                f"<td>{esc(repeat['requests'])}</td><td>{fmt(repeat['p50_ms'])}</td><td>{fmt(repeat['p95_ms'])}</td>"
                f"<td>{fmt(repeat['throughput_rps'], '{:.2f}')}</td></tr>"
            )
    if not rows:
        return ""
    return (
        f"<h3>Repeats</h3><table><tr><th>{esc(view.axis.title)}</th><th>step</th><th>phase</th><th>repeat</th>"
        "<th>requests</th><th>p50</th><th>p95</th><th>rps</th></tr>" + "".join(rows) + "</table>"
        "<p class='meta'>The spread between repeats of one concurrency; verdicts use their pooled records.</p>"
    )
