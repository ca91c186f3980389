"""Open-loop runs (``--rates``): per-step arrival figures, the knee in requests per second, and
the recommended rate with the concurrency it implies.

A run is open loop when run.json's ``mode`` says so (:meth:`runformat.reader.RunDir.mode`); each
of its steps carries a ``rate`` (offered requests per second, all workers together). On top of
:func:`analysis.steps.step_stats` each step gets:

- ``rate``, ``dropped`` (arrivals not sent because ``--max-inflight`` requests were in flight),
  ``offered`` (arrivals scheduled: requests sent plus dropped) and ``throughput_ratio``
  (``throughput_rps / rate``);
- ``inflight`` {``mean``, ``max``}: the mean is the time-weighted number of requests in flight
  over the step's window (every logical request from its first ``t0`` to its end, whichever step
  sent it), the max the highest in-flight count an attempt was sent at;
- ``sched_wait_ms``: the distribution of ``t2 - scheduled`` of the successful final attempts,
  the latency a caller who arrived on time saw (retries and any lateness of the generator
  included); ``send_lag_ms``: ``t0 - scheduled`` of every attempt 1 (the generator's own
  lateness; it must stay small for the figures to mean anything);
- ``growth``: whether latency kept growing within the step: the step's successful requests in
  order of ``scheduled``, cut into three equal parts; ``p50_thirds`` are their median
  ``sched_wait_ms``; ``growing`` when each third's median is above the one before and the last
  is more than ``GROWTH_RATIO`` (1.5x) the first. ``slope_ms_per_s`` is the least-squares slope
  of ``sched_wait_ms`` over ``scheduled``. A queue that builds for the whole step is the
  signature of overload in open loop: the server takes less than is offered.

**The knee** (``knee.rate``) is the lowest offered rate at which any of these holds (the
``methods``, each naming the rate it points at, or null):

- ``throughput_shortfall``: throughput is more than ``SHORTFALL`` (15%) below the offered rate
  (dropped arrivals count as not served);
- ``latency_growing``: ``growth.growing``;
- ``latency_vs_lowest``: p95 of ``sched_wait_ms`` is more than ``LATENCY_RISE`` (1.5x) the lowest
  rate's and stays so at every higher rate;
- ``failures``: at least ``FAILURE_RATE`` (5%) of the step's requests fail, and that much more
  than at the lowest rate;
- ``signal``: runaway, truncated or length-mismatched answers rose with the rate, as for
  concurrency (:mod:`analysis.knee`); ``signal_first`` when it came before the others (the
  diagnosis is then ``speech_degraded``).

``recommended_rate`` is the rate before the knee (the highest tested rate when there is none;
null when the lowest is already past it). With an SLO it is ``slo.max_rate`` instead: the highest
rate that meets the SLO with every lower tested rate meeting it, each judged (:func:`judge`) on
its latency from the schedule, and failed whatever its percentiles when its latency kept growing.
``recommended_concurrency`` is what that rate implies by Little's law: rate x the step's mean
``sched_wait_ms``, rounded up: the concurrency limit a server taking this rate should allow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import Diagnosis, Growth, Knee, KneeMethods, MemoryCreep, SloVerdict, StepSummary

from . import slo as slo_mod
from .confidence import ci_range
from .diagnosis import diagnose as by_steps
from .knee import FAILURE_RATE, LATENCY_RISE, signal_first, signal_rise
from .steps import add_intervals, dist, spans

SHORTFALL = 0.15
GROWTH_RATIO = 1.5
#: Fewest successful requests per third for the growth rule to judge a step.
GROWTH_MIN = 3
RULES = ("throughput_shortfall", "latency_growing", "latency_vs_lowest", "failures", "signal")


def _growth(sched: np.ndarray, waits: np.ndarray) -> Growth:
    order = np.argsort(sched, kind="stable")
    sched, waits = sched[order], waits[order]
    thirds = np.array_split(waits, 3)
    if len(waits) < 3 * GROWTH_MIN:
        return {"p50_thirds": None, "growing": None, "slope_ms_per_s": None}
    p50 = [float(np.median(third)) for third in thirds]
    span = sched[-1] - sched[0]
    slope = float(np.polyfit(sched - sched[0], waits, 1)[0]) if span > 0 else None
    growing = p50[0] < p50[1] < p50[2] and p50[2] > GROWTH_RATIO * p50[0]
    return {"p50_thirds": p50, "growing": bool(growing), "slope_ms_per_s": slope}


def _inflight_mean(attempts: Attempts, window_start: float | None, window_end: float | None) -> float | None:
    if window_start is None or window_end is None or not window_end > window_start:
        return None
    fin, start, end = spans(attempts)
    busy = np.clip(np.minimum(end, window_end) - np.maximum(start, window_start), 0.0, None).sum()
    return float(busy) / (window_end - window_start)


def step_figures(attempts: Attempts, step: Mapping[str, Any], stats: StepSummary) -> dict[str, Any]:
    """The open-loop figures of one step (``step``: its run.json entry; ``stats``: its
    ``step_stats``), to merge into ``stats``."""
    in_step = (attempts["step"] == step["step"]) & attempts["settled"]
    okf = in_step & attempts["final"] & attempts["ok"]
    first = in_step & (attempts["attempt"] <= 1)
    sched = attempts["scheduled"]
    rate, dropped = step.get("rate"), step.get("dropped") or 0
    target = step.get("offered_rps") or rate  # a trace's window may hold more or fewer than its mean
    win = stats.get("window") or {}
    conc = attempts["concurrency"][in_step]
    thr = stats.get("throughput_rps")
    waits = attempts["sched_wait_ms"][okf]
    sched_wait = dist(waits)
    if sched_wait is not None:
        add_intervals(sched_wait, waits)
    return {
        "rate": rate,
        "dropped": dropped,
        "offered": int(first.sum()) + dropped,
        "throughput_ratio": thr / target if thr is not None and target else None,
        **({"offered_rps": step["offered_rps"]} if step.get("offered_rps") else {}),
        "inflight": {
            "mean": _inflight_mean(attempts, win.get("start"), win.get("end")),
            "max": int(conc.max()) if len(conc) and conc.max() >= 0 else None,
        },
        "sched_wait_ms": sched_wait,
        "send_lag_ms": dist((attempts["t0"][first] - sched[first]) * 1000.0),
        "growth": _growth(sched[okf], attempts["sched_wait_ms"][okf]),
    }


def level_figures(
    attempts: Attempts, entry: dict[str, Any], stats: StepSummary, steps: list[dict[str, Any]]
) -> dict[str, Any]:
    """The open-loop figures of a rate tested by several steps (``--repeat``, a refine probe at a
    tested rate), over their pooled records (``entry``: the pooled step number and the rate;
    ``stats``: their pooled ``step_stats``, see :mod:`analysis.levels`): the distributions pooled,
    drops added up, in flight weighted by each step's window; and the queue kept growing when it
    did in any one step (each is judged over its own thirds: thirds across repeats mean nothing)."""
    out = step_figures(
        attempts,
        dict(entry, dropped=sum(step.get("dropped") or 0 for step in steps), offered_rps=steps[0].get("offered_rps")),
        stats,
    )
    timed = [
        (step["inflight"]["mean"], step["window"]["duration_s"])
        for step in steps
        if (step.get("inflight") or {}).get("mean") is not None and step["window"].get("duration_s")
    ]
    highs = [step["inflight"]["max"] for step in steps if (step.get("inflight") or {}).get("max") is not None]
    out["inflight"] = {
        "mean": sum(mean * duration for mean, duration in timed) / sum(duration for _, duration in timed)
        if timed
        else None,
        "max": max(highs) if highs else None,
    }
    growths = [step.get("growth") or {} for step in steps]
    grew = next((growth for growth in growths if growth.get("growing")), None)
    known = [growth.get("growing") for growth in growths if growth.get("growing") is not None]
    out["growth"] = dict(grew or growths[-1], growing=any(known) if known else None)
    return out


def judged(step: StepSummary) -> StepSummary:
    """A rate step as an SLO judges it: its latency terms (``p95_ms`` …) read latency from the
    schedule, what a caller arriving on time waited."""
    return {**step, "latency_ms": step.get("sched_wait_ms")}


def judge(slo: slo_mod.SLO, step: StepSummary) -> SloVerdict:
    """:func:`analysis.slo.judge` of a rate step on its latency from the schedule, failing a step
    whose latency kept growing through it whatever its percentiles: its queue was still
    building when it ended, so a longer step would have shown more."""
    verdict = slo_mod.judge(slo, judged(step))
    verdict["rate"] = step.get("rate")
    growth: Mapping[str, Any] = step.get("growth") or {}
    if growth.get("growing"):
        thirds = growth["p50_thirds"]
        verdict["failed"].append(
            f"latency from schedule kept growing (median {thirds[0]:.0f} -> {thirds[1]:.0f} -> {thirds[2]:.0f} ms "
            f"over the step's thirds)"
        )
        verdict.update({"pass": False, "more_requests": None})
    return verdict


def implied_concurrency(level: StepSummary) -> int | None:
    """What the rate of the step ``level`` keeps in flight by Little's law: rate x its mean latency from
    schedule, rounded up."""
    sched_wait: Mapping[str, Any] = level.get("sched_wait_ms") or {}
    mean = sched_wait.get("mean")
    return math.ceil(level["rate"] * mean / 1000.0) if mean is not None else None


def offered(level: StepSummary) -> float:
    """What the step ``level`` offered, per second: its rate, or for a trace step what its settled window
    replayed (``offered_rps``)."""
    offered: float = level.get("offered_rps") or level["rate"]
    return offered


def past_knee(steps: list[StepSummary]) -> tuple[bool, str]:
    """Whether the latest of a pass's steps (ascending rates, the plan's ``--stop-past-knee``)
    breaks one of the knee's rules on its own figures, and the figures why."""
    last = steps[-1]
    if not last.get("requests"):
        return True, "is past the knee (not one request finished in it)"
    thr = last.get("throughput_rps") or 0.0
    if thr < (1 - SHORTFALL) * offered(last):
        return True, f"is past the knee (it served {thr:.2f} of {offered(last):.3g} req/s offered)"
    growth: Mapping[str, Any] = last.get("growth") or {}
    if growth.get("growing"):
        thirds = growth["p50_thirds"]
        return True, f"is past the knee (latency from schedule kept growing, {thirds[0]:.0f} -> {thirds[2]:.0f} ms)"
    done = [level for level in steps if level.get("requests")]
    base, p95 = _p95(done[0]), _p95(last)
    if len(done) > 1 and base and p95 is not None and p95 > LATENCY_RISE * base:
        return True, f"is past the knee (p95 from schedule {p95 / base:.1f}x the lowest rate's)"
    low, last_error = done[0].get("error_rate") or 0.0, last.get("error_rate") or 0.0
    if last_error >= FAILURE_RATE and last_error - low >= FAILURE_RATE:
        return True, f"is past the knee ({last_error:.0%} of requests fail)"
    return False, ""


