"""The collector sidecar as a real process: sample fields, the watched process tree, /metrics,
the token, the spool and ring, SIGTERM and bad flags."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fake_nvml import SimHealth
from procs import ROOT, get_json, http_get, spawn
from tts_knee import runformat

INTERVAL = "0.2"
MARKER = "TTSKNEE_CMDLINE_MARKER"
CPU_ONLY = {"TTS_KNEE_NVML_MODULE": "fake_nvml", "PYTHONPATH": "tests", "FAKE_NVML_ABSENT": "library"}

HOST_FIELDS = {
    "seq": int,
    "ts": float,
    "host": str,
    "role": str,
    "cpu_percent": float,
    "cpu_max_core_percent": float,
    "mem_used_bytes": int,
    "mem_total_bytes": int,
    "disk_read_bytes": (int, type(None)),
    "disk_write_bytes": (int, type(None)),
    "net_sent_bytes": (int, type(None)),
    "net_recv_bytes": (int, type(None)),
    "iowait_percent": (float, type(None)),
    "steal_percent": (float, type(None)),
    "gpus": list,
}
assert not runformat.unknown_fields(runformat.RESOURCE_SAMPLE, HOST_FIELDS)

# A "server" whose child forks a grandchild; child and grandchild burn CPU for a few seconds.
TREE = f"""
import subprocess, sys, time
burn = "import os, time\\nos.fork()\\nt = time.time()\\nwhile time.time() - t < 4: pass\\n"
kid = subprocess.Popen([sys.executable, "-c", burn, "{MARKER}"])
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def sim_stub():
    with SimHealth(busy=3, slots=4) as sim:
        yield sim.url


def wait_for(fn, timeout: float = 10.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


@pytest.fixture
def server_tree():
    popen = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert popen.stdout.readline().strip() == "ready"
    yield popen
    popen.kill()
    popen.wait(5)


def test_samples_describe_host_and_watched_tree(server_tree):
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", INTERVAL, "--pid", str(server_tree.pid)], env=CPU_ONLY
    ) as c:

        def busy_tree():
            samples = get_json(f"{c.url}/samples?since=0")["samples"]
            return [
                s
                for s in samples
                if s["proc"] and s["proc"]["num_children"] >= 2 and (s["proc"]["cpu_percent"] or 0) > 30
            ]

        busy = wait_for(busy_tree)
        assert busy, "never saw the child and grandchild burning CPU"

        reply = get_json(f"{c.url}/samples?since=0")
        samples = reply["samples"]
        assert reply["next"] == samples[-1]["seq"] + 1
        assert [s["seq"] for s in samples] == list(range(samples[0]["seq"], reply["next"]))
        for s in samples:
            for field, kind in HOST_FIELDS.items():
                assert isinstance(s[field], kind), (field, s[field])
            assert s["role"] == "server" and s["gpus"] == []
            assert 0 <= s["cpu_percent"] <= s["cpu_max_core_percent"] + 1e-6 <= 100.001
            assert 0 < s["mem_used_bytes"] < s["mem_total_bytes"]
            assert abs(s["ts"] - time.time()) < 30
        proc = busy[-1]["proc"]
        assert set(proc) == {"pid", "cpu_percent", "rss_bytes", "num_children"}
        assert proc["pid"] == server_tree.pid and proc["rss_bytes"] > 1 << 20

        later = get_json(f"{c.url}/samples?since={reply['next']}")
        assert all(s["seq"] >= reply["next"] for s in later["samples"])

        for path in ("/samples?since=0", "/metrics", "/healthz"):
            assert MARKER not in http_get(c.url + path)[1].decode(), "a command line leaked"
        health = get_json(f"{c.url}/healthz")
        assert health["status"] == "ok" and health["nvml"] is False and health["samples"] > 0
        assert c.output().count("sampling CPU only") == 1

        # The watched server exits: proc goes null, one note, sampling goes on.
        server_tree.kill()
        server_tree.wait(5)
        after = wait_for(lambda: [s for s in get_json(f"{c.url}/samples?since=0")["samples"] if s["proc"] is None])
        assert after
        n = get_json(f"{c.url}/healthz")["samples"]
        assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] > n + 2)
        assert c.output().count(f"Watched process {server_tree.pid} exited") == 1
        assert c.stop(signal.SIGTERM) == 0
    assert "Traceback" not in c.output()


