"""Turn a run directory into ``summary.json``.

``steps`` lists every executed step in the order run; the knee, the diagnosis, the SLO verdicts
and the recommendation are judged on ``levels``: one per tested concurrency, ascending, repeats
pooled (``analysis.levels``). ``run.mode`` is the run's mode as the reader gives it
(:meth:`runformat.reader.RunDir.mode`): an open-loop run (``open``) is judged per offered rate
instead (:mod:`analysis.openloop`), its levels one per offered rate, and its summary gains
``recommended_rate`` and ``dropped``.

With an SLO (``--slo``, else the run's own ``options.slo``) the summary gains ``slo``: ``spec``,
``steps`` (one verdict per level: ``concurrency``, ``step`` (None for a pooled level),
``steps``, ``pass`` (True, False, or None when inconclusive), ``failed``, ``inconclusive``,
``values``, ``more_requests``), ``by_step`` (the same verdict for each executed step, in run
order) and ``max_concurrency`` (``analysis.slo.max_concurrency`` over the levels); then
``recommended_concurrency`` is ``slo.max_concurrency`` (None when no level meets it, and the
recommendation says why) and the knee is still reported. An open-loop run's verdicts are per
offered rate (each with its ``rate``; ``analysis.openloop.judge``), ``max_rate`` takes the place
of ``max_concurrency`` (null there), and ``recommended_rate`` is ``slo.max_rate`` with
``recommended_concurrency`` the concurrency it implies by Little's law.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from tts_knee import runformat
from tts_knee.runformat.metric_roles import ServerNames, labels_seen, parse_roles
from tts_knee.runformat.reader import Attempts, RunDir, RunDirError
from tts_knee.runformat.schema import Arrivals, Trace
from tts_knee.runformat.summary import (
    BargeIn,
    Diagnosis,
    DiagnosisKind,
    Hangups,
    InProgress,
    Knee,
    ListenDrop,
    MemoryCreep,
    Probe,
    Slo,
    SloVerdict,
    SpeechStep,
    Spike,
    StepSummary,
    Summary,
    TextReuse,
)

from . import (
    axis as axis_mod,
    bargein,
    capacity as capacity_mod,
    openloop,
    orphans,
    probe as probe_mod,
    reuse,
    slices as slices_mod,
    slo as slo_mod,
    soak as soak_mod,
    speech as speech_mod,
    spike as spike_mod,
    trace as trace_mod,
)
from .axis import Axis, Key, method_index
from .diagnosis import common_evidence, latency_while, signal_evidence
from .knee import signal_rise
from .steps import PlannedStep, hold_open, infer_steps, memory_baseline, memory_creep, plan_stats, run_end_cut


def _whole(value: object) -> int | None:
    """A whole number >= 1 (4 or 4.0), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) and value >= 1 else None


