"""The server's own series (resource samples' ``metrics``) over a step, and what they mean.

- ``server.metrics`` {series: {mean, max}}: over the step's window, every server sample that
  carries the series counts (a sample without it is a gap, not a 0). At most ``MAX_SERIES``
  series are kept, those with a known role first (see :mod:`runformat.metric_roles`), then in the
  order they first appear; ``server.metrics_left_out`` counts the rest.
- ``server.server_roles`` {role: {series, why, mean, max}}: queue depth, running requests, batch
  size and KV-cache use, each from the family that tells it (summed over its series, e.g. over
  models), for the diagnosis and the report; ``why`` says how the family got its role (a known
  server's name, an obvious ending, ``--server-role``).
- ``server.stages`` {stage: {role: {series, why, mean, max}}}: for a server of two stages or more
  (series told apart by ``server.stage_label``: Triton's ``model``, vLLM-Omni's ``stage``,
  ``--server-stage-label``), each stage's roles from its own series
  (:func:`runformat.metric_roles.stage_roles`). A stage is counted from the first sample that
  carries it; at most ``MAX_STAGES`` are kept, the busiest (by queue, then queue time, then
  work), ``server.stages_left_out`` counts the rest. A server with one stage has none of these.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import pandas as pd

from tts_knee.runformat.metric_roles import (
    ROLES,
    STAGE_LABELS,
    STAGE_ROLES,
    ServerNames,
    labels_of,
    role_of,
    roles,
    stage_roles,
    why,
)
from tts_knee.runformat.summary import StageRoles

MAX_SERIES = 40
MAX_STAGES = 8


def _stats(values: list[float]) -> dict[str, Any]:
    return {"mean": sum(values) / len(values), "max": max(values), "samples": len(values)}


def aggregate(
    window: pd.DataFrame, custom: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, int, dict[str, Any] | None]:
    """(metrics, left out, roles) of the server samples ``window`` (see the module doc); None for
    what no sample carries. ``custom``: ``--server-role``'s ``{family: role}``."""
    if "metrics" not in window.columns:
        return None, 0, None
    dicts = [sample_metrics for sample_metrics in window["metrics"] if isinstance(sample_metrics, dict)]
    if not dicts:
        return None, 0, None
    values: dict[str, list[float]] = {}
    by_role: dict[str, list[tuple[str, float]]] = {}
    for sample_metrics in dicts:
        for series, value in sample_metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault(series, []).append(float(value))
        for role, (family, value) in roles(sample_metrics, custom).items():
            by_role.setdefault(role, []).append((family, value))
    order = [series for series in values if role_of(series, custom)] + [
        series for series in values if not role_of(series, custom)
    ]
    metrics = {series: _stats(values[series]) for series in order[:MAX_SERIES]}
    told = {}
    for role in ROLES:
        got = by_role.get(role)
        if got:
            families = [family for family, _ in got]
            family = max(set(families), key=families.count)
            told[role] = {"series": family, "why": why(family, custom), **_stats([value for _, value in got])}
    return metrics or None, max(0, len(order) - MAX_SERIES), told or None


class Staged(NamedTuple):
    """A window's stages: the label that tells them apart, each kept stage's roles, how many more there were."""

    label: str
    stages: dict[str, StageRoles]
    left_out: int


def stages(window: pd.DataFrame, names: ServerNames | None = None) -> Staged | None:
    """The stages of the server samples ``window`` (see the module doc); None where fewer than two
    stages are seen."""
    if "metrics" not in window.columns:
        return None
    told: dict[str, dict[str, list[tuple[str, float]]]] = {}
    label: str | None = names.stage_label if names else None
    for metrics in window["metrics"]:
        if not isinstance(metrics, dict):
            continue
        for stage, stage_told in stage_roles(metrics, names).items():
            for role, pair in stage_told.items():
                told.setdefault(stage, {}).setdefault(role, []).append(pair)
        if label is None and told:
            label = _label_of(metrics)
    if len(told) < 2 or label is None:
        return None
    custom = names.roles if names else None
    figures = {stage: _stage_figures(by_role, custom) for stage, by_role in told.items()}
    kept = sorted(figures, key=lambda stage: _busiest(figures[stage]), reverse=True)[:MAX_STAGES]
    return Staged(label, {stage: figures[stage] for stage in figures if stage in kept}, len(figures) - len(kept))