def test_metrics_are_prometheus_text_in_base_units(sim_stub):
    env = {
        "TTS_KNEE_NVML_MODULE": "fake_nvml",
        "PYTHONPATH": "tests",
        "FAKE_NVML_GPUS": "2",
        "FAKE_NVML_SIM_URL": sim_stub,
    }
    with spawn(["tts_knee.collectors", "--port", "0", "--interval", INTERVAL], env=env) as c:
        assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] >= 2)
        status, body = http_get(f"{c.url}/metrics")
        assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    value = {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for f in families.values()}

    def gpu(i: int) -> tuple:
        return (("gpu", str(i)), ("mig", ""), ("uuid", f"GPU-fake-{i:04d}"))

    assert 0 <= value["tts_knee_cpu_utilization_ratio"][()] <= 1
    assert 0 <= value["tts_knee_cpu_max_core_utilization_ratio"][()] <= 1
    assert value["tts_knee_memory_total_bytes"][()] > 1 << 27
    assert families["tts_knee_disk_read_bytes"].type == "counter"  # the parser drops _total
    assert value["tts_knee_gpu_utilization_ratio"][gpu(0)] == pytest.approx(0.75)
    assert "not SM occupancy" in families["tts_knee_gpu_utilization_ratio"].documentation
    assert value["tts_knee_gpu_memory_used_bytes"][gpu(0)] == (1 << 30) + 3 * 512 * (1 << 20)
    assert value["tts_knee_gpu_memory_total_bytes"][gpu(1)] == 80 * (1 << 30)
    assert value["tts_knee_gpu_power_watts"][gpu(0)] == pytest.approx(370.0)
    assert gpu(1) not in value["tts_knee_gpu_power_watts"], "unsupported must be absent, not 0"
    assert value["tts_knee_gpu_sm_clock_hertz"][gpu(0)] == 1.98e9
    assert value["tts_knee_gpu_temperature_celsius"][gpu(0)] == 65
    reasons = {dict(k)["reason"] for k in value["tts_knee_gpu_clock_event_reason"] if dict(k)["gpu"] == "1"}
    assert reasons == {"sw_power_cap", "hw_slowdown"}
    assert value["tts_knee_gpu_lost"][gpu(0)] == 0
    assert value["tts_knee_collector_nvml_available"][()] == 1


def test_token_is_required_everywhere():
    with spawn(["tts_knee.collectors", "--port", "0", "--interval", INTERVAL, "--token", "s3cret"], env=CPU_ONLY) as c:
        for path in ("/samples?since=0", "/time", "/metrics", "/healthz", "/nope"):
            assert http_get(c.url + path)[0] == 401, path
            assert http_get(c.url + path, token="wrong")[0] == 401, path
        for path in ("/samples?since=0", "/time", "/metrics", "/healthz"):
            assert http_get(c.url + path, token="s3cret")[0] == 200, path
        assert http_get(c.url + "/nope", token="s3cret")[0] == 404
    with spawn(["tts_knee.collectors", "--port", "0"], env=dict(CPU_ONLY, TTS_KNEE_COLLECTOR_TOKEN="from-env")) as c:
        assert http_get(c.url + "/metrics")[0] == 401
        assert http_get(c.url + "/metrics", token="from-env")[0] == 200


def test_ring_drops_oldest_and_spool_keeps_all(tmp_path):
    spool = tmp_path / "spool.jsonl"
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", "0.1", "--buffer", "3", "--spool", str(spool)],
        env=CPU_ONLY,
    ) as c:
        assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] >= 6)
        reply = get_json(f"{c.url}/samples?since=0")
        assert len(reply["samples"]) == 3 and reply["dropped"] == reply["samples"][0]["seq"]
        assert http_get(f"{c.url}/samples?since=x")[0] == 400
        # A since beyond next (a puller that knew an earlier life) gets the lower next back.
        ahead = get_json(f"{c.url}/samples?since=100000")
        assert ahead["samples"] == [] and ahead["next"] < 100000
        assert get_json(f"{c.url}/time")["time"] == pytest.approx(time.time(), abs=1)
    seqs = [json.loads(line)["seq"] for line in spool.read_text().splitlines()]
    assert seqs == list(range(len(seqs))) and len(seqs) >= 6


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["--port", "70000"],
        ["--interval", "0"],
        ["--interval", "fast"],
        ["--buffer", "0"],
        ["--pid", "DEAD"],
        ["--pid", "1", "--match", "x"],
        ["--spool", "/nonexistent-dir/spool.jsonl"],
    ],
)
def test_bad_flags_exit_2_with_one_sentence(args):
    args = [str(_dead_pid()) if a == "DEAD" else a for a in args]
    r = subprocess.run(
        [sys.executable, "-m", "tts_knee.collectors", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=30,
        env=dict(os.environ, **CPU_ONLY),
    )
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tts-knee collect: ") and lines[0].endswith(".")
    assert "Traceback" not in r.stderr


def test_match_finds_the_server_by_name_and_again_after_a_restart():
    marker = "tts_knee_fake_server_42"
    code = "import time; time.sleep(60)"

    def server() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code, marker])

    first = server()
    try:
        with spawn(
            ["tts_knee.collectors", "--port", "0", "--interval", INTERVAL, "--match", marker], env=CPU_ONLY
        ) as c:

            def watched() -> int | None:
                latest = get_json(f"{c.url}/samples?since=0")["samples"][-1:]
                return latest[0]["proc"]["pid"] if latest and latest[0]["proc"] else None

            assert wait_for(lambda: watched() == first.pid)  # not the collector itself
            first.kill()
            first.wait(5)
            second = server()
            try:
                assert wait_for(lambda: watched() == second.pid)
            finally:
                second.kill()
                second.wait(5)
    finally:
        first.kill()
        first.wait(5)
