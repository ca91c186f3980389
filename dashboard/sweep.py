"""The top of a run's report, for the axis its steps stand on: a concurrency (closed loop), an
offered rate (``--rates``, open loop) or a number of distinct voices (``--voice-steps``). Each
gets the same verdict (the knee, the recommendation, the diagnosis, the knee methods) and step
table, from its :class:`Axis`, and curves of its own: latency and throughput against the axis
(see :mod:`analysis.knee`, :mod:`analysis.openloop` and :mod:`analysis.voices` for the rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.axis import Key, of_summary
from tts_knee.analysis.knee import FAILURE_RATE, LATENCY_RISE, LITTLE_TOLERANCE, UNDERRUN_RATE, usl_curve
from tts_knee.analysis.openloop import GROWTH_RATIO, SHORTFALL
from tts_knee.runformat.summary import DiagnosisKind, StepSummary, Summary

from .kit import (
    GIB,
    KNEE_COLOUR,
    REC_COLOUR,
    Relabelled,
    capacity_html,
    ci_bars,
    conc_axis,
    esc,
    figures,
    fmt,
    is_streamed,
    lx,
    stat,
    step_row,
)
from .table import RATE_COLUMNS, TAIL_COLUMN, rate_table_rows, speech_metric, table_columns, table_rows


@dataclass(frozen=True)
class Axis:
    """What the steps stand on, and how the report's top names it."""

    key: Key  # the step's field: "concurrency", "rate" or "voices"
    method_head: str  # the knee methods table's column
    method: Callable[[object], str]  # a knee method's answer, as its cell shows it
    headline: Callable[[Summary], str]  # the verdict's first line, up to the diagnosis
    verdict_note: Callable[[Summary], str]  # below the knee methods: the rules a step breaks by
    columns: Callable[[Summary], tuple]  # the step table's heads
    rows: Callable[[Summary], list[list[str]]]  # its rows, one per executed step
    table_note: Callable[[Summary], str]  # what the table's figures are
    curves: Callable[[Summary], go.Figure | None]  # latency and throughput against the axis

    def knee(self, summary: Summary) -> float | None:
        return summary["knee"][self.key]

    def recommended(self, summary: Summary) -> float | None:
        if self.key == "rate":
            return summary.get("recommended_rate")
        if self.key == "voices":
            return summary.get("recommended_voices")
        return summary.get("recommended_concurrency")


def axis(summary: Summary) -> Axis:
    """The axis a run's steps stand on: the analysis's own (:func:`analysis.axis.of_summary`),
    as the report draws it."""
    return _DRAWN[of_summary(summary).key]


def by_step(summary: Summary) -> Relabelled:
    """The summary with each step (its levels, and for a voice sweep its SLO verdicts) standing at
    its rate or number of voices, for the report's figures that label steps by concurrency
    (retries, stages, memory, text length, the voice sweep's SLO)."""
    key = axis(summary).key
    if key == "concurrency":
        return summary

    def at(items: Sequence[Mapping[str, object]] | None) -> list[dict[str, object]]:
        return [dict(s, concurrency=s.get(key)) for s in items or ()]

    steps, sl = at(summary["steps"]), summary.get("slo")
    if key == "rate":
        return dict(
            summary,
            steps=steps,
            levels=steps,
            knee=dict(summary["knee"], concurrency=summary["knee"]["rate"]),
            recommended_concurrency=summary.get("recommended_rate"),
        )
    voices_slo = (
        dict(sl, steps=at(sl["steps"]), by_step=at(sl["by_step"]), max_concurrency=sl.get("max_voices")) if sl else sl
    )
    return dict(
        summary,
        steps=steps,
        levels=at(summary.get("levels")),
        slo=voices_slo,
        knee=dict(summary["knee"], concurrency=summary["knee"]["voices"]),
        recommended_concurrency=summary.get("recommended_voices"),
    )


def verdict_html(summary: Summary) -> str:
    ax, d, knee = axis(summary), summary["diagnosis"], summary["knee"]
    ev = "".join(f"<li>{esc(e)}</li>" for e in d["evidence"])
    methods = "".join(
        f"<tr><td class='l'>{esc(k)}</td><td>{esc(ax.method(v))}</td></tr>" for k, v in knee["methods"].items()
    )
    cls = "verdict ok" if d["kind"] == DiagnosisKind.NO_KNEE else "verdict"
    return (
        f"<div class='{cls}'><div>{ax.headline(summary)} &middot; diagnosis: <span class='kind'>"
        f"{esc(d['kind'])}</span></div><ul>{ev}</ul><div>{esc(summary['recommendation'])}</div>"
        f"{capacity_html(summary)}</div><table><tr><th class='l'>knee method</th><th>{ax.method_head}</th></tr>"
        f"{methods}</table>{ax.verdict_note(summary)}"
    )


