"""The top of a run's report, for the axis its steps stand on: a concurrency (closed loop), an
offered rate (``--rates``, open loop) or a number of distinct voices (``--voice-steps``). Each
gets the same verdict (the knee, the recommendation, the diagnosis, the knee methods) and step
table, from its :class:`Top`, and curves of its own: latency and throughput against the axis
(see :mod:`analysis.knee`, :mod:`analysis.openloop` and :mod:`analysis.voices` for the rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.knee import FAILURE_RATE, LATENCY_RISE, LITTLE_TOLERANCE, UNDERRUN_RATE, usl_curve
from tts_knee.analysis.openloop import GROWTH_RATIO, SHORTFALL
from tts_knee.runformat.summary import DiagnosisKind, StepSummary, Summary

from .kit import GIB, KNEE_COLOUR, REC_COLOUR, capacity_html, ci_bars, esc, figures, fmt, stat, step_row
from .table import RATE_COLUMNS, TAIL_COLUMN, rate_table_rows, table_columns, table_rows
from .view import RunView


@dataclass(frozen=True)
class Top:
    """The report's top (verdict, step table, curves) for one axis the steps stand on."""

    method_head: str  # the knee methods table's column
    method: Callable[[object], str]  # a knee method's answer, as its cell shows it
    headline: Callable[[RunView], str]  # the verdict's first line, up to the diagnosis
    verdict_note: Callable[[RunView], str]  # below the knee methods: the rules a step breaks by
    columns: Callable[[RunView], tuple[str, ...]]  # the step table's heads
    rows: Callable[[RunView], list[list[str]]]  # its rows, one per executed step
    table_note: Callable[[RunView], str]  # what the table's figures are
    curves: Callable[[RunView], go.Figure | None]  # latency and throughput against the axis


def verdict_html(view: RunView) -> str:
    drawn, summary = _TOPS[view.key], view.summary
    diagnosis, knee = summary["diagnosis"], summary["knee"]
    evidence = "".join(f"<li>{esc(sentence)}</li>" for sentence in diagnosis["evidence"])
    methods = "".join(
        f"<tr><td class='l'>{esc(name)}</td><td>{esc(drawn.method(answer))}</td></tr>"
        for name, answer in knee["methods"].items()
    )
    cls = "verdict ok" if diagnosis["kind"] == DiagnosisKind.NO_KNEE else "verdict"
    return (
        f"<div class='{cls}'><div>{drawn.headline(view)} &middot; diagnosis: <span class='kind'>"
        f"{esc(diagnosis['kind'])}</span></div><ul>{evidence}</ul><div>{esc(summary['recommendation'])}</div>"
        f"{capacity_html(summary)}</div><table><tr><th class='l'>knee method</th><th>{drawn.method_head}</th></tr>"
        f"{methods}</table>{drawn.verdict_note(view)}"
    )


def step_table_html(view: RunView) -> str:
    drawn, knee, recommended = _TOPS[view.key], view.knee, view.recommended
    head = "".join(f"<th>{esc(column)}</th>" for column in drawn.columns(view))
    body = []
    for step, cells in zip(view.summary["steps"], drawn.rows(view)):
        level = step.get(view.key)
        body.append(step_row(step, cells, "knee" if level == knee else "rec" if level == recommended else ""))
    return f"<table><tr>{head}</tr>{''.join(body)}</table><p class='meta'>{drawn.table_note(view)}</p>"


def curves_figure(view: RunView) -> go.Figure | None:
    return _TOPS[view.key].curves(view)


def _figure(cols: int, titles: tuple[str, ...]) -> go.Figure:
    return make_subplots(rows=1, cols=cols, subplot_titles=titles)


