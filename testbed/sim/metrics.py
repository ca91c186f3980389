"""What the simulator says of its own state, from its :class:`~testbed.sim.capacity.Capacity`:
``/health``'s JSON object and ``/metrics``' Prometheus text, named the way vLLM names its own
(``sim:num_requests_waiting``, ``sim:num_requests_running``, ``sim:requests_served_total`` ...)
so that a collector's ``--scrape`` has a server queue to read; with ``--metrics-prefix P`` the
way a custom server might name them instead (``P_requests_waiting``, ``P_requests_running`` ...);
with ``--stages`` the queue and the running requests are each stage's, as vLLM-Omni or Triton
name them (:mod:`testbed.sim.stages`)."""

from __future__ import annotations

from tts_knee.testbed.sim.capacity import Capacity
from tts_knee.testbed.sim.stages import exposition as stage_lines
from tts_knee.testbed.sim.voices import Registry


def health(capacity: Capacity, registry: Registry | None = None) -> dict:
    """served: requests that held a slot; rejected: 429, 503 and out-of-memory 500s;
    generating (with --capacity): requests sharing the capacity now; with --voice-cache, the
    cache's figures (named as its counters, so ``--server-stats`` reads the ``_total`` ones as
    rates) and the voices registered."""
    slots = capacity.slots
    health = {
        "status": "ok",
        "slots": slots.n,
        "busy": slots.busy,
        "queued": slots.queued,
        "served": capacity.served,
        "rejected": capacity.rejected,
    }
    if capacity.engine is not None:
        health["generating"] = capacity.engine.generating
    if capacity.voices.capacity:
        health.update(capacity.voices.figures())
    if capacity.answers is not None:
        health["text_cache_hits"] = capacity.text_cache_hits
    if registry is not None and registry.voices:
        health["voices_registered"] = len(registry.voices)
    return health


def exposition(capacity: Capacity, prefix: str | None = None) -> str:
    """The queue and slots as gauges, requests as counters; ``prefix``: a custom server's names.
    With ``--stages`` the queue and the running requests are each stage's (:mod:`testbed.sim.stages`)."""
    slots, engine = capacity.slots, capacity.engine
    staged = bool(capacity.stages)
    families = [
        (
            "num_requests_waiting" if prefix is None else "requests_waiting",
            "gauge",
            "Requests waiting for a slot.",
            None if staged else slots.queued,
        ),
        (
            "num_requests_running" if prefix is None else "requests_running",
            "gauge",
            "Requests holding a slot.",
            None if staged else slots.busy,
        ),
        ("slots", "gauge", "Requests synthesised at once (absent: unlimited).", None if staged else slots.n),
        (
            "num_requests_generating",
            "gauge",
            "Requests sharing the capacity now.",
            None if engine is None else engine.generating,
        ),
        ("requests_served_total", "counter", "Requests that held a slot.", capacity.served),
        ("requests_rejected_total", "counter", "Requests refused with 429, 503 or 500 OOM.", capacity.rejected),
    ]
    cache = capacity.voices
    if cache.capacity:
        families += [
            ("voice_cache_size", "gauge", "Speaker embeddings cached.", cache.size),
            ("voice_cache_capacity", "gauge", "Speaker embeddings the cache keeps.", cache.capacity),
            ("voice_cache_hits_total", "counter", "Requests whose voice was cached.", cache.hits),
            ("voice_cache_misses_total", "counter", "Requests whose voice had to be computed.", cache.misses),
            ("voice_cache_evictions_total", "counter", "Speaker embeddings evicted.", cache.evictions),
        ]
    lines = []
    p = "sim:" if prefix is None else prefix + "_"
    for name, kind, text, value in families:
        if value is not None:
            lines += [f"# HELP {p}{name} {text}", f"# TYPE {p}{name} {kind}", f"{p}{name} {float(value)!r}"]
    lines += [
        f"# HELP {p}request_queue_time_seconds Time requests waited for a slot.",
        f"# TYPE {p}request_queue_time_seconds summary",
        f"{p}request_queue_time_seconds_sum {capacity.queue_s_total!r}",
        f"{p}request_queue_time_seconds_count {float(capacity.queue_waits)!r}",
    ]
    if staged:
        lines += stage_lines(capacity.stages, capacity.args.stage_metrics)
    return "\n".join(lines) + "\n"
