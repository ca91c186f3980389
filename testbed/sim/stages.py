"""``--stages``: the simulated server as a pipeline of stages, a vLLM-Omni talker and Code2Wav or
a Triton ensemble's models. Each stage has its own FIFO slots and cost per request (+/- the
slots model's ``--jitter``); a request goes through them in turn, waiting for a slot of each,
and its audio is sent once the last stage is done, in one piece.

``/metrics`` then has each stage's series as ``--stage-metrics`` names them:

- ``vllm-omni``: vLLM's families with vLLM-Omni's ``stage`` and ``replica`` labels (its
  ``OmniPrometheusStatLogger`` relabels vLLM's ``engine``), the stage its place in ``--stages``
  from 0, as vLLM-Omni numbers its stages: ``vllm:num_requests_waiting``,
  ``vllm:num_requests_running``, and the histograms ``vllm:request_queue_time_seconds`` and
  ``vllm:request_inference_time_seconds``;
- ``triton``: Triton's per-model families, the stage's name as the ``model``:
  ``nv_inference_pending_request_count``, ``nv_inference_request_success``, ``nv_inference_count``,
  ``nv_inference_exec_count``, ``nv_inference_queue_duration_us``,
  ``nv_inference_compute_infer_duration_us``.
"""

from __future__ import annotations

import random
import time

from gevent.event import Event

from tts_knee.testbed.sim.slots import Slots

STAGE_METRICS = ("vllm-omni", "triton")
MODEL_NAME = "sim"  # vLLM-Omni's model_name label


class Stage:
    """One stage: ``slots`` requests at once, each holding one for ``cost_ms`` (+/- jitter)."""

    def __init__(self, name: str, slots: int, cost_ms: float):
        self.name = name
        self.slots = Slots(slots)
        self.cost_ms = cost_ms
        self.served = 0
        self.queue_s_total = 0.0  # time requests waited for one of its slots, summed
        self.compute_s_total = 0.0  # time requests held one, summed

    def run(self, rng: random.Random, jitter: float, stop: Event) -> bool:
        """Wait for a slot, hold it for the stage's cost; False when ``stop`` came first."""
        asked = time.monotonic()
        self.slots.acquire()
        began = time.monotonic()
        try:
            stopped = stop.wait(self.cost_ms * (1 + rng.uniform(-jitter, jitter)) / 1000)
        finally:  # counted as a request ends, as Triton and vLLM count theirs
            self.queue_s_total += began - asked
            self.compute_s_total += time.monotonic() - began
            self.served += 1
            self.slots.release()
        return not stopped


def parse(text: str) -> list[Stage]:
    """``NAME:SLOTS:MS,...`` into stages; raises ValueError with one sentence."""
    stages = []
    for item in (part.strip() for part in text.split(",")):
        fields = item.split(":")
        try:
            name, slots, cost_ms = fields[0].strip(), int(fields[1]), float(fields[2])
        except (IndexError, ValueError):
            name, slots, cost_ms = "", 0, -1.0
        if len(fields) != 3 or not name or slots < 1 or not cost_ms >= 0:
            raise ValueError(f"each stage is NAME:SLOTS:MS with SLOTS >= 1 and MS >= 0, e.g. talker:8:50, got {item!r}")
        stages.append(Stage(name, slots, cost_ms))
    if len({s.name for s in stages}) < len(stages):
        raise ValueError(f"stage names must differ, got {text!r}")
    return stages


def exposition(stages: list[Stage], style: str) -> list[str]:
    """The stages' series, vLLM-Omni's or Triton's names (see the module doc), as exposition lines."""
    lines: list[str] = []
    if style == "triton":
        labelled = [(f'model="{s.name}",version="1"', s) for s in stages]
        families = (
            ("nv_inference_pending_request_count", "gauge", lambda s: s.slots.queued),
            ("nv_inference_request_success", "counter", lambda s: s.served),
            ("nv_inference_count", "counter", lambda s: s.served),
            ("nv_inference_exec_count", "counter", lambda s: s.served),
            ("nv_inference_queue_duration_us", "counter", lambda s: s.queue_s_total * 1e6),
            ("nv_inference_compute_infer_duration_us", "counter", lambda s: s.compute_s_total * 1e6),
        )
        for name, kind, value in families:
            lines += [f"# TYPE {name} {kind}"] + [f"{name}{{{labels}}} {float(value(s))!r}" for labels, s in labelled]
        return lines
    labelled = [(f'model_name="{MODEL_NAME}",stage="{i}",replica="0"', s) for i, s in enumerate(stages)]
    for name, value in (
        ("vllm:num_requests_waiting", lambda s: s.slots.queued),
        ("vllm:num_requests_running", lambda s: s.slots.busy),
    ):
        lines += [f"# TYPE {name} gauge"] + [f"{name}{{{labels}}} {float(value(s))!r}" for labels, s in labelled]
    for name, total in (
        ("vllm:request_queue_time_seconds", lambda s: s.queue_s_total),
        ("vllm:request_inference_time_seconds", lambda s: s.compute_s_total),
    ):
        lines.append(f"# TYPE {name} histogram")
        for labels, s in labelled:
            lines += [
                f'{name}_bucket{{{labels},le="+Inf"}} {float(s.served)!r}',
                f"{name}_sum{{{labels}}} {float(total(s))!r}",
                f"{name}_count{{{labels}}} {float(s.served)!r}",
            ]
    return lines
