"""The TTS user: one user is one in-flight request, sent back to back with no wait time; and the
attempt path it shares with the open-loop user (locustfiles/openloop_user.py), :class:`Caller`.

Each attempt is timed on the monotonic clock — ``t0`` before sending, ``t1`` at the first body
byte, ``t2`` when the body is read, ``t3`` when the audio is written and closed — and becomes
one record and one Locust request event. 429/5xx are retried per the retry policy. The body is
read block by block and parsed as it comes (locustfiles/stream.py), so the first audio sample,
each arrival of audio and the playback it allows are timed too.
"""
from __future__ import annotations

import collections
import dataclasses
import errno
import os
import random
import socket
from http.client import HTTPException
from pathlib import Path
from urllib.parse import urlsplit

import gevent
from gevent import monkey
from gevent.event import Event
from geventhttpclient import HTTPClient
from locust import User, constant, task
from locust.exception import StopUser

import runformat

from . import audio as audio_mod
from . import stream as stream_mod
from .clock import mono, wall
from .corpus import split
from .headers import header, parse_retry_after, parse_server_timing

ERROR_BODY_CHARS = 200
#: Bytes asked of the socket per read. geventhttpclient's default (4 KiB) costs a recv and a
#: parser call per 4 KiB, which for a few hundred KiB of audio was a fifth of the user's CPU.
READ_BLOCK_BYTES = 64 * 1024


#: The streaming fields of an attempt whose body was not parsed (an error status, no answer).
_NO_STREAM = dict.fromkeys(runformat.ATTEMPT_STREAM)


class AttemptFailed(Exception):
    """What Locust shows for a failed attempt: the reason, in one line."""


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0, 3)


def _error_text(status: int, body: bytes) -> str:
    snippet = " ".join(body[:ERROR_BODY_CHARS].decode("utf-8", "replace").split())
    return f"HTTP {status}" + (f": {snippet}" if snippet else "")


