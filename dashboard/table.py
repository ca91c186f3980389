"""The step table, one row per executed step (latencies in ms), as the terminal prints it with the
verdict (``tts-knee report``) and as ``report.html`` shows it; an open-loop run's table has
its own columns, in requests per second (:data:`RATE_COLUMNS`); a voice sweep's adds the number
of distinct voices after the concurrency. A streamed run also gets the figures NVIDIA's
riva_tts_perf_client prints, per step (:data:`RIVA_COLUMNS`), and the pre-roll and the figures
vLLM-Omni's and sglang-omni's benchmarks print (:data:`PEER_COLUMNS`)."""

from __future__ import annotations

from pathlib import Path

from tts_knee.analysis.axis import Key
from tts_knee.analysis.steps import OPEN_MIN_COUNT
from tts_knee.runformat import SOAK_PHASE
from tts_knee.runformat.schema import Preflight
from tts_knee.runformat.summary import BargeIn, Hangups, SloVerdict, Soak, SpeechStep, StepSummary, Summary

from .kit import figures, fmt, is_open_loop, is_streamed, is_voice_sweep, orphaned_words, stat
from .probe import probe_lines
from .slices import slice_lines
from .trace import trace_lines

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


def step_label(s: StepSummary) -> str:
    """A step's first cell: its number, "soak" for a soak, "open" while it still runs."""
    return str(s["step"]) + (" soak" if s.get("phase") == SOAK_PHASE else "") + (" open" if s.get("open") else "")


def open_lines(summary: Summary) -> list[str]:
    """While a step runs: what the verdict is from, and what the open step has so far."""
    now = summary.get("in_progress_step")
    if not now:
        return []
    step = next((s for s in summary["steps"] if s["step"] == now["step"] and s.get("open")), None)
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


def slo_cell(v: SloVerdict | None) -> str:
    """An SLO verdict in one short cell ("" where none)."""
    if v is None:
        return ""
    if v["pass"] is True:
        return "pass"
    if v["pass"] is False:
        return "fail: " + "; ".join(v["failed"])
    return "inconclusive: " + "; ".join(v["inconclusive"])


def tab_rows(summary: Summary) -> list[dict]:
    """The web UI tab's rows, one per executed step, from the same summary as the report's table:
    a closed step's row is the report's; an open one says so in ``state`` and shows what its
    window cannot give yet as a dash."""
    slo = summary.get("slo")
    verdicts = {v.get("step"): v for v in ((slo.get("by_step") if slo else None) or [])}
    rows = []
    for s in summary["steps"]:
        op, lat = s.get("open"), figures(s.get("latency_ms"))

        def fig(v, digits=1):
            return (WITHHELD if op else None) if v is None else round(float(v), digits)  # noqa: B023 - called in this iteration

        state = (
            "done"
            if not op
            else "settling"
            if op["settling"]
            else f"in progress ({op['completions']} finished)"
            if op["completions"] < OPEN_MIN_COUNT
            else "in progress"
        )
        phase = s.get("phase") or ""
        under = s.get("underrun_rate")
        rows.append(
            {
                "step": s["step"],
                "phase": f"grid {s.get('repeat')}" if phase == "grid" else phase,
                "concurrency": (
                    f"{s['speed']:g}x ({s['rate']:.3g} req/s)" if s.get("speed") else f"{s['rate']:g} req/s"
                )
                if s.get("rate") is not None
                else s["concurrency"],
                "state": state,
                "requests": s["requests"],
                "failed": s["failed"],
                "retries": s["retries"],
                "rps": fig(s.get("throughput_rps"), 2),
                "p50_ms": fig(lat.get("p50")),
                "p95_ms": fig(lat.get("p95")),
                "max_ms": fig(lat.get("max")),
                "underrun_pct": None if under is None else round(100.0 * under, 1),
                "slo": "in progress" if op and summary.get("slo") else slo_cell(verdicts.get(s["step"])),
            }
        )
    return rows


def _has_tail(summary: Summary) -> bool:
    return any(s.get("tail_ms") for s in summary["steps"])


def speech_metric(summary: Summary) -> str | None:
    """``wer`` or ``cer`` where the ASR judge judged any step, else None."""
    for s in summary["steps"]:
        sp = s.get("speech")
        if sp and sp.get("judged"):
            return sp["metric"]
    return None


