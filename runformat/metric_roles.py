"""What known serving stacks' series mean: queue depth, running requests, batch size, KV cache.

The roles are part of the run format: the collector keeps series with a role first when it caps
how many it scrapes, and ``summary.json``'s ``server.server_roles`` is keyed by them
(``analysis.server_metrics``). Both ends read them here; nothing here imports anything.

The names are the servers' own (their docs and source):

- vLLM: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:gpu_cache_usage_perc`` (before v0.9) / ``vllm:kv_cache_usage_perc`` (a 0-1 ratio
  despite the name).
- Triton: ``nv_inference_pending_request_count``; batch size is inferences per model execution,
  ``nv_inference_count`` / ``nv_inference_exec_count`` (both counters, so their rates); the
  time a request waited in its queue, ``nv_inference_queue_duration_us`` /
  ``nv_inference_request_success`` (ms per request, ``queue_ms``).
- SGLang: ``sglang:num_queue_reqs``, ``sglang:num_running_reqs``, ``sglang:token_usage``.
- TGI: ``tgi_queue_size``, ``tgi_batch_current_size``.
- Any other server following vLLM's pattern (``PREFIX:num_requests_waiting`` /
  ``PREFIX:num_requests_running``), the tts-knee simulator among them.
- Any server at all whose family is named the obvious way (:data:`ENDINGS`): a custom
  server's ``tts_requests_waiting``, ``*_queue_size``, ``*_queue_depth``, ``*_pending_requests``
  (queue depth), ``*_requests_running`` (running).
- Whatever ``--server-role ROLE=SERIES`` says (the collector, the load generator, the
  dashboard): a family named there has that role, before any of the above.
- A voice (speaker-embedding) cache, any server's, by its counters' names: ``*voice_cache_hits_total``,
  ``*voice_cache_misses_total``, ``*voice_cache_evictions_total`` (read as per-second rates,
  from ``/metrics`` or a ``--server-stats`` JSON endpoint), as the tts-knee simulator names them.

:func:`roles` reads one sample's ``metrics`` into ``{role: (family, value)}``: a role's value
is the sum over the family's series (all models), the KV-cache ratio the highest of them;
:func:`why` says how a family got its role, for the evidence. Series of unknown servers have
no role; they still go on the timeline.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ROLES = (
    "queue_depth",
    "running",
    "batch_size",
    "kv_cache_usage",
    "queue_ms",
    "voice_cache_hits",
    "voice_cache_misses",
    "voice_cache_evictions",
)

FAMILIES: dict[str, str] = {
    "vllm:num_requests_waiting": "queue_depth",
    "vllm:num_requests_running": "running",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "nv_inference_pending_request_count": "queue_depth",
    "sglang:num_queue_reqs": "queue_depth",
    "sglang:num_running_reqs": "running",
    "sglang:token_usage": "kv_cache_usage",
    "tgi_queue_size": "queue_depth",
    "tgi_batch_current_size": "batch_size",
}
SUFFIXES: dict[str, str] = {
    ":num_requests_waiting": "queue_depth",
    ":num_requests_running": "running",
    "voice_cache_hits_total": "voice_cache_hits",
    "voice_cache_misses_total": "voice_cache_misses",
    "voice_cache_evictions_total": "voice_cache_evictions",
}
#: Endings any server's family may have whose meaning is plain from the name.
ENDINGS: dict[str, str] = {
    "_requests_waiting": "queue_depth",
    "_queue_size": "queue_depth",
    "_queue_depth": "queue_depth",
    "_pending_requests": "queue_depth",
    "_requests_running": "running",
}
_SERVERS = {"vllm:": "vLLM", "nv_inference_": "Triton", "sglang:": "SGLang", "tgi_": "TGI"}
# Triton's batch size and queue time: the ratio of two counters' rates, (numerator, denominator,
# the factor to the role's unit).
RATIOS: dict[str, tuple[str, str, float]] = {
    "batch_size": ("nv_inference_count", "nv_inference_exec_count", 1.0),
    "queue_ms": ("nv_inference_queue_duration_us", "nv_inference_request_success", 0.001),
}
_MAX_ROLES = ("kv_cache_usage",)  # a ratio: the fullest cache, not a sum


def family_of(series: str) -> str:
    return series.split("{", 1)[0]


def parse_roles(items: Iterable[str]) -> dict[str, str]:
    """``--server-role ROLE=SERIES`` values (each may hold several, comma-separated) as
    ``{family: role}``; raises ValueError with one sentence for one that is not ROLE=SERIES
    with a known ROLE."""
    out: dict[str, str] = {}
    for item in items or ():
        for pair in str(item).split(","):
            pair = pair.strip()
            if not pair:
                continue
            role, eq, series = (x.strip() for x in pair.partition("="))
            if not eq or not series or role not in ROLES:
                raise ValueError(f"--server-role takes ROLE=SERIES with ROLE one of {', '.join(ROLES)}, got {pair!r}")
            out[family_of(series)] = role
    return out


def role_of(family: str, custom: dict[str, str] | None = None) -> str | None:
    """The role of a metric family (or series name), or None; ``custom``: ``--server-role``'s
    ``{family: role}``, first."""
    family = family_of(family)
    if custom and family in custom:
        return custom[family]
    if family in FAMILIES:
        return FAMILIES[family]
    for suffix, role in (*SUFFIXES.items(), *ENDINGS.items()):
        if family.endswith(suffix):
            return role
    for role, (num, den, _) in RATIOS.items():
        if family in (num, den):
            return role
    return None


def why(family: str, custom: dict[str, str] | None = None) -> str:
    """How ``family`` (a family, or Triton's ``num/den``) got its role, in a few words."""
    if custom and family in custom:
        return f"named by --server-role {custom[family]}={family}"
    server = next((name for prefix, name in _SERVERS.items() if family.startswith(prefix)), None)
    if family in FAMILIES or "/" in family:
        return f"{server}'s name for it" if server else "a known server's name for it"
    end = next((s for s in (*SUFFIXES, *ENDINGS) if family.endswith(s)), "")
    return f"its name ends in {end}"


def roles(metrics: dict[str, Any] | None, custom: dict[str, str] | None = None) -> dict[str, tuple[str, float]]:
    """``{role: (family, value)}`` for the roles this sample's series tell (see the module doc);
    ``custom``: ``--server-role``'s ``{family: role}``.

    Where two families have one role (a server exposing both the old and the new name), one
    named in ``custom`` wins, else the first seen. Series whose value is null are left out; a
    role with none left is absent.
    """
    if not metrics:
        return {}
    by_family: dict[str, list[float]] = {}
    for series, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            by_family.setdefault(family_of(series), []).append(float(value))
    out: dict[str, tuple[str, float]] = {}
    first = [f for f in by_family if custom and f in custom]
    for family in first + [f for f in by_family if f not in first]:
        values = by_family[family]
        role = role_of(family, custom)
        if role is None or role in out or (family not in (custom or {}) and any(family in p for p in RATIOS.values())):
            continue
        out[role] = (family, max(values) if role in _MAX_ROLES else sum(values))
    for role, (num, den, factor) in RATIOS.items():
        n, d = by_family.get(num), by_family.get(den)
        if role not in out and n and d and sum(d) > 0:
            out[role] = (f"{num}/{den}", factor * sum(n) / sum(d))
    return out
