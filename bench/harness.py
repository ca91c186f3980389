"""What the benchmarks share: a simulator on a free loopback port, and a headless Locust run
with the CPU meter of bench/meter.py. Not a script itself."""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import psutil

from tts_knee.analysis.diagnosis import CLIENT_PROC_BUSY
from tts_knee.runformat.fields import NotRequired, TypedDict
from tts_knee.runformat.schema import Attempt

ROOT = Path(__file__).resolve().parent.parent
LOCUST = Path(sys.executable).with_name("locust")
_LISTENING = re.compile(r"listening on ((http|grpc)://\S+)")


class Record(Attempt):
    """A line of requests.jsonl as a benchmark's Locust run writes it: an attempt record, with
    (bench/named.py's users) the id its request gave the simulator."""

    sim_request_id: NotRequired[str | None]


class LocustRun(TypedDict):
    """What :func:`locust` returns: bench/meter.py's reading (each figure absent when the meter
    wrote none; ``fds``, ``rss_bytes`` and ``users`` at the window's end, None where not known),
    the run's attempt records (absent when it wrote none), Locust's exit status and output; and
    the figures per attempt that a benchmark adds."""

    cpu_s: NotRequired[float]
    user_s: NotRequired[float]
    sys_s: NotRequired[float]
    requests: NotRequired[int]
    wall_s: NotRequired[float]
    fds: NotRequired[int | None]
    rss_bytes: NotRequired[int | None]
    rss_at_start_bytes: NotRequired[int | None]
    users: NotRequired[int | None]
    start_unix: NotRequired[float]
    records: NotRequired[list[Record]]
    returncode: int
    output: str
    cpu_us_per_attempt: NotRequired[float]
    rps: NotRequired[float]


@contextlib.contextmanager
def simulator(
    *knobs: str, scheme: str = "http", urls: dict[str, str] | None = None
) -> Iterator[tuple[str, psutil.Process]]:
    """``tts-knee sim --port 0 KNOBS``; yields its base URL (``scheme`` grpc: the one
    ``--grpc-port`` serves) and its psutil.Process; ``urls`` gets each protocol's URL it
    listened on by then (HTTP's first)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tts_knee.testbed.sim", "--port", "0", *knobs],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        for _ in range(2):  # one line per protocol served, HTTP's first
            line = proc.stdout.readline()
            m = _LISTENING.search(line)
            if not m:
                raise RuntimeError(f"the simulator did not start: {line!r}")
            if urls is not None:
                urls[m.group(2)] = m.group(1)
            if m.group(2) == scheme:
                url = m.group(1)
                break
        else:
            raise RuntimeError(f"the simulator did not serve {scheme}")
        yield url, psutil.Process(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def locust(
    locustfile: str,
    args: list[str],
    warm_s: float,
    measure_s: float,
    timeout: float = 120,
    start_at: float | None = None,
) -> LocustRun:
    """Run ``locust -f LOCUSTFILE --headless ARGS`` with the meter on; returns the meter's
    reading ``{"cpu_s", "requests", "wall_s"}`` plus ``returncode`` and ``output``. With
    ``start_at`` (unix s) the meter's window starts then instead of ``warm_s`` after the test."""
    with tempfile.TemporaryDirectory(prefix="tts-knee-bench-") as tmp:
        out = Path(tmp) / "meter.json"
        env = dict(
            os.environ,
            BENCH_METER_OUT=str(out),
            BENCH_WARM_S=str(warm_s),
            BENCH_MEASURE_S=str(measure_s),
            PYTHONUNBUFFERED="1",
            **({} if start_at is None else {"BENCH_START_AT": repr(start_at)}),
        )
        proc = subprocess.run(
            [
                str(LOCUST),
                "-f",
                str(ROOT / locustfile),
                "--headless",
                "--only-summary",
                "--loglevel",
                "WARNING",
                *[a.replace("{tmp}", tmp) for a in args],
            ],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
        reading = json.loads(out.read_text()) if out.exists() else {}
        records = Path(tmp) / "run" / "requests.jsonl"
        if records.exists():
            reading["records"] = [json.loads(line) for line in records.read_text().splitlines() if line]
    return {**reading, "returncode": proc.returncode, "output": proc.stdout}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` as the dashboard and the live table take it:
    numpy's linear interpolation between the two nearest ranks (NaN for no values)."""
    return float(np.percentile(np.asarray(values, dtype=float), q * 100)) if len(values) else float("nan")


class ProcessFigures(TypedDict):
    """:func:`process_figures`' result."""

    users: int | None
    fds: int | None
    rss_mib: float | None
    kib_per_user: float | None
    process_cpu_percent: float | None
    client_bound: bool


def process_figures(reading: LocustRun) -> ProcessFigures:
    """What the meter saw of the Locust process at its window's end: its users, file descriptors,
    resident memory and what each user added to it, its CPU (% of one core) and whether
    tts-knee's diagnosis would call a Locust process that busy ``client_bound``."""
    users, rss, rss0 = reading.get("users"), reading.get("rss_bytes"), reading.get("rss_at_start_bytes")
    busy = 100.0 * reading["cpu_s"] / reading["wall_s"] if reading.get("wall_s") else None
    return {
        "users": users,
        "fds": reading.get("fds"),
        "rss_mib": rss / 2**20 if rss else None,
        "kib_per_user": (rss - rss0) / 1024 / users if rss and rss0 and users else None,
        "process_cpu_percent": busy,
        "client_bound": busy is not None and busy >= CLIENT_PROC_BUSY,
    }


PROCESS_HEAD = f"{'fds':>6} {'KiB/user':>9} {'CPU_%':>6} {'client_bound':>12}"


def process_columns(row: dict) -> str:
    """:func:`process_figures` as columns under :data:`PROCESS_HEAD`."""
    n = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    return (
        f"{n(row['fds']):>6} {n(row['kib_per_user']):>9} {n(row['process_cpu_percent']):>6} "
        f"{'yes' if row['client_bound'] else 'no':>12}"
    )
