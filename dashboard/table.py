"""The step table, one row per executed step (latencies in ms), as the terminal prints it with the
verdict (``tts-knee report``) and as ``report.html`` shows it; an open-loop run's table has
its own columns, in requests per second (:data:`RATE_COLUMNS`); a voice sweep's adds the number
of distinct voices after the concurrency. A streamed run also gets the figures NVIDIA's
riva_tts_perf_client prints, per step (:data:`RIVA_COLUMNS`), and the pre-roll and the figures
vLLM-Omni's and sglang-omni's benchmarks print (:data:`PEER_COLUMNS`)."""

from __future__ import annotations

from pathlib import Path

from tts_knee.analysis.steps import OPEN_MIN_COUNT
from tts_knee.runformat import SOAK_PHASE
from tts_knee.runformat.schema import Preflight
from tts_knee.runformat.summary import BargeIn, Hangups, SloVerdict, Soak, SpeechStep, StepSummary, Summary

from .kit import figures, fmt, orphaned_words, stat
from .probe import probe_lines
from .slices import slice_lines
from .trace import trace_lines
from .view import RunView

TABLE_COLUMNS = (
    "step",
    "conc",
    "req",
    "ok",
    "err%",
    "rps",
    "p50",
    "p95",
    "p99",
    "max",
    "ttfb p50",
    "retries",
    "GPU%",
    "CPU%",
)
STREAM_COLUMNS = ("ttfa p50", "ttfa p95", "audible p95", "lead p95", "underrun%", "rtfx")  # after "ttfb p50"
#: With --asr-model, after the retries: the error rate (WER or CER, mean, %) and the unintelligible clips
#: of the judged.
SPEECH_COLUMNS = ("judged", "unintel")
TAIL_COLUMN = "tail p95"  # after them where the text went in pieces: the wait once the text is complete
#: riva_tts_perf_client's figures: first audio and chunk latency (ms) and RTFX, per step.
RIVA_COLUMNS = (
    "step",
    "conc",
    "streams",
    "first audio avg",
    "p90",
    "p95",
    "p99",
    "chunk avg",
    "p90",
    "p95",
    "p99",
    "RTFX",
)
RIVA_NOTE = (
    "As riva_tts_perf_client prints them, in ms: first audio from sending to the first audio "
    "message, chunk latency between consecutive audio messages of a stream, each pooled over the "
    "step's streams (avg the mean; pNN sorted[int(q n)], no interpolation); RTFX: audio seconds "
    "delivered per wall second."
)

#: A streamed run's pre-roll and the peers' figures, per step (ms; the shares in %).
PEER_COLUMNS = (
    "step",
    "conc",
    "streams",
    "preroll p50",
    "p95",
    "smooth start p50",
    "p95",
    "audio_rtf p50",
    "p95",
    "continuity ok%",
    "C50%",
    "C100%",
    "C200%",
)
PEER_NOTE = (
    "Pre-roll: the start-up buffer a stream needed to play from its first audio without a gap; "
    "smooth start: TTFA plus it. audio_rtf (time to the last byte over the audio's length) and "
    "continuity ok (the share whose worst-case underrun from the first audio, the pre-roll, is at most "
    "100 ms) as vLLM-Omni's benchmark defines them; C50, C100 and C200 (the share of streams of two "
    "or more chunks whose longest stall, playing from the first audio with no buffer, is at most 50, "
    "100 and 200 ms) as sglang-omni's."
)


def step_label(step: StepSummary) -> str:
    """A step's first cell: its number, "soak" for a soak, "open" while it still runs."""
    return (
        str(step["step"]) + (" soak" if step.get("phase") == SOAK_PHASE else "") + (" open" if step.get("open") else "")
    )


def open_lines(summary: Summary) -> list[str]:
    """While a step runs: what the verdict is from, and what the open step has so far."""
    now = summary.get("in_progress_step")
    if not now:
        return []
    step = next((step for step in summary["steps"] if step["step"] == now["step"] and step.get("open")), None)
    return [now["note"]] + ([step["open"]["note"] + "."] if step else [])


