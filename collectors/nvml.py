"""GPU readings through NVML, every call through one small wrapper (in the manner of nvitop).

:class:`Nvml` starts NVML lazily on first use, turns "not supported" into ``None`` (never 0),
logs a function the driver lacks once, and marks a GPU that falls off the bus (or a driver
that goes away) as lost instead of raising: its fields become null and sampling goes on. No
NVML exception leaves this module.

The binding is ``pynvml`` (from ``nvidia-ml-py``) unless the environment variable
``TTS_KNEE_NVML_MODULE`` names another importable module with the same API; tests use that
to load a fake.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from typing import Any

import psutil

from tts_knee import runformat

log = logging.getLogger("collectors")

MODULE_ENV = "TTS_KNEE_NVML_MODULE"

# nvmlClocksEventReason* bits (the same values as the older nvmlClocksThrottleReason*).
CLOCK_EVENT_REASONS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)

#: A GPU reading's fields, null until read (and while the device is lost).
GPU_FIELDS = tuple(f.name for f in runformat.GPU_READING)


def decode_clock_event_reasons(mask: int | None) -> list[str] | None:
    """Names of the bits set in an NVML clocks-event-reasons bitmask; unknown bits as ``bit_N``."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    names += [f"bit_{n}" for n in range(64) if rest >> n & 1]
    return names


class _Lost(Exception):
    """Internal: the device (or the whole driver, when ``driver`` is true) stopped answering."""

    def __init__(self, reason: str, driver: bool = False):
        super().__init__(reason)
        self.driver = driver


class _Device:
    """One GPU or MIG instance as enumerated at start; ``index`` is the physical GPU's index."""

    def __init__(self, handle: Any, index: int, uuid: str | None, name: str | None, mig_index: int | None = None):
        self.handle = handle
        self.index = index
        self.uuid = uuid
        self.name = name
        self.mig_index = mig_index
        self.lost = False

    def label(self) -> str:
        where = f"GPU {self.index}" if self.mig_index is None else f"MIG {self.index}:{self.mig_index}"
        return f"{where} ({self.uuid})"

    def identity(self) -> dict[str, Any]:
        return {"index": self.index, "mig_index": self.mig_index, "uuid": self.uuid, "name": self.name}


