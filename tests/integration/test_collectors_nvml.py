"""The NVML wrapper: against the fake binding in a real collector process, in-process for the
fallbacks, and against the real pynvml's names; plus the scheduler and ring buffer."""

from __future__ import annotations

import inspect
import logging
import re
import time

import pynvml
import pytest
from hypothesis import given, strategies as st
from test_collectors import get_json, wait_for

import fake_nvml
from fake_nvml import SimHealth
from procs import ROOT, spawn
from tts_knee import runformat
from tts_knee.collectors import nvml as nvml_mod
from tts_knee.collectors.nvml import Nvml, decode_clock_event_reasons
from tts_knee.collectors.sampler import Sampler, next_tick

MIB = 1 << 20
FAKE = {"TTS_KNEE_NVML_MODULE": "fake_nvml", "PYTHONPATH": "tests"}
GPU_FIELDS = tuple(f.name for f in runformat.GPU_READING)


def test_fake_gpus_unsupported_fields_null_then_gpu_lost(tmp_path):
    import subprocess
    import sys

    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with (
            SimHealth(busy=2, slots=4) as sim,
            spawn(
                ["tts_knee.collectors", "--port", "0", "--interval", "0.2", "--pid", str(watched.pid)],
                env=dict(
                    FAKE,
                    FAKE_NVML_GPUS="2",
                    FAKE_NVML_MIG="1",
                    FAKE_NVML_LOSE_AFTER="5",
                    FAKE_NVML_SIM_URL=sim.url,
                    FAKE_NVML_PROC_PID=str(watched.pid),
                ),
            ) as c,
        ):
            assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] >= 8)
            samples = get_json(f"{c.url}/samples?since=0")["samples"]
            n_before = get_json(f"{c.url}/healthz")["samples"]
            assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] > n_before + 2)
            health = get_json(f"{c.url}/healthz")
        output = c.output()
    finally:
        watched.kill()
        watched.wait(5)

    first = samples[0]["gpus"]
    assert [(g["index"], g["mig_index"]) for g in first] == [(0, None), (1, None), (1, 0), (1, 1)]
    g0, g1, mig0, _ = first
    assert g0["util_percent"] == 50 and g0["power_w"] == pytest.approx(270.0)
    assert g0["mem_used_bytes"] == (1 << 30) + 2 * 512 * MIB  # v2: reserved left out
    assert g0["proc_mem_bytes"] == 256 * MIB and g1["proc_mem_bytes"] == 0
    assert g0["uuid"] == "GPU-fake-0000" and g0["name"].startswith("Fake")
    # Not supported is null, never 0: power on GPU 1, util on the MIG-enabled GPU 1,
    # temperature/power/clocks on the MIG instance (its memory is known).
    assert g1["power_w"] is None and g1["util_percent"] is None and g1["temp_c"] == 55
    assert mig0["uuid"].startswith("MIG-") and mig0["mem_total_bytes"] == 40 * (1 << 30)
    for field in ("util_percent", "power_w", "temp_c", "sm_clock_mhz", "clock_event_reasons"):
        assert mig0[field] is None, field
    assert g1["clock_event_reasons"] == ["sw_power_cap", "hw_slowdown"]

    lost = [s for s in samples if s["gpus"][0]["lost"]]
    assert lost, "GPU 0 was never reported lost"
    assert [s["gpus"][0]["lost"] for s in samples] == [False] * 5 + [True] * (len(samples) - 5)
    for s in lost:
        assert all(s["gpus"][0][f] is None for f in GPU_FIELDS)
        assert s["gpus"][1]["mem_total_bytes"] == 80 * (1 << 30), "other GPUs keep sampling"
        assert s["cpu_percent"] is not None
    assert health["lost_gpus"] == 1 and health["nvml"] is True
    assert output.count("was lost") == 1
    assert "Traceback" not in output


