"""The sampling loop: a fixed-rate schedule on the monotonic clock, a bounded ring of samples,
and an optional JSONL spool.

Deadlines are ``start + k * interval``, so the schedule does not drift; a tick missed because
a sample ran long is skipped rather than made up in a burst.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

from tts_knee import runformat
from tts_knee.collectors.dcgm import DcgmGpus
from tts_knee.collectors.host import HostSampler, ProcessWatcher
from tts_knee.collectors.nvml import Nvml
from tts_knee.collectors.scrape import Scrapes
from tts_knee.runformat import wire

log = logging.getLogger("collectors")

SKEW_ENV = "TTS_KNEE_CLOCK_SKEW_S"
DEFAULT_INTERVAL_S = 1.0
DEFAULT_BUFFER = 3600


def wall_clock() -> float:
    """The collector's wall clock in unix seconds, used for every sample's ``ts`` and ``/time``.

    ``TTS_KNEE_CLOCK_SKEW_S`` shifts it by that many seconds: a test and drill hook that makes
    this host's clock look wrong, so clock-offset correction can be exercised on one machine.
    """
    return time.time() + float(os.environ.get(SKEW_ENV) or 0)


def next_tick(start: float, interval: float, now: float) -> int:
    """The index k of the first deadline ``start + k * interval`` strictly after ``now``."""
    return max(1, math.floor((now - start) / interval) + 1)


class Sampler:
    """Takes one sample per tick on a background thread and keeps the last ``buffer`` of them.

    Each sample carries ``seq`` (0, 1, 2 … for this collector's lifetime), ``ts`` (this host's
    wall clock), ``host`` and ``role``, the host readings, ``proc`` (the watched process tree,
    or null) and ``gpus``. ``clock`` gives ``ts``: this host's :func:`wall_clock` by default.

    ``nvml`` is the GPU source: :class:`collectors.nvml.Nvml`, or anything with the same
    ``available`` and ``sample(pids)`` (:class:`collectors.dcgm.DcgmGpus`). With ``scrapes``
    each sample also carries ``metrics``: the latest readings of the scraped endpoints
    (``{series: value}``, null while none of them has a fresh one); the scrapes run on their
    own threads, so they never delay a sample.
    """

    def __init__(
        self,
        host: HostSampler,
        nvml: Nvml | DcgmGpus | None = None,
        watcher: ProcessWatcher | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        buffer: int = DEFAULT_BUFFER,
        spool: IO[str] | None = None,
        hostname: str | None = None,
        role: str = "server",
        clock: Callable[[], float] = wall_clock,
        scrapes: Scrapes | None = None,
    ):
        self.interval_s = interval_s
        self.hostname = hostname or socket.gethostname()
        self.role = role
        self._clock = clock
        self.boot = uuid.uuid4().hex[:12]  # tells a puller this collector restarted
        self.missed_ticks = 0
        self.last_sample_s: float | None = None
        self._host = host
        self._nvml = nvml
        self._watcher = watcher
        self._scrapes = scrapes
        self._spool = spool
        self._ring: collections.deque[dict[str, Any]] = collections.deque(maxlen=buffer)
        self._next_seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_t: float | None = None

    # -- taking samples ---------------------------------------------------------------------

    @property
    def nvml_available(self) -> bool:
        return bool(self._nvml and self._nvml.available)

    def take(self) -> dict[str, Any]:
        """Take one sample now, keep it in the ring and the spool, and return it."""
        started = time.monotonic()
        proc = self._watcher.read() if self._watcher else None
        pids = self._watcher.pids if (self._watcher and proc) else None
        sample = runformat.resource_sample(
            seq=None,
            ts=round(self._clock(), 6),
            host=self.hostname,
            role=self.role,
            interval_s=None if self._last_t is None else round(started - self._last_t, 6),
            **self._host.read(),
            proc=proc,
            gpus=self._nvml.sample(pids) if self._nvml else [],
        )
        if self._scrapes is not None:
            sample["metrics"] = self._scrapes.metrics()
        self._last_t = started
        with self._lock:
            sample["seq"] = self._next_seq
            self._next_seq += 1
            self._ring.append(sample)
        self._write_spool(sample)
        self.last_sample_s = time.monotonic() - started
        return sample

    def _write_spool(self, sample: dict[str, Any]) -> None:
        if self._spool is None:
            return
        try:
            self._spool.write(runformat.jsonl_line(sample))
            self._spool.flush()
        except (OSError, ValueError) as exc:
            log.warning("Cannot write the spool any more (%s); samples stay in memory only.", exc)
            self._spool = None

    # -- the schedule -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._spool is not None:
            with contextlib.suppress(OSError):
                self._spool.close()
            self._spool = None

    def _run(self) -> None:
        start = time.monotonic()
        tick = 1
        while not self._stop.wait(max(0.0, start + tick * self.interval_s - time.monotonic())):
            try:
                self.take()
            except Exception:  # noqa: BLE001 - one bad reading must not end the collector
                log.exception("A sample failed; sampling goes on.")
            nxt = next_tick(start, self.interval_s, time.monotonic())
            self.missed_ticks += max(0, nxt - tick - 1)
            tick = nxt

    # -- reading back -----------------------------------------------------------------------

    def scrape_states(self) -> list[dict[str, Any]]:
        """Per ``--scrape`` endpoint: url, state (new, ok, down, bad), scrapes and failures."""
        if self._scrapes is None:
            return []
        return [
            {"url": endpoint.url, "state": endpoint.state, "scrapes": endpoint.scrapes, "failures": endpoint.failures}
            for endpoint in self._scrapes.endpoints
        ]

    @property
    def count(self) -> int:
        """Samples taken since start (the next ``seq``)."""
        return self._next_seq

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return self._ring[-1] if self._ring else None

    def since(self, seq: int) -> dict[str, Any]:
        """Samples with ``seq >= seq``; ``next`` is what to ask for next time.

        ``dropped`` counts asked-for samples that already left the ring. A ``seq`` beyond
        ``next`` (a puller that knew an earlier life of this collector) gets no samples and
        the lower ``next``, from which the puller can tell the collector restarted.
        """
        with self._lock:
            ring = list(self._ring)
            nxt = self._next_seq
        oldest = ring[0]["seq"] if ring else nxt
        roles = self._scrapes.told() if self._scrapes else {}
        if seq < oldest:
            return wire.SAMPLES(
                host=self.hostname, boot=self.boot, next=nxt, samples=ring, dropped=oldest - seq, **roles
            )
        return wire.SAMPLES(
            host=self.hostname, boot=self.boot, next=nxt, samples=ring[seq - oldest :] if seq < nxt else [], **roles
        )