def recommend_slo(
    levels: list[StepSummary], verdicts: list[SloVerdict], spec: str, best: float | None
) -> tuple[int | None, str]:
    """(the concurrency ``best`` (``slo.max_rate``) implies by Little's law, why it is the
    recommendation) over the rate levels and their SLO verdicts."""
    if not levels:
        return None, "No settled requests yet."
    if best is None:
        verdict, level = verdicts[0], levels[0]
        why = (
            ", ".join(verdict["failed"])
            if verdict["pass"] is False
            else "; ".join(verdict["inconclusive"]) + " (inconclusive counts as not meeting it)"
        )
        return None, (
            f"No tested rate meets the SLO {spec}: at the lowest, {level['rate']:g} req/s, {why}; test "
            f"lower rates or relax the SLO."
        )
    best_index = next(index for index, level in enumerate(levels) if level["rate"] == best)
    rec = levels[best_index]
    implied = implied_concurrency(rec)
    lat: Mapping[str, Any] = rec.get("sched_wait_ms") or {}
    p95 = (
        "n/a"
        if lat.get("p95") is None
        else f"{lat['p95']:.0f} ms" + (f" (95% CI {ci_range(lat['p95_ci'])})" if lat.get("p95_ci") else "")
    )
    text = (
        f"Offer at most {best:g} req/s: the highest tested rate that meets the SLO {spec} with every lower "
        f"one meeting it (p95 from schedule {p95}, {rec.get('throughput_rps') or 0:.2f} req/s served, "
        f"{rec['failed']} of {rec['requests']} failed)"
    )
    nxt = next(
        (
            (level, verdict)
            for level, verdict in zip(levels[best_index + 1 :], verdicts[best_index + 1 :])
            if verdict["pass"] is not True
        ),
        None,
    )
    if nxt is None:
        text += "; every tested rate meets it, so test higher rates to find the limit"
    else:
        level, verdict = nxt
        why = (
            ", ".join(verdict["failed"])
            if verdict["pass"] is False
            else "; ".join(verdict["inconclusive"]) + " (inconclusive counts as not meeting it)"
        )
        text += f"; at {level['rate']:g} req/s {why}"
    if implied is not None:
        text += (
            f". By Little's law that rate at a mean {lat['mean']:.0f} ms keeps about {implied} requests in "
            f"flight: a concurrency limit of {implied}"
        )
    return implied, text + "."


