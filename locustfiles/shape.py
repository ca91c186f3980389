"""The step shape: concurrency 1 → 2 → 4 … with the same batch of texts at each step.

The shape runs where the runner runs (the master in distributed mode); it announces each step
to the workers so every record carries the step it was sent in. A step ends after
``--step-time`` seconds, or after ``--step-requests`` finished requests when that is set.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

from locust import LoadTestShape

from .clock import wall

log = logging.getLogger("tts_knee.shape")
STEP_MESSAGE = "tts_knee_step"
#: Users started per second at a step change: fast enough that a step is all at its level.
SPAWN_RATE = 100
TICK_SLACK_S = 0.1


@dataclass
class Step:
    step: int            # 1-based index
    concurrency: int
    start: float         # unix seconds on the master's clock
    end: float | None = None


@dataclass
class StepState:
    """Which step is running on this node, and the text counter that restarts at each step."""
    settle_s: float = 0.0
    current: Step | None = None
    steps: list = field(default_factory=list)   # every step begun, in order (master/local)
    _texts: itertools.count = field(default_factory=itertools.count)

    def begin(self, step: Step) -> None:
        if self.current is not None and self.current.end is None:
            self.current.end = step.start
        self.current = step
        self.steps.append(step)
        self._texts = itertools.count()

    def finish(self, at: float) -> None:
        if self.current is not None and self.current.end is None:
            self.current.end = at

    def next_text_index(self) -> int:
        return next(self._texts)

    def settled(self, step: Step | None, t0: float) -> bool:
        """Whether an attempt sent at ``t0`` during ``step`` is past the step's settle window."""
        return step is None or t0 >= step.start + self.settle_s


class StepShape(LoadTestShape):
    """Steps through ``--steps``; the run stops itself after the last one."""

    def tick(self):
        from .plugin import ensure_run   # the first tick comes before test_start: it opens the run
        run = ensure_run(self.runner.environment)
        if run is None or run.failed:
            return None
        settings, state = run.settings, run.state
        steps = settings.steps
        cur = state.current
        now = wall()
        if cur is None:
            index = 0
        else:
            index = cur.step - 1
            elapsed = now - cur.start
            done = run.finished_in_step(cur.step) if settings.step_requests else 0
            # Locust ticks once a second: a step due within TICK_SLACK_S ends now, not a tick later.
            if elapsed + TICK_SLACK_S >= settings.step_time_s or (
                    settings.step_requests and done >= settings.step_requests):
                index += 1
        if index >= len(steps):
            if cur is not None and cur.end is None:
                state.finish(now)
                log.info("step %d (concurrency %d) done; last step finished, stopping", cur.step, cur.concurrency)
            if run.is_master:
                # A headless master would otherwise quit without telling workers to stop, and
                # their last records would never be sent: stop them first, then let Locust quit.
                self.runner.stop()
            return None
        if cur is None or index != cur.step - 1:
            step = Step(index + 1, steps[index], now)
            if cur is not None:
                log.info("step %d (concurrency %d) done", cur.step, cur.concurrency)
            log.info("step %d/%d: concurrency %d", step.step, len(steps), step.concurrency)
            run.begin_step(step)
        return steps[index], SPAWN_RATE
