"""The run as the report draws it, built once from its summary and handed to every section: the
axis its steps stand on (a concurrency, an offered rate or a number of distinct voices, as
:func:`analysis.axis.of_summary` reads it) with its title and each step's place and label on it,
whether the load was offered open loop, whether the run was judged as streams, and what the
speech judge scored. No section asks the summary again what kind of run it was."""

from __future__ import annotations

from dataclasses import dataclass

from tts_knee.analysis.axis import Key, of_summary
from tts_knee.runformat.summary import StepSummary, Summary

from .kit import LevelAxis

#: The title of a per-step figure's x axis (and of a table's level column), by the steps' axis.
AXIS_TITLES: dict[Key, str] = {
    "concurrency": "concurrency",
    "rate": "offered rate (req/s)",
    "voices": "distinct voices",
}
#: What one level of the axis is called in a sentence.
LEVEL_NOUNS: dict[Key, str] = {"concurrency": "concurrency", "rate": "offered rate", "voices": "number of voices"}


@dataclass(frozen=True)
class RunView:
    """One run as every section of the report reads it (:meth:`of` builds it)."""

    summary: Summary
    key: Key  # the step field the steps stand on: "concurrency", "rate" or "voices"
    axis: LevelAxis  # how a figure draws it, titled
    open_loop: bool  # offered as rates (--rates): an attempt's concurrency is what was in flight
    streamed: bool  # judged as streams, on underruns and TTFA rather than whole-body time
    speech_metric: str | None  # "wer" or "cer" where the speech judge judged any step, else None
    executed: list[StepSummary]  # the steps that ran requests, in run order: a per-step figure's points
    labels: dict[int | None, str]  # each step's label on the axis (``4``, an offered rate ``2.5``), by its number

    @classmethod
    def of(cls, summary: Summary) -> RunView:
        axis = of_summary(summary)
        return cls(
            summary=summary,
            key=axis.key,
            axis=LevelAxis(AXIS_TITLES[axis.key]),
            open_loop=axis.open_loop,
            streamed=bool(summary["knee"].get("streamed")),
            speech_metric=speech_metric(summary),
            executed=[step for step in summary["steps"] if step.get("requests")],
            labels={step["step"]: _label(step.get(axis.key), axis.key) for step in summary["steps"]},
        )

    @property
    def voice_sweep(self) -> bool:
        """Whether the steps swept the number of distinct voices at one load (``--voice-steps``)."""
        return self.key == "voices"

    @property
    def level_noun(self) -> str:
        return LEVEL_NOUNS[self.key]

    @property
    def knee(self) -> float | None:
        """The knee along the axis (None: none found)."""
        return self.summary["knee"][self.key]

    @property
    def recommended(self) -> float | None:
        """The recommendation along the axis."""
        if self.key == "rate":
            return self.summary.get("recommended_rate")
        if self.key == "voices":
            return self.summary.get("recommended_voices")
        return self.summary["recommended_concurrency"]

    @property
    def slo_met_to(self) -> float | None:
        """The highest level that meets the SLO with every lower one (None: none does, or no SLO)."""
        slo = self.summary.get("slo")
        if not slo:
            return None
        if self.key == "rate":
            return slo.get("max_rate")
        return slo.get("max_voices") if self.key == "voices" else slo["max_concurrency"]


def _label(level: float | None, key: Key) -> str:
    """A level as per-step figures and tables name it: ``4``, an offered rate ``2.5`` (not 2.5000)."""
    return f"{level:g}" if key == "rate" and level is not None else str(level)


def speech_metric(summary: Summary) -> str | None:
    """``wer`` or ``cer`` where the speech judge judged any step, else None."""
    return next(
        (speech["metric"] for step in summary["steps"] if (speech := step.get("speech")) and speech.get("judged")), None
    )
