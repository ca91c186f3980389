"""Capacity and cost: the recommendation in the units a team plans with.

Each step (:mod:`analysis.steps`) has ``chars_per_s``, the characters of its successful
completions per second of its window, and ``utterances_per_hour``, its throughput times 3600.

``summary.json``'s ``capacity`` reads them at the recommended level (the recommended
concurrency; in an open-loop run the recommended rate; in a voice sweep the recommended number
of voices): what one replica carried there. With ``--cost-per-hour`` (a replica's price per
hour, in any currency) it adds the cost per million characters and per hour of audio, for a
replica kept at that level all hour. With ``--plan-for`` it adds the replicas a demand needs:
``N`` concurrent requests (or sessions) against the recommended concurrency, or ``N/s``
requests per second against the throughput at the recommendation; each replica is planned at
``1 - headroom`` of what it carried there (``--headroom``, default 20 %), so a replica taken
out or a burst still fits: ``replicas = ceil(demand / (per_replica * (1 - headroom)))``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tts_knee.runformat.summary import Capacity, CapacityAt, CapacityPlan

#: --headroom without the flag: the share of a replica's measured capacity left unplanned.
HEADROOM = 0.2


class CapacityError(ValueError):
    """A --plan-for, --cost-per-hour or --headroom that cannot be used; the message is one sentence."""


class Demand(NamedTuple):
    """What ``--plan-for`` asks to carry: ``amount`` concurrent requests, or requests per second
    where ``per_s``."""

    amount: float
    per_s: bool

    @property
    def spec(self) -> str:
        return f"{self.amount:g}/s" if self.per_s else f"{self.amount:g}"


def parse_demand(text: str) -> Demand:
    """``500`` (concurrent requests or sessions) or ``20/s`` (requests per second)."""
    s = str(text).strip().replace(" ", "")
    per_s = s.lower().endswith("/s")
    try:
        v = float(s[:-2] if per_s else s)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise CapacityError(
            f"--plan-for {text!r} is neither a number of concurrent requests (500) nor a "
            f"rate in requests per second (20/s)."
        )
    if not per_s and v != int(v):
        raise CapacityError(f"--plan-for {text!r}: concurrent requests are a whole number (or give a rate, {s}/s).")
    return Demand(v, per_s)


def parse_cost(value: str | float) -> float:
    """A replica's price per hour: a number > 0."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise CapacityError(f"--cost-per-hour {value!r} is not a price per hour > 0, such as 2.5.")
    return v


def parse_headroom(value: object) -> float:
    """A share of capacity left unplanned: 0 <= h < 1 (0.2, or 20%)."""
    s = str(value).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or not 0 <= v < 1:
        raise CapacityError(f"--headroom {value!r} is not a share of capacity from 0 to below 1, such as 0.2 or 20%.")
    return v


class Options(NamedTuple):
    """What the capacity section is asked for: a price, a demand, the headroom; None where not
    given (the headroom is then :data:`HEADROOM`)."""

    cost_per_hour: float | None = None
    plan_for: Demand | None = None
    headroom: float | None = None


def options(recorded: dict[str, Any] | None, given: Options | None = None) -> Options:
    """The run's own ``options`` (``cost_per_hour``, ``plan_for``, ``headroom``), each replaced
    by what ``given`` sets; raises :class:`CapacityError` for a recorded value that does not parse."""
    rec = recorded or {}
    cost, plan, head = rec.get("cost_per_hour"), rec.get("plan_for"), rec.get("headroom")
    own = Options(
        None if cost is None else parse_cost(cost),
        parse_demand(plan) if plan else None,
        None if head is None else parse_headroom(head),
    )
    given = given or Options()
    return Options(
        given.cost_per_hour if given.cost_per_hour is not None else own.cost_per_hour,
        given.plan_for if given.plan_for is not None else own.plan_for,
        given.headroom if given.headroom is not None else own.headroom,
    )


def step_figures(throughput_rps: float | None, chars_per_s: float | None) -> dict[str, Any]:
    """A window's ``utterances_per_hour`` and ``chars_per_s`` (None where the window gives none)."""
    return {
        "chars_per_s": chars_per_s,
        "utterances_per_hour": None if throughput_rps is None else throughput_rps * 3600.0,
    }


def _level(levels: Sequence[Mapping[str, Any]], key: str, value: object) -> Mapping[str, Any] | None:
    return next((lv for lv in levels if value is not None and lv.get(key) == value), None)


