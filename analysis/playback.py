"""The playback model: what a listener fed by a stream's arrivals hears, and the stream health
of single attempts drawn from it for the report.

:func:`listen` is the one model of the player, used for every attempt as it is recorded (the
load generator's ``underruns`` and ``underrun_ms``) and for the report's drawing of it: it
starts once ``playback_buffer_ms`` of audio is in (at least some audio), or at the last arrival
with audio if that never happens, and plays at 1x. Each time it runs dry before the next
arrival with audio is one underrun, and the wait until that arrival is silence; it resumes at
once. An arrival without a whole frame neither starts it, nor ends or splits a stall. Pure
Python, so the load generator's workers use it without numpy. Two figures of every attempt
judge the arrivals without a buffer, as the listener's side of the peers' benchmarks does:
:func:`preroll`, the start-up buffer that would have played without a gap (``preroll_ms``),
and :func:`stall_max`, the longest gap a player starting at once hears (``stall_max_ms``).

:func:`playback` replays one stream's chunk arrivals (``chunk_at_ms``, ``chunk_audio_ms``)
through that model as polylines.  :func:`pick_streams` chooses which attempts of a step to
draw: the typical one and the worst one, ranked by TTFA plus total stall (``ttfa_ms +
underrun_ms``, what the listener waits for in all), among the step's successful settled
attempts that carry chunk lists and, as the step's figures do, ended before the step did.  A
stream cut at the client's cap of chunk entries has its later arrivals merged into the last
entry, so its replay ends early.  Only those few lines are re-read from ``requests.jsonl``
(see :meth:`runformat.reader.RequestLog.chunk_series`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report's types; the load generator imports this module without numpy
    import numpy as np

    from tts_knee.runformat.reader import Attempts, RequestLog

MAX_TRIES = 5  # candidates tried per pick when a line cannot be re-read
#: Sums of float milliseconds; not a gap anyone could hear.
FLOAT_NOISE_MS = 1e-6


def listen(
    at_ms: Sequence[float], audio_ms: Sequence[float], buffer_ms: float
) -> tuple[float | None, list[tuple[float, float]]]:
    """When the player started (ms, None when no arrival carried audio) and its stalls, each
    ``(ran dry at, resumed at)`` in ms; arrivals sorted, in ms since any common origin."""
    have, last = 0.0, None
    for i, (arrival, chunk_ms) in enumerate(zip(at_ms, audio_ms)):  # noqa: B007 - i is where the next loop starts
        have += chunk_ms
        if chunk_ms:
            last = arrival
        if have > 0 and have >= buffer_ms:
            break
    else:
        return last, []  # never buffered enough: starts at the end with everything in
    start, dry_at, stalls = arrival, arrival + have, []
    for arrival, chunk_ms in zip(at_ms[i + 1 :], audio_ms[i + 1 :]):
        if not chunk_ms:
            continue  # no whole frame in it: the player stays dry (or keeps playing) as it was
        if arrival - dry_at > FLOAT_NOISE_MS:
            stalls.append((dry_at, arrival))
            dry_at = arrival + chunk_ms
        else:
            dry_at += chunk_ms
    return start, stalls


def preroll(at_ms: Sequence[float], audio_ms: Sequence[float]) -> float | None:
    """The smallest start-up buffer, in ms after the first arrival, with which a 1x player that
    starts then never runs dry: the most any arrival with audio came after the audio before it
    would have played out (vLLM-Omni's worst-case underrun, the silence a player that starts at
    once hears in all); None when no arrival carried audio. Arrivals sorted, in ms."""
    if not at_ms:
        return None
    played_to, need = at_ms[0], None
    for arrival, chunk_ms in zip(at_ms, audio_ms):
        if not chunk_ms:
            continue  # no whole frame in it: nothing to play, nothing late
        late = arrival - played_to
        need = late if need is None else max(need, late)
        played_to += chunk_ms
    return None if need is None else need if need > FLOAT_NOISE_MS else 0.0


def stall_max(at_ms: Sequence[float], audio_ms: Sequence[float]) -> float | None:
    """The longest silence a player that starts with the first audio, with no buffer, hears
    (:func:`listen` at 0 ms; sglang-omni's maximum playback underrun); None with fewer than two
    arrivals with audio."""
    if sum(1 for chunk_ms in audio_ms if chunk_ms) < 2:
        return None
    _, stalls = listen(at_ms, audio_ms, 0.0)
    return max((resumed - dry for dry, resumed in stalls), default=0.0)


def heard_at(at_ms: Sequence[float], audio_ms: Sequence[float], buffer_ms: float, position_ms: float) -> float | None:
    """When the player of :func:`listen` plays the audio ``position_ms`` into the stream (the
    first sound past a leading silence), in the arrivals' ms; None when no arrival carried audio.
    Each stall that began before it delays it by the stall's length."""
    start, stalls = listen(at_ms, audio_ms, buffer_ms)
    if start is None:
        return None
    heard = start + position_ms
    for dry, resumed in stalls:
        if dry > heard:
            break
        heard += resumed - dry
    return heard


@dataclass
class Playback:
    """One stream replayed: polylines in ms since ``t0`` (``received`` is a staircase, ``played``
    rises at 1x and is flat while the player waits), and the stalls found."""

    received_t: np.ndarray
    received: np.ndarray
    played_t: np.ndarray
    played: np.ndarray
    start_ms: float
    underruns: int
    underrun_ms: float
    stalls_t: np.ndarray  # when each stall began
    stalls: np.ndarray  # audio played by then


def playback(at_ms: np.ndarray, audio_ms: np.ndarray, buffer_ms: float = 0.0) -> Playback | None:
    """Replay one stream (arrival times sorted, ms since ``t0``) through :func:`listen`; None
    without audio."""
    import numpy as np

    keep = audio_ms > 0
    arrivals, audio = at_ms[keep], audio_ms[keep]
    start, stalls = listen(arrivals.tolist(), audio.tolist(), buffer_ms)
    if start is None:
        return None
    cum = np.cumsum(audio)
    played_t, played_ms, stalls_t, stalls_played = [0.0, start], [0.0, 0.0], [], []
    silent, stall = 0.0, 0
    for arrival in arrivals[arrivals > start].tolist():
        if stall < len(stalls) and stalls[stall][1] == arrival:
            dry = stalls[stall][0]
            played = dry - start - silent
            played_t += [dry, arrival]
            played_ms += [played, played]
            stalls_t.append(dry)
            stalls_played.append(played)
            silent += arrival - dry
            stall += 1
        else:
            played_t.append(arrival)
            played_ms.append(arrival - start - silent)
    total = float(cum[-1])
    played_t.append(start + total + silent)
    played_ms.append(total)
    received_t = np.concatenate([[0.0], arrivals])
    received = np.concatenate([[0.0], cum])
    return Playback(
        received_t,
        received,
        np.asarray(played_t),
        np.asarray(played_ms),
        start,
        len(stalls),
        silent,
        np.asarray(stalls_t),
        np.asarray(stalls_played),
    )


def pick_streams(attempts: Attempts, log: RequestLog, step: int) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
    """``{"typical": (row, at_ms, audio_ms), "worst": ...}`` for one step (see the module doc);
    a pick is missing when no attempt of the step has usable chunk lists."""
    import numpy as np

    picked = (
        (attempts["step"] == step)
        & attempts["settled"]
        & attempts["final"]
        & attempts["ok"]
        & (attempts["chunk_n"] > 0)
        & np.isfinite(attempts["ttfa_ms"])
    )
    if "cut_by_step_end" in attempts.cols:  # marked by analysis.steps.step_stats
        picked &= ~attempts["cut_by_step_end"]
    rows = np.flatnonzero(picked)
    if not len(rows):
        return {}
    key = attempts["ttfa_ms"][rows] + np.nan_to_num(attempts["underrun_ms"][rows])
    order = rows[np.argsort(key, kind="stable")]
    mid = len(order) // 2
    near_mid = [order[position] for position in sorted(range(len(order)), key=lambda position: abs(position - mid))]
    out: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
    for name, cands in (("worst", order[::-1]), ("typical", near_mid)):
        tries = 0
        for row in cands:
            if tries >= MAX_TRIES:
                break
            if name == "typical" and len(order) > 1 and "worst" in out and row == out["worst"][0]:
                continue  # draw two different streams when there are two
            tries += 1
            series = log.chunk_series(int(row))
            if series is not None:
                out[name] = (int(row), *series)
                break
    return out
