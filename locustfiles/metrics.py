"""Live metrics (``--metrics-port``): the master, or the local runner, serves the run's figures as
Prometheus text while it runs. See docs/live-metrics.md; the series are declared in
:mod:`runformat.live_series`.

They are fed where the figures already arrive: the run's record writer hands over every batch
of attempt records it takes (a worker's batches on the master), and the judge every verdict, so
a worker spends nothing more per attempt. A step's wait and TTFA histograms count the attempts
that the step's figures in summary.json describe, so that a quantile read from them is the
report's. The text is written here rather than by prometheus_client: a sweep's histograms are
thousands of bucket lines, which prometheus_client formats anew at every scrape (38 ms measured
for a 10-step sweep's, the master's event loop stalled meanwhile); here a series' lines are
formatted again only when it has changed, so a finished step's are not formatted again.
"""

from __future__ import annotations

import argparse
import logging
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent import pywsgi

from tts_knee.analysis.steps import THROTTLE_STATUSES
from tts_knee.runformat import live_series as series
from tts_knee.runformat.options import CUT_BY_RUN_END
from tts_knee.runformat.schema import Attempt

from .clock import mono
from .step import Step

log = logging.getLogger("tts_knee.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: After the run, how long the process waits for the scraper's next visit (so that the run's
#: last figures reach it): this many of the intervals seen between its visits, at most LAST_SCRAPE_MAX_S.
LAST_SCRAPE_INTERVALS = 2.0
LAST_SCRAPE_MAX_S = 30.0
LAST_SCRAPE_POLL_S = 0.05

Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(names: Iterable[str], values: Iterable[str]) -> str:
    return ",".join(f'{name}="{_escape(value)}"' for name, value in zip(names, values))


def _number(value: float) -> str:
    """A sample value or bucket edge as the text format writes it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass
class _Histogram:
    """One labelled histogram: counts per bucket (the last one +Inf), their sum, and its lines
    as last written (``text``, for ``written`` observations)."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    text: str = ""
    written: int = -1

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.edges) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.edges, value)] += 1  # the first edge at or above the value
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str, edge_text: tuple[str, ...]) -> str:
        if self.written != self.count:
            sep = "," if labels else ""
            out, cumulative = [], 0
            for edge, bucket_count in zip(edge_text, self.counts):
                cumulative += bucket_count
                out.append(f'{name}_bucket{{{labels}{sep}le="{edge}"}} {cumulative}\n')
            braces = f"{{{labels}}}" if labels else ""
            out.append(f"{name}_sum{braces} {_number(self.total)}\n{name}_count{braces} {self.count}\n")
            self.text, self.written = "".join(out), self.count
        return self.text


class _Family:
    """One declared series and its labelled values (gauges, counters) or histograms."""

    def __init__(self, declared: series.Series):
        self.declared = declared
        self.values: dict[Labels, float] = {}
        self.histograms: dict[Labels, _Histogram] = {}
        self._edge_text = tuple(_number(edge) for edge in declared.buckets) + ("+Inf",)

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def observe(self, labels: Labels, value: float) -> None:
        histogram = self.histograms.get(labels)
        if histogram is None:
            histogram = self.histograms[labels] = _Histogram(self.declared.buckets)
        histogram.observe(value)

    def clear(self) -> None:
        self.values.clear()
        self.histograms.clear()

    def text(self) -> str:
        declared = self.declared
        if not self.values and not self.histograms:
            return ""
        name = declared.full_name
        head = f"# HELP {name} {declared.help}\n# TYPE {name} {declared.kind}\n"
        if declared.kind == "histogram":
            return head + "".join(
                histogram.lines(name, _label_text(declared.labels, labels), self._edge_text)
                for labels, histogram in self.histograms.items()
            )
        body = []
        for labels, value in self.values.items():
            label_text = _label_text(declared.labels, labels)
            body.append(f"{name}{{{label_text}}} {_number(value)}\n" if label_text else f"{name} {_number(value)}\n")
        return head + "".join(body)


def _status(record: Attempt) -> str:
    """The status label: the HTTP status, the gRPC code name, conn_error for no answer."""
    status = record.get("status")
    if status is None:
        return "" if record.get("error") == CUT_BY_RUN_END else "conn_error"
    return str(status)


def _outcome(record: Attempt) -> str:
    if record.get("error") == CUT_BY_RUN_END:
        return "cut_by_run_end"
    if record["ok"]:
        return "ok"
    return "throttled" if record.get("status") in THROTTLE_STATUSES else "failed"


def _end(record: Attempt) -> float | None:
    """When the attempt was done, as the reader takes it: t3, else t2, else t0 + wait."""
    if (written_at := record.get("t3")) is not None:
        return float(written_at)
    if (received_at := record.get("t2")) is not None:
        return float(received_at)
    if (sent_at := record.get("t0")) is not None and (wait_ms := record.get("wait_ms")) is not None:
        return float(sent_at) + float(wait_ms) / 1000.0
    return None


