"""A trace replay (``--trace``) in the terminal, the report and the timeline: the answers as
speeds of the trace, and each burst the trace holds with the p95 of the requests that came in it
beside the rest of the step's (``summary["trace"]``, from :mod:`analysis.trace`)."""

from __future__ import annotations

from tts_knee.runformat.schema import TraceBurst
from tts_knee.runformat.summary import Summary, TracePart, TraceRows, TraceStepBurst

from .kit import esc, fmt


def _speed(v) -> str:
    return "none" if v is None else f"{v:g}x"


def trace_headline(tr: TracePart) -> str:
    bursts = tr.get("bursts") or []
    convs = tr.get("conversations") or 0
    more = [f"{convs} conversation{'' if convs == 1 else 's'}"] if convs else []
    if bursts:
        more.append(f"{len(bursts)} burst{'' if len(bursts) == 1 else 's'}")
    pace = f"{tr['rate_rps']:.2f} req/s at 1x"
    out = f"trace {tr['path']}: {tr['rows']} arrivals over {tr['duration_s']:.0f} s ({', '.join([pace] + more)})"
    answers = [f"knee at {_speed(tr.get('knee_speed'))}", f"recommended speed {_speed(tr.get('recommended_speed'))}"]
    if "max_speed" in tr:
        answers.append(f"SLO met up to {_speed(tr['max_speed'])}")
    return out + "; " + ", ".join(answers)


def _not_sent(rows: TraceRows) -> int:
    return sum(rows["not_sent"].values())


def rows_text(rows: TraceRows) -> str:
    """``38 rows planned, 38 sent, 38 recorded (0 cut by the run's end), 0 not sent``, with the
    reasons of those not sent (runformat.schema.NOT_SENT_REASONS)."""
    not_sent = _not_sent(rows)
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(rows["not_sent"].items(), key=lambda kv: -kv[1]) if n)
    dropped = f", {rows['dropped']} dropped at --max-inflight" if rows["dropped"] else ""
    return (
        f"{rows['planned']} rows planned, {rows['sent']} sent, {rows['recorded']} recorded "
        f"({rows['cut_by_run_end']} cut by the run's end){dropped}, {not_sent} not sent"
        + (f": {reasons}" if reasons else "")
    )


def burst_text(b: TraceBurst | TraceStepBurst) -> str:
    return f"{b['start_s']:.1f}-{b['end_s']:.1f} s"


def trace_lines(summary: Summary) -> list[str]:
    """The replay's headline and one line per step that replayed a burst (none without a trace)."""
    tr = summary.get("trace")
    if not tr:
        return []
    lines = [trace_headline(tr)]
    if "replayed_rows" in tr:
        lines.append(f"  {rows_text(tr['replayed_rows'])}")
    for st in tr["steps"]:
        if "replayed_rows" in st and _not_sent(st["replayed_rows"]) and len(tr["steps"]) > 1:
            lines.append(f"  step {st['step']} ({st['speed']:g}x): {rows_text(st['replayed_rows'])}")
        for b in st["bursts"]:
            lines.append(
                f"  step {st['step']} ({st['speed']:g}x): burst at {burst_text(b)} of the trace, "
                f"{b['requests']} requests, p95 from schedule {fmt(b['p95_ms'])} ms "
                f"(the rest of the step {fmt(st['p95_outside_ms'])} ms), {b['failed']} failed"
            )
    return lines


def trace_html(summary: Summary) -> str:
    """The report's section (empty without a trace)."""
    tr = summary.get("trace")
    if not tr:
        return ""
    found = "".join(
        f"<tr><td>{burst_text(b)}</td><td>{b['arrivals']}</td><td>{b['rate_rps']:.1f}</td>"
        f"<td>{b['times_mean']:.1f}x</td></tr>"
        for b in tr.get("bursts") or []
    )
    rows = []
    for st in tr["steps"]:
        replayed: list[TraceStepBurst | None] = [*st["bursts"]] or [None]
        for b in replayed:
            offered = st.get("offered_rps") or st["rate"]
            rows.append(
                f"<tr><td>{st['step']}</td><td>{st['speed']:g}x</td><td>{offered:.3g}</td>"
                + (
                    f"<td>{burst_text(b)}</td><td>{b['requests']}</td><td>{b['failed']}</td><td>{fmt(b['p95_ms'])}</td>"
                    if b
                    else "<td>-</td><td></td><td></td><td></td>"
                )
                + f"<td>{fmt(st['p95_outside_ms'])}</td></tr>"
            )
    bursts = (
        f"<table><tr><th>burst (trace time)</th><th>arrivals</th><th>req/s at 1x</th><th>of the mean</th></tr>"
        f"{found}</table>"
        if found
        else "<p class='meta'>No bursts: nowhere do arrivals come twice as fast as the mean.</p>"
    )
    counted = f"<div class='meta'>{esc(rows_text(tr['replayed_rows']))}</div>" if "replayed_rows" in tr else ""
    lost = "replayed_rows" in tr and _not_sent(tr["replayed_rows"]) > 0
    return (
        f"<h2>Trace replay</h2><div class='verdict{'' if lost else ' ok'}'>"
        f"<div class='meta'>{esc(trace_headline(tr))}</div>{counted}</div>"
        f"{bursts}<table><tr><th>step</th><th>speed</th><th>offered req/s</th><th>burst</th><th>requests</th>"
        f"<th>failed</th><th>burst p95 ms</th><th>rest of the step p95 ms</th></tr>{''.join(rows)}</table>"
        f"<p class='meta'>Latency from the schedule: what a caller who came when the trace has it waited. A "
        f"step at speed S replays second x of the trace at x / S; bursts are shaded on the timeline.</p>"
    )


def burst_bands(summary: Summary, t_zero: float) -> list[dict]:
    """The timeline's shading of each burst as each step replayed it (plotly shapes, every row)."""
    tr = summary.get("trace")
    if not tr:
        return []
    starts = {s["step"]: s.get("planned_start") for s in summary["steps"]}
    out = []
    for st in tr["steps"]:
        t = starts.get(st["step"])
        if t is None:
            continue
        for b in st["bursts"]:
            x0, x1 = t + b["start_s"] / st["speed"] - t_zero, t + b["end_s"] / st["speed"] - t_zero
            for row in ("", "2", "3", "4"):
                out.append(
                    dict(
                        type="rect",
                        xref=f"x{row}",
                        yref=f"y{row} domain",
                        x0=x0,
                        x1=max(x1, x0 + 0.2),
                        y0=0,
                        y1=1,
                        fillcolor="#f6c343",
                        opacity=0.35,
                        layer="below",
                        line_width=0,
                    )
                )
    return out
