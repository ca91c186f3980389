"""The spike (``--spike FACTORxSECONDS``): once the sweep (and a soak) is done, three steps at
one level L, the given ``--spike-at`` or the one the sweep recommends: ``before_spike`` holds L
for ``--step-time``, ``spike`` holds ceil(L x FACTOR) for SECONDS, and ``recovery`` holds L
again for twice SECONDS (at least ``--step-time``), long enough to see whether the server comes
back. The dashboard names how the server took it and how long it took to recover
(:mod:`analysis.spike`). Closed loop only: the levels are concurrencies.
"""
from __future__ import annotations

import logging
import math
import re

from tts_knee import runformat

log = logging.getLogger("tts_knee.spike")
_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[xX]\s*(\d+(?:\.\d+)?)\s*s?\s*$")


class SpikeError(ValueError):
    """``--spike`` or ``--spike-at`` is not what they take."""


def parse(spec: str) -> tuple[float, float]:
    """``--spike FACTORxSECONDS`` (``3x30``) as (factor, seconds)."""
    m = _SPEC.match(spec)
    if not m or float(m.group(1)) <= 1 or float(m.group(2)) <= 0:
        raise SpikeError(f"--spike takes FACTORxSECONDS, a factor above 1 and a length in seconds, such as "
                         f"3x30, got {spec!r}")
    return float(m.group(1)), float(m.group(2))


class Spike:
    """The spike of one run: at ``level`` (None: the sweep's recommendation) ``factor`` times as
    many users for ``seconds``."""

    def __init__(self, factor: float, seconds: float, level: int | None, step_time_s: float):
        self.factor, self.seconds, self.level = factor, seconds, level
        self.recovery_s = max(2 * seconds, step_time_s)
        self._left: list | None = None

    @classmethod
    def of(cls, s) -> "Spike | None":
        """The run's spike (``s``: its Settings), or None without ``--spike``."""
        if s.spike is None:
            return None
        return cls(*s.spike, s.spike_at, s.step_time_s)

    def next(self, run):
        """The spike's next step (a :class:`~locustfiles.plan.Planned`), or None once its three
        have been handed out, or when there is no level to start from (logged)."""
        from .plan import Planned
        if self._left is None:
            if self.level is None:
                from .soak import recommended_level
                level = recommended_level(run, "spike", "no spike")
                self.level = None if level is None else int(level)
            if self.level is None:
                self._left = []
                return None
            top = math.ceil(self.level * self.factor)
            log.info("spike: %d users, then %d for %g s, then %d for %g s", self.level, top, self.seconds,
                     self.level, self.recovery_s)
            before, spike, recovery = runformat.SPIKE_PHASES
            self._left = [Planned(self.level, before, 1), Planned(top, spike, 1, self.seconds),
                          Planned(self.level, recovery, 1, self.recovery_s)]
        return self._left.pop(0) if self._left else None
