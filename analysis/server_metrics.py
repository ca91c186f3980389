"""The server's own series (resource samples' ``metrics``) over a step, and what they mean.

- ``server.metrics`` {series: {mean, max}}: over the step's window, every server sample that
  carries the series counts (a sample without it is a gap, not a 0). At most ``MAX_SERIES``
  series are kept, those with a known role first (see :mod:`runformat.metric_roles`), then in the
  order they first appear; ``server.metrics_left_out`` counts the rest.
- ``server.server_roles`` {role: {series, why, mean, max}}: queue depth, running requests, batch
  size and KV-cache use, each from the family that tells it (summed over its series, e.g. over
  models), for the diagnosis and the report; ``why`` says how the family got its role (a known
  server's name, an obvious ending, ``--server-role``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tts_knee.runformat.metric_roles import ROLES, role_of, roles, why

MAX_SERIES = 40


def _stats(values: list[float]) -> dict[str, Any]:
    return {"mean": sum(values) / len(values), "max": max(values), "samples": len(values)}


def aggregate(
    w: pd.DataFrame, custom: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, int, dict[str, Any] | None]:
    """(metrics, left out, roles) of the server samples ``w`` (see the module doc); None for
    what no sample carries. ``custom``: ``--server-role``'s ``{family: role}``."""
    if "metrics" not in w.columns:
        return None, 0, None
    dicts = [m for m in w["metrics"] if isinstance(m, dict)]
    if not dicts:
        return None, 0, None
    values: dict[str, list[float]] = {}
    by_role: dict[str, list[tuple[str, float]]] = {}
    for m in dicts:
        for series, v in m.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values.setdefault(series, []).append(float(v))
        for role, (family, v) in roles(m, custom).items():
            by_role.setdefault(role, []).append((family, v))
    order = [s for s in values if role_of(s, custom)] + [s for s in values if not role_of(s, custom)]
    metrics = {s: _stats(values[s]) for s in order[:MAX_SERIES]}
    told = {}
    for role in ROLES:
        got = by_role.get(role)
        if got:
            families = [f for f, _ in got]
            family = max(set(families), key=families.count)
            told[role] = {"series": family, "why": why(family, custom), **_stats([v for _, v in got])}
    return metrics or None, max(0, len(order) - MAX_SERIES), told or None


def timeline(res: pd.DataFrame, limit: int = 8) -> dict[str, tuple[list[float], list[Any]]]:
    """For the report: {series: (ts, values)} of the server samples' series, role series
    first, at most ``limit`` of them. A sample of a host that carried the series elsewhere
    but not then gives None there, so the line shows the gap."""
    if not len(res) or "metrics" not in res.columns:
        return {}
    srv = res[res["role"] == "server"]
    seen: dict[str, set[Any]] = {}
    for host, m in zip(srv["host"], srv["metrics"]):
        if isinstance(m, dict):
            seen.setdefault(host, set()).update(m)
    order = list(dict.fromkeys(s for h in seen.values() for s in sorted(h)))
    order = ([s for s in order if role_of(s)] + [s for s in order if not role_of(s)])[:limit]
    out: dict[str, tuple[list[float], list[Any]]] = {s: ([], []) for s in order}
    for ts, host, m in zip(srv["ts"], srv["host"], srv["metrics"]):
        for series in seen.get(host, ()):
            if series in out:
                v = m.get(series) if isinstance(m, dict) else None
                out[series][0].append(float(ts))
                out[series][1].append(v if isinstance(v, (int, float)) else None)
    return out