def table_columns(summary: Summary) -> tuple[str, ...]:
    """The step table's columns: :data:`TABLE_COLUMNS`, plus :data:`STREAM_COLUMNS` when streamed
    and :data:`TAIL_COLUMN` when the text went in pieces, ``voices`` in a voice sweep, and the
    error rate with :data:`SPEECH_COLUMNS` where speech was judged."""
    cols: tuple[str, ...] = TABLE_COLUMNS
    if is_voice_sweep(summary):
        cols = cols[:2] + ("voices",) + cols[2:]
    metric = speech_metric(summary)
    if metric:
        at = cols.index("retries")
        listen = LISTEN_COLUMNS if listened(summary) else ()
        cols = cols[:at] + (f"{metric.upper()}%",) + SPEECH_COLUMNS + listen + cols[at:]
    if not is_streamed(summary):
        return cols
    at = cols.index("ttfb p50") + 1
    stream = STREAM_COLUMNS + ((TAIL_COLUMN,) if _has_tail(summary) else ())
    return cols[:at] + stream + cols[at:]


#: With listening: mean speaker similarity and mean naturalness (DNSMOS OVRL) of the judged clips.
LISTEN_COLUMNS = ("sim", "MOS")


def listened(summary: Summary) -> bool:
    """Whether the judge also heard voice and sound (unless --asr-words-only) at any step."""
    return any("similarity_mean" in (s.get("speech") or {}) for s in summary["steps"])


def table_rows(summary: Summary) -> list[list[str]]:
    """One row of :func:`table_columns` per executed step."""
    streamed, tail, voices = is_streamed(summary), _has_tail(summary), is_voice_sweep(summary)
    metric = speech_metric(summary)
    listen = listened(summary)
    rows = []
    for s in summary["steps"]:
        lat, ttfb, srv = figures(s.get("latency_ms")), figures(s.get("ttfb_ms")), figures(s.get("server"))
        ttfa, under = figures(s.get("ttfa_ms")), s.get("underrun_rate")
        rows.append(
            [step_label(s), str(s["concurrency"])]
            + ([fmt(s.get("voices"))] if voices else [])
            + [
                str(s["requests"]),
                str(s["ok"]),
                fmt(None if s["error_rate"] is None else 100 * s["error_rate"], "{:.1f}"),
                fmt(s["throughput_rps"], "{:.2f}"),
                fmt(lat.get("p50")),
                fmt(lat.get("p95")),
                fmt(lat.get("p99")),
                fmt(lat.get("max")),
                fmt(ttfb.get("p50")),
            ]
            + (
                [
                    fmt(ttfa.get("p50")),
                    fmt(ttfa.get("p95")),
                    fmt(stat(s, "ttfa_audible_ms", "p95")),
                    fmt(stat(s, "leading_silence_ms", "p95")),
                    fmt(None if under is None else 100 * under, "{:.1f}"),
                    fmt(s.get("rtfx"), "{:.2f}"),
                ]
                if streamed
                else []
            )
            + ([fmt(stat(s, "tail_ms", "p95"))] if streamed and tail else [])
            + (_speech_cells(s.get("speech"), metric) if metric else [])
            + (
                [fmt(figures(s.get("speech")).get(k), "{:.2f}") for k in ("similarity_mean", "mos_mean")]
                if metric and listen
                else []
            )
            + [str(s["retries"]), fmt(srv.get("gpu_util_mean")), fmt(srv.get("cpu_mean"))]
        )
    return rows


def _speech_cells(speech: SpeechStep | None, metric: str) -> list[str]:
    sp = figures(speech)
    mean = sp.get(f"{metric}_mean")
    shown = mean if isinstance(mean, (int, float)) else None  # a figure, or null
    return [fmt(None if shown is None else 100 * shown, "{:.1f}"), fmt(sp.get("judged")), fmt(sp.get("unintelligible"))]


def riva_rows(summary: Summary) -> list[list[str]]:
    """One row of :data:`RIVA_COLUMNS` per executed step of a streamed run (none otherwise)."""
    if not is_streamed(summary):
        return []
    rows = []
    for s in summary["steps"]:
        riva = s.get("riva")
        first = figures(riva.get("first_audio_ms") if riva else None)
        chunk = figures(riva.get("chunk_ms") if riva else None)
        rows.append(
            [step_label(s), str(s["concurrency"]), fmt(first.get("count"))]
            + [fmt(first.get(k), "{:.1f}") for k in ("avg", "p90", "p95", "p99")]
            + [fmt(chunk.get(k), "{:.1f}") for k in ("avg", "p90", "p95", "p99")]
            + [fmt(s.get("rtfx"), "{:.2f}")]
        )
    return rows


