"""A fake NVML binding with pynvml's names, signatures, return types and error classes.

Load it into a collector with ``TTS_KNEE_NVML_MODULE=fake_nvml`` and ``PYTHONPATH=tests``.
Knobs (environment, read at ``nvmlInit``):

- ``FAKE_NVML_GPUS`` — number of physical GPUs (default 2).
- ``FAKE_NVML_SIM_URL`` — a server whose ``GET /health`` returns ``{"busy", "slots"}`` (the
  simulator); utilisation follows ``100*busy/slots`` and memory rises with ``busy``.
- ``FAKE_NVML_CAPACITY=N`` — the GPU could run N requests at once: utilisation is
  ``100*busy/N`` instead, so a server that admits fewer than N leaves the GPU idle.
- ``FAKE_NVML_LOSE_AFTER=N`` — GPU 0 raises ``NVMLError_GpuIsLost`` after N utilisation reads.
- ``FAKE_NVML_MIG=I`` — GPU I is in MIG mode with two MIG devices (util, power, temperature and
  clocks not supported on them, as on real MIG instances).
- ``FAKE_NVML_PROC_PID=PID`` — GPU 0 lists PID as a compute process using 256 MiB.
- ``FAKE_NVML_OLD_DRIVER=1`` — the driver lacks ``...ClocksEventReasons`` and memory info v2.
- ``FAKE_NVML_ABSENT=library|driver`` — ``nvmlInit`` fails as with no library / no driver.

GPU 1 (when there is one) does not support power readings.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pynvml
from pynvml import (  # noqa: F401 - re-exported: the collector looks them up on this module
    NVML_CLOCK_SM,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_TEMPERATURE_GPU,
    NVMLError,
    NVMLError_ArgumentVersionMismatch,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_InvalidArgument,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotFound,
    NVMLError_NotSupported,
    NVMLError_Uninitialized,
    NVMLLibraryMismatchError,
    c_nvmlMemory_t,
    c_nvmlMemory_v2_t,
    c_nvmlUtilization_t,
    nvmlFriendlyObject,
    nvmlMemory_v2,
    nvmlTemperature_v1,
)

GIB = 1 << 30
MIB = 1 << 20
MIG_SLOTS = 2
SIM_POLL_S = 0.1

_state: dict | None = None


class _Handle:
    def __init__(self, index: int, mig: int | None = None):
        self.index = index
        self.mig = mig

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}{'' if self.mig is None else f':{self.mig}'}>"


def _env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def _need_init() -> dict:
    if _state is None:
        raise NVMLError_Uninitialized()
    return _state


def _device(handle: _Handle) -> dict:
    state = _need_init()
    if not isinstance(handle, _Handle) or handle.index >= state["gpus"]:
        raise NVMLError_InvalidArgument()
    if handle.index == 0 and state["lost"]:
        raise NVMLError_GpuIsLost()
    return state


def _mig_unsupported(handle: _Handle) -> None:
    if handle.mig is not None:
        raise NVMLError_NotSupported()


def _load() -> float:
    """Fraction of the simulator's slots busy (0 without a simulator)."""
    state = _need_init()
    url = state["sim_url"]
    if not url:
        return 0.0
    now = time.monotonic()
    if now - state["sim_at"] >= SIM_POLL_S:
        state["sim_at"] = now
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=0.5) as resp:
                health = json.load(resp)
            slots = state["capacity"] or max(1, int(health.get("slots") or 1))
            state["busy_ratio"] = min(1.0, float(health.get("busy") or 0) / slots)
            state["busy"] = float(health.get("busy") or 0)
        except (OSError, ValueError):
            pass
    return state["busy_ratio"]


# -- library ----------------------------------------------------------------------------------


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlInitWithFlags(flags: int) -> None:
    global _state
    absent = os.environ.get("FAKE_NVML_ABSENT", "")
    if absent == "library":
        raise NVMLError_LibraryNotFound()
    if absent == "driver":
        raise NVMLError_DriverNotLoaded()
    if _state is None:
        _state = {
            "gpus": _env_int("FAKE_NVML_GPUS", 2),
            "sim_url": os.environ.get("FAKE_NVML_SIM_URL", ""),
            "capacity": _env_int("FAKE_NVML_CAPACITY", None),
            "lose_after": _env_int("FAKE_NVML_LOSE_AFTER", None),
            "mig": _env_int("FAKE_NVML_MIG", None),
            "proc_pid": _env_int("FAKE_NVML_PROC_PID", None),
            "old_driver": os.environ.get("FAKE_NVML_OLD_DRIVER") == "1",
            "reads": 0,
            "lost": False,
            "sim_at": -1e9,
            "busy_ratio": 0.0,
            "busy": 0.0,
        }


def nvmlShutdown() -> None:
    global _state
    _need_init()
    _state = None


def nvmlSystemGetDriverVersion() -> str:
    _need_init()
    return "550.54.15-fake"


def nvmlDeviceGetCount() -> int:
    return _need_init()["gpus"]


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    if not 0 <= index < _need_init()["gpus"]:
        raise NVMLError_InvalidArgument()
    return _Handle(index)


# -- identity ---------------------------------------------------------------------------------


def nvmlDeviceGetIndex(handle: _Handle) -> int:
    _device(handle)
    return handle.index


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    _device(handle)
    if handle.mig is not None:
        return f"MIG-fake-{handle.index}-{handle.mig}"
    return f"GPU-fake-{handle.index:04d}"


