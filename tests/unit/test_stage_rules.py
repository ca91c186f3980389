"""A server's stages: each stage's roles read from its own series (Triton's ``model``, vLLM-Omni's
``stage``, ``--server-stage-label``), aggregated over a window with a cap, and the verdict on them
(which stage broke, or why none is named)."""

from __future__ import annotations

import pandas as pd

from tts_knee.analysis import server_metrics
from tts_knee.analysis.stages import verdict
from tts_knee.runformat.metric_roles import ServerNames, labels_of, stage_roles


def _triton(model: str, pending: float, queue_us: float, compute_us: float, done: float, execs: float) -> dict:
    """One sample's Triton series of ``model`` (counters as the collector keeps them: per second)."""
    labels = f'{{model="{model}",version="1"}}'
    return {
        f"nv_inference_pending_request_count{labels}": pending,
        f"nv_inference_queue_duration_us{labels}": queue_us,
        f"nv_inference_compute_infer_duration_us{labels}": compute_us,
        f"nv_inference_request_success{labels}": done,
        f"nv_inference_count{labels}": done,
        f"nv_inference_exec_count{labels}": execs,
    }


def test_a_label_value_is_read_with_its_escapes_undone():
    assert labels_of('m{model="a\\"b\\\\c",version="1"}') == {"model": 'a"b\\c', "version": "1"}
    assert labels_of("plain") == {}


def test_triton_models_are_stages_with_their_times_per_request_and_work():
    sample = {
        **_triton("post", 3.0, 1_500_000.0, 990_000.0, 3.3, 3.3),
        **_triton("synth", 0.0, 300.0, 450_000.0, 3.3, 1.65),
        "nv_cpu_utilization": 0.5,  # no model: in no stage
    }
    told = stage_roles(sample)
    assert set(told) == {"post", "synth"}
    post, synth = told["post"], told["synth"]
    assert post["queue_depth"] == ("nv_inference_pending_request_count", 3.0)
    assert round(post["queue_ms"][1], 6) == round(1_500_000 / 3.3 / 1000, 6)
    assert round(post["compute_ms"][1], 6) == 300.0
    assert post["busy"] == ("nv_inference_compute_infer_duration_us", 0.99)  # requests in compute
    assert synth["batch_size"][1] == 2.0  # two inferences an execution


def test_vllm_omni_stages_sum_their_replicas_and_read_the_histograms():
    def series(name: str, stage: str, replica: str) -> str:
        return f'{name}{{model_name="m",stage="{stage}",replica="{replica}"}}'

    sample = {
        series("vllm:num_requests_waiting", "2", "0"): 4.0,
        series("vllm:num_requests_waiting", "2", "1"): 2.0,
        series("vllm:num_requests_running", "2", "0"): 1.0,
        series("vllm:request_queue_time_seconds_sum", "2", "0"): 0.6,
        series("vllm:request_queue_time_seconds_count", "2", "0"): 2.0,
        series("vllm:request_queue_time_seconds_sum", "2", "1"): 0.2,
        series("vllm:request_queue_time_seconds_count", "2", "1"): 2.0,
        series("vllm:request_inference_time_seconds_sum", "2", "0"): 0.8,
        series("vllm:request_inference_time_seconds_count", "2", "0"): 4.0,
        series("vllm:num_requests_waiting", "0", "0"): 0.0,
        'vllm_omni:stage_memory_allocated_bytes{model_name="m",stage="0",replica="0"}': 2.0e9,
        'vllm:omni_num_requests_waiting{model_name="m"}': 6.0,  # the pipeline's own: no stage
    }
    told = stage_roles(sample)
    assert set(told) == {"0", "2"}
    assert told["2"]["queue_depth"][1] == 6.0 and told["2"]["running"][1] == 1.0
    assert told["2"]["queue_ms"][1] == 200.0  # (0.6 + 0.2) s over 4 requests
    assert told["2"]["compute_ms"][1] == 200.0 and told["2"]["busy"][1] == 0.8
    assert told["0"]["gpu_mem_bytes"] == ("vllm_omni:stage_memory_allocated_bytes", 2.0e9)


def test_a_named_stage_label_replaces_the_known_ones():
    sample = {
        'tts_requests_waiting{pipeline_stage="vocoder",model="x"}': 5.0,
        'tts_requests_waiting{pipeline_stage="acoustic",model="x"}': 1.0,
    }
    assert set(stage_roles(sample)) == {"x"}  # Triton's label: one model
    told = stage_roles(sample, ServerNames(stage_label="pipeline_stage"))
    assert {k: v["queue_depth"][1] for k, v in told.items()} == {"vocoder": 5.0, "acoustic": 1.0}