def _count(value: object) -> int:
    """A count >= 0 (0 where missing or malformed)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return int(value)
    return 0


def _positive(value: object) -> float | None:
    """A finite number > 0 as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _time(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _bad(run_dir: RunDir, where: str, entry: object, what: str) -> RunDirError:
    shown = json.dumps(entry, default=str)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return RunDirError(f"{run_dir.path / 'run.json'}: {where} {shown} {what}; fix or remove it.")


def _steps_of(run_dir: RunDir) -> list[PlannedStep]:
    """The run.json steps, checked against the run's mode; raises :class:`RunDirError` naming a
    malformed entry."""
    raw = run_dir.run.get("steps")
    if raw is not None and not isinstance(raw, list):
        raise _bad(run_dir, "steps", raw, "is not a list of step entries")
    open_loop = run_dir.mode() == "open"
    steps = [
        _planned(run_dir, f"step entry {index + 1}", index, entry, open_loop) for index, entry in enumerate(raw or [])
    ]
    if steps or not open_loop:
        return steps or infer_steps(run_dir.requests.attempts())
    raise RunDirError(
        f"{run_dir.path / 'run.json'} lists no steps: an open-loop run's offered rates come from them, "
        "not from its records."
    )


def _planned(run_dir: RunDir, where: str, index: int, entry: object, open_loop: bool) -> PlannedStep:
    """run.json's step entry ``index`` (0-based), checked against the run's mode."""
    if not isinstance(entry, dict):
        raise _bad(run_dir, where, entry, "is not an object with step, concurrency, start and end")
    rate = entry.get("rate")
    offered = _positive(rate)
    if open_loop and offered is None:
        raise _bad(
            run_dir, where, entry, f"has rate {rate!r}, not a number of requests per second > 0 (the run is open loop)"
        )
    if not open_loop and rate is not None:
        raise _bad(run_dir, where, entry, "has an offered rate, but the run is closed loop (run.json mode)")
    # an open-loop step's load is its rate; its concurrency is 0
    conc = 0 if open_loop and entry.get("concurrency") in (0, None) else _whole(entry.get("concurrency"))
    if conc is None:
        raise _bad(run_dir, where, entry, f"has concurrency {entry.get('concurrency')!r}, not a whole number >= 1")
    num = _whole(entry.get("step", index + 1))
    if num is None:
        raise _bad(run_dir, where, entry, f"has step {entry.get('step')!r}, not a whole number >= 1")
    for field in ("start", "end"):
        if not _time(entry.get(field)):
            raise _bad(run_dir, where, entry, f"has {field} {entry.get(field)!r}, not unix seconds or null")
    settle = entry.get("settle_s")
    if not _time(settle) or (settle is not None and settle < 0):
        raise _bad(run_dir, where, entry, f"has settle_s {settle!r}, not a number of seconds >= 0")
    end = entry.get("end")
    cutoff = entry.get("cutoff")
    if open_loop and isinstance(cutoff, (int, float)) and _time(cutoff) and end is not None:
        # a judged rate step's arrivals stopped at its cut-off: what follows is its judgment's
        # wait for the last of them, and the load it measures is over
        end = min(end, cutoff)
    voices = entry.get("voices")
    voice_count = _whole(voices)
    if voices is not None and voice_count is None:
        raise _bad(run_dir, where, entry, f"has voices {voices!r}, not a whole number >= 1")
    planned: PlannedStep = {"step": num, "concurrency": conc, "start": entry.get("start"), "end": end}
    if settle is not None:
        planned["settle_s"] = float(settle)
    planned["phase"] = entry.get("phase") if isinstance(entry.get("phase"), str) else None
    planned["repeat"] = _whole(entry.get("repeat"))
    if voice_count is not None:
        planned["voices"] = voice_count
    if offered is not None:  # the run is open loop (a closed-loop entry with a rate was refused above)
        _open_loop_figures(planned, offered, entry)
    return planned


def _open_loop_figures(planned: PlannedStep, rate: float, entry: dict[str, Any]) -> None:
    """An open-loop step's rate, its arrivals dropped (and what they all became, where run.json
    counts them) and a trace step's offered rate, from its run.json entry."""
    planned["rate"] = rate
    planned["dropped"] = _count(entry.get("dropped"))
    offered_rps = entry.get("offered_rps")
    if _time(offered_rps) and offered_rps:
        planned["offered_rps"] = float(offered_rps)
    arrivals = _arrivals(entry.get("arrivals"))
    if arrivals is not None:
        planned["arrivals"] = arrivals


def _arrivals(value: object) -> Arrivals | None:
    """run.json's ``arrivals`` of an open-loop step, its counts as counts (None: not recorded)."""
    if not isinstance(value, dict):
        return None
    not_sent = value.get("not_sent")
    return {
        "planned": _count(value.get("planned")),
        "sent": _count(value.get("sent")),
        "dropped": _count(value.get("dropped")),
        "not_sent": {str(reason): _count(count) for reason, count in not_sent.items()}
        if isinstance(not_sent, dict)
        else {},
    }


def _spike_of(run_dir: RunDir) -> dict[str, float]:
    """run.json's --spike as {factor, seconds} (empty when it cannot be read)."""
    spike = run_dir.options().get("spike")
    try:
        factor, seconds = str(spike).lower().split("x")
        return {"factor": float(factor), "seconds": float(seconds)}
    except (AttributeError, ValueError):
        return {}


def _settle_of(run_dir: RunDir) -> float | None:
    settle = run_dir.run.get("settle_s")
    if settle is None:
        return None
    if not _time(settle) or settle < 0:
        raise _bad(run_dir, "settle_s", settle, "is not a number of seconds >= 0")
    return float(settle)


def _soak_of(run_dir: RunDir) -> float | None:
    """``options.soak``: the soak's planned length in seconds, where run.json has a usable one."""
    return _positive(run_dir.options().get("soak"))


#: The listening methods (unless --asr-words-only), and the listener's figures a level's ``speech`` holds
Listened = Literal["similarity", "mos"]
_LISTENED: tuple[Listened, ...] = ("similarity", "mos")
HeardFigure = Literal["similarity_mean", "mos_mean", "mos_sig_mean", "mos_bak_mean"]
_MOS_PARTS: tuple[tuple[str, HeardFigure], ...] = (
    ("SIG (the speech)", "mos_sig_mean"),
    ("BAK (the background)", "mos_bak_mean"),
)


def _heard(level: StepSummary, figure: HeardFigure) -> float | None:
    """A level's listening figure (``speech``'s ``figure``), None where it has none."""
    speech = level.get("speech")
    return speech.get(figure) if speech else None


def _error_mean(speech: SpeechStep | None, metric: str) -> float | None:
    """The mean error rate the judge heard by ``metric`` (``wer`` or ``cer``), None where none."""
    if not speech:
        return None
    return speech.get("wer_mean") if metric == "wer" else speech.get("cer_mean") if metric == "cer" else None


def _speech_sentences(done: list[StepSummary], knee: Knee, level_index: int) -> list[str]:
    """The speech knee at level ``level_index``: how speaker similarity and naturalness fell
    (unless --asr-words-only), the one further past its margin first, then how the judged error
    rate rose, and the worst clip."""
    previous, knee_level = done[level_index - 1] if level_index > 0 else done[0], done[level_index]
    changed = knee.get("speech_changed") or ["speech"]
    heard = [
        _listen_sentence(done, knee, name, level_index) for name in _listen_order(knee, level_index) if name in changed
    ]
    if "speech" not in changed:
        return heard
    sp_lo, sp_hi = previous.get("speech"), knee_level.get("speech")
    metric = (sp_hi.get("metric") if sp_hi else None) or "wer"
    name = metric.upper()
    rise = (knee.get("speech_rise") or [None] * (level_index + 1))[level_index]
    ci_low, ci_high = rise["ci"] if rise and rise["ci"] else (None, None)
    evidence = [
        f"{name} rose from {speech_mod.pct(_error_mean(sp_lo, metric))} at {previous['concurrency']} to "
        f"{speech_mod.pct(_error_mean(sp_hi, metric))} at {knee_level['concurrency']} while "
        f"{latency_while(previous, knee_level, bool(knee.get('streamed')))}: the server's speech "
        f"degrades before its latency does (paired by text over {rise['pairs'] if rise else 0} texts, the rise "
        f"{speech_mod.pct(rise['mean'] if rise else None)}, 95 % interval {speech_mod.pct(ci_low)} to "
        f"{speech_mod.pct(ci_high)})."
    ]
    worst_clips = sp_hi.get("worst") if sp_hi else None
    worst = worst_clips[0] if worst_clips else None
    if worst:
        evidence.append(
            f"Worst at {knee_level['concurrency']} ({name} {speech_mod.pct(worst['error'])}): "
            f'sent "{worst.get("text")}", heard "{worst.get("transcript")}".'
        )
    return heard + evidence


def speech_degraded(
    levels: list[StepSummary], knee: Knee, diagnosis: Diagnosis, has_resources: bool, key: Key = "concurrency"
) -> Diagnosis:
    """``speech_degraded``: what the listener hears broke at the knee while latency had not (yet):
    the judged words (``speech_first``), answers running on past their text or cut short
    (``signal_first``), or the first sound heard later behind leading silence
    (``silence_first``); the evidence is each of those in the order they broke, then what every
    diagnosis adds. ``levels`` stand as the axis's diagnosis reads them (:meth:`Axis.view`), each
    named by its ``key``."""
    done = [level for level in levels if level.get("requests")]
    signal = signal_rise(done) if knee.get("signal_first") else None
    common = common_evidence(done, knee, has_resources, named=(signal[1],) if signal else ())
    parts: list[tuple[int, list[str]]] = []
    if knee.get("silence_first"):  # the knee is leading silence: its sentence, from the signal checks
        said = [
            sentence
            for sentence in common
            if sentence.startswith("From concurrency") and "starts with silence" in sentence
        ]
        common = [sentence for sentence in common if sentence not in said]
        parts.append((knee["index"] or 0, said))
    speech_at = method_index(knee, done, ["speech", "similarity", "mos"], key) if knee.get("speech_first") else None
    if speech_at is not None:
        parts.append((speech_at, _speech_sentences(done, knee, speech_at)))
    if signal is not None:
        parts.append((signal[0], signal_evidence(done, knee)))
    evidence = [sentence for _, said in sorted(parts, key=lambda part: part[0]) for sentence in said]
    return {**diagnosis, "kind": DiagnosisKind.SPEECH_DEGRADED, "evidence": evidence + common}


def _drop(knee: Knee, name: Listened, level_index: int) -> ListenDrop | None:
    """The knee level's paired drop in ``name`` (None where it was not judged)."""
    drops = knee.get("similarity_drop") if name == "similarity" else knee.get("mos_drop")
    return (drops or [None] * (level_index + 1))[level_index]


def _relative_drop(knee: Knee, name: Listened, level_index: int) -> float:
    """The knee level's drop in ``name`` over that method's margin."""
    drop = _drop(knee, name, level_index)
    margin = speech_mod.MIN_SIMILARITY_DROP if name == "similarity" else speech_mod.MIN_MOS_DROP
    return float((drop["mean"] if drop else None) or 0.0) / margin


def _listen_order(knee: Knee, level_index: int) -> list[Listened]:
    """``similarity`` and ``mos``, the one that fell further past its margin first: another voice
    moves similarity most, noise and clicks naturalness (and similarity a little with it)."""
    return sorted(_LISTENED, key=lambda name: -_relative_drop(knee, name, level_index))


def _listen_sentence(done: list[StepSummary], knee: Knee, name: Listened, level_index: int) -> str:
    """The evidence of a ``similarity`` or ``mos`` knee: the figure at the lowest level, the level
    before the knee and the knee, the paired drop and its interval, and the clip least alike."""
    base, previous, knee_level = done[0], done[level_index - 1] if level_index > 0 else done[0], done[level_index]
    figure: HeardFigure = "similarity_mean" if name == "similarity" else "mos_mean"

    def figure_at(level: StepSummary) -> str:
        value = _heard(level, figure)
        return "n/a" if value is None else f"{value:.2f}"

    drop = _drop(knee, name, level_index)
    interval = (drop["ci"] if drop else None) or [math.nan, math.nan]
    what = (
        "speaker similarity (to the same text at the lowest step)"
        if name == "similarity"
        else "naturalness (DNSMOS OVRL)"
    )
    said = (
        f"The voice changed: {what} fell from {figure_at(base)} at {base['concurrency']} "
        f"and {figure_at(previous)} at {previous['concurrency']} "
        f"to {figure_at(knee_level)} at {knee_level['concurrency']} "
        f"(paired by text over {drop['pairs'] if drop else 0} texts, the drop "
        f"{drop['mean'] if drop else math.nan:.2f}, 95 % interval {interval[0]:.2f} to {interval[1]:.2f})."
    )
    if name == "mos":
        figures = [(label, _heard(base, part), _heard(knee_level, part)) for label, part in _MOS_PARTS]
        parts = [
            f"{label} {low:.2f} -> {high:.2f}" for label, low, high in figures if low is not None and high is not None
        ]
        said = said.replace("The voice changed", "The sound degraded") + (f" {'; '.join(parts)}." if parts else "")
    else:
        speech = knee_level.get("speech")
        least_alike = speech.get("worst_similarity") if speech else None
        worst = least_alike[0] if least_alike else None
        if worst:
            said += f' Least alike at {knee_level["concurrency"]}: "{worst.get("text")}" ({worst["similarity"]:.2f}).'
        if "mos" in (knee.get("speech_changed") or []) and _listen_order(knee, level_index)[0] == "mos":
            said += (
                " Noise and clicks lower speaker similarity too: with the naturalness fallen further, it may be "
                "the same voice."
            )
    return said


def run_slo(run_dir: RunDir, override: slo_mod.SLO | None = None) -> slo_mod.SLO | None:
    """The SLO to judge by: ``override`` (``--slo``), else the run's ``options.slo``; raises
    :class:`RunDirError` when the run's own spec does not parse."""
    if override is not None:
        return override
    options = run_dir.run.get("options")
    spec = options.get("slo") if isinstance(options, dict) else None
    if not spec:
        return None
    try:
        return slo_mod.parse(str(spec))
    except slo_mod.SLOError as error:
        raise RunDirError(
            f"{run_dir.path / 'run.json'}: options.slo {str(spec)!r} cannot be used ({error}) "
            "Pass --slo to judge by another."
        ) from None


def _slo_section(slo: slo_mod.SLO, steps: list[StepSummary], levels: list[StepSummary], axis: Axis) -> Slo:
    """The SLO's verdicts per level and per step; in a voice sweep its levels are numbers of
    voices (``max_voices``), in an open loop offered rates (``max_rate``)."""
    judge = openloop.judge if axis.open_loop else slo_mod.judge
    by_voices = axis.key == "voices"
    verdicts: list[SloVerdict] = []
    for level in levels:
        verdict = judge(slo, level)
        verdict["steps"] = level["steps"]
        if by_voices:
            verdict["voices"] = level["voices"]
        verdicts.append(verdict)
    by_step: list[SloVerdict] = []
    for step in (step for step in steps if step.get("requests")):
        verdict = judge(slo, step)
        verdict.update({"phase": step.get("phase"), "repeat": step.get("repeat")})
        if by_voices:
            verdict["voices"] = step["voices"]
        by_step.append(verdict)
    out: Slo = {
        "spec": slo.spec,
        "steps": verdicts,
        "by_step": by_step,
        "max_concurrency": slo_mod.max_level(verdicts) if axis.key == "concurrency" else None,
    }
    if by_voices:
        out["max_voices"] = slo_mod.max_level(verdicts, "voices")
    elif axis.open_loop:
        out["max_rate"] = slo_mod.max_level(verdicts, "rate")
    return out


def _number(step: StepSummary) -> int:
    """An executed step's number (only a level that pools repeats has none)."""
    number = step["step"]
    assert number is not None, "an executed step has its number"
    return number


def _in_progress(step: StepSummary, judged: list[StepSummary]) -> InProgress:
    """The open step as the verdict names it: ``{step, concurrency, rate, voices, closed_steps,
    note}``, ``note`` one sentence of what the closed steps are and that the open one waits."""
    level = (
        f"{step['rate']:g} req/s"
        if step.get("rate") is not None
        else f"{step['voices']} voices"
        if step.get("voices") is not None
        else f"concurrency {step['concurrency']}"
    )
    closed = [_number(judged_step) for judged_step in judged]
    so_far = (
        f"the verdict is from step{'s' if len(closed) > 1 else ''} "
        + (f"{closed[0]}-{closed[-1]}" if len(closed) > 2 else " and ".join(map(str, closed)))
        if closed
        else "no step has closed yet, so there is no verdict"
    )
    return {
        "step": _number(step),
        "concurrency": step["concurrency"],
        "rate": step.get("rate"),
        "voices": step.get("voices"),
        "closed_steps": closed,
        "note": f"Step {step['step']} ({level}) is in progress: {so_far}; it joins once its window closes.",
    }


def run_roles(run_dir: RunDir, override: dict[str, str] | None = None) -> dict[str, str]:
    """What the run's ``--server-role`` said (Locust's, then each collector's), with ``override``
    (the dashboard's ``--server-role``) on top: ``{family: role}``; raises :class:`RunDirError`
    for an entry that does not parse."""
    recorded = run_dir.run.get("options")
    options = recorded if isinstance(recorded, dict) else {}
    given = list(options.get("server_roles") or [])
    for collector in run_dir.run.get("collectors") or []:
        if isinstance(collector, dict):
            given += collector.get("server_roles") or []
    try:
        roles = parse_roles(given)
    except ValueError as error:
        raise RunDirError(f"{run_dir.path / 'run.json'}: {error}; fix it or pass --server-role.") from None
    return {**roles, **(override or {})}


def run_stage_label(run_dir: RunDir, override: str | None = None) -> str | None:
    """The label that tells the server's stages apart: ``override`` (the dashboard's
    ``--server-stage-label``), else the run's (Locust's, then a collector's), else None (Triton's
    ``model``, vLLM-Omni's ``stage``). An ``override`` no series in resources.jsonl carries
    raises :class:`RunDirError` naming the labels that are there."""
    if override:
        series = {
            series_name
            for sample_metrics in run_dir.resources.get("metrics", ())
            if isinstance(sample_metrics, dict)
            for series_name in sample_metrics
        }
        seen = labels_seen(series)
        if override not in seen:
            raise RunDirError(
                f"--server-stage-label {override}: no series in {run_dir.path / runformat.RESOURCES} "
                f"carries that label (the labels there: {', '.join(seen) or 'none'})."
            )
        return override
    recorded = run_dir.run.get("options")
    given = recorded.get("server_stage_label") if isinstance(recorded, dict) else None
    for collector in run_dir.run.get("collectors") or []:
        given = given or (collector.get("server_stage_label") if isinstance(collector, dict) else None)
    return str(given) if given else None


def _clean(value: object) -> object:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if isinstance(value, (np.floating, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def run_capacity(run_dir: RunDir, given: capacity_mod.Options | None = None) -> capacity_mod.Options:
    """What the capacity section is asked for: the run's own ``--cost-per-hour``, ``--plan-for``
    and ``--headroom``, each replaced by what ``given`` sets; raises :class:`RunDirError` for a
    recorded value that does not parse."""
    try:
        return capacity_mod.options(run_dir.options(), given)
    except capacity_mod.CapacityError as error:
        raise RunDirError(
            f"{run_dir.path / 'run.json'}: options: {error} Fix it or pass the flag to tts-knee report."
        ) from None


@dataclass(frozen=True, slots=True)
class _Parts:
    """A run's attempts split by what judges them: the sweep's (``a``, its steps ``plan``), the
    hostile-text probe's (``--probe-texts``) and the spike's (``--spike``), each its own section."""

    plan: list[PlannedStep]
    a: Attempts
    every: Attempts
    probed: list[PlannedStep]
    a_probe: Attempts | None
    spiked: list[PlannedStep]
    a_spike: Attempts | None

    @classmethod
    def of(cls, attempts: Attempts, plan: list[PlannedStep]) -> _Parts:
        probed = [planned for planned in plan if planned.get("phase") == runformat.PROBE_PHASE]
        spiked = [planned for planned in plan if planned.get("phase") in runformat.SPIKE_PHASES]
        if not probed and not spiked:
            return cls(plan, attempts, attempts, [], None, [], None)
        in_probe = np.isin(attempts["step"], [planned["step"] for planned in probed])
        in_spike = np.isin(attempts["step"], [planned["step"] for planned in spiked])
        sweep = [planned for planned in plan if planned not in probed and planned not in spiked]
        return cls(
            sweep,
            attempts.subset(~in_probe & ~in_spike),
            attempts,
            probed,
            attempts.subset(in_probe),
            spiked,
            attempts.subset(in_spike),
        )


def _step_table(
    run_dir: RunDir,
    parts: _Parts,
    axis: Axis,
    settle: float | None,
    streamed: bool,
    names: ServerNames,
    users: dict[str, Any],
) -> list[StepSummary]:
    """Every executed step's figures, in run order (:func:`analysis.steps.step_stats`), with its
    phase, repeat, number of voices and what its axis adds."""
    plan = parts.plan
    steps = plan_stats(parts.a, plan, run_dir.resources, settle, streamed, names, users)
    for step, planned in zip(steps, plan):
        step["phase"], step["repeat"] = planned.get("phase"), planned.get("repeat")
        if "voices" in planned:
            step["voices"] = planned["voices"]
    axis.step_figures(parts.a, plan, steps)
    return steps


@dataclass(frozen=True, slots=True)
class Sections:
    """What the run did besides its sweep, each None where it did not (``text_reuse`` always
    says): summary.json's sections of the same names."""

    barge_in: BargeIn | None
    hangups: Hangups | None
    text_reuse: TextReuse
    probe: Probe | None
    spike: Spike | None


def _span(plan: list[PlannedStep], attempts: Attempts) -> tuple[float | None, float | None]:
    """When the sweep began and ended: its first step's start and its last step's end, or, for
    steps inferred from the records, the first send and the last completion."""
    if plan and plan[0]["start"] is not None:
        return plan[0]["start"], plan[-1]["end"]
    sent_at, ended_at = attempts["t0"][np.isfinite(attempts["t0"])], attempts["tend"][np.isfinite(attempts["tend"])]
    return (float(sent_at.min()) if len(sent_at) else None), (float(ended_at.max()) if len(ended_at) else None)


def _sections(run_dir: RunDir, parts: _Parts, streamed: bool, roles: dict[str, str]) -> Sections:
    """What the run did besides its sweep, each None where it did not: the orphaned work and
    hang-ups (``barge_in``, ``hangups``), the text reuse, the hostile-text probe and the spike."""
    run, attempts, options = run_dir.run, parts.a, run_dir.options()
    cpu_fit = orphans.fit(parts.every, run_dir.resources, options.get("request_timeout"))
    spiked = None
    if parts.spiked:
        assert parts.a_spike is not None, "a spike's attempts are split off with its steps"
        health = run.get("health") if isinstance(run.get("health"), dict) else None
        spiked = spike_mod.spike(parts.a_spike, parts.spiked, streamed, health, _spike_of(run_dir), run_dir.resources)
    probed = None
    if parts.probed:
        assert parts.a_probe is not None, "the probe's attempts are split off with its steps"
        probed = probe_mod.probe(parts.a_probe, parts.probed, attempts, options.get("request_timeout"))
    return Sections(
        barge_in=bargein.summarise(attempts, run_dir.resources, run.get("options") or {}, roles, cpu_fit),
        hangups=bargein.hangups(cpu_fit, parts.every),
        text_reuse=reuse.text_reuse(attempts, streamed, options.get("text_reuse") == "unique"),
        probe=probed,
        spike=spiked,
    )


def _diagnosis(
    run_dir: RunDir, axis: Axis, done: list[StepSummary], knee: Knee, creep: MemoryCreep | None, sections: Sections
) -> Diagnosis:
    """What bends the service at the knee along the run's axis, the speech's when the listener
    heard it first, then what the other sections say first (text reuse, hang-ups, orphaned work)
    and last (the probe, the spike)."""
    diagnosis = axis.diagnose(done, knee, creep, run_dir.has_resources())
    if knee.get("speech_first") or knee.get("silence_first") or knee.get("signal_first"):
        degraded = speech_degraded(axis.view(done), knee, diagnosis, run_dir.has_resources(), axis.key)
        diagnosis = axis.said(degraded)
    evidence = diagnosis["evidence"]
    first = [
        sections.text_reuse["note"] if sections.text_reuse["caches"] else None,
        bargein.hangup_evidence(sections.hangups),
        bargein.evidence(sections.barge_in),
    ]
    evidence[:0] = [sentence for sentence in first if sentence]
    probe, spike = sections.probe, sections.spike
    if probe and probe["note"]:
        evidence.append(probe["note"])
    if spike:
        evidence.append(spike["text"])
    return diagnosis


def _trace(run_dir: RunDir, parts: _Parts, steps: list[StepSummary], done: list[StepSummary], summary: Summary) -> None:
    """A replayed trace's section, each step's speed of the trace, and the recommendation as a
    speed (in place; nothing for a run that replayed no trace)."""
    run = run_dir.run
    replayed = run.get("trace") if isinstance(run.get("trace"), dict) else None
    if summary["run"]["mode"] != "open" or not replayed or not replayed.get("rate_rps"):
        return
    if not Trace.__required_keys__ <= replayed.keys():
        return  # a trace record without what the trace's section copies from it
    trace = summary["trace"] = trace_mod.section(parts.a, parts.plan, replayed, summary)
    slo_part = summary["slo"]
    if slo_part:
        slo_part["max_speed"] = trace.get("max_speed")
    for step in steps + done:
        rate = step.get("rate")
        step["speed"] = round(rate / replayed["rate_rps"], 6) if rate else None
    best = trace.get("max_speed") if slo_part else trace["recommended_speed"]
    if best is not None:
        summary["recommendation"] += f" As a speed of the trace: {best:g}x its pace."


def analyze(
    run_dir: RunDir,
    slo: slo_mod.SLO | None = None,
    roles: dict[str, str] | None = None,
    capacity: capacity_mod.Options | None = None,
    stage_label: str | None = None,
) -> Summary:
    """The summary of a (re)loaded run directory, as written to ``summary.json``; ``slo``
    overrides the run's own ``options.slo``, ``roles`` (``{family: role}``) add to its
    ``--server-role``, ``capacity`` sets what the run's own capacity options do not,
    ``stage_label`` replaces its ``--server-stage-label``."""
    parts, settle = _Parts.of(run_dir.requests.attempts(), _steps_of(run_dir)), _settle_of(run_dir)
    axis = axis_mod.of_run(parts.plan, run_dir.mode())
    slo, roles = run_slo(run_dir, slo), run_roles(run_dir, roles)
    names = ServerNames(roles, run_stage_label(run_dir, stage_label))
    streamed, users = run_dir.streamed(), run_dir.users()  # users: what each kept in flight (Little's law)
    steps = _step_table(run_dir, parts, axis, settle, streamed, names, users)
    # a step still running (the live view) shows what its elapsed window gives, and the verdict
    # waits for it: the knee, the diagnosis, the recommendation and the SLO judge closed steps
    running = [step for step in steps if step["window"]["open"]]
    for step in running:
        hold_open(cast(dict[str, Any], step))  # it withholds figures by name, as open JSON
    closed = [step for step in steps if not step["window"]["open"]]
    # a soak holds one level for long: its drift is its own section, and the levels (knee,
    # recommendation) are the sweep's, unless the soak is all the run did
    soaks = [step for step in steps if step.get("phase") == runformat.SOAK_PHASE]
    judged = [step for step in closed if step.get("phase") != runformat.SOAK_PHASE] or closed
    done = axis.levels(parts.a, judged, run_dir.resources, settle, streamed, names, users)
    knee = axis.find_knee(done, streamed, run_dir.ttfa_floor_ms())
    lines = speech_mod.read(run_dir.path)  # --asr-model: what the judge heard (--asr-keep: the clips it will)
    heard = [entry for entry in lines if not speech_mod.is_kept(entry)]
    # the speech judge adds to the steps and levels as open JSON: their ``speech``, and on each
    # level its clips (``_speech_entries``, read by the speech knee, stripped before the summary)
    speech_mod.attach(cast(list[dict[str, Any]], steps), cast(list[dict[str, Any]], done), heard)
    if heard:
        knee = axis.speech_knee(knee, done)
    speech_mod.strip(cast(list[dict[str, Any]], done))
    context = {
        "settle": settle,
        "streamed": streamed,
        "names": names,
        "users": users,
        "ttfa_floor_ms": run_dir.ttfa_floor_ms(),
    }
    sliced = slices_mod.slices(parts.a, parts.plan, judged, axis, knee, done, context, heard, run_dir.path)
    first, last = _span(parts.plan, parts.a)
    creep = memory_creep(run_dir.resources, first, last)
    rec = axis.recommend(done, knee)
    slo_part = _slo_section(slo, closed, done, axis) if slo else None
    if slo_part:
        rec = axis.recommend_slo(done, slo_part, slo_part["spec"], knee, rec)
    sections = _sections(run_dir, parts, streamed, roles)
    run = run_dir.run
    summary: Summary = {
        "run": {
            "run_id": run.get("run_id") or run_dir.path.name,
            "path": str(run_dir.path),
            "start": run.get("start"),
            "end": run.get("end"),
            "in_progress": bool(run) and run.get("end") is None,
            "target": run.get("target"),
            "mode": run_dir.mode(),
            "options": run.get("options"),
            "workers": run.get("workers"),
            "collectors": run.get("collectors"),
            "versions": run.get("versions"),
            "provenance": run.get("provenance"),
            "settle_s": run.get("settle_s"),
            "run_json_error": run_dir.run_json_error,
            "audio_missing": run.get("audio_missing"),
        },
        "records": {"lines": run_dir.requests.lines, "attempts": len(parts.every)},
        "bad_lines": {"requests": run_dir.requests.bad_lines, "resources": run_dir.resource_bad_lines},
        "incomplete_last_line": {
            "requests": run_dir.requests.incomplete_last_line,
            "resources": run_dir.resource_incomplete,
        },
        "steps": steps,
        "in_progress_step": _in_progress(running[-1], judged) if running else None,
        "levels": done,
        "knee": knee,
        "slo": slo_part,
        "recommended_concurrency": rec.concurrency,
        "recommendation": rec.text,
        "capacity": capacity_mod.capacity(
            done, axis.key, rec.on(axis.key), rec.concurrency, run_capacity(run_dir, capacity), knee["concurrency"]
        ),
        "health": run.get("health") if isinstance(run.get("health"), dict) else None,
        "text_reuse": sections.text_reuse,
        "diagnosis": _diagnosis(run_dir, axis, done, knee, creep, sections),
        "little_law": axis.little_law(done),
        "usl": axis.usl(done),
        "gpu_memory_baseline_bytes": memory_baseline(run_dir.resources, first),
        "gpu_memory_after_run_bytes": creep["after_run_bytes"] if creep else None,
        "gpu_memory_creep": creep,
        "server_timing_stages": list(parts.every.stages),
        "cut_by_run_end": int(run_end_cut(parts.every).sum()),
    }
    # the sections a run may not have, each in when it has it (in this order)
    if sections.barge_in is not None:
        summary["barge_in"] = sections.barge_in
    if sections.hangups is not None:
        summary["hangups"] = sections.hangups
    if axis.open_loop:
        summary["recommended_rate"] = rec.rate
        summary["dropped"] = sum(step.get("dropped") or 0 for step in steps)
    if soaks:
        summary["soak"] = soak_mod.soak(
            parts.a, soaks[-1], run_dir.resources, axis.open_loop, streamed, _soak_of(run_dir)
        )
    if sections.probe is not None:
        summary["probe"] = sections.probe
    if sections.spike is not None:
        summary["spike"] = sections.spike
    if axis.key == "voices":
        summary["recommended_voices"] = rec.voices
    if sliced is not None:
        summary["slices"] = sliced
    if lines:
        summary["judge"] = speech_mod.judged(lines, run)
    _trace(run_dir, parts, steps, done, summary)
    if sliced and sliced["note"]:
        summary["diagnosis"]["evidence"].append(sliced["note"])
    return _cleaned(summary)


def _cleaned(summary: Summary) -> Summary:
    """The summary JSON-safe (:func:`_clean`). Cleaning keeps its shape: the same keys, numpy
    numbers as Python's, a NaN or infinite figure as null (which every figure that can be one
    declares), tuples as lists."""
    cleaned = _clean(summary)
    assert isinstance(cleaned, dict), "a summary cleaned is a summary"
    return cast(Summary, cleaned)  # _clean walks the JSON untyped; it returns the shape it was given


def load(path: Path) -> RunDir:
    """Open and read a run directory; raises :class:`RunDirError` with a one-sentence message."""
    run_dir = RunDir(Path(path))
    run_dir.check()
    run_dir.refresh()
    if run_dir.format_error:
        raise RunDirError(f"{run_dir.path}: {run_dir.format_error}")
    if run_dir.run_json_error and "missing" not in run_dir.run_json_error and not run_dir.run:
        raise RunDirError(f"{run_dir.path}: {run_dir.run_json_error}; fix or remove it.")
    if not len(run_dir.requests.attempts()):
        raise RunDirError(f"{run_dir.path} has no attempt records yet (requests.jsonl is missing or empty).")
    _steps_of(run_dir)
    _settle_of(run_dir)
    return run_dir


def write_summary(run_dir: RunDir, summary: Summary) -> Path:
    """Write ``summary.json`` atomically; an OSError leaves no temporary file behind."""
    return runformat.write_json(run_dir.path / runformat.SUMMARY_JSON, summary, indent=1)
