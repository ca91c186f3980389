"""The soak (``--soak``): one level held for ``--soak`` seconds, as one step of phase ``soak``;
the dashboard reports its drift (:mod:`analysis.soak`).

On its own (one ``--steps`` or ``--rates`` level, no ``--repeat`` or ``--refine``) the soak
is the whole run. After a sweep it holds the level the sweep recommends, as the dashboard
recommends it from the records so far (:func:`analysis.summary.analyze`): the step before the
knee, the largest concurrency meeting ``--slo``, or in an open-loop run the rate before the
knee. The steps are judged as they end (the shape waits for each step's records), so the
last step's slow requests are in. When the sweep recommends no level, the run ends without a
soak and says why.
"""

from __future__ import annotations

import logging

import gevent

from tts_knee import runformat

from .clock import wall

log = logging.getLogger("tts_knee.soak")
#: Longest wait for the sweep's records (and run.json) to reach the disk before judging it.
WRITE_WAIT_S = 30.0


class Soak:
    """The soak of one run: ``seconds`` long, at ``level`` (None: the sweep's recommendation)."""

    def __init__(self, seconds: float, level: float | None):
        self.seconds = seconds
        self.alone = level is not None
        self.level = level
        self._asked = False

    @classmethod
    def of(cls, settings) -> Soak | None:
        """The run's soak from its ``settings``, or None without ``--soak``."""
        if settings.soak is None:
            return None
        grid = settings.rates or settings.steps
        alone = len(grid) == 1 and settings.repeat == 1 and not settings.refine
        return cls(settings.soak, grid[0] if alone else None)

    def next(self, run):
        """The soak's step (a :class:`~locustfiles.plan.Planned` of phase ``soak``) once the
        plan is done; None once it has been handed out, or when there is no level to hold."""
        from .plan import Planned

        if self._asked:
            return None
        self._asked = True
        if not self.alone:
            self.level = self._recommended(run)
        level = self.level
        if level is None:  # the sweep recommends none (alone, the level is the run's one)
            return None
        unit = "req/s" if run.settings.mode == "open" else "users"
        log.info("soak: holding %g %s for %s", level, unit, _duration(self.seconds))
        return Planned(level, runformat.SOAK_PHASE, 1)

    def _recommended(self, run):
        """The level the sweep's records recommend, or None (logged) when they recommend none."""
        return recommended_level(run, "soak", "no soak")


def recommended_level(run, who: str, without: str):
    """The level the sweep's records so far recommend (a concurrency, or a rate in open loop),
    judged as the dashboard judges them once they are on the disk; None, logged with
    ``without`` (what the run does instead), when they recommend none. ``who`` is what asks."""
    from tts_knee.analysis.summary import analyze
    from tts_knee.runformat.reader import RunDirError

    run.state.finish(wall())
    run.save()
    if not run.writer.flush().wait(WRITE_WAIT_S):
        log.error(
            "the disk of %s has not written the sweep's last records in %.0f s; the level is "
            "chosen from what reached it",
            run.run_dir,
            WRITE_WAIT_S,
        )
    rundir = run.reader.rundir

    def recommend():
        rundir.refresh()
        return analyze(rundir)

    try:
        summary = gevent.get_hub().threadpool.apply(recommend)
    except RunDirError as error:
        log.error("%s: the sweep cannot be judged (%s)", without, error)
        return None
    key = "recommended_rate" if run.settings.mode == "open" else "recommended_concurrency"
    level = summary.get(key)
    if level is None:
        log.error("%s: the sweep recommends no level to hold (%s)", without, summary["recommendation"])
        return None
    log.info("%s: the sweep recommends %g (%s)", who, level, summary["recommendation"])
    return level


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
