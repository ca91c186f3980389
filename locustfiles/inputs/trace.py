"""Trace replay (``--trace FILE --trace-speed 0.5,1,2,4``): a log of arrivals sent again, each
at its own offset divided by the step's speed, open loop (``openloop_user``), its texts and
voices as the log has them.

A step at speed S replays the trace from its start for ``--step-time`` or the whole trace at S,
whichever is shorter (:meth:`Trace.span_s`). The steps stand on the run's rate axis: the offered
rate of speed S is S times the trace's mean rate (its arrivals over its length,
``runformat.trace.duration_s``), so the plan, the knee and the SLO search work on rates, and
:class:`locustfiles.plan.SpeedAxis` names them as speeds and bisects to ``REFINE_TO`` (0.1x).

Rows are shared out among the workers: a conversation's turns all go to one (in order on one
caller: one connection or session), the other rows by their index. :meth:`Trace.lanes` says
which rows a worker sends: one lane per conversation and one per lone row.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from pathlib import Path

from tts_knee.runformat import trace as fmt

from .corpus import Text, tier_of

#: How close ``--refine`` brings two speeds.
REFINE_TO = 0.1


class TraceError(ValueError):
    """The trace or its speeds are unusable; one sentence naming the row or the option."""


@dataclass(frozen=True)
class Trace:
    path: str
    offsets: tuple  # seconds from the trace's start, per row, ascending
    texts: tuple  # corpus.Text per row: what it sends
    lanes_of: tuple  # tuple of lanes, each a tuple of row indexes sent in order on one caller
    conversations: int
    duration_s: float

    @property
    def rows(self) -> int:
        return len(self.offsets)

    @property
    def base_rps(self) -> float:
        """The trace's mean rate at speed 1."""
        return self.rows / self.duration_s

    def span_s(self, speed: float, step_time_s: float) -> float:
        """How long a step at ``speed`` sends arrivals: ``step_time_s`` or the whole trace."""
        return min(step_time_s, self.duration_s / speed)

    def replayed(self, speed: float, step_time_s: float) -> int:
        """How many rows a step at ``speed`` sends: those due before its span ends
        (:meth:`due_in_span`)."""
        last = self.span_s(speed, step_time_s)
        return sum(1 for row in range(self.rows) if self.due_in_span(row, speed, last))

    def due_in_span(self, row: int, speed: float, last_s: float) -> bool:
        """Whether ``row`` comes due before ``last_s`` into a step at ``speed``: the one test of
        what a step replays, for the node that sends it and the master that counts it."""
        return self.offsets[row] / speed < last_s

    def offered_between(self, speed: float, start_s: float, end_s: float) -> int:
        """How many rows a step at ``speed`` sends from ``start_s`` to ``end_s`` of its own time."""
        return bisect.bisect_left(self.offsets, end_s * speed) - bisect.bisect_left(self.offsets, start_s * speed)

    def lanes(self, index: int, workers: int) -> list[tuple]:
        """The lanes worker ``index`` of ``workers`` sends: every ``workers``-th one."""
        return [lane for lane_index, lane in enumerate(self.lanes_of) if lane_index % workers == index]

    def describe(self) -> dict:
        """run.json's ``trace``."""
        from tts_knee.analysis.trace import bursts

        return {
            "path": self.path,
            "rows": self.rows,
            "duration_s": self.duration_s,
            "rate_rps": self.base_rps,
            "conversations": self.conversations,
            "bursts": bursts(self.offsets, self.duration_s),
        }


def load(path: str, corpus: tuple) -> Trace:
    """The trace at ``path`` resolved against the corpus (``text_len``: the corpus text nearest
    that length; ``text_id``: the entry of that id); raises :class:`TraceError`."""
    try:
        rows = fmt.read(Path(path))
    except fmt.TraceError as error:
        raise TraceError(f"--trace: {error}") from None
    by_id = {entry.id: entry for entry in corpus}
    by_len = sorted(corpus, key=lambda entry: len(entry.text))
    lengths = [len(entry.text) for entry in by_len]
    texts = []
    for row in rows:
        if row.text_id is not None:
            base = by_id.get(row.text_id)
            if base is None:
                raise TraceError(
                    f"--trace: {path} line {row.line}: text_id {row.text_id!r} is not in the corpus "
                    f"(--texts); its ids are {', '.join(sorted(by_id)[:5])}" + (" …" if len(by_id) > 5 else "")
                )
        elif row.text_len is not None:
            want = row.text_len
            nearest = bisect.bisect_left(lengths, want)
            near = [j for j in (nearest - 1, nearest) if 0 <= j < len(by_len)]
            base = min((by_len[j] for j in near), key=lambda entry: abs(len(entry.text) - want))
        else:
            assert row.text is not None  # a row has its text, its text_len or its text_id (runformat.trace)
            base = Text(f"trace:{row.line}", row.text, tier_of(row.text))
        if row.voice is not None or row.language is not None:
            base = replace(base, voice=row.voice or base.voice, language=row.language or base.language)
        texts.append(base)
    turns = fmt.conversation_turns(rows)
    in_conv = {row_index for idx in turns.values() for row_index in idx}
    lanes = sorted(
        [tuple(idx) for idx in turns.values()]
        + [(row_index,) for row_index in range(len(rows)) if row_index not in in_conv]
    )
    offsets = tuple(row.offset_s for row in rows)
    return Trace(path, offsets, tuple(texts), tuple(lanes), len(turns), fmt.duration_s(offsets))


def parse_speeds(raw) -> tuple[float, ...]:
    """``--trace-speed``: comma-separated multiples of the trace's pace, each above 0."""
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        speeds = tuple(float(str(item).rstrip("x")) for item in items if str(item) != "")
    except ValueError:
        raise TraceError(f"--trace-speed must be comma-separated speeds like 0.5,1,2,4, got {raw!r}") from None
    if not speeds or not all(math.isfinite(speed) and speed > 0 for speed in speeds):
        raise TraceError(f"--trace-speed needs at least one speed, each a number above 0, got {raw!r}")
    return speeds
