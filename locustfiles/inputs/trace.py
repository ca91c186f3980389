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
        return [lane for k, lane in enumerate(self.lanes_of) if k % workers == index]

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
    except fmt.TraceError as e:
        raise TraceError(f"--trace: {e}") from None
    by_id = {t.id: t for t in corpus}
    by_len = sorted(corpus, key=lambda t: len(t.text))
    lengths = [len(t.text) for t in by_len]
    texts = []
    for _i, r in enumerate(rows):
        if r.text_id is not None:
            base = by_id.get(r.text_id)
            if base is None:
                raise TraceError(
                    f"--trace: {path} line {r.line}: text_id {r.text_id!r} is not in the corpus "
                    f"(--texts); its ids are {', '.join(sorted(by_id)[:5])}" + (" …" if len(by_id) > 5 else "")
                )
        elif r.text_len is not None:
            want = r.text_len
            k = bisect.bisect_left(lengths, want)
            near = [j for j in (k - 1, k) if 0 <= j < len(by_len)]
            base = min((by_len[j] for j in near), key=lambda t: abs(len(t.text) - want))
        else:
            assert r.text is not None  # a row has its text, its text_len or its text_id (runformat.trace)
            base = Text(f"trace:{r.line}", r.text, tier_of(r.text))
        if r.voice is not None or r.language is not None:
            base = replace(base, voice=r.voice or base.voice, language=r.language or base.language)
        texts.append(base)
    turns = fmt.conversation_turns(rows)
    in_conv = {i for idx in turns.values() for i in idx}
    lanes = sorted([tuple(idx) for idx in turns.values()] + [(i,) for i in range(len(rows)) if i not in in_conv])
    offsets = tuple(r.offset_s for r in rows)
    return Trace(path, offsets, tuple(texts), tuple(lanes), len(turns), fmt.duration_s(offsets))


def parse_speeds(raw) -> tuple[float, ...]:
    """``--trace-speed``: comma-separated multiples of the trace's pace, each above 0."""
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        speeds = tuple(float(str(s).rstrip("x")) for s in items if str(s) != "")
    except ValueError:
        raise TraceError(f"--trace-speed must be comma-separated speeds like 0.5,1,2,4, got {raw!r}") from None
    if not speeds or not all(math.isfinite(v) and v > 0 for v in speeds):
        raise TraceError(f"--trace-speed needs at least one speed, each a number above 0, got {raw!r}")
    return speeds
