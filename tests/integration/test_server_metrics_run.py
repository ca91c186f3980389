"""The server's own metrics through a whole run: a 4-slot simulator publishing its queue, a
collector scraping it (--scrape) and the master scraping it too (--server-metrics), swept at
1, 2, 4, 8; then the step summary, the diagnosis and the report. And the diagnosis's use of the
queue on its own, on step summaries."""

from __future__ import annotations

import json

import pytest

from procs import dashboard, locust, read_jsonl, spawn
from tts_knee.analysis.diagnosis import diagnose

WAITING = "sim:num_requests_waiting"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server-metrics")
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "250",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        args = [
            "tts_knee.collectors",
            "--port",
            "0",
            "--interval",
            "0.25",
            "--pid",
            str(sim.pid),
            "--scrape",
            f"{sim.url}/metrics",
        ]
        with spawn(args, env={"TTS_KNEE_NVML_MODULE": "no_such_nvml_module"}) as col:
            done = locust(
                [
                    "--headless",
                    "-H",
                    sim.url,
                    "--steps",
                    "1,2,4,8",
                    "--step-time",
                    "3",
                    "--settle-time",
                    "0.5",
                    "--run-dir",
                    str(tmp / "run"),
                    "--collector",
                    col.url,
                    "--server-metrics",
                    f"{sim.url}/metrics",
                ],
                cwd=tmp,
            )
    assert done.returncode == 0, done.stdout
    assert "Traceback" not in done.stdout
    dash = dashboard(tmp / "run")
    assert dash.returncode == 0, dash.stdout + dash.stderr
    return tmp / "run"


def _in_step(samples, step):
    return [s for s in samples if step["start"] + 0.5 <= s["ts"] <= step["end"]]


def test_the_queue_gauge_in_resources_jsonl_is_0_at_1_and_at_least_2_at_8(run_dir):
    info = json.loads((run_dir / "run.json").read_text())
    steps = {s["concurrency"]: s for s in info["steps"]}
    samples = read_jsonl(run_dir / "resources.jsonl")
    collected = [s for s in samples if s["role"] == "server" and s.get("collector")]
    scraped = [s for s in samples if s.get("source")]
    for kind in (collected, scraped):
        at1 = [s["metrics"][WAITING] for s in _in_step(kind, steps[1]) if s.get("metrics")]
        at8 = [s["metrics"][WAITING] for s in _in_step(kind, steps[8]) if s.get("metrics")]
        assert at1 and set(at1) == {0.0}
        assert at8 and max(at8) >= 2
    assert all(s["role"] == "server" and s["source"].endswith("/metrics") for s in scraped)
    assert info["server_metrics"][0]["samples"] == len(scraped)


