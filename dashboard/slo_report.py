"""The SLO, repeats, gate and regression sections of ``report.html``.

Each function takes the summary and returns an HTML fragment ("" when the summary has nothing
for it), so ``dashboard.report`` only places them on the page.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.confidence import ci_range
from .report import _conc_axis, _fig_html, ci_bars, esc, lx
from analysis.slo import parse

PASS_COLOUR, FAIL_COLOUR, UNSURE_COLOUR = "#2ca02c", "#d62728", "#ff7f0e"
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
    _conc_axis(fig, levels)
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
             "estimate of how many more requests would settle it. Fewer than 72 requests cannot bound a p95 "
             "from above (nothing says the slowest 5% are not slower than the slowest request seen): such "
             "an interval is open at the top, and a p95 term cannot pass on it.</p>")
    gate = summary.get("require")
    gate_html = "" if not gate else (
        f"<div class='verdict{' ok' if gate['holds'] else ''}'><b>--require {esc(gate['concurrency'])}</b>: "
        f"{esc(gate['claim'] or '')}<br>{esc(gate['reason'])}</div>")
    return head + gate_html + table + _fig_html(slo_figure(summary), plotlyjs) + repeats_html(summary)


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


def regression_figure(summary: dict) -> go.Figure:
    """This run and the baseline overlaid: p95 (with 95% intervals) and throughput."""
    reg = summary["regression"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("p95 wait (ms)", "throughput (req/s)"))
    base = reg["baseline"]["levels"]
    now = [{"concurrency": lv["concurrency"], "p95_ms": (lv.get("latency_ms") or {}).get("p95"),
            "p95_ci": (lv.get("latency_ms") or {}).get("p95_ci"), "throughput_rps": lv.get("throughput_rps")}
           for lv in summary["levels"]]
    for rows, name, colour in ((base, f"baseline {reg['baseline']['run_id']}", "#7f7f7f"),
                               (now, f"this run {summary['run']['run_id']}", "#1f77b4")):
        x = lx([r["concurrency"] for r in rows])
        err = dict(type="data", visible=True, thickness=1.2, width=4,
                   array=[(r["p95_ci"][1] - r["p95_ms"]) if r["p95_ci"] and r["p95_ci"][1] is not None
                          else None for r in rows],
                   arrayminus=[(r["p95_ms"] - r["p95_ci"][0]) if r["p95_ci"] and r["p95_ci"][0] is not None
                               else None for r in rows])
        fig.add_scatter(x=x, y=[r["p95_ms"] for r in rows], name=esc(name), legendgroup=name, error_y=err,
                        mode="lines+markers", line=dict(color=colour), row=1, col=1)
        fig.add_scatter(x=x, y=[r["throughput_rps"] for r in rows], name=esc(name), legendgroup=name,
                        showlegend=False, mode="lines+markers", line=dict(color=colour), row=1, col=2)
    bad = [r["concurrency"] for r in reg["steps"] if r["regression"]]
    for c in bad:
        for col in (1, 2):
            fig.add_vline(x=lx(c), line=dict(color=FAIL_COLOUR, dash="dot", width=1), row=1, col=col)
    every = [{"concurrency": r["concurrency"]} for r in base + now]
    for col in (1, 2):
        _conc_axis(fig, every, row=1, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=380, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _fig_cell(f: dict | None, unit: str, fmt: str, scale: float = 1.0, points: bool = False) -> str:
    """old -> new (change, p, significance), shaded red for a regression, green for better;
    ``points``: the change in percentage points (error rates) rather than relative."""
    if not f:
        return "<td>-</td>"
    change = f"{100 * f['change']:+.1f} pt" if points else f"{f['change']:+.0%}"
    shade = "#fdecea" if f["regression"] else ("#eaf7ea" if f["improvement"] else None)
    style = f" style='background:{shade}'" if shade else ""
    sig = "significant" if f["significant"] else "not significant"
    return (f"<td{style}>{fmt.format(scale * f['old'])} &rarr; {fmt.format(scale * f['new'])}{unit} ({change}, "
            f"p={f['p_value']:.2g}, {sig})</td>")


def regression_html(summary: dict, plotlyjs) -> str:
    reg = summary.get("regression")
    if not reg:
        return ""
    warn = "".join(f"<div class='warn'>{esc(w)}</div>" for w in reg["warnings"])
    ttfa = any(r.get("ttfa_p95_ms") for r in reg["steps"])
    rows = "".join(
        f"<tr><td>{esc(r['concurrency'])}</td>{_fig_cell(r['p50_ms'], ' ms', '{:.0f}')}"
        f"{_fig_cell(r['p95_ms'], ' ms', '{:.0f}')}"
        + (_fig_cell(r.get("ttfa_p95_ms"), " ms", "{:.0f}") if ttfa else "")
        + f"{_fig_cell(r['throughput_rps'], '', '{:.2f}')}"
        f"{_fig_cell(r['error_rate'], '%', '{:.1f}', scale=100, points=True)}"
        f"<td>{'regression' if r['regression'] else ('better' if r['improvement'] else 'no regression')}</td></tr>"
        for r in reg["steps"])
    return (f"<div class='verdict{'' if reg['regressed'] else ' ok'}'>{esc(reg['verdict'])}</div>{warn}"
            f"<table><tr><th>concurrency</th><th>p50 wait</th><th>p95 wait</th>"
            f"{'<th>p95 TTFA</th>' if ttfa else ''}<th>throughput req/s</th>"
            f"<th>errors</th><th>verdict</th></tr>{rows}</table>"
            f"<p class='meta'>Baseline {esc(reg['baseline']['run_id'])} ({esc(reg['baseline']['path'])}); "
            f"tolerance {reg['tolerance']:.0%}; significant: p &lt; {reg['alpha']}. A regression is a "
            f"significant change beyond the tolerance (see analysis/regression.py).</p>"
            + _fig_html(regression_figure(summary), plotlyjs))


def sections(summary: dict, plotlyjs=False) -> str:
    """The SLO and baseline sections with their headings ("" when the summary has neither);
    ``plotlyjs`` False when an earlier figure on the page already loads plotly.js."""
    slo, reg = slo_html(summary, plotlyjs), regression_html(summary, plotlyjs)
    return ((f"<h2>Service-level objective</h2>{slo}" if slo else "")
            + (f"<h2>Against the baseline</h2>{reg}" if reg else ""))