def _finish(fig: go.Figure) -> go.Figure:
    fig.update_layout(height=420, margin=dict(t=40, b=40, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _levels(summary: Summary) -> list[StepSummary]:
    """The steps the curves show: one per level (repeats pooled), a soak left out."""
    return [level for level in summary.get("levels") or summary["steps"] if level.get("requests")]


def _line(fig: go.Figure, places: object, values: object, name: str, col: int = 1, **style: object) -> None:
    """One curve against the axis in the figure's panel ``col`` (a line through markers unless
    ``mode`` says otherwise)."""
    fig.add_scatter(x=places, y=values, name=name, **{"mode": "lines+markers", **style}, row=1, col=col)


def _wait_lines(
    fig: go.Figure, places: object, levels: list[StepSummary], dashes: tuple[tuple[str, str | None], ...]
) -> None:
    """The wait's percentiles against the sweep's axis, each a line (p50 and p95 with their
    confidence bars), in the figure's first panel."""
    for quantile, dash in dashes:
        values = [stat(level, "latency_ms", quantile) for level in levels]
        intervals = [stat(level, "latency_ms", f"{quantile}_ci") for level in levels]
        bars = ci_bars(values, intervals) if quantile in ("p50", "p95") else None
        _line(fig, places, values, f"{quantile} wait", line=dict(dash=dash), error_y=bars)


def _marks(fig: go.Figure, cols: tuple[int, ...], marks: list[tuple[float, str, str, str, str]]) -> None:
    """The knee and the recommendation as vertical lines in every panel: (x, colour, dash, text,
    where the text goes) each."""
    for col in cols:
        for place, colour, dash, text, position in marks:
            fig.add_vline(
                x=place,
                line=dict(color=colour, dash=dash),
                row=1,
                col=col,
                annotation_text=text,
                annotation_position=position,
            )


# -- by concurrency ----------------------------------------------------------------------------


def _concurrency_curves(view: RunView) -> go.Figure:
    levels = _levels(view.summary)
    with_ttfa = any(level.get("ttfa_ms") for level in levels)
    fig = _figure(
        2,
        (
            "Latency (wait, TTFA) vs concurrency" if with_ttfa else "Latency (wait) vs concurrency",
            "Throughput vs concurrency",
        ),
    )
    concurrency = [level["concurrency"] for level in levels]
    places = view.axis.at(concurrency)
    _wait_lines(fig, places, levels, (("p50", None), ("p90", "dot"), ("p95", None), ("p99", "dot"), ("max", "dash")))
    end_to_end = [stat(level, "e2e_ms", "p95") for level in levels]
    _line(fig, places, end_to_end, "p95 end-to-end", line=dict(dash="dashdot", color="#7f7f7f"))
    for quantile, dash in (("p50", None), ("p95", "dot")) if with_ttfa else ():
        ttfa = [stat(level, "ttfa_ms", quantile) for level in levels]
        star = dict(symbol="star")
        _line(fig, places, ttfa, f"{quantile} TTFA", line=dict(dash=dash, color="#000000", width=2), marker=star)
    throughput = [level.get("throughput_rps") for level in levels]
    _line(fig, places, throughput, "throughput (ok req/s)", col=2, line=dict(width=3))
    if levels and (first_rps := levels[0].get("throughput_rps")):
        per_user = first_rps / levels[0]["concurrency"]
        linear = [per_user * users for users in concurrency]
        _line(fig, places, linear, "linear scaling", col=2, mode="lines", line=dict(dash="dot", color="#aaaaaa"))
    usl = view.summary.get("usl")
    if usl:
        grid = np.geomspace(max(1, min(concurrency)), max(concurrency), 60)
        fit = usl_curve(usl, grid)
        _line(fig, view.axis.at(grid), fit, "USL fit", col=2, mode="lines", line=dict(dash="dash", color="#9467bd"))
    view.axis.draw(fig, concurrency, row=1, col=1)
    view.axis.draw(fig, concurrency, row=1, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    served = [rps for rps in throughput if rps]
    fig.update_yaxes(title_text="req/s", range=[0, 1.3 * max(served)] if served else None, row=1, col=2)
    knee, recommended = view.knee, view.recommended
    marks = [(view.axis.at(knee), KNEE_COLOUR, "dash", f"knee {knee}", "top left")] if knee else []
    if recommended:
        marks.append((view.axis.at(recommended), REC_COLOUR, "dot", f"recommended {recommended}", "bottom right"))
    _marks(fig, (1, 2), marks)
    return _finish(fig)


_CONCURRENCY_EXTRA = ("e2e p95", "throttled", "GPU mem peak", "client CPU", "Little")


def _concurrency_rows(view: RunView) -> list[list[str]]:
    rows = []
    for step, cells in zip(view.summary["steps"], table_rows(view)):
        server, client = step.get("server"), figures(step.get("client"))
        memory = server.get("gpu_mem_peak_bytes") if server else None
        little = step.get("little")
        rows.append(
            cells
            + [
                fmt(stat(step, "e2e_ms", "p95")),
                str(step["throttled"]),
                "-" if memory is None else f"{memory / GIB:.1f} GiB",
                "-" if client.get("cpu_mean") is None else f"{client['cpu_mean']:.0f}",
                "-" if not little else f"{little['ratio']:.2f}",
            ]
        )
    return rows


def _concurrency_table_note(view: RunView) -> str:
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
            if view.streamed
            else ""
        )
        + (" WER% (CER%): the judged clips' mean error rate; unintel: judged above 50 %." if view.speech_metric else "")
        + (
            " tail: from the end of the text (its final flush) to the last audio, what the listener waits once "
            "the text is complete."
            if TAIL_COLUMN in table_columns(view)
            else ""
        )
    )


def _concurrency_headline(view: RunView) -> str:
    summary = view.summary
    return (
        f"Knee: <b>{esc(summary['knee']['concurrency'] or 'none found')}</b> &middot; recommended "
        f"concurrency: <b>{esc(summary['recommended_concurrency'] or '-')}</b>"
    )


def _concurrency_note(view: RunView) -> str:
    summary = view.summary
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
    off = [check for check in summary["little_law"] or [] if not check["ok"]]
    little = (
        f"Little's law holds at every step (within {LITTLE_TOLERANCE:.0%})."
        if not off
        else f"Little's law off by more than {LITTLE_TOLERANCE:.0%} at concurrency "
        + ", ".join(f"{check['concurrency']} ({check['ratio']:.2f})" for check in off)
        + "."
    )
    streamed = (
        f"<p class='meta'>Streamed run: a step breaks when {UNDERRUN_RATE:.0%} or more of its streams "
        f"stall, {FAILURE_RATE:.0%} or more of its attempts fail, or its TTFA p95 stays above "
        f"{LATENCY_RISE}x the lowest step's and above the {knee.get('ttfa_floor_ms') or 0:g} ms floor; "
        f"whole-body time is only a cross-check.</p>"
        if view.streamed
        else ""
    )
    agreeing = esc(", ".join(knee["agree"]) or "none")
    return streamed + f"<p class='meta'>Agreeing with the knee: {agreeing}. {usl_txt} {esc(little)}</p>"


CONCURRENCY = Top(
    "concurrency",
    lambda answer: str(answer) if answer is not None else "-",
    _concurrency_headline,
    _concurrency_note,
    lambda view: table_columns(view) + _CONCURRENCY_EXTRA,
    _concurrency_rows,
    _concurrency_table_note,
    _concurrency_curves,
)


# -- by offered rate ---------------------------------------------------------------------------


def _rate_curves(view: RunView) -> go.Figure | None:
    levels = sorted(_levels(view.summary), key=lambda level: level["rate"])
    if not levels:
        return None
    rates = [level["rate"] for level in levels]
    most = max(rates)
    fig = _figure(2, ("Latency from schedule (ms)", "Served against offered (req/s)"))
    for quantile, dash in (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")):
        from_schedule = [stat(level, "sched_wait_ms", quantile) for level in levels]
        _line(fig, rates, from_schedule, f"{quantile} from schedule", line=dict(dash=dash))
    wait = [stat(level, "latency_ms", "p95") for level in levels]
    _line(fig, rates, wait, "p95 wait (t2-t0)", line=dict(dash="dashdot", color="#7f7f7f"))
    send_lag = [stat(level, "send_lag_ms", "p95") for level in levels]
    _line(fig, rates, send_lag, "p95 send lag (t0-scheduled)", line=dict(color="#8c564b"))
    served = [level.get("throughput_rps") for level in levels]
    _line(fig, rates, served, "served (ok req/s)", col=2, line=dict(width=3))
    _line(fig, [0, most], [0, most], "offered", col=2, mode="lines", line=dict(dash="dot", color="#aaaaaa"))
    short = [0, (1 - SHORTFALL) * most]
    _line(
        fig,
        [0, most],
        short,
        f"{1 - SHORTFALL:.0%} of offered",
        col=2,
        mode="lines",
        line=dict(dash="dash", color="#dddddd"),
    )
    if any(level.get("dropped") for level in levels):
        dropped = [level.get("dropped") for level in levels]
        fig.add_bar(x=rates, y=dropped, name="dropped arrivals", marker_color="#ff7f0e", opacity=0.5, row=1, col=2)
    marks = [
        (level, colour, "dash", text, "top")
        for level, colour, text in ((view.knee, KNEE_COLOUR, "knee"), (view.recommended, REC_COLOUR, "recommended"))
        if level is not None
    ]
    _marks(fig, (1, 2), marks)
    fig.update_xaxes(title_text="offered rate (req/s)", rangemode="tozero", row=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    return _finish(fig)


def _rate_headline(view: RunView) -> str:
    summary = view.summary
    rate = fmt(summary["knee"]["rate"], "{:g}") if summary["knee"]["rate"] is not None else "none found"
    return (
        f"Knee: <b>{esc(rate)} req/s</b> &middot; recommended rate: "
        f"<b>{esc(fmt(summary.get('recommended_rate'), '{:g}'))} req/s</b> &middot; concurrency it implies: "
        f"<b>{esc(fmt(summary.get('recommended_concurrency')))}</b> &middot; dropped arrivals: "
        f"<b>{esc(summary.get('dropped') or 0)}</b>"
    )


def _rate_note(view: RunView) -> str:
    summary = view.summary
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

RATE = Top(
    "offered req/s",
    lambda answer: fmt(answer, "{:g}"),
    _rate_headline,
    _rate_note,
    lambda view: RATE_COLUMNS,
    rate_table_rows,
    lambda view: _RATE_TABLE_NOTE,
    _rate_curves,
)


# -- by number of voices -----------------------------------------------------------------------


def _hit_rate(step: StepSummary) -> float | None:
    server = step.get("server")
    roles = (server.get("server_roles") if server else None) or {}
    hits, misses = roles.get("voice_cache_hits"), roles.get("voice_cache_misses")
    if not hits or not misses:
        return None
    hit_mean, miss_mean = hits["mean"], misses["mean"]
    if hit_mean is None or miss_mean is None or hit_mean + miss_mean <= 0:  # a series without a value
        return None
    return 100.0 * hit_mean / (hit_mean + miss_mean)


def _voices_curves(view: RunView) -> go.Figure:
    levels = _levels(view.summary)
    hit_rates = [_hit_rate(level) for level in levels]
    cache = any(rate is not None for rate in hit_rates)
    cols = (1, 2, 3) if cache else (1, 2)
    fig = _figure(
        len(cols),
        ("Latency (wait) vs distinct voices", "Throughput vs distinct voices")
        + (("Server's voice cache hit rate",) if cache else ()),
    )
    voices = [level["voices"] for level in levels]
    places = view.axis.at(voices)
    _wait_lines(fig, places, levels, (("p50", None), ("p95", None), ("p99", "dot"), ("max", "dash")))
    throughput = [level.get("throughput_rps") for level in levels]
    _line(fig, places, throughput, "throughput (ok req/s)", col=2, line=dict(width=3))
    if cache:
        _line(fig, places, hit_rates, "cache hit rate (%)", col=3)
        fig.update_yaxes(title_text="%", range=[0, 105], row=1, col=3)
    for col in cols:
        view.axis.draw(fig, voices, row=1, col=col)
    marks = [
        (view.axis.at(level), colour, "dash", f"{text} {level}", "top left")
        for level, colour, text in ((view.knee, KNEE_COLOUR, "knee"), (view.recommended, REC_COLOUR, "recommended"))
        if level
    ]
    _marks(fig, cols, marks)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=2)
    return _finish(fig)


def _voices_headline(view: RunView) -> str:
    summary = view.summary
    knee = summary["knee"]
    return (
        f"Knee: <b>{esc(fmt(knee['voices']) if knee['voices'] else 'none found')}</b> distinct voices at "
        f"concurrency {esc(fmt(knee['concurrency']))} &middot; recommended voices: "
        f"<b>{esc(fmt(summary.get('recommended_voices')))}</b>"
    )


def _voices_note(view: RunView) -> str:
    summary = view.summary
    return (
        f"<p class='meta'>A number of voices breaks when its latency stays above {LATENCY_RISE}x the fewest "
        f"voices' or {FAILURE_RATE:.0%} more of its attempts fail. Agreeing with the knee: "
        f"{esc(', '.join(summary['knee']['agree']) or 'none')}.</p>"
    )


VOICES = Top(
    "distinct voices",
    fmt,
    _voices_headline,
    _voices_note,
    lambda view: table_columns(view) + ("cache hit%",),
    lambda view: [cells + [fmt(_hit_rate(step))] for step, cells in zip(view.summary["steps"], table_rows(view))],
    lambda view: (
        "A voice sweep: every step at the same load, its requests drawing their voices from the "
        "first N of --voices. cache hit%: the server's own voice-cache counters over the step, where "
        "it publishes them."
    ),
    _voices_curves,
)


_TOPS = {"concurrency": CONCURRENCY, "rate": RATE, "voices": VOICES}
