"""The listener who interrupts (barge-in, ``--barge-in``): which utterances it cuts off and how
long after their first audio, drawn from a seeded source per user so that a run can be repeated
(``--barge-in-seed``, recorded in run.json)."""

from __future__ import annotations

import random

from tts_knee.runformat.options import SPEAKING_CHARS_PER_S


class Listener:
    """One user's interruptions. Each utterance takes two draws, interrupted or not, so that the
    sequence of choices does not depend on the texts."""

    def __init__(self, settings, tag: str):
        self.share = settings.barge_in
        self.after_ms = settings.barge_in_after
        self.rng = random.Random(f"{settings.barge_in_seed}-{tag}")

    def draw(self, text: str) -> float | None:
        """Seconds after the first audio at which the listener interrupts ``text``, or None."""
        cut, where = self.rng.random(), self.rng.random()
        if cut >= self.share:
            return None
        earliest_ms, latest_ms = self.after_ms or (0.0, 1000.0 * len(text) / SPEAKING_CHARS_PER_S)
        return (earliest_ms + (latest_ms - earliest_ms) * where) / 1000.0