def _window(samples: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({"ts": range(len(samples)), "role": "server", "metrics": samples})


def test_one_stage_has_no_stages_and_a_stage_seen_late_counts_from_its_first_sample():
    one = [_triton("piper", 1.0, 10.0, 100.0, 1.0, 1.0)] * 3
    assert server_metrics.stages(_window(one)) is None
    late = [_triton("a", 1.0, 10.0, 100.0, 1.0, 1.0)] * 2 + [
        {**_triton("a", 1.0, 10.0, 100.0, 1.0, 1.0), **_triton("b", 4.0, 10.0, 100.0, 1.0, 1.0)}
    ]
    staged = server_metrics.stages(_window(late))
    assert staged is not None and staged.label == "model"
    assert staged.stages["a"]["queue_depth"]["samples"] == 3
    assert staged.stages["b"]["queue_depth"] == {
        "series": "nv_inference_pending_request_count",
        "why": "Triton's name for it",
        "mean": 4.0,
        "max": 4.0,
        "samples": 1,
    }


def test_more_stages_than_the_cap_keep_the_busiest_and_count_the_rest():
    sample: dict = {}
    for i in range(server_metrics.MAX_STAGES + 3):
        sample.update(_triton(f"m{i}", float(i), 10.0, 100.0, 1.0, 1.0))
    staged = server_metrics.stages(_window([sample]))
    assert staged is not None and staged.left_out == 3
    assert set(staged.stages) == {f"m{i}" for i in range(3, server_metrics.MAX_STAGES + 3)}


def _role(mean: float, top: float | None = None) -> dict:
    return {"series": "s", "mean": mean, "max": mean if top is None else top, "samples": 5}


def _level(conc: int, stages: dict, label: str = "stage") -> dict:
    return {"concurrency": conc, "server": {"stage_label": label, "stages": stages}}


def test_the_stage_whose_queue_rose_while_the_other_held_is_named_with_what_to_change():
    steps = [
        _level(1, {"0": {"queue_ms": _role(0.0)}, "1": {"queue_ms": _role(1.0)}}),
        _level(
            4,
            {
                "0": {"queue_ms": _role(5.0), "busy": _role(0.5), "running": _role(0.5, 1)},
                "1": {
                    "queue_ms": _role(400.0),
                    "queue_depth": _role(3.0, 4),
                    "busy": _role(2.0),
                    "running": _role(2, 2),
                },
            },
        ),
    ]
    named = verdict(steps, 1, saturated=False)
    assert named is not None and named.stage == "1"
    assert named.evidence == [
        "Stage 1's queue rose from 1 ms each at 1 to 3.0 waiting (400 ms each) at 4 while the other stages' held "
        "(stage 0's 5 ms each); 2.0 requests in compute on average, of the 2 it ran at most: add stage 1 replicas."
    ]
    saturated = verdict(steps, 1, saturated=True)
    assert saturated is not None
    assert saturated.evidence[0].endswith("add stage 1 replicas on more hardware (the server's own is saturated).")


def test_a_triton_model_is_named_by_its_instances():
    steps = [
        _level(1, {"post": {"queue_ms": _role(0.0)}, "synth": {"queue_ms": _role(0.0)}}, "model"),
        _level(
            2,
            {
                "post": {"queue_ms": _role(300.0), "busy": _role(0.98), "batch_size": _role(1.0)},
                "synth": {"queue_ms": _role(2.0), "busy": _role(0.4)},
            },
            "model",
        ),
    ]
    named = verdict(steps, 1, saturated=None)
    assert named is not None and named.stage == "post"
    assert "compute 0.98 s of each second (one instance busy all the time): add post instances." in named.evidence[0]


def test_no_stage_is_named_when_another_ran_at_its_limit_or_queued_too():
    base = {"0": {"queue_ms": _role(0.0)}, "1": {"queue_ms": _role(0.0), "running": _role(1, 2)}}
    balanced = _level(
        8, {"0": {"queue_ms": _role(160.0)}, "1": {"queue_ms": _role(30.0), "busy": _role(1.9), "running": _role(2, 2)}}
    )
    named = verdict([_level(1, base), balanced], 1, saturated=None)
    assert named is not None and named.stage is None
    assert (
        "but stage 1 ran at its limit too (1.9 requests in compute on average, of the 2 it ran at most)"
        in (named.evidence[0])
    )
    both = _level(8, {"0": {"queue_ms": _role(160.0)}, "1": {"queue_ms": _role(80.0)}})
    named = verdict([_level(1, base), both], 1, saturated=None)
    assert named is not None and named.stage is None and "queued in more than one stage" in named.evidence[0]


def test_with_no_queue_rising_the_one_stage_at_its_limit_is_named_else_none():
    base = {"0": {"queue_depth": _role(0.0)}, "1": {"queue_depth": _role(0.0)}}
    limited = _level(
        4,
        {
            "0": {"queue_depth": _role(0.1), "running": _role(3.9, 4)},
            "1": {"queue_depth": _role(0.0), "running": _role(0.5, 2)},
        },
    )
    named = verdict([_level(1, base), limited], 1, saturated=None)
    assert named is not None and named.stage == "0" and named.evidence[0].startswith("No stage's queue rose at 4, but")
    idle = _level(4, {"0": {"queue_depth": _role(0.1)}, "1": {"queue_depth": _role(0.0)}})
    named = verdict([_level(1, base), idle], 1, saturated=None)
    assert named is not None and named.stage is None
    assert named.evidence[0].endswith("the wait is not in a queue of the server's stages.")
    assert verdict([{"concurrency": 1, "server": {"server_roles": {}}}], 0, None) is None


def test_stages_past_the_cap_are_said():
    steps = [
        _level(1, {"0": {"queue_ms": _role(0.0)}, "1": {"queue_ms": _role(0.0)}}),
        _level(4, {"0": {"queue_ms": _role(0.0)}, "1": {"queue_ms": _role(90.0)}}),
    ]
    steps[1]["server"]["stages_left_out"] = 3
    named = verdict(steps, 1, saturated=None)
    assert named is not None and named.stage == "1"
    assert named.evidence[-1] == "The server has 5 stages: the 2 busiest at 4 were judged, 3 more left out."
