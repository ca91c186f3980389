"""The whole story in one command: a TTS target, a collector, a stepped sweep, the report.

Run it (``make demo`` does, with ``TARGET=piper`` or ``TARGET=sim``)::

    python -m tts_knee.testbed.demo --target piper            # the real neural voice on CPU
    python -m tts_knee.testbed.demo --target sim              # the simulator: 4 slots, knee at 8
    python -m tts_knee.testbed.demo --target piper --steps 1,2 --step-time 5

It starts the target (``python -m tts_knee.testbed.piper`` or ``tts-knee sim``) and a
collector watching it (``tts-knee collect --pid <target>``), runs a headless Locust sweep
into ``runs/demo-<UTC timestamp>/`` (Locust's full log in ``locust.log`` there, the target's
and the collector's in ``target.log`` and ``collector.log``), stops them, then runs
``tts-knee report`` on the run, which prints the step table, the knee, the diagnosis and
the recommendation. It prints, one line each, what it started where and each step as it
begins, and ends with the report's path and how to open the live view::

    demo: piper listening on http://127.0.0.1:41233  [0:00]
    demo: step 1/4: concurrency 1  [0:01]
    ...
    knee: 2 (methods agreeing: ...)
    ...
    demo: open it: file:///.../runs/demo-20261129T133002Z/report.html

Everything it starts runs in its own process group and is stopped (SIGTERM, then SIGKILL after
``STOP_TIMEOUT_S``) on success, on failure, and on Ctrl-C or SIGTERM. Exit status 0 on
success; otherwise one sentence on stderr and 1 (a step failed), 2 (a bad flag or a busy
port), 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tts_knee.testbed.args import Failure, Parser, bindable_port, port, positive

__all__ = ["main"]

PROG = "python -m tts_knee.testbed.demo"
ROOT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on (http://\S+)")
HOST = "127.0.0.1"
STOP_TIMEOUT_S = 10.0  # SIGTERM → SIGKILL
TARGET_START_TIMEOUT_S = 180.0
COLLECTOR_START_TIMEOUT_S = 30.0
SWEEP_GRACE_S = 180.0  # beyond the steps' own time: start-up, the last requests, the flush
DASHBOARD_TIMEOUT_S = 120.0
TAIL_LINES = 8  # of a child's log, quoted when it fails
PR_SET_PDEATHSIG = 1
POLL_INTERVAL_S = 0.2  # how often the sweep checks that the servers still run
ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')
# Locust's log lines worth showing while the sweep runs (all of them go to locust.log).
LOCUST_LINE = re.compile(r"^\[[^\]]+\] [^/]+/(?P<level>[A-Z]+)/(?P<logger>[\w.]+): (?P<msg>.*)$")
SHOWN_INFO = re.compile(r"^step \d+(/\d+)?: (concurrency \d+|[\d.]+ requests per second)|^run finished")


@dataclass(frozen=True)
class Target:
    """A server the demo can aim at: how to start it and how Locust talks to it."""

    label: str  # a short name
    about: str  # what it is, said once at start
    module: list[str]  # python -m <module ...>
    tts_api: str
    steps: str
    step_time_s: float


# piper on 2 cores saturates at about 2 concurrent requests; 4 steps of 20 s keep the demo
# to about two minutes. The simulator's 4 slots put the knee at 8.
TARGETS = {
    "piper": Target("piper", "the joe-us neural voice on CPU", ["tts_knee.testbed.piper"], "piper", "1,2,4,8", 20.0),
    "sim": Target(
        "the simulator",
        "4 slots, so the knee is at 8",
        ["tts_knee.testbed.sim", "--slots", "4", "--base-ms", "100", "--per-char-ms", "1", "--seed", "1"],
        "openai",
        "1,2,4,8,16",
        10.0,
    ),
}


class _Stop(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _steps(text: str) -> str:
    parts = text.split(",")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected concurrency levels like 1,2,4,8, got {text!r}")
    return ",".join(str(int(p)) for p in parts)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Start a TTS target and a collector, sweep it, report.")
    p.add_argument(
        "--target",
        choices=sorted(TARGETS),
        default="piper",
        help="piper: the real voice on CPU (default); sim: the simulator",
    )
    p.add_argument("--steps", type=_steps, help="concurrency levels (default: piper 1,2,4,8; sim 1,2,4,8,16)")
    p.add_argument("--step-time", type=positive, help="seconds per step (default: piper 20; sim 10)")
    p.add_argument("--target-port", type=port, default=0, help="port for the target (default 0: a free one)")
    p.add_argument("--collector-port", type=port, default=0, help="port for the collector (default 0: a free one)")
    p.add_argument("--run-dir", type=Path, help="run directory (default runs/demo-<UTC timestamp>)")
    return p


def _in_own_group() -> None:
    """In the child: its own process group (we stop it and everything it starts together;
    a Ctrl-C in the terminal reaches only us), and SIGTERM if we die without cleaning up."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Child:
    """One process the demo started, in its own process group, its stderr in ``log``."""

    def __init__(self, name: str, cmd: list[str], log: Path, on_line=None):
        self.name = name
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 - the process's log for its life, closed by stop()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.popen = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log_file if on_line is None else subprocess.STDOUT,
            text=True,
            errors="replace",
            preexec_fn=_in_own_group,
        )
        self.url: str | None = None
        self._ready = threading.Event()
        self._on_line = on_line
        self._pump = threading.Thread(target=self._read, daemon=True, name=f"{name}-stdout")
        self._pump.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        assert self.popen.stdout is not None  # stdout=PIPE
        for line in self.popen.stdout:
            try:
                self._log_file.write(line.encode())
                self._log_file.flush()
            except ValueError:  # closed by stop(): a straggler's last words
                pass
            if self.url is None:
                m = LISTENING.search(line)
                if m:
                    self.url = m.group(1)
                    self._ready.set()
            if self._on_line is not None:
                self._on_line(line.rstrip("\n"))
        self._ready.set()

    def wait_listening(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if time.monotonic() > deadline:
                raise Failure(f"{self.name} did not start listening within {timeout_s:g} s{self.last_lines()}")
        if self.url is None:
            self.popen.wait()
            raise Failure(f"{self.name} exited with status {self.popen.returncode} before listening{self.last_lines()}")
        return self.url

    def wait(self, timeout_s: float, alongside: list[Child]) -> int:
        """Its exit status; fail if it takes longer than ``timeout_s`` or if one of the
        ``alongside`` processes (the servers it needs) exits first."""
        deadline = time.monotonic() + timeout_s
        status = None
        while status is None:
            try:
                status = self.popen.wait(POLL_INTERVAL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            for other in alongside:
                if other.popen.poll() is not None:
                    raise Failure(
                        f"{other.name} exited with status {other.popen.returncode} "
                        f"while {self.name} ran{other.last_lines()}"
                    )
            if time.monotonic() > deadline:
                raise Failure(f"{self.name} did not finish within {timeout_s:g} s; see {_shown(self.log)}.")
        self._pump.join(2)  # its last lines
        return status

    def last_lines(self) -> str:
        self._pump.join(0.5)
        self._log_file.flush()
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        tail = [line for line in text.splitlines() if line.strip() and not ACCESS_LINE.search(line)][-TAIL_LINES:]
        return "; its last lines:\n" + "\n".join(f"  {line}" for line in tail) if tail else ""

    def stop(self) -> None:
        """SIGTERM to the process (it passes it on), then SIGKILL to whatever is left of its
        group after STOP_TIMEOUT_S."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + (STOP_TIMEOUT_S if self.popen.poll() is None else 2.0)
        while _group_alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            self.popen.poll()
        if _group_alive(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()
        self._pump.join(2)
        self._log_file.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Demo:
    """One demo run: the children it started, in start order, and where it writes."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.target = TARGETS[args.target]
        self.steps = args.steps or self.target.steps
        self.step_time_s = args.step_time or self.target.step_time_s
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = (args.run_dir or ROOT / "runs" / f"demo-{stamp}").resolve()
        self.children: list[Child] = []
        self.phase = "while starting"
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        print(f"demo: {message}", flush=True)

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.started)
        return f"{s // 60}:{s % 60:02d}"

    def start(self, name: str, cmd: list[str], log: str, on_line=None) -> Child:
        child = Child(name, cmd, self.run_dir / log, on_line)
        self.children.append(child)
        return child

    def live_view(self) -> str:
        return (
            f"{_shown(Path(sys.executable).with_name('tts-knee'))} report {_shown(self.run_dir)} --serve "
            f"(then open http://127.0.0.1:8090)"
        )

    def stop_all(self) -> None:
        while self.children:  # the last started first: locust, the collector, the target
            self.children[-1].stop()
            self.children.pop()

    def run(self) -> None:
        if (self.run_dir / "run.json").exists() or (self.run_dir / "requests.jsonl").exists():
            raise Failure(f"{_shown(self.run_dir)} already holds a run; pick another --run-dir.", 2)
        locust = Path(sys.executable).with_name("locust")
        if not locust.exists():
            raise Failure(f"{locust} is missing; run `make install`.", 2)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise Failure(
                f"cannot create the run directory {_shown(self.run_dir)} "
                f"({err.strerror or err}); pick another with --run-dir.",
                2,
            ) from None
        n_steps = len(self.steps.split(","))
        self.say(f"run directory {_shown(self.run_dir)}; steps {self.steps}, {self.step_time_s:g} s each")

        self.phase = f"while starting {self.target.label}"
        target = self.start(
            self.target.label,
            [sys.executable, "-m", *self.target.module, "--port", str(self.args.target_port)],
            "target.log",
        )
        self.say(f"starting {self.target.label}, {self.target.about} (pid {target.pid}) …")
        target_url = target.wait_listening(TARGET_START_TIMEOUT_S)
        self.say(f"{self.target.label} listening on {target_url}  [{self.elapsed()}]")

        self.phase = "while starting the collector"
        collector = self.start(
            "the collector",
            [
                sys.executable,
                "-m",
                "tts_knee.collectors",
                "--port",
                str(self.args.collector_port),
                "--pid",
                str(target.pid),
            ],
            "collector.log",
        )
        collector_url = collector.wait_listening(COLLECTOR_START_TIMEOUT_S)
        self.say(f"collector watching pid {target.pid} listening on {collector_url}")

        self.phase = "during the sweep"
        self.sweep(locust, target_url, collector_url, n_steps)
        self.stop_all()  # frees the CPU for the dashboard

        self.phase = "while building the report"
        self.dashboard()

    def sweep(self, locust: Path, target_url: str, collector_url: str, n_steps: int) -> None:
        cmd = [
            str(locust),
            "-f",
            str(ROOT / "locustfiles" / "tts.py"),
            "--headless",
            "--only-summary",
            "--exit-code-on-error",
            "0",
            "-H",
            target_url,
            "--tts-api",
            self.target.tts_api,
            "--texts",
            str(ROOT / "configs" / "texts" / "english.jsonl"),
            "--steps",
            self.steps,
            "--step-time",
            f"{self.step_time_s:g}",
            "--run-dir",
            str(self.run_dir),
            "--collector",
            collector_url,
        ]
        errors: list[str] = []

        def show(line: str) -> None:
            m = LOCUST_LINE.match(line)
            if not m:
                return  # the stats tables: they stay in locust.log
            level, msg = m["level"], m["msg"]
            if level in ("ERROR", "CRITICAL"):
                errors.append(msg)
            if level in ("WARNING", "ERROR", "CRITICAL"):
                self.say(f"locust {level.lower()}: {msg}")
            elif m["logger"].startswith("tts_knee") and SHOWN_INFO.search(msg):
                self.say(f"{msg}  [{self.elapsed()}]")

        self.say(
            f"sweeping with locust (full log in {_shown(self.run_dir / 'locust.log')}); "
            f"to follow it live, run in another terminal: {self.live_view()}"
        )
        servers = list(self.children)
        sweep = self.start("locust", cmd, "locust.log", on_line=show)
        status = sweep.wait(n_steps * self.step_time_s + SWEEP_GRACE_S, alongside=servers)
        if status != 0:
            why = errors[-1].rstrip(".") if errors else f"exit status {status}"
            raise Failure(f"the locust sweep failed ({why}); see {_shown(self.run_dir / 'locust.log')}.")

    def dashboard(self) -> None:
        self.say(f"sweep done [{self.elapsed()}]; target and collector stopped; building the report")
        print(flush=True)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tts_knee.dashboard", str(self.run_dir)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                timeout=DASHBOARD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise Failure(f"the dashboard did not finish within {DASHBOARD_TIMEOUT_S:g} s.") from None
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            why = lines[-1] if lines else f"exit status {done.returncode}"
            raise Failure(f"the dashboard could not build the report ({why}).")
        report = self.run_dir / "report.html"
        self.say(f"done in {self.elapsed()}")
        self.say(f"report: {_shown(report)}")
        self.say(f"open it: {report.as_uri()}")
        self.say(f"live view: {self.live_view()}")


SIGNAL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    demo: Demo | None = None
    stopping: list[int] = []

    def on_signal(signum, _frame):
        if not stopping:  # the first one stops the demo; more, during the clean-up, wait
            stopping.append(signum)
            raise _Stop(signum)

    for sig in SIGNAL_CODES:
        signal.signal(sig, on_signal)
    try:
        try:
            if args.target_port and args.target_port == args.collector_port:
                raise Failure(
                    "--target-port and --collector-port are the same; pick two ports (0 picks a free one).", 2
                )
            for port, flag in ((args.target_port, "--target-port"), (args.collector_port, "--collector-port")):
                if port:
                    bindable_port(HOST, port, flag)
            demo = Demo(args)
            demo.run()
            return 0
        finally:
            if demo is not None:
                stopping.append(0)  # no more _Stop while cleaning up
                demo.stop_all()
    except Failure as failure:
        print(f"{PROG}: {failure}", file=sys.stderr, flush=True)
        return failure.code
    except _Stop as stop:
        name = signal.Signals(stop.signum).name
        where = f" {demo.phase}" if demo is not None else ""
        print(f"{PROG}: stopped by {name}{where}; everything it started has been stopped.", file=sys.stderr, flush=True)
        return SIGNAL_CODES[signal.Signals(stop.signum)]


if __name__ == "__main__":
    sys.exit(main())
