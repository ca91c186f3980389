"""The Locust web UI: tts-knee's options are in its form, a run started from it writes the same
run directory, its "TTS steps" tab has the live step table, and the live report is served
from Locust's own app."""
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from procs import free_port, read_jsonl, spawn, start_locust
from rundirs import assert_declared

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def get(url: str, data: dict | None = None):
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=20) as r:
        return r.status, r.read().decode()


def finished(run_dir: Path, tries: int = 150) -> dict:
    """run.json once the run has ended (polled every 0.1 s), its directory held to the format."""
    info_path = run_dir / "run.json"
    for _ in range(tries):
        if info_path.exists() and json.loads(info_path.read_text())["end"]:
            break
        time.sleep(0.1)
    info = json.loads(info_path.read_text())
    assert info["end"], f"the run in {run_dir} did not finish by itself"
    assert_declared(run_dir)
    return info


def _dom(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=8000", "--dump-dom", url], capture_output=True, text=True, timeout=90)


@pytest.fixture
def webui(tmp_path):
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "2", "--base-ms", "30", "--per-char-ms", "0"]) as sim:
        port = free_port()
        proc = start_locust(["-H", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--steps", "1,2,4",
                             "--step-time", "30", "--run-dir", str(tmp_path / "run")], tmp_path / "locust.log")
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    get(url + "/")
                    break
                except OSError:
                    time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            proc.wait(20)


def test_a_run_started_from_the_web_ui(webui, tmp_path):
    status, page = get(webui + "/")
    assert status == 200
    for option in ("tts_api", "steps", "step_time", "retry_max_attempts", "collector", "run_dir",
                   "slo", "refine", "stop_past_knee", "repeat", "rates", "arrival", "max_inflight"):
        assert f'"{option}"' in page, option
    # Start with the form's values changed: two short steps instead of three long ones, and an SLO.
    status, body = get(webui + "/swarm", {"user_count": "1", "spawn_rate": "1", "steps": "1,2", "step_time": "2",
                                          "tts_api": "openai", "slo": "p50_ms<=5000", "stop_past_knee": "true"})
    assert json.loads(body)["success"]
    info = finished(tmp_path / "run")
    assert [(s["step"], s["concurrency"]) for s in info["steps"]] == [(1, 1), (2, 2)]
    # a p50 term: 2 s steps are too short for the 72 requests a p95 needs to be bounded above
    assert info["options"]["slo"] == "p50_ms<=5000" and info["options"]["stop_past_knee"] is True
    assert [v["pass"] for v in info["plan"]["verdicts"]] == [True, True]
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert records and {r["concurrency"] for r in records} == {1, 2}
    stats = json.loads(get(webui + "/stats/requests")[1])
    table = {t["key"]: t["data"] for t in stats["extended_stats"]}["tts-knee-steps"]
    assert [(row["step"], row["concurrency"]) for row in table] == [(1, 1), (2, 2)]
    assert [(row["phase"], row["slo"]) for row in table] == [("grid 1", "pass"), ("grid 1", "pass")]
    assert sum(row["requests"] for row in table) == sum(r["final"] for r in records)
    status, live = get(webui + "/tts-knee/")
    assert status == 200 and "plotly" in live.lower()
    if not CHROMIUM:
        pytest.skip("chromium is not installed: the live report and the steps tab were not rendered")
    res = _dom(webui + "/tts-knee/")
    assert "js-plotly-plot" in res.stdout and "Uncaught" not in res.stderr
    res = _dom(webui + "/?tab=tts-knee-steps")
    assert "TTS steps" in res.stdout and "Uncaught" not in res.stderr
    assert ">SLO<" in res.stdout and ">pass<" in res.stdout, res.stdout[-3000:]


