"""Scrape Prometheus endpoints beside the sampler, never in its way.

Each endpoint has its own thread that fetches it once per interval with a timeout and keeps
the latest reading it completed (:mod:`collectors.exposition` turns the text into series).
The sampler only looks at those latest readings, so a slow endpoint cannot delay a sample.
A reading older than :func:`stale_after` is not used: an endpoint that is slow, unreachable or
answers with something that is not exposition text leaves a gap (its series absent from the
samples), with one warning when it goes and one note when it is back, never one per sample.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tts_knee.collectors.exposition import DEFAULT_MAX_SERIES, ExpositionError, Reader, parse
from tts_knee.runformat.metric_roles import labels_seen, parse_roles

log = logging.getLogger("collectors")

DEFAULT_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 32 * 1024 * 1024  # a metrics page larger than this is not read whole
USER_AGENT = "tts-knee-collector"


def stale_after(interval_s: float, timeout_s: float) -> float:
    """A reading older than this (seconds) is a gap: two intervals, or one scrape that took
    the whole timeout plus an interval."""
    return max(2.0 * interval_s, timeout_s + interval_s)


def fetch(url: str, timeout_s: float) -> str:
    """The body of ``GET url`` as text; raises OSError (urllib's errors are OSErrors)."""
    req = urllib.request.Request(
        url, headers={"User-Agent": USER_AGENT, "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - http(s) only
        body = resp.read(MAX_BODY_BYTES + 1)
        charset = resp.headers.get_content_charset() or "utf-8"
    if len(body) > MAX_BODY_BYTES:
        raise OSError(f"the page is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    text: str = body.decode(charset, "replace")
    return text


class Endpoint:
    """One endpoint scraped on its own thread; :meth:`latest` is the last completed reading.

    ``convert`` turns the exposition text and the monotonic time it was read into the reading
    kept (a :class:`Reader`'s ``read`` by default); it may raise :class:`ExpositionError`.
    """

    def __init__(
        self,
        url: str,
        interval_s: float,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        convert: Callable[[str, float], object] | None = None,
        what: str = "Scrape",
        reader: Reader | None = None,
    ):
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.what = what
        self.reader = reader or Reader()
        self._convert = convert or self.reader.read
        self._latest: tuple[float, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = "new"  # new | ok | down | bad
        self.scrapes = 0
        self.failures = 0
        self._dropped_noted: int | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"scrape {self.url}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def latest(self, now: float | None = None) -> Any:  # the convert's reading: figures, or GPUs
        """The last reading, or None when there is none newer than :func:`stale_after`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            got = self._latest
        if got is None or now - got[0] > stale_after(self.interval_s, self.timeout_s):
            return None
        return got[1]

    def scrape_once(self) -> None:
        """Fetch, convert and keep one reading; notes state changes once each."""
        t_send = time.monotonic()
        try:
            text = fetch(self.url, self.timeout_s)
        except (OSError, ValueError) as exc:  # ValueError: a URL urllib cannot use
            self._failed(
                "down",
                f"{self.what} {self.url} is unreachable ({_reason(exc)}); its series are a gap until it answers.",
            )
            return
        scraped_at = (t_send + time.monotonic()) / 2
        try:
            reading = self._convert(text, scraped_at)
        except ExpositionError as exc:
            self._failed(
                "bad",
                f"{self.what} {self.url} did not answer with Prometheus text "
                f"exposition ({exc}); its series are a gap until it does.",
            )
            return
        with self._lock:
            self._latest = (time.monotonic(), reading)
        self.scrapes += 1
        if self.state in ("down", "bad"):
            log.warning("%s %s answers again.", self.what, self.url)
        self.state = "ok"
        dropped = self.reader.dropped
        if dropped and self._dropped_noted is None:
            log.warning(
                "%s %s has more than %d series; %d were left out (use --scrape-match "
                "to choose, or --scrape-max-series).",
                self.what,
                self.url,
                self.reader.max_series,
                dropped,
            )
        self._dropped_noted = dropped if dropped else self._dropped_noted

    def _failed(self, state: str, message: str) -> None:
        self.failures += 1
        if self.state != state:
            log.warning("%s", message)
        self.state = state

    def _run(self) -> None:
        start = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            try:
                self.scrape_once()
            except Exception:  # noqa: BLE001 - a bug in one reading must not end the thread
                log.exception("Scraping %s failed; trying again.", self.url)
            tick = max(tick + 1, int((time.monotonic() - start) / self.interval_s) + 1)
            self._stop.wait(max(0.0, start + tick * self.interval_s - time.monotonic()))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return "timed out" if "timed out" in text else text


class Scrapes:
    """The ``--scrape`` endpoints; :meth:`metrics` merges their latest readings.

    Two endpoints giving the same series: the first endpoint's value is kept, and that is said
    once.
    """

    def __init__(
        self,
        urls: list[str],
        interval_s: float,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        match: str | None = None,
        max_series: int = DEFAULT_MAX_SERIES,
        server_roles: list[str] | None = None,
        stage_label: str | None = None,
    ):
        gap = stale_after(interval_s, timeout_s)  # a rate spans at most what a reading is fresh for
        self.server_roles = list(server_roles or [])  # --server-role as given; the samples' answer says them
        self.stage_label = stage_label  # --server-stage-label, said to the master the same way
        roles = parse_roles(self.server_roles)
        self.endpoints = [
            Endpoint(url, interval_s, timeout_s, reader=Reader(match, max_series, max_gap_s=gap, roles=roles))
            for url in urls
        ]
        self._clash_noted = False

    def told(self) -> dict[str, Any]:
        """What the samples' answer tells the master of these series: --server-role, --server-stage-label."""
        return {
            **({"server_roles": self.server_roles} if self.server_roles else {}),
            **({"server_stage_label": self.stage_label} if self.stage_label else {}),
        }

    def missing_label(self) -> str | None:
        """With --server-stage-label, one fetch of each endpoint: the sentence saying that no series
        carries the label, naming the labels there; None when one does, or none answered."""
        if not self.stage_label:
            return None
        seen: set[str] = set()
        answered = False
        for endpoint in self.endpoints:
            try:
                seen.update(labels_seen(sample.key for sample in parse(fetch(endpoint.url, endpoint.timeout_s))))
                answered = True
            except (OSError, ValueError):  # unreachable or not exposition: said once it runs
                continue
        if not answered or self.stage_label in seen:
            return None
        return (
            f"--server-stage-label {self.stage_label}: no series of {', '.join(each.url for each in self.endpoints)} "
            f"carries that label (the labels there: {', '.join(sorted(seen)) or 'none'})"
        )

    def start(self) -> None:
        for endpoint in self.endpoints:
            endpoint.start()

    def stop(self) -> None:
        for endpoint in self.endpoints:
            endpoint.stop(timeout=0)  # tell them all first, then wait for each
        for endpoint in self.endpoints:
            endpoint.stop()

    def metrics(self) -> dict[str, float] | None:
        """``{series: value}`` of every endpoint with a fresh reading; None when none has one
        (the sample's ``metrics`` is then null: unknown, not empty)."""
        now = time.monotonic()
        out: dict[str, float] = {}
        fresh = False
        for endpoint in self.endpoints:
            reading = endpoint.latest(now)
            if reading is None:
                continue
            fresh = True
            for series, value in reading.items():
                if series in out:
                    if not self._clash_noted:
                        self._clash_noted = True
                        log.warning(
                            "Series %s comes from more than one --scrape endpoint; the first endpoint's value is kept.",
                            series,
                        )
                    continue
                out[series] = value
        return out if fresh else None
