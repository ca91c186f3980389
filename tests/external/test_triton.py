"""A real Triton Inference Server: the tritonserver PyTriton bundles, on CPU, serving piper's joe
voice as a decoupled python-backend model (testbed/triton.py), swept over gRPC with --tts-preset
triton while the master scrapes Triton's /metrics. The report shows Triton's queue series and
the diagnosis cites them.

The model runs in a venv of its own (PyTriton needs numpy < 2 and protobuf 6): made once by
``python -m tts_knee.testbed.triton --setup`` into pytest's cache directory (about 40 s and 550 MB,
nvidia-pytriton's 53 MB wheel the most of it), then reused while its stamp matches. The test
itself takes about a minute: Triton's start (~10 s) and three 10 s steps."""

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
def triton(request):
    venv = request.config.cache.mkdir("tts-knee-triton") / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.triton", "--setup", "--venv", str(venv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr
    with spawn(
        ["tts_knee.testbed.triton", "--venv", str(venv), "--grpc-port", "0", "--metrics-port", "0"], timeout=180
    ) as proc:
        deadline = time.monotonic() + 10
        while not any(line.startswith("metrics at ") for line in proc.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc.url, next(line.split()[-1] for line in list(proc.lines) if line.startswith("metrics at "))


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


@pytest.mark.slow
def test_a_model_triton_does_not_serve_fails_in_one_sentence(triton):
    url, _ = triton
    got = exchange(transport_for_model(url, "no_such_model"))
    assert got["answer"].status == "OK"  # Triton says so inside the stream, its call ends OK
    assert got["ended"].error == "Triton failed the request: Request for unknown model: 'no_such_model' is not found"


def transport_for_model(url: str, model: str):
    from tts_knee.locustfiles.transports import transport_for

    return transport_for(settings(url, "--tts-preset", "triton", "--tts-model", model))