def peer_rows(summary: Summary) -> list[list[str]]:
    """One row of :data:`PEER_COLUMNS` per executed step of a streamed run (none otherwise)."""
    if not is_streamed(summary):
        return []
    rows = []
    for s in summary["steps"]:
        rtf = figures(s.get("audio_rtf"))
        rows.append(
            [step_label(s), str(s["concurrency"]), str(s["streams"]["counted"])]
            + [fmt(stat(s, key, q)) for key in ("preroll_ms", "smooth_start_ms") for q in ("p50", "p95")]
            + [fmt(rtf.get(q), "{:.2f}") for q in ("p50", "p95")]
            + [
                fmt(None if share is None else 100 * share, "{:.1f}")
                for share in (s.get("continuity_ok_rate"), s.get("c50"), s.get("c100"), s.get("c200"))
            ]
        )
    return rows


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]


def _slo_lines(summary: Summary) -> list[str]:
    """Per tested level (concurrency, offered rate or number of voices): the SLO verdict, and the spread
    between repeats."""
    sl, out = summary.get("slo"), []
    levels = summary.get("levels") or []
    voices, rate = is_voice_sweep(summary), is_open_loop(summary)
    key: Key = "voices" if voices else "rate" if rate else "concurrency"
    if sl:
        if voices:
            best = fmt(sl.get("max_voices"))
        elif rate:
            best = f"{fmt(sl['max_rate'], '{:g}')} req/s" if sl["max_rate"] is not None else "none"
        else:
            best = fmt(sl["max_concurrency"])
        per = "number of voices" if voices else "offered rate" if rate else "concurrency"
        out.append(f"SLO {sl['spec']}  (per {per}; repeats pooled; largest meeting it with every lower one: {best})")
        for v in sl["steps"]:
            word = {True: "pass", False: "FAIL", None: "inconclusive"}[v["pass"]]
            why = ", ".join(v["failed"]) or "; ".join(v["inconclusive"])
            out.append(f"  {v[key]:>5g}  {word}" + (f"  {why}" if why else ""))
    for lv in levels:
        sp = lv.get("spread")
        if not sp:
            continue
        parts = [
            f"{name} {fmt(bounds[0], spec)}-{fmt(bounds[1], spec)}{unit}"
            for bounds, name, spec, unit in (
                (sp.get("p50_ms"), "p50", "{:.0f}", " ms"),
                (sp.get("p95_ms"), "p95", "{:.0f}", " ms"),
                (sp.get("throughput_rps"), "rps", "{:.2f}", ""),
                (sp.get("ttfa_p95_ms"), "TTFA p95", "{:.0f}", " ms"),
            )
            if bounds is not None
        ]
        out.append(
            f"repeats at {lv[key]:g}{' req/s' if rate else ''} (steps {', '.join(map(str, lv['steps']))}): "
            + ", ".join(parts)
            + " (min-max over repeats; judged on the pooled records)"
        )
    return out


def _step_lines(summary: Summary) -> list[str]:
    """The step table, and a streamed run's Riva and peers' tables under it."""
    lines = _aligned([list(table_columns(summary))] + table_rows(summary))
    riva, peers = riva_rows(summary), peer_rows(summary)
    if riva:
        lines.append("riva_tts_perf_client's figures (ms; pNN = sorted[int(q n)]):")
        lines += _aligned([list(RIVA_COLUMNS)] + riva)
    if peers:
        lines.append("pre-roll and the peers' figures (ms; audio_rtf; % of the streams):")
        lines += _aligned([list(PEER_COLUMNS)] + peers)
    return lines


