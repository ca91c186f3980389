"""Writing the run directory without blocking the load.

On the master (or a local runner) every write to the run directory — ``requests.jsonl``,
``resources.jsonl``, ``run.json`` — goes through one :class:`DiskWriter`: one native thread
that appends each file's bytes in the order they were handed over (all that waits for a file
in one write), and replaces a whole file (the latest content wins) atomically. A disk that
stalls then holds up that thread only: neither the event loop, which times every request,
nor the Locust messages that carry the workers' records.

What waits to be written stays in memory (:attr:`DiskWriter.pending_bytes`); the record
writer stops the run once that passes ``locustfiles.shipping.MAX_PENDING_BYTES``, and
everything handed over is written before the node exits (:meth:`DiskWriter.drain`), so a
slow disk loses nothing. A write that fails (a full disk, an I/O error) is retried every
``RETRY_S`` and said once (``errors``) until it succeeds. A write slower than ``SLOW_WRITE_S``
is reported to :attr:`on_slow`'s listeners: the audio writer then leaves the event loop too.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import gevent
from gevent import monkey
from gevent.event import Event

from tts_knee import runformat

from .clock import mono

log = logging.getLogger("tts_knee.disk")

#: A failed write is tried again this often.
RETRY_S = 1.0
#: A write slower than this is the disk stalling.
SLOW_WRITE_S = 0.01
_sleep = monkey.get_original("time", "sleep")
_Empty = monkey.get_original("_queue", "Empty")


_APPEND, _REPLACE, _CLOSE = "append", "replace", "close"


class Job:
    """Bytes handed to the writer; ``done`` is set once they are on disk (in the event loop);
    ``on_done``, where set, is called just before, in the hub: it must not block."""

    __slots__ = ("path", "data", "kind", "done", "nbytes", "on_done")

    def __init__(self, path: Path, data: bytes, kind: str):
        self.path, self.data, self.kind = path, data, kind
        self.nbytes = len(data)
        self.done = Event()
        self.on_done: Callable[[], None] | None = None

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it was written, waiting (this greenlet only) at most ``timeout`` seconds."""
        return self.done.wait(timeout)


class DiskWriter:
    """One node's writer of its run directory (see the module doc)."""

    def __init__(self):
        self.pending_bytes = 0  # handed over, not yet written
        self.on_slow: list = []  # called (in the event loop) with the seconds a slow write took
        self.last: Job | None = None  # the latest job handed over
        self._jobs = monkey.get_original("_queue", "SimpleQueue")()
        self._done: collections.deque = collections.deque()  # (jobs, seconds, error) from the thread
        self._failing: set[str] = set()  # paths whose last write failed (said once)
        self._wake = gevent.get_hub().loop.async_()
        self._wake.ref = False  # type: ignore[attr-defined]  # gevent watchers have ref; its stubs lack it  # it keeps the loop alive only while a write is in flight
        self._wake.start(self._on_wake)
        self._in_flight = 0
        monkey.get_original("_thread", "start_new_thread")(self._run, ())

    def append(self, path: Path, data: bytes) -> Job:
        """Append ``data`` to ``path`` (created if need be) after what was handed before."""
        return self._hand(Job(Path(path), data, _APPEND))

    def replace(self, path: Path, text: str) -> Job:
        """Replace ``path`` with ``text`` atomically (runformat.write_text)."""
        return self._hand(Job(Path(path), text.encode(), _REPLACE))

    def close(self, path: Path) -> Job:
        """Close ``path`` once what was handed for it is written (the run is over)."""
        return self._hand(Job(Path(path), b"", _CLOSE))

    def _hand(self, job: Job) -> Job:
        self.pending_bytes += job.nbytes
        self.last = job
        self._in_flight += 1
        self._wake.ref = True  # type: ignore[attr-defined]
        self._jobs.put(job)
        return job

    def drain(self, timeout: float | None = None) -> bool:
        """Wait (this greenlet only) until everything handed over so far is written; False if
        ``timeout`` seconds passed first."""
        return self.last is None or self.last.wait(timeout)

    # ---- the writer thread: plain system calls, no gevent object but the watcher ---------
    def _run(self) -> None:
        fds: dict[Path, int] = {}
        while True:
            batch = [self._jobs.get()]
            while True:
                try:
                    batch.append(self._jobs.get_nowait())
                except _Empty:
                    break
            started = mono()
            pending, replaced, closing = _sorted(batch)
            self._write(fds, pending, replaced)
            for path in closing:
                fd = fds.pop(path, None)
                if fd is not None:
                    with contextlib.suppress(OSError):  # all was written; a late error of the close says nothing new
                        os.close(fd)
            self._done.append((batch, mono() - started, None))
            self._wake.send()

    def _write(self, fds: dict[Path, int], pending: list, replaced: dict[Path, bytes]) -> None:
        """Write it all, retrying every ``RETRY_S`` after an error (told once to the event loop)."""
        error = None
        while pending or replaced:
            try:
                while pending:
                    path, view = pending[0]
                    fd = fds.get(path)
                    if fd is None:
                        fd = fds[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    while view:
                        view = view[os.write(fd, view) :]
                    pending.pop(0)
                while replaced:
                    path, data = next(iter(replaced.items()))
                    runformat.write_text(path, data.decode())
                    del replaced[path]
            except OSError as failure:
                # path (and view, where pending) are bound before anything above can raise OSError
                if pending:  # what was written of it stays written
                    pending[0] = (pending[0][0], view)  # type: ignore[possibly-undefined]
                if error is None:
                    error = (str(path), failure.strerror or str(failure))  # type: ignore[possibly-undefined]
                    self._done.append(([], 0.0, error))
                    self._wake.send()
                _sleep(RETRY_S)

    # ---- back in the event loop -------------------------------------------------------------
    def _on_wake(self) -> None:
        # in the hub: what may block (logging, the listeners) goes to a greenlet of its own
        while self._done:
            jobs, took, error = self._done.popleft()
            if error is not None:
                where, why = error
                if where not in self._failing:
                    self._failing.add(where)
                    gevent.spawn(
                        log.error,
                        "cannot write %s: %s; what waits to be written (%.1f MB) is kept in "
                        "memory and retried every %g s",
                        where,
                        why,
                        self.pending_bytes / 1e6,
                        RETRY_S,
                    )
                continue
            for job in jobs:
                self.pending_bytes -= job.nbytes
                self._in_flight -= 1
                if str(job.path) in self._failing:
                    self._failing.discard(str(job.path))
                    gevent.spawn(log.warning, "%s is written again", job.path)
                if job.on_done is not None:
                    job.on_done()
                job.done.set()
            if took > SLOW_WRITE_S:
                for listener in self.on_slow:
                    gevent.spawn(listener, took)
        self._wake.ref = self._in_flight > 0  # type: ignore[attr-defined]


def _sorted(batch: list) -> tuple[list, dict, list]:
    """One write per file: ``(appends, replacements, files to close)``, each file's appends
    joined in order (``(path, memoryview)``), of its replacements the last."""
    appends: dict[Path, list[bytes]] = {}
    replaced: dict[Path, bytes] = {}
    closing = []
    for job in batch:
        if job.kind == _REPLACE:
            replaced[job.path] = job.data
        elif job.kind == _APPEND:
            appends.setdefault(job.path, []).append(job.data)
        else:
            closing.append(job.path)
    return [(path, memoryview(b"".join(parts))) for path, parts in appends.items()], replaced, closing
