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

import bisect
import functools
import math
from collections.abc import Sequence
from typing import Any, TypeAlias

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


#: Frames whose power is computed at a time while looking for the first (or last) sound, after
#: the first :data:`_FIRST` frames at each end (where speech usually is already).
_BLOCK = 64
_FIRST = 4
_FULL_SCALE = (32767, -32768)
#: What holds audio bytes: a body's block as read, or a view of one.
Buffer: TypeAlias = bytes | bytearray | memoryview


class _Pcm:
    """The samples of PCM16 little-endian audio held as buffers in order (a body as it was
    read), read where they lie: a range of samples inside one buffer is a view of it, and only
    a range across buffers is copied."""

    __slots__ = ("views", "starts", "size", "whole")

    def __init__(self, blocks: Sequence[Buffer], offset: int, size: int):
        self.views: list[memoryview] = []
        self.starts: list[int] = []  # each view's first byte in the audio
        self.whole: np.ndarray | None = None  # all the samples, where they lie in one buffer
        block_at = -offset  # where the next block starts, in the audio's bytes
        if len(blocks) == 1:  # the usual body: one read, its samples an array over it at once
            block = blocks[0]
            room = (len(block) if isinstance(block, (bytes, bytearray)) else memoryview(block).nbytes) - offset
            self.size = max(0, min(size, room)) // 2  # samples (a last odd byte is not one)
            self.whole = np.frombuffer(block, dtype="<i2", count=self.size, offset=offset) if self.size else _NONE
            return
        for block in blocks:
            view = memoryview(block).cast("B")
            view_from, view_to = max(0, -block_at), min(len(view), size - block_at)
            if view_to > view_from:
                self.views.append(view[view_from:view_to])
                self.starts.append(block_at + view_from)
            block_at += len(view)
            if block_at >= size:
                break
        self.size = sum(len(view) for view in self.views) // 2  # samples (a last odd byte is not one)
        self.whole = np.frombuffer(self.views[0], dtype="<i2", count=self.size) if len(self.views) == 1 else None

    def samples(self, first: int, end: int) -> np.ndarray:
        """Samples ``first`` to ``end - 1``."""
        if self.whole is not None:
            return self.whole[first:end]
        byte_from, byte_to = 2 * first, 2 * end
        view_index = bisect.bisect_right(self.starts, byte_from) - 1
        start = self.starts[view_index]
        if byte_to <= start + len(self.views[view_index]):
            return np.frombuffer(self.views[view_index][byte_from - start : byte_to - start], dtype="<i2")
        parts = []
        while byte_from < byte_to:
            start, view = self.starts[view_index], self.views[view_index]
            parts.append(view[byte_from - start : min(byte_to, start + len(view)) - start])
            byte_from = start + len(view)
            view_index += 1
        return np.frombuffer(b"".join(parts), dtype="<i2")

    def clipped(self) -> int:
        """How many samples are at full scale: one pass of highest and lowest over each buffer,
        and a count only where one reaches it."""
        if self.whole is not None:
            return _clipped_in(self.whole)
        count = 0
        end = 2 * self.size
        for start, view in zip(self.starts, self.views):
            if start % 2 and start < end:  # a sample across the boundary with the buffer before
                count += self.samples(start // 2, start // 2 + 1)[0] in _FULL_SCALE
            whole_from = start + start % 2
            view_end = min(start + len(view), end)
            if view_end - whole_from >= 2:
                count += _clipped_in(
                    np.frombuffer(
                        view[whole_from - start : view_end - start - (view_end - whole_from) % 2], dtype="<i2"
                    )
                )
        return count


def _clipped_in(samples: np.ndarray) -> int:
    """How many of ``samples`` are at full scale: the ufuncs' own reductions (numpy's
    ``max``/``min`` add a Python layer each), a count only where one reaches it."""
    if _highest(samples) == 32767 or _lowest(samples) == -32768:
        return int(np.count_nonzero((samples == 32767) | (samples == -32768)))
    return 0


_highest, _lowest = np.maximum.reduce, np.minimum.reduce
_NONE = np.empty(0, dtype="<i2")


def _surely_loud_at(frame: int) -> float:
    """The exact power (integers, exact in float64) at or above which a frame is at or above
    the level by a margin its power summed in float32 (as :func:`_loud_frames` sums it) cannot
    cross: above the float32 level by more than that sum's rounding can take off, at most one
    part in 2^24 per sample. A frame's exact power is one dot product, cheaper than the float32
    sum; one below this says nothing."""
    return _level32(frame) * (1.0 + (frame + 2) * 2.0**-22)


@functools.lru_cache(maxsize=64)
def _level32(frame: int) -> float:
    """The level a frame's float32 power is held to: numpy compares a float32 array with the
    float32 nearest ``_LEVEL_SQ * frame``."""
    return float(np.float32(_LEVEL_SQ * frame))


def _loud_frames(pcm: _Pcm, frame: int, first: int, end: int) -> np.ndarray:
    """Which of frames ``first`` to ``end - 1`` are at or above the level (their power in float32)."""
    frames = pcm.samples(first * frame, end * frame).reshape(end - first, frame).astype(np.float32)
    level: np.ndarray = np.einsum("ij,ij->i", frames, frames) >= _LEVEL_SQ * frame
    return level


def _part_loud(pcm: _Pcm, start: int, power: float) -> bool:
    """Whether the samples from ``start`` on (less than a frame) are loud enough themselves:
    their mean square in float32 at or above the level. Their exact ``power`` decides it where
    it is clear of the level by more than the float32 sum's rounding (at most one part in 2^24
    per sample, and one for the mean) can move it, as nearly always; else the float32 mean."""
    count = pcm.size - start
    if not count:
        return False
    margin = (count + 4) * 2.0**-22
    if power >= _LEVEL_SQ * count * (1.0 + margin):
        return True
    if power < _LEVEL_SQ * count * (1.0 - margin):
        return False
    tail = pcm.samples(start, pcm.size).astype(np.float32)
    return float(np.mean(tail**2)) >= _LEVEL_SQ


def check(pcm: Buffer, rate: int, channels: int) -> dict[str, Any]:
    """The signal fields of PCM16 little-endian audio ``pcm`` (bytes or a memoryview):
    ``leading_silence_ms``, ``trailing_silence_ms`` (None when silent) and ``clipped_share``,
    and ``silent``."""
    return check_blocks([pcm], 0, len(memoryview(pcm).cast("B")), rate, channels)


def check_blocks(blocks: Sequence[Buffer], offset: int, size: int, rate: int, channels: int) -> dict[str, Any]:
    """:func:`check` of the ``size`` bytes from ``offset`` on of the buffers ``blocks`` taken in
    order (a body as it was read: never joined). One pass over the samples, for the clipped
    ones (highest and lowest of each buffer); the first frame, the last and the part-frame after
    it are judged by their exact power (two conversions to float64, three dot products), and only where an
    end is silent (or near the level) are frames summed in float32 inward from it until the
    first sound, a few first and then :data:`_BLOCK` at a time: a whole pass only for an answer
    that is silent."""
    pcm = _Pcm(blocks, offset, size)
    if not pcm.size:
        return {"silent": True, "leading_silence_ms": None, "trailing_silence_ms": None, "clipped_share": None}
    frame = max(1, rate * channels * FRAME_MS // 1000)
    frame_count = pcm.size // frame
    clipped = round(pcm.clipped() / pcm.size, 6)
    cut = frame_count * frame  # where the last part-frame starts
    end = pcm.samples(max(0, cut - frame), pcm.size).astype(np.float64)  # the last frame and the part after it
    part = end[len(end) - (pcm.size - cut) :]
    tail_loud = _part_loud(pcm, cut, float(part @ part))
    first_loud = last_loud = False  # sure to be at or above the level by their exact power
    if frame_count:
        sure = _surely_loud_at(frame)
        last_frame = end[:frame]
        last_loud = float(last_frame @ last_frame) >= sure
        head = last_frame if frame_count == 1 else pcm.samples(0, frame).astype(np.float64)
        first_loud = last_loud if frame_count == 1 else float(head @ head) >= sure
    first, last = _sound_between(pcm, frame, frame_count, first_loud, last_loud)
    if first is None and not tail_loud:
        return {"silent": True, "leading_silence_ms": None, "trailing_silence_ms": None, "clipped_share": clipped}
    total_ms = pcm.size / channels / rate * 1000.0
    frame_ms = frame / channels / rate * 1000.0
    lead = (frame_count if first is None else first) * frame_ms
    trail = 0.0 if tail_loud or last is None else total_ms - (last + 1) * frame_ms
    return {
        "silent": False,
        "leading_silence_ms": round(min(lead, total_ms), 3),
        "trailing_silence_ms": round(max(0.0, trail), 3),
        "clipped_share": clipped,
    }


def _sound_between(
    pcm: _Pcm, frame: int, frame_count: int, first_loud: bool, last_loud: bool
) -> tuple[int | None, int | None]:
    """The first and the last of the ``frame_count`` frames with sound, None where there is none:
    frames summed in float32 from each end inward, a few first and then :data:`_BLOCK` at a time,
    where the end frame's exact power did not already say it is loud (``first_loud``,
    ``last_loud``)."""
    first = 0 if first_loud else None  # the usual answer: sound from the first frame ...
    block_start = frame_count if first is not None else 0
    while block_start < frame_count:
        block_end = min(frame_count, block_start + (_FIRST if block_start == 0 else _BLOCK))
        hit = _loud_frames(pcm, frame, block_start, block_end)
        if hit.any():
            first = block_start + int(hit.argmax())
            break
        block_start = block_end
    last = frame_count - 1 if first is not None and last_loud else None  # ... to the last
    block_end = frame_count if first is not None and last is None else -1
    while first is not None and block_end > first:
        block_start = max(first, block_end - (_FIRST if block_end == frame_count else _BLOCK))
        hit = _loud_frames(pcm, frame, block_start, block_end)
        if hit.any():
            last = block_end - 1 - int(hit[::-1].argmax())
            break
        block_end = block_start
    return first, last


def pace_outliers(
    seconds_per_char: np.ndarray, language_codes: np.ndarray, factor: float = HEARD_ONCE_X
) -> tuple[np.ndarray, np.ndarray]:
    """``(runaway, truncated)`` masks over attempts, each judged against the median seconds per
    character of its language (codes; -1 pooled as one) over all attempts given: over ``factor``
    times it (under ``1 / factor`` of it); NaN paces are neither; a language with fewer than
    :data:`PACE_MIN` paces judges none."""
    runaway = np.zeros(len(seconds_per_char), dtype=bool)
    truncated = np.zeros(len(seconds_per_char), dtype=bool)
    paced = np.isfinite(seconds_per_char) & (seconds_per_char > 0)
    for code in np.unique(language_codes[paced]):
        in_language = paced & (language_codes == code)
        if in_language.sum() < PACE_MIN:
            continue
        med = float(np.median(seconds_per_char[in_language]))
        if not math.isfinite(med) or med <= 0:
            continue
        runaway |= in_language & (seconds_per_char > factor * med)
        truncated |= in_language & (seconds_per_char < med / factor)
    return runaway, truncated
