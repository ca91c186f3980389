"""What known serving stacks' series mean: queue depth, running requests, batch size, KV cache.

The roles are part of the run format: the collector keeps series with a role first when it caps
how many it scrapes, and ``summary.json``'s ``server.server_roles`` is keyed by them
(``analysis.server_metrics``). Both ends read them here; nothing here imports anything.

The names are the servers' own (their docs and source):

- vLLM: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:gpu_cache_usage_perc`` (before v0.9) / ``vllm:kv_cache_usage_perc`` (a 0-1 ratio
  despite the name).
- Triton: ``nv_inference_pending_request_count``; batch size is inferences per model execution,
  ``nv_inference_count`` / ``nv_inference_exec_count`` (both counters, so their rates).
- SGLang: ``sglang:num_queue_reqs``, ``sglang:num_running_reqs``, ``sglang:token_usage``.
- TGI: ``tgi_queue_size``, ``tgi_batch_current_size``.
- Any other server following vLLM's pattern (``PREFIX:num_requests_waiting`` /
  ``PREFIX:num_requests_running``), the tts-knee simulator among them.

:func:`roles` reads one sample's ``metrics`` into ``{role: (family, value)}``: a role's value
is the sum over the family's series (all models), the KV-cache ratio the highest of them.
Series of unknown servers have no role; they still go on the timeline.
"""
from __future__ import annotations

ROLES = ("queue_depth", "running", "batch_size", "kv_cache_usage")

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
}
# Triton's batch size: the ratio of two counters' rates, (numerator, denominator).
RATIOS: dict[str, tuple[str, str]] = {
    "batch_size": ("nv_inference_count", "nv_inference_exec_count"),
}
_MAX_ROLES = ("kv_cache_usage",)  # a ratio: the fullest cache, not a sum


def family_of(series: str) -> str:
    return series.split("{", 1)[0]


def role_of(family: str) -> str | None:
    """The role of a metric family (or series name), or None."""
    family = family_of(family)
    if family in FAMILIES:
        return FAMILIES[family]
    for suffix, role in SUFFIXES.items():
        if family.endswith(suffix):
            return role
    for role, (num, den) in RATIOS.items():
        if family in (num, den):
            return role
    return None


def roles(metrics: dict | None) -> dict[str, tuple[str, float]]:
    """``{role: (family, value)}`` for the roles this sample's series tell (see the module doc).

    Where two families have one role (a server exposing both the old and the new name), the
    first seen wins. Series whose value is null are left out; a role with none left is absent.
    """
    if not metrics:
        return {}
    by_family: dict[str, list[float]] = {}
    for series, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            by_family.setdefault(family_of(series), []).append(float(value))
    out: dict[str, tuple[str, float]] = {}
    for family, values in by_family.items():
        role = FAMILIES.get(family) or next(
            (r for s, r in SUFFIXES.items() if family.endswith(s)), None)
        if role is None or role in out:
            continue
        out[role] = (family, max(values) if role in _MAX_ROLES else sum(values))
    for role, (num, den) in RATIOS.items():
        n, d = by_family.get(num), by_family.get(den)
        if role not in out and n and d and sum(d) > 0:
            out[role] = (f"{num}/{den}", sum(n) / sum(d))
    return out