class Caller:
    """One connection to the TTS endpoint and the attempt path: sends a text (its segments, each
    with its attempts and retries), records every attempt and fires its Locust request event.
    The closed-loop user owns one; the open-loop user one per request in flight."""

    def __init__(self, user: User, no: int):
        self.environment = user.environment
        self.run = user.environment.tts_knee.run
        self.s = self.run.settings
        self.no = no
        self.rng = random.Random()
        parts = urlsplit(self.s.host)
        self._client_args = dict(
            host=parts.hostname, port=parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https", concurrency=1, block_size=READ_BLOCK_BYTES,
            connection_timeout=self.s.connect_timeout_s, network_timeout=self.s.request_timeout_s,
            headers={"Content-Type": "application/json; charset=utf-8", "User-Agent": "tts-knee",
                     "Accept": "text/event-stream" if self.s.stream_format == "sse"
                     else "audio/*, application/octet-stream"},
        )
        self.http = HTTPClient(**self._client_args)

    def close(self) -> None:
        self.http.close()

    def send(self, text, seq: int, sent: dict | None = None) -> None:
        """Send ``text`` as request number ``seq`` of this caller's user. ``sent`` (open loop):
        the step it was scheduled in, its ``scheduled`` time and the ``concurrency`` at sending,
        which the records carry instead of the step running when each attempt starts."""
        segments = split(text.text, self.s.split_max_chars)
        base_id = f"{self.run.worker_tag}-{self.no}-{seq}"
        parts: list[tuple[bytes, audio_mod.Audio]] = []
        for k, segment in enumerate(segments, 1):
            req_id = base_id if len(segments) == 1 else f"{base_id}.{k}"
            last_segment = k == len(segments)
            result = self._request(req_id, text, segment, k, len(segments), last_segment, parts, seq, sent)
            if result is None:
                return

    def _request(self, req_id, text, segment, k, n, last_segment, parts, seq, sent):
        """All attempts of one request; returns None once it finally fails."""
        attempt, backoff_ms = 1, None
        payload = self.run.payload(segment)
        while True:
            rec, body, audio, m0, m2, elapsed_ms = self._attempt(payload, attempt, sent)
            retry = not rec["ok"] and self.s.retry.should_retry(attempt, rec["status"])
            runformat.attempt.update(rec, req_id=req_id, attempt=attempt, final=not retry, text_id=text.id,
                                     text_len=len(segment), tier=text.tier,
                                     segment=f"{k}/{n}" if n > 1 else None, backoff_ms=backoff_ms)
            if rec["ok"]:
                parts.append((body, audio))
                if last_segment:
                    self._finish_audio(rec, parts, m0, m2, seq)   # yields while the file is written
            # The Locust event and the record go out together, with no yield in between, so a
            # user stopped mid-attempt leaves neither: the two counts always agree.
            self._fire(rec, attempt, elapsed_ms)
            self.run.emit(rec)
            if not retry:
                return rec if rec["ok"] else None
            delay = self.s.retry.delay_s(attempt, rec["retry_after_s"], self.rng)
            if rec["retry_after_s"] is not None and delay > 0:
                # Honour Retry-After measured from when the answer arrived, not from now.
                delay = max(0.0, m2 + delay - mono())
            backoff_ms = round(delay * 1000.0, 3)
            gevent.sleep(delay)
            attempt += 1

    def _attempt(self, payload: bytes, attempt: int, sent: dict | None = None):
        s = self.s
        step = self.run.state.current if sent is None else sent["step"]
        t0, m0 = wall(), mono()
        m1 = m2 = None
        status = None
        headers = None
        blocks: list[bytes] = []
        timeline = stream_mod.Timeline()
        parser = None
        error = bad_stream = None
        timeout = gevent.Timeout(s.request_timeout_s)
        timeout.start()
        try:
            resp = self.http.request("POST", s.path, body=payload)
            status = resp.status_code
            headers = resp
            if 200 <= status < 300:
                parser = stream_mod.parser_for(header(resp, "content-type"), s.format, s.pcm_rate, timeline)
            # Each block is stamped as it comes and parsed at once: audio is timed on arrival.
            while True:
                block = stream_mod.read_some(resp)
                if not block:
                    break
                at = mono()
                if m1 is None:
                    m1 = at
                blocks.append(block)
                if parser is not None:
                    parser.feed(block, at)
            m2 = mono()
            if parser is not None:
                parser.finish()
        except gevent.Timeout as t:
            if t is not timeout:
                raise
            stage = "before the first byte" if m1 is None else "while reading the body"
            error = f"timed out after {s.request_timeout_s:g} s {stage}"
            self._reconnect()
        except OSError as e:   # socket.error and socket.timeout are OSError
            stage = "connection error" if m1 is None else "connection broke mid-body"
            error = f"{stage}: {_os_error(e)}"
            self._reconnect()
        except stream_mod.StreamError as e:   # the server's answer, broken or an error event
            bad_stream = str(e)
            if m2 is None:
                self._reconnect()   # the rest of the body is still on the connection
        except HTTPException as e:   # geventhttpclient's HTTPParseError and its kin: a malformed response
            if status is not None and str(e).startswith("Incomplete"):
                error = "connection closed before the body was complete"
            else:
                error = f"bad HTTP response: {type(e).__name__}: {e}"
            self._reconnect()
        finally:
            timeout.close()
        if error is not None and status is not None:
            error = f"HTTP {status}, then {error}"
            status = None  # the response never completed: it is a connection failure, not a status
        body = b"".join(blocks)
        rec = runformat.attempt(
            step=step.step if step else None,
            concurrency=(step.concurrency if step else None) if sent is None else sent["concurrency"],
            worker=self.run.worker_id, user=self.no,
            t0=t0, t1=None if m1 is None else t0 + (m1 - m0), t2=None if m2 is None else t0 + (m2 - m0),
            ttfb_ms=_ms(m0, m1), wait_ms=_ms(m0, m2), status=status, ok=False, error=error or bad_stream,
            bytes=len(body), settled=self.run.state.settled(step, t0),
            **(timeline.fields(m0, s.playback_buffer_ms, s.stream) if parser is not None else _NO_STREAM),
        )
        if sent is not None:   # open loop: waited from when the caller arrived, not from sending
            runformat.attempt.update(
                rec, scheduled=sent["scheduled"],
                sched_wait_ms=None if m2 is None else round((t0 + (m2 - m0) - sent["scheduled"]) * 1000.0, 3))
        audio = None
        if error is None:
            rec["server_timing"] = parse_server_timing(header(headers, "server-timing"))
            if 200 <= status < 300:
                if bad_stream is None:
                    try:
                        body, audio = _audio_of(parser, body, header(headers, "content-type"), s)
                    except (audio_mod.AudioError, stream_mod.StreamError) as e:
                        rec["error"] = str(e)
                    else:
                        rec["ok"] = True
                        rec["audio_s"] = None if audio.audio_s is None else round(audio.audio_s, 6)
                        if audio.audio_s:
                            rec["rtf"] = round((m2 - m0) / audio.audio_s, 6)
            else:
                rec["error"] = _error_text(status, body)
                raw = header(headers, "retry-after")
                if raw is not None:
                    rec["retry_after_raw"] = raw
                    rec["retry_after_s"] = parse_retry_after(raw, wall())
        elapsed_ms = rec["wait_ms"] if rec["wait_ms"] is not None else (mono() - m0) * 1000.0
        return rec, body, audio, m0, m2, elapsed_ms

    def _fire(self, rec: dict, attempt: int, elapsed_ms: float) -> None:
        # Retried attempts get a name of their own so Locust's table shows them apart.
        name = self.s.path if attempt == 1 else f"{self.s.path} (retry)"
        self.environment.events.request.fire(
            request_type="POST", name=name, response_time=elapsed_ms, response_length=rec["bytes"],
            response=None, context={}, exception=None if rec["ok"] else AttemptFailed(rec["error"]),
        )

    def _finish_audio(self, rec: dict, parts, m0: float, m2: float, seq: int) -> None:
        if len(parts) > 1:
            try:
                data = audio_mod.concat(parts)
            except audio_mod.AudioError as e:
                rec.update(ok=False, error=str(e))
                return
            rec["concat_ms"] = round((mono() - m2) * 1000.0, 3)
            rec["audio_s"] = round(sum(a.audio_s for _, a in parts), 6)
        else:
            data = parts[0][0]
        path = self.run.audio_path(self.no, seq)
        if path is None:
            return
        try:
            _audio_writer(self.environment.tts_knee).write(path, data)
        except OSError as e:
            self.run.audio_failed(e)
            return
        m3 = mono()
        rec["t3"] = rec["t0"] + (m3 - m0)
        rec["write_ms"] = _ms(m2, m3)

    def _reconnect(self) -> None:
        self.http.close()
        self.http = HTTPClient(**self._client_args)