class Nvml:
    """NVML behind one wrapper: lazy start, missing values as None, lost GPUs flagged.

    Use :attr:`available` to learn whether NVML works here and :meth:`sample` for one
    reading of every device. Nothing here raises an NVML error to the caller.
    """

    def __init__(self, module_name: str | None = None):
        self._module_name = module_name or os.environ.get(MODULE_ENV) or "pynvml"
        self._nv: Any = None
        self._started = False
        self._available = False
        self._driver_lost = False
        self._devices: list[_Device] = []
        self._missing: set[str] = set()
        self._errors_logged: set[tuple[str, str]] = set()
        self._memory_v2 = True
        self._pid_namespace_noted = False

    # -- start-up ---------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """True once NVML started and enumerated its devices (False with no library/driver)."""
        self._start()
        return self._available and not self._driver_lost

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        try:
            self._nv = importlib.import_module(self._module_name)
        except ImportError as exc:
            log.warning("NVML binding %r cannot be imported (%s); sampling CPU only.", self._module_name, exc)
            return
        try:
            self._nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded…
            log.warning("NVML is not available (%s); sampling CPU only.", exc)
            return
        self._available = True
        try:
            self._devices = self._enumerate()
        except _Lost as exc:
            log.warning("NVML stopped answering while listing GPUs (%s); sampling CPU only.", exc)
            self._driver_lost = True
            self._devices = []

    def _enumerate(self) -> list[_Device]:
        devices: list[_Device] = []
        count = self._call(None, "nvmlDeviceGetCount") or 0
        for i in range(count):
            try:
                devices += self._enumerate_one(i)
            except _Lost as exc:
                if exc.driver:
                    raise
                lost = _Device(None, i, None, None)
                lost.lost = True
                devices.append(lost)
                log.warning("GPU %d is lost (%s); its fields are null.", i, exc)
        return devices

    def _enumerate_one(self, index: int) -> list[_Device]:
        """GPU ``index`` and, when it is in MIG mode, its MIG instances."""
        handle = self._call(None, "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return []
        uuid = self._call(None, "nvmlDeviceGetUUID", handle)
        devices = [_Device(handle, index, uuid, self._call(None, "nvmlDeviceGetName", handle))]
        mode = self._call(None, "nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != getattr(self._nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return devices
        for mig_index in range(self._call(None, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self._call(
                None,
                "nvmlDeviceGetMigDeviceHandleByIndex",
                handle,
                mig_index,
                absent=("NVMLError_NotFound", "NVMLError_InvalidArgument"),
            )
            if mig is None:
                continue
            devices.append(
                _Device(
                    mig,
                    index,
                    self._call(None, "nvmlDeviceGetUUID", mig),
                    self._call(None, "nvmlDeviceGetName", mig),
                    mig_index=mig_index,
                )
            )
        return devices

    def shutdown(self) -> None:
        if self._available and not self._driver_lost:
            with contextlib.suppress(Exception):  # shutting down; nothing left to save
                self._nv.nvmlShutdown()
        self._available = False

    # -- the one wrapper around every call --------------------------------------------------

    def _is(self, exc: BaseException, *names: str) -> bool:
        classes = tuple(getattr(self._nv, class_name) for class_name in names if hasattr(self._nv, class_name))
        return isinstance(exc, classes)

    def _call(
        self,
        device: _Device | None,
        fn_name: str,
        *args: Any,
        absent: tuple[str, ...] = (),
        fallback: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn_name`` on the binding; None for anything NVML cannot say.

        ``absent`` names further error classes that mean "nothing there". ``fallback`` says
        another function stands in when this one is missing, so that is only logged at info.
        Raises only :class:`_Lost` (a lost GPU, or the driver gone).
        """
        function = getattr(self._nv, fn_name, None)
        if function is None:
            self._note_missing(fn_name, fallback=fallback)
            return None
        try:
            return function(*args, **kwargs)
        except self._nv.NVMLError as exc:
            if self._is(exc, "NVMLError_NotSupported", "NVMLError_NoData", *absent):
                return None
            if self._is(exc, "NVMLError_FunctionNotFound"):
                self._note_missing(fn_name, fallback=fallback)
                return None
            if self._is(exc, "NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_GpuNotFound"):
                raise _Lost(str(exc)) from None
            if self._is(
                exc,
                "NVMLError_Uninitialized",
                "NVMLError_DriverNotLoaded",
                "NVMLError_LibraryNotFound",
                "NVMLError_LibRmVersionMismatch",
            ):
                raise _Lost(str(exc), driver=True) from None
            self._note_error(device, fn_name, exc)
            return None
        except getattr(self._nv, "NVMLLibraryMismatchError", ()):
            # pynvml raises this instead of FunctionNotFound for its unversioned wrappers.
            self._note_missing(fn_name, fallback=fallback)
            return None
        except Exception as exc:  # noqa: BLE001 - a binding bug must not stop the sampler
            self._note_error(device, fn_name, exc)
            return None

    def _call_any(self, device: _Device, fn_names: tuple[str, ...], *args: Any, **kwargs: Any) -> Any:
        """The first of ``fn_names`` this driver has (newer or older spellings of one call)."""
        for attempt, fn_name in enumerate(fn_names):
            if fn_name in self._missing:
                continue
            value = self._call(device, fn_name, *args, fallback=attempt + 1 < len(fn_names), **kwargs)
            if value is not None or fn_name not in self._missing:
                return value
        return None

    def _note_missing(self, fn_name: str, fallback: bool = False) -> None:
        if fn_name not in self._missing:
            self._missing.add(fn_name)
            if fallback:
                log.info("NVML function %s is not available; using an older one.", fn_name)
            else:
                log.warning("NVML function %s is not available with this driver; its readings are null.", fn_name)

    def _note_error(self, device: _Device | None, fn_name: str, exc: BaseException) -> None:
        key = (fn_name, type(exc).__name__)
        if key not in self._errors_logged:
            self._errors_logged.add(key)
            where = device.label() if device else "NVML"
            log.warning("%s: %s failed (%s); that reading is null.", where, fn_name, exc)

    # -- sampling ---------------------------------------------------------------------------

    def sample(self, pids: set[int] | None = None) -> list[dict[str, Any]]:
        """One reading per device (GPU and MIG instance), in enumeration order.

        ``util_percent`` is NVML's ``utilization.gpu``: the percentage of the last sample
        period during which one or more kernels was running on the GPU. It is NOT SM
        occupancy: one small kernel running all the time reads 100%. ``pids`` is the watched
        process tree; ``proc_mem_bytes`` is the GPU memory its processes hold on the device
        (null when there is nothing to watch or NVML cannot say).
        """
        if not self.available and not self._driver_lost:
            return []
        out = []
        for device in self._devices:
            reading = runformat.gpu_reading(**device.identity(), lost=device.lost)
            if not device.lost and not self._driver_lost:
                try:
                    runformat.gpu_reading.update(reading, **self._read(device, pids))
                except _Lost as exc:
                    self._mark_lost(device, exc)
                    reading.update(dict.fromkeys(GPU_FIELDS), lost=True)
            reading["lost"] = device.lost
            out.append(reading)
        return out

    def _mark_lost(self, device: _Device, exc: _Lost) -> None:
        if exc.driver:
            self._driver_lost = True
            for each_device in self._devices:
                each_device.lost = True
            log.warning(
                "The NVIDIA driver went away (%s); GPU fields are null from now on, "
                "CPU sampling goes on. Restart the collector once the driver is back.",
                exc,
            )
        else:
            device.lost = True
            log.warning("%s was lost (%s); its fields are null from now on, sampling goes on.", device.label(), exc)

    def _read(self, device: _Device, pids: set[int] | None) -> dict[str, Any]:
        handle = device.handle
        nvml = self._nv
        util = self._call(device, "nvmlDeviceGetUtilizationRates", handle)
        memory = self._memory(device)
        power_mw = self._call(device, "nvmlDeviceGetPowerUsage", handle)
        # nvmlDeviceGetTemperature is deprecated (gone in CUDA 14); V is its successor.
        temp = self._call_any(
            device,
            ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"),
            handle,
            getattr(nvml, "NVML_TEMPERATURE_GPU", 0),
        )
        sm_clock = self._call(device, "nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
        return {
            "util_percent": None if util is None else util.gpu,
            "mem_used_bytes": None if memory is None else memory.used,
            "mem_total_bytes": None if memory is None else memory.total,
            "power_w": None if power_mw is None else power_mw / 1000.0,  # NVML gives milliwatts
            "temp_c": temp,
            "sm_clock_mhz": sm_clock,
            # ...ClocksEventReasons replaced ...ClocksThrottleReasons (same bits).
            "clock_event_reasons": decode_clock_event_reasons(
                self._call_any(
                    device,
                    ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                    handle,
                )
            ),
            "proc_mem_bytes": self._proc_mem(device, pids),
        }

    def _memory(self, device: _Device) -> Any:
        """Used and total bytes from one call: v2 (whose ``used`` leaves driver-reserved memory
        out) where the driver has it, v1 otherwise."""
        nvml = self._nv
        if self._memory_v2 and hasattr(nvml, "nvmlMemory_v2"):
            try:
                return nvml.nvmlDeviceGetMemoryInfo(device.handle, version=nvml.nvmlMemory_v2)
            except nvml.NVMLError as exc:
                if not self._is(exc, "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch"):
                    # Not about v2 itself: v1 gets the same error classified by _call.
                    return self._call(device, "nvmlDeviceGetMemoryInfo", device.handle)
            except TypeError:  # a binding whose nvmlDeviceGetMemoryInfo has no version
                pass
            except Exception:  # noqa: BLE001 - let the wrapper deal with it through v1
                return self._call(device, "nvmlDeviceGetMemoryInfo", device.handle)
            self._memory_v2 = False
            log.info("NVML memory info v2 is not available; using v1 (its used includes driver-reserved memory).")
        return self._call(device, "nvmlDeviceGetMemoryInfo", device.handle)

    def _proc_mem(self, device: _Device, pids: set[int] | None) -> int | None:
        if not pids:
            return None
        procs = self._call_any(
            device, ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"), device.handle
        )
        if procs is None:
            return None
        mine = [proc for proc in procs if proc.pid in pids]
        if not mine and procs and not any(psutil.pid_exists(proc.pid) for proc in procs):
            # NVML reports host PIDs; inside a container without the host's PID namespace none
            # of them are ours to see, so the answer is unknown rather than 0.
            if not self._pid_namespace_noted:
                self._pid_namespace_noted = True
                log.warning(
                    "GPU processes are not visible in this PID namespace (a container "
                    "without --pid=host?); proc_mem_bytes is null."
                )
            return None
        used: list[int | None] = [proc.usedGpuMemory for proc in mine]
        return (
            None
            if any(used_bytes is None for used_bytes in used)
            else sum(used_bytes for used_bytes in used if used_bytes is not None)
        )
