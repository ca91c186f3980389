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
    p50 = [float(np.median(t)) for t in thirds]
    span = sched[-1] - sched[0]
    slope = float(np.polyfit(sched - sched[0], waits, 1)[0]) if span > 0 else None
    growing = p50[0] < p50[1] < p50[2] and p50[2] > GROWTH_RATIO * p50[0]
    return {"p50_thirds": p50, "growing": bool(growing), "slope_ms_per_s": slope}


def _inflight_mean(a: Attempts, ws: float | None, we: float | None) -> float | None:
    if ws is None or we is None or not we > ws:
        return None
    fin, start, end = spans(a)
    busy = np.clip(np.minimum(end, we) - np.maximum(start, ws), 0.0, None).sum()
    return float(busy) / (we - ws)


def step_figures(a: Attempts, step: Mapping[str, Any], stats: StepSummary) -> dict[str, Any]:
    """The open-loop figures of one step (``step``: its run.json entry; ``stats``: its
    ``step_stats``), to merge into ``stats``."""
    m = (a["step"] == step["step"]) & a["settled"]
    okf = m & a["final"] & a["ok"]
    first = m & (a["attempt"] <= 1)
    sched = a["scheduled"]
    rate, dropped = step.get("rate"), step.get("dropped") or 0
    target = step.get("offered_rps") or rate  # a trace's window may hold more or fewer than its mean
    win = stats.get("window") or {}
    conc = a["concurrency"][m]
    thr = stats.get("throughput_rps")
    waits = a["sched_wait_ms"][okf]
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
            "mean": _inflight_mean(a, win.get("start"), win.get("end")),
            "max": int(conc.max()) if len(conc) and conc.max() >= 0 else None,
        },
        "sched_wait_ms": sched_wait,
        "send_lag_ms": dist((a["t0"][first] - sched[first]) * 1000.0),
        "growth": _growth(sched[okf], a["sched_wait_ms"][okf]),
    }


def level_figures(
    a: Attempts, entry: dict[str, Any], stats: StepSummary, steps: list[dict[str, Any]]
) -> dict[str, Any]:
    """The open-loop figures of a rate tested by several steps (``--repeat``, a refine probe at a
    tested rate), over their pooled records (``entry``: the pooled step number and the rate;
    ``stats``: their pooled ``step_stats``, see :mod:`analysis.levels`): the distributions pooled,
    drops added up, in flight weighted by each step's window; and the queue kept growing when it
    did in any one step (each is judged over its own thirds: thirds across repeats mean nothing)."""
    out = step_figures(
        a,
        dict(entry, dropped=sum(s.get("dropped") or 0 for s in steps), offered_rps=steps[0].get("offered_rps")),
        stats,
    )
    timed = [
        (s["inflight"]["mean"], s["window"]["duration_s"])
        for s in steps
        if (s.get("inflight") or {}).get("mean") is not None and s["window"].get("duration_s")
    ]
    highs = [s["inflight"]["max"] for s in steps if (s.get("inflight") or {}).get("max") is not None]
    out["inflight"] = {
        "mean": sum(m * d for m, d in timed) / sum(d for _, d in timed) if timed else None,
        "max": max(highs) if highs else None,
    }
    growths = [s.get("growth") or {} for s in steps]
    grew = next((g for g in growths if g.get("growing")), None)
    known = [g.get("growing") for g in growths if g.get("growing") is not None]
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
    v = slo_mod.judge(slo, judged(step))
    v["rate"] = step.get("rate")
    g: Mapping[str, Any] = step.get("growth") or {}
    if g.get("growing"):
        t = g["p50_thirds"]
        v["failed"].append(
            f"latency from schedule kept growing (median {t[0]:.0f} -> {t[1]:.0f} -> {t[2]:.0f} ms "
            f"over the step's thirds)"
        )
        v.update({"pass": False, "more_requests": None})
    return v


def implied_concurrency(s: StepSummary) -> int | None:
    """What the rate of step ``s`` keeps in flight by Little's law: rate x its mean latency from
    schedule, rounded up."""
    sched_wait: Mapping[str, Any] = s.get("sched_wait_ms") or {}
    mean = sched_wait.get("mean")
    return math.ceil(s["rate"] * mean / 1000.0) if mean is not None else None


def offered(s: StepSummary) -> float:
    """What step ``s`` offered, per second: its rate, or for a trace step what its settled window
    replayed (``offered_rps``)."""
    offered: float = s.get("offered_rps") or s["rate"]
    return offered


