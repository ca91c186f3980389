"""Writing the audio an attempt received: each file written over, in the event loop while the
disk keeps up, on one native thread once it has not. On the thread a user waits at most
``AUDIO_WAIT_S`` for its file and at most ``AUDIO_QUEUE_BYTES`` wait to be written: a file not
written in time is not missing silently, its attempt's record says ``audio_file`` "late" (still
written once the disk gets to it) or "dropped" (not written: too much was waiting already)."""

from __future__ import annotations

import collections
import logging
import os

import gevent
from gevent import monkey
from gevent.event import Event

from .clock import mono

log = logging.getLogger("tts_knee")

#: Most buffers one writev takes.
_IOV_MAX = os.sysconf("SC_IOV_MAX")
#: A write that takes longer than this is the disk stalling: from then on the node's audio is
#: written on a thread.
WRITE_STALL_S = 0.01
#: Longest a user waits for its file once audio is written on the thread.
AUDIO_WAIT_S = 1.0
#: Most audio bytes waiting for the disk; a file beyond is dropped.
AUDIO_QUEUE_BYTES = 64 << 20


class AudioMissing(Exception):
    """The file was not written in time: ``kind`` is "late" (it waits for the disk still) or
    "dropped" (it was not queued)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class AudioWriter:
    """Writes this node's audio files. A write over a file of about its own length takes tens
    of microseconds, less than handing it to a thread and back (which, with the event loop
    busy, also cost milliseconds of waiting for the GIL that write_ms then showed), so it is
    done at once. Once one write takes longer than WRITE_STALL_S, every later one goes to
    :class:`_WriterThread`, so that a disk that stalls delays only the users waiting for their
    files (their t3, where client_io shows) and not the event loop, which would put the stall
    into every other user's wait_ms."""

    def __init__(self):
        self._thread: _WriterThread | None = None

    def stalled(self, seconds: float) -> None:
        """Another write to this disk took ``seconds`` (the run directory's writer says so):
        write on the thread from now on, before an audio write stalls the event loop."""
        if self._thread is None:
            log.warning(
                "a write to the run directory took %.0f ms; audio is written on a thread from now on", seconds * 1000
            )
            self._thread = _WriterThread()

    def write(self, path: str, data: list) -> None:
        """Write the buffers ``data``, in order, to ``path`` and return once it is closed;
        raises what writing raised, or :class:`AudioMissing`."""
        if self._thread is not None:
            self._thread.write(path, data)
            return
        started = mono()
        try:
            _write_over(path, data)
        finally:
            took = mono() - started
            if took > WRITE_STALL_S:
                log.warning("writing an audio file took %.0f ms; audio is written on a thread from now on", took * 1000)
                self._thread = _WriterThread()


class _WriterThread:
    """Writes audio files on one native thread. Cheaper than gevent's threadpool (about 30 us
    a file against 90 us): a plain queue, one async watcher."""

    def __init__(self):
        self._jobs = monkey.get_original("_queue", "SimpleQueue")()
        self._done: collections.deque = collections.deque()
        self._queued = 0  # bytes handed to the thread, not yet written
        self._wake = gevent.get_hub().loop.async_()
        self._wake.ref = False  # type: ignore[attr-defined]  # gevent watchers have ref; its stubs lack it  # never what keeps the process alive
        self._wake.start(self._on_wake)
        monkey.get_original("_thread", "start_new_thread")(self._run, ())

    def write(self, path: str, data: list) -> None:
        """Write the buffers ``data``, in order, to ``path`` and return once it is closed;
        raises what writing raised, or :class:`AudioMissing` when that takes too long."""
        size = sum(len(buffer) for buffer in data)
        if self._queued + size > AUDIO_QUEUE_BYTES:
            raise AudioMissing("dropped")
        self._queued += size
        job = _Job(size)
        self._jobs.put((path, data, job))
        if not job.done.wait(AUDIO_WAIT_S):
            raise AudioMissing("late")
        if job.error is not None:
            raise job.error

    def _run(self) -> None:  # the writer thread: never touches gevent objects but the watcher
        while True:
            path, data, job = self._jobs.get()
            try:
                _write_over(path, data)
            except Exception as error:  # handed to the waiting user: this thread must not die
                job.error = error
            self._done.append(job)
            self._wake.send()

    def _on_wake(self) -> None:
        while self._done:
            job = self._done.popleft()
            self._queued -= job.size
            job.done.set()


class _Job:
    """One file handed to the writer thread: set ``done`` once written (``error``: what
    writing raised)."""

    __slots__ = ("done", "error", "size")

    def __init__(self, size: int) -> None:
        self.done = Event()
        self.error: Exception | None = None
        self.size = size


def writer(node) -> AudioWriter:
    """The node's one audio writer, made for the first file it writes; it hears of the run
    directory's slow writes (the same disk, by default)."""
    if node.audio_writer is None:
        node.audio_writer = AudioWriter()
        if node.disk is not None:
            node.disk.on_slow.append(node.audio_writer.stalled)
    return node.audio_writer


def _write_over(path: str, data: list) -> None:
    """Write the buffers ``data`` as the whole content of ``path``, reusing the file's blocks;
    gathered in one system call, so a body read in blocks is never joined first.

    Opening with O_TRUNC, or unlinking first, frees the old blocks and makes ext4 allocate
    and flush anew on close (its replace-by-truncate heuristic, plus a discard on this kind
    of mount): about 350 us per file against 20-70 us for writing over and trimming the tail.
    """
    views = [memoryview(buffer) for buffer in data if len(buffer)]
    size = sum(len(view) for view in views)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view_index = 0
        while view_index < len(views):
            written = os.writev(fd, views[view_index : view_index + _IOV_MAX])
            while view_index < len(views) and written >= len(views[view_index]):
                written -= len(views[view_index])
                view_index += 1
            if written:
                views[view_index] = views[view_index][written:]
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
