"""Voice sweeps (``--voice-steps``): the knee over the number of distinct voices at one
concurrency, the recommended number, and the ``voice_cache`` diagnosis.

A run is a voice sweep when its steps carry ``voices`` (run.json; each step drew its requests'
voices from the first N of ``--voices``). Its levels are one per number of voices, repeats
pooled as for concurrency (:mod:`analysis.levels`).

**The knee** (``knee.voices``) is found by the concurrency sweep's rules (:mod:`analysis.knee`)
with the number of voices as the axis: latency more than ``LATENCY_RISE`` the fewest voices'
and staying so (``latency_vs_lowest``), failures rising (``failures``), and in a streamed run
underruns and TTFA; the cross-checks that compare steps by their load
(``throughput_efficiency``) do not apply, since the load is the same at every step.
``recommended_voices`` is the number before the knee (the most tested when there is none; null
when the fewest is already past it).

**The diagnosis** is ``voice_cache`` when latency rose with the number of voices (the knee) and
nothing that fails requests explains it first (memory, the load generator, throttling, server
errors, judged as for concurrency): the server recomputes what it keeps per voice (a speaker
embedding, a prompt cache) once the voices outnumber what it keeps. The evidence names the step
and, where the server publishes its voice cache's counters (``server.server_roles``
``voice_cache_hits``, ``voice_cache_misses``, ``voice_cache_evictions``, from a scraped series
or ``--server-stats``), its hit rate and evictions there and at the step before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from tts_knee.runformat.summary import Diagnosis, DiagnosisKind as Kind, Knee, MemoryCreep, SloVerdict, StepSummary

from .diagnosis import diagnose as by_steps
from .knee import LATENCY_RISE, find_knee as knee_over
from .steps import PlannedStep

#: Kinds a voice sweep keeps from the concurrency diagnosis: what they name fails requests or
#: spoils the measurement whatever the number of voices.
_KEPT = (Kind.MEMORY_BOUND, Kind.CLIENT_BOUND, Kind.RATE_LIMITED, Kind.SERVER_ERRORS)
_NOT_APPLICABLE: tuple[Literal["throughput_efficiency"]] = ("throughput_efficiency",)


def is_sweep(steps: list[PlannedStep]) -> bool:
    return bool(steps) and all(step.get("voices") is not None for step in steps)


def on_axis(levels: list[StepSummary]) -> list[StepSummary]:
    """The levels standing at their number of voices, as :mod:`analysis.knee` reads a level."""
    return [{**level, "concurrency": level["voices"]} for level in levels]


def find_knee(levels: list[StepSummary], streamed: bool, ttfa_floor_ms: float) -> Knee:
    """:func:`analysis.knee.find_knee` over the number of voices; ``voices`` names the knee,
    ``concurrency`` the one the sweep ran at."""
    knee = knee_over(on_axis(levels), streamed, ttfa_floor_ms)
    for name in _NOT_APPLICABLE:
        knee["methods"].pop(name, None)
    knee["agree"] = [name for name in knee["agree"] if name not in _NOT_APPLICABLE]
    knee["efficiency"] = []
    done = [level for level in levels if level.get("requests")]
    return {
        **knee,
        "voices": knee["concurrency"],
        "concurrency": done[0]["concurrency"] if done else None,
        "axis": "voices",
    }


def _voices(count: int) -> str:
    return f"{count} voice" if count == 1 else f"{count} voices"


def _desc(level: StepSummary) -> str:
    latency: Mapping[str, Any] = level.get("latency_ms") or {}
    p95 = latency.get("p95")
    return (
        f"with {_voices(level['voices'])}: p95 wait {'n/a' if p95 is None else f'{p95:.0f} ms'}, "
        f"{level.get('throughput_rps') or 0:.2f} req/s, {level['failed']} of {level['requests']} requests failed"
    )


def recommend(levels: list[StepSummary], knee: Knee) -> tuple[int | None, str]:
    """(recommended number of voices, the recommendation in words)."""
    done = [level for level in levels if level.get("requests")]
    if not done:
        return None, "No settled requests yet."
    knee_index, conc = knee["index"], done[0]["concurrency"]
    if knee_index == 0:
        return None, (
            f"The fewest voices tested ({done[0]['voices']}) are already past the knee at concurrency "
            f"{conc}; test fewer."
        )
    if knee_index is None:
        top = done[-1]
        return top["voices"], (
            f"No knee up to {top['voices']} distinct voices at concurrency {conc} ({_desc(top)}); "
            f"test more voices to find where the server stops keeping up."
        )
    rec, nxt = done[knee_index - 1], done[knee_index]
    return rec["voices"], (
        f"Keep to {rec['voices']} distinct {'voice' if rec['voices'] == 1 else 'voices'} at "
        f"concurrency {conc}, or give the server room "
        f"for more ({_desc(rec)}; {_desc(nxt)})."
    )


def _role(level: StepSummary, role: str) -> float | None:
    server: Mapping[str, Any] = level.get("server") or {}
    role_figures: Mapping[str, float] | None = (server.get("server_roles") or {}).get(role)
    return None if role_figures is None else role_figures["mean"]


def cache_sentence(level: StepSummary) -> str | None:
    """The server's voice cache at one level, in words; None where it publishes no counters."""
    hits, misses = _role(level, "voice_cache_hits"), _role(level, "voice_cache_misses")
    evictions = _role(level, "voice_cache_evictions")
    if hits is None and misses is None and evictions is None:
        return None
    parts = []
    if hits is not None and misses is not None and hits + misses > 0:
        parts.append(f"hit {hits / (hits + misses):.0%} of lookups ({hits:.1f} hits and {misses:.1f} misses a second)")
    if evictions is not None:
        dur = (level.get("window") or {}).get("duration_s")
        over = f", about {evictions * dur:.0f} over the step's {dur:.0f} s" if dur else ""
        parts.append(f"evicted {evictions:.1f} voices a second{over}")
    return f"with {level['voices']} voices it " + " and ".join(parts) if parts else None