def _p95(level: StepSummary) -> float | None:
    sched_wait: Mapping[str, Any] = level.get("sched_wait_ms") or {}
    p95: float | None = sched_wait.get("p95")
    return p95


def find_knee(steps: list[StepSummary]) -> Knee:
    """``{"rate", "index", "methods", "agree", "rules"}`` over the steps with requests, in
    ascending rate (see the module doc); ``index`` is into that list."""
    steps = [level for level in steps if level.get("requests")]
    idx: dict[str, int | None] = dict.fromkeys(RULES)
    if steps:
        for i, level in enumerate(steps):
            thr = level.get("throughput_rps") or 0.0
            if idx["throughput_shortfall"] is None and thr < (1 - SHORTFALL) * offered(level):
                idx["throughput_shortfall"] = i
            growth: Mapping[str, Any] = level.get("growth") or {}
            if idx["latency_growing"] is None and growth.get("growing"):
                idx["latency_growing"] = i
        base = _p95(steps[0])
        high = [base is not None and (p95 := _p95(level)) is not None and p95 > LATENCY_RISE * base for level in steps]
        for i in range(1, len(steps)):
            if all(high[i:]):
                idx["latency_vs_lowest"] = i
                break
        low_err = steps[0].get("error_rate") or 0.0
        for i, level in enumerate(steps):
            error_rate = level.get("error_rate") or 0.0
            if error_rate >= FAILURE_RATE and error_rate - low_err >= FAILURE_RATE:
                idx["failures"] = i
                break
        rise = signal_rise(steps)
        idx["signal"] = None if rise is None else rise[0]
    hits = [i for i in idx.values() if i is not None]
    knee_index = min(hits) if hits else None
    methods = {name: (steps[i]["rate"] if i is not None else None) for name, i in idx.items()}
    rate = steps[knee_index]["rate"] if knee_index is not None else None
    return {
        "rate": rate,
        "concurrency": None,
        "index": knee_index,
        "methods": cast(KneeMethods, methods),
        "agree": [name for name, named_rate in methods.items() if named_rate is not None and named_rate == rate],
        "rules": list(RULES),
        "streamed": False,
        "axis": "rate",
        "signal_first": signal_first(idx, RULES),
    }


