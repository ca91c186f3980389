"""How a run ends and what it listens on: the web UI binds 127.0.0.1 unless told otherwise; each of
the ten mistakes a newcomer makes ends before Locust starts, in at most three lines with its
sentence last and exit status 2, and one found once it started ends with its sentence and
without Locust's empty closing tables; a server that crashes under a spike ends the run non-zero even
under ``--exit-code-on-error 0``; and the manual lists every exit status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from procs import ROOT, free_port, spawn
from tts_knee.runformat import exits

TTS_KNEE = str(Path(sys.executable).with_name("tts-knee"))


@pytest.fixture(scope="module")
def sim():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "5", "--per-char-ms", "0"]) as p:
        yield p


def _listening(pid: int, port: int, timeout: float = 60) -> list[str]:
    """The addresses process ``pid`` listens on at ``port``, once it does (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [
            c.laddr.ip
            for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        ]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} within {timeout} s")


def test_the_web_ui_listens_on_loopback_only_unless_told(tmp_path, sim):
    port = free_port()
    log = tmp_path / "webui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [TTS_KNEE, "run", "-H", sim.url, "--web-port", str(port), "--run-dir", str(tmp_path / "run")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        assert _listening(proc.pid, port) == ["127.0.0.1"], log.read_text()
    finally:
        proc.kill()
        proc.wait(10)
    text = log.read_text()
    assert f"Starting web interface at http://127.0.0.1:{port}" in text, text
    assert "without --web-login" not in text


def _tts_knee_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TTS_KNEE, "run", "--headless", "--step-time", "1", "--run-dir", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _mistakes(tmp_path: Path, host: str) -> dict[str, tuple[list[str], str]]:
    """The ten mistakes of issue 45: (the run's arguments, what its sentence says)."""
    (tmp_path / "unsorted.jsonl").write_text('{"offset_s": 1, "text": "a"}\n{"offset_s": 0, "text": "b"}\n')
    (tmp_path / "notjson.jsonl").write_text("offset_s,text\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    steps = ["-H", host, "--steps", "1"]
    return {
        "trace unsorted": (["-H", host, "--trace", "unsorted.jsonl"], "is before line 1's 1"),
        "trace not JSON": (["-H", host, "--trace", "notjson.jsonl"], "line 1 is not JSON"),
        "trace empty": (["-H", host, "--trace", "empty.jsonl"], "empty.jsonl has no rows"),
        "bad --spike": ([*steps, "--spike", "3y"], "--spike takes FACTORxSECONDS"),
        "CA not PEM": ([*steps, "--tls-ca", "ca.pem"], "--tls-ca ca.pem: not a PEM file"),
        "unset ${VAR}": ([*steps, "--header", "X-Key: ${TTS_KNEE_TEST_UNSET}"], "is not set in the environment"),
        "unknown probe class": ([*steps, "--probe-texts", "nosuch"], "'nosuch', which is not a class of text"),
        "negative price": ([*steps, "--cost-per-hour", "-3"], "is not a price per hour > 0"),
        "bad --steps": (["-H", host, "--steps", "1,x"], "--steps must be comma-separated whole numbers"),
        "unreachable host": (["-H", "http://127.0.0.1:9", "--steps", "1"], "cannot reach http://127.0.0.1:9"),
    }


def test_ten_mistakes_end_before_locust_starts_in_three_lines_their_sentence_last(tmp_path, sim):
    for name, (args, sentence) in _mistakes(tmp_path, sim.url).items():
        where = tmp_path / re.sub(r"\W+", "-", name)
        where.mkdir()
        for f in tmp_path.glob("*.*"):
            (where / f.name).write_bytes(f.read_bytes())
        done = _tts_knee_run(*args, cwd=where)
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert done.returncode == exits.BAD_INPUT, (name, lines)
        assert len(lines) <= 3 and sentence in lines[-1] and "/ERROR/" in lines[-1], (name, lines)
        assert not any("Aggregated" in line or "Traceback" in line for line in lines), (name, lines)
    # the target's refusal is still recorded where the run would have been
    refused = json.loads((tmp_path / "unreachable-host" / "run" / "run.json").read_text())
    assert "cannot reach http://127.0.0.1:9" in refused["error"] and refused["preflight"]["ok"] is False


def test_a_run_that_fails_once_started_ends_with_its_sentence_and_no_empty_tables(tmp_path, sim):
    args = ["-H", sim.url, "--steps", "1", "--collector", "http://127.0.0.1:9", "--require-collectors"]
    done = _tts_knee_run(*args, cwd=tmp_path)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == exits.BAD_INPUT, lines
    assert "collector http://127.0.0.1:9 is unreachable and --require-collectors is set" in lines[-1], lines
    assert "Shutting down (exit code 2)" in lines[-2], lines  # Locust's closing tables: none
    assert not any("Response time percentiles" in line for line in lines), lines


def test_a_server_that_crashes_under_a_spike_fails_the_run_whatever_exit_code_on_error(tmp_path):
    sim_args = ["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "100", "--per-char-ms", "0"]
    with spawn([*sim_args, "--crash-above", "8"]) as crashing:
        args = ["-H", crashing.url, "--steps", "4", "--spike", "3x2", "--spike-at", "4", "--settle-time", "0"]
        done = _tts_knee_run(*args, "--exit-code-on-error", "0", cwd=tmp_path)
    assert done.returncode == exits.SERVER_CRASHED, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the server stopped answering during the" in json.loads((tmp_path / "run" / "run.json").read_text())["error"]


def test_the_manual_lists_every_exit_status():
    manual = (ROOT / "docs" / "ci.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", manual, re.M))
    assert rows == {str(st.code): st.name for st in exits.STATUSES}, rows