#: The web UI's "TTS steps" tab: (key, title) per column, its rows from :func:`tab_rows`.
TAB_COLUMNS = (
    ("step", "Step"),
    ("phase", "Phase"),
    ("concurrency", "Concurrency"),
    ("state", "State"),
    ("requests", "Requests"),
    ("failed", "Failed"),
    ("retries", "Retries"),
    ("rps", "Throughput (req/s)"),
    ("p50_ms", "p50 wait (ms)"),
    ("p95_ms", "p95 wait (ms)"),
    ("max_ms", "max wait (ms)"),
    ("underrun_pct", "Streams stalled (%)"),
    ("slo", "SLO"),
)
WITHHELD = "\u2014"  # a figure the open step's window cannot give yet


def slo_cell(verdict: SloVerdict | None) -> str:
    """An SLO verdict in one short cell ("" where none)."""
    if verdict is None:
        return ""
    if verdict["pass"] is True:
        return "pass"
    if verdict["pass"] is False:
        return "fail: " + "; ".join(verdict["failed"])
    return "inconclusive: " + "; ".join(verdict["inconclusive"])


def tab_rows(summary: Summary) -> list[dict]:
    """The web UI tab's rows, one per executed step, from the same summary as the report's table:
    a closed step's row is the report's; an open one says so in ``state`` and shows what its
    window cannot give yet as a dash."""
    slo = summary.get("slo")
    verdicts = {verdict.get("step"): verdict for verdict in ((slo.get("by_step") if slo else None) or [])}
    return [
        _tab_row(step, "in progress" if step.get("open") and slo else slo_cell(verdicts.get(step["step"])))
        for step in summary["steps"]
    ]


def _tab_row(step: StepSummary, slo: str) -> dict:
    """One step's row of the web UI tab, ``slo`` its SLO cell."""
    opened, latency = step.get("open"), figures(step.get("latency_ms"))

    def shown(value: object, digits: int = 1) -> object:
        if isinstance(value, (int, float)):
            return round(float(value), digits)
        return WITHHELD if opened else None

    if not opened:
        state = "done"
    elif opened["settling"]:
        state = "settling"
    elif opened["completions"] < OPEN_MIN_COUNT:
        state = f"in progress ({opened['completions']} finished)"
    else:
        state = "in progress"
    phase = step.get("phase") or ""
    underrun = step.get("underrun_rate")
    if step.get("rate") is None:
        load: object = step["concurrency"]
    elif step.get("speed"):
        load = f"{step['speed']:g}x ({step['rate']:.3g} req/s)"
    else:
        load = f"{step['rate']:g} req/s"
    return {
        "step": step["step"],
        "phase": f"grid {step.get('repeat')}" if phase == "grid" else phase,
        "concurrency": load,
        "state": state,
        "requests": step["requests"],
        "failed": step["failed"],
        "retries": step["retries"],
        "rps": shown(step.get("throughput_rps"), 2),
        "p50_ms": shown(latency.get("p50")),
        "p95_ms": shown(latency.get("p95")),
        "max_ms": shown(latency.get("max")),
        "underrun_pct": None if underrun is None else round(100.0 * underrun, 1),
        "slo": slo,
    }


def table_columns(view: RunView) -> tuple[str, ...]:
    """The step table's columns: :data:`TABLE_COLUMNS`, plus :data:`STREAM_COLUMNS` when streamed
    and :data:`TAIL_COLUMN` when the text went in pieces, ``voices`` in a voice sweep, and the
    error rate with :data:`SPEECH_COLUMNS` where speech was judged."""
    columns: tuple[str, ...] = TABLE_COLUMNS
    if view.voice_sweep:
        columns = columns[:2] + ("voices",) + columns[2:]
    if view.speech_metric:
        place = columns.index("retries")
        listen = LISTEN_COLUMNS if listened(view.summary) else ()
        columns = columns[:place] + (f"{view.speech_metric.upper()}%",) + SPEECH_COLUMNS + listen + columns[place:]
    if not view.streamed:
        return columns
    place = columns.index("ttfb p50") + 1
    stream = STREAM_COLUMNS + ((TAIL_COLUMN,) if _has_tail(view) else ())
    return columns[:place] + stream + columns[place:]