def test_no_driver_samples_cpu_only():
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", "0.2"], env=dict(FAKE, FAKE_NVML_ABSENT="driver")
    ) as c:
        assert wait_for(lambda: get_json(f"{c.url}/healthz")["samples"] >= 2)
        health = get_json(f"{c.url}/healthz")
        sample = get_json(f"{c.url}/samples?since=0")["samples"][-1]
    assert health["nvml"] is False and sample["gpus"] == [] and sample["cpu_percent"] >= 0
    assert c.output().count("NVML is not available (Driver Not Loaded); sampling CPU only.") == 1


# -- in process ---------------------------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    """A fresh fake NVML state per test; env knobs are read at nvmlInit."""
    for key in (
        "FAKE_NVML_GPUS",
        "FAKE_NVML_MIG",
        "FAKE_NVML_LOSE_AFTER",
        "FAKE_NVML_PROC_PID",
        "FAKE_NVML_OLD_DRIVER",
        "FAKE_NVML_ABSENT",
        "FAKE_NVML_SIM_URL",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(fake_nvml, "_state", None)
    return monkeypatch


def test_old_driver_falls_back_to_throttle_reasons_and_memory_v1(fake, caplog):
    fake.setenv("FAKE_NVML_OLD_DRIVER", "1")
    nv = Nvml("fake_nvml")
    with caplog.at_level(logging.INFO, logger="collectors"):
        a, b = nv.sample(), nv.sample()
    assert a[1]["clock_event_reasons"] == ["sw_power_cap", "hw_slowdown"] == b[1]["clock_event_reasons"]
    assert a[0]["clock_event_reasons"] == ["gpu_idle"]
    assert a[0]["mem_used_bytes"] == (1 << 30) + 512 * MIB  # v1 counts the reserved part
    text = caplog.text
    assert text.count("nvmlDeviceGetCurrentClocksEventReasons is not available") == 1
    assert text.count("memory info v2 is not available") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    nv.shutdown()


def test_missing_function_is_null_and_logged_once(fake, caplog):
    fake.delattr(fake_nvml, "nvmlDeviceGetPowerUsage")
    nv = Nvml("fake_nvml")
    readings = [nv.sample() for _ in range(3)]
    assert all(r[0]["power_w"] is None for r in readings)
    assert readings[0][0]["temp_c"] == 35
    assert caplog.text.count("nvmlDeviceGetPowerUsage is not available") == 1
    nv.shutdown()


def test_unexpected_errors_do_not_escape(fake, caplog):
    def broken(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    def buggy(handle, sensor):
        raise RuntimeError("binding bug")

    fake.setattr(fake_nvml, "nvmlDeviceGetClockInfo", lambda h, t: broken(h))
    fake.setattr(fake_nvml, "nvmlDeviceGetTemperature", buggy)
    nv = Nvml("fake_nvml")
    first, second = nv.sample(), nv.sample()
    assert first[0]["sm_clock_mhz"] is None and first[0]["temp_c"] is None
    assert second[0]["util_percent"] == 0 and not second[0]["lost"]
    assert caplog.text.count("nvmlDeviceGetClockInfo failed") == 1
    nv.shutdown()


def test_driver_going_away_marks_every_gpu_lost(fake, caplog):
    nv = Nvml("fake_nvml")
    assert nv.sample()[0]["util_percent"] == 0
    fake_nvml._state = None  # the driver is gone: every call now raises Uninitialized
    after = nv.sample()
    assert [g["lost"] for g in after] == [True, True]
    assert all(g[f] is None for g in after for f in GPU_FIELDS)
    assert nv.sample() == after and not nv.available
    assert caplog.text.count("driver went away") == 1


def test_missing_binding_module_means_cpu_only(caplog):
    nv = Nvml("no_such_nvml_binding")
    assert nv.available is False and nv.sample() == []
    assert "cannot be imported" in caplog.text


def test_wrapper_uses_only_real_pynvml_names():
    """Every NVML name the wrapper calls or catches exists in the real binding."""
    source = inspect.getsource(nvml_mod)
    names = set(re.findall(r'"(nvml[A-Z]\w+|NVMLError\w*|NVML_[A-Z_]+)"', source))
    names -= {"nvmlDeviceGetMemoryInfo_v2"}  # a C symbol, named only in a log/flag
    assert {"nvmlDeviceGetUtilizationRates", "NVMLError_GpuIsLost"} <= names
    missing = sorted(n for n in names if not hasattr(pynvml, n))
    assert not missing


def test_fake_mimics_real_signatures():
    for name, fn in vars(fake_nvml).items():
        if name.startswith("nvml") and callable(fn) and hasattr(pynvml, name):
            real = inspect.signature(getattr(pynvml, name))
            assert list(inspect.signature(fn).parameters) == list(real.parameters), name
    assert issubclass(fake_nvml.NVMLError_GpuIsLost, pynvml.NVMLError)


def test_decode_clock_event_reasons():
    assert decode_clock_event_reasons(None) is None
    assert decode_clock_event_reasons(0) == []
    assert decode_clock_event_reasons(
        pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    ) == ["sw_power_cap", "hw_slowdown"]
    assert decode_clock_event_reasons(1 << 20) == ["bit_20"]


# -- scheduler and ring -------------------------------------------------------------------------


@given(start=st.floats(0, 1e6), interval=st.floats(0.01, 10), late=st.floats(0, 1e3))
def test_next_tick_is_the_first_deadline_after_now(start, interval, late):
    now = start + late
    k = next_tick(start, interval, now)
    assert k >= 1
    assert start + k * interval > now - 1e-6
    assert k == 1 or start + (k - 1) * interval <= now + 1e-6


class _Host:
    def read(self) -> dict:
        return {"cpu_percent": 0.0}


@pytest.mark.alone  # timed to the millisecond: make test's second pass, the machine to itself
def test_schedule_does_not_drift_or_burst():
    sampler = Sampler(_Host(), interval_s=0.05, buffer=100, hostname="h")
    began = time.monotonic()
    sampler.start()
    time.sleep(0.52)
    sampler.stop()
    ran_s = time.monotonic() - began
    ts = [s["ts"] for s in sampler.since(0)["samples"]]
    missed = sampler.missed_ticks
    # No burst: at most one sample per 50 ms tick of the time it really ran (the test's own sleep
    # runs late on a busy machine; 1 ms slack). Ticks passed over are counted, not made up: samples
    # and missed ticks together are 8 or more (about 10; 2 spare for a late thread start).
    assert len(ts) + missed >= 8 and len(ts) <= (ran_s + 0.001) / 0.05, (len(ts), missed, ran_s)
    # No drift: over the ticks spanned, missed ones included, the spacing is 50 ms; +-10 ms, which a
    # late last sample cannot pass (it is late by under one tick) nor a first sample late by < 90 ms
    assert (ts[-1] - ts[0]) / (len(ts) - 1 + missed) == pytest.approx(0.05, abs=0.01)


def test_since_reports_dropped_and_restart():
    sampler = Sampler(_Host(), buffer=3, hostname="h")
    for _ in range(5):
        sampler.take()
    r = sampler.since(0)
    assert [s["seq"] for s in r["samples"]] == [2, 3, 4] and r["dropped"] == 2 and r["next"] == 5
    assert [s["seq"] for s in sampler.since(4)["samples"]] == [4]
    assert sampler.since(5)["samples"] == [] and "dropped" not in sampler.since(5)
    assert sampler.since(99)["next"] == 5


def test_skew_hook_moves_the_wall_clock(monkeypatch):
    from tts_knee.collectors.sampler import wall_clock

    monkeypatch.setenv("TTS_KNEE_CLOCK_SKEW_S", "5.0")
    assert wall_clock() - time.time() == pytest.approx(5.0, abs=0.01)


def test_collectors_never_imports_locust():
    import subprocess
    import sys

    code = (
        "import sys, tts_knee.collectors.__main__, tts_knee.collectors.http; "
        "assert 'locust' not in sys.modules and 'gevent' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
