"""The comparison report of several runs: curves overlaid, step tables side by side.

``tts-knee report RUN_A RUN_B ...`` writes it to ``--out`` (default: a new
``compare-<UTC timestamp>/`` beside the first run directory) as ``report.html`` plus
``summary.json`` (the list of run summaries' verdicts), after each run's own summary and report.
Each run is drawn per tested concurrency (``levels``: sorted, repeats pooled), so refined and
repeated steps make one curve.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.runformat.summary import StepSummary, Summary

from .kit import conc_axis, esc, fig_html, fmt, lx, page


def default_out(first_run: Path) -> Path:
    return Path(first_run).resolve().parent / time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime())


def _levels(s: Summary) -> list[StepSummary]:
    """A run's tested concurrencies in ascending order (summaries from before levels existed: its
    steps)."""
    return [x for x in s.get("levels") or s["steps"] if x.get("requests")]


def compare_figure(summaries: list[Summary]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=("p50 wait (ms)", "p95 wait (ms)", "throughput (req/s)"))
    all_steps = []
    for i, s in enumerate(summaries):
        steps = _levels(s)
        all_steps += steps
        name = esc(s["run"]["run_id"])
        n = lx([x["concurrency"] for x in steps])
        colour = f"hsl({(i * 67) % 360},65%,45%)"
        for col, get in (
            (1, lambda x: (x.get("latency_ms") or {}).get("p50")),
            (2, lambda x: (x.get("latency_ms") or {}).get("p95")),
            (3, lambda x: x.get("throughput_rps")),
        ):
            fig.add_scatter(
                x=n,
                y=[get(x) for x in steps],
                name=name,
                legendgroup=name,
                showlegend=col == 1,
                mode="lines+markers",
                line=dict(color=colour),
                row=1,
                col=col,
            )
        knee = s["knee"]["concurrency"]
        if knee:
            for col in (1, 2, 3):
                fig.add_vline(x=lx(knee), line=dict(color=colour, dash="dash", width=1), row=1, col=col)
    uniq = {x["concurrency"]: x for x in all_steps}
    steps_sorted = [uniq[c] for c in sorted(uniq)]
    for col in (1, 2, 3):
        conc_axis(fig, steps_sorted, row=1, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def side_by_side_html(summaries: list[Summary]) -> str:
    concs = sorted({x["concurrency"] for s in summaries for x in _levels(s)})
    head = (
        "<tr><th rowspan=2>conc</th>"
        + "".join(f"<th colspan=4>{esc(s['run']['run_id'])}</th>" for s in summaries)
        + "</tr><tr>"
        + "<th>p50</th><th>p95</th><th>rps</th><th>err%</th>" * len(summaries)
        + "</tr>"
    )
    rows = []
    for c in concs:
        cells = [f"<td>{c}</td>"]
        for s in summaries:
            x = next((x for x in _levels(s) if x["concurrency"] == c), None)
            if not x:
                cells.append("<td>-</td>" * 4)
                continue
            lat = x.get("latency_ms")
            err = None if x["error_rate"] is None else 100 * x["error_rate"]
            cls = " style='background:#fdecea'" if c == s["knee"]["concurrency"] else ""
            cells += [
                f"<td{cls}>{fmt(lat.get('p50') if lat else None)}</td>",
                f"<td{cls}>{fmt(lat.get('p95') if lat else None)}</td>",
                f"<td{cls}>{fmt(x['throughput_rps'], '{:.2f}')}</td>",
                f"<td{cls}>{fmt(err, '{:.1f}')}</td>",
            ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    verdict = "".join(
        f"<tr><td class='l'>{esc(s['run']['run_id'])}</td><td>{esc(s['knee']['concurrency'] or '-')}</td>"
        f"<td>{esc(s['recommended_concurrency'] or '-')}</td><td class='l'>{esc(s['diagnosis']['kind'])}</td>"
        f"<td class='l'>{esc(' '.join(s['diagnosis']['evidence']))}</td></tr>"
        for s in summaries
    )
    return (
        f"<table><tr><th class='l'>run</th><th>knee</th><th>recommended</th><th class='l'>diagnosis</th>"
        f"<th class='l'>evidence</th></tr>{verdict}</table><h2>Steps side by side</h2>"
        f"<table>{head}{''.join(rows)}</table><p class='meta'>Latencies in ms (wait of successful "
        f"final attempts); the knee step of each run is shaded.</p>"
    )


def compare_html(summaries: list[Summary], plotlyjs="embed", live_script: str = "", links: str = "") -> str:
    fig = fig_html(compare_figure(summaries), True if plotlyjs == "embed" else plotlyjs)
    body = (
        f"<h1>tts-knee &middot; comparison of {len(summaries)} runs</h1>{links}"
        f"<h2>Verdicts</h2>{side_by_side_html(summaries)}<h2>Curves</h2>{fig}{live_script}"
    )
    return page("tts-knee comparison", body)


def write_compare(summaries: list[Summary], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(compare_html(summaries), encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps(
            {
                "runs": [
                    {
                        "run_id": s["run"]["run_id"],
                        "path": s["run"]["path"],
                        "knee": s["knee"]["concurrency"],
                        "recommended_concurrency": s["recommended_concurrency"],
                        "diagnosis": s["diagnosis"],
                        "slo": None
                        if not (slo := s.get("slo"))
                        else {"spec": slo["spec"], "max_concurrency": slo["max_concurrency"]},
                    }
                    for s in summaries
                ]
            },
            indent=1,
        )
    )
    return out / "report.html"
