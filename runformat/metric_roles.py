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

A server served as a pipeline of stages keeps each stage's series apart by a label
(:func:`stage_roles`, ``server.stages`` in ``summary.json``): Triton's ``model`` (each model of
an ensemble or a BLS pipeline has its own ``nv_inference_*`` series), vLLM-Omni's ``stage``
(its ``OmniPrometheusStatLogger`` turns vLLM's ``engine`` label into ``stage`` and ``replica``,
RFC #3545 / PR #3576, ``vllm_omni/metrics/stat_logger.py``), or the label
``--server-stage-label`` names. A stage's roles are the pooled ones over its own series (its
replicas and versions summed) and what only a stage tells:

- ``compute_ms``: compute time per request, Triton's ``nv_inference_compute_infer_duration_us`` /
  ``nv_inference_request_success``, vLLM's ``vllm:request_inference_time_seconds`` (its ``_sum``
  over its ``_count``);
- ``queue_ms`` also from vLLM's ``vllm:request_queue_time_seconds``;
- ``busy``: the stage's compute time per second, the requests in its compute on average
  (Little's law): Triton's ``nv_inference_compute_infer_duration_us``, vLLM's
  ``vllm:request_inference_time_seconds_sum``, each a counter read as its rate;
- ``gpu_mem_bytes``: a stage's family whose name ends in ``memory_used_bytes`` or
  ``memory_allocated_bytes``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
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

#: The labels that tell a server's stages apart unless ``--server-stage-label`` names another:
#: Triton's per-model label, vLLM-Omni's per-stage one.
STAGE_LABELS = ("model", "stage")
#: What a stage's series tell (the pooled roles a stage has, and what only a stage tells).
STAGE_ROLES = (
    "queue_depth",
    "running",
    "batch_size",
    "queue_ms",
    "compute_ms",
    "busy",
    "kv_cache_usage",
    "gpu_mem_bytes",
)
#: A stage's times per request: (numerator, denominator, the factor to ms), the first one a stage has.
STAGE_RATIOS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "queue_ms": (("vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count", 1000.0),),
    "compute_ms": (
        ("nv_inference_compute_infer_duration_us", "nv_inference_request_success", 0.001),
        ("vllm:request_inference_time_seconds_sum", "vllm:request_inference_time_seconds_count", 1000.0),
    ),
}
#: A stage's compute time, a counter (so read as time per second), and the factor to seconds.
COMPUTE_TIME = {"nv_inference_compute_infer_duration_us": 1e-6, "vllm:request_inference_time_seconds_sum": 1.0}
MEMORY_ENDINGS = ("memory_used_bytes", "memory_allocated_bytes")


@dataclass(frozen=True)
class ServerNames:
    """What the server's series are called: ``roles``, ``--server-role``'s ``{family: role}``;
    ``stage_label``, ``--server-stage-label`` (None: :data:`STAGE_LABELS`)."""

    roles: dict[str, str] = field(default_factory=dict)
    stage_label: str | None = None


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
            role, equals, series = (part.strip() for part in pair.partition("="))
            if not equals or not series or role not in ROLES:
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
    if family in FAMILIES or "/" in family or family in COMPUTE_TIME:
        return f"{server}'s name for it" if server else "a known server's name for it"
    end = next((ending for ending in (*SUFFIXES, *ENDINGS) if family.endswith(ending)), "")
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
    first = [family for family in by_family if custom and family in custom]
    for family in first + [family for family in by_family if family not in first]:
        values = by_family[family]
        role = role_of(family, custom)
        if (
            role is None
            or role in out
            or (family not in (custom or {}) and any(family in ratio for ratio in RATIOS.values()))
        ):
            continue
        out[role] = (family, max(values) if role in _MAX_ROLES else sum(values))
    for role, (num, den, factor) in RATIOS.items():
        numerators, denominators = by_family.get(num), by_family.get(den)
        if role not in out and numerators and denominators and sum(denominators) > 0:
            out[role] = (f"{num}/{den}", factor * sum(numerators) / sum(denominators))
    return out


#: What a Prometheus label's name may be.
LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_ESCAPED = re.compile(r'\\[\\n"]')


@functools.lru_cache(maxsize=65536)
def labels_of(series: str) -> dict[str, str]:
    """A series name's labels, ``name{k="v",...}`` as the collector writes it (escapes undone)."""
    _, brace, rest = series.partition("{")
    if not brace:
        return {}
    return {
        label: _ESCAPED.sub(lambda match: _UNESCAPE[match.group(0)], value) for label, value in _LABEL.findall(rest)
    }


def stage_of(series: str, label: str | None = None) -> str | None:
    """The stage a series belongs to: its ``label``'s value, or with None its first of
    :data:`STAGE_LABELS`; None for a series without it."""
    labels = labels_of(series)
    if label is not None:
        return labels.get(label)
    return next((labels[name] for name in STAGE_LABELS if name in labels), None)


def stage_roles(
    metrics: dict[str, Any] | None, names: ServerNames | None = None
) -> dict[str, dict[str, tuple[str, float]]]:
    """``{stage: {role: (family, value)}}`` for the series of one sample that carry a stage label
    (see the module doc); a stage none of whose series has a role is left out."""
    by_stage: dict[str, dict[str, Any]] = {}
    label = names.stage_label if names else None
    for series, value in (metrics or {}).items():
        stage = stage_of(series, label)
        if stage is not None:
            by_stage.setdefault(stage, {})[series] = value
    out = {}
    for stage, stage_series in by_stage.items():
        told = _stage_told(stage_series, names.roles if names else None)
        if told:
            out[stage] = told
    return out


def _stage_told(metrics: dict[str, Any], custom: dict[str, str] | None) -> dict[str, tuple[str, float]]:
    """One stage's roles: the pooled ones over its series, then what only a stage tells."""
    out = roles(metrics, custom)
    sums: dict[str, float] = {}
    for series, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            sums[family_of(series)] = sums.get(family_of(series), 0.0) + float(value)
    for role, ratios in STAGE_RATIOS.items():
        for num, den, factor in ratios:
            if role not in out and sums.get(den) and num in sums:
                out[role] = (f"{num}/{den}", factor * sums[num] / sums[den])
    compute = next((family for family in COMPUTE_TIME if family in sums), None)
    if compute is not None:
        out["busy"] = (compute, sums[compute] * COMPUTE_TIME[compute])
    memory = [family for family in sums if family.endswith(MEMORY_ENDINGS)]
    if memory:
        out["gpu_mem_bytes"] = (memory[0], sums[memory[0]])
    return out


def labels_seen(series: Iterable[str]) -> list[str]:
    """The label names these series carry, sorted (for the sentence that says a label is not among them)."""
    return sorted({name for series_name in series for name in labels_of(series_name)})
