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
    done = [s for s in steps if s.get("requests")]
    if not done:
        return None, "No settled requests yet."
    k = knee["index"]
    if k is None:
        top = done[-1]
        return top["concurrency"], (
            f"No knee up to {top['concurrency']}: {top['concurrency']} is the "
            f"highest tested step; test higher to find the limit."
        )
    if k == 0:
        return None, (f"The lowest step ({done[0]['concurrency']}) is already past the knee; test lower concurrency.")
    rec, nxt = done[k - 1], done[k]

    def ms(d: Mapping[str, Any] | None, q: str) -> str:
        return f"{d[q]:.0f} ms" if d and d.get(q) is not None else "n/a"

    def desc(s: StepSummary) -> str:
        if knee.get("streamed"):
            rate = s.get("underrun_rate")
            stalled = (
                "underruns n/a"
                if rate is None
                else (
                    f"{share(rate)} of streams stalled"
                    + (f" (p95 stall {ms(s.get('underrun_ms'), 'p95')})" if rate else "")
                )
            )
            heard = (
                f" (audible {ms(s.get('ttfa_audible_ms'), 'p95')})"
                if knee.get("ttfa_basis") == "ttfa_audible_ms"
                else ""
            )
            head = f"TTFA p95 {ms(s.get('ttfa_ms'), 'p95')}{heard}, {stalled}"
        else:
            head = f"p95 wait {ms(s.get('latency_ms'), 'p95')}"
        sp: Mapping[str, Any] = s.get("speech") or {}
        heard = f", {sp['metric'].upper()} {speech_mod.pct(sp.get(sp['metric'] + '_mean'))}" if sp.get("judged") else ""
        return (
            f"at {s['concurrency']}: {head}{heard}, {s['throughput_rps'] or 0:.2f} req/s, "
            f"{s['failed']} of {s['requests']} requests failed"
        )

    return rec["concurrency"], f"Limit concurrency to {rec['concurrency']} ({desc(rec)}; {desc(nxt)})."


def _p95_text(d: Dist | None) -> str:
    if d is None or d.get("p95") is None:
        return "n/a"
    ci = d.get("p95_ci")
    return f"{d['p95']:.0f} ms" + (f" (95% CI {ci_range(ci)})" if ci else "")


def _level_text(s: StepSummary) -> str:
    """One level's evidence: p95 (TTFA first in a streamed run), throughput, failures."""
    p95 = (f"p95 TTFA {_p95_text(s['ttfa_ms'])}, p95 wait " if s.get("ttfa_ms") else "p95 wait ") + _p95_text(
        s.get("latency_ms")
    )
    rep = f", {s['repeats']} repeats pooled" if s.get("repeats", 1) > 1 else ""
    return (
        f"at {s['concurrency']}: {p95}, {s['throughput_rps'] or 0:.2f} req/s, "
        f"{s['failed']} of {s['requests']} requests failed{rep}"
    )


def recommend_slo(
    levels: list[StepSummary], verdicts: list[SloVerdict], spec: str, best: int | None, knee: int | None
) -> str:
    """Why ``best`` (``slo.max_concurrency``) is the recommendation, in one or two sentences."""
    if not levels:
        return "No settled requests yet."
    knee_txt = f" The knee is at {knee}." if knee else ""
    first_bad = next((i for i, v in enumerate(verdicts) if v["pass"] is not True), None)
    if best is None:
        v, lv = verdicts[0], levels[0]
        if v["pass"] is False:
            return (
                f"No tested concurrency meets the SLO {spec}: at the lowest, {lv['concurrency']}, "
                f"{', '.join(v['failed'])}; test lower concurrency or relax the SLO.{knee_txt}"
            )
        return (
            f"No tested concurrency is shown to meet the SLO {spec}: at the lowest, {lv['concurrency']}, "
            f"{'; '.join(v['inconclusive'])} (inconclusive counts as not meeting it).{knee_txt}"
        )
    i = next(k for k, lv in enumerate(levels) if lv["concurrency"] == best)
    text = (
        f"Limit concurrency to {best}: the largest tested concurrency that meets the SLO {spec} "
        f"with every lower one meeting it ({_level_text(levels[i])})"
    )
    if first_bad is None:
        return text + f"; every tested concurrency meets it, so test higher to find the limit.{knee_txt}"
    nxt, v = levels[first_bad], verdicts[first_bad]
    why = (
        ", ".join(v["failed"])
        if v["pass"] is False
        else "; ".join(v["inconclusive"]) + " (inconclusive counts as not meeting it)"
    )
    text += f"; at {nxt['concurrency']} {why}"
    if nxt["concurrency"] > best + 1:
        text += (
            f"; {best + 1}"
            + (f"-{nxt['concurrency'] - 1}" if nxt["concurrency"] > best + 2 else "")
            + " untested (--refine tests them)"
        )
    later = [
        lv["concurrency"] for lv, vv in zip(levels[first_bad + 1 :], verdicts[first_bad + 1 :]) if vv["pass"] is True
    ]
    if later:
        text += (
            f"; {', '.join(map(str, later))} met it again but {nxt['concurrency']} did not, "
            f"so {'they do' if len(later) > 1 else 'it does'} not count"
        )
    return text + "." + knee_txt
