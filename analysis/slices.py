"""Slices: a run's figures per language and per voice, where its requests mix them.

A *slice* is the requests of a run that name one language (or one voice) in their records
(``language``, ``voice``). A run whose requests name at least two languages (two voices) gets
``slices.by_language`` (``by_voice``): per slice and level, the wait's p50 and p95, TTFA p95 and
the underrun share (streamed runs), failures, and what the judge heard (``speech.jsonl``, joined
to its request by ``req_id``). Each slice is judged by the very rules the pooled knee has, on the
same axis (:mod:`analysis.axis`: ``find_knee`` over the slice's own levels, then the speech
methods): a slice *breaks* at its own knee. When one breaks before the pooled knee (or the pooled
figures set none), the diagnosis says so in one sentence. Records that name no language (no
voice) belong to no slice of that kind; a voice sweep has no voice slices (its voices are its
axis), nor has a kind with more than :data:`MAX_SLICES` labels. A slice with fewer than
:data:`MIN_REQUESTS` requests at one of its levels is not judged (its knee null, ``judged`` false).
Manual: docs/results.md, "Does one language (or voice) break first?".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from tts_knee import runformat
from tts_knee.runformat.metric_roles import ServerNames
from tts_knee.runformat.reader import OTHER_LABEL, Attempts
from tts_knee.runformat.summary import Knee, Slice, SliceLevel, Slices, SliceSpeech, StepSummary

from . import speech as speech_mod
from .axis import Axis
from .knee import LATENCY_RISE, signal_rise
from .steps import PlannedStep, plan_stats

#: Most labels of one kind sliced: more (a voice mix of dozens) are too many to judge one by one.
MAX_SLICES = 8
#: Fewest requests a slice needs at each of its levels to be judged.
MIN_REQUESTS = 5
_KINDS = (("language", "languages"), ("voice", "voices"))
_REQ_ID = re.compile(rb'"req_id"\s*:\s*"([^"]+)"')
_WHOLE = (("latency_ms", "p50"), ("latency_ms", "p95"), ("e2e_ms", "p50"), ("e2e_ms", "p95"))
_STREAM = (("ttfa_ms", "p50"), ("ttfa_ms", "p95"))
_FIGURES = {
    ("latency_ms", "p50"): "wait p50",
    ("latency_ms", "p95"): "wait p95",
    ("e2e_ms", "p50"): "end-to-end p50",
    ("e2e_ms", "p95"): "end-to-end p95",
    ("ttfa_ms", "p50"): "TTFA p50",
    ("ttfa_ms", "p95"): "TTFA p95",
}


def labels(attempts: Attempts, kind: str) -> dict[int, str]:
    """The codes and names of ``kind`` (``language`` or ``voice``) the ``attempts`` name."""
    names = attempts.languages if kind == "language" else attempts.voices
    codes = np.unique(attempts[kind])
    return {int(code): names[code] for code in codes if 0 <= code < len(names) and names[code] != OTHER_LABEL}


def _sent(attempts: Attempts, step: int) -> int:
    """The requests step ``step`` sent (their first attempts)."""
    return int(((attempts["step"] == step) & (attempts["attempt"] <= 1)).sum())


def _held(done: list[StepSummary], knee_index: int | None, key: str) -> float | None:
    """The highest level below the knee ``knee_index`` (the highest tested where there is none; None
    where the lowest already broke)."""
    if not done or knee_index == 0:
        return None
    level = done[-1] if knee_index is None else done[knee_index - 1]
    held: float | None = cast(Mapping[str, Any], level)[key]
    return held


def _plan_of(sub: Attempts, whole: Attempts, plan: list[PlannedStep]) -> list[PlannedStep]:
    """The plan's entries as a slice sees them: an open-loop step offers the slice its share of
    the rate (the share of the step's first attempts that are the slice's), so that its
    throughput is judged against what was offered to it."""
    out = []
    for entry in plan:
        if entry.get("rate") is None:
            out.append(entry)
            continue
        share = _sent(sub, entry["step"]) / max(_sent(whole, entry["step"]), 1)
        offered = (entry.get("offered_rps") or entry["rate"]) * share
        out.append({**entry, "offered_rps": offered, "dropped": round((entry.get("dropped") or 0) * share)})
    return out


def _levels(
    sub: Attempts,
    whole: Attempts,
    plan: list[PlannedStep],
    judged: set[int],
    axis: Axis,
    settle: float | None,
    streamed: bool,
    names: ServerNames,
    users: dict[str, Any],
) -> list[StepSummary]:
    """A slice's levels over its judged steps, made as the pooled ones are."""
    plan = _plan_of(sub, whole, plan)
    no_samples = pd.DataFrame()
    steps = plan_stats(sub, plan, no_samples, settle, streamed, names, users)
    for step, entry in zip(steps, plan):
        if "voices" in entry:
            cast(dict[str, Any], step)["voices"] = entry["voices"]
    axis.step_figures(sub, plan, steps)
    steps = [step for step in steps if step["step"] in judged]
    return axis.levels(sub, steps, no_samples, settle, streamed, names, users)


