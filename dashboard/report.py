"""The self-contained ``report.html`` of one run: which sections it shows, in what order.

Each section is a module of its own building on :mod:`dashboard.kit`: the verdict, step table
and curves for the axis the steps stand on (:mod:`dashboard.sweep`),
the SLO and the baseline (:mod:`dashboard.slo_verdicts`, :mod:`dashboard.baseline`), a soak's
drift (:mod:`dashboard.soak`), stream
health for a streamed run, audio integrity, the timeline, the server's own metrics, and the
per-step breakdowns; a streamed run also gets Riva's figures (:mod:`dashboard.riva_figures`).
"""

from __future__ import annotations

import time
from pathlib import Path

from tts_knee import runformat
from tts_knee.runformat.reader import RunDir
from tts_knee.runformat.summary import Summary

from . import breakdown, sweep
from .baseline import regression_html
from .kit import Renderer, esc, page
from .probe import probe_html, spike_html
from .riva_figures import riva_html
from .server_series import server_section
from .slices import slices_html
from .slo_verdicts import slo_html
from .soak import soak_html
from .speech import speech_figure, speech_html
from .stream_health import stream_figure, stream_health_html, underrun_figure
from .table import audio_missing_text, health_text, open_lines
from .timeline import timeline_figure
from .trace import trace_html
from .view import RunView


def _notes(summary: Summary) -> list[str]:
    """What a reader should know before the figures: an open run, bad lines, lost workers …"""
    run = summary["run"]
    bad = summary["bad_lines"]
    notes = []
    if run["in_progress"]:
        notes.append("run in progress: the last step is still open")
    if (run.get("options") or {}).get("tls_insecure"):
        notes.append("the target's TLS certificate was not verified (--tls-insecure)")
    if bad["requests"] or bad["resources"]:
        notes.append(f"skipped bad lines: requests.jsonl {bad['requests']}, resources.jsonl {bad['resources']}")
    if unread := run.get("run_json_error"):
        notes.append(unread)
    if summary.get("cut_by_run_end"):
        notes.append(
            f"{summary['cut_by_run_end']} attempts were still in flight when the run's drain ended: they are "
            f"recorded as cut_by_run_end and left out of every figure (--drain-time waits longer)"
        )
    if missing := run.get("audio_missing"):
        notes.append(audio_missing_text(missing))
    health = summary.get("health")
    if health and not health.get("ok") and (shown := health_text(health)):
        notes.append(shown)
    lost = [worker for worker in _workers(summary) if isinstance(worker, dict) and worker.get("lost_at")]
    if lost:
        notes.append(f"{len(lost)} worker(s) went away mid-run: " + ", ".join(str(worker.get("id")) for worker in lost))
    return notes


def _workers(summary: Summary) -> list:
    listed = summary["run"].get("workers")
    return listed if isinstance(listed, list) else []


def _meta_html(summary: Summary) -> str:
    run = summary["run"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(run["start"])) + " UTC" if run.get("start") else "?"
    health = summary.get("health")
    return (
        f"<div class='meta'>target {esc(run.get('target'))} &middot; started {esc(when)} &middot; "
        f"{summary['records']['attempts']} attempts &middot; {len(_workers(summary)) or 1} load process(es)"
        + (f" &middot; {esc(health_text(health))}" if health and health.get("ok") else "")
        + "</div>"
        + "".join(f"<div class='warn'>{esc(note)}</div>" for note in _notes(summary))
    )


def report_html(rd: RunDir, summary: Summary, plotlyjs: str = "embed", live_script: str = "") -> str:
    """The report page.  ``plotlyjs``: "embed" (self-contained) or a URL to load plotly.js from."""
    view = RunView.of(summary)
    render = Renderer(True if plotlyjs == "embed" else plotlyjs)
    # plotly.js goes with the curves (the timeline where there are none): every later figure needs it
    curves, timeline = render(sweep.curves_figure(view)), render(timeline_figure(rd, view))
    streams = (
        stream_health_html(rd, view, render(underrun_figure(view)), render(stream_figure(rd, view)))
        if view.streamed
        else ""
    )
    mixes = "".join(
        f"<h2>Latency by {what}</h2>{drawn}"
        for what in ("voice", "language")
        if (drawn := render(breakdown.group_figure(view, f"latency_by_{what}_ms", what, fewest=2)))
    )
    slo, regression = slo_html(view, render), regression_html(view, render)
    # a step still running: what the verdict is from above it, what the step has so far below the table
    so_far = [f"<div class='warn'>{esc(line)}</div>" for line in open_lines(summary)]
    run_id = summary["run"]["run_id"]
    body = (
        f"<h1>tts-knee &middot; {esc(run_id)}</h1>{_meta_html(summary)}"
        f"<h2>Verdict</h2>{''.join(so_far[:1])}{sweep.verdict_html(view)}"
        f"<h2>Steps</h2>{sweep.step_table_html(view)}{''.join(so_far[1:])}"
        f"<h2>Latency and throughput</h2>{curves}"
        + (f"<h2>Service-level objective</h2>{slo}" if slo else "")
        + (f"<h2>Against the baseline</h2>{regression}" if regression else "")
        + trace_html(view)
        + soak_html(view, render)
        + spike_html(view)
        + probe_html(view)
        + slices_html(view, render)
        + speech_html(summary, render(speech_figure(view)))
        + streams
        + riva_html(view)
        + breakdown.barge_in_html(view)
        + breakdown.integrity_html(view)
        + f"<h2>Timeline: client and server on one clock</h2>{timeline}{server_section(rd, view, render)}"
        f"<h2>Where the time goes</h2>{render(breakdown.stages_figure(view))}"
        f"<h2>Retries and throttling</h2>{render(breakdown.retries_figure(view))}"
        f"{'' if breakdown.has_retry_after(view) else breakdown.NO_RETRY_AFTER}{breakdown.errors_html(view)}"
        f"<h2>GPU memory: baseline, peak, fall-back</h2>"
        f"{render(breakdown.memory_figure(view)) or breakdown.NO_GPU_MEMORY}"
        f"<h2>Latency by text length</h2>{render(breakdown.tier_figure(view))}{mixes}{live_script}"
    )
    return page(f"tts-knee {run_id}", body)


def write_report(rd: RunDir, summary: Summary) -> Path:
    """Write ``report.html`` atomically; an OSError leaves no temporary file behind."""
    return runformat.write_text(rd.path / runformat.REPORT_HTML, report_html(rd, summary))