def nvmlDeviceGetName(handle: _Handle) -> str:
    _device(handle)
    if handle.mig is not None:
        return "Fake H100 MIG 3g.40gb"
    return "Fake H100 80GB HBM3"


# -- MIG --------------------------------------------------------------------------------------


def nvmlDeviceGetMigMode(device: _Handle) -> list[int]:
    state = _device(device)
    if device.mig is not None:
        raise NVMLError_NotSupported()
    mode = NVML_DEVICE_MIG_ENABLE if state["mig"] == device.index else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(device: _Handle) -> int:
    state = _device(device)
    return 7 if state["mig"] == device.index else 0


def nvmlDeviceGetMigDeviceHandleByIndex(device: _Handle, index: int) -> _Handle:
    state = _device(device)
    if state["mig"] != device.index:
        raise NVMLError_InvalidArgument()
    if index >= MIG_SLOTS:
        raise NVMLError_NotFound()
    return _Handle(device.index, index)


def nvmlDeviceIsMigDeviceHandle(device: _Handle) -> pynvml.c_uint:
    _device(device)
    return pynvml.c_uint(int(device.mig is not None))  # pynvml returns the c_uint itself


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice: _Handle) -> _Handle:
    _device(migDevice)
    if migDevice.mig is None:
        raise NVMLError_InvalidArgument()
    return _Handle(migDevice.index)


# -- readings ---------------------------------------------------------------------------------


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> c_nvmlUtilization_t:
    state = _device(handle)
    _mig_unsupported(handle)
    if state["mig"] == handle.index:
        raise NVMLError_NotSupported()  # a MIG-enabled parent reports no utilisation
    if handle.index == 0:
        state["reads"] += 1
        if state["lose_after"] is not None and state["reads"] > state["lose_after"]:
            state["lost"] = True
            raise NVMLError_GpuIsLost()
    util = round(100 * _load()) if handle.index == 0 else 0
    return c_nvmlUtilization_t(gpu=util, memory=util // 2)


def _memory_numbers(handle: _Handle) -> tuple[int, int]:
    total = 80 * GIB if handle.mig is None else 40 * GIB
    used = GIB + (int(_need_init()["busy"] * 512 * MIB) if handle.index == 0 else 0)
    return total, min(used, total)


def nvmlDeviceGetMemoryInfo(handle: _Handle, version=None):
    state = _device(handle)
    total, used = _memory_numbers(handle)
    if not version:
        return c_nvmlMemory_t(total=total, free=total - used, used=used + 512 * MIB)
    if state["old_driver"]:
        raise NVMLError_FunctionNotFound()
    if version != nvmlMemory_v2:
        raise NVMLError_ArgumentVersionMismatch()
    reserved = 512 * MIB
    return c_nvmlMemory_v2_t(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    _device(handle)
    _mig_unsupported(handle)
    if handle.index == 1:
        raise NVMLError_NotSupported()
    return int(70_000 + 400_000 * _load())  # milliwatts


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    _device(handle)
    _mig_unsupported(handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError_NotSupported()
    return int(35 + 40 * _load())


def nvmlDeviceGetTemperatureV(handle: _Handle, sensor: int, version=nvmlTemperature_v1) -> int:
    if version != nvmlTemperature_v1:
        raise NVMLError_ArgumentVersionMismatch()
    return nvmlDeviceGetTemperature(handle, sensor)


def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:  # noqa: A002 - pynvml's name
    _device(handle)
    _mig_unsupported(handle)
    if type != NVML_CLOCK_SM:
        raise NVMLError_NotSupported()
    return 1980 if _load() < 0.8 else 1755


def _reasons(handle: _Handle) -> int:
    state = _device(handle)
    _mig_unsupported(handle)
    if handle.index == 1:
        return 0x004 | 0x008  # sw power cap + hw slowdown
    load = _load()
    return 0x001 if load == 0 and not state["busy"] else (0x004 if load >= 0.8 else 0)


def nvmlDeviceGetCurrentClocksEventReasons(handle: _Handle) -> int:
    if _need_init()["old_driver"]:
        raise NVMLError_FunctionNotFound()
    return _reasons(handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: _Handle) -> int:
    return _reasons(handle)


def nvmlDeviceGetComputeRunningProcesses_v3(handle: _Handle) -> list:
    state = _device(handle)
    if handle.index == 0 and handle.mig is None and state["proc_pid"] is not None:
        return [
            nvmlFriendlyObject(
                {
                    "pid": state["proc_pid"],
                    "usedGpuMemory": 256 * MIB,
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
        ]
    return []


nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list:
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


# -- a stand-in for the simulator's /health, for tests that run without the simulator -------


class SimHealth:
    """Serves ``GET /health`` → ``{"busy": busy, "slots": slots}`` on 127.0.0.1, port 0.

    Use as a context manager; ``url`` is the base URL; ``busy`` can be changed while serving.
    """

    def __init__(self, busy: int = 3, slots: int = 4):
        self.busy = busy
        self.slots = slots
        self.url = ""
        self._server = None

    def __enter__(self) -> SimHealth:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = json.dumps({"busy": outer.busy, "slots": outer.slots}).encode()
                self.send_response(200 if self.path == "/health" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
