"""What the collector costs the server host: CPU time per sample, and as a share of one core.

Run from the repository root (about 20 s)::

    .venv/bin/python bench/collector_overhead.py            # 300 samples per path
    .venv/bin/python bench/collector_overhead.py --samples 1000

It takes N samples back to back in this process with the real psutil code, watching a
process with four children, (1) with the NVML binding that is installed (``pynvml``; on a
host without a GPU that is CPU only) and (2) with the fake NVML binding from
``tests/fake_nvml.py`` (two GPUs, one in MIG mode: the wrapper's own cost, not the driver's),
and divides the process CPU time by N. Then it runs a real ``tts-knee collect`` (fake NVML)
for five seconds at 1 Hz and at 10 Hz and reads that process's CPU time, which adds the thread
wake-ups and the HTTP server's idle polling. It prints one line per measurement, e.g.::

    in-process, installed NVML (CPU only):   1.82 ms CPU/sample = 0.18% of a core at 1 Hz, 1.82% at 10 Hz
    in-process, fake NVML (4 devices):       1.98 ms CPU/sample = 0.20% of a core at 1 Hz, 1.98% at 10 Hz
    collector process at 1 Hz, 5 s:          2.0 ms CPU/s = 0.20% of a core (idle HTTP)
    collector process at 10 Hz, 5 s:         26.0 ms CPU/s = 2.60% of a core (idle HTTP)
    (82 processes on this host, 2 CPUs; finding the watched tree's children scans them all)

The goal is under 1% of a core at 1 Hz. Real NVML calls cost more than the fake's (tens of
microseconds each, more for the process list), so measure on the GPU host for that figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tts_knee.collectors.host import HostSampler, ProcessWatcher
from tts_knee.collectors.nvml import Nvml
from tts_knee.collectors.sampler import Sampler

ROOT = Path(__file__).resolve().parent.parent
FAKE_NVML = ROOT / "tests" / "fake_nvml.py"
PROCESS_RUN_S = 5.0


def load_fake_nvml() -> str:
    """tests/fake_nvml.py loaded from its file as the module ``fake_nvml``, the name the collector's
    NVML wrapper imports it by; returns that name."""
    spec = importlib.util.spec_from_file_location("fake_nvml", FAKE_NVML)
    assert spec is not None and spec.loader is not None  # a .py file: the source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["fake_nvml"] = module
    return "fake_nvml"


def per_sample_cpu_s(module: str | None, samples: int, pid: int) -> tuple[float, int]:
    """CPU seconds per sample and the number of GPU devices seen."""
    nvml = Nvml(module)
    sampler = Sampler(HostSampler(), nvml, ProcessWatcher(pid=pid), buffer=16)
    sample = sampler.take()  # NVML start-up and first reads are not the steady state
    t0 = time.process_time()
    for _ in range(samples):
        sample = sampler.take()
    cost = (time.process_time() - t0) / samples
    nvml.shutdown()
    return cost, len(sample["gpus"])


def collector_process_cpu_s_per_s(pid: int, hz: float) -> float:
    """CPU seconds per wall second of a real collector process sampling at ``hz``."""
    env = dict(os.environ, TTS_KNEE_NVML_MODULE="fake_nvml", PYTHONPATH=str(FAKE_NVML.parent))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tts_knee.collectors", "--port", "0", "--interval", str(1 / hz), "--pid", str(pid)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        proc.stdout.readline()  # "listening on …": start-up is over
        p = psutil.Process(proc.pid)
        before, t0 = p.cpu_times(), time.monotonic()
        time.sleep(PROCESS_RUN_S)
        after, elapsed = p.cpu_times(), time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(10)
    return (after.user + after.system - before.user - before.system) / elapsed


def line(label: str, cost_s: float) -> str:
    return (
        f"{label:<40} {cost_s * 1e3:.2f} ms CPU/sample = {cost_s * 100:.2f}% of a core "
        f"at 1 Hz, {cost_s * 1000:.2f}% at 10 Hz"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300, help="samples per path")
    args = parser.parse_args()
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(4)]
    try:
        logging.basicConfig(level=logging.ERROR)  # "no NVML here" is expected, not news
        os.environ.pop("TTS_KNEE_NVML_MODULE", None)
        cost, n = per_sample_cpu_s("pynvml", args.samples, os.getpid())
        label = "in-process, installed NVML" + (f" ({n} devices):" if n else " (CPU only):")
        print(line(label, cost), flush=True)
        os.environ["FAKE_NVML_MIG"] = "1"
        cost, n = per_sample_cpu_s(load_fake_nvml(), args.samples, os.getpid())
        print(line(f"in-process, fake NVML ({n} devices):", cost), flush=True)
        for hz in (1, 10):
            rate = collector_process_cpu_s_per_s(os.getpid(), hz)
            print(
                f"{f'collector process at {hz} Hz, {PROCESS_RUN_S:.0f} s:':<40} "
                f"{rate * 1e3:.1f} ms CPU/s = {rate * 100:.2f}% of a core (idle HTTP)",
                flush=True,
            )
        print(
            f"({len(psutil.pids())} processes on this host, {psutil.cpu_count()} CPUs; "
            f"finding the watched tree's children scans them all)"
        )
    finally:
        for k in kids:
            k.kill()
            k.wait()


if __name__ == "__main__":
    main()
