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

from .kit import LevelAxis, Renderer, esc, fmt, page, stat

_AXIS = LevelAxis()  # runs are compared by concurrency


def default_out(first_run: Path) -> Path:
    return Path(first_run).resolve().parent / time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime())


def _levels(summary: Summary) -> list[StepSummary]:
    """A run's tested concurrencies in ascending order (summaries from before levels existed: its
    steps)."""
    return [level for level in summary.get("levels") or summary["steps"] if level.get("requests")]


def compare_figure(summaries: list[Summary]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=("p50 wait (ms)", "p95 wait (ms)", "throughput (req/s)"))
    tested = []
    for index, summary in enumerate(summaries):
        levels = _levels(summary)
        concurrency = [level["concurrency"] for level in levels]
        tested += concurrency
        name = esc(summary["run"]["run_id"])
        colour = f"hsl({(index * 67) % 360},65%,45%)"
        for col, values in (
            (1, [stat(level, "latency_ms", "p50") for level in levels]),
            (2, [stat(level, "latency_ms", "p95") for level in levels]),
            (3, [level.get("throughput_rps") for level in levels]),
        ):
            fig.add_scatter(
                x=_AXIS.at(concurrency),
                y=values,
                name=name,
                legendgroup=name,
                showlegend=col == 1,
                mode="lines+markers",
                line=dict(color=colour),
                row=1,
                col=col,
            )
        knee = summary["knee"]["concurrency"]
        if knee:
            for col in (1, 2, 3):
                fig.add_vline(x=_AXIS.at(knee), line=dict(color=colour, dash="dash", width=1), row=1, col=col)
    for col in (1, 2, 3):
        _AXIS.draw(fig, tested, row=1, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def side_by_side_html(summaries: list[Summary]) -> str:
    tested = sorted({level["concurrency"] for summary in summaries for level in _levels(summary)})
    head = (
        "<tr><th rowspan=2>conc</th>"
        + "".join(f"<th colspan=4>{esc(summary['run']['run_id'])}</th>" for summary in summaries)
        + "</tr><tr>"
        + "<th>p50</th><th>p95</th><th>rps</th><th>err%</th>" * len(summaries)
        + "</tr>"
    )
    rows = []
    for users in tested:
        cells = [f"<td>{users}</td>"]
        for summary in summaries:
            level = next((level for level in _levels(summary) if level["concurrency"] == users), None)
            if not level:
                cells.append("<td>-</td>" * 4)
                continue
            error_rate = None if level["error_rate"] is None else 100 * level["error_rate"]
            shade = " style='background:#fdecea'" if users == summary["knee"]["concurrency"] else ""
            cells += [
                f"<td{shade}>{fmt(stat(level, 'latency_ms', 'p50'))}</td>",
                f"<td{shade}>{fmt(stat(level, 'latency_ms', 'p95'))}</td>",
                f"<td{shade}>{fmt(level['throughput_rps'], '{:.2f}')}</td>",
                f"<td{shade}>{fmt(error_rate, '{:.1f}')}</td>",
            ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    verdict = "".join(
        f"<tr><td class='l'>{esc(summary['run']['run_id'])}</td><td>{esc(summary['knee']['concurrency'] or '-')}</td>"
        f"<td>{esc(summary['recommended_concurrency'] or '-')}</td>"
        f"<td class='l'>{esc(summary['diagnosis']['kind'])}</td>"
        f"<td class='l'>{esc(' '.join(summary['diagnosis']['evidence']))}</td></tr>"
        for summary in summaries
    )
    return (
        f"<table><tr><th class='l'>run</th><th>knee</th><th>recommended</th><th class='l'>diagnosis</th>"
        f"<th class='l'>evidence</th></tr>{verdict}</table><h2>Steps side by side</h2>"
        f"<table>{head}{''.join(rows)}</table><p class='meta'>Latencies in ms (wait of successful "
        f"final attempts); the knee step of each run is shaded.</p>"
    )


def compare_html(summaries: list[Summary], plotlyjs="embed", live_script: str = "", links: str = "") -> str:
    fig = Renderer(True if plotlyjs == "embed" else plotlyjs)(compare_figure(summaries))
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
                        "run_id": summary["run"]["run_id"],
                        "path": summary["run"]["path"],
                        "knee": summary["knee"]["concurrency"],
                        "recommended_concurrency": summary["recommended_concurrency"],
                        "diagnosis": summary["diagnosis"],
                        "slo": None
                        if not (slo := summary.get("slo"))
                        else {"spec": slo["spec"], "max_concurrency": slo["max_concurrency"]},
                    }
                    for summary in summaries
                ]
            },
            indent=1,
        )
    )
    return out / "report.html"
