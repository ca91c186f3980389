"""The collector's HTTP API on the standard library's threading server.

``GET /samples?since=SEQ``, ``GET /time``, ``GET /metrics`` (Prometheus text exposition, base
units) and ``GET /healthz``; everything else is 404. With a token every endpoint needs
``Authorization: Bearer TOKEN`` (compared in constant time), or answers 401.

``/metrics`` exports the collector's own readings only: series scraped with ``--scrape`` are
not exported again (they are on the server's own endpoint already, and repeating them would
double their number); GPUs read with ``--dcgm`` are, like NVML's, in the ``gpu_*`` families.
``/healthz`` lists each ``--scrape`` endpoint's state.
"""

from __future__ import annotations

import hmac
import json
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tts_knee.collectors.sampler import Sampler, wall_clock
from tts_knee.runformat import wire

PREFIX = "tts_knee_"


class CollectorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], sampler: Sampler, token: str | None = None):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.sampler = sampler
        self.token = token.encode() if token else None
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: CollectorServer
    protocol_version = "HTTP/1.1"  # keep-alive: the puller's clock probes reuse one connection
    server_version = "tts-knee-collector"
    # Headers and body go out as two writes; with Nagle on, a keep-alive client waits for a
    # delayed ACK (~40 ms) and the clock probes' round trips become useless.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per poll would drown the notes that matter

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._authorised():
            self._send(
                401,
                json.dumps(wire.ERROR(error="unauthorised")).encode() + b"\n",
                "application/json",
                {"WWW-Authenticate": 'Bearer realm="tts-knee collector"'},
            )
            return
        url = urlsplit(self.path)
        route = {
            wire.SAMPLES.name: self._samples,
            wire.TIME.name: self._time,
            wire.METRICS_PATH: self._metrics,
            wire.HEALTH.name: self._healthz,
        }.get(url.path)
        if route is None:
            self._json(404, wire.ERROR(error=f"no such endpoint: {url.path}"))
            return
        route(parse_qs(url.query))

    def _authorised(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, Any] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for header, header_value in (headers or {}).items():
            self.send_header(header, header_value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict[str, Any]) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self._send(status, body, "application/json")

    def _samples(self, query: dict[str, Any]) -> None:
        raw = (query.get("since") or ["0"])[-1]
        try:
            since = int(raw)
            if since < 0:
                raise ValueError
        except ValueError:
            self._json(400, wire.ERROR(error=f"since must be a non-negative integer, not {raw!r}"))
            return
        self._json(200, self.server.sampler.since(since))

    def _time(self, query: dict[str, Any]) -> None:
        self._json(200, wire.TIME(time=wall_clock()))

    def _healthz(self, query: dict[str, Any]) -> None:
        sampler = self.server.sampler
        latest = sampler.latest()
        gpus = latest["gpus"] if latest else []
        self._json(
            200,
            wire.HEALTH(
                status="ok",
                nvml=sampler.nvml_available,
                samples=sampler.count,
                host=sampler.hostname,
                boot=sampler.boot,
                interval_s=sampler.interval_s,
                gpus=len(gpus),
                lost_gpus=sum(1 for gpu in gpus if gpu.get("lost")),
                watching=latest["proc"]["pid"] if latest and latest.get("proc") else None,
                scrapes=sampler.scrape_states(),
            ),
        )

    def _metrics(self, query: dict[str, Any]) -> None:
        body = render_metrics(self.server.sampler).encode()
        self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")