def request_labels(path: Path, req_ids: set[str]) -> dict[str, tuple[str | None, str | None]]:
    """Each of ``req_ids``'s (language, voice), from its records in the run's ``requests.jsonl``."""
    out: dict[str, tuple[str | None, str | None]] = {}
    try:
        lines = (path / runformat.REQUESTS).read_bytes().splitlines()
    except OSError:
        return out
    for line in lines:
        match = _REQ_ID.search(line)
        if match is None or match.group(1).decode() not in req_ids:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out[rec["req_id"]] = (rec.get("language"), rec.get("voice"))
    return out


def _speech(level: Mapping[str, Any]) -> SliceSpeech | None:
    speech = level.get("speech")
    if not speech or not speech.get("judged"):
        return None
    return {
        "judged": speech["judged"],
        "metric": speech["metric"],
        "wer_mean": speech.get("wer_mean"),
        "cer_mean": speech.get("cer_mean"),
        "similarity_mean": speech.get("similarity_mean"),
        "mos_mean": speech.get("mos_mean"),
    }


def _level_row(level: Mapping[str, Any], key: str, streamed: bool) -> SliceLevel:
    latency = level.get("latency_ms") or {}
    ttfa = level.get("ttfa_ms") or {}
    row: dict[str, Any] = {"concurrency": level["concurrency"]}
    if key != "concurrency":
        row[key] = level.get(key)
    row.update(
        {
            "requests": level.get("requests") or 0,
            "failed": level.get("failed") or 0,
            "error_rate": level.get("error_rate"),
            "p50_ms": latency.get("p50"),
            "p95_ms": latency.get("p95"),
            "ttfa_p95_ms": ttfa.get("p95") if streamed else None,
            "underrun_rate": level.get("underrun_rate") if streamed else None,
            "speech": _speech(level),
        }
    )
    return cast(SliceLevel, row)


def _at(value: float | None, key: str) -> str:
    """A level named along the axis: ``4``, ``4 req/s``, ``4 voices``."""
    if value is None:
        return "n/a"
    return f"{value:g}" + {"rate": " req/s", "voices": " voices"}.get(key, "")


def _rise(levels: list[StepSummary], knee_index: int, streamed: bool) -> str:
    """The latency figure that rose most at level ``knee_index`` against the lowest, in words: the wait's
    (TTFA's) where it crossed the rule's margin, else end-to-end time's."""
    rises: list[tuple[bool, float, str, float, float]] = []
    for name, stat in _STREAM if streamed else _WHOLE:
        base = (cast(Mapping[str, Any], levels[0]).get(name) or {}).get(stat)
        value = (cast(Mapping[str, Any], levels[knee_index]).get(name) or {}).get(stat)
        if base and value is not None:
            rises.append(
                (name != "e2e_ms" and value / base > LATENCY_RISE, value / base, _FIGURES[(name, stat)], base, value)
            )
    if not rises:
        return "its latency rose"
    _, ratio, what, base, value = max(rises)
    return f"its {what} rose {ratio:.1f}x ({base:.0f} -> {value:.0f} ms)"


def broke(levels: list[StepSummary], knee: Knee, rule: str) -> str:
    """What broke at the slice's knee by ``rule`` (one of the knee's methods), in words."""
    knee_index = cast(int, knee["index"])
    knee_level = cast(Mapping[str, Any], levels[knee_index])
    if rule == "failures":
        return f"{100 * (knee_level.get('attempt_failure_rate') or 0):.0f} % of its attempts failed"
    if rule == "underruns":
        return f"{100 * (knee_level.get('underrun_rate') or 0):.0f} % of its streams ran dry"
    if rule == "signal":
        rise = signal_rise(levels)
        return f"its {rise[1].replace('_rate', '').replace('_', ' ')} share rose" if rise else "its audio went wrong"
    if rule == "throughput_shortfall":
        return f"it was served {100 * (knee_level.get('throughput_ratio') or 0):.0f} % of its share of the offered rate"
    if rule == "latency_growing":
        return "its wait kept growing through the step"
    if rule in ("speech", "similarity", "mos"):
        speech = knee_level.get("speech") or {}
        if rule == "speech":
            metric = speech.get("metric") or "wer"
            return f"its {metric.upper()} rose to {speech_mod.pct(speech.get(metric + '_mean'))}"
        value = speech.get(f"{rule}_mean")
        what = "speaker similarity" if rule == "similarity" else "naturalness (DNSMOS OVRL)"
        return f"its {what} fell to {'n/a' if value is None else f'{value:.2f}'}"
    return _rise(levels, knee_index, bool(knee.get("streamed")) and rule == "ttfa_vs_lowest")


