"""The collector's client: pull collector samples into the run directory's ``resources.jsonl``,
on the master's clock.

The master's clock is the ``clock`` it is given (the node gives it :func:`locustfiles.clock.wall`,
the one the request records use), and it writes through the ``disk`` it is given (the node's
run-directory writer, :class:`locustfiles.disk.DiskWriter`).

Runs inside the Locust master, on gevent (it never imports locust; the sidecar's own modules
import neither). For each collector URL it estimates the clock offset NTP-style (several
``GET /time`` probes, the one with the least round trip wins:
``offset = collector_time - (t_send + t_recv) / 2``), then polls ``GET /samples?since=SEQ``,
rewrites each sample's ``ts`` to ``ts - offset`` and appends it with a ``collector`` field.
Offsets are probed again periodically, on reconnect and at stop, so drift stays bounded.

A collector that is unreachable at start is warned about once and retried in the background;
one that goes away mid-run is retried with backoff and its outage and any missing data are
recorded; a restarted collector (new ``boot``, or ``next`` lower than ours) is read again
from seq 0. What the network or a collector's answer can do wrong is caught, named and recorded
as an outage; a bug here is not: it raises.

With ``sample_client=True`` the master's own host is sampled too (role ``client``), with the
collector's psutil code, on the same schedule and into the same file.

``server_metrics`` URLs (Locust ``--server-metrics``) are Prometheus endpoints of the TTS
server that the master scrapes itself, for servers beside which nothing can be installed: one
sample per interval with role ``server``, ``source`` (the URL), ``host`` (its host:port) and
``metrics`` (as the collector's ``--scrape`` gives them, see :mod:`collectors.exposition`), on
the master's clock. A scrape that fails writes ``metrics: null`` (a gap), with one warning
when it starts failing and one note when it answers again.

``server_stats`` URLs (Locust ``--server-stats``) are JSON endpoints of the TTS server (a
cache's hits and misses, say), polled the same way into the same kind of samples: each number
in the object, nested objects included, is a series named by its path (``cache.hits_total``);
a name ending ``_total`` is a counter and becomes a per-second rate, as a Prometheus counter
does (:class:`JsonStats`).
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import pathlib
import random
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import gevent
import gevent.event
import psutil
from geventhttpclient import HTTPClient

from tts_knee import runformat
from tts_knee.collectors.exposition import ExpositionError, Reader, parse
from tts_knee.collectors.host import HostSampler, ProcessWatcher
from tts_knee.collectors.sampler import Sampler, next_tick
from tts_knee.collectors.scrape import stale_after
from tts_knee.runformat.metric_roles import labels_seen
from tts_knee.runformat.wire import HEALTH, SAMPLES, TIME

log = logging.getLogger(__name__)

PROBES = 8  # /time probes per offset estimate; the least round trip wins
REPROBE_S = 60.0  # re-estimate the offset this often during a run
RETRY_MAX_S = 10.0  # backoff ceiling for an unreachable collector
CONNECT_TIMEOUT_S = 2.0
NETWORK_TIMEOUT_S = 10.0
PRE_ROLL_S = 5.0  # samples from just before the run are kept as a baseline
STOP_TIMEOUT_S = 15.0
SCRAPE_TIMEOUT_S = 2.0  # one --server-metrics scrape; a slower one is a gap


#: Children of this process that are not the load generator (the ASR judge: locustfiles.listening;
#: the live view), left out of the client's CPU and memory.
SIDECARS: set[int] = set()


class Disk(Protocol):
    """Where the samples are written: the node's run-directory writer, or :class:`_Appender`."""

    def append(self, path: pathlib.Path, data: bytes) -> object: ...

    def close(self, path: pathlib.Path) -> object: ...

    def drain(self) -> object: ...


class _Appender:
    """The writer a puller has without the node's: each append written at once, in this greenlet."""

    def append(self, path: pathlib.Path, data: bytes) -> None:
        with open(path, "ab") as spool:
            spool.write(data)

    def close(self, path: pathlib.Path) -> None:
        pass

    def drain(self) -> None:
        pass


class _Unreachable(Exception):
    """The collector did not answer usefully; the message says why, in a few words."""


