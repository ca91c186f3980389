"""Name the stage of a pipeline that broke at the knee (``diagnosis.stage``).

A server of two stages or more (``server.stages``: Triton's models, vLLM-Omni's stages; see
:mod:`analysis.server_metrics`) is judged stage by stage at the knee step:

- each stage's queue is measured by its queue time per request (``queue_ms``) where every stage
  publishes one, else by its queue depth (``queue_depth``); its rise is from the lowest step
  that carries the stage (a stage is counted from its first sample) to the knee step;
- the stage whose queue rose most broke first when that rise is at least ``QUEUE_RISE_MS``
  (``QUEUE_RISE_REQUESTS``) while every other stage held: its queue rose by at most
  ``HELD_SHARE`` of that, and it did not run at its own limit (its requests in compute on
  average, ``busy``, or else its mean running, at least ``BUSY_SHARE`` of the most its running
  gauge showed up to the knee: a balanced pipeline, where adding to the first stage only moves
  the queue to the next);
- with no queue rising, a single stage running at its limit is the one;
- otherwise no stage is singled out, and the sentence says why; stages past the cap are said.

The sentence quotes the queue before and at the knee, the others', the stage's work (its running
requests, or Triton's compute time per second: the instances busy) and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, cast

from tts_knee.runformat.summary import ServerRole, StageRoles, StepSummary

QUEUE_RISE_MS = 20.0  # a stage's queue time must rise at least this much to have broken
QUEUE_RISE_REQUESTS = 0.5  # or its mean queue depth, where no queue time is published
HELD_SHARE = 0.25  # another stage held when its queue rose by at most this share of the breaking one's
BUSY_SHARE = 0.8  # a stage runs at its limit when its mean running requests are this share of their max
MOST_NAMED = 3  # other stages quoted by name; more are summed up
#: What adds to a stage, by the label that tells the stages apart.
MORE_OF = {"model": "instances", "stage": "replicas"}

Measure = Literal["queue_ms", "queue_depth"]


class Named(NamedTuple):
    """The verdict on the stages: the one that broke (its label's value) or None, and the evidence."""

    stage: str | None
    evidence: list[str]


class _Stage(NamedTuple):
    name: str
    at_knee: StageRoles
    at_base: StageRoles
    base_level: int  # the concurrency (or level) of the lowest step that carries it
    limit: float | None  # the most its running gauge showed up to the knee step


def _role(stage: StageRoles, role: str) -> ServerRole | None:
    return cast(Mapping[str, ServerRole], stage).get(role)


def _mean(stage: StageRoles, role: str) -> float | None:
    found = _role(stage, role)
    return None if found is None else found.get("mean")


def _stages_of(step: StepSummary) -> dict[str, StageRoles]:
    server = step.get("server")
    return (server.get("stages") if server else None) or {}


def verdict(steps: list[StepSummary], knee_index: int, saturated: bool | None) -> Named | None:
    """The stage that broke at the knee step ``steps[k]`` and the evidence (see the module doc);
    None where that step has no stages."""
    at_knee = _stages_of(steps[knee_index])
    server = steps[knee_index].get("server")
    if not at_knee or not server:
        return None
    level = steps[knee_index]["concurrency"]
    stages = []
    for name, figures in at_knee.items():
        # from the first step that carries the stage (the knee step at the latest)
        carrying = [stage for stage in steps[: knee_index + 1] if name in _stages_of(stage)]
        tops = [
            top
            for stage in carrying
            if (running := _role(_stages_of(stage)[name], "running")) is not None
            and (top := running.get("max")) is not None
        ]
        first = carrying[0]
        stages.append(_Stage(name, figures, _stages_of(first)[name], first["concurrency"], max(tops) if tops else None))
    named = _judge(stages, _Words(server.get("stage_label") or "stage", level, saturated))
    left_out = server.get("stages_left_out")
    if left_out:
        named.evidence.append(
            f"The server has {len(stages) + left_out} stages: the {len(stages)} busiest at {level} were judged, "
            f"{left_out} more left out."
        )
    return named


def _judge(stages: list[_Stage], words: _Words) -> Named:
    """Which of ``stages`` broke (see the module doc), in ``words``."""
    measure: Measure = (
        "queue_ms" if all(_mean(stage.at_knee, "queue_ms") is not None for stage in stages) else "queue_depth"
    )
    told = [stage for stage in stages if _mean(stage.at_knee, measure) is not None]
    if not told:
        return Named(None, [f"The server's {len(stages)} stages publish no queue, so none can be named."])
    rises = {stage.name: _rise(stage, measure) for stage in told}
    worst = max(told, key=lambda stage: rises[stage.name])
    enough = QUEUE_RISE_MS if measure == "queue_ms" else QUEUE_RISE_REQUESTS
    others = [stage for stage in told if stage is not worst]
    if rises[worst.name] < enough:
        return _no_queue(told, words, measure)
    queued = [stage for stage in others if rises[stage.name] > HELD_SHARE * rises[worst.name]]
    at_limit = [stage for stage in others if stage not in queued and _at_limit(stage)]
    if queued:
        return Named(None, [words.many_queued([worst, *queued], measure)])
    if at_limit:
        return Named(None, [words.balanced(worst, at_limit, measure)])
    return Named(worst.name, [words.broke(worst, others, measure)])


def _rise(stage: _Stage, measure: Measure) -> float:
    return max(0.0, (_mean(stage.at_knee, measure) or 0.0) - (_mean(stage.at_base, measure) or 0.0))


def _in_flight(stage: StageRoles) -> float | None:
    """The requests in the stage on average: its compute time per second, else its running gauge's mean."""
    busy = _mean(stage, "busy")
    return busy if busy is not None else _mean(stage, "running")


def _at_limit(stage: _Stage) -> bool:
    """Whether the stage ran at the most its running gauge ever showed (see the module doc)."""
    in_flight = _in_flight(stage.at_knee)
    return bool(stage.limit) and in_flight is not None and in_flight >= BUSY_SHARE * (stage.limit or 0.0)


def _no_queue(told: list[_Stage], words: _Words, measure: Measure) -> Named:
    """No stage's queue rose: the one stage running at its limit, if one alone did."""
    limited = [stage for stage in told if _at_limit(stage)]
    if len(limited) == 1:
        return Named(
            limited[0].name, [words.limited(limited[0], [stage for stage in told if stage is not limited[0]], measure)]
        )
    return Named(
        None,
        [
            f"No stage's queue rose at {words.level}: {words.listed(told, measure)}; the wait is not in a "
            f"queue of the server's stages."
        ],
    )


class _Words:
    """How the stage sentences say a stage, its queue and its work."""

    def __init__(self, label: str, level: Any, saturated: bool | None):
        self.label = label
        self.level = level
        self.saturated = saturated

    def name(self, stage: _Stage) -> str:
        return f"{self.label} {stage.name}"

    def queue(self, stage: _Stage, measure: Measure, at_base: bool = False) -> str:
        """ "2.5 waiting (503 ms each)": the mean queue and each request's time in it."""
        figures = stage.at_base if at_base else stage.at_knee
        depth, waited = _mean(figures, "queue_depth"), _mean(figures, "queue_ms")
        each = None if waited is None else f"{waited:.0f} ms each"
        if depth is None:
            return each or "n/a"
        return f"{depth:.1f} waiting" + (f" ({each})" if each else "")

    def listed(self, stages: list[_Stage], measure: Measure) -> str:
        if len(stages) > MOST_NAMED:
            top = max((_mean(stage.at_knee, measure) or 0.0) for stage in stages)
            unit = "ms a request" if measure == "queue_ms" else "requests"
            return f"the {len(stages)} stages' queues stayed at most {top:.1f} {unit}"
        return ", ".join(f"{self.name(stage)}'s {self.queue(stage, measure)}" for stage in stages)

    def work(self, stage: _Stage) -> str:
        """What the stage did at the knee: the requests in it against the most it ran, or (Triton:
        no running gauge) its compute time per second and the instances that keeps busy."""
        in_flight = _in_flight(stage.at_knee)
        if in_flight is not None and stage.limit:
            return f"{in_flight:.1f} requests in compute on average, of the {stage.limit:g} it ran at most"
        busy, batch = _mean(stage.at_knee, "busy"), _mean(stage.at_knee, "batch_size")
        if busy is not None:
            instances = busy / (batch if batch and batch > 0 else 1.0)  # an execution serves a batch
            whole = round(instances)
            at_whole = whole >= 1 and abs(instances - whole) <= 0.1 * whole
            return f"compute {busy:.2f} s of each second" + (
                f" ({'one instance' if whole == 1 else f'{whole} instances'} busy all the time)" if at_whole else ""
            )
        compute = _mean(stage.at_knee, "compute_ms")
        return "" if compute is None else f"compute {compute:.0f} ms a request"

    def remedy(self, stage: _Stage) -> str:
        more = MORE_OF.get(self.label, "instances")
        what = stage.name if self.label == "model" else self.name(stage)  # a Triton model by its name alone
        if self.saturated:
            return f"add {what} {more} on more hardware (the server's own is saturated)"
        return f"add {what} {more}"

    def broke(self, stage: _Stage, others: list[_Stage], measure: Measure) -> str:
        work = self.work(stage)
        return (
            f"{_cap(self.name(stage))}'s queue rose from {self.queue(stage, measure, at_base=True)} at "
            f"{stage.base_level} to {self.queue(stage, measure)} at {self.level} while the other stages' held "
            f"({self.listed(others, measure)})" + (f"; {work}" if work else "") + f": {self.remedy(stage)}."
        )

    def limited(self, stage: _Stage, others: list[_Stage], measure: Measure) -> str:
        return (
            f"No stage's queue rose at {self.level}, but {self.name(stage)} ran at its limit ({self.work(stage)}) "
            f"while the others did not ({self.listed(others, measure)}): {self.remedy(stage)}."
        )

    def balanced(self, stage: _Stage, limited: list[_Stage], measure: Measure) -> str:
        names = " and ".join(self.name(other) for other in limited)
        works = "; ".join(self.work(other) for other in limited)
        return (
            f"{_cap(self.name(stage))}'s queue rose to {self.queue(stage, measure)} at {self.level}, but {names} "
            f"ran at {'its' if len(limited) == 1 else 'their'} limit too ({works}): no one stage broke first, the "
            f"stages are balanced, and adding to {self.name(stage)} alone would move the queue to the next."
        )

    def many_queued(self, stages: list[_Stage], measure: Measure) -> str:
        return (
            f"Requests queued in more than one stage at {self.level} ({self.listed(stages, measure)}): no one "
            f"stage broke first."
        )


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]
