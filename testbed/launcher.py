"""What the launchers of real servers share (:mod:`testbed.piper`, :mod:`testbed.triton`): the
server as a child process that dies with its launcher, the tail of what it printed, the wait
until it answers, and the lifecycle — SIGTERM or SIGINT passed on to the child and the launcher
exiting once it has, or exiting 1 with the child's last lines when it dies by itself."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
import time

from tts_knee.testbed.args import Failure

TAIL_LINES = 20  # of the child's output, quoted when it fails
POLL_INTERVAL_S = 0.2
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the launcher dies without passing a signal on (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """The server ``cmd`` as a child, named ``name`` in messages; its output is copied to stderr
    (less the lines ``quiet(line)`` says not to) and its last lines kept."""

    def __init__(self, name: str, cmd: list[str], env: dict | None = None, quiet=None):
        self.name = name
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._quiet = quiet
        self.popen = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            preexec_fn=_die_with_parent,
        )
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def _copy_output(self) -> None:
        assert self.popen.stdout is not None  # stdout=PIPE
        for line in self.popen.stdout:
            self.tail.append(line.rstrip("\n"))
            if self._quiet is None or not self._quiet(line):
                sys.stderr.write(line)
                sys.stderr.flush()

    def last_output(self) -> str:
        self._pump.join(1)  # let the last lines arrive
        return "\n".join(f"  {line}" for line in self.tail) or "  (nothing)"

    def wait_ready(self, ready, timeout_s: float, before: str, late: str) -> None:
        """Return once ``ready()`` is true; fail if the child dies first ("… exited with status
        N before ``before``") or ``timeout_s`` passes ("``late`` within T s")."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.popen.poll() is not None:
                raise Failure(
                    f"{self.name} exited with status {self.popen.returncode} before {before}; its last "
                    f"output:\n{self.last_output()}"
                )
            if time.monotonic() > deadline:
                raise Failure(f"{late} within {timeout_s:g} s; its last output:\n{self.last_output()}")
            if ready():
                return
            time.sleep(POLL_INTERVAL_S)


def serve(prog: str, start, announce) -> int:
    """A launcher's whole life: ``start()`` makes the :class:`Child` and waits for it (raising
    :class:`Failure`), ``announce(child)`` prints where it listens; then wait for it, passing
    SIGTERM and SIGINT on. The exit status: 0 once stopped, else the failure's, with its
    sentence on stderr."""
    stopping: list[int] = []
    box: list[Child] = []

    def forward(signum, _frame):
        stopping.append(signum)
        if box and box[0].popen.poll() is None:
            box[0].popen.send_signal(signum)
        elif not box:
            raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    try:
        try:
            start(box)
        except Failure:
            if box and box[0].popen.poll() is None:
                if stopping:  # told to stop while it was starting
                    box[0].popen.wait()
                    return 0
                box[0].popen.kill()
                box[0].popen.wait()
            if stopping:
                return 0
            raise
        child = box[0]
        announce(child)
        status = child.popen.wait()
        if stopping:
            return 0
        raise Failure(f"{child.name} exited unexpectedly with status {status}; its last output:\n{child.last_output()}")
    except Failure as failure:
        print(f"{prog}: {failure}", file=sys.stderr)
        return failure.code