def test_the_start_form_shows_the_step_plan_in_place_of_the_user_count(webui):
    status, page = get(webui + "/")
    assert status == 200 and "tts-knee-plan" in page
    if not CHROMIUM:
        pytest.skip("chromium is not installed: the start form was not rendered")
    res = _dom(webui + "/")
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]
    dom = res.stdout
    note = dom.split('id="tts-knee-plan"', 1)[1].split("</p>", 1)[0]
    assert "The steps drive this run: concurrency 1 → 2 → 4, 30 s per step." in note, note
    assert "Users and ramp-up come from the plan" in note
    for name in ("userCount", "spawnRate"):  # Locust's own fields are hidden, not shown as a disabled 0
        box = dom[:dom.index(f'name="{name}"')]
        assert 'style="display: none;"' in box[box.rindex("MuiFormControl-root"):], name


def test_the_plan_line_shows_the_default_plan_without_steps_or_step_time(tmp_path):
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "2", "--base-ms", "30", "--per-char-ms", "0"]) as sim:
        port = free_port()
        proc = start_locust(["-H", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port),
                             "--run-dir", str(tmp_path / "run")], tmp_path / "locust.log")
        try:
            for _ in range(200):
                try:
                    status, page = get(f"http://127.0.0.1:{port}/")
                    break
                except OSError:
                    time.sleep(0.1)
            assert status == 200 and "tts-knee-plan" in page
            if not CHROMIUM:
                pytest.skip("chromium is not installed: the start form was not rendered")
            res = _dom(f"http://127.0.0.1:{port}/")
        finally:
            proc.terminate()
            proc.wait(20)
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]
    note = res.stdout.split('id="tts-knee-plan"', 1)[1].split("</p>", 1)[0]
    assert "The steps drive this run: concurrency 1 → 2 → 4 → 8 → 16, 30 s per step." in note, note
    assert "?" not in note


def test_an_open_loop_run_started_from_the_web_ui(webui, tmp_path):
    # The form chooses rates instead of steps: the steps field emptied, the rates field filled.
    status, body = get(webui + "/swarm", {"user_count": "1", "spawn_rate": "1", "steps": "", "rates": "8",
                                          "arrival": "constant", "step_time": "2", "tts_api": "openai"})
    assert json.loads(body)["success"]
    info = finished(tmp_path / "run")
    assert [(s["step"], s["rate"]) for s in info["steps"]] == [(1, 8)]
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len(records) > 8 and all(r["scheduled"] is not None for r in records)
    stats = json.loads(get(webui + "/stats/requests")[1])
    table = {t["key"]: t["data"] for t in stats["extended_stats"]}["tts-knee-steps"]
    assert [row["concurrency"] for row in table] == ["8 req/s"]


def test_two_runs_in_one_distributed_web_ui_session(tmp_path):
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "20", "--per-char-ms", "0"]) as sim:
        port, mport = free_port(), free_port()
        master = start_locust(["--master", "-H", sim.url, "--master-bind-host", "127.0.0.1",
                               "--master-bind-port", str(mport), "--web-host", "127.0.0.1", "--web-port", str(port),
                               "--steps", "1,2", "--step-time", "2", "--run-dir", str(tmp_path / "run")],
                              tmp_path / "master.log")
        worker = start_locust(["--worker", "--master-host", "127.0.0.1", "--master-port", str(mport)],
                              tmp_path / "worker.log")
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    if json.loads(get(url + "/stats/requests")[1]).get("worker_count") == 1:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            for run in ("run", "run-2"):
                assert json.loads(get(url + "/swarm", {"user_count": "1", "spawn_rate": "1"})[1])["success"]
                finished(tmp_path / run)
        finally:
            master.terminate()
            worker.terminate()
            master.wait(20)
            worker.wait(20)
    for run in ("run", "run-2"):
        records = read_jsonl(tmp_path / run / "requests.jsonl")
        assert records and {r["concurrency"] for r in records} == {1, 2}, run
        workers = json.loads((tmp_path / run / "run.json").read_text())["workers"]
        assert workers and all(w["final"] for w in workers) and sum(w["records"] for w in workers) == len(records)
    assert "Traceback" not in (tmp_path / "worker.log").read_text()
    assert not list(tmp_path.glob("runs/spool/*"))