def recommend(steps: list[StepSummary], knee: Knee) -> tuple[float | None, int | None, str]:
    """(recommended rate, the concurrency it implies, the recommendation in words)."""
    done = [level for level in steps if level.get("requests")]
    if not done:
        return None, None, "No settled requests yet."
    knee_index = knee["index"]
    if knee_index == 0:
        return (
            None,
            None,
            (f"The lowest offered rate ({done[0]['rate']:g} req/s) is already past the knee; test lower rates."),
        )
    rec = done[-1] if knee_index is None else done[knee_index - 1]
    sched_wait: Mapping[str, Any] = rec.get("sched_wait_ms") or {}
    mean = sched_wait.get("mean")
    implied = implied_concurrency(rec)
    if knee_index is None:
        text = (
            f"No knee up to {rec['rate']:g} req/s, the highest offered; test higher rates to find the "
            f"limit ({_desc(rec)})"
        )
    else:
        text = f"Offer at most {rec['rate']:g} req/s ({_desc(rec)}; {_desc(done[knee_index])})"
    if implied is not None:
        text += (
            f". By Little's law that rate at a mean {mean:.0f} ms keeps about {implied} requests in flight: "
            f"a concurrency limit of {implied}"
        )
    return rec["rate"], implied, text + "."


def _desc(level: StepSummary) -> str:
    lat: Mapping[str, Any] = level.get("sched_wait_ms") or {}
    send_lag: Mapping[str, Any] = level.get("send_lag_ms") or {}
    lag = send_lag.get("p95")
    p95 = "n/a" if lat.get("p95") is None else f"{lat['p95']:.0f} ms"
    return (
        f"at {level['rate']:g} req/s offered: {level.get('throughput_rps') or 0:.2f} req/s served, p95 latency from "
        f"schedule {p95}, {level.get('dropped') or 0} dropped, {level['failed']} of {level['requests']} failed"
        + (f", send lag p95 {lag:.1f} ms" if lag is not None else "")
    )


