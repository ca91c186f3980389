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

``gpu_memory`` is what each added stream costs in GPU memory: the Theil–Sen line
(:func:`memory_fit`) of each level's peak used GPU memory (the server's ``gpu_mem_peak_bytes``,
the fullest GPU of the fullest host) against its concurrency, over the levels before the knee
(all of them without one: past it requests queue, and memory stops following the users), and
where that line puts the recommended concurrency against the GPU's total. The peak, not the
step's mean: in a closed loop a stream holds its memory while its request runs and none between
requests, so the mean is diluted by every user's moments between requests (and by samples that
fall there), and its slope is the memory per stream times how busy a stream is, less than one
more stream in flight needs; the peak is the moment the step's streams were all in flight, and a
server whose allocator keeps what it took shows the same peak and mean anyway. One step's
passing spike is one point of several, which the median of pairwise slopes passes over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tts_knee.runformat.summary import Capacity, CapacityAt, CapacityMemory, CapacityPlan

from .trend import theil_sen

#: --headroom without the flag: the share of a replica's measured capacity left unplanned.
HEADROOM = 0.2
MIB, GIB = 1 << 20, 1 << 30


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
    cleaned = str(text).strip().replace(" ", "")
    per_s = cleaned.lower().endswith("/s")
    try:
        demand = float(cleaned[:-2] if per_s else cleaned)
    except ValueError:
        demand = math.nan
    if not math.isfinite(demand) or demand <= 0:
        raise CapacityError(
            f"--plan-for {text!r} is neither a number of concurrent requests (500) nor a "
            f"rate in requests per second (20/s)."
        )
    if not per_s and demand != int(demand):
        raise CapacityError(
            f"--plan-for {text!r}: concurrent requests are a whole number (or give a rate, {cleaned}/s)."
        )
    return Demand(demand, per_s)


def parse_cost(value: str | float) -> float:
    """A replica's price per hour: a number > 0."""
    try:
        cost = float(value)
    except (TypeError, ValueError):
        cost = math.nan
    if not math.isfinite(cost) or cost <= 0:
        raise CapacityError(f"--cost-per-hour {value!r} is not a price per hour > 0, such as 2.5.")
    return cost


def parse_headroom(value: object) -> float:
    """A share of capacity left unplanned: 0 <= h < 1 (0.2, or 20%)."""
    cleaned = str(value).strip()
    try:
        share = float(cleaned[:-1]) / 100 if cleaned.endswith("%") else float(cleaned)
    except ValueError:
        share = math.nan
    if not math.isfinite(share) or not 0 <= share < 1:
        raise CapacityError(f"--headroom {value!r} is not a share of capacity from 0 to below 1, such as 0.2 or 20%.")
    return share


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
    return next((level for level in levels if value is not None and level.get(key) == value), None)


def _money(amount: float) -> str:
    return f"{amount:,.2f}" if amount >= 0.995 else f"{amount:.3g}"


class MemoryFit(NamedTuple):
    """A line of used GPU memory against concurrency, in bytes."""

    per_stream_bytes: float  # the slope: memory per added stream
    base_bytes: float  # the line at no stream


def memory_fit(concurrency: Sequence[float], used_bytes: Sequence[float]) -> MemoryFit | None:
    """The Theil–Sen line of ``used_bytes`` against ``concurrency``, one point a level: the median
    of the slopes between every pair of levels, and the median of each level's memory less that
    slope times its concurrency; None with fewer than two distinct concurrencies. Any memory
    series per level fits: the whole GPU's peak (:func:`gpu_memory`), or a stage's own where the
    server reports one."""
    users, used = np.asarray(concurrency, dtype=float), np.asarray(used_bytes, dtype=float)
    line = theil_sen(users, used)
    if line is None:
        return None
    return MemoryFit(line[0], float(np.median(used - line[0] * users)))


