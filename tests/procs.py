"""Start the project's servers and commands as real processes for tests.

Every server tts-knee ships (the simulator, the collector, the piper launcher, the dashboard's
live view) prints one line ``listening on http://HOST:PORT`` to stdout once it accepts
connections (``grpc://`` for a gRPC server; the simulator one per protocol it serves), so a test
can bind port 0 and learn the real port. Locust runs (headless, or a
master with its workers) and the dashboard run as the user runs them; every run directory they
write is held to the run format's declarations (:func:`rundirs.assert_declared`) before the
test sees it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rundirs import assert_declared

ROOT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on ((?:https?|grpcs?)://\S+)")
LOCUST = str(Path(sys.executable).with_name("locust"))
LOCUSTFILE = str(ROOT / "locustfiles" / "tts.py")


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

    def listening(self, scheme: str, timeout: float = 10) -> str:
        """The URL of the ``listening on SCHEME://…`` line (the simulator prints one per protocol)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = LISTENING.search(line)
                if m and m.group(1).startswith(f"{scheme}://"):
                    return m.group(1)
            time.sleep(0.02)
        raise RuntimeError(f"no {scheme}:// listening line:\n{self.output()}")

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
def spawn(
    args: list[str],
    env: dict | None = None,
    timeout: float = 60,
    cwd: Path = ROOT,
    prefix: tuple[str, ...] = (),
    program: tuple[str, ...] | None = None,
):
    """Run ``python -m <args>`` (or ``program`` with ``args``; after ``prefix``, e.g. ``ip netns
    exec NS``) and yield a :class:`Proc` once it is listening."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    popen = subprocess.Popen(
        [*prefix, *(program or (sys.executable, "-m")), *args],
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
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


def _run_dir(args) -> Path | None:
    """The ``--run-dir`` among Locust arguments, if any."""
    args = [str(a) for a in args]
    for i, arg in enumerate(args):
        if arg == "--run-dir" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--run-dir="):
            return Path(arg.split("=", 1)[1])
    return None


def locust(args: list[str], timeout: float = 120, env: dict | None = None, cwd: Path = ROOT):
    """Run ``locust -f locustfiles/tts.py`` headless with ``args``; returns the CompletedProcess
    (stdout and stderr together in ``.stdout``). The run directory it wrote is held to the format."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    done = subprocess.run(
        [LOCUST, "-f", LOCUSTFILE, *args],
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
    )
    run_dir = _run_dir(args)
    if run_dir is not None:
        assert_declared(Path(cwd) / run_dir)
    return done


def start_locust(args, log: Path, env=None, cwd=None, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start ``locust -f locustfiles/tts.py`` with ``args`` (after ``prefix``), its output in
    ``log``, in ``cwd`` (default: the log's folder)."""
    return subprocess.Popen(
        [*prefix, LOCUST, "-f", LOCUSTFILE, *args],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=cwd or log.parent,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
    )


def master(tmp_path, host, port, workers=2, steps="1,2,4", step_time="3", extra=()) -> subprocess.Popen:
    """A headless master writing ``tmp_path/run`` (and Locust's ``tmp_path/locust.json``)."""
    return start_locust(
        [
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            str(workers),
            "--headless",
            "-H",
            host,
            "--steps",
            steps,
            "--step-time",
            step_time,
            "--run-dir",
            str(tmp_path / "run"),
            "--json-file",
            str(tmp_path / "locust"),
            *extra,
        ],
        tmp_path / "master.log",
    )


def worker(where, port, n, env=None) -> subprocess.Popen:
    """A worker whose working directory (and log) is ``where``."""
    return start_locust(
        ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], where / f"worker{n}.log", env=env
    )


def finish(*procs, timeout=60, run_dir: Path | None = None) -> None:
    """Wait for each process (killing the rest of the way on a timeout); then hold ``run_dir``,
    when given, to the format."""
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    if run_dir is not None:
        assert_declared(run_dir)


def locust_count(json_file: Path) -> int:
    """Locust's own request count in the report of ``--json-file`` (``json_file`` without its
    ``.json``, as given to Locust)."""
    return sum(e["num_requests"] for e in json.loads(Path(f"{json_file}.json").read_text()))


def dashboard(*args, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``tts-knee report`` with ``args``; every run directory among them (its summary.json
    too, once written) is held to the format."""
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.dashboard", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for arg in args:
        path = Path(cwd) / str(arg)
        if (path / "run.json").is_file() or (path / "requests.jsonl").is_file():
            assert_declared(path)
    return done


def judge_after(run: Path, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``tts-knee judge RUN args``; the run directory (once judged) is held to the format."""
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee", "judge", str(run), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode == 0:
        assert_declared(run)
    return done


def http_get(url: str, token: str | None = None, timeout: float = 30) -> tuple[int, bytes]:
    """(status, body) of a GET; an HTTP error status is an answer, not an exception."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str, token: str | None = None):
    """The JSON body of a GET that must answer 200."""
    status, body = http_get(url, token)
    assert status == 200, (url, status, body[:300])
    return json.loads(body)


@contextlib.contextmanager
def busy_port():
    """A loopback port something listens on for the duration (to test "port in use")."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@contextlib.contextmanager
def scraping(url: str, every_s: float = 0.5):
    """GET ``url`` every ``every_s`` in a thread while the block runs, as Prometheus would scrape
    it; yields a list that holds each answer's text, in order (the last: the last answered)."""
    texts: list[str] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(every_s):
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    texts.append(resp.read().decode())
            except OSError:
                pass

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield texts
    finally:
        stop.set()
        thread.join(10)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def free_port() -> int:
    """A loopback port nothing listens on right now (for servers that cannot take port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain_parser():
    """tts-knee's options on a plain argparse parser, without importing Locust (which would
    monkey-patch this process with gevent): their groups drop the keywords only Locust's parser
    takes (``is_secret``, ``env_var`` …)."""
    import argparse

    from tts_knee.locustfiles import settings

    parser = argparse.ArgumentParser()
    make_group = parser.add_argument_group

    def group(*args, **kw):
        g = make_group(*args, **kw)
        add = g.add_argument
        g.add_argument = lambda *a, **k: add(
            *a, **{x: v for x, v in k.items() if x not in ("is_secret", "include_in_web_ui", "is_required", "env_var")}
        )
        return g

    parser.add_argument_group = group
    settings.add_arguments(parser)
    return parser


def option_defaults() -> dict:
    """tts-knee's options as an empty command line leaves them (``dest -> value``)."""
    return vars(plain_parser().parse_args([]))
