"""Signal checks on an attempt's audio, with no model: where the sound starts and ends, whether
there is any, and how much of it is clipped. Cheap enough for the attempt path (under 0.1 ms
for 5 s of 22 kHz speech; ``bench/listening_cost.py``), so every attempt whose audio is PCM16 gets them.

The audio is cut into 10 ms frames (:data:`FRAME_MS`); a frame is *sound* when its RMS is at or
above :data:`SILENCE_DBFS` (-40 dBFS: a quiet room's noise floor in a recording is around -60, speech
at a normal level -20 to -30). ``leading_silence_ms`` is the audio before the first sound frame,
``trailing_silence_ms`` after the last; an answer with no sound frame at all is silent (the
attempt fails: :data:`SILENT`). ``clipped_share`` is the share of samples at full scale.

Whether an answer ran away (speech on past its text) or was cut short needs the run's other
answers, so the reader judges it (:func:`analysis.steps.length_flags`): against the same text's
own length (:data:`SELF_X`) where the run heard the text more than once, else against the
language's pace (:func:`pace_outliers`, :data:`HEARD_ONCE_X`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

FRAME_MS = 10
SILENCE_DBFS = -40.0
_LEVEL = 10 ** (SILENCE_DBFS / 20) * 32768.0
_LEVEL_SQ = _LEVEL * _LEVEL
#: The error of an attempt whose audio has no sound in it.
SILENT = f"the audio is silent: no {FRAME_MS} ms of it reaches {SILENCE_DBFS:g} dBFS"
#: An answer at least this many times as long as the same text's own (its median at the lowest
#: step) is a runaway; one this fraction of it or less is truncated. A text's own length varies
#: little from call to call (piper's joe voice by a few per cent; a model that samples its
#: durations by more, but not twofold), so twice it is speech past the text; the run's other
#: texts play no part, so a text that speaks its digits is judged by what it asks for.
SELF_X = 2.0
#: ... and at least this many seconds off it: a short clip's length is mostly its own pauses.
SELF_MIN_S = 0.5
#: A text heard once has no length of its own to compare with: its duration per character more
#: than this many times the language's median (or under this fraction of it) is a runaway
#: (truncated). Texts' own paces spread wide around the median: piper's joe voice speaks
#: "Call 555-0199, ext. 42." (its digits as words) at 3.2x it and "Thanks! 👍" at 2.2x, so
#: the band is wider than that; a model running to its token cap runs on far longer.
HEARD_ONCE_X = 5.0
#: The hostile-text probe's band around the sweep's median pace (:mod:`analysis.probe`).
RUNAWAY_X, TRUNCATED_X = 3.0, 1 / 3
#: Fewest attempts of a language before its median pace judges any.
PACE_MIN = 5


#: Frames whose power is computed at a time while looking for the first (or last) sound.
_BLOCK = 64


def check(pcm: bytes | memoryview, rate: int, channels: int) -> dict[str, Any]:
    """The signal fields of PCM16 little-endian audio ``pcm`` (bytes or a memoryview):
    ``leading_silence_ms``, ``trailing_silence_ms`` (None when silent) and ``clipped_share``,
    and ``silent``. The frames are looked at from each end until the first sound: a whole pass
    only for an answer that is silent."""
    x = np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2)
    if not len(x):
        return {"silent": True, "leading_silence_ms": None, "trailing_silence_ms": None, "clipped_share": None}
    frame = max(1, rate * channels * FRAME_MS // 1000)
    n = len(x) // frame
    frames = x[: n * frame].reshape(n, frame)
    hi, lo = int(x.max()), int(x.min())
    clipped = int(np.count_nonzero((x == 32767) | (x == -32768))) / len(x) if hi == 32767 or lo == -32768 else 0.0

    def loud(a: int, b: int) -> np.ndarray:  # frames a..b-1 at or above the level
        f = frames[a:b].astype(np.float32)
        level: np.ndarray = np.einsum("ij,ij->i", f, f) >= _LEVEL_SQ * frame
        return level

    first = last = None
    for a in range(0, n, _BLOCK):
        hit = np.flatnonzero(loud(a, min(n, a + _BLOCK)))
        if len(hit):
            first = a + int(hit[0])
            break
    if first is not None:
        for b in range(n, first, -_BLOCK):
            hit = np.flatnonzero(loud(max(first, b - _BLOCK), b))
            if len(hit):
                last = max(first, b - _BLOCK) + int(hit[-1])
                break
    tail = x[n * frame :]  # a last part-frame counts as sound where it is loud enough itself
    tail_loud = bool(len(tail)) and float(np.mean(tail.astype(np.float32) ** 2)) >= _LEVEL_SQ
    if first is None and not tail_loud:
        return {
            "silent": True,
            "leading_silence_ms": None,
            "trailing_silence_ms": None,
            "clipped_share": round(clipped, 6),
        }
    total_ms = len(x) / channels / rate * 1000.0
    frame_ms = frame / channels / rate * 1000.0
    lead = (n if first is None else first) * frame_ms
    assert first is None or last is not None  # the frame found first is found again from the end
    trail = 0.0 if tail_loud or last is None else total_ms - (last + 1) * frame_ms
    return {
        "silent": False,
        "leading_silence_ms": round(min(lead, total_ms), 3),
        "trailing_silence_ms": round(max(0.0, trail), 3),
        "clipped_share": round(clipped, 6),
    }


def pace_outliers(
    seconds_per_char: np.ndarray, language_codes: np.ndarray, factor: float = HEARD_ONCE_X
) -> tuple[np.ndarray, np.ndarray]:
    """``(runaway, truncated)`` masks over attempts, each judged against the median seconds per
    character of its language (codes; -1 pooled as one) over all attempts given: over ``factor``
    times it (under ``1 / factor`` of it); NaN paces are neither; a language with fewer than
    :data:`PACE_MIN` paces judges none."""
    runaway = np.zeros(len(seconds_per_char), dtype=bool)
    truncated = np.zeros(len(seconds_per_char), dtype=bool)
    ok = np.isfinite(seconds_per_char) & (seconds_per_char > 0)
    for code in np.unique(language_codes[ok]):
        m = ok & (language_codes == code)
        if m.sum() < PACE_MIN:
            continue
        med = float(np.median(seconds_per_char[m]))
        if not math.isfinite(med) or med <= 0:
            continue
        runaway |= m & (seconds_per_char > factor * med)
        truncated |= m & (seconds_per_char < med / factor)
    return runaway, truncated
