"""The spike (``--spike FACTORxSECONDS``): once the sweep (and a soak) is done, three steps at
one level L, the given ``--spike-at`` or the one the sweep recommends: ``before_spike`` holds L
for ``--step-time``, ``spike`` holds ceil(L x FACTOR) for SECONDS, and ``recovery`` holds L
again for twice SECONDS (at least ``--step-time``), long enough to see whether the server comes
back. The dashboard names how the server took it and how long it took to recover
(:mod:`analysis.spike`). Closed loop only: the levels are concurrencies.

While the spike's steps run, :meth:`Spike.watch` looks for a server that has gone: once
``GONE_MIN`` attempts in a row got no answer at all (refused, reset, timed out) and nothing has
answered for ``GONE_S``, it sends the health probe (``--health-path``, or the warm-up request);
when that fails too, the run stops there (``Run.cut_short``) with everything recorded, rather
than hammering a dead server for the rest of its recovery. Each probe is in run.json's
``spike_health``.
"""

from __future__ import annotations

import logging
import math
import re

import gevent

from tts_knee import runformat
from tts_knee.runformat import exits

from .clock import wall

log = logging.getLogger("tts_knee.spike")
#: A server that has answered nothing for this long, over at least GONE_MIN attempts, is probed.
GONE_S, GONE_MIN = 1.0, 10
_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[xX]\s*(\d+(?:\.\d+)?)\s*s?\s*$")


class SpikeError(ValueError):
    """``--spike`` or ``--spike-at`` is not what they take."""


def parse(spec: str) -> tuple[float, float]:
    """``--spike FACTORxSECONDS`` (``3x30``) as (factor, seconds)."""
    match = _SPEC.match(spec)
    if not match or float(match.group(1)) <= 1 or float(match.group(2)) <= 0:
        raise SpikeError(
            f"--spike takes FACTORxSECONDS, a factor above 1 and a length in seconds, such as 3x30, got {spec!r}"
        )
    return float(match.group(1)), float(match.group(2))


class Spike:
    """The spike of one run: at ``level`` (None: the sweep's recommendation) ``factor`` times as
    many users for ``seconds``."""

    def __init__(self, factor: float, seconds: float, level: int | None, step_time_s: float):
        self.factor, self.seconds, self.level = factor, seconds, level
        self.recovery_s = max(2 * seconds, step_time_s)
        self._left: list | None = None
        self.probes: list[dict] = []  # health probes sent while it ran (run.json spike_health)
        self._probing = False
        self._probed_at = 0.0

    @classmethod
    def of(cls, settings) -> Spike | None:
        """The run's spike from its ``settings``, or None without ``--spike``."""
        if settings.spike is None:
            return None
        factor, seconds = settings.spike
        return cls(factor, seconds, settings.spike_at, settings.step_time)

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
            log.info(
                "spike: %d users, then %d for %g s, then %d for %g s",
                self.level,
                top,
                self.seconds,
                self.level,
                self.recovery_s,
            )
            before, spike, recovery = runformat.SPIKE_PHASES
            self._left = [
                Planned(self.level, before, 1),
                Planned(top, spike, 1, self.seconds),
                Planned(self.level, recovery, 1, self.recovery_s),
            ]
        return self._left.pop(0) if self._left else None

    def watch(self, run, phase: str) -> None:
        """Called as a spike step goes (``phase``): probe the server's health once it seems gone,
        and stop the run when the probe fails too (see the module doc)."""
        writer = run.writer
        if self._probing or run.cut_short is not None or writer is None or writer.unanswered < GONE_MIN:
            return
        if wall() - max(writer.last_answer or 0.0, self._probed_at) < GONE_S:
            return
        self._probing = True
        gevent.spawn(self._confirm, run, phase, writer.unanswered)

    def _confirm(self, run, phase: str, unanswered: int) -> None:
        from .preflight import health

        try:
            probe = health(run.settings)
        finally:
            self._probing, self._probed_at = False, wall()
        self.probes.append(runformat.spike_health_entry(at=self._probed_at, phase=phase, **probe))
        if probe["ok"]:
            log.info(
                "spike: %d attempts in a row had no answer, but the health probe did (%s in %.0f ms)",
                unanswered,
                probe["status"],
                probe["ms"],
            )
            return
        message = (
            f"the server stopped answering during the {phase.replace('_', ' ')} step: {unanswered} attempts "
            f"in a row got no answer and the health probe failed too ({probe['message']}); the run stops "
            f"here, with every attempt recorded"
        )
        log.error("%s", message)
        run.cut_short = message
        run.info["error"] = message
        run.environment.process_exit_code = exits.SERVER_CRASHED  # whatever --exit-code-on-error says