def format_table(summary: Summary, report: Path | None = None) -> str:
    """The step table (latencies in ms) and the verdict, as printed on the terminal."""
    lines = [f"run {summary['run']['run_id']}" + ("  (in progress)" if summary["run"]["in_progress"] else "")]
    knee = summary["knee"]
    open_loop = is_open_loop(summary)
    lines += _rate_lines(summary) if open_loop else _step_lines(summary)
    lines += open_lines(summary)
    if (summary["run"].get("options") or {}).get("tls_insecure"):
        lines.append("the target's TLS certificate was not verified (--tls-insecure)")
    bad = summary["bad_lines"]
    if bad["requests"] or bad["resources"]:
        lines.append(f"skipped bad lines: requests.jsonl {bad['requests']}, resources.jsonl {bad['resources']}")
    missing = summary["run"].get("audio_missing")
    if missing:
        lines.append(audio_missing_text(missing))
    if is_voice_sweep(summary):
        lines.append(
            "knee: none found"
            if knee["voices"] is None
            else f"knee: {knee['voices']} distinct voices at concurrency {knee['concurrency']} (methods "
            f"agreeing: {', '.join(knee['agree']) or 'none'})"
        )
    elif not open_loop:  # the open-loop lines name their knee in req/s
        lines.append(
            "knee: none found"
            if knee["concurrency"] is None
            else f"knee: {knee['concurrency']} (methods agreeing: {', '.join(knee['agree']) or 'none'})"
        )
    if knee.get("streamed"):
        what = "audible TTFA p95" if knee.get("ttfa_basis") == "ttfa_audible_ms" else "TTFA p95"
        lines.append(
            f"streamed: judged on underruns and {what} (floor {fmt(knee.get('ttfa_floor_ms'))} ms), not whole-body time"
        )
    lines += judge_lines(summary)
    lines += slice_lines(summary)
    lines += _barge_in_lines(summary.get("barge_in"))
    lines += _hangup_lines(summary.get("hangups"))
    d = summary["diagnosis"]
    lines.append(f"diagnosis: {d['kind']}")
    lines += [f"  - {e}" for e in d["evidence"]]
    lines += _slo_lines(summary)
    if is_voice_sweep(summary):
        lines.append(
            f"recommended voices: {fmt(summary.get('recommended_voices'))} (at concurrency "
            f"{fmt(summary['recommended_concurrency'])})  {summary['recommendation']}"
        )
    elif open_loop:
        lines.append(
            f"recommended rate: {fmt(summary.get('recommended_rate'), '{:g}')} req/s "
            f"(concurrency {fmt(summary['recommended_concurrency'])})  {summary['recommendation']}"
        )
    else:
        lines.append(f"recommended concurrency: {fmt(summary['recommended_concurrency'])}  {summary['recommendation']}")
    cap = summary.get("capacity") or {}
    if cap.get("at") and cap.get("text"):
        lines.append(f"capacity: {cap['text']}")
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
    return [head + ":"] + [f"  - {v}" for v in soak["drift"]]


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


def rate_table_rows(summary: Summary) -> list[list[str]]:
    """One row of :data:`RATE_COLUMNS` per executed step of an open-loop run."""
    rows = []
    for s in summary["steps"]:
        growth = s.get("growth")
        offered = (
            f"{s['offered_rps']:.3g} ({s['speed']:g}x)"
            if s.get("offered_rps") and s.get("speed")
            else fmt(s.get("rate"), "{:g}")
        )
        rows.append(
            [
                step_label(s),
                offered,
                fmt(s.get("throughput_rps"), "{:.2f}"),
                fmt(s.get("throughput_ratio"), "{:.2f}"),
                str(s["requests"]),
                str(s.get("dropped") or 0),
                fmt(None if s["error_rate"] is None else 100 * s["error_rate"], "{:.1f}"),
                fmt(stat(s, "inflight", "mean"), "{:.1f}"),
                fmt(stat(s, "inflight", "max")),
                fmt(stat(s, "sched_wait_ms", "p50")),
                fmt(stat(s, "sched_wait_ms", "p95")),
                fmt(stat(s, "sched_wait_ms", "p99")),
                fmt(stat(s, "latency_ms", "p95")),
                fmt(stat(s, "send_lag_ms", "p95"), "{:.1f}"),
                {True: "yes", False: "no", None: "-"}[growth.get("growing") if growth else None],
                str(s["retries"]),
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


def _rate_lines(summary: Summary) -> list[str]:
    """The terminal's step table and verdict of an open-loop run."""
    lines = _aligned([list(RATE_COLUMNS)] + rate_table_rows(summary))
    knee = summary["knee"]
    lines.append(
        "knee: none found"
        if knee["rate"] is None
        else f"knee: {knee['rate']:g} req/s (methods agreeing: {', '.join(knee['agree']) or 'none'})"
    )
    lines.append(f"dropped arrivals: {summary.get('dropped') or 0}")
    return lines