def _has_tail(view: RunView) -> bool:
    return any(step.get("tail_ms") for step in view.summary["steps"])


#: With listening: mean speaker similarity and mean naturalness (DNSMOS OVRL) of the judged clips.
LISTEN_COLUMNS = ("sim", "MOS")


def listened(summary: Summary) -> bool:
    """Whether the judge also heard voice and sound (unless --asr-words-only) at any step."""
    return any("similarity_mean" in (s.get("speech") or {}) for s in summary["steps"])


def table_rows(view: RunView) -> list[list[str]]:
    """One row of :func:`table_columns` per executed step."""
    metric, tail = view.speech_metric, view.streamed and _has_tail(view)
    listen = metric is not None and listened(view.summary)
    rows = []
    for step in view.summary["steps"]:
        latency, ttfb, server = (
            figures(step.get("latency_ms")),
            figures(step.get("ttfb_ms")),
            figures(step.get("server")),
        )
        rows.append(
            [step_label(step), str(step["concurrency"])]
            + ([fmt(step.get("voices"))] if view.voice_sweep else [])
            + [
                str(step["requests"]),
                str(step["ok"]),
                _percent(step["error_rate"]),
                fmt(step["throughput_rps"], "{:.2f}"),
                *(fmt(latency.get(quantile)) for quantile in ("p50", "p95", "p99", "max")),
                fmt(ttfb.get("p50")),
            ]
            + (_stream_cells(step) if view.streamed else [])
            + ([fmt(stat(step, "tail_ms", "p95"))] if tail else [])
            + (_speech_cells(step.get("speech"), metric) if metric else [])
            + (
                [fmt(figures(step.get("speech")).get(key), "{:.2f}") for key in ("similarity_mean", "mos_mean")]
                if listen
                else []
            )
            + [str(step["retries"]), fmt(server.get("gpu_util_mean")), fmt(server.get("cpu_mean"))]
        )
    return rows


def _percent(share: float | None) -> str:
    """A share as the tables show it: in %, one decimal."""
    return fmt(None if share is None else 100 * share, "{:.1f}")


def _stream_cells(step: StepSummary) -> list[str]:
    ttfa = figures(step.get("ttfa_ms"))
    return [
        fmt(ttfa.get("p50")),
        fmt(ttfa.get("p95")),
        fmt(stat(step, "ttfa_audible_ms", "p95")),
        fmt(stat(step, "leading_silence_ms", "p95")),
        _percent(step.get("underrun_rate")),
        fmt(step.get("rtfx"), "{:.2f}"),
    ]


def _speech_cells(speech: SpeechStep | None, metric: str) -> list[str]:
    heard = figures(speech)
    mean = heard.get(f"{metric}_mean")
    shown = mean if isinstance(mean, (int, float)) else None  # a figure, or null
    return [_percent(shown), fmt(heard.get("judged")), fmt(heard.get("unintelligible"))]


def riva_rows(view: RunView) -> list[list[str]]:
    """One row of :data:`RIVA_COLUMNS` per executed step of a streamed run (none otherwise)."""
    if not view.streamed:
        return []
    rows = []
    for step in view.summary["steps"]:
        label, riva = step_label(step), figures(step.get("riva"))
        rows.append(
            [label, str(step["concurrency"]), fmt(stat(riva, "first_audio_ms", "count"))]
            + [
                fmt(stat(riva, latency, figure), "{:.1f}")
                for latency in ("first_audio_ms", "chunk_ms")
                for figure in ("avg", "p90", "p95", "p99")
            ]
            + [fmt(step.get("rtfx"), "{:.2f}")]
        )
    return rows