def _judge(
    levels: list[StepSummary], axis: Axis, streamed: bool, floor_ms: float, entries: list[dict[str, Any]] | None
) -> Knee | None:
    """The slice's knee by the pooled knee's rules (None: too few requests to judge)."""
    done = [level for level in levels if level.get("requests")]
    if not done or any((level.get("requests") or 0) < MIN_REQUESTS for level in done):
        return None
    knee = axis.find_knee(done, streamed, floor_ms)
    return axis.speech_knee(knee, done) if entries else knee


def _slice(kind: str, name: str, levels: list[StepSummary], knee: Knee | None, key: str, streamed: bool) -> Slice:
    done = [level for level in levels if level.get("requests")]
    knee_index = None if knee is None else knee["index"]
    rules = (
        []
        if knee is None or knee_index is None
        else [rule for rule in knee["rules"] if knee["methods"].get(rule) is not None]
    )
    at_k = None if knee_index is None else cast(Mapping[str, Any], done[knee_index])[key]
    rules = [rule for rule in rules if knee is not None and knee["methods"].get(rule) == at_k]
    return {
        "by": kind,
        "name": name,
        "requests": sum(level.get("requests") or 0 for level in done),
        "judged": knee is not None,
        "knee": at_k,
        "rules": rules,
        "held_to": _held(done, knee_index, key),
        "broke": broke(done, knee, rules[0]) if knee is not None and knee_index is not None and rules else None,
        "levels": [_level_row(level, key, streamed) for level in done],
    }


def sentence(kind: str, sliced: list[Slice], pooled: float | None, pooled_held: float | None, key: str) -> str | None:
    """One sentence where a slice of ``kind`` breaks before the pooled knee (``pooled``: its level,
    None where it set none; ``pooled_held``: the highest level before it); None where none does."""
    early = [part for part in sliced if part["knee"] is not None and (pooled is None or part["knee"] < pooled)]
    if not early:
        return None
    first = min(early, key=lambda part: cast(float, part["knee"]))
    others = [
        f"{part['name']} held to {_at(part['held_to'], key)}"
        if part["held_to"] is not None
        else f"{part['name']} broke at once"
        for part in sliced
        if part is not first and part["judged"]
    ]
    pooled_said = (
        f"the pooled figures break at {_at(pooled, key)}"
        if pooled is not None
        else f"the pooled figures held to {_at(pooled_held, key)}"
    )
    return (
        f"By {kind}, {first['name']} breaks first: at {_at(first['knee'], key)} {first['broke']}"
        + (f"; {'; '.join(others)}" if others else "")
        + f" ({pooled_said})."
    )


def slices(
    attempts: Attempts,
    plan: list[PlannedStep],
    judged: list[StepSummary],
    axis: Axis,
    pooled: Knee,
    levels: list[StepSummary],
    context: Mapping[str, Any],
    heard: list[dict[str, Any]],
    path: Path,
) -> Slices | None:
    """The run's slices (see the module doc), or None where its requests name one language and
    one voice. ``judged``: the closed steps the pooled levels ``levels`` and knee ``pooled`` were
    judged on; ``context``: ``settle``, ``streamed``, ``names``, ``users`` and ``ttfa_floor_ms``
    as the pooled levels had them; ``heard``: the judge's lines."""
    kinds = {kind: labels(attempts, kind) for kind, _ in _KINDS if not (kind == "voice" and axis.key == "voices")}
    kinds = {kind: named for kind, named in kinds.items() if 2 <= len(named) <= MAX_SLICES}
    if not kinds:
        return None
    said = request_labels(path, {entry["req_id"] for entry in heard}) if heard else {}
    numbers = {step["step"] for step in judged if step["step"] is not None}
    done = [level for level in levels if level.get("requests")]
    key = axis.key
    knee_index = pooled["index"]
    out: dict[str, Any] = {
        "axis": key,
        "knee": pooled.get(key),
        "held_to": _held(done, knee_index, key),
    }
    notes = []
    for kind, named in kinds.items():
        column = 0 if kind == "language" else 1
        sliced = []
        for code, name in sorted(named.items(), key=lambda item: item[1]):
            sub = attempts.subset(attempts[kind] == code)
            level = _levels(
                sub,
                attempts,
                plan,
                numbers,
                axis,
                context["settle"],
                context["streamed"],
                context["names"],
                context["users"],
            )
            entries = [entry for entry in heard if said.get(entry["req_id"], (None, None))[column] == name]
            if entries:  # the judge's lines of the slice, on its levels as on the pooled ones
                speech_mod.attach([], cast(list[dict[str, Any]], level), entries)
            knee = _judge(level, axis, context["streamed"], context["ttfa_floor_ms"], entries)
            sliced.append(_slice(kind, name, level, knee, key, context["streamed"]))
            speech_mod.strip(cast(list[dict[str, Any]], level))
        out[f"by_{kind}"] = sliced
        note = sentence(kind, sliced, out["knee"], out["held_to"], key)
        if note:
            notes.append(note)
    out["note"] = " ".join(notes) or None
    return cast(Slices, out)
