"""The slow-disk drill: a run whose run directory sits on a disk that really stalls.

The disk is a FUSE passthrough (tests/slowfs.py, libfuse 3 through mfusepy) that adds a delay
to every write() the tts-knee process makes into the run directory, or holds them until told
otherwise. Two drills against the simulator:

- a disk that turns slow mid-run: the client's timing stays true (the client gap — wait_ms
  minus the server's own Server-Timing total — has the same p95 before and after), no record
  is lost (requests.jsonl holds Locust's own request count), and the audio files the disk
  could not take in time are counted in their records and in run.json, and said;
- a disk that stops taking writes: once MAX_PENDING_BYTES wait in memory the run says so and
  stops by itself (exit status 3), and once the disk takes writes again everything recorded is
  written: nothing lost.

Needs /dev/fuse and the right to mount (root, as CI runs); skipped where /dev/fuse is absent.
The run-directory writer's retry of a failing write is checked in this process, on any disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from procs import LOCUST, LOCUSTFILE, ROOT, locust_count, read_jsonl, spawn
from rundirs import assert_declared

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse"), reason="/dev/fuse is absent: no FUSE here to make a slow disk with"
)
SIM = [
    "tts_knee.testbed.sim",
    "--port",
    "0",
    "--slots",
    "64",
    "--base-ms",
    "200",
    "--per-char-ms",
    "0",
    "--jitter",
    "0",
]
SLOW_WRITE_S = 0.05

SMALL_BUFFER_LOCUSTFILE = """
from tts_knee.locustfiles import shipping
from tts_knee.locustfiles.tts import *  # noqa: F401,F403  (the locustfile itself)
shipping.MAX_PENDING_BYTES = {limit}
"""


class SlowDisk:
    """A mounted slowfs: ``path`` is where the slow disk is, ``backing`` where its files really are."""

    def __init__(self, tmp: Path):
        self.backing, self.path, self.control = tmp / "backing", tmp / "slow", tmp / "control"
        self.backing.mkdir()
        self.path.mkdir()
        self.set("0")
        self.log = tmp / "slowfs.log"
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "slowfs.py"), str(self.backing), str(self.path), str(self.control)],
            stdout=open(self.log, "w"),  # noqa: SIM115 - the child's, for its life
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"tests/slowfs.py did not mount {self.path}:\n{self.log.read_text()}")
            time.sleep(0.05)

    def set(self, mode: str) -> None:
        """A delay in seconds for every write, or ``hold``."""
        self.control.write_text(mode)

    def unmount(self) -> None:
        self.set("0")
        subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def slow_disk(tmp_path):
    disk = SlowDisk(tmp_path)
    try:
        yield disk
    finally:
        disk.unmount()


def _start(args: list[str], log: Path, locustfile: str = LOCUSTFILE) -> subprocess.Popen:
    return subprocess.Popen(
        [LOCUST, "-f", locustfile, "--headless", *args],
        cwd=ROOT,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _step_start(run_dir: Path, timeout: float = 30) -> float:
    """When the run's first step began (run.json, on the disk's backing folder)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            steps = json.loads((run_dir / "run.json").read_text())["steps"]
            if steps:
                return steps[0]["start"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no step began in {run_dir}")


def _gap_p95(records: list[dict], lo: float, hi: float) -> tuple[float, int]:
    gaps = [
        r["wait_ms"] - r["server_timing"]["total"]
        for r in records
        if r["ok"] and r["settled"] and lo <= r["t0"] < hi and "total" in (r["server_timing"] or {})
    ]
    return float(np.percentile(gaps, 95)), len(gaps)


@needs_fuse
def test_a_disk_that_turns_slow_neither_holds_up_the_load_nor_loses_a_record(tmp_path, slow_disk):
    run_dir = slow_disk.path / "run"
    with spawn(SIM) as sim:
        proc = _start(
            [
                "-H",
                sim.url,
                "--steps",
                "32",
                "--step-time",
                "45",
                "--run-dir",
                str(run_dir),
                "--json-file",
                str(tmp_path / "locust"),
            ],
            tmp_path / "locust.log",
        )
        start = _step_start(slow_disk.backing / "run")
        time.sleep(max(0.0, start + 12 - time.time()))
        slow_from = time.time()
        slow_disk.set(str(SLOW_WRITE_S))  # every write into the run directory now takes 50 ms more
        proc.wait(120)
    out = (tmp_path / "locust.log").read_text()
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    records = read_jsonl(slow_disk.backing / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust")  # not one record lost
    assert_declared(slow_disk.backing / "run")
    # the client's timing: the gap the server's clock does not see, before and after the disk slowed
    fast, n_fast = _gap_p95(records, start + 2, slow_from)
    slow, n_slow = _gap_p95(records, slow_from + 1, start + 45)
    assert n_fast > 200 and n_slow > 200, (n_fast, n_slow)
    assert slow <= 1.5 * fast + 2.0, (fast, slow)
    # audio the disk could not take in time is counted, in the records and in run.json, and said
    assert "audio is written on a thread from now on" in out
    missing = [r for r in records if r.get("audio_file")]
    assert missing and all(r["t3"] is None and r["write_ms"] is None and r["ok"] for r in missing)
    assert all(r["t0"] >= slow_from - 1 for r in missing)
    run = json.loads((slow_disk.backing / "run" / "run.json").read_text())
    kinds = {k: sum(r["audio_file"] == k for r in missing) for k in ("late", "dropped")}
    assert run["audio_missing"] == {k: n for k, n in kinds.items() if n}
    assert f"{len(missing)} audio files were not written in time" in out


@needs_fuse
def test_a_disk_that_stops_taking_writes_stops_the_run_and_loses_nothing(tmp_path, slow_disk):
    run_dir = slow_disk.path / "run"
    locustfile = tmp_path / "small_buffer.py"
    locustfile.write_text(SMALL_BUFFER_LOCUSTFILE.format(limit=64 << 10))
    log = tmp_path / "locust.log"
    with spawn(SIM) as sim:
        proc = _start(
            [
                "-H",
                sim.url,
                "--steps",
                "16",
                "--step-time",
                "120",
                "--run-dir",
                str(run_dir),
                "--json-file",
                str(tmp_path / "locust"),
            ],
            log,
            str(locustfile),
        )
        start = _step_start(slow_disk.backing / "run")
        time.sleep(max(0.0, start + 4 - time.time()))
        slow_disk.set(str(SLOW_WRITE_S))  # slow first, then no writes at all
        time.sleep(3)
        slow_disk.set("hold")
        held = time.time()
        deadline = time.monotonic() + 60
        while "has not kept up" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        said = time.time()
        time.sleep(2)  # the run stops; what it holds waits for the disk
        assert proc.poll() is None, log.read_text()[-3000:]
        slow_disk.set("0")
        proc.wait(120)
    out = log.read_text()
    assert "has not kept up" in out and said - held < 30, out[-3000:]
    assert proc.returncode == 3, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    records = read_jsonl(slow_disk.backing / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust")  # everything recorded is written
    assert max(r["t0"] for r in records) < said + 5  # the run stopped when it said so
    run = json.loads((slow_disk.backing / "run" / "run.json").read_text())
    assert "has not kept up" in run["error"] and run["records"] == len(records)
    assert_declared(slow_disk.backing / "run")


def test_a_failing_write_is_retried_until_it_succeeds_and_said_once(tmp_path, caplog):
    """A write into a folder that is not there yet fails (as a full disk's would): the writer
    keeps the bytes, says so once, retries, and writes them in order once it can."""
    import gevent

    from tts_knee.locustfiles import disk as disk_mod

    disk_mod.RETRY_S, old = 0.05, disk_mod.RETRY_S
    try:
        writer = disk_mod.DiskWriter()
        target = tmp_path / "later" / "requests.jsonl"
        first = writer.append(target, b"one\n")
        writer.append(target, b"two\n")
        assert not writer.drain(0.3) and writer.pending_bytes == 8
        (tmp_path / "later").mkdir()
        assert writer.drain(5)
        gevent.sleep(0)
    finally:
        disk_mod.RETRY_S = old
    assert first.done.is_set() and writer.pending_bytes == 0
    assert target.read_bytes() == b"one\ntwo\n"
    said = [r.getMessage() for r in caplog.records if r.name == "tts_knee.disk"]
    assert len([m for m in said if m.startswith(f"cannot write {target}")]) == 1, said
    assert f"{target} is written again" in said