def past_knee(steps: list[StepSummary]) -> tuple[bool, str]:
    """Whether the latest of a pass's steps (ascending rates, the plan's ``--stop-past-knee``)
    breaks one of the knee's rules on its own figures, and the figures why."""
    s = steps[-1]
    if not s.get("requests"):
        return True, "is past the knee (not one request finished in it)"
    thr = s.get("throughput_rps") or 0.0
    if thr < (1 - SHORTFALL) * offered(s):
        return True, f"is past the knee (it served {thr:.2f} of {offered(s):.3g} req/s offered)"
    g: Mapping[str, Any] = s.get("growth") or {}
    if g.get("growing"):
        t = g["p50_thirds"]
        return True, f"is past the knee (latency from schedule kept growing, {t[0]:.0f} -> {t[2]:.0f} ms)"
    done = [x for x in steps if x.get("requests")]
    base, p95 = _p95(done[0]), _p95(s)
    if len(done) > 1 and base and p95 is not None and p95 > LATENCY_RISE * base:
        return True, f"is past the knee (p95 from schedule {p95 / base:.1f}x the lowest rate's)"
    low, e = done[0].get("error_rate") or 0.0, s.get("error_rate") or 0.0
    if e >= FAILURE_RATE and e - low >= FAILURE_RATE:
        return True, f"is past the knee ({e:.0%} of requests fail)"
    return False, ""


def recommend_slo(
    levels: list[StepSummary], verdicts: list[SloVerdict], spec: str, best: float | None
) -> tuple[int | None, str]:
    """(the concurrency ``best`` (``slo.max_rate``) implies by Little's law, why it is the
    recommendation) over the rate levels and their SLO verdicts."""
    if not levels:
        return None, "No settled requests yet."
    if best is None:
        v, lv = verdicts[0], levels[0]
        why = (
            ", ".join(v["failed"])
            if v["pass"] is False
            else "; ".join(v["inconclusive"]) + " (inconclusive counts as not meeting it)"
        )
        return None, (
            f"No tested rate meets the SLO {spec}: at the lowest, {lv['rate']:g} req/s, {why}; test "
            f"lower rates or relax the SLO."
        )
    i = next(k for k, lv in enumerate(levels) if lv["rate"] == best)
    rec = levels[i]
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
    nxt = next(((lv, v) for lv, v in zip(levels[i + 1 :], verdicts[i + 1 :]) if v["pass"] is not True), None)
    if nxt is None:
        text += "; every tested rate meets it, so test higher rates to find the limit"
    else:
        lv, v = nxt
        why = (
            ", ".join(v["failed"])
            if v["pass"] is False
            else "; ".join(v["inconclusive"]) + " (inconclusive counts as not meeting it)"
        )
        text += f"; at {lv['rate']:g} req/s {why}"
    if implied is not None:
        text += (
            f". By Little's law that rate at a mean {lat['mean']:.0f} ms keeps about {implied} requests in "
            f"flight: a concurrency limit of {implied}"
        )
    return implied, text + "."


def _p95(s: StepSummary) -> float | None:
    sched_wait: Mapping[str, Any] = s.get("sched_wait_ms") or {}
    p95: float | None = sched_wait.get("p95")
    return p95


def find_knee(steps: list[StepSummary]) -> Knee:
    """``{"rate", "index", "methods", "agree", "rules"}`` over the steps with requests, in
    ascending rate (see the module doc); ``index`` is into that list."""
    steps = [s for s in steps if s.get("requests")]
    idx: dict[str, int | None] = dict.fromkeys(RULES)
    if steps:
        for i, s in enumerate(steps):
            thr = s.get("throughput_rps") or 0.0
            if idx["throughput_shortfall"] is None and thr < (1 - SHORTFALL) * offered(s):
                idx["throughput_shortfall"] = i
            growth: Mapping[str, Any] = s.get("growth") or {}
            if idx["latency_growing"] is None and growth.get("growing"):
                idx["latency_growing"] = i
        base = _p95(steps[0])
        high = [base is not None and (p95 := _p95(s)) is not None and p95 > LATENCY_RISE * base for s in steps]
        for i in range(1, len(steps)):
            if all(high[i:]):
                idx["latency_vs_lowest"] = i
                break
        low_err = steps[0].get("error_rate") or 0.0
        for i, s in enumerate(steps):
            e = s.get("error_rate") or 0.0
            if e >= FAILURE_RATE and e - low_err >= FAILURE_RATE:
                idx["failures"] = i
                break
        rise = signal_rise(steps)
        idx["signal"] = None if rise is None else rise[0]
    hits = [i for i in idx.values() if i is not None]
    k = min(hits) if hits else None
    methods = {name: (steps[i]["rate"] if i is not None else None) for name, i in idx.items()}
    rate = steps[k]["rate"] if k is not None else None
    return {
        "rate": rate,
        "concurrency": None,
        "index": k,
        "methods": cast(KneeMethods, methods),
        "agree": [n for n, r in methods.items() if r is not None and r == rate],
        "rules": list(RULES),
        "streamed": False,
        "axis": "rate",
        "signal_first": signal_first(idx, RULES),
    }


