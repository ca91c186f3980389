"""Start the project's servers as real processes for tests.

Every server tts-knee ships (the simulator, the collector, the piper launcher, the dashboard's
live view) prints one line ``listening on http://HOST:PORT`` to stdout once it accepts
connections, so a test can bind port 0 and learn the real port.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on (http://\S+)")


class Proc:
    """A running server process; ``url`` is its base URL, ``lines`` everything it printed."""

    def __init__(self, popen: subprocess.Popen, url: str, lines: list[str]):
        self.popen = popen
        self.url = url
        self.lines = lines

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


def _pump(stream, lines: list[str], found: threading.Event, box: list[str]) -> None:
    for line in stream:
        lines.append(line)
        if not box:
            m = LISTENING.search(line)
            if m:
                box.append(m.group(1))
                found.set()
    found.set()


@contextlib.contextmanager
def spawn(args: list[str], env: dict | None = None, timeout: float = 60, cwd: Path = ROOT,
          prefix: tuple[str, ...] = ()):
    """Run ``python -m <args>`` (after ``prefix``, e.g. ``ip netns exec NS``) and yield a
    :class:`Proc` once it is listening."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    popen = subprocess.Popen(
        [*prefix, sys.executable, "-m", *args], cwd=cwd, env=full_env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    box: list[str] = []
    found = threading.Event()
    threading.Thread(target=_pump, args=(popen.stdout, lines, found, box), daemon=True).start()
    deadline = time.monotonic() + timeout
    while not box and popen.poll() is None and time.monotonic() < deadline:
        found.wait(0.05)
    proc = Proc(popen, box[0] if box else "", lines)
    try:
        if not box:
            proc.stop(signal.SIGKILL)
            raise RuntimeError(f"{' '.join(args)} did not start listening:\n{proc.output()}")
        yield proc
    finally:
        proc.stop()


def locust(args: list[str], timeout: float = 120, env: dict | None = None, cwd: Path = ROOT):
    """Run ``locust -f locustfiles/tts.py`` headless with ``args``; returns the CompletedProcess
    (stdout and stderr together in ``.stdout``)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    cmd = [str(Path(sys.executable).with_name("locust")), "-f", str(ROOT / "locustfiles" / "tts.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=full_env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    import json
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def free_port() -> int:
    """A loopback port nothing listens on right now (for servers that cannot take port 0)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
