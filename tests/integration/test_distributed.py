"""Headless distributed runs: a real Locust master and real worker processes."""

import json
import signal
import subprocess
import time

import pytest

from procs import LOCUST, LOCUSTFILE, finish, free_port, locust_count, master, read_jsonl, spawn, worker
from rundirs import assert_declared


def relative_corpus(tmp_path):
    """A corpus named by a relative path: it exists where the master runs, not in the
    directory this returns, where a worker started there will not find it."""
    (tmp_path / "texts.txt").write_text("hello there\nhow are you\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return ("--texts", "texts.txt"), elsewhere


@pytest.fixture(scope="module")
def sim():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "40", "--per-char-ms", "0"]) as p:
        yield p


def test_master_and_two_workers_write_one_run_directory(tmp_path, sim):
    port = free_port()
    m = master(tmp_path, sim.url, port)
    w = [worker(tmp_path, port, n) for n in (1, 2)]
    finish(m, *w, run_dir=tmp_path / "run")
    log = (tmp_path / "master.log").read_text()
    assert m.returncode == 0, log
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust") > 50
    workers = {r["worker"] for r in records}
    assert len(workers) == 2
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert {x["id"] for x in info["workers"]} == workers
    assert all(x["final"] and x["lost_at"] is None and abs(x["offset_s"]) < 0.05 for x in info["workers"])
    assert sum(x["records"] for x in info["workers"]) == len(records)
    assert [(s["step"], s["concurrency"]) for s in info["steps"]] == [(1, 1), (2, 2), (3, 4)]
    for s in info["steps"]:
        mine = [r for r in records if r["step"] == s["step"]]
        assert mine and all(r["concurrency"] == s["concurrency"] for r in mine)
    assert len({r["req_id"] for r in records}) == len(records)
    # every worker's own CPU and memory, from Locust's heartbeats, as role=client samples
    samples = read_jsonl(tmp_path / "run" / "resources.jsonl")
    hb = [s for s in samples if s.get("source") == "locust-heartbeat"]
    assert {s["host"] for s in hb} == workers
    assert all(s["role"] == "client" and s["proc"]["rss_bytes"] > 0 and s["proc"]["cpu_percent"] >= 0 for s in hb)
    # ... from the first step on (Locust's own 10 s between readings left a short run without one)
    first = info["steps"][0]
    assert {s["host"] for s in hb if first["start"] <= s["ts"] <= first["end"]} == workers
    assert not list(tmp_path.glob("runs/spool/*"))


@pytest.mark.alone  # timed to the millisecond: make test's second pass, the machine to itself
def test_skewed_worker_clock_is_corrected(tmp_path, sim):
    port = free_port()
    m = master(tmp_path, sim.url, port, steps="1,2", step_time="3")
    w1 = worker(tmp_path, port, 1)
    w2 = worker(tmp_path, port, 2, env={"TTS_KNEE_CLOCK_SKEW_S": "37.5"})
    finish(m, w1, w2, run_dir=tmp_path / "run")
    assert m.returncode == 0
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    offsets = sorted(x["offset_s"] for x in info["workers"])
    assert offsets[0] == pytest.approx(0, abs=0.02) and offsets[1] == pytest.approx(37.5, abs=0.02)
    steps = {s["step"]: s for s in info["steps"]}
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len({r["worker"] for r in records}) == 2
    for r in records:  # on the master's clock, inside the step it names
        assert steps[r["step"]]["start"] - 0.05 <= r["t0"] <= r["t2"] <= steps[r["step"]]["end"] + 1.0


def _workers_recorded(tmp_path) -> set:
    path = tmp_path / "run" / "requests.jsonl"
    if not path.exists():
        return set()
    return {json.loads(line)["worker"] for line in path.read_text().splitlines()[:-1] if line}