#: Phrases of the closed-loop verdict that name a step by its concurrency, as they read for a rate.
_WORDING = (
    ("at concurrency ", "at "),
    ("up to concurrency ", "up to "),
    ("test higher concurrency", "test higher rates"),
)


def at_rates(steps: list[StepSummary]) -> list[StepSummary]:
    """The rate steps, each standing at its offered rate with its latency from schedule, as
    :mod:`analysis.diagnosis` reads a level."""
    # a level's concurrency is its rate's label here: the diagnosis only prints it
    return [
        cast(
            StepSummary,
            {
                **level,
                "concurrency": f"{level['rate']:g} req/s",
                "latency_ms": level.get("sched_wait_ms") or level.get("latency_ms"),
            },
        )
        for level in steps
    ]


def reword(evidence: list[str]) -> list[str]:
    """Sentences written for concurrency, said of rates."""
    out = []
    for line in evidence:
        for old, new in _WORDING:
            line = line.replace(old, new)
        out.append(line)
    return out


def diagnose(steps: list[StepSummary], knee: Knee, creep: MemoryCreep | None, has_resources: bool) -> Diagnosis:
    """:func:`analysis.diagnosis.diagnose` on the rate steps, each standing at its offered rate
    with its latency from schedule, after one sentence on what the open-loop rules saw."""
    as_levels = at_rates(steps)
    label = None if knee["rate"] is None else f"{knee['rate']:g} req/s"
    # the knee's concurrency is its rate's label, as at_rates's levels have it
    diagnosis = by_steps(as_levels, cast(Knee, {**knee, "concurrency": label, "inflation": []}), creep, has_resources)
    evidence = reword(diagnosis["evidence"])
    knee_index = knee["index"]
    if knee_index is not None:
        level = [each for each in steps if each.get("requests")][knee_index]
        growth: Mapping[str, Any] = level.get("growth") or {}
        thirds = growth.get("p50_thirds")
        evidence.insert(
            0,
            f"At {level['rate']:g} req/s offered the server took {level.get('throughput_rps') or 0:.2f} req/s "
            f"({level.get('dropped') or 0} arrivals dropped)"
            + (
                f"; median latency from schedule went {thirds[0]:.0f} -> {thirds[1]:.0f} -> "
                f"{thirds[2]:.0f} ms over the step's thirds"
                if thirds
                else ""
            )
            + (": the queue kept growing, so that rate is past what it serves." if growth.get("growing") else "."),
        )
    diagnosis["evidence"] = evidence
    return diagnosis