def peer_rows(view: RunView) -> list[list[str]]:
    """One row of :data:`PEER_COLUMNS` per executed step of a streamed run (none otherwise)."""
    if not view.streamed:
        return []
    rows = []
    for step in view.summary["steps"]:
        audio_rtf = figures(step.get("audio_rtf"))
        rows.append(
            [step_label(step), str(step["concurrency"]), str(step["streams"]["counted"])]
            + [
                fmt(stat(step, key, quantile))
                for key in ("preroll_ms", "smooth_start_ms")
                for quantile in ("p50", "p95")
            ]
            + [fmt(audio_rtf.get(quantile), "{:.2f}") for quantile in ("p50", "p95")]
            + [
                _percent(share)
                for share in (step.get("continuity_ok_rate"), step.get("c50"), step.get("c100"), step.get("c200"))
            ]
        )
    return rows


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]


def _slo_lines(view: RunView) -> list[str]:
    """Per tested level (concurrency, offered rate or number of voices): the SLO verdict, and the spread
    between repeats."""
    slo, out = view.summary.get("slo"), []
    rate = view.key == "rate"
    if slo:
        if view.voice_sweep:
            best = fmt(slo.get("max_voices"))
        elif rate:
            best = f"{fmt(slo['max_rate'], '{:g}')} req/s" if slo["max_rate"] is not None else "none"
        else:
            best = fmt(slo["max_concurrency"])
        per = {"voices": "number of voices", "rate": "offered rate", "concurrency": "concurrency"}[view.key]
        out.append(f"SLO {slo['spec']}  (per {per}; repeats pooled; largest meeting it with every lower one: {best})")
        for verdict in slo["steps"]:
            word = {True: "pass", False: "FAIL", None: "inconclusive"}[verdict["pass"]]
            why = ", ".join(verdict["failed"]) or "; ".join(verdict["inconclusive"])
            out.append(f"  {verdict[view.key]:>5g}  {word}" + (f"  {why}" if why else ""))
    for level in view.summary.get("levels") or []:
        spread = level.get("spread")
        if not spread:
            continue
        parts = [
            f"{name} {fmt(bounds[0], spec)}-{fmt(bounds[1], spec)}{unit}"
            for bounds, name, spec, unit in (
                (spread.get("p50_ms"), "p50", "{:.0f}", " ms"),
                (spread.get("p95_ms"), "p95", "{:.0f}", " ms"),
                (spread.get("throughput_rps"), "rps", "{:.2f}", ""),
                (spread.get("ttfa_p95_ms"), "TTFA p95", "{:.0f}", " ms"),
            )
            if bounds is not None
        ]
        out.append(
            f"repeats at {level[view.key]:g}{' req/s' if rate else ''} (steps {', '.join(map(str, level['steps']))}): "
            + ", ".join(parts)
            + " (min-max over repeats; judged on the pooled records)"
        )
    return out


def _step_lines(view: RunView) -> list[str]:
    """The step table, and a streamed run's Riva and peers' tables under it."""
    lines = _aligned([list(table_columns(view))] + table_rows(view))
    riva, peers = riva_rows(view), peer_rows(view)
    if riva:
        lines.append("riva_tts_perf_client's figures (ms; pNN = sorted[int(q n)]):")
        lines += _aligned([list(RIVA_COLUMNS)] + riva)
    if peers:
        lines.append("pre-roll and the peers' figures (ms; audio_rtf; % of the streams):")
        lines += _aligned([list(PEER_COLUMNS)] + peers)
    return lines


