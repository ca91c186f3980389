"""Locust's own OpenTelemetry (``--otel``, the otel extra) with tts-knee's locustfile: a run
against the simulator sends OTLP over HTTP, as the manual's live metrics page says to, to a
receiver here that decodes it with OpenTelemetry's own protobuf classes (no OpenTelemetry
Collector installs offline). Every attempt is one Locust request, so ``locust.client.duration``
counts the run's attempt records, and the run's log lines arrive as OTLP logs."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from procs import locust, read_jsonl, spawn

metrics_pb2 = pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
    reason="the otel extra is not installed (locust[otel], in the test extra)",
)
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2  # noqa: E402


class Receiver(ThreadingHTTPServer):
    """Takes OTLP/HTTP exports: ``bodies`` holds each path's request bodies, in order."""

    daemon_threads = True

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.bodies.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def receiver():
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def duration_counts(bodies: list[bytes]) -> list[int]:
    """``locust.client.duration``'s count (over its data points) in each metrics export."""
    counts = []
    for body in bodies:
        export = metrics_pb2.ExportMetricsServiceRequest.FromString(body)
        for rm in export.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "locust.client.duration":
                        counts.append(sum(p.count for p in m.histogram.data_points))
    return counts


def test_otel_sends_locusts_request_histogram_and_the_runs_logs(receiver, tmp_path):
    run_dir = tmp_path / "run"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "OTEL_SERVICE_NAME": "tts-knee",
    }
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "4"]) as sim:
        done = locust(
            ["--headless", "-H", sim.url, "--steps", "1,2", "--step-time", "2", "--run-dir", str(run_dir), "--otel"],
            env=env,
            timeout=90,
        )
    assert done.returncode == 0, done.stdout
    assert "OpenTelemetry enabled" in done.stdout and "Traceback" not in done.stdout
    records = read_jsonl(run_dir / "requests.jsonl")
    counts = duration_counts(receiver.bodies.get("/v1/metrics", []))
    # cumulative: the export at the process's exit holds every attempt
    assert counts and counts == sorted(counts) and counts[-1] == len(records) > 0, (counts, len(records))
    logs = [
        record.body.string_value
        for body in receiver.bodies.get("/v1/logs", [])
        for rl in logs_service_pb2.ExportLogsServiceRequest.FromString(body).resource_logs
        for sl in rl.scope_logs
        for record in sl.log_records
    ]
    assert any(line.startswith("run finished:") for line in logs), logs[-5:]