class RunUser(User):
    """What the closed-loop and the open-loop user share: no wait time, and on start this node's
    run, a user number of its own and a request count from zero. Not spawned itself."""

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        node = self.environment.tts_knee
        self.run = node.run
        if self.run is None:   # this node's options were unusable; ensure_run said why
            raise StopUser()
        self.no = node.next_user_number()
        self.seq = 0


class TTSUser(RunUser):
    """Sends the corpus, text by text, to the TTS endpoint the options describe: one request
    in flight at a time (closed loop)."""

    caller: Caller | None = None   # none while on_start stopped the user before making it

    def on_start(self) -> None:
        super().on_start()
        self.caller = Caller(self, self.no)

    def on_stop(self) -> None:
        if self.caller is not None:
            self.caller.close()

    @task
    def synthesize(self) -> None:
        self.seq += 1
        self.caller.send(self.run.next_text(), self.seq)


class _AudioWriter:
    """Writes audio files on one native thread, so that a disk that stalls delays only the
    users waiting for their files (their t3, where client_io shows) and not the event loop,
    which would put the stall into every other user's wait_ms. Cheaper than gevent's
    threadpool (about 30 us a file against 90 us): a plain queue, one async watcher."""

    def __init__(self):
        self._jobs = monkey.get_original("_queue", "SimpleQueue")()
        self._done: collections.deque = collections.deque()
        self._wake = gevent.get_hub().loop.async_()
        self._wake.ref = False   # never what keeps the process alive
        self._wake.start(self._on_wake)
        monkey.get_original("_thread", "start_new_thread")(self._run, ())

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` and return once it is closed; raises what writing raised."""
        job = [Event(), None]
        self._jobs.put((path, data, job))
        job[0].wait()
        if job[1] is not None:
            raise job[1]

    def _run(self) -> None:   # the writer thread: never touches gevent objects but the watcher
        while True:
            path, data, job = self._jobs.get()
            try:
                _write_over(path, data)
            except Exception as e:   # handed to the waiting user: this thread must not die
                job[1] = e
            self._done.append(job)
            self._wake.send()

    def _on_wake(self) -> None:
        while self._done:
            self._done.popleft()[0].set()


def _audio_writer(node) -> _AudioWriter:
    """The node's one audio writer thread, started by the first file it writes."""
    if node.audio_writer is None:
        node.audio_writer = _AudioWriter()
    return node.audio_writer


def _write_over(path: str, data: bytes) -> None:
    """Write ``data`` as the whole content of ``path``, reusing the file's blocks.

    Opening with O_TRUNC, or unlinking first, frees the old blocks and makes ext4 allocate
    and flush anew on close (its replace-by-truncate heuristic, plus a discard on this kind
    of mount): about 350 us per file against 20-70 us for writing over and trimming the tail.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _audio_of(parser, body: bytes, content_type: str | None, s) -> tuple[bytes, audio_mod.Audio]:
    """The audio to write for a whole 2xx body, and what it is; raises AudioError or StreamError.
    Server-sent events become their decoded PCM as a WAV; compressed audio gets the duration
    its frame headers add up to, where the parser could count it."""
    if isinstance(parser, stream_mod.SseStream):
        return parser.audio()
    audio = audio_mod.check_audio(body, content_type, s.format, s.pcm_rate)
    if audio.audio_s is None and parser.duration_s() is not None:
        audio = dataclasses.replace(audio, audio_s=parser.duration_s())
    return body, audio


def _os_error(e: OSError) -> str:
    if isinstance(e, socket.timeout):
        return "timed out"
    name = errno.errorcode.get(e.errno or 0)
    return f"{name} ({e.strerror})" if name and e.strerror else str(e) or type(e).__name__
