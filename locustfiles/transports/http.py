"""HTTP: one POST per utterance on a keep-alive connection, its body read block by block as it
arrives and decoded by the container its Content-Type (and first bytes) says it is: a whole
WAV or other audio file, audio streamed in chunks, or server-sent events.

Whole-body and streamed answers take the same path: a whole body is a stream that happens to
arrive fast. Only ``--tts-stream`` (what the request asks for) differs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import socket
import ssl
from http.client import HTTPException
from urllib.parse import urlsplit

from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed

from tts_knee.audio import containers

from .. import tls
from ..clock import mono
from ..headers import header, parse_server_timing
from .base import NO_ASK, Answered, Ask, AudioPiece, Cancel, Ended, Received, TlsError, Transport, TransportError

ERROR_BODY_CHARS = 200
#: Bytes asked of the socket per read. geventhttpclient's default (4 KiB) costs a recv and a
#: parser call per 4 KiB, which for a few hundred KiB of audio was a fifth of the user's CPU;
#: a stream's chunks still come one read each, as they arrive.
READ_BLOCK_BYTES = 256 * 1024


class HttpTransport(Transport):
    """POSTs the request body ``payload(text, ask)`` makes (with its content type: JSON, or a
    multipart form) to ``settings.tts_path`` on ``settings.host``."""

    request_type = "POST"

    def __init__(self, settings, payload=None):
        self.s = settings
        self.name = settings.tts_path
        self.payload = payload or settings.payload
        parts = urlsplit(settings.host)
        context = settings.tls  # https://: the run's one client context (locustfiles.tls), as it verifies
        self._client_args = dict(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            concurrency=1,
            block_size=READ_BLOCK_BYTES,
            connection_timeout=settings.connect_timeout,
            network_timeout=settings.request_timeout,
            headers={
                "User-Agent": "tts-knee",
                "Accept": "text/event-stream"
                if settings.tts_stream_format == "sse"
                else "audio/*, application/octet-stream",
                **dict(settings.headers),
            },
            **({"ssl_context_factory": lambda **_: context, "insecure": settings.tls_insecure} if context else {}),
        )
        self.http = HTTPClient(**self._client_args)

    def close(self) -> None:
        self.http.close()

    def reset(self) -> None:
        self.http.close()
        self.http = HTTPClient(**self._client_args)

    def request(self, text: str, ask: Ask = NO_ASK):
        """POST the request for ``text``; returns the response, its headers read."""
        body, content_type = self.payload(text, ask)
        return self.http.request("POST", self.s.tts_path, body=body, headers={"Content-Type": content_type})

    def exchange(self, text: str, ask: Ask = NO_ASK, cancel: Cancel | None = None):
        settings = self.s
        answer = parser = resp = end = None
        blocks: list[bytes | bytearray] = []
        pieces: list[AudioPiece] = []
        got = 0
        try:
            resp = self.request(text, ask)
            if cancel is not None:  # HTTP has nothing better than closing the stream
                cancel.hook = lambda: _hang_up(resp)
            status = resp.status_code
            ok = 200 <= status < 300
            answer = Answered(
                status,
                ok,
                f"HTTP {status}",
                status,
                header(resp, "retry-after"),
                parse_server_timing(header(resp, "server-timing")),
            )
            yield answer
            if ok:
                parser = containers.parser_for(
                    header(resp, "content-type"), settings.tts_format, settings.tts_sample_rate, _Pieces(pieces)
                )
            # Each block is stamped as it comes and parsed at once: audio is timed on arrival.
            while True:
                block = read_some(resp)
                if not block:
                    break
                arrived_at = mono()
                got += len(block)
                blocks.append(block)
                yield Received(arrived_at, len(block))
                if parser is not None:
                    # a bytearray, read by the parsers with only what bytes and bytearray share
                    parser.feed(block, arrived_at)  # type: ignore[arg-type]
                    if pieces:
                        yield from pieces
                        pieces.clear()
            end = mono()
            if _fired(cancel):
                yield from self._cancelled(pieces)
                return
            if parser is not None:
                parser.finish()
                yield from pieces
        except containers.StreamError as error:  # the server's answer, broken or an error event
            if _fired(cancel):
                yield from self._cancelled(pieces)
                return
            if end is None:
                self.reset()  # the rest of the body is still on the connection
            yield from pieces  # what the parser timed before it failed
            yield Ended(end, str(error), data=blocks)
            return
        except (OSError, HTTPException) as error:  # the connection, or a malformed response
            if _fired(cancel):
                yield from self._cancelled(pieces)
                return
            self.reset()
            raise self._failed(error, answer, got) from None
        except BaseException:  # the attempt's timeout, or the user stopped: the connection is mid-answer
            self.reset()
            raise
        yield self._ended(answer, end, parser, blocks, got, header(resp, "content-type"))

    def _ended(
        self, answer: Answered, end: float, parser, blocks: list[bytes | bytearray], got: int, content_type
    ) -> Ended:
        """A whole body's end: the refusal's text, or the audio it carries (its error where it
        is not audio tts-knee reads)."""
        if not answer.ok:
            return Ended(end, _error_text(answer.status, blocks), data=blocks)
        try:
            data, audio = _audio_of(parser, blocks, got, content_type, self.s)
        except (containers.AudioError, containers.StreamError) as error:
            return Ended(end, str(error), data=blocks)
        return Ended(end, audio=audio, data=data)

    def _failed(self, error: OSError | HTTPException, answer: Answered | None, got: int) -> TransportError:
        """The error an exchange that broke with ``error`` fails with, once ``got`` bytes of the body
        had come (``answer``: its head, where it came)."""
        settings = self.s
        if isinstance(error, OSError):  # socket.error and socket.timeout are OSError
            if isinstance(error, ssl.SSLError) and answer is None:
                return TlsError(tls.verify_hint(error, settings.tls_insecure, bool(settings.tls_client_cert)))
            stage = "connection error" if not got else "connection broke mid-body"
            return TransportError(_then(answer, f"{stage}: {_os_error(error)}"))
        # geventhttpclient's HTTPParseError and its kin: a malformed response
        if answer is not None and str(error).startswith("Incomplete"):
            return TransportError(_then(answer, "connection closed before the body was complete"))
        if isinstance(error, HTTPConnectionClosed) and answer is None and settings.tls is None:
            # a TLS server closes on a plaintext request without a byte of HTTP
            return TlsError("it closed the connection without an HTTP answer: if it serves TLS, give -H https://")
        return TransportError(_then(answer, f"bad HTTP response: {type(error).__name__}: {error}"))

    def _cancelled(self, pieces: list):
        """The end of a stream the listener hung up on: nothing more can arrive once it is closed."""
        self.reset()
        yield from pieces
        yield Ended(mono(), quiet="closed")


def _fired(cancel: Cancel | None) -> bool:
    return cancel is not None and cancel.at is not None


def _hang_up(resp) -> None:
    """Close the response's stream from another greenlet: the reader wakes to its end, the
    server sees the connection go."""
    sock = resp._sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _Pieces:
    """The parsers' sink: their arrivals, as events for the exchange to yield."""

    __slots__ = ("out",)

    def __init__(self, out: list):
        self.out = out

    def add(self, arrived_at: float, audio_ms: float | None) -> None:
        self.out.append(AudioPiece(arrived_at, audio_ms))