def step_table_html(summary: Summary) -> str:
    ax = axis(summary)
    knee, rec = ax.knee(summary), ax.recommended(summary)
    head = "".join(f"<th>{esc(c)}</th>" for c in ax.columns(summary))
    body = []
    for s, r in zip(summary["steps"], ax.rows(summary)):
        at = s.get(ax.key)
        body.append(step_row(s, r, "knee" if at == knee else "rec" if at == rec else ""))
    return f"<table><tr>{head}</tr>{''.join(body)}</table><p class='meta'>{ax.table_note(summary)}</p>"


def curves_figure(summary: Summary) -> go.Figure | None:
    return axis(summary).curves(summary)


def _figure(cols: int, titles: tuple[str, ...]) -> go.Figure:
    return make_subplots(rows=1, cols=cols, subplot_titles=titles)


def _finish(fig: go.Figure) -> go.Figure:
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _levels(summary: Summary) -> list[StepSummary]:
    """The steps the curves show: one per level (repeats pooled), a soak left out."""
    return [s for s in summary.get("levels") or summary["steps"] if s.get("requests")]


# -- by concurrency ----------------------------------------------------------------------------


def _concurrency_curves(summary: Summary) -> go.Figure:
    steps = _levels(summary)
    fig = _figure(
        2,
        (
            "Latency (wait, TTFA) vs concurrency"
            if any(s.get("ttfa_ms") for s in steps)
            else "Latency (wait) vs concurrency",
            "Throughput vs concurrency",
        ),
    )
    conc = [s["concurrency"] for s in steps]
    n = lx(conc)
    _wait_lines(fig, n, steps, (("p50", None), ("p90", "dot"), ("p95", None), ("p99", "dot"), ("max", "dash")))
    fig.add_scatter(
        x=n,
        y=[stat(s, "e2e_ms", "p95") for s in steps],
        name="p95 end-to-end",
        mode="lines+markers",
        line=dict(dash="dashdot", color="#7f7f7f"),
        row=1,
        col=1,
    )
    if any(s.get("ttfa_ms") for s in steps):
        for q, dash in (("p50", None), ("p95", "dot")):
            fig.add_scatter(
                x=n,
                y=[stat(s, "ttfa_ms", q) for s in steps],
                name=f"{q} TTFA",
                mode="lines+markers",
                line=dict(dash=dash, color="#000000", width=2),
                marker=dict(symbol="star"),
                row=1,
                col=1,
            )
    fig.add_scatter(
        x=n,
        y=[s.get("throughput_rps") for s in steps],
        name="throughput (ok req/s)",
        mode="lines+markers",
        line=dict(width=3),
        row=1,
        col=2,
    )
    if steps and (first_rps := steps[0].get("throughput_rps")):
        x1 = first_rps / steps[0]["concurrency"]
        fig.add_scatter(
            x=n,
            y=[x1 * c for c in conc],
            name="linear scaling",
            mode="lines",
            line=dict(dash="dot", color="#aaaaaa"),
            row=1,
            col=2,
        )
    usl = summary.get("usl")
    if usl:
        grid = np.geomspace(max(1, min(conc)), max(conc), 60)
        fig.add_scatter(
            x=lx(grid),
            y=usl_curve(usl, grid),
            name="USL fit",
            mode="lines",
            line=dict(dash="dash", color="#9467bd"),
            row=1,
            col=2,
        )
    conc_axis(fig, steps, row=1, col=1)
    conc_axis(fig, steps, row=1, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    xs = [rps for s in steps if (rps := s.get("throughput_rps"))]
    fig.update_yaxes(title_text="req/s", range=[0, 1.3 * max(xs)] if xs else None, row=1, col=2)
    knee, rec = summary["knee"]["concurrency"], summary["recommended_concurrency"]
    for c in (1, 2):
        if knee:
            fig.add_vline(
                x=lx(knee),
                line=dict(color=KNEE_COLOUR, dash="dash"),
                row=1,
                col=c,
                annotation_text=f"knee {knee}",
                annotation_position="top left",
            )
        if rec:
            fig.add_vline(
                x=lx(rec),
                line=dict(color=REC_COLOUR, dash="dot"),
                row=1,
                col=c,
                annotation_text=f"recommended {rec}",
                annotation_position="bottom right",
            )
    return _finish(fig)


_CONCURRENCY_EXTRA = ("e2e p95", "throttled", "GPU mem peak", "client CPU", "Little")


def _concurrency_rows(summary: Summary) -> list[list[str]]:
    rows = []
    for s, r in zip(summary["steps"], table_rows(summary)):
        srv, cli = s.get("server"), figures(s.get("client"))
        e2e = stat(s, "e2e_ms", "p95")
        mem = srv.get("gpu_mem_peak_bytes") if srv else None
        lit = s.get("little")
        rows.append(
            r
            + [
                "-" if e2e is None else f"{e2e:.0f}",
                str(s["throttled"]),
                "-" if mem is None else f"{mem / GIB:.1f} GiB",
                "-" if cli.get("cpu_mean") is None else f"{cli['cpu_mean']:.0f}",
                "-" if not lit else f"{lit['ratio']:.2f}",
            ]
        )
    return rows


def _concurrency_table_note(summary: Summary) -> str:
    return (
        "Latencies in ms: wait of successful final attempts (t2-t0). rps: successful requests per second of "
        "the measured window (settle time to step end), counting requests that finished in it. Little: mean "
        "busy users over the window (end-to-end request time overlapping it) / concurrency. Resource "
        "figures: the busiest host's."
        + (
            " ttfa: time to the first audio sample; underrun%: successful streams that ran dry at least "
            "once. Both count the streams that ended before their step did (a stream still playing when "
            "the next step began heard the next step's load). audible: when the listener hears the first "
            "sound (leading silence, lead, delays it)."
            if is_streamed(summary)
            else ""
        )
        + (
            " WER% (CER%): the judged clips' mean error rate; unintel: judged above 50 %."
            if speech_metric(summary)
            else ""
        )
        + (
            " tail: from the end of the text (its final flush) to the last audio, what the listener waits once "
            "the text is complete."
            if TAIL_COLUMN in table_columns(summary)
            else ""
        )
    )


def _concurrency_headline(summary: Summary) -> str:
    return (
        f"Knee: <b>{esc(summary['knee']['concurrency'] or 'none found')}</b> &middot; recommended "
        f"concurrency: <b>{esc(summary['recommended_concurrency'] or '-')}</b>"
    )


def _concurrency_note(summary: Summary) -> str:
    knee, usl = summary["knee"], summary.get("usl")
    usl_txt = (
        "USL fit needs at least 4 steps with throughput."
        if not usl
        else (
            f"USL fit: &sigma;={usl['sigma']:.3f}, &kappa;={usl['kappa']:.4f}, "
            f"&lambda;={usl['lambda_rps']:.2f} req/s, R&sup2;={usl['r2'] if usl['r2'] is None else round(usl['r2'], 3)}"
            + (
                f", predicted peak at concurrency {usl['peak_concurrency']:.1f}"
                if usl.get("peak_concurrency")
                else ", no peak predicted (&kappa;=0)"
            )
        )
    )
    lit_bad = [x for x in summary["little_law"] or [] if not x["ok"]]
    lit = (
        f"Little's law holds at every step (within {LITTLE_TOLERANCE:.0%})."
        if not lit_bad
        else f"Little's law off by more than {LITTLE_TOLERANCE:.0%} at concurrency "
        + ", ".join(f"{x['concurrency']} ({x['ratio']:.2f})" for x in lit_bad)
        + "."
    )
    return (
        f"<p class='meta'>Streamed run: a step breaks when {UNDERRUN_RATE:.0%} or more of its streams "
        f"stall, {FAILURE_RATE:.0%} or more of its attempts fail, or its TTFA p95 stays above "
        f"{LATENCY_RISE}x the lowest step's and above the {knee.get('ttfa_floor_ms') or 0:g} ms floor; "
        f"whole-body time is only a cross-check.</p>"
        if knee.get("streamed")
        else ""
    ) + f"<p class='meta'>Agreeing with the knee: {esc(', '.join(knee['agree']) or 'none')}. {usl_txt} {esc(lit)}</p>"


CONCURRENCY = Axis(
    "concurrency",
    "concurrency",
    lambda v: str(v) if v is not None else "-",
    _concurrency_headline,
    _concurrency_note,
    lambda summary: table_columns(summary) + _CONCURRENCY_EXTRA,
    _concurrency_rows,
    _concurrency_table_note,
    _concurrency_curves,
)


# -- by offered rate ---------------------------------------------------------------------------


def _rate_curves(summary: Summary) -> go.Figure | None:
    steps = _levels(summary)
    if not steps:
        return None
    steps = sorted(steps, key=lambda s: s["rate"])
    x = [s["rate"] for s in steps]
    fig = _figure(2, ("Latency from schedule (ms)", "Served against offered (req/s)"))
    for q, dash in (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")):
        fig.add_scatter(
            x=x,
            y=[stat(s, "sched_wait_ms", q) for s in steps],
            name=f"{q} from schedule",
            mode="lines+markers",
            line=dict(dash=dash),
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=x,
        y=[stat(s, "latency_ms", "p95") for s in steps],
        name="p95 wait (t2-t0)",
        mode="lines+markers",
        line=dict(dash="dashdot", color="#7f7f7f"),
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=x,
        y=[stat(s, "send_lag_ms", "p95") for s in steps],
        name="p95 send lag (t0-scheduled)",
        mode="lines+markers",
        line=dict(color="#8c564b"),
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=x,
        y=[s.get("throughput_rps") for s in steps],
        name="served (ok req/s)",
        mode="lines+markers",
        line=dict(width=3),
        row=1,
        col=2,
    )
    fig.add_scatter(
        x=[0, max(x)], y=[0, max(x)], name="offered", mode="lines", line=dict(dash="dot", color="#aaaaaa"), row=1, col=2
    )
    fig.add_scatter(
        x=[0, max(x)],
        y=[0, (1 - SHORTFALL) * max(x)],
        name=f"{1 - SHORTFALL:.0%} of offered",
        mode="lines",
        line=dict(dash="dash", color="#dddddd"),
        row=1,
        col=2,
    )
    if any(s.get("dropped") for s in steps):
        fig.add_bar(
            x=x,
            y=[s.get("dropped") for s in steps],
            name="dropped arrivals",
            marker_color="#ff7f0e",
            opacity=0.5,
            row=1,
            col=2,
        )
    knee, rec = summary["knee"]["rate"], summary.get("recommended_rate")
    for col in (1, 2):
        for v, colour, label in ((knee, KNEE_COLOUR, "knee"), (rec, REC_COLOUR, "recommended")):
            if v is not None:
                fig.add_vline(
                    x=v,
                    line=dict(color=colour, dash="dash"),
                    row=1,
                    col=col,
                    annotation_text=label,
                    annotation_position="top",
                )
        fig.update_xaxes(title_text="offered rate (req/s)", rangemode="tozero", row=1, col=col)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    return _finish(fig)


def _rate_headline(summary: Summary) -> str:
    rate = fmt(summary["knee"]["rate"], "{:g}") if summary["knee"]["rate"] is not None else "none found"
    return (
        f"Knee: <b>{esc(rate)} req/s</b> &middot; recommended rate: "
        f"<b>{esc(fmt(summary.get('recommended_rate'), '{:g}'))} req/s</b> &middot; concurrency it implies: "
        f"<b>{esc(fmt(summary.get('recommended_concurrency')))}</b> &middot; dropped arrivals: "
        f"<b>{esc(summary.get('dropped') or 0)}</b>"
    )


def _rate_note(summary: Summary) -> str:
    return (
        f"<p class='meta'>A rate breaks when served throughput is more than {SHORTFALL:.0%} short of "
        f"offered, latency keeps growing within the step, p95 latency from schedule stays above {LATENCY_RISE}x "
        f"the lowest rate's, or failures rise by {FAILURE_RATE:.0%} or more. Agreeing with the knee: "
        f"{esc(', '.join(summary['knee']['agree']) or 'none')}.</p>"
    )


_RATE_TABLE_NOTE = (
    f"Open loop: each arrival was sent on its schedule whether or not earlier requests had finished. From "
    f"schedule: t2 - scheduled of successful requests (what a caller arriving on time waited); wait: t2 - t0; "
    f"send lag: t0 - scheduled (the load generator's own lateness). Dropped: arrivals not sent because "
    f"--max-inflight requests were in flight (not requests, so not in Locust's counts). Growing: median latency "
    f"from schedule rose over the step's thirds, the last above {GROWTH_RATIO}x the first."
)

RATE = Axis(
    "rate",
    "offered req/s",
    lambda v: fmt(v, "{:g}"),
    _rate_headline,
    _rate_note,
    lambda summary: RATE_COLUMNS,
    rate_table_rows,
    lambda summary: _RATE_TABLE_NOTE,
    _rate_curves,
)


# -- by number of voices -----------------------------------------------------------------------


def _hit_rate(s: StepSummary) -> float | None:
    server = s.get("server")
    roles = (server.get("server_roles") if server else None) or {}
    hits, misses = roles.get("voice_cache_hits"), roles.get("voice_cache_misses")
    if not hits or not misses:
        return None
    hit_mean, miss_mean = hits["mean"], misses["mean"]
    if hit_mean is None or miss_mean is None or hit_mean + miss_mean <= 0:  # a series without a value
        return None
    return 100.0 * hit_mean / (hit_mean + miss_mean)


def _voices_curves(summary: Summary) -> go.Figure:
    steps = _levels(summary)
    rates = [_hit_rate(s) for s in steps]
    cache = any(r is not None for r in rates)
    fig = _figure(
        3 if cache else 2,
        ("Latency (wait) vs distinct voices", "Throughput vs distinct voices")
        + (("Server's voice cache hit rate",) if cache else ()),
    )
    n = lx([s["voices"] for s in steps])
    _wait_lines(fig, n, steps, (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")))
    fig.add_scatter(
        x=n,
        y=[s.get("throughput_rps") for s in steps],
        name="throughput (ok req/s)",
        mode="lines+markers",
        line=dict(width=3),
        row=1,
        col=2,
    )
    if cache:
        fig.add_scatter(x=n, y=rates, name="cache hit rate (%)", mode="lines+markers", row=1, col=3)
        fig.update_yaxes(title_text="%", range=[0, 105], row=1, col=3)
    at = [dict(s, concurrency=s["voices"]) for s in steps]
    knee, rec = summary["knee"]["voices"], summary.get("recommended_voices")
    for c in (1, 2, 3) if cache else (1, 2):
        conc_axis(fig, at, "distinct voices", row=1, col=c)
        for v, colour, label in ((knee, KNEE_COLOUR, "knee"), (rec, REC_COLOUR, "recommended")):
            if v:
                fig.add_vline(
                    x=lx(v),
                    line=dict(color=colour, dash="dash"),
                    row=1,
                    col=c,
                    annotation_text=f"{label} {v}",
                    annotation_position="top left",
                )
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    return _finish(fig)


def _voices_headline(summary: Summary) -> str:
    knee = summary["knee"]
    return (
        f"Knee: <b>{esc(fmt(knee['voices']) if knee['voices'] else 'none found')}</b> distinct voices at "
        f"concurrency {esc(fmt(knee['concurrency']))} &middot; recommended voices: "
        f"<b>{esc(fmt(summary.get('recommended_voices')))}</b>"
    )


def _voices_note(summary: Summary) -> str:
    return (
        f"<p class='meta'>A number of voices breaks when its latency stays above {LATENCY_RISE}x the fewest "
        f"voices' or {FAILURE_RATE:.0%} more of its attempts fail. Agreeing with the knee: "
        f"{esc(', '.join(summary['knee']['agree']) or 'none')}.</p>"
    )


VOICES = Axis(
    "voices",
    "distinct voices",
    fmt,
    _voices_headline,
    _voices_note,
    lambda summary: table_columns(summary) + ("cache hit%",),
    lambda summary: [r + [fmt(_hit_rate(s))] for s, r in zip(summary["steps"], table_rows(summary))],
    lambda summary: (
        "A voice sweep: every step at the same load, its requests drawing their voices from the "
        "first N of --voices. cache hit%: the server's own voice-cache counters over the step, where "
        "it publishes them."
    ),
    _voices_curves,
)


_DRAWN = {ax.key: ax for ax in (CONCURRENCY, RATE, VOICES)}


def _wait_lines(fig: Any, x: list[Any], steps: list[Any], quantiles: tuple[tuple[str, str | None], ...]) -> None:
    """The wait's percentiles against the sweep's axis, each a line (p50 and p95 with their
    confidence bars), in the figure's first panel."""
    for q, dash in quantiles:
        fig.add_scatter(
            x=x,
            y=[(s.get("latency_ms") or {}).get(q) for s in steps],
            name=f"{q} wait",
            mode="lines+markers",
            line=dict(dash=dash),
            row=1,
            col=1,
            error_y=ci_bars(steps, "latency_ms", q) if q in ("p50", "p95") else None,
        )