def diagnose(levels: list[StepSummary], knee: Knee, creep: MemoryCreep | None, has_resources: bool) -> Diagnosis:
    """The diagnosis of a voice sweep (see the module doc)."""
    diagnosis = by_steps(on_axis(levels), {**knee, "concurrency": knee.get("voices")}, creep, has_resources)
    done = [level for level in levels if level.get("requests")]
    knee_index = knee.get("index")
    if diagnosis["kind"] in _KEPT or not done:
        return diagnosis
    conc = done[0]["concurrency"]
    if knee_index is None:
        base, top = done[0], done[-1]
        infl = max((ratio for ratio in knee.get("inflation", []) if ratio is not None), default=1.0)
        evidence = [
            f"Latency stayed within {LATENCY_RISE}x of the fewest voices' up to {top['voices']} distinct voices at "
            f"concurrency {conc} (largest rise {infl:.2f}x; {_desc(base)}; {_desc(top)}): the server keeps up with "
            f"that many voices."
        ]
        cache = cache_sentence(top)
        if cache:
            evidence.append(f"Its voice cache: {cache}.")
        return {**diagnosis, "kind": Kind.NO_KNEE, "evidence": evidence + _notes(diagnosis)}
    level, low_level = done[knee_index], done[knee_index - 1] if knee_index else done[0]

    def lat(level: StepSummary, stat: str) -> float | None:
        latency: Mapping[str, Any] = level.get("latency_ms") or {}
        value: float | None = latency.get(stat)
        return value

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f} ms"

    evidence = [
        f"At concurrency {conc} throughout, p95 wait rose from {ms(lat(low_level, 'p95'))} "
        f"with {low_level['voices']} distinct "
        f"{'voice' if low_level['voices'] == 1 else 'voices'} to {ms(lat(level, 'p95'))} with {level['voices']} "
        f"(p50 {ms(lat(low_level, 'p50'))} -> {ms(lat(level, 'p50'))}, step "
        f"{_step(level)}): the same load costs more once there are more voices, so the server recomputes what it "
        f"keeps per voice (a speaker embedding, a prompt cache) when it no longer keeps them all."
    ]
    here, before = cache_sentence(level), cache_sentence(low_level)
    if here:
        evidence.append(
            f"The server's voice cache says so: {here}"
            + (f", while {before}." if before and low_level is not level else ".")
        )
    else:
        evidence.append(
            "The server publishes no voice-cache figures (a metrics series such as *voice_cache_hits_total, "
            "or a JSON endpoint given with --server-stats): the rise with the number of voices is the evidence."
        )
    return {**diagnosis, "kind": Kind.VOICE_CACHE, "evidence": evidence + _notes(diagnosis)}


def _step(level: StepSummary) -> str:
    numbers: Sequence[int | None] = level.get("steps") or [level.get("step")]
    return ", ".join(map(str, numbers))


def _notes(diagnosis: Diagnosis) -> list[str]:
    """The concurrency diagnosis's sentences that hold whatever the kind (missing samples,
    audio integrity, another process on the load generator's host)."""
    keep = (
        "No resource samples",
        "No server samples",
        "Audio length was off",
        "The load generator's host",
        "The run was streamed",
    )
    return [sentence for sentence in diagnosis["evidence"] if sentence.startswith(keep)]


def recommend_slo(
    levels: list[StepSummary], verdicts: list[SloVerdict], spec: str, best: int | None, knee: int | None
) -> str:
    """Why ``best`` (``slo.max_voices``) is the recommendation."""
    done = [level for level in levels if level.get("requests")]
    if not done:
        return "No settled requests yet."
    conc, knee_txt = done[0]["concurrency"], f" The knee is at {knee} voices." if knee else ""
    if best is None:
        verdict = verdicts[0]
        why = (
            ", ".join(verdict["failed"])
            if verdict["pass"] is False
            else "; ".join(verdict["inconclusive"]) + " (inconclusive)"
        )
        return (
            f"No tested number of voices meets the SLO {spec} at concurrency {conc}: with the fewest, "
            f"{done[0]['voices']}, {why}; test fewer voices or relax the SLO.{knee_txt}"
        )
    best_level = next(level for level in done if level["voices"] == best)
    first_bad = next((i for i, verdict in enumerate(verdicts) if verdict["pass"] is not True), None)
    text = (
        f"Keep to {_voices(best)} at concurrency {conc}: the most tested that meets the SLO {spec} with "
        f"every fewer tested one meeting it ({_desc(best_level)})"
    )
    if first_bad is None:
        return text + f"; every tested number meets it, so test more voices to find the limit.{knee_txt}"
    verdict = verdicts[first_bad]
    why = (
        ", ".join(verdict["failed"])
        if verdict["pass"] is False
        else "; ".join(verdict["inconclusive"]) + " (inconclusive)"
    )
    return text + f"; with {_voices(done[first_bad]['voices'])} {why}.{knee_txt}"
