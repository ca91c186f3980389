"""The live view: the report, regenerated as the run directory grows.

:class:`LiveView` is framework-neutral, ``handle(path) -> (status, content type, body)`` with
``path`` relative to where it is mounted (mount it under a prefix that ends in ``/``: the page
uses relative links).  Only fixed routes exist, so nothing outside the run directories (and
nothing inside them but what the dashboard makes) can be fetched:

- ``/`` - the report of the run (or the comparison of several runs), with a small script that
  polls ``version`` every ``POLL_S`` seconds and reloads the page when the data changed;
- ``/runs/<i>/`` - the report of the i-th run when several are served;
- ``/plotly.min.js``, ``/version``, ``/summary.json`` (of ``/`` - a list when several runs);
- ``/steps.json`` - the first run's step rows for Locust's web UI tab (:func:`dashboard.table.tab_rows`).

Pages are cached by the files' sizes and mtimes and rebuilt at most every ``MIN_REBUILD_S``. A
refresh reads only what was appended to the run's files, and the analysis keeps what it can
from one refresh to the next (``RunDir(live=True)``, :mod:`analysis.incremental`), so it costs
about as much at a million attempts as at ten thousand (``bench/live_view.py``).
:func:`serve` wraps it in a stdlib ``ThreadingHTTPServer``; :class:`LiveProcess` runs that in a
process of its own for the load generator's web UI (``python -m tts_knee.dashboard.serve RUN``), so
that a refresh never holds the event loop the users are timed on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from plotly.offline import get_plotlyjs

from tts_knee import runformat
from tts_knee.analysis.summary import analyze
from tts_knee.runformat.reader import RunDir, RunDirError
from tts_knee.runformat.summary import Summary

from .compare import compare_html
from .kit import esc, page
from .report import report_html
from .table import tab_rows

POLL_S = 5
MIN_REBUILD_S = 2.0
_RUN_ROUTE = re.compile(r"^/runs/(\d{1,4})/(?:index\.html)?$")
_CLIP_ROUTE = re.compile(r"^/(?:runs/(\d+)/)?speech/([A-Za-z0-9_.-]+\.wav)$")
_HTML = "text/html; charset=utf-8"


def _live_script(prefix: str) -> str:
    return (
        f"<script>(function(){{var v=null;function poll(){{fetch('{prefix}version',{{cache:'no-store'}})"
        f".then(function(r){{return r.text()}}).then(function(t){{if(v!==null&&t!==v){{location.reload()}}"
        f"v=t}}).catch(function(){{}})}}poll();setInterval(poll,{POLL_S * 1000})}})();</script>"
    )


class LiveView:
    """Serves the reports of ``run_dirs`` at fixed routes, rebuilding them when files change."""

    def __init__(self, run_dirs: list[Path]):
        self.runs = [RunDir(Path(path), live=True) for path in run_dirs]
        self._lock = threading.Lock()
        self._key: tuple[tuple[int, int] | None, ...] | None = None
        self._built_at = 0.0
        # each run's summary; why it could not be analysed; None before its first records
        self._summaries: list[Summary | str | None] = []
        self._pages: dict[str, bytes] = {}
        self._plotlyjs: bytes | None = None

    def _file_key(self) -> tuple[tuple[int, int] | None, ...]:
        key: list[tuple[int, int] | None] = []
        for rd in self.runs:
            for name in (runformat.RUN_JSON, runformat.REQUESTS, runformat.RESOURCES):
                try:
                    stat_result = (rd.path / name).stat()
                    key.append((stat_result.st_size, stat_result.st_mtime_ns))
                except OSError:
                    key.append(None)
        return tuple(key)

    def _refresh(self) -> None:
        with self._lock:
            key = self._file_key()
            if key == self._key or (self._key is not None and time.monotonic() - self._built_at < MIN_REBUILD_S):
                return
            summaries: list[Summary | str | None] = []
            for rd in self.runs:
                try:
                    rd.refresh()
                    if rd.format_error:
                        raise RunDirError(rd.format_error)
                    summaries.append(analyze(rd) if len(rd.requests.attempts()) else None)
                except RunDirError as error:  # a malformed run.json is shown, not served as a crash
                    summaries.append(str(error))
            self._summaries = summaries
            self._pages = {}
            self._key = key
            self._built_at = time.monotonic()

    def version(self) -> str:
        return str(abs(hash(self._key)))

    def _run_page(self, index: int, prefix: str) -> bytes:
        rd, summary = self.runs[index], self._summaries[index]
        script = _live_script(prefix)
        if summary is None:
            return page(
                "tts-knee",
                f"<h1>tts-knee &middot; {esc(rd.path.name)}</h1><p>Waiting for the first "
                f"attempt records in {esc(rd.path)}&hellip;</p>{script}",
            ).encode()
        if isinstance(summary, str):
            return page(
                "tts-knee",
                f"<h1>tts-knee</h1><p class='warn'>Could not analyse {esc(rd.path.name)}: {esc(summary)}</p>{script}",
            ).encode()
        return report_html(rd, summary, plotlyjs=f"{prefix}plotly.min.js", live_script=script).encode()

    def handle(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path`` relative to the mount point."""
        path = path.split("?", 1)[0].split("#", 1)[0] or "/"
        if path == "/plotly.min.js":
            if self._plotlyjs is None:
                self._plotlyjs = get_plotlyjs().encode()
            return 200, "application/javascript; charset=utf-8", self._plotlyjs
        clip = _CLIP_ROUTE.match(path)
        if clip:  # a judged clip, for the speech section's players
            index = int(clip.group(1) or 0)
            if index >= len(self.runs):
                return 404, "text/plain; charset=utf-8", b"not found\n"
            try:
                return 200, "audio/wav", (self.runs[index].path / runformat.SPEECH_DIR / clip.group(2)).read_bytes()
            except OSError:
                return 404, "text/plain; charset=utf-8", b"not found\n"
        if path not in ("/", "/index.html", "/version", "/summary.json", "/steps.json") and not _RUN_ROUTE.match(path):
            return 404, "text/plain; charset=utf-8", b"not found\n"
        self._refresh()
        if path == "/version":
            return 200, "text/plain; charset=utf-8", self.version().encode()
        if path == "/steps.json":
            summary = self._summaries[0] if self._summaries else None
            return (
                200,
                "application/json",
                json.dumps(tab_rows(summary) if summary and not isinstance(summary, str) else []).encode(),
            )
        if path == "/summary.json":
            served = [{"error": summary} if isinstance(summary, str) else summary for summary in self._summaries]
            body = served[0] if len(self.runs) == 1 else served
            return 200, "application/json", json.dumps(body).encode()
        run_route = _RUN_ROUTE.match(path)
        if run_route:
            index = int(run_route.group(1))
            if index >= len(self.runs):
                return 404, "text/plain; charset=utf-8", b"not found\n"
            return 200, _HTML, self._cached(path, lambda: self._run_page(index, "../../"))
        if len(self.runs) == 1:
            return 200, _HTML, self._cached("/", lambda: self._run_page(0, ""))
        return 200, _HTML, self._cached("/", self._compare_page)

    def _cached(self, key: str, build) -> bytes:
        body = self._pages.get(key)
        if body is None:
            body = self._pages[key] = build()
        return body

    def _compare_page(self) -> bytes:
        analysed = [summary for summary in self._summaries if summary and not isinstance(summary, str)]
        links = (
            "<p>"
            + " &middot; ".join(
                f"<a href='runs/{index}/'>{esc(rd.path.name)}</a>" for index, rd in enumerate(self.runs)
            )
            + "</p>"
        )
        if not analysed:
            return page(
                "tts-knee", f"<h1>tts-knee</h1>{links}<p>Waiting for attempt records&hellip;</p>{_live_script('')}"
            ).encode()
        return compare_html(analysed, plotlyjs="plotly.min.js", live_script=_live_script(""), links=links).encode()


