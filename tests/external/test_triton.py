"""A real Triton Inference Server: the tritonserver PyTriton bundles, on CPU, serving piper's joe
voice as a decoupled python-backend model (testbed/triton.py), swept over gRPC with --tts-preset
triton while the master scrapes Triton's /metrics. The report shows Triton's queue series and
the diagnosis cites them.

The model runs in a venv of its own (PyTriton needs numpy < 2 and protobuf 6): made once by
``python -m tts_knee.testbed.triton --setup`` into pytest's cache directory (about 40 s and 550 MB,
nvidia-pytriton's 53 MB wheel the most of it), then reused while its stamp matches. The test
itself takes about a minute: Triton's start (~10 s) and three 10 s steps.

The two-model pipeline (``--pipeline``: the ensemble tts_pipeline of piper_synth, piper's
whole-text synthesis, and post, a post-stage holding its instance a set time) is swept twice,
each model with its own ``nv_inference_*{model=...}`` series: with post on one instance and the
costlier, the verdict names post; with piper_synth on one instance and post cheap on four, it
names piper_synth. About 40 s each: Triton's start and five 4 s steps."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from test_grpc import exchange, settings

from procs import ROOT, dashboard, locust, spawn

TEXTS = [
    "Hello there, how are you?",
    "The train leaves at nine. Please be on time.",
    "Thanks for calling. Goodbye.",
    "It is raining again today.",
]
QUEUE = "nv_inference_pending_request_count"


@pytest.fixture(scope="module")
def triton_venv(request):
    venv = request.config.cache.mkdir("tts-knee-triton") / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.triton", "--setup", "--venv", str(venv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr
    return venv


def _metrics_url(proc) -> str:
    """The launcher's second line, ``metrics at URL``, once it is there."""
    deadline = time.monotonic() + 10
    while not any(line.startswith("metrics at ") for line in proc.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    return next(line.split()[-1] for line in list(proc.lines) if line.startswith("metrics at "))


@pytest.fixture(scope="module")
def triton(triton_venv):
    with spawn(
        ["tts_knee.testbed.triton", "--venv", str(triton_venv), "--grpc-port", "0", "--metrics-port", "0"], timeout=180
    ) as proc:
        yield proc.url, _metrics_url(proc)


@pytest.mark.slow
def test_a_triton_sweep_shows_and_cites_tritons_queue(tmp_path, triton):
    url, metrics = triton
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    run_dir = tmp_path / "run"
    proc = locust(
        [
            "--headless",
            "-H",
            url,
            "--tts-protocol",
            "grpc",
            "--tts-preset",
            "triton",
            "--steps",
            "1,2,4",
            "--step-time",
            "10",
            "--texts",
            str(texts),
            "--server-metrics",
            metrics,
            "--run-dir",
            str(run_dir),
        ],
        timeout=150,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    by_c = {s["concurrency"]: s for s in summary["steps"]}
    for s in by_c.values():
        assert s["error_rate"] == 0 and s["status_counts"] == {"OK": s["attempts"]}
        assert s["ttfa_ms"]["p50"] > 0 and s["riva"]["chunk_ms"]["count"] > 0 and s["rtfx"] > 0
        assert s["server"]["server_roles"]["queue_depth"]["series"] == QUEUE
    # one instance: with four users three wait in Triton's queue, and for a while
    assert by_c[4]["server"]["server_roles"]["queue_depth"]["max"] >= 1
    assert by_c[4]["server"]["server_roles"]["queue_ms"]["mean"] > by_c[1]["server"]["server_roles"]["queue_ms"]["mean"]
    assert any(QUEUE in e for e in summary["diagnosis"]["evidence"]), summary["diagnosis"]
    report = (run_dir / "report.html").read_text()
    assert QUEUE in report and "nv_inference_queue_duration_us" in report
    print(judged.stdout)  # the numbers, for the record (pytest -s)


PIPELINE_CONFIGS = {
    "post": ["--synth-instances", "4", "--post-instances", "1", "--post-ms", "300"],
    "piper_synth": ["--synth-instances", "1", "--post-instances", "4", "--post-ms", "20"],
}


@pytest.mark.slow
@pytest.mark.parametrize("breaking", list(PIPELINE_CONFIGS))
def test_the_verdict_names_the_model_of_the_pipeline_that_breaks_first(tmp_path, triton_venv, breaking):
    preset = json.loads((ROOT / "configs" / "presets" / "triton.json").read_text())
    preset.update(model="tts_pipeline", decoupled=False)  # the ensemble answers whole
    (tmp_path / "pipeline.json").write_text(json.dumps(preset))
    texts = tmp_path / "texts.txt"
    texts.write_text("Hello there.\nThanks for calling.\nSee you soon.\nIt is raining.\n")
    launch = ["tts_knee.testbed.triton", "--venv", str(triton_venv), "--grpc-port", "0", "--metrics-port", "0"]
    with spawn([*launch, "--pipeline", *PIPELINE_CONFIGS[breaking]], timeout=180) as server:
        metrics = _metrics_url(server)
        proc = locust(
            ["--headless", "-H", server.url, "--tts-protocol", "grpc", "--tts-preset", str(tmp_path / "pipeline.json")]
            + ["--steps", "1,2,4,8,16", "--step-time", "4", "--texts", str(texts), "--server-metrics", metrics]
            + ["--run-dir", str(tmp_path / "run")],
            timeout=150,
        )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout
    judged = dashboard(tmp_path / "run")
    assert judged.returncode == 0, judged.stderr
    print(judged.stdout)  # the verdict, for the record (pytest -s)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    knee = next(s for s in summary["levels"] if s["concurrency"] == summary["knee"]["concurrency"])
    stages = knee["server"]["stages"]
    assert knee["server"]["stage_label"] == "model" and set(stages) == {"tts_pipeline", "piper_synth", "post"}
    assert stages["post"]["compute_ms"]["mean"] > (250 if breaking == "post" else 15)  # what --post-ms holds
    assert summary["diagnosis"]["stage"] == breaking, summary["diagnosis"]
    named = [e for e in summary["diagnosis"]["evidence"] if e.startswith(f"Model {breaking}'s queue rose")]
    assert named and f"add {breaking} instances" in named[0], summary["diagnosis"]["evidence"]


@pytest.mark.slow
def test_a_model_triton_does_not_serve_fails_in_one_sentence(triton):
    url, _ = triton
    got = exchange(transport_for_model(url, "no_such_model"))
    assert got["answer"].status == "OK"  # Triton says so inside the stream, its call ends OK
    assert got["ended"].error == "Triton failed the request: Request for unknown model: 'no_such_model' is not found"


def transport_for_model(url: str, model: str):
    from tts_knee.locustfiles.transports import transport_for

    return transport_for(settings(url, "--tts-preset", "triton", "--tts-model", model))