def gpu_memory(
    levels: Sequence[Mapping[str, Any]], knee: float | None, recommended: int | None
) -> CapacityMemory | None:
    """``capacity.gpu_memory`` (see the module doc): :func:`memory_fit` of the levels before the
    ``knee`` concurrency whose server reported GPU memory, and what the ``recommended``
    concurrency needs on that line; None with fewer than two such levels."""
    fitted = [
        level
        for level in levels
        if (knee is None or level["concurrency"] < knee)
        and (level.get("server") or {}).get("gpu_mem_peak_bytes") is not None
    ]
    fit = memory_fit(
        [level["concurrency"] for level in fitted], [level["server"]["gpu_mem_peak_bytes"] for level in fitted]
    )
    if fit is None:
        return None
    totals = [found for level in fitted if (found := level["server"].get("gpu_mem_total_bytes"))]
    total = max(totals) if totals else None
    need = None if recommended is None else fit.base_bytes + fit.per_stream_bytes * recommended
    return {
        "levels": [int(level["concurrency"]) for level in fitted],
        "per_stream_bytes": fit.per_stream_bytes,
        "base_bytes": fit.base_bytes,
        "at_recommended_bytes": need,
        "total_bytes": total,
        "headroom_bytes": None if total is None or need is None else total - need,
        "fills_at": (total - fit.base_bytes) / fit.per_stream_bytes if total and fit.per_stream_bytes > 0 else None,
    }


def _gib(size_bytes: float) -> str:
    return f"{size_bytes / GIB:.0f}" if abs(size_bytes) >= 10 * GIB else f"{size_bytes / GIB:.1f}"


def memory_text(mem: CapacityMemory, recommended: int | None) -> str:
    """What the capacity's text says of ``mem``, one or two sentences with a leading space."""
    levels = mem["levels"]
    fitted = ", ".join(map(str, levels[:-1])) + f" and {levels[-1]}"
    per = mem["per_stream_bytes"]
    text = (
        f" GPU memory rose {per / MIB:,.0f} MiB per added stream (the peaks at concurrency {fitted})"
        if per > 0
        else f" GPU memory did not rise with the streams (the peaks at concurrency {fitted})"
    )
    need, total = mem["at_recommended_bytes"], mem["total_bytes"]
    if need is not None and recommended is not None:
        text += f"; {recommended} stream{'s' if recommended != 1 else ''} would need {_gib(need)} GiB"
        if total is not None and need <= total:
            text += f" of {_gib(total)}, leaving {_gib(total - need)} GiB"
        elif total is not None:
            text += f", more than its {_gib(total)} GiB"
    text += "."
    if mem["fills_at"] is not None:
        text += f" It would be full at about {mem['fills_at']:,.0f} streams."
    return text


def capacity(
    levels: Sequence[Mapping[str, Any]],
    key: str,
    value: float | None,
    concurrency: int | None,
    opts: Options,
    knee: float | None = None,
) -> Capacity:
    """The ``capacity`` section: the figures of the level whose ``key`` is ``value`` (the
    recommendation), its cost and the replicas ``opts`` ask for, the GPU memory per added stream
    over the levels before the ``knee`` (a concurrency; on the concurrency axis only), and
    ``text``, the whole in a few sentences; ``concurrency`` is the recommended concurrency
    (implied, in an open-loop run), what a demand of concurrent requests is divided by."""
    level = _level(levels, key, value)
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
        "gpu_memory": None,
        "text": None,
    }
    if level is None:
        out["text"] = "No level is recommended, so there is no capacity to plan with."
        return out
    memory = gpu_memory(levels, knee, concurrency) if key == "concurrency" else None
    out["gpu_memory"] = memory
    rps, cps, aps = level.get("throughput_rps"), level.get("chars_per_s"), level.get("audio_s_per_s")
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
    if memory is not None:
        text += memory_text(memory, concurrency)
    out["text"] = text
    return out


def _at(key: str, value: float, concurrency: int | None) -> CapacityAt:
    """``capacity.at``: the recommended concurrency, and the rate or number of voices on those axes."""
    capacity_at: CapacityAt = {"concurrency": concurrency}
    if key == "rate":
        capacity_at["rate"] = value
    elif key == "voices":
        capacity_at["voices"] = int(value)  # Recommendation.voices: a whole number
    return capacity_at


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
