"""Stream health of single attempts: the audio received and played over time, for the report.

:func:`playback` replays one stream's chunk arrivals (``chunk_at_ms``, ``chunk_audio_ms``)
through the player the client simulates: it starts once ``playback_buffer_ms`` of audio is in
(or the stream ended), plays at 1x, and when it runs dry before the stream ended waits for the
next arrival (one underrun; the wait is silence).  :func:`pick_streams` chooses which attempts of
a step to draw: the typical one and the worst one, ranked by TTFA plus total stall
(``ttfa_ms + underrun_ms``, what the listener waits for in all), among the step's successful
settled attempts that carry chunk lists and, as the step's figures do, ended before the step
did.  A stream cut at the client's cap of chunk entries has its later arrivals merged into the
last entry, so its replay ends early.  Only those few lines are re-read from
``requests.jsonl`` (see :meth:`runformat.reader.RequestLog.chunk_series`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runformat.reader import Attempts, RequestLog

MAX_TRIES = 5  # candidates tried per pick when a line cannot be re-read


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
    """Replay one stream (arrival times sorted, ms since ``t0``); None without audio."""
    keep = audio_ms > 0
    at, audio = at_ms[keep], audio_ms[keep]
    if not len(at):
        return None
    cum = np.cumsum(audio)
    full = np.flatnonzero(cum >= buffer_ms)
    i = int(full[0]) if len(full) else len(at) - 1
    start = float(at[i])
    while i + 1 < len(at) and at[i + 1] <= start:  # arrived together with the one that filled it
        i += 1
    t, played, avail = start, 0.0, float(cum[i])
    pt, pp = [0.0, start], [0.0, 0.0]
    silence, st, sp = 0.0, [], []
    for j in range(i + 1, len(at) + 1):
        nxt = float(at[j]) if j < len(at) else None
        runs_out = t + (avail - played)
        if nxt is None or runs_out < nxt:
            t, played = runs_out, avail
            pt.append(t)
            pp.append(played)
            if nxt is None:
                break
            st.append(t)
            sp.append(played)
            silence, t = silence + (nxt - t), nxt
        else:
            played, t = played + (nxt - t), nxt
        pt.append(t)
        pp.append(played)
        avail = float(cum[j])
    rt = np.concatenate([[0.0], at])
    rv = np.concatenate([[0.0], cum])
    return Playback(rt, rv, np.asarray(pt), np.asarray(pp), start, len(st), silence, np.asarray(st), np.asarray(sp))


def pick_streams(a: Attempts, log: RequestLog, step: int) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
    """``{"typical": (row, at_ms, audio_ms), "worst": ...}`` for one step (see the module doc);
    a pick is missing when no attempt of the step has usable chunk lists."""
    m = (a["step"] == step) & a["settled"] & a["final"] & a["ok"] & (a["chunk_n"] > 0) & np.isfinite(a["ttfa_ms"])
    if "cut_by_step_end" in a.cols:  # marked by analysis.steps.step_stats
        m &= ~a["cut_by_step_end"]
    rows = np.flatnonzero(m)
    if not len(rows):
        return {}
    key = a["ttfa_ms"][rows] + np.nan_to_num(a["underrun_ms"][rows])
    order = rows[np.argsort(key, kind="stable")]
    mid = len(order) // 2
    near_mid = [order[k] for k in sorted(range(len(order)), key=lambda k: abs(k - mid))]
    out = {}
    for name, cands in (("worst", order[::-1]), ("typical", near_mid)):
        tries = 0
        for row in cands:
            if tries >= MAX_TRIES:
                break
            if name == "typical" and len(order) > 1 and row == out.get("worst", (None,))[0]:
                continue  # draw two different streams when there are two
            tries += 1
            series = log.chunk_series(int(row))
            if series is not None:
                out[name] = (int(row), *series)
                break
    return out