def test_a_worker_killed_mid_run_keeps_its_earlier_records(tmp_path, sim):
    port = free_port()
    m = master(tmp_path, sim.url, port, steps="2,4,4", step_time="5")
    w1 = worker(tmp_path, port, 1)
    w2 = worker(tmp_path, port, 2)
    # Killed once the master holds records from both workers (a fixed sleep killed it before
    # its first batch on a loaded host; a loaded host can take many seconds to start the three),
    # which is well before the 15 s run ends: the workers ship their records every second.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_workers_recorded(tmp_path)) < 2:
        time.sleep(0.2)
    assert len(_workers_recorded(tmp_path)) == 2, (tmp_path / "master.log").read_text()
    w2.send_signal(signal.SIGKILL)
    finish(m, w1, run_dir=tmp_path / "run")
    log = (tmp_path / "master.log").read_text()
    assert m.returncode == 0, log
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    lost = [x for x in info["workers"] if x["lost_at"] is not None]
    assert len(lost) == 1 and not lost[0]["final"] and lost[0]["records"] > 0
    assert info["steps"][0]["start"] < lost[0]["lost_at"] < info["end"]
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert sum(1 for r in records if r["worker"] == lost[0]["id"]) == lost[0]["records"]
    assert any(r["step"] == 3 for r in records)  # the run went on with the other worker
    assert "went away mid-run" in log


def test_workers_spool_what_a_dead_master_never_acknowledged(tmp_path, sim):
    port = free_port()
    m = master(tmp_path, sim.url, port, workers=1, steps="2", step_time="30")
    w = worker(tmp_path, port, 1)
    # the master killed once it has written some of the worker's records (a loaded machine can take
    # seconds to start the two), so that some are acknowledged and the rest are made after it died
    requests, deadline = tmp_path / "run" / "requests.jsonl", time.monotonic() + 60
    while not (requests.exists() and requests.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    m.send_signal(signal.SIGKILL)
    m.wait(10)
    time.sleep(1.5)  # records made after the master died
    w.send_signal(signal.SIGTERM)
    finish(w)
    log = (tmp_path / "worker1.log").read_text()
    spooled = list(tmp_path.glob("runs/spool/*.jsonl"))
    assert len(spooled) == 1, log
    assert str(spooled[0].resolve()) in log
    kept = read_jsonl(spooled[0])
    written = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert kept
    assert not {r["req_id"] for r in kept} & {r["req_id"] for r in written}


def test_processes_flag_runs_forked_workers(tmp_path, sim):
    proc = subprocess.run(
        [
            LOCUST,
            "-f",
            LOCUSTFILE,
            "--processes",
            "2",
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "1,2",
            "--step-time",
            "3",
            "--run-dir",
            str(tmp_path / "run"),
            "--json-file",
            str(tmp_path / "locust"),
        ],
        cwd=tmp_path,
        timeout=60,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout
    assert_declared(tmp_path / "run")
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust") > 20
    assert len({r["worker"] for r in records}) == 2


def test_a_worker_that_cannot_use_the_options_leaves_with_one_sentence(tmp_path, sim):
    corpus, elsewhere = relative_corpus(tmp_path)
    port = free_port()
    m = master(tmp_path, sim.url, port, steps="1,2", extra=corpus)
    w1 = worker(tmp_path, port, 1)
    w2 = worker(elsewhere, port, 2)
    finish(m, w1, w2, run_dir=tmp_path / "run")
    log2 = (elsewhere / "worker2.log").read_text()
    assert "Traceback" not in log2
    errors = [line for line in log2.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1 and "corpus file texts.txt does not exist" in errors[0]
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert records and len({r["worker"] for r in records}) == 1
    assert {r["text_id"] for r in records} <= {"texts:1", "texts:2"}


def test_a_master_whose_only_worker_cannot_run_fails_with_its_reason(tmp_path, sim):
    corpus, elsewhere = relative_corpus(tmp_path)
    port = free_port()
    m = master(tmp_path, sim.url, port, workers=1, steps="1", extra=corpus)
    w = worker(elsewhere, port, 1)
    finish(m, w, run_dir=tmp_path / "run")
    log = (tmp_path / "master.log").read_text()
    assert m.returncode == 2, log
    assert "Traceback" not in log
    assert "corpus file texts.txt does not exist" in json.loads((tmp_path / "run" / "run.json").read_text())["error"]
