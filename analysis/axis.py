"""The axis a run's steps stand on, and what the analysis does differently along it.

Three axes, one object each, chosen once per run (:func:`of_run`):

- ``CONCURRENCY``: a closed loop (``--steps``), each step at a number of users
  (:mod:`analysis.knee`, :mod:`analysis.closedloop`);
- ``RATE``: an open loop (``--rates``, and a trace replayed at its speeds), each step at an
  offered rate (:mod:`analysis.openloop`);
- ``VOICES`` (closed loop) and ``VOICES_AT_RATE`` (open loop): a voice sweep
  (``--voice-steps``), each step at a number of distinct voices (:mod:`analysis.voices`).

:func:`analysis.summary.analyze` asks the axis for the levels, the knee, the recommendation and
the diagnosis, and never which axis it is. What holds on one axis holds on every one: the speech
knee (:meth:`Axis.speech_knee`, ``--asr-model``; its ``similarity`` and ``mos`` methods too,
unless ``--asr-words-only``) is judged along whichever axis the run swept.
The dashboard draws its report along the same axis (``knee.axis`` and ``run.mode`` of the
summary, :func:`of_summary`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import pandas as pd

from tts_knee.runformat.metric_roles import ServerNames
from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import Diagnosis, Knee, LittleLaw, MemoryCreep, Slo, StepSummary, Usl

from . import closedloop, openloop, speech as speech_mod, voices as voice_sweep
from .diagnosis import diagnose
from .knee import find_knee, little_check, usl_fit
from .levels import levels as group_levels
from .steps import PlannedStep

Key = Literal["concurrency", "rate", "voices"]


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What the run recommends: the concurrency (every axis has one: the knee's, the one a rate
    implies, the one a voice sweep ran at), the rate (open loop) or number of voices (voice
    sweep) it stands at, and why, in words."""

    concurrency: int | None
    text: str
    rate: float | None = None
    voices: int | None = None

    def on(self, key: Key) -> float | int | None:
        """The recommended value along the axis ``key``."""
        return {"concurrency": self.concurrency, "rate": self.rate, "voices": self.voices}[key]


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis: ``key`` is the step field that names a level (``concurrency``, ``rate`` or
    ``voices``), ``open_loop`` whether the load was offered as a rate (latency then counts from
    the schedule)."""

    key: Key
    open_loop: bool

    @property
    def slo_key(self) -> str:
        """The field an SLO verdict stands at (an open loop's verdicts carry their ``rate`` too)."""
        return "voices" if self.key == "voices" else "concurrency"

    def view(self, levels: list[StepSummary]) -> list[StepSummary]:
        """The levels as :mod:`analysis.diagnosis` reads a level: each standing (as its
        ``concurrency``) at its offered rate with its latency from the schedule, or at its number
        of voices."""
        if self.key == "rate":
            return openloop.at_rates(levels)
        return voice_sweep.on_axis(levels) if self.key == "voices" else levels

    def said(self, diagnosis: Diagnosis) -> Diagnosis:
        """A diagnosis written for concurrency (on :meth:`view`'s levels), said along the axis."""
        if self.key == "rate":
            diagnosis["evidence"] = openloop.reword(diagnosis["evidence"])
        return diagnosis

    def step_figures(self, attempts: Attempts, plan: list[PlannedStep], steps: list[StepSummary]) -> None:
        """Add what an open loop measures on top of every step's figures (in place)."""
        if self.open_loop:
            for step, planned in zip(steps, plan):
                cast(dict[str, Any], step).update(openloop.step_figures(attempts, planned, step))

    def levels(
        self,
        attempts: Attempts,
        judged: list[StepSummary],
        resources: pd.DataFrame,
        settle: float | None,
        streamed: bool,
        names: ServerNames,
        users: dict[str, Any],
    ) -> list[StepSummary]:
        """One level per tested value along the axis, ascending, repeats pooled."""
        figures = openloop.level_figures if self.open_loop else None
        if self.key == "voices":
            done = group_levels(
                attempts, judged, resources, settle, key="voices", figures=figures, streamed=streamed, names=names
            )
            # at one rate, latency counts from the schedule, as the rate's own rules have it
            return (
                [openloop.judged(level) if level.get("sched_wait_ms") else level for level in done]
                if self.open_loop
                else done
            )
        if self.key == "rate":
            return group_levels(
                attempts, judged, resources, settle, key="rate", figures=figures, streamed=streamed, names=names
            )
        return group_levels(attempts, judged, resources, settle, streamed=streamed, names=names, **users)

    def find_knee(self, done: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> Knee:
        if self.key == "voices":
            return voice_sweep.find_knee(done, streamed, ttfa_floor_ms)
        if self.key == "rate":
            return openloop.find_knee(done)
        return find_knee(done, streamed, ttfa_floor_ms)

    def speech_knee(self, knee: Knee, levels: list[StepSummary]) -> Knee:
        """The knee with the speech method (:func:`analysis.speech.knee_index`) among its rules,
        and with listening (``--asr-model`` unless ``--asr-words-only``) the ``similarity`` and ``mos`` methods
        (:func:`analysis.speech.drop_index`): a level whose speech is significantly worse than the
        lowest's is a knee like a latency one, and the earliest of them is the knee.
        ``speech_first``: speech broke before latency (and failures) did; ``speech_changed``: the
        listening methods that name the knee."""
        done = [level for level in levels if level.get("requests")]
        # the speech judges read the levels as open JSON (they are shared with the dashboard's)
        heard_levels = cast(list[dict[str, Any]], done)
        k_words, rises = speech_mod.knee_index(heard_levels)
        k_voice, sim_drops = speech_mod.drop_index(heard_levels, "similarity")
        k_sound, mos_drops = speech_mod.drop_index(heard_levels, "mos")
        found = {"speech": k_words, "similarity": k_voice, "mos": k_sound}
        listened = {name: drops for name, drops in (("similarity", sim_drops), ("mos", mos_drops)) if drops}
        heard = ["speech", *listened]
        found_at = [level_index for level_index in (found[name] for name in heard) if level_index is not None]
        knee_index = min(found_at) if found_at else None
        # the listening methods' keys are made from their names: the checker cannot follow them
        knee = cast(
            Knee,
            dict(
                knee,
                **{f"{name}_drop": [_interval(drop) for drop in drops] for name, drops in listened.items()},
                methods={
                    **knee["methods"],
                    **{
                        name: done[level_index][self.key] if (level_index := found[name]) is not None else None
                        for name in heard
                    },
                },
                rules=[*knee["rules"], *heard],
                speech_changed=[name for name in heard if knee_index is not None and found[name] == knee_index],
                speech_rise=[_interval(rise) for rise in rises],
            ),
        )
        latency = method_index(
            knee,
            done,
            [rule for rule in knee["rules"] if rule not in ("signal", "speech", "similarity", "mos")],
            self.key,
        )
        if knee_index is not None and (knee["index"] is None or knee_index < knee["index"]):
            knee["index"] = knee_index
            knee[self.key] = done[knee_index][self.key]
        knee["speech_first"] = knee_index is not None and (latency is None or knee_index < latency)
        knee["agree"] = [
            name for name, named in knee["methods"].items() if named is not None and named == knee[self.key]
        ]
        return knee

    def recommend(self, done: list[StepSummary], knee: Knee) -> Recommendation:
        """The recommendation from the knee."""
        if self.key == "voices":
            voices, text = voice_sweep.recommend(done, knee)
            return Recommendation(knee["concurrency"], text, self._rate(done), voices)
        if self.key == "rate":
            rate, concurrency, text = openloop.recommend(done, knee)
            return Recommendation(concurrency, text, rate)
        return Recommendation(*closedloop.recommend(done, knee))

    def recommend_slo(
        self, done: list[StepSummary], slo: Slo, spec: str, knee: Knee, by_knee: Recommendation
    ) -> Recommendation:
        """The recommendation from the SLO's verdicts ``slo`` (the summary's ``slo`` section)."""
        if self.key == "voices":
            best = slo["max_voices"]
            text = voice_sweep.recommend_slo(done, slo["steps"], spec, best, knee["voices"])
            return Recommendation(by_knee.concurrency, text, by_knee.rate, best)
        if self.key == "rate":
            concurrency, text = openloop.recommend_slo(done, slo["steps"], spec, slo["max_rate"])
            if knee["rate"] is not None:
                text += f" The knee is at {knee['rate']:g} req/s."
            return Recommendation(concurrency, text, slo["max_rate"])
        best = slo["max_concurrency"]
        return Recommendation(best, closedloop.recommend_slo(done, slo["steps"], spec, best, knee["concurrency"]))

    def _rate(self, done: list[StepSummary]) -> float | None:
        return done[0].get("rate") if self.open_loop and done else None

    def diagnose(
        self, done: list[StepSummary], knee: Knee, creep: MemoryCreep | None, has_resources: bool
    ) -> Diagnosis:
        if self.key == "voices":
            return voice_sweep.diagnose(done, knee, creep, has_resources)
        if self.key == "rate":
            return openloop.diagnose(done, knee, creep, has_resources)
        return diagnose(done, knee, creep, has_resources)

    def little_law(self, done: list[StepSummary]) -> list[LittleLaw] | None:
        """Little's law's cross-check of a closed loop's users (None when the load was a rate)."""
        return None if self.open_loop else little_check(done)

    def usl(self, done: list[StepSummary]) -> Usl | None:
        """The Universal Scalability Law's fit over concurrency (None on any other axis)."""
        return usl_fit(done) if self.key == "concurrency" else None


def _interval(change: dict[str, Any] | None) -> dict[str, Any] | None:
    """A paired change as the knee keeps it (rounded), None where the level was not judged."""
    return (
        None
        if change is None
        else {
            "pairs": change["pairs"],
            "mean": round(change["mean"], 4),
            "ci": [round(bound, 4) for bound in change["ci"]],
        }
    )


def method_index(knee: Knee, done: list[StepSummary], names: list[str], key: Key = "concurrency") -> int | None:
    """The first level (index into ``done``) any of the knee's methods ``names`` names (a level's
    ``key``: its concurrency, rate or number of voices), or None."""
    named = {knee["methods"].get(name) for name in names} - {None}
    return next((index for index, level in enumerate(done) if level[key] in named), None)


CONCURRENCY = Axis("concurrency", open_loop=False)
RATE = Axis("rate", open_loop=True)
VOICES = Axis("voices", open_loop=False)
VOICES_AT_RATE = Axis("voices", open_loop=True)


def of_run(plan: list[PlannedStep], mode: str) -> Axis:
    """The axis of a run whose steps are ``plan`` (the checked run.json steps) and whose run.json
    mode is ``mode``."""
    open_loop = mode == "open"
    if voice_sweep.is_sweep(plan):
        return VOICES_AT_RATE if open_loop else VOICES
    return RATE if open_loop else CONCURRENCY


def of_summary(summary: Mapping[str, Any]) -> Axis:
    """The axis a summary (``summary.json``) was analysed along."""
    open_loop = summary["run"]["mode"] == "open"
    if (summary.get("knee") or {}).get("axis") == "voices":
        return VOICES_AT_RATE if open_loop else VOICES
    return RATE if open_loop else CONCURRENCY