def format_table(summary: Summary, report: Path | None = None) -> str:
    """The step table (latencies in ms) and the verdict, as printed on the terminal."""
    view = RunView.of(summary)
    lines = [f"run {summary['run']['run_id']}" + ("  (in progress)" if summary["run"]["in_progress"] else "")]
    knee = summary["knee"]
    lines += _rate_lines(view) if view.open_loop else _step_lines(view)
    lines += open_lines(summary)
    if (summary["run"].get("options") or {}).get("tls_insecure"):
        lines.append("the target's TLS certificate was not verified (--tls-insecure)")
    bad = summary["bad_lines"]
    if bad["requests"] or bad["resources"]:
        lines.append(f"skipped bad lines: requests.jsonl {bad['requests']}, resources.jsonl {bad['resources']}")
    missing = summary["run"].get("audio_missing")
    if missing:
        lines.append(audio_missing_text(missing))
    if view.voice_sweep:
        lines.append(
            "knee: none found"
            if knee["voices"] is None
            else f"knee: {knee['voices']} distinct voices at concurrency {knee['concurrency']} (methods "
            f"agreeing: {', '.join(knee['agree']) or 'none'})"
        )
    elif not view.open_loop:  # the open-loop lines name their knee in req/s
        lines.append(
            "knee: none found"
            if knee["concurrency"] is None
            else f"knee: {knee['concurrency']} (methods agreeing: {', '.join(knee['agree']) or 'none'})"
        )
    if view.streamed:
        what = "audible TTFA p95" if knee.get("ttfa_basis") == "ttfa_audible_ms" else "TTFA p95"
        lines.append(
            f"streamed: judged on underruns and {what} (floor {fmt(knee.get('ttfa_floor_ms'))} ms), not whole-body time"
        )
    lines += judge_lines(summary)
    lines += slice_lines(summary)
    lines += _barge_in_lines(summary.get("barge_in"))
    lines += _hangup_lines(summary.get("hangups"))
    diagnosis = summary["diagnosis"]
    lines.append(f"diagnosis: {diagnosis['kind']}")
    lines += [f"  - {sentence}" for sentence in diagnosis["evidence"]]
    lines += _slo_lines(view)
    if view.voice_sweep:
        lines.append(
            f"recommended voices: {fmt(summary.get('recommended_voices'))} (at concurrency "
            f"{fmt(summary['recommended_concurrency'])})  {summary['recommendation']}"
        )
    elif view.open_loop:
        lines.append(
            f"recommended rate: {fmt(summary.get('recommended_rate'), '{:g}')} req/s "
            f"(concurrency {fmt(summary['recommended_concurrency'])})  {summary['recommendation']}"
        )
    else:
        lines.append(f"recommended concurrency: {fmt(summary['recommended_concurrency'])}  {summary['recommendation']}")
    capacity = summary.get("capacity") or {}
    if capacity.get("at") and capacity.get("text"):
        lines.append(f"capacity: {capacity['text']}")
    lines += _soak_lines(summary)
    if summary.get("spike"):
        lines.append(f"spike: {summary['spike']['text']}")
    lines += probe_lines(summary)
    lines += trace_lines(summary)
    health = health_text(summary.get("health"))
    if health:
        lines.append(health)
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines)


def judge_lines(summary: Summary) -> list[str]:
    """What the ASR judge heard, and how, in one line ([] where the run was not judged)."""
    judge = summary.get("judge")
    return [f"speech: {judge['text']}"] if judge else []


def health_text(h: Preflight | None) -> str | None:
    """The health probe after the run in one line (None: none was made)."""
    if not h:
        return None
    if h.get("ok"):
        return f"health after the run: answered {h.get('status')} in {fmt(h.get('ms'))} ms"
    return f"health after the run: FAILED: {h.get('message')}"


def audio_missing_text(missing: dict[str, int]) -> str:
    """The audio files a slow disk kept from being written in time, in one sentence."""
    return (
        f"audio files not written in time: {missing.get('late', 0)} late, {missing.get('dropped', 0)} dropped "
        f"(the disk did not keep up; those attempts have no t3 or write_ms)"
    )


def soak_headline(soak: Soak) -> str:
    """A soak in one line: the level it held, how long, in which windows."""
    minutes = (soak.get("duration_s") or 0) / 60.0
    level = f"{soak['rate']:g} req/s" if soak.get("rate") is not None else f"concurrency {soak['concurrency']}"
    return (
        f"soak: step {soak['step']} held {level} for {minutes:.1f} min ({len(soak['windows'])} windows of "
        f"{fmt(soak.get('window_s'), '{:.0f}')} s)"
    )