class _Handler(BaseHTTPRequestHandler):
    view: LiveView

    def do_GET(self):  # noqa: N802 (http.server's naming)
        status, ctype, body = self.view.handle(self.path)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store" if ctype.startswith("text") else "max-age=3600")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # quiet: the terminal shows the URL, not every poll
        pass


class ServeError(Exception):
    """The live view cannot listen; the message is one sentence for the user."""


def serve(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve the live view until interrupted; prints ``listening on http://HOST:PORT`` first.

    Raises :class:`ServeError` when the address cannot be listened on (port in use, an address
    that is not this host's, a name that does not resolve).
    """
    handler = type("Handler", (_Handler,), {"view": LiveView(run_dirs)})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except (OSError, OverflowError) as error:  # OverflowError: a port outside 0-65535
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise ServeError(f"cannot listen on {host}:{port}: {reason}.") from None
    server.daemon_threads = True
    bound_host, bound_port = server.server_address[:2]
    assert isinstance(bound_host, str)  # an address of AF_INET(6): the type also has AF_UNIX's bytes
    # one write, newline included: a log line from another thread cannot land inside it
    print(f"listening on http://{bound_host}:{bound_port}\n", end="", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


class LiveProcess:
    """The live view of ``run_dirs`` served by a child process on loopback, with
    :class:`LiveView`'s ``handle``: a refresh of a large run takes tenths of a second of CPU, which
    in the load generator's own process would hold the event loop its users are timed on. The
    child runs at nice 10 and ends when this process closes it or goes away (its stdin closes)."""

    def __init__(self, run_dirs: list[Path], timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tts_knee.dashboard.serve", *map(str, run_dirs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.nice(10),
        )
        assert self.proc.stdout is not None  # stdout=PIPE
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        self.url = line.removeprefix("listening on ") if line.startswith("listening on http://") else None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def handle(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``, as :meth:`LiveView.handle`."""
        if self.url is None or self.proc.poll() is not None:
            return 503, "text/plain; charset=utf-8", b"the live view's process is not running\n"
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout_s) as answer:
                return answer.status, answer.headers.get("Content-Type", "text/plain"), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Content-Type", "text/plain"), error.read()
        except OSError as error:
            return 503, "text/plain; charset=utf-8", f"the live view did not answer: {error}\n".encode()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:  # both PIPE
                pipe.close()


def _main(argv: list[str]) -> None:
    """The child of :class:`LiveProcess`: serve the runs on a free loopback port until stdin closes."""

    def _orphaned():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=_orphaned, daemon=True).start()
    try:
        serve([Path(path) for path in argv], "127.0.0.1", 0)
    except ServeError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _main(sys.argv[1:])