# -- Prometheus text exposition -----------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, series: list[tuple[dict[str, Any], float | None]]) -> None:
        """One metric family; series whose value is None (unknown) are left out."""
        known = [(labels, value) for labels, value in series if value is not None]
        if not known:
            return
        full = PREFIX + name
        self.lines.append(f"# HELP {full} {help_text}")
        self.lines.append(f"# TYPE {full} {kind}")
        for labels, value in known:
            label_text = ",".join(f'{label}="{_escape(str(value))}"' for label, value in labels.items())
            self.lines.append(f"{full}{{{label_text}}} {float(value)!r}" if label_text else f"{full} {float(value)!r}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else round(percent / 100.0, 6)


def render_metrics(sampler: Sampler) -> str:
    """The latest sample as Prometheus text: bytes, seconds, watts, hertz, ratios 0–1."""
    latest = sampler.latest() or {}
    exposition = _Exposition()

    def one(
        key: str, convert: Callable[[float], float | None] = lambda value: value
    ) -> list[tuple[dict[str, Any], float | None]]:
        return [({}, None if latest.get(key) is None else convert(latest[key]))]

    exposition.family(
        "collector_samples_total", "counter", "Samples taken since the collector started.", [({}, sampler.count)]
    )
    exposition.family(
        "collector_missed_ticks_total",
        "counter",
        "Sampling ticks skipped because a sample ran past the next deadline.",
        [({}, sampler.missed_ticks)],
    )
    exposition.family(
        "collector_sample_duration_seconds", "gauge", "Wall time the last sample took.", [({}, sampler.last_sample_s)]
    )
    exposition.family(
        "collector_last_sample_timestamp_seconds",
        "gauge",
        "Unix time of the last sample on the collector's clock.",
        one("ts"),
    )
    exposition.family(
        "collector_nvml_available",
        "gauge",
        "1 when NVML answers, 0 otherwise.",
        [({}, 1 if sampler.nvml_available else 0)],
    )
    exposition.family(
        "cpu_utilization_ratio",
        "gauge",
        "Busy fraction of all CPU cores together over the last interval.",
        one("cpu_percent", _ratio),
    )
    exposition.family(
        "cpu_max_core_utilization_ratio",
        "gauge",
        "Busy fraction of the busiest CPU core over the last interval.",
        one("cpu_max_core_percent", _ratio),
    )
    exposition.family(
        "cpu_iowait_ratio", "gauge", "Fraction of CPU time waiting for I/O.", one("iowait_percent", _ratio)
    )
    exposition.family(
        "cpu_steal_ratio", "gauge", "Fraction of CPU time stolen by the hypervisor.", one("steal_percent", _ratio)
    )
    exposition.family(
        "memory_used_bytes", "gauge", "Host memory in use (total minus available).", one("mem_used_bytes")
    )
    exposition.family("memory_total_bytes", "gauge", "Host memory in total.", one("mem_total_bytes"))
    exposition.family("disk_read_bytes_total", "counter", "Bytes read from disks.", one("disk_read_bytes"))
    exposition.family("disk_written_bytes_total", "counter", "Bytes written to disks.", one("disk_write_bytes"))
    exposition.family("network_transmit_bytes_total", "counter", "Bytes sent on all interfaces.", one("net_sent_bytes"))
    exposition.family(
        "network_receive_bytes_total", "counter", "Bytes received on all interfaces.", one("net_recv_bytes")
    )
    proc = latest.get("proc")
    if proc:
        labels = {"pid": proc["pid"]}
        exposition.family(
            "process_cpu_ratio",
            "gauge",
            "CPU of the watched process and its children, in cores (1.0 = one core busy).",
            [(labels, _ratio(proc.get("cpu_percent")))],
        )
        exposition.family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the watched process and its children, summed.",
            [(labels, proc.get("rss_bytes"))],
        )
        exposition.family(
            "process_children", "gauge", "Live children of the watched process.", [(labels, proc.get("num_children"))]
        )
    gpus = latest.get("gpus") or []

    def per_gpu(
        key: str, convert: Callable[[float], float | None] = lambda value: value
    ) -> list[tuple[dict[str, Any], float | None]]:
        return [(_gpu_labels(gpu), None if gpu.get(key) is None else convert(gpu[key])) for gpu in gpus]

    exposition.family(
        "gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period in which one or more kernels ran on the GPU "
        "(NVML utilization.gpu). This is not SM occupancy: one small kernel running all "
        "the time reads 1.0.",
        per_gpu("util_percent", _ratio),
    )
    exposition.family("gpu_memory_used_bytes", "gauge", "GPU memory in use.", per_gpu("mem_used_bytes"))
    exposition.family("gpu_memory_total_bytes", "gauge", "GPU memory in total.", per_gpu("mem_total_bytes"))
    exposition.family("gpu_power_watts", "gauge", "GPU power draw.", per_gpu("power_w"))
    exposition.family("gpu_temperature_celsius", "gauge", "GPU core temperature.", per_gpu("temp_c"))
    exposition.family(
        "gpu_sm_clock_hertz", "gauge", "GPU SM clock.", per_gpu("sm_clock_mhz", lambda value: value * 1_000_000)
    )
    exposition.family(
        "gpu_process_memory_bytes",
        "gauge",
        "GPU memory held by the watched process and its children.",
        per_gpu("proc_mem_bytes"),
    )
    exposition.family(
        "gpu_lost",
        "gauge",
        "1 once the GPU stopped answering (its readings are gone).",
        [(_gpu_labels(gpu), 1 if gpu.get("lost") else 0) for gpu in gpus],
    )
    exposition.family(
        "gpu_clock_event_reason",
        "gauge",
        "1 for each reason the GPU's clocks are held down right now.",
        [
            (dict(_gpu_labels(gpu), reason=reason), 1)
            for gpu in gpus
            for reason in (gpu.get("clock_event_reasons") or [])
        ],
    )
    return exposition.text()


def _gpu_labels(gpu: dict[str, Any]) -> dict[str, Any]:
    mig = gpu.get("mig_index")
    return {"gpu": gpu.get("index"), "mig": "" if mig is None else mig, "uuid": gpu.get("uuid") or ""}