def _then(answer: Answered | None, error: str) -> str:
    """A failure after the answer began is the connection's, not a status: it is quoted."""
    return error if answer is None else f"{answer.said}, then {error}"


def _error_text(status: int | str | None, blocks: list[bytes | bytearray]) -> str:
    snippet = " ".join(b"".join(blocks)[:ERROR_BODY_CHARS].decode("utf-8", "replace").split())
    return f"HTTP {status}" + (f": {snippet}" if snippet else "")


def _audio_of(
    parser, blocks: list[bytes | bytearray], size: int, content_type: str | None, settings
) -> tuple[list, containers.Audio]:
    """The audio to write for a whole 2xx body, and what it is; raises AudioError or
    StreamError. Judged from the first bytes the parser kept and the body's length, so the
    body is never joined into one buffer. Server-sent events become their decoded PCM as a
    WAV; compressed audio gets the duration its frame headers add up to, where the parser
    could count it."""
    if isinstance(parser, containers.SseStream):
        wav, audio = parser.audio()
        return [wav], audio
    audio = containers.check_audio(parser.head, content_type, settings.tts_format, settings.tts_sample_rate, size=size)
    if audio.audio_s is None and parser.duration_s() is not None:
        audio = dataclasses.replace(audio, audio_s=parser.duration_s())
    return blocks, audio


def _os_error(error: OSError) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    name = errno.errorcode.get(error.errno or 0)
    return f"{name} ({error.strerror})" if name and error.strerror else str(error) or type(error).__name__


def read_some(resp) -> bytes | bytearray:
    """What the response's body has for us now: blocks until at least one body byte has come
    (or the body ended: b""). geventhttpclient's ``read(n)`` waits for n bytes; this reads one
    socket's worth at a time, through the same buffer and parser ``read`` uses (its 2.x
    internals, pinned by the tests that stream through it). With :func:`_hang_up`, the only code
    that reaches into geventhttpclient's private state."""
    buf = resp._body_buffer
    while not buf:
        sock = resp._sock
        if resp.message_complete or sock is None:
            return b""
        try:
            data = sock.recv(resp.block_size)
            resp.feed(data)
        except BaseException:
            resp.release()
            raise
    resp._body_buffer = bytearray()  # hand over what came, without copying it
    return buf
