"""The step plan: which step runs next, decided on the master as each step ends.

A plan sweeps one :class:`Axis`: the concurrency of a closed-loop run (``--steps``), the
offered rate of an open-loop one (``--rates``; a trace's speeds, ``--trace-speed``, stand on it as
rates, :class:`SpeedAxis`), or the number of distinct voices at one of
either (``--voice-steps``); a step's *level* is where it stands on it. The
grid runs in order, ``--repeat`` times. Each step that ends is judged from the records the
master already has (:class:`StepReader`): against ``--slo`` (``analysis.slo.judge``; a rate by
``analysis.openloop.judge``, on latency from the schedule, failing when its latency kept
growing), or by the axis's knee rule when there is no SLO. Then:

- ``--stop-past-knee``: a grid step that fails, followed by the next judged grid step of the
  same pass failing too, ends that pass over the grid; its remaining steps are skipped. "Fails"
  is a clear SLO failure (an inconclusive step is not judged: it neither stops nor confirms),
  or without an SLO the axis's knee rule on the step's own figures. Concurrency: a step at or
  past the knee ``find_knee`` names on this pass's steps so far whose own latency is more than
  ``LATENCY_RISE`` times the lowest step's or whose failures cross ``FAILURE_RATE``; in a
  streamed run (``streamed``) the streamed rule, as the dashboard applies it: the step's own
  underruns cross ``UNDERRUN_RATE``, or its TTFA p95 is above ``LATENCY_RISE`` times the lowest
  step's and above ``ttfa_floor_ms``, or its failures cross ``FAILURE_RATE``; whole-body time
  rising is no reason to stop. Rate: ``analysis.openloop.past_knee`` (throughput short of the
  offered rate, latency growing, p95 from schedule past the lowest rate's, failures). Voices:
  the load's own rule with the number of voices in the place of the concurrency
  (``analysis.voices.find_knee``: the load being the same at every step, throughput per user
  says nothing).
- ``--refine`` (needs an SLO): after the grid, bisect between the highest level that passes
  with every lower tested one passing (0 when the lowest fails) and the lowest tested level
  above it, one new step (phase ``refine``) per probe at their midpoint, until the axis says
  they are close enough: adjacent integers for a concurrency or a number of voices,
  ``--refine-to`` for a rate. A
  level tested by several steps (``--repeat``) is judged on their pooled records, as the
  dashboard judges it (``analysis.levels``); an inconclusive level counts as failing, and so
  does one where not a request finished.

Gevent-free and locust-free: it works on step dicts and the run directory only.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from tts_knee.analysis import knee as knee_mod, openloop, slo as slo_mod, voices as voice_sweep
from tts_knee.analysis.levels import levels as pool_levels
from tts_knee.analysis.steps import step_stats
from tts_knee.runformat.metric_roles import ServerNames
from tts_knee.runformat.reader import TTFA_FLOOR_MS, RunDir
from tts_knee.runformat.summary import Knee, SloVerdict, StepSummary

from .inputs.trace import REFINE_TO as TRACE_REFINE_TO

__all__ = ["CONCURRENCY", "Axis", "Planned", "RateAxis", "SpeedAxis", "StepPlan", "StepReader", "VoiceAxis"]
log = logging.getLogger("tts_knee.plan")


class Axis:
    """What a plan's steps stand at: the key of a step dict that holds a step's level, how a
    level reads, how a step is judged against the SLO and by the knee rule, and when a
    bisection has found its answer. This one is the concurrency of a closed loop."""

    key = "concurrency"
    noun = "concurrency"
    open_loop = False  # its steps offer a rate: judged on latency from the schedule

    def text(self, level) -> str:
        return str(level)

    def label(self, level) -> str:
        return f"concurrency {level}"

    def level(self, stats: StepSummary) -> float:
        """Where a step's figures (or a pooled level's) stand on this axis."""
        return stats["concurrency"]

    def judge(self, slo: slo_mod.SLO, stats: StepSummary) -> SloVerdict:
        return slo_mod.judge(slo, stats)

    def close_enough(self, passing, failing) -> bool:
        """Whether the answer, between ``passing`` (0: nothing passes) and ``failing``, is found."""
        return failing - passing <= 1

    def midpoint(self, passing, failing):
        return (passing + failing) // 2

    def past_knee(self, steps: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> tuple[bool, str]:
        """Whether this pass's latest step is past the knee rule, and the figures why."""
        done = [step for step in steps if step.get("requests")]
        if done and not steps[-1].get("requests"):
            return True, "is past the knee (not one request finished in it)"
        if len(done) < 2:
            return False, ""
        knee = self.knee(done, streamed, ttfa_floor_ms)
        if knee["index"] is None:
            return False, ""
        base = done[0].get("attempt_failure_rate") or 0.0
        fails = done[-1].get("attempt_failure_rate")
        if knee["streamed"]:
            under = done[-1].get("underrun_rate")
            if under is not None and under >= knee_mod.UNDERRUN_RATE:
                return True, f"is past the knee ({under:.0%} of streams underrun)"
            rise = knee_mod.inflation(done, (("ttfa_ms", "p95"),))[-1]
            ttfa_ms = done[-1].get("ttfa_ms")
            ttfa = None if ttfa_ms is None else ttfa_ms.get("p95")
            if rise is not None and rise > knee_mod.LATENCY_RISE and (ttfa is None or ttfa > ttfa_floor_ms):
                return True, f"is past the knee (TTFA p95 {_ratio(rise)} the lowest step's)"
        else:
            rise = knee_mod.inflation(done)[-1]
            if rise is not None and rise > knee_mod.LATENCY_RISE:
                return True, f"is past the knee (latency {_ratio(rise)} the lowest step's)"
        if fails is not None and fails >= knee_mod.FAILURE_RATE and fails - base >= knee_mod.FAILURE_RATE:
            return True, f"is past the knee ({fails:.0%} of attempts fail)"
        return False, ""

    def knee(self, steps: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> Knee:
        return knee_mod.find_knee(steps, streamed, ttfa_floor_ms)


class RateAxis(Axis):
    """The offered rate of an open loop (req/s): judged on latency from the schedule, bisected
    until the gap is at most ``refine_to``: that fraction of the passing rate when ``relative``
    (of the lowest grid rate while nothing passes), else that many req/s."""

    key = "rate"
    noun = "rate"
    open_loop = True

    def __init__(self, refine_to: float = 0.05, relative: bool = True, lowest: float = 1.0):
        self.refine_to, self.relative, self.lowest = refine_to, relative, lowest

    def text(self, level) -> str:
        return f"{level:g} req/s"

    def label(self, level) -> str:
        return self.text(level)

    def level(self, stats: StepSummary) -> float:
        return stats["rate"]

    def judge(self, slo: slo_mod.SLO, stats: StepSummary) -> SloVerdict:
        return openloop.judge(slo, stats)

    def close_enough(self, passing, failing) -> bool:
        if not self.relative:
            return failing - passing <= self.refine_to
        return failing - passing <= self.refine_to * (passing or self.lowest)

    def midpoint(self, passing, failing):
        return (passing + failing) / 2

    def past_knee(self, steps: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> tuple[bool, str]:
        return openloop.past_knee(steps)


class SpeedAxis(RateAxis):
    """The rates of a trace replay, named as speeds of the trace (``2x (10 req/s)``) and
    bisected on a grid of ``TRACE_REFINE_TO`` speeds."""

    noun = "speed"

    def __init__(self, base_rps: float):
        super().__init__(TRACE_REFINE_TO * base_rps, relative=False, lowest=base_rps)
        self.base = base_rps

    def speed(self, rate: float) -> float:
        return round(rate / self.base, 6)

    def text(self, level) -> str:
        return f"{self.speed(level):g}x ({level:.3g} req/s)"

    def close_enough(self, passing, failing) -> bool:
        return self.speed(failing) - self.speed(passing) <= TRACE_REFINE_TO + 1e-9

    def midpoint(self, passing, failing):
        """A speed on the ``TRACE_REFINE_TO`` grid strictly between ``passing`` and ``failing``, as a rate."""
        passing_units, failing_units = self.speed(passing) / TRACE_REFINE_TO, self.speed(failing) / TRACE_REFINE_TO
        grid_units = math.floor((passing_units + failing_units) / 2 + 1e-9)
        grid_units = min(max(grid_units, math.floor(passing_units + 1e-9) + 1), math.ceil(failing_units - 1e-9) - 1)
        return round(grid_units * TRACE_REFINE_TO, 6) * self.base


class VoiceAxis(Axis):
    """The number of distinct voices at one load (``--voice-steps``): a concurrency, or a rate
    when ``open_loop``, whose SLO and knee rule judge each step; bisected to adjacent numbers."""

    key = "voices"
    noun = "number of voices"

    def __init__(self, open_loop: bool = False):
        self.open_loop = open_loop

    def text(self, level) -> str:
        return f"{level} voice{'' if level == 1 else 's'}"

    def label(self, level) -> str:
        return self.text(level)

    def level(self, stats: StepSummary) -> float:
        return stats["voices"]

    def judge(self, slo: slo_mod.SLO, stats: StepSummary) -> SloVerdict:
        return openloop.judge(slo, stats) if self.open_loop else slo_mod.judge(slo, stats)

    def past_knee(self, steps: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> tuple[bool, str]:
        if self.open_loop:
            return openloop.past_knee(steps)
        return super().past_knee(steps, streamed, ttfa_floor_ms)

    def knee(self, steps: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> Knee:
        return voice_sweep.find_knee(steps, streamed, ttfa_floor_ms)


CONCURRENCY = Axis()


@dataclass(frozen=True)
class Planned:
    """One step the plan asks for."""

    level: float  # where it stands on the plan's axis: a concurrency, an offered rate
    phase: str  # one of runformat.PHASES
    repeat: int  # 1-based pass over the grid; refine probes run once, as repeat 1
    hold_s: float | None = None  # how long it lasts; None: --step-time (or the phase's own rule)


class StepPlan:
    """The grid, then refinement; :meth:`next` asks what to run, :meth:`finish` reports a
    judged step. ``decisions`` and ``verdicts`` go into run.json's ``plan``."""

    def __init__(
        self,
        grid,
        repeat: int = 1,
        slo: slo_mod.SLO | None = None,
        refine: bool = False,
        stop_past_knee: bool = False,
        streamed: bool = False,
        ttfa_floor_ms: float = TTFA_FLOOR_MS,
        axis: Axis = CONCURRENCY,
        judge: bool = False,
    ):
        if refine and slo is None:
            raise ValueError("refine needs an SLO")
        self.grid = tuple(grid)
        self.axis = axis
        self.repeats = repeat
        # the ASR judge's terms are judged after the run (its verdicts come after the step): live,
        # the plan judges the rest, and refines only on them
        self.slo = slo_mod.live(slo) if slo is not None else None
        self.refine = refine and self.slo is not None
        self.stop_past_knee = stop_past_knee
        self.streamed, self.ttfa_floor_ms = streamed, ttfa_floor_ms
        self.judge = judge  # judge every step even without an SLO or decisions (a soak follows)
        self.decisions: list[dict[str, Any]] = []
        self.verdicts: list[dict[str, Any]] = []  # one per judged step, in the order run
        self._pooled: dict[float, dict[str, Any]] = {}  # level -> verdict on the pooled steps, where several
        self._phase = "grid"
        self._repeat, self._index = 1, 0  # the grid position handed out next
        self._pass_steps: list[StepSummary] = []  # this pass's judged grid steps (for the knee rule)
        # the previous judged grid step of this pass (its run.json entry), if it failed
        self._last_failed: dict[str, Any] | None = None
        self._last_step: int | None = None

    @property
    def judging(self) -> bool:
        """Whether steps need judging at all (an SLO to show, decisions to take, or a soak to
        choose a level for)."""
        return self.judge or self.slo is not None or self.stop_past_knee

    def next(self) -> Planned | None:
        """The step to run next, or None when the plan is done."""
        while self._phase == "grid":
            if self._index < len(self.grid):
                self._index += 1
                return Planned(self.grid[self._index - 1], "grid", self._repeat)
            if self._repeat < self.repeats:
                self._repeat, self._index = self._repeat + 1, 0
                self._pass_steps, self._last_failed = [], None
                continue
            self._phase = "refine" if self.refine else "done"
        if self._phase == "refine":
            probe = self._probe()
            if probe is not None:
                return Planned(probe, "refine", 1)
            self._phase = "done"
        return None

    def finish(
        self, step: dict[str, Any], stats: StepSummary, unanswered: int = 0, levels: list[StepSummary] | None = None
    ) -> dict[str, Any] | None:
        """Take the figures of a step that ended (``step``: its run.json entry with ``phase``,
        ``repeat`` and its level under the axis's key; ``stats``: ``analysis.steps.step_stats``
        over what it sent before its end, with the open-loop figures for a rate; ``unanswered``:
        requests it sent that had no record when it was judged; ``levels``: the judged steps
        pooled per level, ``StepReader.levels``, when a level has been tested more than once).
        Returns the step's SLO verdict (None without an SLO)."""
        axis, key = self.axis, self.axis.key
        self._last_step = step["step"]
        slo = self.slo
        if levels is not None and slo is not None:
            self._pooled = {
                axis.level(level): self._level_verdict(slo, level) for level in levels if level.get("repeats", 1) > 1
            }
        verdict = None
        where = f"step {step['step']} ({axis.label(step[key])}, {_label(step)})"
        if slo is not None:
            judged = axis.judge(slo, stats)
            verdict = {
                "step": step["step"],
                key: step[key],
                "phase": step["phase"],
                "repeat": step["repeat"],
                "pass": judged["pass"],
                "failed": judged["failed"],
                "inconclusive": judged["inconclusive"],
                "requests": stats.get("requests"),
                "unanswered": unanswered,
                "steps": [step["step"]],
            }
            self.verdicts.append(verdict)
            log.info("%s %s", where, _verdict_text(verdict))
        if step["phase"] != "grid" or not self.stop_past_knee:
            return verdict
        if verdict is not None:  # judged against the SLO
            if verdict["pass"] is None:
                return verdict  # inconclusive: neither stops the pass nor confirms a failure
            failed, why = verdict["pass"] is False, "fails the SLO"
        else:
            self._pass_steps.append(stats)
            failed, why = axis.past_knee(self._pass_steps, self.streamed, self.ttfa_floor_ms)
        prev = self._last_failed
        if failed and prev is not None and self._index < len(self.grid):
            skipped = list(self.grid[self._index :])
            self._index = len(self.grid)
            more = f"; pass {self._repeat + 1} of {self.repeats} follows" if self._repeat < self.repeats else ""
            which = (
                "the step before it"
                if prev["step"] == step["step"] - 1
                else f"step {prev['step']} ({axis.label(prev[key])})"
            )
            self._decide(
                "stop",
                f"step {step['step']} ({axis.label(step[key])}) {why}, confirming "
                f"{which}: the rest of the grid ({_levels(axis, skipped)}) is skipped{more}",
                skipped=skipped,
            )
        self._last_failed = step if failed else None
        return verdict

    def level_verdicts(self) -> list[dict]:
        """One verdict per tested level, ascending: the step's own, or the pooled one for a
        level tested more than once."""
        key = self.axis.key
        by_level: dict = {}
        for verdict in self.verdicts:
            by_level[verdict[key]] = verdict
        by_level.update(self._pooled)
        return [by_level[level] for level in sorted(by_level)]

    def levels(self) -> dict:
        """Per tested level: True (meets the SLO), False (fails it) or None (inconclusive)."""
        return {verdict[self.axis.key]: verdict["pass"] for verdict in self.level_verdicts()}

    def max_level(self):
        """The highest level that meets the SLO with every lower one meeting it, or None."""
        return slo_mod.max_level(self.level_verdicts(), self.axis.key)

    def _level_verdict(self, slo: slo_mod.SLO, level: StepSummary) -> dict[str, Any]:
        judged = self.axis.judge(slo, level)
        key = self.axis.key
        return {
            key: self.axis.level(level),
            "pass": judged["pass"],
            "failed": judged["failed"],
            "inconclusive": judged["inconclusive"],
            "steps": list(level["steps"]),
        }

    def _probe(self):
        """The next refine probe, or None once the answer is found (decisions logged)."""
        axis = self.axis
        levels = self.levels()
        if not levels:
            return None
        passing = self.max_level() or 0
        above = sorted(level for level in levels if level > passing)
        if not above:
            self._decide(
                "done",
                f"every tested {axis.noun} up to {axis.text(passing)} meets the SLO; nothing to "
                f"refine (test higher to find the limit)",
                answer=passing,
            )
            return None
        failing = min(above)
        fails = (
            f"{axis.text(failing)} is inconclusive, which counts as failing"
            if levels[failing] is None
            else f"{axis.text(failing)} fails"
        )
        if axis.close_enough(passing, failing):
            if passing:
                why = (
                    f"{axis.text(passing)} meets the SLO and {fails}: the highest {axis.noun} that meets it is "
                    f"{axis.text(passing)}"
                )
            else:
                why = f"{fails} and is the lowest {axis.noun}: none meets the SLO"
            self._decide("done", why, answer=passing or None)
            return None
        probe = axis.midpoint(passing, failing)
        passes = f"{axis.text(passing)} meets the SLO" if passing else "nothing tested meets the SLO"
        self._decide("refine", f"{passes} and {fails}: bisecting at {axis.text(probe)}", **{axis.key: probe})
        return probe

    def _decide(self, action: str, why: str, **extra) -> None:
        decision = {"after_step": self._last_step, "action": action, **extra, "why": why}
        self.decisions.append(decision)
        log.info("plan after step %s: %s — %s", self._last_step, action, why)

    def describe(self) -> dict:
        """run.json's ``plan``."""
        key = self.axis.key
        out = {
            "grid": list(self.grid),
            "repeat": self.repeats,
            "slo": self.slo.spec if self.slo else None,
            "refine": self.refine,
            "stop_past_knee": self.stop_past_knee,
            "decisions": self.decisions,
            "verdicts": self.verdicts,
        }
        if self.slo is not None:
            out["levels"] = [
                {field: verdict[field] for field in (key, "pass", "failed", "inconclusive", "steps")}
                for verdict in self.level_verdicts()
            ]
            out["max_" + key] = self.max_level()
        return out

    def verdict_of(self, step: int) -> dict | None:
        return next((verdict for verdict in self.verdicts if verdict["step"] == step), None)


def _label(step: dict) -> str:
    return "refine" if step["phase"] == "refine" else f"grid pass {step['repeat']}"


def _levels(axis: Axis, levels) -> str:
    return ", ".join(map(axis.text, levels))


def _ratio(rise: float) -> str:
    return "no successful request, unlike" if rise == float("inf") else f"{rise:.1f}x"


def _verdict_text(verdict: dict) -> str:
    note = f" ({verdict['unanswered']} requests still unanswered were left out)" if verdict.get("unanswered") else ""
    if verdict["pass"] is True:
        return f"meets the SLO over {verdict['requests']} requests{note}"
    if verdict["pass"] is False:
        return f"fails the SLO: {'; '.join(verdict['failed'])}{note}"
    return f"is inconclusive against the SLO: {'; '.join(verdict['inconclusive'])}{note}"


class StepReader:
    """Judged steps' figures from the run directory as the master has written it so far, with
    the dashboard's own definitions. One incremental reader: each call parses only new bytes.
    ``axis`` says what a step stands at, so that repeats are pooled per level; ``names`` what
    ``--server-role`` and ``--server-stage-label`` said the server's series mean."""

    def __init__(self, run_dir: Path, axis: Axis = CONCURRENCY, names: ServerNames | None = None):
        self.rundir = RunDir(Path(run_dir))
        self.axis = axis
        self.names = names
        self._judged: dict[int, tuple[StepSummary, float]] = {}  # step -> (its figures, its cut-off)

    def refresh(self) -> None:
        self.rundir.refresh()

    def stats(self, step: dict[str, Any], cutoff: float, settle_s: float) -> StepSummary:
        """``step_stats`` of ``step`` as if it had ended at ``cutoff``, over the attempts sent
        before it: the step's requests sent past the cut-off are not in the set, so what is
        judged does not depend on how long the judging took; those sent before it count, in a
        streamed run too, however late they ended. A rate step (``step`` with its ``rate`` and
        ``dropped``) gets its open-loop figures too."""
        self.rundir.refresh()
        attempts = self.rundir.requests.attempts()
        attempts = attempts.subset(attempts["t0"] < cutoff)  # NaN (no t0) is left out
        # Every stream sent before the cut-off counts: the load stayed at this step's level
        # until they ended (the shape waits for them), so none heard the next step's.
        entry = {
            "step": step["step"],
            "concurrency": step["concurrency"],
            "start": step["start"],
            "end": cutoff,
            "streams_end": None,
        }
        out = step_stats(attempts, entry, self.rundir.resources, settle_s=settle_s, names=self.names)
        if step.get("voices") is not None:
            out["voices"] = step["voices"]
        if step.get("rate") is not None:  # the open-loop figures: keys of a step's summary, as open JSON
            cast(dict[str, Any], out).update(
                openloop.step_figures(
                    attempts,
                    dict(entry, rate=step["rate"], dropped=step.get("dropped"), offered_rps=step.get("offered_rps")),
                    out,
                )
            )
        self._judged[step["step"]] = (out, cutoff)
        return out

    def repeated(self) -> bool:
        """Whether some level has been judged more than once."""
        levels = [self.axis.level(stats) for stats, _ in self._judged.values()]
        return len(set(levels)) < len(levels)

    def levels(self, settle_s: float) -> list[StepSummary]:
        """The judged steps pooled per level as the dashboard pools them (``analysis.levels``),
        each over what it sent before its cut-off, every stream of it counted as in :meth:`stats`."""
        attempts = self.rundir.requests.attempts()
        sent_before_cutoff = np.isfinite(attempts["t0"])
        for step_number, (_, cutoff) in self._judged.items():
            sent_before_cutoff &= ~((attempts["step"] == step_number) & (attempts["t0"] >= cutoff))
        return pool_levels(
            attempts.subset(sent_before_cutoff),
            [stats for stats, _ in self._judged.values()],
            self.rundir.resources,
            settle_s,
            key=self.axis.key,
            figures=openloop.level_figures if self.axis.open_loop else None,
            names=self.names,
        )
