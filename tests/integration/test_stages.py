"""A server of stages through whole runs: the simulator as a vLLM-Omni pipeline (``--stages``, its
/metrics with vLLM's families per ``stage``), scraped by the master (``--server-metrics``), swept
at 1, 2, 4, 8. With the second stage on fewer slots the verdict names it; with both stages alike
it names none (the first queues, the second runs at its limit: a balanced pipeline). A
``--server-stage-label`` no series carries ends the run, the report and the collector with one
sentence; one that a series carries the collector tells the master."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from procs import ROOT, dashboard, get_json, locust, spawn

STEPS = ["--steps", "1,2,4,8", "--step-time", "3", "--settle-time", "0.5"]


def _sweep(tmp_path, stages: str, *extra: str) -> dict:
    """A run against the simulator serving ``stages``, judged; its summary."""
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--stages", stages, "--seed", "7"]) as sim:
        done = locust(
            ["--headless", "-H", sim.url, *STEPS, "--server-metrics", f"{sim.url}/metrics"]
            + ["--run-dir", str(tmp_path / "run"), *extra],
            cwd=tmp_path,
        )
    assert done.returncode == 0 and "Traceback" not in done.stdout, done.stdout
    judged = dashboard(tmp_path / "run")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    print(judged.stdout)  # the verdict, for the record (pytest -s)
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def _at_knee(summary: dict) -> dict:
    return next(s for s in summary["levels"] if s["concurrency"] == summary["knee"]["concurrency"])


def test_the_vocoder_on_fewer_slots_is_the_stage_named(tmp_path):
    summary = _sweep(tmp_path, "talker:8:50,code2wav:2:200")
    knee = _at_knee(summary)
    server = knee["server"]
    assert server["stage_label"] == "stage" and set(server["stages"]) == {"0", "1"}
    vocoder, talker = server["stages"]["1"], server["stages"]["0"]
    # two slots of 200 ms: 10 requests a second; the talker's eight slots of 50 ms take 160
    assert vocoder["queue_ms"]["mean"] > 4 * max(talker["queue_ms"]["mean"], 5)
    assert vocoder["busy"]["mean"] > 1.6 and talker["busy"]["mean"] < 1
    assert summary["diagnosis"]["stage"] == "1", summary["diagnosis"]
    named = [e for e in summary["diagnosis"]["evidence"] if e.startswith("Stage 1's queue rose")]
    assert named and named[0].endswith("add stage 1 replicas."), summary["diagnosis"]["evidence"]
    assert any("summed over 2 stages" in e for e in summary["diagnosis"]["evidence"])
    html = (tmp_path / "run" / "report.html").read_text()
    assert "<h3>The server's stages</h3>" in html and "stage 1 waiting" in html and "One stage:" not in html


def test_stages_alike_have_none_named(tmp_path):
    summary = _sweep(tmp_path, "talker:2:100,code2wav:2:100")
    assert summary["knee"]["concurrency"] is not None
    assert summary["diagnosis"]["stage"] is None, summary["diagnosis"]
    assert any("no one stage broke first" in e for e in summary["diagnosis"]["evidence"]), summary["diagnosis"]
    # the second stage's running requests sat at its two slots while the first one queued
    second = _at_knee(summary)["server"]["stages"]["1"]
    assert second["running"]["max"] == 2 and second["busy"]["mean"] >= 1.6


@pytest.mark.parametrize("where", ["run", "report"])
def test_a_stage_label_no_series_carries_is_one_sentence(tmp_path, where):
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--stages", "a:1:10,b:1:10"]) as sim:
        label = ["--server-stage-label", "pipeline_stage"]
        done = locust(
            ["--headless", "-H", sim.url, "--steps", "1", "--step-time", "1"]
            + ["--server-metrics", f"{sim.url}/metrics", "--run-dir", str(tmp_path / "run")]
            + (label if where == "run" else []),
            cwd=tmp_path,
        )
    said = "--server-stage-label pipeline_stage: no series of "
    if where == "run":
        assert done.returncode == 2 and "Traceback" not in done.stdout, done.stdout
        assert (
            f"tts-knee: {said}{sim.url}/metrics carries that label (the labels there: model_name, replica, stage)"
            in (done.stdout)
        )
        return
    assert done.returncode == 0, done.stdout
    judged = dashboard(tmp_path / "run", *label)
    assert judged.returncode == 2 and "Traceback" not in judged.stderr, judged.stderr
    assert "carries that label (the labels there: model_name, replica, stage)." in judged.stderr
    assert len(judged.stderr.strip().splitlines()) == 1, judged.stderr


def test_the_collector_refuses_a_stage_label_no_series_carries_and_tells_one_that_is_there():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--stages", "a:1:10,b:1:10"]) as sim:
        scrape = ["-m", "tts_knee.collectors", "--port", "0", "--scrape", f"{sim.url}/metrics"]
        refused = subprocess.run(
            [sys.executable, *scrape, "--server-stage-label", "pipeline_stage"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(os.environ, TTS_KNEE_NVML_MODULE="no_such_nvml_module"),
        )
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            f"tts-knee collect: --server-stage-label pipeline_stage: no series of {sim.url}/metrics carries that "
            "label (the labels there: model_name, replica, stage)."
        ], refused.stderr
        with spawn(
            [*scrape[1:], "--server-stage-label", "stage"], env={"TTS_KNEE_NVML_MODULE": "no_such_nvml_module"}
        ) as col:
            assert get_json(f"{col.url}/samples?since=0")["server_stage_label"] == "stage"