def test_the_step_summary_and_the_evidence_cite_the_queue(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = {s["concurrency"]: s for s in summary["steps"]}
    assert steps[1]["server"]["metrics"][WAITING]["max"] == 0
    assert steps[8]["server"]["metrics"][WAITING]["max"] >= 2
    assert steps[8]["server"]["server_roles"]["queue_depth"]["series"] == WAITING
    d = summary["diagnosis"]
    assert d["kind"] == "concurrency_limit", d
    assert any(WAITING in e and "concurrency limit is too low" in e for e in d["evidence"]), d
    html = (run_dir / "report.html").read_text()
    assert "The server&#x27;s own metrics" in html or "The server's own metrics" in html
    # one stage: nothing of stages in the summary, and the report says so once
    assert not any("stages" in s["server"] for s in summary["steps"]) and "stage" not in d
    assert html.count("One stage: the server") == 1 and "The server's stages" not in html


# -- the diagnosis on step summaries ----------------------------------------------------------


def _step(conc, p95, queue=None, running=None, gpu=None, cpu=None):
    server = None
    if queue is not None or gpu is not None or cpu is not None:
        roles = {}
        if queue is not None:
            roles["queue_depth"] = {
                "series": "vllm:num_requests_waiting",
                "mean": queue / 2,
                "max": queue,
                "samples": 5,
            }
        if running is not None:
            roles["running"] = {"series": "vllm:num_requests_running", "mean": running, "max": running, "samples": 5}
        by = {
            "gpu-host": {
                "gpu_util_mean": gpu,
                "gpu_util_max": gpu,
                "cpu_mean": cpu,
                "busiest_core_mean": cpu,
                "proc_cpu_mean": None,
            }
        }
        server = {
            "gpu_util_mean": gpu,
            "gpu_util_max": gpu,
            "cpu_mean": cpu,
            "busiest_core_mean": cpu,
            "by_host": by,
            "hosts": ["gpu-host"],
            "server_roles": roles or None,
        }
    return {
        "step": conc,
        "concurrency": conc,
        "requests": 50,
        "attempts": 50,
        "ok": 50,
        "failed": 0,
        "error_rate": 0.0,
        "throttled": 0,
        "retries": 0,
        "non_throttle_failures": 0,
        "errors": [],
        "status_counts": {"200": 50},
        "latency_ms": {"p50": p95 * 0.8, "p95": p95, "max": p95 * 1.2},
        "throughput_rps": 4.0,
        "completed_rps": 4.0,
        "server": server,
        "client": None,
        "little": None,
    }


KNEE = {"index": 3, "concurrency": 8}


def test_queue_rising_with_the_gpu_idle_is_the_concurrency_limit_in_those_words():
    steps = [
        _step(c, p, queue=q, running=8, gpu=35, cpu=20)
        for c, p, q in ((1, 200, 0), (2, 200, 0), (4, 210, 0), (8, 600, 12))
    ]
    d = diagnose(steps, KNEE, None, True)
    assert d["kind"] == "concurrency_limit"
    assert d["evidence"][0].startswith("The server's queue (vllm:num_requests_waiting) rose to 12")
    assert "GPU utilisation 35%" in d["evidence"][0]
    assert d["evidence"][0].endswith("its concurrency limit is too low.")


def test_running_capped_with_the_gpu_saturated_is_compute_bound():
    steps = [
        _step(c, p, queue=q, running=r, gpu=g, cpu=20)
        for c, p, q, r, g in ((1, 200, 0, 1, 20), (2, 200, 0, 2, 40), (4, 210, 0, 4, 80), (8, 600, 6, 8, 98))
    ]
    d = diagnose(steps, KNEE, None, True)
    assert d["kind"] == "compute_bound"
    assert any(
        "Running requests (vllm:num_requests_running) capped at 8 with GPU utilisation 98%" in e for e in d["evidence"]
    ), d


def test_without_gpu_or_cpu_the_queue_still_tells_server_queueing_from_client_stalls():
    inside = [_step(c, p, queue=q) for c, p, q in ((1, 200, 0), (2, 200, 0), (4, 210, 0), (8, 600, 12))]
    d = diagnose(inside, KNEE, None, True)
    assert d["kind"] == "queueing"
    assert "requests wait inside the server" in d["evidence"][0]
    outside = [_step(c, p, queue=0) for c, p in ((1, 200), (2, 200), (4, 210), (8, 600))]
    d = diagnose(outside, KNEE, None, True)
    assert d["kind"] == "queueing"
    assert "not waiting in the server's queue" in d["evidence"][0]


def test_master_scrape_gap_is_null_metrics_and_one_warning(tmp_path, caplog, refused_port):
    import logging

    import gevent

    from tts_knee.collectors.puller import CollectorPuller

    down = f"http://127.0.0.1:{refused_port}/metrics"
    out = tmp_path / "resources.jsonl"
    with spawn(["tts_knee.testbed.sim", "--port", "0"]) as sim:
        puller = CollectorPuller(
            [], out, interval_s=0.2, sample_client=False, server_metrics=[f"{sim.url}/metrics", down]
        )
        with caplog.at_level(logging.WARNING):
            assert puller.start() == []
            gevent.sleep(1.2)
            puller.stop()
    lines = read_jsonl(out)
    good = [s for s in lines if s["source"] == f"{sim.url}/metrics"]
    bad = [s for s in lines if s["source"] == down]
    assert len(good) >= 4 and all(s["metrics"][WAITING] == 0 for s in good)
    assert len(bad) >= 4 and all(s["metrics"] is None for s in bad)  # a gap, never 0
    warned = [r.getMessage() for r in caplog.records if down in r.getMessage()]
    assert len(warned) == 1 and "unreachable" in warned[0]
    assert {d["url"]: d["failures"] > 0 for d in puller.describe_server_metrics()} == {
        f"{sim.url}/metrics": False,
        down: True,
    }


# -- a server tts-knee does not know by name ---------------------------------------------------


def test_a_custom_servers_queue_is_read_by_its_name_or_by_server_role(tmp_path):
    """A 4-slot server publishing tts_requests_waiting (the simulator's --metrics-prefix): the
    name alone is enough for the diagnosis to cite its queue at 8, and --server-role names it
    too; the collector's and the load generator's --server-role land in run.json."""
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "250",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
            "--metrics-prefix",
            "tts",
        ]
    ) as sim:
        args = [
            "tts_knee.collectors",
            "--port",
            "0",
            "--interval",
            "0.25",
            "--pid",
            str(sim.pid),
            "--scrape",
            f"{sim.url}/metrics",
            "--server-role",
            "running=tts_requests_running",
        ]
        with spawn(args, env={"TTS_KNEE_NVML_MODULE": "no_such_nvml_module"}) as col:
            done = locust(
                [
                    "--headless",
                    "-H",
                    sim.url,
                    "--steps",
                    "1,2,4,8",
                    "--step-time",
                    "3",
                    "--settle-time",
                    "0.5",
                    "--run-dir",
                    str(tmp_path / "run"),
                    "--collector",
                    col.url,
                    "--server-role",
                    "running=tts_requests_running",
                ],
                cwd=tmp_path,
            )
    assert done.returncode == 0, done.stdout
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["options"]["server_roles"] == ["running=tts_requests_running"]
    assert info["collectors"][0]["server_roles"] == ["running=tts_requests_running"]
    res = dashboard(tmp_path / "run", "--json", "--no-report")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    roles = {st["concurrency"]: st["server"]["server_roles"] for st in s["steps"]}
    assert roles[8]["queue_depth"]["series"] == "tts_requests_waiting" and roles[8]["queue_depth"]["max"] >= 2
    assert roles[8]["queue_depth"]["why"] == "its name ends in _requests_waiting"
    assert roles[8]["running"]["why"] == "named by --server-role running=tts_requests_running"
    d = s["diagnosis"]
    assert d["kind"] == "concurrency_limit", d
    cited = [e for e in d["evidence"] if "tts_requests_waiting, its name ends in _requests_waiting" in e]
    assert cited and "at concurrency 8" in cited[0], d["evidence"]
    res = dashboard(tmp_path / "run", "--json", "--no-report", "--server-role", "queue_depth=tts_requests_waiting")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)["diagnosis"]
    assert d["kind"] == "concurrency_limit"
    assert any(
        "tts_requests_waiting, named by --server-role queue_depth=tts_requests_waiting" in e and "at concurrency 8" in e
        for e in d["evidence"]
    ), d["evidence"]
    bad = dashboard(tmp_path / "run", "--server-role", "queue=tts_requests_waiting")
    assert bad.returncode == 2 and "--server-role takes ROLE=SERIES" in bad.stderr
