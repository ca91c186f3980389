"""Closed-loop runs (``--steps``): the recommended concurrency, from the knee or the SLO.

Its companions for the other axes are :mod:`analysis.openloop` (offered rates) and
:mod:`analysis.voices` (numbers of voices); :mod:`analysis.axis` chooses among them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tts_knee.runformat.summary import Dist, Knee, SloVerdict, StepSummary

from . import speech as speech_mod
from .confidence import ci_range
from .diagnosis import share


def recommend(steps: list[StepSummary], knee: Knee) -> tuple[int | None, str]:
    done = [step for step in steps if step.get("requests")]
    if not done:
        return None, "No settled requests yet."
    knee_index = knee["index"]
    if knee_index is None:
        top = done[-1]
        return top["concurrency"], (
            f"No knee up to {top['concurrency']}: {top['concurrency']} is the "
            f"highest tested step; test higher to find the limit."
        )
    if knee_index == 0:
        return None, (f"The lowest step ({done[0]['concurrency']}) is already past the knee; test lower concurrency.")
    rec, nxt = done[knee_index - 1], done[knee_index]

    def ms(dist: Mapping[str, Any] | None, percentile: str) -> str:
        return f"{dist[percentile]:.0f} ms" if dist and dist.get(percentile) is not None else "n/a"

    def desc(step: StepSummary) -> str:
        if knee.get("streamed"):
            rate = step.get("underrun_rate")
            stalled = (
                "underruns n/a"
                if rate is None
                else (
                    f"{share(rate)} of streams stalled"
                    + (f" (p95 stall {ms(step.get('underrun_ms'), 'p95')})" if rate else "")
                )
            )
            heard = (
                f" (audible {ms(step.get('ttfa_audible_ms'), 'p95')})"
                if knee.get("ttfa_basis") == "ttfa_audible_ms"
                else ""
            )
            head = f"TTFA p95 {ms(step.get('ttfa_ms'), 'p95')}{heard}, {stalled}"
        else:
            head = f"p95 wait {ms(step.get('latency_ms'), 'p95')}"
        speech: Mapping[str, Any] = step.get("speech") or {}
        heard = (
            f", {speech['metric'].upper()} {speech_mod.pct(speech.get(speech['metric'] + '_mean'))}"
            if speech.get("judged")
            else ""
        )
        return (
            f"at {step['concurrency']}: {head}{heard}, {step['throughput_rps'] or 0:.2f} req/s, "
            f"{step['failed']} of {step['requests']} requests failed"
        )

    return rec["concurrency"], f"Limit concurrency to {rec['concurrency']} ({desc(rec)}; {desc(nxt)})."


def _p95_text(dist: Dist | None) -> str:
    if dist is None or dist.get("p95") is None:
        return "n/a"
    interval = dist.get("p95_ci")
    return f"{dist['p95']:.0f} ms" + (f" (95% CI {ci_range(interval)})" if interval else "")


def _level_text(level: StepSummary) -> str:
    """One level's evidence: p95 (TTFA first in a streamed run), throughput, failures."""
    p95 = (f"p95 TTFA {_p95_text(level['ttfa_ms'])}, p95 wait " if level.get("ttfa_ms") else "p95 wait ") + _p95_text(
        level.get("latency_ms")
    )
    rep = f", {level['repeats']} repeats pooled" if level.get("repeats", 1) > 1 else ""
    return (
        f"at {level['concurrency']}: {p95}, {level['throughput_rps'] or 0:.2f} req/s, "
        f"{level['failed']} of {level['requests']} requests failed{rep}"
    )


def recommend_slo(
    levels: list[StepSummary], verdicts: list[SloVerdict], spec: str, best: int | None, knee: int | None
) -> str:
    """Why ``best`` (``slo.max_concurrency``) is the recommendation, in one or two sentences."""
    if not levels:
        return "No settled requests yet."
    knee_txt = f" The knee is at {knee}." if knee else ""
    first_bad = next((index for index, verdict in enumerate(verdicts) if verdict["pass"] is not True), None)
    if best is None:
        verdict, level = verdicts[0], levels[0]
        if verdict["pass"] is False:
            return (
                f"No tested concurrency meets the SLO {spec}: at the lowest, {level['concurrency']}, "
                f"{', '.join(verdict['failed'])}; test lower concurrency or relax the SLO.{knee_txt}"
            )
        return (
            f"No tested concurrency is shown to meet the SLO {spec}: at the lowest, {level['concurrency']}, "
            f"{'; '.join(verdict['inconclusive'])} (inconclusive counts as not meeting it).{knee_txt}"
        )
    best_index = next(index for index, level in enumerate(levels) if level["concurrency"] == best)
    text = (
        f"Limit concurrency to {best}: the largest tested concurrency that meets the SLO {spec} "
        f"with every lower one meeting it ({_level_text(levels[best_index])})"
    )
    if first_bad is None:
        return text + f"; every tested concurrency meets it, so test higher to find the limit.{knee_txt}"
    nxt, verdict = levels[first_bad], verdicts[first_bad]
    why = (
        ", ".join(verdict["failed"])
        if verdict["pass"] is False
        else "; ".join(verdict["inconclusive"]) + " (inconclusive counts as not meeting it)"
    )
    text += f"; at {nxt['concurrency']} {why}"
    if nxt["concurrency"] > best + 1:
        text += (
            f"; {best + 1}"
            + (f"-{nxt['concurrency'] - 1}" if nxt["concurrency"] > best + 2 else "")
            + " untested (--refine tests them)"
        )
    later = [
        level["concurrency"]
        for level, later_verdict in zip(levels[first_bad + 1 :], verdicts[first_bad + 1 :])
        if later_verdict["pass"] is True
    ]
    if later:
        text += (
            f"; {', '.join(map(str, later))} met it again but {nxt['concurrency']} did not, "
            f"so {'they do' if len(later) > 1 else 'it does'} not count"
        )
    return text + "." + knee_txt
