"""A trace replay (``--trace``) in the terminal and the report: the answers as speeds of the
trace, and each burst the trace holds with the p95 of the requests that came in it beside the
rest of the step's (``summary["trace"]``, from :mod:`analysis.trace`; the timeline shades the
bursts)."""

from __future__ import annotations

from tts_knee.runformat.schema import TraceBurst
from tts_knee.runformat.summary import Summary, TracePart, TraceRows, TraceStepBurst

from .kit import esc, fmt
from .view import RunView


def _speed(speed: float | None) -> str:
    return "none" if speed is None else f"{speed:g}x"


def trace_headline(trace: TracePart) -> str:
    bursts = trace.get("bursts") or []
    conversations = trace.get("conversations") or 0
    more = [f"{conversations} conversation{'' if conversations == 1 else 's'}"] if conversations else []
    if bursts:
        more.append(f"{len(bursts)} burst{'' if len(bursts) == 1 else 's'}")
    pace = f"{trace['rate_rps']:.2f} req/s at 1x"
    out = (
        f"trace {trace['path']}: {trace['rows']} arrivals over {trace['duration_s']:.0f} s ({', '.join([pace] + more)})"
    )
    answers = [
        f"knee at {_speed(trace.get('knee_speed'))}",
        f"recommended speed {_speed(trace.get('recommended_speed'))}",
    ]
    if "max_speed" in trace:
        answers.append(f"SLO met up to {_speed(trace['max_speed'])}")
    return out + "; " + ", ".join(answers)


def _not_sent(rows: TraceRows) -> int:
    return sum(rows["not_sent"].values())


def rows_text(rows: TraceRows) -> str:
    """``38 rows planned, 38 sent, 38 recorded (0 cut by the run's end), 0 not sent``, with the
    reasons of those not sent (runformat.schema.NOT_SENT_REASONS)."""
    not_sent = _not_sent(rows)
    reasons = ", ".join(
        f"{count} {why}" for why, count in sorted(rows["not_sent"].items(), key=lambda item: -item[1]) if count
    )
    dropped = f", {rows['dropped']} dropped at --max-inflight" if rows["dropped"] else ""
    return (
        f"{rows['planned']} rows planned, {rows['sent']} sent, {rows['recorded']} recorded "
        f"({rows['cut_by_run_end']} cut by the run's end){dropped}, {not_sent} not sent"
        + (f": {reasons}" if reasons else "")
    )


def burst_text(burst: TraceBurst | TraceStepBurst) -> str:
    return f"{burst['start_s']:.1f}-{burst['end_s']:.1f} s"


def trace_lines(summary: Summary) -> list[str]:
    """The replay's headline and one line per step that replayed a burst (none without a trace)."""
    trace = summary.get("trace")
    if not trace:
        return []
    lines = [trace_headline(trace)]
    if "replayed_rows" in trace:
        lines.append(f"  {rows_text(trace['replayed_rows'])}")
    for step in trace["steps"]:
        head = f"  step {step['step']} ({step['speed']:g}x)"
        if "replayed_rows" in step and _not_sent(step["replayed_rows"]) and len(trace["steps"]) > 1:
            lines.append(f"{head}: {rows_text(step['replayed_rows'])}")
        for burst in step["bursts"]:
            lines.append(
                f"{head}: burst at {burst_text(burst)} of the trace, "
                f"{burst['requests']} requests, p95 from schedule {fmt(burst['p95_ms'])} ms "
                f"(the rest of the step {fmt(step['p95_outside_ms'])} ms), {burst['failed']} failed"
            )
    return lines


def trace_html(view: RunView) -> str:
    """The report's section (empty without a trace)."""
    trace = view.summary.get("trace")
    if not trace:
        return ""
    found = "".join(
        f"<tr><td>{burst_text(burst)}</td><td>{burst['arrivals']}</td><td>{burst['rate_rps']:.1f}</td>"
        f"<td>{burst['times_mean']:.1f}x</td></tr>"
        for burst in trace.get("bursts") or []
    )
    rows = []
    for step in trace["steps"]:
        replayed: list[TraceStepBurst | None] = [*step["bursts"]] or [None]
        for burst in replayed:
            offered = step.get("offered_rps") or step["rate"]
            rows.append(
                f"<tr><td>{step['step']}</td><td>{step['speed']:g}x</td><td>{offered:.3g}</td>"
                + (
                    f"<td>{burst_text(burst)}</td><td>{burst['requests']}</td><td>{burst['failed']}</td>"
                    f"<td>{fmt(burst['p95_ms'])}</td>"
                    if burst
                    else "<td>-</td><td></td><td></td><td></td>"
                )
                + f"<td>{fmt(step['p95_outside_ms'])}</td></tr>"
            )
    bursts = (
        f"<table><tr><th>burst (trace time)</th><th>arrivals</th><th>req/s at 1x</th><th>of the mean</th></tr>"
        f"{found}</table>"
        if found
        else "<p class='meta'>No bursts: nowhere do arrivals come twice as fast as the mean.</p>"
    )
    counted = f"<div class='meta'>{esc(rows_text(trace['replayed_rows']))}</div>" if "replayed_rows" in trace else ""
    lost = "replayed_rows" in trace and _not_sent(trace["replayed_rows"]) > 0
    return (
        f"<h2>Trace replay</h2><div class='verdict{'' if lost else ' ok'}'>"
        f"<div class='meta'>{esc(trace_headline(trace))}</div>{counted}</div>"
        f"{bursts}<table><tr><th>step</th><th>speed</th><th>offered req/s</th><th>burst</th><th>requests</th>"
        f"<th>failed</th><th>burst p95 ms</th><th>rest of the step p95 ms</th></tr>{''.join(rows)}</table>"
        f"<p class='meta'>Latency from the schedule: what a caller who came when the trace has it waited. A "
        f"step at speed S replays second x of the trace at x / S; bursts are shaded on the timeline.</p>"
    )
