"""Collectors during real Locust runs: one that dies and comes back, one that never answers."""

import json
import subprocess
import time

import pytest

from procs import LOCUST, LOCUSTFILE, free_port, read_jsonl, spawn
from rundirs import assert_declared


@pytest.fixture(scope="module")
def sim():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "40", "--per-char-ms", "0"]) as p:
        yield p


def start_locust(tmp_path, sim, *extra):
    return subprocess.Popen(
        [
            LOCUST,
            "-f",
            LOCUSTFILE,
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "1,2,4",
            "--step-time",
            "4",
            "--run-dir",
            str(tmp_path / "run"),
            *extra,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_collector_killed_and_restarted_mid_run_leaves_a_gap(tmp_path, sim):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["tts_knee.collectors", "--port", str(port), "--interval", "0.2", "--pid", str(sim.pid)]
    with spawn(args) as first:
        run = start_locust(tmp_path, sim, "--collector", url)
        time.sleep(4)
        first.stop(9)  # SIGKILL: no goodbye
    time.sleep(2.5)
    with spawn(args):
        out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out
    assert "Traceback" not in out
    assert_declared(tmp_path / "run")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    col = info["collectors"][0]
    assert col["url"] == url and col["restarts"] == 1
    assert col["gaps"] and all(b - a >= 1.5 for a, b in col["gaps"])
    server = [s for s in read_jsonl(tmp_path / "run" / "resources.jsonl") if s["role"] == "server"]
    gap_start, gap_end = col["gaps"][0]
    assert any(s["ts"] < gap_start for s in server) and any(s["ts"] > gap_end for s in server)
    assert all(s["proc"]["pid"] == sim.pid for s in server if s["proc"])
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert {r["concurrency"] for r in records} == {1, 2, 4}  # the load run never noticed


def test_an_unreachable_collector_is_one_warning(tmp_path, sim, refused_port):
    url = f"http://127.0.0.1:{refused_port}"
    run = start_locust(tmp_path, sim, "--collector", url, "--step-time", "2")
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out
    assert_declared(tmp_path / "run")
    warnings = [line for line in out.splitlines() if "/WARNING/" in line and url in line]
    assert len(warnings) == 1, out
    assert read_jsonl(tmp_path / "run" / "requests.jsonl")


def test_require_collectors_ends_the_run(tmp_path, sim, refused_port):
    url = f"http://127.0.0.1:{refused_port}"
    run = start_locust(tmp_path, sim, "--collector", url, "--require-collectors")
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 2, out
    errors = [line for line in out.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1 and url in errors[0] and "--require-collectors" in errors[0]
    assert "Traceback" not in out