def recommend(steps: list[StepSummary], knee: Knee) -> tuple[float | None, int | None, str]:
    """(recommended rate, the concurrency it implies, the recommendation in words)."""
    done = [s for s in steps if s.get("requests")]
    if not done:
        return None, None, "No settled requests yet."
    k = knee["index"]
    if k == 0:
        return (
            None,
            None,
            (f"The lowest offered rate ({done[0]['rate']:g} req/s) is already past the knee; test lower rates."),
        )
    rec = done[-1] if k is None else done[k - 1]
    sched_wait: Mapping[str, Any] = rec.get("sched_wait_ms") or {}
    mean = sched_wait.get("mean")
    implied = implied_concurrency(rec)
    if k is None:
        text = (
            f"No knee up to {rec['rate']:g} req/s, the highest offered; test higher rates to find the "
            f"limit ({_desc(rec)})"
        )
    else:
        text = f"Offer at most {rec['rate']:g} req/s ({_desc(rec)}; {_desc(done[k])})"
    if implied is not None:
        text += (
            f". By Little's law that rate at a mean {mean:.0f} ms keeps about {implied} requests in flight: "
            f"a concurrency limit of {implied}"
        )
    return rec["rate"], implied, text + "."


def _desc(s: StepSummary) -> str:
    lat: Mapping[str, Any] = s.get("sched_wait_ms") or {}
    send_lag: Mapping[str, Any] = s.get("send_lag_ms") or {}
    lag = send_lag.get("p95")
    p95 = "n/a" if lat.get("p95") is None else f"{lat['p95']:.0f} ms"
    return (
        f"at {s['rate']:g} req/s offered: {s.get('throughput_rps') or 0:.2f} req/s served, p95 latency from "
        f"schedule {p95}, {s.get('dropped') or 0} dropped, {s['failed']} of {s['requests']} failed"
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
            {**s, "concurrency": f"{s['rate']:g} req/s", "latency_ms": s.get("sched_wait_ms") or s.get("latency_ms")},
        )
        for s in steps
    ]


def reword(evidence: list[str]) -> list[str]:
    """Sentences written for concurrency, said of rates."""
    out = []
    for e in evidence:
        for old, new in _WORDING:
            e = e.replace(old, new)
        out.append(e)
    return out


def diagnose(steps: list[StepSummary], knee: Knee, creep: MemoryCreep | None, has_resources: bool) -> Diagnosis:
    """:func:`analysis.diagnosis.diagnose` on the rate steps, each standing at its offered rate
    with its latency from schedule, after one sentence on what the open-loop rules saw."""
    as_levels = at_rates(steps)
    label = None if knee["rate"] is None else f"{knee['rate']:g} req/s"
    # the knee's concurrency is its rate's label, as at_rates's levels have it
    d = by_steps(as_levels, cast(Knee, {**knee, "concurrency": label, "inflation": []}), creep, has_resources)
    ev = reword(d["evidence"])
    k = knee["index"]
    if k is not None:
        s = [x for x in steps if x.get("requests")][k]
        g: Mapping[str, Any] = s.get("growth") or {}
        thirds = g.get("p50_thirds")
        ev.insert(
            0,
            f"At {s['rate']:g} req/s offered the server took {s.get('throughput_rps') or 0:.2f} req/s "
            f"({s.get('dropped') or 0} arrivals dropped)"
            + (
                f"; median latency from schedule went {thirds[0]:.0f} -> {thirds[1]:.0f} -> "
                f"{thirds[2]:.0f} ms over the step's thirds"
                if thirds
                else ""
            )
            + (": the queue kept growing, so that rate is past what it serves." if g.get("growing") else "."),
        )
    d["evidence"] = ev
    return d
