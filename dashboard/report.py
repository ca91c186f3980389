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
from .kit import esc, fig_html, is_streamed, is_voice_sweep, page
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


def _meta_html(rd: RunDir, summary: Summary) -> str:
    run = summary["run"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(run["start"])) + " UTC" if run.get("start") else "?"
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
    shown_health = health_text(health) if health and not health.get("ok") else None
    if shown_health:
        notes.append(shown_health)
    listed = run.get("workers")
    workers = listed if isinstance(listed, list) else []
    lost = [w for w in workers if isinstance(w, dict) and w.get("lost_at")]
    if lost:
        notes.append(f"{len(lost)} worker(s) went away mid-run: " + ", ".join(str(w.get("id")) for w in lost))
    note = "".join(f"<div class='warn'>{esc(n)}</div>" for n in notes)
    return (
        f"<div class='meta'>target {esc(run.get('target'))} &middot; started {esc(when)} &middot; "
        f"{summary['records']['attempts']} attempts &middot; {len(workers) or 1} load process(es)"
        + (f" &middot; {esc(health_text(health))}" if health and health.get("ok") else "")
        + f"</div>{note}"
    )


def report_html(rd: RunDir, summary: Summary, plotlyjs="embed", live_script: str = "") -> str:
    """The report page.  ``plotlyjs``: "embed" (self-contained) or a URL to load plotly.js from."""
    first = True if plotlyjs == "embed" else plotlyjs
    # the other figures: one point per rate, or per number of voices
    by_step = sweep.by_step(summary)
    figs = [
        sweep.curves_figure(summary),
        timeline_figure(rd, summary),
        breakdown.stages_figure(by_step),
        breakdown.retries_figure(by_step),
        breakdown.memory_figure(by_step),
        breakdown.tier_figure(by_step),
    ]
    mix = [
        breakdown.group_figure(by_step, "latency_by_voice_ms", "voice", fewest=2),
        breakdown.group_figure(by_step, "latency_by_language_ms", "language", fewest=2),
    ]
    if is_streamed(summary):
        figs += [underrun_figure(summary), stream_figure(rd, summary)]
    heard = speech_figure(summary)
    parts = []
    for f in figs + mix + [heard]:
        parts.append(fig_html(f, first) if f is not None else "")
        first = first if f is None else False
    listening = speech_html(summary, parts[-1])
    mix_html = "".join(
        f"<h2>Latency by {what}</h2>{part}"
        for what, f, part in zip(("voice", "language"), mix, parts[len(figs) : -1])
        if f is not None
    )
    run_id = summary["run"]["run_id"]
    stream = stream_health_html(rd, summary, parts[6], parts[7]) if is_streamed(summary) else ""
    # the SLO and baseline figures come after the first figure, which loads plotly.js
    slo, reg = slo_html(by_step if is_voice_sweep(summary) else summary, False), regression_html(summary, False)
    # a step still running: what the verdict is from above it, what the step has so far below the table
    so_far = [f"<div class='warn'>{esc(line)}</div>" for line in open_lines(summary)]
    body = (
        f"<h1>tts-knee &middot; {esc(run_id)}</h1>{_meta_html(rd, summary)}"
        f"<h2>Verdict</h2>{''.join(so_far[:1])}{sweep.verdict_html(summary)}"
        f"<h2>Steps</h2>{sweep.step_table_html(summary)}{''.join(so_far[1:])}"
        f"<h2>Latency and throughput</h2>{parts[0]}"
        + (f"<h2>Service-level objective</h2>{slo}" if slo else "")
        + (f"<h2>Against the baseline</h2>{reg}" if reg else "")
        + trace_html(summary)
        + soak_html(summary)
        + spike_html(summary)
        + probe_html(summary)
        + slices_html(summary)
        + f"{listening}{stream}{riva_html(summary)}{breakdown.barge_in_html(summary)}"
        f"{breakdown.integrity_html(summary)}"
        f"<h2>Timeline: client and server on one clock</h2>{parts[1]}{server_section(rd, summary)}"
        f"<h2>Where the time goes</h2>{parts[2]}"
        f"<h2>Retries and throttling</h2>{parts[3]}"
        f"{'' if breakdown.has_retry_after(by_step) else breakdown.NO_RETRY_AFTER}{breakdown.errors_html(by_step)}"
        f"<h2>GPU memory: baseline, peak, fall-back</h2>{parts[4] or breakdown.NO_GPU_MEMORY}"
        f"<h2>Latency by text length</h2>{parts[5]}{mix_html}{live_script}"
    )
    return page(f"tts-knee {run_id}", body)


def write_report(rd: RunDir, summary: Summary) -> Path:
    """Write ``report.html`` atomically; an OSError leaves no temporary file behind."""
    return runformat.write_text(rd.path / runformat.REPORT_HTML, report_html(rd, summary))