def _soak_lines(summary: Summary) -> list[str]:
    """A soak's headline and its drift verdicts, one line each (or that it held)."""
    soak = summary.get("soak")
    if not soak:
        return []
    head = soak_headline(soak)
    if not soak["drift"]:
        return [head + ": no drift in latency, throughput or memory"]
    return [head + ":"] + [f"  - {verdict}" for verdict in soak["drift"]]


RATE_COLUMNS = (
    "step",
    "offered req/s",
    "served req/s",
    "served/offered",
    "requests",
    "dropped",
    "err%",
    "in flight mean",
    "in flight max",
    "p50 from schedule",
    "p95 from schedule",
    "p99 from schedule",
    "p95 wait",
    "send lag p95",
    "growing",
    "retries",
)


def rate_table_rows(view: RunView) -> list[list[str]]:
    """One row of :data:`RATE_COLUMNS` per executed step of an open-loop run."""
    rows = []
    for step in view.summary["steps"]:
        growth = step.get("growth")
        offered = (
            f"{step['offered_rps']:.3g} ({step['speed']:g}x)"
            if step.get("offered_rps") and step.get("speed")
            else fmt(step.get("rate"), "{:g}")
        )
        rows.append(
            [
                step_label(step),
                offered,
                fmt(step.get("throughput_rps"), "{:.2f}"),
                fmt(step.get("throughput_ratio"), "{:.2f}"),
                str(step["requests"]),
                str(step.get("dropped") or 0),
                _percent(step["error_rate"]),
                fmt(stat(step, "inflight", "mean"), "{:.1f}"),
                fmt(stat(step, "inflight", "max")),
                *(fmt(stat(step, "sched_wait_ms", quantile)) for quantile in ("p50", "p95", "p99")),
                fmt(stat(step, "latency_ms", "p95")),
                fmt(stat(step, "send_lag_ms", "p95"), "{:.1f}"),
                {True: "yes", False: "no", None: "-"}[growth.get("growing") if growth else None],
                str(step["retries"]),
            ]
        )
    return rows


def _barge_in_lines(barge: BargeIn | None) -> list[str]:
    """One line for a run with --barge-in: the cancels, how fast they went quiet, what they leaked."""
    if not barge:
        return []
    quiet, after = figures(barge.get("cancel_to_quiet_ms")), figures(barge.get("audio_after_cancel_ms"))
    unacked = f", {barge['unacknowledged']} unacknowledged" if barge["unacknowledged"] else ""
    return [
        f"barge-in: {barge['cancelled']} cancelled by {barge.get('cancel_by') or 'close'}{unacked}; cancel to "
        f"quiet p50 {fmt(quiet.get('p50'))} / p95 {fmt(quiet.get('p95'))} ms, audio after p95 "
        f"{fmt(after.get('p95'))} ms; orphaned work " + orphaned_words(barge)
    ]


def _hangup_lines(hung: Hangups | None) -> list[str]:
    """One line where the client gave up on requests and a collector watched the server process."""
    if not hung:
        return []
    work = hung.get("orphaned_work_s")
    said = (
        f"{work['per_hangup_s']:.2f} ± {work['uncertainty_s']:.2f} CPU-s per hang-up left to the server "
        f"(from its process's CPU)"
        if work
        else f"orphaned work n/a ({hung['note']})"
    )
    return [f"hang-ups: {hung['timed_out']} at --request-timeout; {said}"]


def _rate_lines(view: RunView) -> list[str]:
    """The terminal's step table and verdict of an open-loop run."""
    summary = view.summary
    lines = _aligned([list(RATE_COLUMNS)] + rate_table_rows(view))
    knee = summary["knee"]
    lines.append(
        "knee: none found"
        if knee["rate"] is None
        else f"knee: {knee['rate']:g} req/s (methods agreeing: {', '.join(knee['agree']) or 'none'})"
    )
    lines.append(f"dropped arrivals: {summary.get('dropped') or 0}")
    return lines
