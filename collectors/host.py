"""Host and process readings through psutil: CPU, memory, disk and network, and one watched
process with its children summed.

Rates (CPU percentages) are computed from the CPU-time counters between two readings and so
are divided by the time that actually passed. The first reading only primes the counters.
The collector (role ``server``) and the Locust master's puller (role ``client``) share this.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psutil

from tts_knee import runformat

log = logging.getLogger("collectors")

T = TypeVar("T")

_PROC_ERRORS = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def _busy_and_total(times: Any) -> tuple[float, float]:  # psutil's scputimes, fields by platform
    """Busy and total CPU seconds the way psutil.cpu_percent counts them."""
    fields = times._asdict()
    total = sum(fields.values())
    # Linux counts guest time inside user/nice already.
    total -= fields.get("guest", 0.0) + fields.get("guest_nice", 0.0)
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
    return total - idle, total


def ratio_percent(part: float, whole: float) -> float | None:
    """``part`` as a percentage of ``whole``, clamped to 0-100; None (unknown, never 0) when no
    CPU time passed between the two readings."""
    return round(100.0 * min(max(part / whole, 0.0), 1.0), 2) if whole > 0 else None


class HostSampler:
    """CPU (total, busiest core, iowait, steal), memory, cumulative disk and network bytes.

    The constructor primes the CPU counters; each :meth:`read` reports the interval since the
    previous one.
    """

    def __init__(self) -> None:
        self._last = psutil.cpu_times(percpu=True)

    def read(self) -> dict[str, Any]:
        now = psutil.cpu_times(percpu=True)
        last, self._last = self._last, now
        busy_sum = total_sum = iowait = steal = 0.0
        has_iowait = hasattr(now[0], "iowait") if now else False
        has_steal = hasattr(now[0], "steal") if now else False
        max_core = None  # unknown until some core's CPU time has moved
        for before, after in zip(last, now):
            busy_before, total_before = _busy_and_total(before)
            busy_after, total_after = _busy_and_total(after)
            busy, total = busy_after - busy_before, total_after - total_before
            busy_sum += busy
            total_sum += total
            core = ratio_percent(busy, total)
            if core is not None:
                max_core = core if max_core is None else max(max_core, core)
            if has_iowait:
                iowait += after.iowait - before.iowait
            if has_steal:
                steal += after.steal - before.steal
        virtual_memory = psutil.virtual_memory()
        disk = _safe(psutil.disk_io_counters)
        net = _safe(psutil.net_io_counters)
        return {
            "cpu_percent": ratio_percent(busy_sum, total_sum),  # of all cores together
            "cpu_max_core_percent": max_core,
            "iowait_percent": ratio_percent(iowait, total_sum) if has_iowait else None,
            "steal_percent": ratio_percent(steal, total_sum) if has_steal else None,
            "cpu_count": len(now),
            "mem_used_bytes": virtual_memory.total - virtual_memory.available,  # what applications hold; not cache
            "mem_total_bytes": virtual_memory.total,
            "disk_read_bytes": None if disk is None else disk.read_bytes,
            "disk_write_bytes": None if disk is None else disk.write_bytes,
            "net_sent_bytes": None if net is None else net.bytes_sent,
            "net_recv_bytes": None if net is None else net.bytes_recv,
        }


def _safe(read: Callable[[], T]) -> T | None:
    """psutil's disk/net counters, or None where the host has none (containers, no disks)."""
    try:
        return read()
    except (OSError, RuntimeError):
        return None