class LiveMetrics:
    """The figures served: reset at each run, fed by the run's steps, records and judge."""

    def __init__(self, users: Callable[[], int] | None = None):
        self._users = users
        self._families = {declared.name: _Family(declared) for declared in series.SERIES}
        self._steps: dict[int, Step] = {}
        self._streamed = False
        self.scrapes = 0
        self._scraped_at: list[float] = []  # the latest two visits (monotonic s)

    def _family(self, declared: series.Series) -> _Family:
        return self._families[declared.name]

    def start_run(self, run_id: str, streamed: bool) -> None:
        """A new run (a web-UI session can hold several): its figures start from nothing."""
        for family in self._families.values():
            family.clear()
        self._steps = {}
        self._streamed = streamed
        self._family(series.RUN_INFO).set((run_id,), 1)
        self._family(series.STEP).set((), 0)

    def begin_step(self, step: Step) -> None:
        self._steps[step.step] = step
        self._family(series.STEP).set((), step.step)
        self._family(series.STEP_START).set((), step.start)
        if step.rate is None:
            self._family(series.STEP_CONCURRENCY).set((), step.concurrency)
            self._family(series.STEP_RATE).values.clear()
        else:
            self._family(series.STEP_RATE).set((), step.rate)
            self._family(series.STEP_CONCURRENCY).values.clear()
        rate = "" if step.rate is None else _number(step.rate)
        concurrency = "" if step.rate is not None else str(step.concurrency)
        self._family(series.STEP_INFO).set((str(step.step), step.phase, concurrency, rate), 1)

    def observe(self, records: list[Attempt]) -> None:
        """Attempt records as the run's writer takes them."""
        attempts, requests = self._family(series.ATTEMPTS), self._family(series.REQUESTS)
        retries, retry_after = self._family(series.RETRIES), self._family(series.RETRY_AFTER)
        for record in records:
            step = (str(record["step"]),)
            outcome = _outcome(record)
            attempts.inc((step[0], outcome, _status(record)))
            if record["final"]:
                requests.inc((step[0], outcome))
            if (record.get("attempt") or 1) > 1:
                retries.inc(step)
            if (retry_after_s := record.get("retry_after_s")) is not None:
                retry_after.observe(step, float(retry_after_s))
            if record["final"] and record["ok"] and record.get("settled", True):
                self._described(record, step)

    def _described(self, record: Attempt, step: Labels) -> None:
        """A settled, final, successful attempt: into the step's figures, as summary.json
        counts them (analysis.steps): streams that finished after their step ended are left
        out, and in a streamed run the latency figures leave them out too; a cancelled
        utterance has no latency figure."""
        begun = self._steps.get(record["step"])  # type: ignore[arg-type]  # None (before the first step) finds none
        end = _end(record)
        cut = begun is not None and begun.end is not None and end is not None and end > begun.end
        wait_ms = record.get("wait_ms")
        if wait_ms is not None and record.get("cancel_ms") is None and not (cut and self._streamed):
            self._family(series.WAIT).observe(step, wait_ms / 1000.0)
        if cut:
            return
        if (ttfa_ms := record.get("ttfa_ms")) is not None:
            self._family(series.TTFA).observe(step, ttfa_ms / 1000.0)
        if (underruns := record.get("underruns")) is not None:
            self._family(series.UNDERRUNS).inc(step, underruns)
            self._family(series.UNDERRUN).observe(step, (record.get("underrun_ms") or 0.0) / 1000.0)

    def observe_judged(self, entry: Mapping[str, Any]) -> None:
        """A speech.jsonl line as the judge writes it."""
        step = (str(entry["step"]),)
        error_rate = series.ERROR_RATES.get(entry.get("metric") or "")
        if error_rate is not None and entry.get("error") is not None:
            self._family(error_rate).observe(step, float(entry["error"]))
        for key, declared in series.JUDGED_FIGURES.items():
            if entry.get(key) is not None:
                self._family(declared).observe(step, float(entry[key]))

    def text(self) -> str:
        """The exposition (a scrape); counts the visit."""
        if self._users is not None:
            self._family(series.USERS).set((), self._users())
        self.scrapes += 1
        self._scraped_at = [*self._scraped_at[-1:], mono()]
        return "".join(family.text() for family in self._families.values())

    def wait_for_scrape(self) -> None:
        """Wait (bounded) for the scraper's next visit, once it has visited at least twice:
        the run has ended, and its last figures should reach it before the process exits."""
        if len(self._scraped_at) < 2:
            return
        interval = self._scraped_at[1] - self._scraped_at[0]
        deadline = mono() + min(LAST_SCRAPE_MAX_S, LAST_SCRAPE_INTERVALS * interval)
        seen = self.scrapes
        while self.scrapes == seen and mono() < deadline:
            gevent.sleep(LAST_SCRAPE_POLL_S)


def listen(options: argparse.Namespace | None, users: Callable[[], int]) -> tuple[LiveMetrics | None, str | None]:
    """Serve ``--metrics-port`` on ``--metrics-host`` when a port is given: the metrics and None,
    or None and why not (one sentence); (None, None) without the option."""
    port, host = getattr(options, "metrics_port", 0) or 0, getattr(options, "metrics_host", "") or "127.0.0.1"
    if not port:
        return None, None
    if not 0 < port < 65536:
        return None, f"--metrics-port must be a TCP port from 1 to 65535, got {port}"
    metrics = LiveMetrics(users)
    server = pywsgi.WSGIServer((host, port), _app(metrics), log=None, error_log=log)
    try:
        server.start()
    except OSError as error:
        return None, f"--metrics-port: cannot listen on {host}:{port} ({error.strerror or error}); give a free port"
    shown = f"[{host}]" if ":" in host else host
    log.info("live metrics: listening on http://%s:%d/metrics", shown, port)
    return metrics, None


def _app(metrics: LiveMetrics) -> Callable[[dict[str, Any], Callable[..., object]], list[bytes]]:
    """The WSGI app: /metrics (and /) answers the text, anything else 404."""

    def app(environ: dict[str, Any], start_response: Callable[..., object]) -> list[bytes]:
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: the metrics are at /metrics\n"]
        body = metrics.text().encode()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    return app