def _money(v: float) -> str:
    return f"{v:,.2f}" if v >= 0.995 else f"{v:.3g}"


def capacity(
    levels: Sequence[Mapping[str, Any]], key: str, value: float | None, concurrency: int | None, opts: Options
) -> Capacity:
    """The ``capacity`` section: the figures of the level whose ``key`` is ``value`` (the
    recommendation), its cost and the replicas ``opts`` ask for, and ``text``, the whole in one
    or two sentences; ``concurrency`` is the recommended concurrency (implied, in an open-loop
    run), what a demand of concurrent requests is divided by."""
    lv = _level(levels, key, value)
    out: Capacity = {
        "at": None if value is None else _at(key, value, concurrency),
        "throughput_rps": None,
        "chars_per_s": None,
        "audio_s_per_s": None,
        "utterances_per_hour": None,
        "mchars_per_hour": None,
        "cost_per_hour": opts.cost_per_hour,
        "cost_per_million_chars": None,
        "cost_per_audio_hour": None,
        "plan": None,
        "text": None,
    }
    if lv is None:
        out["text"] = "No level is recommended, so there is no capacity to plan with."
        return out
    rps, cps, aps = lv.get("throughput_rps"), lv.get("chars_per_s"), lv.get("audio_s_per_s")
    out["throughput_rps"], out["chars_per_s"], out["audio_s_per_s"] = rps, cps, aps
    out["utterances_per_hour"] = None if rps is None else rps * 3600.0
    out["mchars_per_hour"] = None if cps is None else cps * 3600.0 / 1e6
    where = f"{value:g} req/s" if key == "rate" else f"{value} voices" if key == "voices" else f"concurrency {value}"
    parts = []
    if rps:
        parts.append(f"{rps:.2f} req/s ({rps * 3600:,.0f} utterances an hour)")
    if cps:
        parts.append(f"{cps:,.0f} characters a second ({cps * 3600 / 1e6:.2f} million an hour)")
    if aps:
        parts.append(f"{aps:.2f} s of audio a second")
    text = f"At {where} one replica carried " + (", ".join(parts) if parts else "nothing") + "."
    cost = opts.cost_per_hour
    if cost is not None:
        if cps:
            out["cost_per_million_chars"] = cost / (cps * 3600.0 / 1e6)
        if aps:
            out["cost_per_audio_hour"] = cost / aps
        shown = [
            f"{_money(price)} {what}"
            for price, what in (
                (out["cost_per_million_chars"], "per million characters"),
                (out["cost_per_audio_hour"], "per hour of audio"),
            )
            if price is not None
        ]
        text += (
            f" At {_money(cost)} an hour, kept at that level, that is {' and '.join(shown)}."
            if shown
            else f" At {_money(cost)} an hour there is no cost per character: nothing was carried."
        )
    if opts.plan_for is not None:
        plan, said = _plan(opts.plan_for, HEADROOM if opts.headroom is None else opts.headroom, rps, concurrency)
        text += said
        out["plan"] = plan
    out["text"] = text
    return out


def _at(key: str, value: float, concurrency: int | None) -> CapacityAt:
    """``capacity.at``: the recommended concurrency, and the rate or number of voices on those axes."""
    at: CapacityAt = {"concurrency": concurrency}
    if key == "rate":
        at["rate"] = value
    elif key == "voices":
        at["voices"] = int(value)  # Recommendation.voices: a whole number
    return at


def _plan(demand: Demand, headroom: float, rps: float | None, concurrency: int | None) -> tuple[CapacityPlan, str]:
    """``capacity.plan``: the replicas ``demand`` needs, and what the capacity's text adds about it."""
    per = rps if demand.per_s else concurrency
    unit = "req/s" if demand.per_s else "in flight"
    plan: CapacityPlan = {
        "demand": demand.spec,
        "per_s": demand.per_s,
        "headroom": headroom,
        "per_replica": per,
        "replicas": None,
    }
    if not per:
        return plan, f" --plan-for {demand.spec}: the recommendation carried no {unit}, so no replica count."
    replicas = max(1, math.ceil(demand.amount / (per * (1 - headroom)) - 1e-9))
    plan["replicas"] = replicas
    what = f"{demand.amount:g} req/s" if demand.per_s else f"{demand.amount:g} concurrent requests"
    return plan, (
        f" {what} need {replicas} replica{'s' if replicas != 1 else ''} at "
        f"{per:.3g} {unit} each, planned at {100 - headroom * 100:g} % of that."
    )
