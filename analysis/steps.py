"""Per-step aggregates from the raw attempt records and resource samples.

Definitions used throughout the dashboard:

- Only settled attempts count (``settled`` false = inside the step's warm-up window), and none
  the run's end cut (error ``cut_by_run_end``: the client abandoned them when its drain ran out,
  so they say nothing of the server); ``cut_by_run_end`` counts those per step.
- A *request* is a logical request: its final attempt.  ``ok`` and ``failed`` count requests,
  ``attempts`` counts every attempt (retries included).
- **Latency** (``latency_ms``) is ``wait_ms`` (``t2 - t0``: sending the request until the body
  is fully read, i.e. server plus network, without the client's write) of the successful final
  attempts.  ``e2e_ms`` is the logical end-to-end latency of successful requests: the first
  attempt's ``t0`` to the final attempt's ``t3`` (or ``t2``), so it includes failed attempts,
  backoff sleeps and the client's write.
- A step's **window** is its own span from ``run.json``: from its start plus the settle time
  (the step's own ``settle_s`` where its entry has one, else the run's) to its end.  Only when ``run.json`` does not
  give the step's start (run
  directories without a usable ``run.json``) is it taken from the records: the earliest settled
  ``t0`` to the latest completion of the step's settled attempts.  A step still running (no end
  yet) ends at the next step's start, or else at the latest completion seen so far.
- **Throughput** (``throughput_rps``) is the number of successful final attempts that
  *finished* inside the window (``tend``: ``t3``, else ``t2``), whichever step sent them,
  divided by the window's length; ``completed_rps`` counts every final attempt the same way,
  ``audio_s_per_s`` their audio, ``chars_per_s`` their text (:mod:`analysis.capacity`).  Users run back to back
  across steps, so completions inside
  the window are the work done in it; counting only the step's settled requests over a window
  stretched to their last completion would understate it by about one latency at each end.
- **Little's law** (``little``): the mean number of busy users over the window is the sum, over
  all logical requests (first attempt's ``t0`` to the final attempt's ``tend``, so backoff
  sleeps count as busy), of the time each overlaps the window, divided by its length; the ratio
  to the step's concurrency should be about 1.  Where each user keeps ``contexts`` utterances
  in flight (``--contexts``) and waits ``think_s`` between them (``--think-time``), it is
  compared with concurrency x contexts x L / (L + think), L the step's mean request time
  (``expected_concurrency``).  Attempts in flight when a run stops leave no
  record, so for the last step (and a step still running) the window Little's law uses ends one
  longest request earlier.
- Resources are aggregated over the window, **per host first**: the saturation figures
  (``cpu_mean``, ``busiest_core_mean``, ``proc_cpu_mean``, ``gpu_util_mean`` and their maxima)
  are the highest of the hosts' figures, so one saturated host is not averaged away by idle
  ones; ``by_host`` keeps each host's own.  The server's own series (``metrics``,
  ``server_roles``: queue depth, running, batch size, KV cache) are aggregated over all server
  samples in the window, see :mod:`analysis.server_metrics`.
- **Streams** (successful final attempts that *finished before the step ended*): a stream still
  playing when the next step's users joined heard part of the next step's load (the server
  shares its capacity among more streams at once), which would put the next step's underruns
  on this one; ``streams`` gives {``counted``, ``cut_by_step_end``} (left out for that reason).
  A step without a known end keeps them all.  In a streamed run the step's latency figures
  (``latency_ms``, ``ttfb_ms``, ``e2e_ms``, ``rtf`` …) count the same streams, so that every
  figure of a step describes one set of requests.  ``ttfa_ms`` is the distribution of time to the
  first audio sample; ``underrun_rate`` is the share of those with an underrun figure that ran
  dry at least once (null when none has a figure: not streamed, or audio the client cannot
  time); ``underrun_ms`` and ``gap_max_ms`` give {count, mean, p95, max} over the same attempts.
  Where the text went in pieces (sessions), ``tail_ms`` is the distribution of the wait from the
  end of the text (its final flush) to the last audio, over the same attempts.
  ``streamed`` says whether the run read its responses as streams.
- **Riva's figures** (``riva``, streamed runs): the figures NVIDIA's ``riva_tts_perf_client``
  prints, by its definitions, over the same streams: ``first_audio_ms`` (its time to the first
  audio message, here ``ttfa_ms``) and ``chunk_ms`` (the gap between consecutive audio
  arrivals of a stream, the first excluded), each pooled over the step's streams as
  {count, avg, p90, p95, p99} with its percentile rule: the mean, and ``sorted[int(q * n)]``
  (0-based, no interpolation), so the numbers sit beside the perf client's.  ``rtfx`` is the
  step's audio throughput, seconds of audio delivered per wall second: ``audio_s_per_s``, by
  the name the perf client prints it under (its "Throughput (RTF)").
- **Pre-roll** (``preroll_ms``, over the same streams): the smallest start-up buffer with which a
  player starting at the stream's first audio and playing at 1x would never have run dry, each
  stream's figure as its record gives it (:func:`analysis.playback.preroll`); ``smooth_start_ms``
  is each stream's ``ttfa_ms`` plus it, the wait until audio that plays without a gap. A
  listener's buffer set to the p95 pre-roll plays 95 % of the streams without a stall.
- **The peers' figures**, each as the peer's benchmark defines it (docs/streaming.md cites the
  lines): ``audio_rtf`` is vLLM-Omni's, the request's time to its last byte over its audio's
  length, as {count, p50, p95} of ``rtf`` over the requests the latency figures describe;
  ``continuity_ok_rate`` is vLLM-Omni's continuity OK rate, the share of the streams whose
  worst-case underrun (the pre-roll) is at most :data:`CONTINUITY_OK_MS` (a stream of one
  arrival has none and passes); ``c50``, ``c100`` and ``c200`` are sglang-omni's, the share of
  the streams of two or more audio arrivals whose longest single stall with no buffer
  (``stall_max_ms``, :func:`analysis.playback.stall_max`) is at most 50, 100 and 200 ms. Each
  is a share from 0 to 1 (sglang-omni prints a percentage), null with no stream to judge.
- **Audio integrity** (``integrity``): the same text should give about the same audio at every
  step.  An answer's length here is its audio from the first sound on (``audio_s`` less its
  ``leading_silence_ms`` where the signal checks measured one: silence put first is its own
  figure, not a longer answer).  The reference is each text's median length over the
  successful settled attempts heard whole at the lowest concurrency in the records; an attempt
  whose length differs from its text's reference by more than max(``INTEGRITY_REL`` (15%) of
  it, ``INTEGRITY_ABS_S`` (0.1 s)) is a mismatch.  ``checked`` counts successful attempts with
  an ``audio_s`` and a reference, ``mismatched`` those off, ``rate`` their share; ``examples``
  lists up to ``INTEGRITY_EXAMPLES`` as {text_id, expected_s, got_s}.  Texts never sent at the
  lowest concurrency are not checked, nor texts past the reader's label cap (they share one
  label).
- **Runaways and truncated answers** (``runaway_rate``, ``truncated_rate``, over the step's
  requests): each answer heard whole is judged against its own text's length, the integrity
  check's reference, or for a text the lowest step did not send its median over the run: at
  least :data:`audio.signal.SELF_X` (2x) as long is a runaway, half as long or less truncated,
  either only when at least :data:`audio.signal.SELF_MIN_S` (0.5 s) off.  A text the run heard
  once (or past the label cap) has no length of its own: it is judged by its duration per
  character against its language's median over the run, over
  :data:`audio.signal.HEARD_ONCE_X` (5x) or under a fifth (:func:`length_flags`).  So a text
  that speaks its digits is no runaway, and answers that run on at every high step are, though
  they then make most of the run's answers.
- A step **still open** (the live view: its end not in ``run.json`` yet, the run's last step)
  ends at the latest completion recorded so far, and its figures are withheld (None) where
  that part of its window cannot give them yet (:func:`hold_open`): its rates while it is
  settling or fewer than ``OPEN_MIN_COUNT`` requests have finished in its window, and each
  distribution with fewer than ``OPEN_MIN_COUNT`` values. ``open`` says what it has and
  why a figure is missing; the knee, the diagnosis, the recommendation and the SLO's verdicts
  use closed steps only (:mod:`analysis.summary`).
- Percentiles are exact, over the raw values (numpy's linear interpolation). A live reader's
  attempts (the live view) keep each step's sorted values from one refresh to the next
  (:mod:`analysis.incremental`), so a refresh sorts only what is new; the figures are the same.
- **Barge-in** (``--barge-in``): a cancelled utterance (``cancel_ms`` set) is ok, not failed,
  and its stream figures (TTFA, underruns, all before its cancel) count; but the figures that
  describe whole utterances count only the ones heard to the end: latency, end-to-end, RTF,
  throughput, audio per second, tail, integrity. ``cancelled`` counts a step's cancelled
  requests and ``cancel_to_quiet_ms`` is their distribution of the cancel to quiet.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from tts_knee.audio import signal
from tts_knee.runformat.fields import NotRequired, TypedDict
from tts_knee.runformat.metric_roles import ServerNames
from tts_knee.runformat.options import CUT_BY_RUN_END
from tts_knee.runformat.reader import OTHER_LABEL, Attempts
from tts_knee.runformat.schema import Arrivals
from tts_knee.runformat.summary import (
    Dist,
    Error,
    HostAggregate,
    Integrity,
    IntegrityExample,
    Little,
    MemoryCreep,
    OpenStep,
    ResourceAggregate,
    RivaStats,
    Stage,
    StepSummary,
    Tail,
    Tier,
    Window,
)

from . import capacity, server_metrics
from .confidence import percentile_cis
from .incremental import percentiles, sorted_values

FALLBACK_S = 5.0  # GPU memory "fall-back" level: the minimum in this many seconds after a step
THROTTLE_STATUSES = (429, 503, 1013)  # 1013: a WebSocket session closed "try again later"
PCTS = (50, 90, 95, 99)
RIVA_QUANTILES = (0.90, 0.95, 0.99)  # riva_tts_perf_client's, taken as sorted[int(q * n)]
CONTINUITY_OK_MS = 100.0  # vLLM-Omni's default continuity threshold: its worst-case underrun at most this
CONTINUITY_LIMITS_MS = (50.0, 100.0, 200.0)  # sglang-omni's C50, C100, C200
INTEGRITY_REL = 0.15  # an audio length this far off its text's reference (relative) ...
INTEGRITY_ABS_S = 0.1  # ... and at least this far (seconds) is a mismatch
INTEGRITY_EXAMPLES = 5
CLIPPED_SHARE = 0.001  # an answer with more of its samples at full scale than this is clipped
#: An open step's rates need this many requests finished in the elapsed part of its window, and
#: each of its distributions this many values: a rate over three completions read 34 req/s where
#: the step's whole window gave 17.7. Fewer are withheld (None), never shown.
OPEN_MIN_COUNT = 20
#: The figures per second of the window, withheld together.
RATE_FIGURES = (
    "throughput_rps",
    "completed_rps",
    "audio_s_per_s",
    "rtfx",
    "chars_per_s",
    "utterances_per_hour",
    "throughput_ratio",
)


def dist(values: np.ndarray, sorted_v: np.ndarray | None = None) -> Dist | None:
    """{count, mean, p50, p90, p95, p99, max} of the finite values, or None if there are none;
    ``sorted_v``: the same values sorted, when kept (the percentiles come from them)."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    p50, p90, p95, p99 = np.percentile(finite, PCTS) if sorted_v is None else percentiles(sorted_v, PCTS)
    return {
        "count": int(len(finite)),
        "mean": float(finite.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(finite.max()),
    }


def riva_stats(values: np.ndarray) -> RivaStats | None:
    """{count, avg, p90, p95, p99} of the finite values as riva_tts_perf_client computes them
    (see the module doc), or None if there are none."""
    ordered = np.sort(values[np.isfinite(values)])
    if not len(ordered):
        return None
    p90, p95, p99 = (float(ordered[int(quantile * len(ordered))]) for quantile in RIVA_QUANTILES)
    return {"count": int(len(ordered)), "avg": float(ordered.mean()), "p90": p90, "p95": p95, "p99": p99}


def _tail(values: np.ndarray, sorted_v: np.ndarray | None = None) -> Tail | None:
    """{count, mean, p95, max} of the finite values, or None if there are none."""
    whole = dist(values, sorted_v)
    if whole is None:
        return None
    return {"count": whole["count"], "mean": whole["mean"], "p95": whole["p95"], "max": whole["max"]}


def spoken_s(attempts: Attempts) -> np.ndarray:
    """Per attempt, the seconds of its audio from the first sound on: ``audio_s`` less its
    ``leading_silence_ms`` where the signal checks measured one, else ``audio_s`` (see the module
    doc); once per set of columns."""
    got: np.ndarray | None = attempts.memo.get("spoken_s")
    if got is None or len(got) != len(attempts):
        lead = attempts["leading_silence_ms"]
        got = attempts.memo["spoken_s"] = np.where(
            np.isfinite(lead), attempts["audio_s"] - lead / 1000.0, attempts["audio_s"]
        )
    return got


def _heard_whole(attempts: Attempts) -> np.ndarray:
    """The successful settled final attempts with a length and a text, not interrupted: the ones
    a text's reference length comes from."""
    heard: np.ndarray = (
        attempts["ok"]
        & attempts["final"]
        & attempts["settled"]
        & np.isfinite(attempts["audio_s"])
        & (attempts["text"] >= 0)
        & (attempts["concurrency"] >= 1)
        & ~np.isfinite(attempts["cancel_ms"])
    )
    return heard


def audio_reference(attempts: Attempts) -> np.ndarray:
    """Per text code, the median length (:func:`spoken_s`) of the successful settled attempts at
    the lowest concurrency in the records (NaN for texts not sent there); computed once per set
    of columns (a live reader's attempts keep each text's sorted lengths from one refresh to the
    next)."""
    kept: np.ndarray | None = attempts.memo.get("audio_reference")
    if kept is not None:
        return kept
    ref = np.full(len(attempts.texts), np.nan)
    good = _heard_whole(attempts)
    if good.any():
        lowest = attempts["concurrency"][good].min()
        low = good & (attempts["concurrency"] == lowest)
        if attempts.lasting is None:
            frame = pd.DataFrame({"text": attempts["text"][low], "audio_s": spoken_s(attempts)[low]})
            med = frame.groupby("text")["audio_s"].median()
            ref[med.index.to_numpy()] = med.to_numpy()
        else:
            for code, lengths in _lengths_by_text(attempts, low, int(lowest)).items():
                ref[code] = float(percentiles(lengths, (50,))[0])
    if OTHER_LABEL in attempts.texts:  # texts past the label cap share one code: no single reference
        ref[attempts.texts.index(OTHER_LABEL)] = np.nan
    attempts.memo["audio_reference"] = ref
    return ref


def _lengths_by_text(attempts: Attempts, low: np.ndarray, lowest: int) -> dict[int, np.ndarray]:
    """A live reader's: each text's sorted ``audio_s`` over the rows ``low`` (at concurrency
    ``lowest``), merged with the rows read since the last refresh."""
    assert attempts.lasting is not None  # only a live reader's attempts keep lengths from one refresh to the next
    key = ("audio lengths", lowest)
    n_rows = len(attempts)
    got = attempts.lasting.get(key)
    read: int
    by_text: dict[int, np.ndarray]
    read, by_text = got if got is not None and got[0] <= n_rows else (0, {})
    new_rows = read + np.flatnonzero(low[read:])
    codes, lengths = attempts["text"][new_rows], spoken_s(attempts)[new_rows]
    order = np.lexsort((lengths, codes))
    codes, lengths = codes[order], lengths[order]
    for part_codes, part in zip(
        np.split(codes, np.flatnonzero(np.diff(codes)) + 1), np.split(lengths, np.flatnonzero(np.diff(codes)) + 1)
    ):
        if len(part):
            code = int(part_codes[0])
            old = by_text.get(code)
            by_text[code] = part if old is None else np.insert(old, np.searchsorted(old, part), part)
    attempts.lasting[key] = (n_rows, by_text)
    return by_text


def integrity(attempts: Attempts, rows: np.ndarray, step: int | None = None) -> Integrity:
    """Audio length of the successful attempts ``rows`` (a mask) against their text's reference
    (see the module doc). A live reader's attempts keep step ``step``'s counts and check only
    the rows read since, while the reference stays the same."""
    ref = audio_reference(attempts)
    n_rows = len(attempts)
    key = ("integrity", step)
    kept = attempts.lasting.get(key) if attempts.lasting is not None and step is not None else None
    start: int
    checked: int
    mismatched: int
    examples: list[IntegrityExample]
    if kept is not None and kept[0] <= n_rows and np.array_equal(kept[1], ref, equal_nan=True):
        start, checked, mismatched, examples = kept[0], kept[2], kept[3], list(kept[4])
    else:
        start, checked, mismatched, examples = 0, 0, 0, []
    unread = slice(start, n_rows)
    candidates = start + np.flatnonzero(
        rows[unread] & np.isfinite(attempts["audio_s"][unread]) & (attempts["text"][unread] >= 0)
    )
    expected = ref[attempts["text"][candidates]] if len(ref) else np.full(len(candidates), np.nan)
    has_reference = np.isfinite(expected)
    compared, expected = candidates[has_reference], expected[has_reference]
    got = spoken_s(attempts)[compared]
    off = np.abs(got - expected) > np.maximum(INTEGRITY_REL * expected, INTEGRITY_ABS_S)
    off_rows = compared[off]
    room = INTEGRITY_EXAMPLES - len(examples)
    examples += [
        {
            "text_id": attempts.texts[attempts["text"][row]],
            "expected_s": round(float(want), 3),
            "got_s": round(float(had), 3),
        }
        for row, want, had in zip(off_rows[:room], expected[off][:room], got[off][:room])
    ]
    checked, mismatched = checked + len(compared), mismatched + len(off_rows)
    if attempts.lasting is not None and step is not None:
        attempts.lasting[key] = (n_rows, ref, checked, mismatched, examples)
    return {
        "checked": int(checked),
        "mismatched": int(mismatched),
        "rate": mismatched / checked if checked else None,
        "examples": examples,
    }


@dataclass(frozen=True)
class _Figures:
    """One step's distributions of the attempts' columns. A live reader's attempts keep each
    one's sorted values under ``key`` (what the step's masks depend on) and the column's and
    the mask's names."""

    attempts: Attempts
    key: tuple[Hashable, ...]

    def sorted(self, column: str, mask: np.ndarray, mask_name: str) -> np.ndarray | None:
        """The finite values of ``column`` over ``mask``, sorted, where a live reader keeps them."""
        return sorted_values(self.attempts, (*self.key, column, mask_name), self.attempts[column], mask)

    def dist(self, column: str, mask: np.ndarray, mask_name: str) -> Dist | None:
        """:func:`dist` of ``column`` over ``mask``."""
        kept = self.sorted(column, mask, mask_name)
        return dist(self.attempts[column][mask], kept)

    def tail(self, column: str, mask: np.ndarray, mask_name: str) -> Tail | None:
        """:func:`_tail` of ``column`` over ``mask``."""
        kept = self.sorted(column, mask, mask_name)
        return _tail(self.attempts[column][mask], kept)


def signal_stats(out: StepSummary, settled_requests: np.ndarray, timed_requests: np.ndarray, figures: _Figures) -> None:
    """The step's signal figures (:mod:`audio.signal`), set in ``out``: the distributions of
    leading and trailing silence and of audible TTFA over the requests the latency figures
    describe (``timed_requests``), and, over its requests (``settled_requests``, final attempts), the shares that
    were silent (failed with :data:`~audio.signal.SILENT`), ran away or were truncated
    (:func:`length_flags`), or clipped (any sample at full scale in more than
    :data:`CLIPPED_SHARE` of it)."""
    attempts = figures.attempts
    runaway, truncated = length_flags(attempts)
    silent_code = attempts.errors.index(signal.SILENT) if signal.SILENT in attempts.errors else -2
    n_requests = int(settled_requests.sum())
    clip_checked = timed_requests & np.isfinite(attempts["clipped_share"])

    def share(mask: np.ndarray) -> float | None:
        return int(mask.sum()) / n_requests if n_requests else None

    out["leading_silence_ms"] = figures.dist("leading_silence_ms", timed_requests, "ok_timed")
    out["trailing_silence_ms"] = figures.dist("trailing_silence_ms", timed_requests, "ok_timed")
    out["ttfa_audible_ms"] = figures.dist("ttfa_audible_ms", timed_requests, "ok_timed")
    out["silent_rate"] = share(settled_requests & (attempts["error"] == silent_code))
    out["runaway_rate"] = share(settled_requests & runaway)
    out["truncated_rate"] = share(settled_requests & truncated)
    out["clipped_rate"] = (
        int((clip_checked & (attempts["clipped_share"] > CLIPPED_SHARE)).sum()) / int(clip_checked.sum())
        if clip_checked.any()
        else None
    )


def text_lengths(attempts: Attempts) -> tuple[np.ndarray, np.ndarray]:
    """Per text code, ``(reference, heard)``: the text's own length, :func:`audio_reference`'s
    (its median at the lowest step), or where the lowest step did not send it its median over
    the run; and how many times the run heard it whole (:func:`_heard_whole`; 0 for the label
    cap's shared code, which has no single length). Once per set of columns."""
    got: tuple[np.ndarray, np.ndarray, int] | None = attempts.memo.get("text_lengths")
    if got is not None and got[2] == len(attempts):
        return got[0], got[1]
    good = _heard_whole(attempts)
    codes = attempts["text"][good]
    heard = (
        np.bincount(codes, minlength=len(attempts.texts))[: len(attempts.texts)]
        if len(attempts.texts)
        else np.zeros(0, dtype=int)
    )
    if OTHER_LABEL in attempts.texts:
        heard[attempts.texts.index(OTHER_LABEL)] = 0
    ref = audio_reference(attempts).copy()
    missing = np.flatnonzero(np.isnan(ref) & (heard >= 2))
    if len(missing):
        keep = np.isin(codes, missing)
        frame = pd.DataFrame({"text": codes[keep], "s": spoken_s(attempts)[good][keep]})
        med = frame.groupby("text")["s"].median()
        ref[med.index.to_numpy()] = med.to_numpy()
    attempts.memo["text_lengths"] = (ref, heard, len(attempts))
    return ref, heard


def length_flags(attempts: Attempts) -> tuple[np.ndarray, np.ndarray]:
    """``(runaway, truncated)`` masks over the attempts: each successful final attempt heard whole
    against its text's own length (:func:`text_lengths`) where the run heard the text more than
    once, else by its pace against its language's (:func:`audio.signal.pace_outliers`); see the
    module doc. Once per set of columns."""
    kept: tuple[np.ndarray, np.ndarray] | None = attempts.memo.get("length_flags")
    if kept is not None and len(kept[0]) == len(attempts):
        return kept
    ref, heard = text_lengths(attempts)
    spoken = spoken_s(attempts)
    code = attempts["text"]
    whole = attempts["ok"] & attempts["final"] & np.isfinite(spoken) & ~np.isfinite(attempts["cancel_ms"])
    expected = np.full(len(attempts), np.nan)
    known = (code >= 0) & (code < len(ref))
    if known.any():
        own_ref = ref[code[known]]
        expected[known] = np.where(heard[code[known]] >= 2, own_ref, np.nan)
    own = whole & np.isfinite(expected) & (expected > 0)
    # run-long columns: each temporary made in place, and let go before the next
    off = spoken - expected
    off = np.abs(off, out=off) >= signal.SELF_MIN_S
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.divide(spoken, expected, out=expected)
    runaway = own & off & (ratio >= signal.SELF_X)
    truncated = own & off & (ratio <= 1 / signal.SELF_X)
    del ratio, expected, off
    pace = np.maximum(attempts["text_len"], 1)
    np.divide(spoken, pace, out=pace)
    pace[~(whole & (attempts["text_len"] > 0))] = np.nan
    fast, slow = signal.pace_outliers(pace, attempts["language"])
    flags = attempts.memo["length_flags"] = (runaway | (fast & ~own), truncated | (slow & ~own))
    return flags


def _stream_end(window: Window) -> float | None:
    """The end a step's streams must have finished by to count (see the module doc), or None."""
    return None if window["open"] or window["source"] != "run.json" else window["end"]


def _cut_by_step_end(attempts: Attempts, rows: np.ndarray, end: float | None) -> np.ndarray:
    """The ``cut_by_step_end`` column: attempts that finished after the end of the step they were
    sent in.  Each step marks its own rows (``rows``) as it is summarised, so a summary of several
    steps pooled later (their records relabelled) still leaves those attempts out."""
    cut = attempts.cols.get("cut_by_step_end")
    if cut is None:
        cut = attempts.cols["cut_by_step_end"] = np.zeros(len(attempts), dtype=bool)
    if end is not None:
        cut[rows & (attempts["tend"] > end)] = True  # an attempt without a known end counts as inside
    return cut


def _stream_stats(
    out: StepSummary,
    figures: _Figures,
    ok_requests: np.ndarray,
    heard_requests: np.ndarray,
    streamed: bool,
    cut_by_step_end: np.ndarray,
) -> None:
    """The stream figures of one step's successful requests, set in ``out``, leaving out those
    ``cut_by_step_end`` (see the module doc); the tail over the ``heard_requests`` (heard to the end)."""
    attempts = figures.attempts
    n_cut, streams = int((ok_requests & cut_by_step_end).sum()), ok_requests & ~cut_by_step_end
    underruns = attempts["underruns"][streams]
    underruns = underruns[np.isfinite(underruns)]
    out["streamed"] = streamed
    out["streams"] = {"counted": int(streams.sum()), "cut_by_step_end": n_cut}
    out["ttfa_ms"] = figures.dist("ttfa_ms", streams, "streams")
    out["underrun_rate"] = float((underruns >= 1).mean()) if len(underruns) else None
    out["underrun_streams"] = int((underruns >= 1).sum())
    out["underrun_ms"] = figures.tail("underrun_ms", streams, "streams")
    out["gap_max_ms"] = figures.tail("gap_max_ms", streams, "streams")
    out["chunks"] = figures.tail("chunks", streams, "streams")
    _peer_stats(out, figures, streams)
    out["tail_ms"] = figures.dist("tail_ms", heard_requests & ~cut_by_step_end, "heard")
    out["riva"] = (
        {"first_audio_ms": riva_stats(attempts["ttfa_ms"][streams]), "chunk_ms": riva_stats(attempts.gaps_of(streams))}
        if streamed
        else None
    )


def _share_within(values: np.ndarray, limit_ms: float) -> float | None:
    """The share of the finite ``values`` at or below ``limit_ms``; None when there are none."""
    known = values[np.isfinite(values)]
    return float((known <= limit_ms).mean()) if len(known) else None


def _peer_stats(out: StepSummary, figures: _Figures, streams: np.ndarray) -> None:
    """The pre-roll, the smooth start and the peers' figures of a step's ``streams``, set in
    ``out`` (see the module doc); ``audio_rtf`` is ``rtf``'s, which ``out`` holds already."""
    attempts = figures.attempts
    out["preroll_ms"] = figures.dist("preroll_ms", streams, "streams")
    out["smooth_start_ms"] = dist(attempts["ttfa_ms"][streams] + attempts["preroll_ms"][streams])
    rtf = out["rtf"]
    out["audio_rtf"] = None if rtf is None else {"count": rtf["count"], "p50": rtf["p50"], "p95": rtf["p95"]}
    out["continuity_ok_rate"] = _share_within(attempts["preroll_ms"][streams], CONTINUITY_OK_MS)
    longest = attempts["stall_max_ms"][streams]
    out["c50"], out["c100"], out["c200"] = (_share_within(longest, limit) for limit in CONTINUITY_LIMITS_MS)


def _mean_max(series: pd.Series) -> tuple[float | None, float | None]:
    known = series.dropna()
    if not len(known):
        return None, None
    return float(known.mean()), float(known.max())


def _host_aggregate(samples: pd.DataFrame) -> HostAggregate:
    """Mean/max figures of one host's samples."""
    cpu_mean, cpu_max = _mean_max(samples["cpu_percent"])
    busiest_core_mean, busiest_core_max = _mean_max(samples["cpu_max_core_percent"])
    proc_cpu_mean, proc_cpu_max = _mean_max(samples["proc_cpu_percent"])
    gpu_util_mean, gpu_util_max = _mean_max(samples["gpu_util_percent"])
    used = samples["gpu_mem_used_bytes"].dropna()
    total = samples["gpu_mem_total_bytes"].dropna()
    return {
        "samples": int(len(samples)),
        "cpu_mean": cpu_mean,
        "cpu_max": cpu_max,
        "busiest_core_mean": busiest_core_mean,
        "busiest_core_max": busiest_core_max,
        "proc_cpu_mean": proc_cpu_mean,
        "proc_cpu_max": proc_cpu_max,
        "gpu_util_mean": gpu_util_mean,
        "gpu_util_max": gpu_util_max,
        "gpu_mem_peak_bytes": float(used.max()) if len(used) else None,
        "gpu_mem_total_bytes": float(total.max()) if len(total) else None,
        "gpu_power_mean_w": _mean_max(samples["gpu_power_w"])[0],
    }


#: The figures a role takes as the highest of its hosts'.
HostFigure = Literal[
    "cpu_mean",
    "cpu_max",
    "busiest_core_mean",
    "busiest_core_max",
    "proc_cpu_mean",
    "proc_cpu_max",
    "gpu_util_mean",
    "gpu_util_max",
    "gpu_mem_peak_bytes",
    "gpu_mem_total_bytes",
    "gpu_power_mean_w",
]
_HOST_MAX: tuple[HostFigure, ...] = get_args(HostFigure)


def resource_aggregate(
    res: pd.DataFrame, role: str, start: float | None, end: float | None, names: ServerNames | None = None
) -> ResourceAggregate | None:
    """One role's samples over [start, end], per host (``by_host``) and as the highest of the
    hosts' figures (see the module doc); None when there are no samples. ``names``: what
    ``--server-role`` and ``--server-stage-label`` say of the server's series."""
    if not len(res) or start is None or end is None:
        return None
    inside = res[(res["role"] == role) & (res["ts"] >= start) & (res["ts"] <= end)]
    if not len(inside):
        return None
    by_host = {str(host): _host_aggregate(samples) for host, samples in inside.groupby("host", sort=True)}
    # by_host goes last, after the server's own figures (summary.json's order): set below
    out: ResourceAggregate = {"samples": int(len(inside)), "hosts": sorted(by_host)}  # type: ignore[typeddict-item]
    for figure in _HOST_MAX:
        values = [found for host_figures in by_host.values() if (found := host_figures[figure]) is not None]
        out[figure] = max(values) if values else None
    if role == "server":
        # Shown as evidence only: this is already the next step when steps follow each other.
        after = res[(res["role"] == role) & (res["ts"] > end) & (res["ts"] <= end + FALLBACK_S)]
        fallback = [
            float(samples["gpu_mem_used_bytes"].dropna().min())
            for _, samples in after.groupby("host")
            if samples["gpu_mem_used_bytes"].notna().any()
        ]
        out["gpu_mem_fallback_bytes"] = max(fallback) if fallback else None
        out["metrics"], out["metrics_left_out"], out["server_roles"] = server_metrics.aggregate(
            inside, names.roles if names else None
        )
        staged = server_metrics.stages(inside, names)
        if staged is not None:  # a server of one stage reads as before: none of these
            out["stage_label"], out["stages"] = staged.label, staged.stages
            if staged.left_out:
                out["stages_left_out"] = staged.left_out
    out["by_host"] = by_host
    return out


def spans(attempts: Attempts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mask, start, end) of the logical requests whose final attempt has a known end: ``mask``
    selects those final attempts; a span runs from the first attempt's ``t0`` (else the final
    attempt's own) to the final attempt's ``tend``; computed once per set of columns."""
    got: tuple[np.ndarray, np.ndarray, np.ndarray] | None = attempts.memo.get("spans")
    if got is None:
        got = attempts.memo["spans"] = _spans(attempts)
    return got


def _spans(attempts: Attempts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    final_ended = attempts["final"] & np.isfinite(attempts["tend"])
    end = attempts["tend"][final_ended]
    start = attempts["e2e_ms"][final_ended]  # run-long columns: worked in place
    start /= 1000.0
    np.subtract(end, start, out=start)  # finite where e2e is (end is)
    np.copyto(start, attempts["t0"][final_ended], where=~np.isfinite(start))
    np.copyto(start, end, where=~np.isfinite(start))
    return final_ended, start, end


def run_end_cut(attempts: Attempts) -> np.ndarray:
    """The attempts the run's end cut (error ``cut_by_run_end``), as a mask."""
    cut: np.ndarray | None = attempts.memo.get("run_end_cut")
    if cut is None or len(cut) != len(attempts):
        code = attempts.errors.index(CUT_BY_RUN_END) if CUT_BY_RUN_END in attempts.errors else -2
        cut = attempts.memo["run_end_cut"] = attempts["error"] == code
    return cut


def _by_label(waits: np.ndarray, codes: np.ndarray, names: list[str]) -> dict[str, Tier]:
    """{label: {count, p50, p95}} of ``waits`` grouped by their label ``codes`` (-1: none), in
    the labels' order; one sort, however many labels (a voice sweep has hundreds)."""
    keep = (codes >= 0) & np.isfinite(waits)
    codes, waits = codes[keep], waits[keep]
    order = np.argsort(codes, kind="stable")
    codes, waits = codes[order], waits[order]
    bounds = np.flatnonzero(np.diff(codes)) + 1
    out: dict[str, Tier] = {}
    for part, values in zip(np.split(codes, bounds), np.split(waits, bounds)):
        label_dist = dist(values) if len(values) else None
        if label_dist:
            out[names[part[0]]] = {"count": label_dist["count"], "p50": label_dist["p50"], "p95": label_dist["p95"]}
    return out


def step_window(
    attempts: Attempts, step: Mapping[str, Any], settle_s: float | None = None, next_start: float | None = None
) -> Window:
    """The step's window (see the module doc): ``{start, end, duration_s, source, settle_s,
    open}``; ``open`` is true when the step's end is not known yet. Its ``completions`` and
    ``ok_completions`` are :func:`step_stats`'s to count (None here)."""
    in_step = attempts["step"] == step["step"]
    start: float | None = step.get("start")
    end: float | None = step.get("end")
    settle: float | None
    is_open = False
    if start is not None:
        # the step's own settle time where run.json gives one (a step that lowers the
        # concurrency settles while the previous step's requests drain), else the run's
        settle = step.get("settle_s", settle_s)
        if settle is None:  # run.json without settle_s: where the records start being settled
            settled_sent = in_step & attempts["settled"] & np.isfinite(attempts["t0"])
            settle = (
                max(0.0, float(attempts["t0"][settled_sent].min()) - start)
                if (in_step & ~attempts["settled"]).any() and settled_sent.any()
                else 0.0
            )
        window_start: float | None = start + settle
        source = "run.json"
        if end is None:
            end = next_start
        if end is None:
            has_end = np.isfinite(attempts["tend"])
            end = float(attempts["tend"][has_end].max()) if has_end.any() else None
            is_open = True
        window_end = end
    else:
        settled_here = in_step & attempts["settled"]
        sent, done = attempts["t0"][settled_here], attempts["tend"][settled_here]
        window_start = float(np.nanmin(sent)) if np.isfinite(sent).any() else None
        window_end = float(np.nanmax(done)) if np.isfinite(done).any() else None
        settle, source = None, "records"
    duration = (
        (window_end - window_start)
        if window_start is not None and window_end is not None and window_end > window_start
        else None
    )
    return {
        "start": window_start,
        "end": window_end,
        "duration_s": duration,
        "source": source,
        "settle_s": settle,
        "open": is_open,
        "completions": None,
        "ok_completions": None,
    }


def _little(
    attempts: Attempts,
    step: Mapping[str, Any],
    window_start: float,
    window_end: float,
    trim_tail: bool,
    contexts: int = 1,
    think_s: float = 0.0,
) -> Little | None:
    """Mean busy users over [window_start, window_end] against what the step's users should
    keep busy (see the module doc)."""
    ended, start, end = spans(attempts)
    own = (end - start)[attempts["step"][ended] == step["step"]]
    if trim_tail:  # requests in flight when the run stopped (or still running) have no record
        window_end = window_end - (float(own.max()) if len(own) else 0.0)
    if not window_end > window_start or not step.get("concurrency"):
        return None
    overlap = np.minimum(end, window_end)  # each request's time inside the window, in place: a run-long column
    overlap -= np.maximum(start, window_start)
    busy = np.clip(overlap, 0.0, None, out=overlap).sum()
    effective = float(busy) / (window_end - window_start)
    expected = float(step["concurrency"] * contexts)
    if think_s and len(own):
        mean = float(own.mean())
        expected *= mean / (mean + think_s)
    return {
        "effective_concurrency": effective,
        "expected_concurrency": expected,
        "ratio": effective / expected,
        "window_s": window_end - window_start,
    }


def _status_counts(attempts: Attempts, rows: np.ndarray) -> dict[str, int]:
    """How many of the attempts ``rows`` ended with each status: its code, its name (a gRPC or
    WebSocket status), or ``conn_error`` where no response came."""
    status, names = attempts["status"][rows], attempts["status_name"][rows]
    named = names >= 0
    counts = {"conn_error" if code < 0 else str(int(code)): count for code, count in _value_counts(status[~named])}
    counts.update({attempts.statuses[code]: count for code, count in _value_counts(names[named])})
    return counts


def _top_errors(attempts: Attempts, rows: np.ndarray, most: int = 5) -> list[Error]:
    """The ``most`` commonest error texts of the failed attempts among ``rows``, with counts."""
    error_codes = attempts["error"][rows & (attempts["error"] >= 0) & ~attempts["ok"]]
    if not len(error_codes):
        return []
    codes, counts = np.unique(error_codes, return_counts=True)
    return [{"error": attempts.errors[codes[i]], "count": int(counts[i])} for i in np.argsort(-counts)[:most]]


def plan_stats(
    attempts: Attempts,
    plan: Sequence[Mapping[str, Any]],
    res: pd.DataFrame,
    settle_s: float | None,
    streamed: bool | None,
    names: ServerNames | None,
    users: Mapping[str, Any],
) -> list[StepSummary]:
    """:func:`step_stats` of every step of ``plan``, in run order: each step ends where the next
    begins, the last is the run's last; ``users`` the ``contexts`` and ``think_s`` keywords."""
    return [
        step_stats(
            attempts,
            entry,
            res,
            settle_s,
            plan[i + 1]["start"] if i + 1 < len(plan) else None,
            i + 1 == len(plan),
            streamed,
            names,
            **users,
        )
        for i, entry in enumerate(plan)
    ]


def step_stats(
    attempts: Attempts,
    step: Mapping[str, Any],
    res: pd.DataFrame,
    settle_s: float | None = None,
    next_start: float | None = None,
    last: bool = False,
    streamed: bool | None = None,
    names: ServerNames | None = None,
    contexts: int = 1,
    think_s: float = 0.0,
) -> StepSummary:
    """All aggregates for one step (``step`` is a run.json step entry; ``settle_s`` the run's
    settle time, ``next_start`` the next step's start, ``last`` whether no step follows,
    ``streamed`` whether the run was streamed: None decides from the step's records; ``names``
    what ``--server-role`` and ``--server-stage-label`` say of the server's series; ``contexts`` and
    ``think_s`` what each user kept in flight and waited, for Little's law). A
    ``streams_end`` key in ``step`` overrides the time its streams must have ended by to count
    (None: every one counts)."""
    # the masks over all the run's attempts, each narrowing the one before it
    cut_by_run_end = run_end_cut(attempts)  # cut short by the run's end: never counted
    in_step = attempts["step"] == step["step"]
    settled_attempts = in_step & attempts["settled"] & ~cut_by_run_end
    n_attempts = int(settled_attempts.sum())
    settled_requests = settled_attempts & attempts["final"]  # a request is its final attempt
    ok_requests = settled_requests & attempts["ok"]
    cancelled = np.isfinite(attempts["cancel_ms"])  # barge-in (any step)
    heard_requests = ok_requests & ~cancelled  # succeeded and heard to their end
    # filled in below, figure by figure in summary.json's order; phase, repeat and speech are
    # the summary's to set (analysis.summary, analysis.speech), after what the sweep's axis adds
    out: StepSummary = {  # type: ignore[typeddict-item]
        "step": step["step"],
        "concurrency": step["concurrency"],
        "planned_start": step.get("start"),
        "planned_end": step.get("end"),
    }
    requests, ok_count = int(settled_requests.sum()), int(ok_requests.sum())
    window = step_window(attempts, step, settle_s, next_start)
    start, end, duration_s = window["start"], window["end"], window["duration_s"]
    ok_rate = completed_rate = audio_rate = chars_rate = None
    if duration_s:
        assert start is not None and end is not None  # a window has a length between known ends only
        done_in_window = attempts["final"] & (attempts["tend"] > start) & (attempts["tend"] <= end)
        ok_in_window = done_in_window & attempts["ok"] & ~cancelled
        completions, ok_completions = int(done_in_window.sum()), int(ok_in_window.sum())
        window["completions"], window["ok_completions"] = completions, ok_completions
        ok_rate, completed_rate = ok_completions / duration_s, completions / duration_s
        audio_rate = float(np.nansum(attempts["audio_s"][ok_in_window]) / duration_s)
        chars_rate = float(np.nansum(attempts["text_len"][ok_in_window]) / duration_s)
    attempts_failed = int((settled_attempts & ~attempts["ok"]).sum())
    throttled = int(np.isin(attempts["status"][settled_attempts], THROTTLE_STATUSES).sum())
    if streamed is None:
        streamed = bool((attempts["chunk_n"][settled_attempts] >= 0).any())
    stream_end = step["streams_end"] if "streams_end" in step else _stream_end(window)
    cut_by_step_end = _cut_by_step_end(attempts, settled_attempts, stream_end)
    # the requests the latency figures describe
    timed_requests = heard_requests & ~cut_by_step_end if streamed else heard_requests
    # a live reader keeps each figure's sorted values under what its mask depends on
    figures = _Figures(attempts, (step["step"], stream_end, streamed))
    capacity_figures = capacity.step_figures(ok_rate, chars_rate)
    out.update(
        {
            "window": window,
            "requests": requests,
            "attempts": n_attempts,
            "ok": ok_count,
            "failed": requests - ok_count,
            "cut_by_run_end": int((in_step & cut_by_run_end).sum()),
            "error_rate": (requests - ok_count) / requests if requests else None,
            "attempt_failures": attempts_failed,
            "attempt_failure_rate": attempts_failed / n_attempts if n_attempts else None,
            "throughput_rps": ok_rate,
            "completed_rps": completed_rate,
            "latency_ms": figures.dist("wait_ms", timed_requests, "ok_timed"),
            "ttfb_ms": figures.dist("ttfb_ms", timed_requests, "ok_timed"),
            "write_ms": figures.dist("write_ms", timed_requests, "ok_timed"),
            "concat_ms": figures.dist("concat_ms", timed_requests, "ok_timed"),
            "e2e_ms": dist(attempts["e2e_ms"][timed_requests]),  # a retried request's e2e can come later than its row
            "rtf": figures.dist("rtf", timed_requests, "ok_timed"),
            "audio_s_per_s": audio_rate,
            "rtfx": audio_rate,
            "chars_per_s": capacity_figures["chars_per_s"],
            "utterances_per_hour": capacity_figures["utterances_per_hour"],
            "retries": int((settled_attempts & (attempts["attempt"] > 1)).sum()),
            "attempts_by_number": {
                "1": int((settled_attempts & (attempts["attempt"] <= 1)).sum()),
                "2": int((settled_attempts & (attempts["attempt"] == 2)).sum()),
                "3+": int((settled_attempts & (attempts["attempt"] >= 3)).sum()),
            },
            "throttled": throttled,
            "non_throttle_failures": attempts_failed - throttled,
            "status_counts": _status_counts(attempts, settled_attempts),
            "retry_after_s": figures.dist("retry_after_s", settled_attempts, "settled"),
            "backoff_ms": figures.dist("backoff_ms", settled_attempts & (attempts["attempt"] > 1), "retried"),
        }
    )
    _stream_stats(out, figures, ok_requests, heard_requests, streamed, cut_by_step_end)
    out["cancelled"] = int((settled_requests & cancelled).sum())
    out["cancel_to_quiet_ms"] = figures.dist("cancel_to_quiet_ms", settled_requests & cancelled, "cancelled")
    out["integrity"] = integrity(attempts, heard_requests, step["step"])
    signal_stats(out, settled_requests, timed_requests, figures)
    out["little"] = (
        _little(attempts, step, start, end, last or window["open"], contexts, think_s)
        if duration_s and start is not None and end is not None
        else None
    )
    stages: dict[str, Stage] = {}
    for stage, values in attempts.stages.items():
        stage_dist = dist(
            values[settled_attempts], sorted_values(attempts, (*figures.key, "stage", stage), values, settled_attempts)
        )
        if stage_dist:
            stages[stage] = {"mean": stage_dist["mean"], "p50": stage_dist["p50"], "p95": stage_dist["p95"]}
    out["server_timing_ms"] = stages
    tiers: dict[str, Tier] = {}
    for code, tier in enumerate(attempts.tiers):
        tier_dist = figures.dist("wait_ms", timed_requests & (attempts["tier"] == code), f"tier {code}")
        if tier_dist:
            tiers[tier] = {"count": tier_dist["count"], "p50": tier_dist["p50"], "p95": tier_dist["p95"]}
    out["latency_by_tier_ms"] = tiers
    # a voice sweep has hundreds of voices: one sort for all of them, not a kept figure each
    waits = attempts["wait_ms"][timed_requests]
    out["latency_by_voice_ms"] = _by_label(waits, attempts["voice"][timed_requests], attempts.voices)
    out["latency_by_language_ms"] = _by_label(waits, attempts["language"][timed_requests], attempts.languages)
    out["errors"] = _top_errors(attempts, settled_attempts)
    out["server"] = resource_aggregate(res, "server", start, end, names)
    out["client"] = resource_aggregate(res, "client", start, end)
    # p50/p95 intervals, over the same attempts as the figures they bound
    _add_intervals(out["latency_ms"], figures, "wait_ms", timed_requests, "ok_timed")
    _add_intervals(out["ttfa_ms"], figures, "ttfa_ms", ok_requests & ~cut_by_step_end, "streams")
    return out


def _add_intervals(found: Dist | None, figures: _Figures, column: str, mask: np.ndarray, mask_name: str) -> None:
    """:func:`add_intervals` of ``found``, over the values of ``column`` it was found from, where
    it was found and the column was read."""
    if found and column in figures.attempts.cols:
        add_intervals(found, figures.attempts[column][mask], figures.sorted(column, mask, mask_name))


def add_intervals(found: Dist, values: np.ndarray, sorted_v: np.ndarray | None = None) -> None:
    """Set the intervals of ``found``'s p50 and p95 (:func:`analysis.confidence.percentile_cis`)
    over the ``values`` it was found from (``sorted_v``: the same sorted, when kept); none where
    fewer than 2 are finite."""
    intervals = percentile_cis(values, sorted_v=sorted_v)
    if intervals:
        found["p50_ci"], found["p95_ci"] = intervals["p50_ci"], intervals["p95_ci"]
        found["ci_method"], found["ci_n"] = intervals["ci_method"], intervals["ci_n"]


def hold_open(step: dict[str, Any]) -> OpenStep:
    """Withhold, in place, what an open step's elapsed window cannot give yet (see the module
    doc); its window ends where the records reach so far, the step's "now". Returns
    the step's ``open``: ``{elapsed_s, settle_s, settling, completions, withheld, note}``,
    ``withheld`` naming the figures set to None and ``note`` saying why in one sentence."""
    win = step["window"]
    start, now = step.get("planned_start"), win.get("end")
    elapsed = None if now is None or start is None else max(0.0, now - start)
    settling = not win.get("duration_s")
    done = win.get("completions") or 0
    withheld: list[str] = []
    if settling or done < OPEN_MIN_COUNT:
        withheld += [figure for figure in RATE_FIGURES if step.get(figure) is not None]
        for figure in RATE_FIGURES:
            if figure in step:
                step[figure] = None
        if step.get("little") is not None:
            withheld.append("little")
            step["little"] = None
    for key, value in list(step.items()):
        if (
            isinstance(value, dict)
            and isinstance(value.get("count"), int)
            and ("p95" in value or "mean" in value)
            and value["count"] < OPEN_MIN_COUNT
        ):
            withheld.append(key)
            step[key] = None
    settle = win.get("settle_s")
    if settling:
        note = (
            f"step {step['step']} is in progress, settling: its window opens {settle or 0:g} s in, "
            f"{elapsed or 0:.1f} s have passed; nothing is measured yet"
        )
    elif done < OPEN_MIN_COUNT:
        note = (
            f"step {step['step']} is in progress: {done} requests have finished in the "
            f"{win['duration_s']:.1f} s of its window so far; rates and percentiles need {OPEN_MIN_COUNT}"
        )
    else:  # a percentile of fewer samples (a tier's, TTFB's) is withheld, the rates are not
        note = (
            f"step {step['step']} is in progress: its figures are over the {win['duration_s']:.1f} s of "
            f"its window so far ({done} requests finished in it)"
            + (f"; a percentile over fewer than {OPEN_MIN_COUNT} of them is withheld" if withheld else "")
        )
    held: OpenStep = {
        "elapsed_s": elapsed,
        "settle_s": settle,
        "settling": settling,
        "completions": done,
        "withheld": withheld,
        "note": note,
    }
    step["open"] = held
    return held


def _value_counts(values: np.ndarray) -> list[tuple[int, int]]:
    """(value, count) of small whole numbers (statuses), ascending: a count per value rather than
    a sort of them all."""
    if not len(values):
        return []
    lowest, highest = int(values.min()), int(values.max())
    if highest - lowest > 1_000_000:
        vals, cnt = np.unique(values, return_counts=True)
        return list(zip(vals.tolist(), cnt.tolist()))
    cnt = np.bincount(values - lowest)
    seen = np.flatnonzero(cnt)
    return list(zip((seen + lowest).tolist(), cnt[seen].tolist()))


class PlannedStep(TypedDict):
    """A step as the analysis reads it: run.json's entry checked against the run's mode
    (:func:`analysis.summary.analyze`), or one inferred from the records (:func:`infer_steps`:
    its number, concurrency and no start or end)."""

    step: int
    concurrency: int  # an open-loop step's is 0
    start: float | None
    end: float | None  # an open-loop step's ends at its cut-off, where it was judged
    settle_s: NotRequired[float]
    phase: NotRequired[str | None]
    repeat: NotRequired[int | None]
    voices: NotRequired[int]
    rate: NotRequired[float]  # open loop: the offered rate
    dropped: NotRequired[int]  # open loop
    offered_rps: NotRequired[float]  # a trace replayed
    arrivals: NotRequired[Arrivals]  # open loop: what its arrivals became (run.json's, where it has them)


def infer_steps(attempts: Attempts) -> list[PlannedStep]:
    """Steps from the records themselves, for a run directory without a usable run.json: no
    start or end, so each step's window comes from its records (see the module doc)."""
    out: list[PlannedStep] = []
    for number in sorted(set(attempts["step"][attempts["step"] >= 0].tolist())):
        users = attempts["concurrency"][attempts["step"] == number]  # never empty: the step is one the records carry
        out.append({"step": number, "concurrency": int(users.max()), "start": None, "end": None})
    return out


def _server_mem(res: pd.DataFrame) -> pd.DataFrame:
    if not len(res):
        return res
    return res[(res["role"] == "server") & res["gpu_mem_used_bytes"].notna()]


def memory_baseline(res: pd.DataFrame, first_start: float | None) -> float | None:
    """GPU memory before load: the minimum of server samples before the first step's start."""
    samples = _server_mem(res)
    if not len(samples) or first_start is None:
        return None
    before = samples[samples["ts"] < first_start]["gpu_mem_used_bytes"]
    return float(before.min()) if len(before) else None


def memory_creep(res: pd.DataFrame, first_start: float | None, last_end: float | None) -> MemoryCreep | None:
    """GPU memory before the run against after it, per server host, where both were sampled.

    Per host: ``baseline_bytes`` (the minimum before the first step's start) and
    ``after_run_bytes`` (the minimum after the last step's end): idle times both, so a
    difference is memory that did not come back.  Returns the host with the largest rise as
    ``{host, baseline_bytes, after_run_bytes, rise_bytes, total_bytes, after_samples}``, or None
    when no host has samples on both sides (a run still going, or no collector then).
    """
    samples = _server_mem(res)
    if not len(samples) or first_start is None or last_end is None:
        return None
    best: MemoryCreep | None = None
    for host, on_host in samples.groupby("host", sort=True):
        before, after = on_host[on_host["ts"] < first_start], on_host[on_host["ts"] > last_end]
        if not len(before) or not len(after):
            continue
        base, post = float(before["gpu_mem_used_bytes"].min()), float(after["gpu_mem_used_bytes"].min())
        tot = on_host["gpu_mem_total_bytes"].dropna()
        item: MemoryCreep = {
            "host": str(host),
            "baseline_bytes": base,
            "after_run_bytes": post,
            "rise_bytes": post - base,
            "total_bytes": float(tot.max()) if len(tot) else None,
            "after_samples": int(len(after)),
        }
        if best is None or item["rise_bytes"] > best["rise_bytes"]:
            best = item
    return best
