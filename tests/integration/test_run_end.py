"""The run's end: what is in flight when a run stops is waited for up to --drain-time, recorded when
it finishes, and recorded as a failed attempt with error cut_by_run_end (and what had arrived)
when it does not; open and closed loop, on one node and with a worker. Locust's request count
still equals the lines of requests.jsonl."""
import json

import pytest

from procs import dashboard, finish, free_port, locust, locust_count, master, read_jsonl, spawn, worker

SERVICE_MS = 3000


@pytest.fixture(scope="module")
def slow_sim():
    """Plenty of slots, each request 3 s: whatever is sent in the last 3 s is in flight at the end."""
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "64", "--base-ms", str(SERVICE_MS), "--per-char-ms",
                "0"]) as p:
        yield p


def check_records(run_dir, json_file, sent):
    records = read_jsonl(run_dir / "requests.jsonl")
    assert len(records) == locust_count(json_file) == sent
    cut = [r for r in records if r["error"] == "cut_by_run_end"]
    assert all(r["ok"] or r in cut for r in records)
    for r in cut:   # what had arrived: the answer had not, in 3 s a request
        assert r["final"] and r["t0"] is not None and r["t2"] is None and r["bytes"] == 0
    info = json.loads((run_dir / "run.json").read_text())
    assert info["records"] == len(records) and info["cut_by_run_end"] == len(cut)
    return records, cut


def test_open_loop_requests_in_flight_at_the_end_finish_or_are_cut(tmp_path, slow_sim):
    # 10 req/s for 2 s: 20 arrivals, each 3 s long, all in flight when the step ends; a 2 s drain
    # lets the first ones finish, and the rest are cut
    run_dir = tmp_path / "run"
    proc = locust(["--headless", "-H", slow_sim.url, "--rates", "10", "--arrival", "constant", "--step-time", "2",
                   "--drain-time", "2", "--settle-time", "0", "--skip-preflight", "--run-dir", str(run_dir),
                   "--json-file", str(tmp_path / "locust")], timeout=120)
    assert "Traceback" not in proc.stdout
    assert proc.returncode == 1, proc.stdout[-3000:]   # Locust counts the cut attempts as failures
    records, cut = check_records(run_dir, tmp_path / "locust", 20)
    assert cut and len(records) > len(cut)   # some finished in the drain, the rest were cut
    assert "attempts were still in flight 2 s after the run stopped" in proc.stdout
    assert f"({len(cut)} cut by the run's end, error cut_by_run_end)" in proc.stdout
    res = dashboard(run_dir, "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["cut_by_run_end"] == len(cut) and s["steps"][0]["cut_by_run_end"] == len(cut)
    # left out of the figures: the step's requests are those that finished, none failed
    assert s["steps"][0]["requests"] == len(records) - len(cut) and s["steps"][0]["failed"] == 0
    assert "recorded as cut_by_run_end" in (run_dir / "report.html").read_text()


def test_closed_loop_requests_in_flight_at_the_end_are_waited_for(tmp_path, slow_sim):
    run_dir = tmp_path / "run"
    proc = locust(["--headless", "-H", slow_sim.url, "--steps", "4", "--step-time", "1", "--skip-preflight",
                   "--run-dir", str(run_dir), "--json-file", str(tmp_path / "locust")], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    records, cut = check_records(run_dir, tmp_path / "locust", 4)
    assert not cut and all(r["ok"] and r["wait_ms"] >= SERVICE_MS * 0.9 for r in records)


def test_a_worker_drains_before_its_final_batch(tmp_path, slow_sim):
    port = free_port()
    m = master(tmp_path, slow_sim.url, port, workers=1, steps="", step_time="2",
               extra=("--rates", "10", "--arrival", "constant", "--drain-time", "2", "--settle-time", "0", "--skip-preflight"))
    w = worker(tmp_path, port, 1)
    finish(m, w, run_dir=tmp_path / "run")
    records, cut = check_records(tmp_path / "run", tmp_path / "locust", 20)
    assert cut and len(records) > len(cut)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["workers"][0]["final"] and info["workers"][0]["records"] == 20
    assert "attempts were still in flight" in (tmp_path / "worker1.log").read_text()