class _Collector:
    """Everything the puller knows about one collector."""

    def __init__(self, url: str, token: str | None, clock: Callable[[], float]):
        self.url = url
        self.token = token
        self.clock = clock
        parts = urlsplit(url)
        self.base_path = parts.path.rstrip("/")
        self._ssl = parts.scheme == "https"
        self._address = (parts.hostname or "127.0.0.1", parts.port or (443 if self._ssl else 80))
        self.client = self._new_client()
        self.host: str | None = None
        self.boot: str | None = None
        self.server_roles: list[str] = []  # the collector's --server-role
        self.server_stage_label: str | None = None  # and its --server-stage-label
        self.since: int | None = None
        self.connected = False
        self.reachable = False  # at start
        self.offset_s: float | None = None  # first estimate
        self.rtt_s: float | None = None
        self.offset_end_s: float | None = None
        self.rtt_end_s: float | None = None
        self.current_offset_s: float | None = None
        self.probed_at = 0.0
        self.samples = 0
        self.dropped = 0
        self.restarts = 0
        self.last_ts: float | None = None  # last sample written, master's clock
        self.pending_gap_from: float | None = None
        # the pending gap is certain: the collector restarted, so its ring cannot cover it
        self.gap_is_certain = False
        self.gaps: list[list[float | None]] = []
        self.outages: list[list[float | None]] = []
        self.last_error: str | None = None
        self.greenlet: gevent.Greenlet[..., Any] | None = None

    def _new_client(self) -> HTTPClient:
        return HTTPClient(
            self._address[0],
            port=self._address[1],
            connection_timeout=CONNECT_TIMEOUT_S,
            network_timeout=NETWORK_TIMEOUT_S,
            concurrency=1,
            ssl=self._ssl,
        )

    def renew_client(self) -> None:
        self.client.close()
        self.client = self._new_client()

    def get(self, path: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            resp = self.client.get(self.base_path + path, headers=headers)
            try:
                body = resp.read()
            finally:
                resp.release()
        except (OSError, gevent.Timeout) as exc:
            raise _Unreachable(str(exc) or type(exc).__name__) from None
        except http.client.HTTPException as exc:  # geventhttpclient's parser: a garbled response
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code == 401:
            raise _Unreachable("the collector rejected the token (HTTP 401)")
        if resp.status_code != 200:
            raise _Unreachable(f"HTTP {resp.status_code} for {path}")
        try:
            reply = json.loads(body)
        except ValueError:
            raise _Unreachable(f"{path} did not return JSON") from None
        if not isinstance(reply, dict):
            raise _Unreachable(f"{path} did not return a JSON object")
        return reply

    def probe(self, probes: int = PROBES) -> tuple[float, float]:
        """(offset_s, rtt_s) from the probe with the least round trip."""
        best: tuple[float, float] | None = None
        for _ in range(probes):
            t_send = self.clock()
            reply = self.get(TIME.name)
            t_recv = self.clock()
            rtt = t_recv - t_send
            try:
                offset = float(reply["time"]) - (t_send + t_recv) / 2
            except (KeyError, TypeError, ValueError):
                raise _Unreachable('its /time answer is not {"time": seconds}') from None
            if best is None or rtt < best[1]:
                best = (offset, rtt)
        assert best is not None
        return best


class JsonStats:
    """A JSON endpoint's numbers as ``{series: value}`` readings: each number (not a boolean)
    named by its path, objects' keys joined by ``.``; a series whose name ends ``_total`` is a
    counter, read as its rise per second since the previous reading (absent from the first, after
    a fall, and after a gap longer than ``max_gap_s``), as :class:`collectors.exposition.Reader`
    reads Prometheus counters."""

    kind = "a JSON object"

    def __init__(self, max_gap_s: float):
        self.max_gap_s = max_gap_s
        self.dropped = 0  # no cap on series: the run.json entry's series_left_out
        self._last: dict[str, tuple[float, float]] = {}  # counter -> (value, when)

    def read(self, text: str, scraped_at: float) -> dict[str, Any]:
        try:
            obj = json.loads(text)
        except ValueError:
            raise ExpositionError("not JSON") from None
        if not isinstance(obj, dict):
            raise ExpositionError("not a JSON object")
        out = {}
        for name, value in _numbers(obj, ""):
            if not name.endswith("_total"):
                out[name] = value
                continue
            prev = self._last.get(name)
            self._last[name] = (value, scraped_at)
            if prev is not None and value >= prev[0] and 0 < scraped_at - prev[1] <= self.max_gap_s:
                out[name] = (value - prev[0]) / (scraped_at - prev[1])
        return out


def _numbers(obj: dict[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _numbers(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield name, float(value)


class _ServerMetrics:
    """One ``--server-metrics`` endpoint scraped by the master (``stats``: a ``--server-stats``
    JSON endpoint, read by :class:`JsonStats`)."""

    def __init__(self, url: str, interval_s: float, stats: bool = False):
        self.url = url
        parts = urlsplit(url)
        self.host = parts.netloc
        self.path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        self._ssl = parts.scheme == "https"
        self._address = (parts.hostname or "127.0.0.1", parts.port or (443 if self._ssl else 80))
        gap = stale_after(interval_s, SCRAPE_TIMEOUT_S)
        self.stats = stats
        self.reader = JsonStats(gap) if stats else Reader(max_gap_s=gap)
        self.accept = "application/json" if stats else "text/plain"
        self.kind = JsonStats.kind if stats else "Prometheus text exposition"
        self.client = HTTPClient(
            self._address[0],
            port=self._address[1],
            connection_timeout=SCRAPE_TIMEOUT_S,
            network_timeout=SCRAPE_TIMEOUT_S,
            concurrency=1,
            ssl=self._ssl,
        )
        self.state = "new"
        self.samples = self.failures = 0
        self.greenlet: gevent.Greenlet[..., Any] | None = None

    def read(self) -> dict[str, Any]:
        """One scrape into ``{series: value}``; raises _Unreachable or ExpositionError."""
        t_send = time.monotonic()
        text = self.body()
        return self.reader.read(text, (t_send + time.monotonic()) / 2)

    def body(self) -> str:
        """The endpoint's answer as text; raises _Unreachable."""
        try:
            with gevent.Timeout(SCRAPE_TIMEOUT_S):
                resp = self.client.get(self.path, headers={"Accept": self.accept})
                try:
                    body = resp.read()
                finally:
                    resp.release()
        except gevent.Timeout:
            raise _Unreachable(f"no answer within {SCRAPE_TIMEOUT_S:g} s") from None
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, a garbled answer
            raise _Unreachable(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__) from None
        if resp.status_code != 200:
            raise _Unreachable(f"HTTP {resp.status_code}")
        return str(body.decode("utf-8", "replace"))


def _number(reply: dict[str, Any], key: str, path: str) -> float:
    """``reply[key]`` as a float; a collector that answers without it is not a usable one."""
    try:
        return float(reply[key])
    except (KeyError, TypeError, ValueError):
        raise _Unreachable(f"{path} answered without a number in {key!r}") from None


def _normalise(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


class CollectorPuller:
    """Polls collectors into ``out_path`` (resources.jsonl) and samples the master's host.

    ``start()`` returns one warning sentence per unreachable collector; ``stop()`` pulls what
    is left and probes the clocks once more; ``describe()`` is the run.json ``collectors``
    list; ``unreachable`` lists the URLs that did not answer at start. Samples are written by
    ``disk`` (the node's run-directory writer, off the event loop; without one each is appended
    at once) and stamped by ``clock`` (epoch seconds: the node's, the one its records use).
    """

    def __init__(
        self,
        urls: list[str],
        out_path: pathlib.Path,
        token: str | None = None,
        interval_s: float = 1.0,
        sample_client: bool = True,
        client_host: str | None = None,
        server_metrics: Sequence[str] = (),
        server_stats: Sequence[str] = (),
        disk: Disk | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.interval_s = interval_s
        self.out_path = pathlib.Path(out_path)
        self.sample_client = sample_client
        self.client_host = client_host or socket.gethostname()
        self._clock = clock
        self._collectors = [_Collector(_normalise(url), token, clock) for url in urls]
        self._scraped = [_ServerMetrics(_normalise(url), interval_s) for url in server_metrics] + [
            _ServerMetrics(_normalise(url), interval_s, stats=True) for url in server_stats
        ]
        self._disk: Disk = disk if disk is not None else _Appender()
        self._writing = False
        self._started_at: float | None = None
        self._stopping = False
        self._stopped = gevent.event.Event()
        self._client_greenlet: gevent.Greenlet[..., Any] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Probe every collector's clock, start polling, return warnings for unreachable ones
        (one sentence each, for the caller to log)."""
        self._started_at = self._clock()
        try:
            self.out_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return [f"Cannot write {self.out_path} ({exc.strerror or exc}); no resource samples will be recorded."]
        self._disk.append(self.out_path, b"")  # the file exists from the start, as readers expect
        self._writing = True
        warnings: list[str] = []
        jobs = [gevent.spawn(self._connect, collector) for collector in self._collectors]
        gevent.joinall(jobs, timeout=CONNECT_TIMEOUT_S * PROBES + 5)
        for collector in self._collectors:
            collector.reachable = collector.connected
            if not collector.connected:
                collector.outages.append([self._started_at, None])
                collector.pending_gap_from = self._started_at
                warnings.append(
                    f"Collector {collector.url} is unreachable ({collector.last_error}); retrying in the background."
                )
            collector.greenlet = gevent.spawn(self._poll_loop, collector)
        if self.sample_client:
            self._client_greenlet = gevent.spawn(self._client_loop)
        for endpoint in self._scraped:
            endpoint.greenlet = gevent.spawn(self._server_metrics_loop, endpoint)
        return warnings

    def stop(self) -> None:
        """Final pull, end-of-run clock probes, stop the greenlets, close the file."""
        if self._stopping:
            return
        self._stopping = True
        try:
            greenlets = [collector.greenlet for collector in self._collectors if collector.greenlet]
            greenlets += [endpoint.greenlet for endpoint in self._scraped if endpoint.greenlet]
            if self._client_greenlet:
                greenlets.append(self._client_greenlet)
            self._stopped.set()
            gevent.joinall(greenlets, timeout=NETWORK_TIMEOUT_S)
            stuck = [greenlet for greenlet in greenlets if not greenlet.dead]
            if stuck:
                gevent.killall(stuck, timeout=1)
            jobs = [gevent.spawn(self._finish, collector) for collector in self._collectors]
            gevent.joinall(jobs, timeout=STOP_TIMEOUT_S)
            now = self._clock()
            for collector in self._collectors:
                if collector.outages and collector.outages[-1][1] is None:
                    collector.outages[-1][1] = now
                if collector.pending_gap_from is not None:
                    collector.gaps.append([collector.pending_gap_from, now])
                    collector.pending_gap_from, collector.gap_is_certain = None, False
                collector.client.close()
            for endpoint in self._scraped:
                endpoint.client.close()
        finally:
            if self._writing:
                self._writing = False
                self._disk.close(self.out_path)
                self._disk.drain()

    def describe(self) -> list[dict[str, Any]]:
        """Per collector: url, host, offsets and round trips at start and end, reachability,
        ``gaps`` (spans with no samples, master's clock), ``outages`` (spans the collector did
        not answer), and counts of samples written, dropped and restarts seen."""
        return [
            runformat.collector_entry(
                url=collector.url,
                host=collector.host,
                offset_s=collector.offset_s,
                rtt_s=collector.rtt_s,
                offset_end_s=collector.offset_end_s,
                rtt_end_s=collector.rtt_end_s,
                reachable=collector.reachable,
                gaps=[list(gap) for gap in collector.gaps],
                outages=[list(outage) for outage in collector.outages],
                samples=collector.samples,
                dropped=collector.dropped,
                restarts=collector.restarts,
                **({"server_roles": collector.server_roles} if collector.server_roles else {}),
                **({"server_stage_label": collector.server_stage_label} if collector.server_stage_label else {}),
            )
            for collector in self._collectors
        ]

    def describe_server_metrics(self) -> list[dict[str, Any]]:
        """Per ``--server-metrics`` URL: samples written, failed scrapes, and the series the
        cap left out at the last scrape."""
        return [
            runformat.server_metrics_entry(
                url=endpoint.url,
                samples=endpoint.samples,
                failures=endpoint.failures,
                series_left_out=endpoint.reader.dropped,
            )
            for endpoint in self._scraped
        ]

    def missing_label(self, label: str) -> str | None:
        """``--server-stage-label`` before the run: the sentence saying that no series of the
        ``--server-metrics`` endpoints (one fetch each) and the collectors' samples so far carries
        ``label``, naming the labels there; None when one does, or none of them answered."""
        seen: set[str] = set()
        asked: list[str] = []
        for endpoint in self._scraped:
            if endpoint.stats:
                continue
            try:
                seen.update(labels_seen(sample.key for sample in parse(endpoint.body())))
            except (_Unreachable, ExpositionError):  # said as the run scrapes it
                continue
            asked.append(endpoint.url)
        for collector in self._collectors:
            try:
                reply = collector.get(f"{SAMPLES.name}?since=0") if collector.connected else {}
            except _Unreachable:
                continue
            keys = {
                metric
                for sample in reply.get("samples") or []
                if isinstance(sample, dict)
                for metric in sample.get("metrics") or {}
            }
            if keys:
                seen.update(labels_seen(keys))
                asked.append(collector.url)
        if not asked or label in seen:
            return None
        return (
            f"--server-stage-label {label}: no series of {', '.join(asked)} carries that label "
            f"(the labels there: {', '.join(sorted(seen)) or 'none'})"
        )

    @property
    def unreachable(self) -> list[str]:
        return [collector.url for collector in self._collectors if not collector.reachable]

    # -- one collector ----------------------------------------------------------------------

    def _connect(self, collector: _Collector) -> bool:
        """Probe the clock; on success the collector counts as connected."""
        try:
            offset, rtt = collector.probe()
        except _Unreachable as exc:
            collector.last_error = str(exc)
            collector.connected = False
            return False
        if collector.offset_s is None:
            collector.offset_s, collector.rtt_s = offset, rtt
        collector.current_offset_s = offset
        collector.probed_at = time.monotonic()
        collector.connected = True
        collector.last_error = None
        return True

    def _poll_loop(self, collector: _Collector) -> None:
        start = time.monotonic()
        backoff = self.interval_s
        while not self._stopped.is_set():
            try:
                stale = not collector.connected or time.monotonic() - collector.probed_at >= REPROBE_S
                if stale and not self._connect(collector):
                    raise _Unreachable(collector.last_error)
                self._pull(collector)
            except _Unreachable as exc:
                self._lost(collector, exc)
                self._stopped.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, RETRY_MAX_S)
                continue
            backoff = self.interval_s
            if collector.outages and collector.outages[-1][1] is None:
                collector.outages[-1][1] = self._clock()
                log.warning("Collector %s is reachable again.", collector.url)
            tick = next_tick(start, self.interval_s, time.monotonic())
            self._stopped.wait(max(0.0, start + tick * self.interval_s - time.monotonic()))

    def _lost(self, collector: _Collector, exc: Exception) -> None:
        collector.connected = False
        collector.last_error = str(exc)
        if not (collector.outages and collector.outages[-1][1] is None):
            collector.outages.append([self._clock(), None])
            log.warning(
                "Collector %s stopped answering (%s); retrying with backoff.", collector.url, collector.last_error
            )
        if collector.pending_gap_from is None:
            collector.pending_gap_from = collector.last_ts if collector.last_ts is not None else self._clock()

    def _first_since(self, collector: _Collector) -> int:
        """Where to start reading a collector met for the first time: a few seconds back."""
        health = collector.get(HEALTH.name)
        count = int(_number(health, "samples", HEALTH.name)) if health.get("samples") else 0
        interval = _number(health, "interval_s", HEALTH.name) if health.get("interval_s") else self.interval_s
        return max(0, count - math.ceil(PRE_ROLL_S / interval) - 1)

    def _pull(self, collector: _Collector) -> None:
        if collector.since is None:
            collector.since = self._first_since(collector)
        reply = collector.get(f"{SAMPLES.name}?since={collector.since}")
        restarted = (collector.boot is not None and reply.get("boot") not in (None, collector.boot)) or _number(
            reply, "next", SAMPLES.name
        ) < collector.since
        if restarted:
            collector.restarts += 1
            log.warning("Collector %s restarted; reading it again from its first sample.", collector.url)
            if collector.pending_gap_from is None and collector.last_ts is not None:
                collector.pending_gap_from = collector.last_ts
            collector.gap_is_certain = collector.pending_gap_from is not None
            self._connect(collector)  # its host (and clock) may have changed
            collector.since = 0
            reply = collector.get(f"{SAMPLES.name}?since=0")
        elif collector.last_ts is not None:
            dropped = int(_number(reply, "dropped", SAMPLES.name)) if reply.get("dropped") else 0
            collector.dropped += dropped
            if not dropped and not collector.gap_is_certain:
                collector.pending_gap_from = None  # its ring covered the outage: nothing is missing
            elif collector.pending_gap_from is None:
                collector.pending_gap_from = collector.last_ts
        collector.boot = reply.get("boot")
        collector.host = reply.get("host") or collector.host
        roles = reply.get("server_roles")
        if isinstance(roles, list):
            collector.server_roles = [str(role) for role in roles]
        label = reply.get("server_stage_label")
        if isinstance(label, str):
            collector.server_stage_label = label
        samples = reply.get("samples") or []
        if not isinstance(samples, list):
            raise _Unreachable(f"{SAMPLES.name} answered without a list of samples")
        self._write_samples(collector, samples)
        collector.since = int(_number(reply, "next", SAMPLES.name))

    def _write_samples(self, collector: _Collector, samples: list[dict[str, Any]]) -> None:
        offset = collector.current_offset_s or 0.0
        cutoff = (self._started_at or 0.0) - PRE_ROLL_S
        lines = []
        for sample in samples:
            try:
                sample_ts = float(sample["ts"]) - offset
            except (KeyError, TypeError, ValueError):  # not a sample (or not a dict): skipped
                continue
            if collector.last_ts is None and sample_ts < cutoff:
                continue  # from long before this run
            out = dict(sample, ts=round(sample_ts, 6), collector=collector.url, clock_offset_s=round(offset, 6))
            lines.append(runformat.jsonl_line(out))
            if collector.pending_gap_from is not None:
                if out["ts"] > collector.pending_gap_from:
                    collector.gaps.append([collector.pending_gap_from, out["ts"]])
                collector.pending_gap_from, collector.gap_is_certain = None, False
            collector.last_ts = out["ts"]
        self._append(lines)
        collector.samples += len(lines)

    def _append(self, lines: list[str]) -> None:
        if lines and self._writing:
            self._disk.append(self.out_path, "".join(lines).encode())

    def _finish(self, collector: _Collector) -> None:
        try:
            collector.renew_client()  # a killed poll may have left the old connection half-used
            if not collector.connected:
                self._connect(collector)
            if collector.connected:
                self._pull(collector)
                collector.offset_end_s, collector.rtt_end_s = collector.probe()
        except _Unreachable as exc:
            log.warning("Collector %s: final pull failed (%s).", collector.url, exc)

    # -- the master's own host --------------------------------------------------------------

    def _client_loop(self) -> None:
        try:
            watcher = ProcessWatcher(pid=os.getpid(), skip=SIDECARS)
        except psutil.Error as exc:  # host readings are still worth having
            log.warning("Cannot watch this process (%s); client samples carry no proc.", exc)
            watcher = None
        sampler = Sampler(
            HostSampler(),
            None,
            watcher,
            interval_s=self.interval_s,
            buffer=1,
            hostname=self.client_host,
            role="client",
            clock=self._clock,
        )
        start = time.monotonic()
        tick = 1
        while not self._stopped.wait(max(0.0, start + tick * self.interval_s - time.monotonic())):
            try:
                sample = sampler.take()
            except (psutil.Error, OSError) as exc:
                log.warning("Sampling the load generator's host failed (%s); trying again.", exc)
            else:
                self._append([runformat.jsonl_line(dict(sample, collector=None))])
            tick = next_tick(start, self.interval_s, time.monotonic())

    # -- the server's own metrics, scraped by the master -------------------------------------

    def _server_metrics_loop(self, endpoint: _ServerMetrics) -> None:
        start = time.monotonic()
        tick = 0
        while not self._stopped.is_set():
            try:
                metrics = endpoint.read()
            except (_Unreachable, ExpositionError) as exc:
                metrics = None
                endpoint.failures += 1
                what = "is unreachable" if isinstance(exc, _Unreachable) else f"did not answer with {endpoint.kind}"
                if endpoint.state != type(exc).__name__:
                    log.warning(
                        "Server metrics %s %s (%s); its series are a gap until it answers.", endpoint.url, what, exc
                    )
                endpoint.state = type(exc).__name__
            else:
                if endpoint.state not in ("new", "ok"):
                    log.warning("Server metrics %s answers again.", endpoint.url)
                endpoint.state = "ok"
            self._append(
                [
                    runformat.jsonl_line(
                        runformat.resource_sample(
                            ts=round(self._clock(), 6),
                            host=endpoint.host,
                            role="server",
                            source=endpoint.url,
                            collector=None,
                            metrics=metrics,
                            gpus=[],
                        )
                    )
                ]
            )
            endpoint.samples += 1
            tick = max(tick + 1, int((time.monotonic() - start) / self.interval_s) + 1)
            self._stopped.wait(max(0.0, start + tick * self.interval_s - time.monotonic()))
