"""The report's service-level objective: the verdict per tested level (a concurrency, or an
open-loop run's offered rate; repeats pooled) with each term's own figure and interval, the gate
(``--require``), one figure per term against its threshold, and the spread between repeats.
"" when the summary has no SLO."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.confidence import min_bounding_n
from tts_knee.analysis.slo import METRICS, parse

from .kit import (
    FAIL_COLOUR,
    PASS_COLOUR,
    UNSURE_COLOUR,
    Relabelled,
    conc_axis,
    esc,
    fig_html,
    is_open_loop,
    lx,
    step_axis,
)

_WORD = {True: "pass", False: "fail", None: "inconclusive"}
_COLOUR = {True: PASS_COLOUR, False: FAIL_COLOUR, None: UNSURE_COLOUR}


def _key(summary: Relabelled) -> str:
    return "rate" if is_open_loop(summary) else "concurrency"


def _name(summary: Relabelled, v) -> str:
    return f"{v:g} req/s" if is_open_loop(summary) else str(v)


def _metrics(summary: Relabelled) -> list[str]:
    """The SLO's metrics, each once, in the spec's order."""
    return list(dict.fromkeys(t.metric for t in parse(summary["slo"]["spec"]).terms))


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def slo_figure(summary: Relabelled) -> go.Figure:
    """Each SLO term's own figure per level, as it was judged (its value, its 95% interval where
    it has one), coloured by the level's verdict, with the term's threshold drawn."""
    sl, key = summary["slo"], _key(summary)
    verdicts = sl["steps"]
    terms = parse(sl["spec"]).terms
    metrics = _metrics(summary)
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12 / len(metrics),
        subplot_titles=[esc(f"{m}: {METRICS[m]}") for m in metrics],
    )
    x = lx([v[key] for v in verdicts])
    colours = [_COLOUR[v["pass"]] for v in verdicts]
    for row, m in enumerate(metrics, 1):
        y = [v["values"].get(m) for v in verdicts]
        ci = [(v.get("intervals") or {}).get(m) for v in verdicts]
        err = None
        if any(ci):
            err = dict(
                type="data",
                visible=True,
                thickness=1.2,
                width=4,
                array=[c[1] - p if c and c[1] is not None and p is not None else None for p, c in zip(y, ci)],
                arrayminus=[p - c[0] if c and c[0] is not None and p is not None else None for p, c in zip(y, ci)],
            )
        fig.add_scatter(
            x=x,
            y=y,
            name=esc(m) + (" (95% CI)" if err else ""),
            mode="lines+markers",
            error_y=err,
            line=dict(color="#555", width=1),
            marker=dict(size=10, color=colours),
            row=row,
            col=1,
        )
        for t in terms:
            if t.metric == m:
                fig.add_hline(
                    y=t.value,
                    line=dict(color=FAIL_COLOUR, dash="dot"),
                    row=row,
                    col=1,
                    annotation_text=esc(t.text),
                    annotation_position="top left",
                )
        fig.update_yaxes(rangemode="tozero", row=row, col=1)
    best = sl["max_rate"] if key == "rate" else sl["max_concurrency"]
    if best:
        fig.add_vline(
            x=lx(best),
            line=dict(color=PASS_COLOUR, dash="dash"),
            annotation_text=esc(f"meets the SLO up to {_name(summary, best)}"),
        )
    conc_axis(fig, [{"concurrency": v[key]} for v in verdicts], step_axis(summary), row=len(metrics), col=1)
    fig.update_layout(
        height=160 + 230 * len(metrics),
        margin=dict(t=40, b=40, l=60, r=20),
        showlegend=False,
        title=f"The SLO's terms per {'offered rate' if key == 'rate' else 'concurrency'} "
        f"(green pass, red fail, orange inconclusive)",
    )
    return fig


def slo_html(summary: Relabelled, plotlyjs) -> str:
    """Verdict per level (repeats pooled) with each term's figure, and the figure."""
    sl = summary.get("slo")
    if not sl:
        return ""
    key = _key(summary)
    metrics = _metrics(summary)
    levels = {lv[key]: lv for lv in summary["levels"]}
    rows = []
    for v in sl["steps"]:
        lv = levels[v[key]]
        cells = []
        for m in metrics:
            ci = (v.get("intervals") or {}).get(m)
            shown = _fmt(v["values"].get(m))
            if ci:
                low, high = ("unbounded" if end is None else _fmt(end) for end in ci)
                shown += f" [{low}-{high}]"
            cells.append(f"<td>{esc(shown)}</td>")
        notes = "; ".join(v["failed"] + v["inconclusive"])
        rows.append(
            f"<tr><td>{esc(_name(summary, v[key]))}</td><td>{esc(', '.join(map(str, v['steps'])))}</td>"
            f"<td>{esc(lv.get('requests'))}</td>{''.join(cells)}"
            f"<td style='color:{_COLOUR[v['pass']]};font-weight:600'>{_WORD[v['pass']]}</td>"
            f"<td class='l'>{esc(notes)}</td></tr>"
        )
    best = sl["max_rate"] if key == "rate" else sl["max_concurrency"]
    noun = "rate" if key == "rate" else "concurrency"
    met = (
        f"met up to <b>{esc(_name(summary, best))}</b> (every lower tested {noun} meeting it too)"
        if best
        else f"no tested {noun} meets it"
    )
    head = (
        f"<div class='verdict{' ok' if best else ''}'>SLO <b>{esc(sl['spec'])}</b>: {met}. "
        f"{esc(summary['recommendation'])}</div>"
    )
    terms = "".join(f"<th>{esc(m)} [95% CI]</th>" for m in metrics)
    schedule = (
        " Latency terms read latency from the schedule (what a caller arriving on time waited), and a "
        "rate whose latency kept growing through its step fails whatever its percentiles."
        if key == "rate"
        else ""
    )
    table = (
        f"<table><tr><th>{esc(step_axis(summary))}</th><th>steps</th><th>requests</th>{terms}"
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
            f"{esc(_name(summary, gate['rate']) if key == 'rate' else gate['concurrency'])}</b>: "
            f"{esc(gate['claim'] or '')}<br>{esc(gate['reason'])}</div>"
        )
    )
    return head + gate_html + table + fig_html(slo_figure(summary), plotlyjs) + repeats_html(summary)


def repeats_html(summary: Relabelled) -> str:
    """Each repeat's figures where a concurrency was tested more than once."""
    rows = []
    key = _key(summary)
    for lv in summary.get("levels") or []:
        sp = lv.get("spread")
        if not sp:
            continue
        for r in sp["by_repeat"]:
            f = lambda v, fmt="{:.0f}": "-" if v is None else fmt.format(v)  # noqa: E731
            rows.append(
                f"<tr><td>{esc(_name(summary, lv[key]))}</td><td>{esc(r['step'])}</td><td>{esc(r['phase'] or '-')}"
                f"</td><td>{esc(r['repeat'] or '-')}</td><td>{esc(r['requests'])}</td><td>{f(r['p50_ms'])}</td>"
                f"<td>{f(r['p95_ms'])}</td><td>{f(r['throughput_rps'], '{:.2f}')}</td></tr>"
            )
    if not rows:
        return ""
    return (
        f"<h3>Repeats</h3><table><tr><th>{esc(step_axis(summary))}</th><th>step</th><th>phase</th><th>repeat</th>"
        "<th>requests</th><th>p50</th><th>p95</th><th>rps</th></tr>" + "".join(rows) + "</table>"
        "<p class='meta'>The spread between repeats of one concurrency; verdicts use their pooled records.</p>"
    )
