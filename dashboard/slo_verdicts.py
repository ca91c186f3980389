"""The report's service-level objective: the verdict per tested concurrency (repeats pooled) with
each term's value, the gate (``--require``), the figure against the SLO's thresholds, and the
spread between repeats. "" when the summary has no SLO."""
from __future__ import annotations

import plotly.graph_objects as go

from analysis.confidence import ci_range, min_bounding_n
from analysis.slo import parse

from .kit import FAIL_COLOUR, PASS_COLOUR, UNSURE_COLOUR, ci_bars, conc_axis, esc, fig_html, lx

_WORD = {True: "pass", False: "fail", None: "inconclusive"}
_COLOUR = {True: PASS_COLOUR, False: FAIL_COLOUR, None: UNSURE_COLOUR}
_THRESHOLD_TERMS = {"p50_ms": "p50", "p95_ms": "p95"}


def slo_figure(summary: dict) -> go.Figure:
    """p50 and p95 wait per concurrency with their 95% intervals, coloured by SLO verdict, and
    the thresholds of the SLO's p50/p95 terms."""
    levels, sl = summary["levels"], summary["slo"]
    verdicts = {v["concurrency"]: v["pass"] for v in sl["steps"]}
    fig = go.Figure()
    x = lx([lv["concurrency"] for lv in levels])
    colours = [_COLOUR[verdicts.get(lv["concurrency"])] for lv in levels]
    for q, symbol in (("p50", "circle-open"), ("p95", "circle")):
        fig.add_scatter(x=x, y=[(lv.get("latency_ms") or {}).get(q) for lv in levels], name=f"{q} wait (95% CI)",
                        mode="lines+markers", error_y=ci_bars(levels, "latency_ms", q),
                        line=dict(color="#555", width=1), marker=dict(symbol=symbol, size=10, color=colours))
    for t in parse(sl["spec"]).terms:
        if t.metric in _THRESHOLD_TERMS:
            fig.add_hline(y=t.value, line=dict(color=FAIL_COLOUR, dash="dot"),
                          annotation_text=esc(t.text), annotation_position="top left")
    if sl["max_concurrency"]:
        fig.add_vline(x=lx(sl["max_concurrency"]), line=dict(color=PASS_COLOUR, dash="dash"),
                      annotation_text=f"meets the SLO up to {sl['max_concurrency']}")
    conc_axis(fig, levels)
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    fig.update_layout(height=380, margin=dict(t=30, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2),
                      title="Wait per concurrency against the SLO (green pass, red fail, orange inconclusive)")
    return fig


def slo_html(summary: dict, plotlyjs) -> str:
    """Verdict per concurrency (repeats pooled) with each term's value, and the figure."""
    sl = summary.get("slo")
    if not sl:
        return ""
    levels = {lv["concurrency"]: lv for lv in summary["levels"]}
    rows = []
    for v in sl["steps"]:
        lv = levels[v["concurrency"]]
        lat = lv.get("latency_ms") or {}
        ci = lat.get("p95_ci")
        p95 = "-" if lat.get("p95") is None else f"{lat['p95']:.0f}" + (f" [{ci_range(ci)}]" if ci else "")
        notes = "; ".join(v["failed"] + v["inconclusive"])
        rows.append(f"<tr><td>{esc(v['concurrency'])}</td><td>{esc(', '.join(map(str, v['steps'])))}</td>"
                    f"<td>{esc(lv.get('requests'))}</td><td>{esc(p95)}</td>"
                    f"<td style='color:{_COLOUR[v['pass']]};font-weight:600'>{_WORD[v['pass']]}</td>"
                    f"<td class='l'>{esc(notes)}</td></tr>")
    best = sl["max_concurrency"]
    head = (f"<div class='verdict{' ok' if best else ''}'>SLO <b>{esc(sl['spec'])}</b>: met up to concurrency "
            f"<b>{esc(best if best else 'none')}</b> (every lower tested concurrency meeting it too). "
            f"{esc(summary['recommendation'])}</div>")
    table = ("<table><tr><th>concurrency</th><th>steps</th><th>requests</th><th>p95 wait [95% CI]</th>"
             "<th>SLO</th><th class='l'>failed or inconclusive terms</th></tr>" + "".join(rows) + "</table>"
             "<p class='meta'>Each concurrency is judged on the pooled records of every step that tested it. "
             "A percentile term whose 95% interval straddles its threshold is inconclusive, and counts as "
             "not meeting the SLO; the interval narrows about as 1/sqrt(requests), which gives the "
             f"estimate of how many more requests would settle it. Fewer than {min_bounding_n(95)} requests "
             "cannot bound a p95 from above (nothing says the slowest 5% are not slower than the slowest request seen): such "
             "an interval is open at the top, and a p95 term cannot pass on it.</p>")
    gate = summary.get("require")
    gate_html = "" if not gate else (
        f"<div class='verdict{' ok' if gate['holds'] else ''}'><b>--require {esc(gate['concurrency'])}</b>: "
        f"{esc(gate['claim'] or '')}<br>{esc(gate['reason'])}</div>")
    return head + gate_html + table + fig_html(slo_figure(summary), plotlyjs) + repeats_html(summary)


def repeats_html(summary: dict) -> str:
    """Each repeat's figures where a concurrency was tested more than once."""
    rows = []
    for lv in summary.get("levels") or []:
        sp = lv.get("spread")
        if not sp:
            continue
        for r in sp["by_repeat"]:
            f = lambda v, fmt="{:.0f}": "-" if v is None else fmt.format(v)  # noqa: E731
            rows.append(f"<tr><td>{esc(lv['concurrency'])}</td><td>{esc(r['step'])}</td><td>{esc(r['phase'] or '-')}"
                        f"</td><td>{esc(r['repeat'] or '-')}</td><td>{esc(r['requests'])}</td><td>{f(r['p50_ms'])}</td>"
                        f"<td>{f(r['p95_ms'])}</td><td>{f(r['throughput_rps'], '{:.2f}')}</td></tr>")
    if not rows:
        return ""
    return ("<h3>Repeats</h3><table><tr><th>concurrency</th><th>step</th><th>phase</th><th>repeat</th>"
            "<th>requests</th><th>p50</th><th>p95</th><th>rps</th></tr>" + "".join(rows) + "</table>"
            "<p class='meta'>The spread between repeats of one concurrency; verdicts use their pooled records.</p>")