class ProcessWatcher:
    """The watched server process and its children, summed.

    ``pid`` watches that process; ``skip`` names children not to count (the load generator's
    ASR judge is not the load generator); ``match`` finds one by name (the executable's name or a
    word in its command line) and finds it again if it restarts. Per-process CPU seconds are
    remembered per pid, so children that come and go are counted from the time they appear.
    Command lines are only compared, never reported.
    """

    def __init__(self, pid: int | None = None, match: str | None = None, skip: set[int] | None = None):
        self._pid = pid
        self._match = match
        self._skip = skip if skip is not None else set()  # children not to count (read at every reading)
        self._root: psutil.Process | None = None
        self._cpu_s: dict[int, tuple[psutil.Process, float]] = {}
        self._last_t: float | None = None
        self._last_wall: float | None = None
        self._missing_noted = False
        if pid is not None:
            self._root = psutil.Process(pid)  # NoSuchProcess here is the caller's to report
        self.read()  # prime the CPU counters

    @property
    def pids(self) -> set[int]:
        """The pids seen at the last reading (root and children)."""
        return set(self._cpu_s)

    def _find(self) -> psutil.Process | None:
        own_pid = os.getpid()
        mine = {own_pid, *(parent.pid for parent in psutil.Process(own_pid).parents())}
        found = []
        for proc in psutil.process_iter(["name", "cmdline", "create_time", "ppid"]):
            if proc.pid in mine:
                continue
            info = proc.info
            words = " ".join(info.get("cmdline") or ())
            if info.get("name") == self._match or (self._match and self._match in words):
                found.append(proc)
        pids = {proc.pid for proc in found}
        # The top of the matching tree: a matching process whose parent does not match.
        tops = [proc for proc in found if proc.info.get("ppid") not in pids]
        tops.sort(key=lambda proc: proc.info.get("create_time") or 0.0)
        return tops[0] if tops else None

    def read(self) -> dict[str, Any] | None:
        """``{pid, cpu_percent, rss_bytes, num_children}`` or None when nothing is watched.

        ``cpu_percent`` is of one core (the whole tree can exceed 100); ``rss_bytes`` sums
        resident memory, so pages shared between workers count once per process.
        """
        now_t = time.monotonic()
        now_wall = time.time()
        if self._root is None and self._match:
            self._root = self._find()
            if self._root is None:
                if not self._missing_noted:
                    self._missing_noted = True
                    log.warning("No process matches %r yet; proc is null until one does.", self._match)
                return None
            log.warning("Watching process %d (matched %r).", self._root.pid, self._match)
            self._missing_noted = False
            self._cpu_s.clear()
            self._last_t = None
        if self._root is None:
            return None
        try:
            # a process that exited but that its parent has not reaped yet is a zombie: gone all the same
            if not self._root.is_running() or self._root.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(self._root.pid)
            children = self._root.children(recursive=True)
        except _PROC_ERRORS:
            self._lost()
            return None
        cpu_delta = 0.0
        rss = 0
        seen: dict[int, tuple[psutil.Process, float]] = {}
        for proc in [self._root, *(child for child in children if child.pid not in self._skip)]:
            cached = self._cpu_s.get(proc.pid)
            if cached is not None and cached[0] == proc:
                proc = cached[0]  # keep the object: psutil checks pid reuse with it
            try:
                with proc.oneshot():
                    cpu_times = proc.cpu_times()
                    cpu_s = cpu_times.user + cpu_times.system
                    rss += proc.memory_info().rss
                    born = proc.create_time()
            except _PROC_ERRORS:
                if proc is self._root:
                    self._lost()
                    return None
                continue
            if cached is not None and cached[0] == proc:
                cpu_delta += max(cpu_s - cached[1], 0.0)
            elif self._last_wall is not None and born >= self._last_wall:
                cpu_delta += cpu_s  # born during this interval: all its CPU time is new
            seen[proc.pid] = (proc, cpu_s)
        self._cpu_s = seen
        elapsed = None if self._last_t is None else now_t - self._last_t
        self._last_t, self._last_wall = now_t, now_wall
        return runformat.proc_reading(
            pid=self._root.pid,
            cpu_percent=round(100.0 * cpu_delta / elapsed, 2) if elapsed else None,
            rss_bytes=rss,
            num_children=len(seen) - 1,
        )

    def _lost(self) -> None:
        pid = self._root.pid if self._root else None
        self._cpu_s.clear()
        self._last_t = self._last_wall = None
        self._root = None
        if self._match:
            log.warning("Watched process %s exited; looking for %r again.", pid, self._match)
        else:
            log.warning("Watched process %s exited; proc is null from now on, sampling goes on.", pid)
        return None