def _label_of(metrics: dict[str, Any]) -> str | None:
    """Which of :data:`STAGE_LABELS` the sample's stage series carry."""
    for series in metrics:
        found = next((name for name in STAGE_LABELS if name in labels_of(series)), None)
        if found is not None:
            return found
    return None


def _stage_figures(by_role: dict[str, list[tuple[str, float]]], custom: dict[str, str] | None) -> StageRoles:
    out: dict[str, Any] = {}
    for role in STAGE_ROLES:
        got = by_role.get(role)
        if got:
            families = [family for family, _ in got]
            family = max(set(families), key=families.count)
            out[role] = {"series": family, "why": why(family, custom), **_stats([value for _, value in got])}
    return cast(StageRoles, out)


def _busiest(stage: StageRoles) -> tuple[float, float, float]:
    """What ranks a stage under the cap: its mean queue, its mean queue time, its mean work."""

    def mean(role: str) -> float:
        found = cast(dict[str, Any], stage).get(role)
        return float(found["mean"]) if found and found.get("mean") is not None else 0.0

    return mean("queue_depth"), mean("queue_ms"), max(mean("busy"), mean("running"))


def timeline(res: pd.DataFrame, limit: int = 8) -> dict[str, tuple[list[float], list[Any]]]:
    """For the report: {series: (ts, values)} of the server samples' series, role series
    first, at most ``limit`` of them. A sample of a host that carried the series elsewhere
    but not then gives None there, so the line shows the gap."""
    if not len(res) or "metrics" not in res.columns:
        return {}
    srv = res[res["role"] == "server"]
    seen: dict[str, set[Any]] = {}
    for host, metrics in zip(srv["host"], srv["metrics"]):
        if isinstance(metrics, dict):
            seen.setdefault(host, set()).update(metrics)
    order = list(dict.fromkeys(series for names in seen.values() for series in sorted(names)))
    order = ([series for series in order if role_of(series)] + [series for series in order if not role_of(series)])[
        :limit
    ]
    out: dict[str, tuple[list[float], list[Any]]] = {series: ([], []) for series in order}
    for sample_ts, host, metrics in zip(srv["ts"], srv["host"], srv["metrics"]):
        for series in seen.get(host, ()):
            if series in out:
                value = metrics.get(series) if isinstance(metrics, dict) else None
                out[series][0].append(float(sample_ts))
                out[series][1].append(value if isinstance(value, (int, float)) else None)
    return out


def stage_timeline(
    res: pd.DataFrame, names: ServerNames | None = None
) -> dict[str, dict[str, tuple[list[float], list[Any]]]]:
    """For the report: each stage's queue depth, queue time, compute time and requests in compute
    over the run, ``{stage: {role: (ts, values)}}`` (a sample that does not tell one is a None, so
    the line shows the gap); {} where fewer than two stages are seen."""
    if not len(res) or "metrics" not in res.columns:
        return {}
    srv = res[res["role"] == "server"]
    told = [
        (float(sample_ts), stage_roles(metrics, names))
        for sample_ts, metrics in zip(srv["ts"], srv["metrics"])
        if isinstance(metrics, dict)
    ]
    stages = list(dict.fromkeys(stage for _, by_stage in told for stage in by_stage))
    if len(stages) < 2:
        return {}
    out: dict[str, dict[str, tuple[list[float], list[Any]]]] = {}
    for stage in stages:
        lines: dict[str, tuple[list[float], list[Any]]] = {}
        for role in ("queue_depth", "queue_ms", "compute_ms", "busy"):
            values = [(sample_ts, by_stage.get(stage, {}).get(role)) for sample_ts, by_stage in told]
            if any(point is not None for _, point in values):
                lines[role] = (
                    [sample_ts for sample_ts, _ in values],
                    [None if point is None else point[1] for _, point in values],
                )
        out[stage] = lines
    return out
