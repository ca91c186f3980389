"""Wyoming (Home Assistant's protocol for voice services) over TCP: ``-H tcp://host:port``.

An event is a header line of JSON (``type``, ``data_length``, ``payload_length``), then that
many bytes of JSON data, then that many bytes of payload. Text paced in (``--text-rate``) goes
as ``synthesize-start``, one ``synthesize-chunk`` per piece and ``synthesize-stop``; the server
answers each sentence with ``audio-start``, ``audio-chunk`` s (PCM) and ``audio-stop``, then
``synthesize-stopped``. A whole text goes as one ``synthesize``, answered by one audio-start ...
audio-stop. A connection keeps one of the two forms (servers such as wyoming-piper ignore a
plain ``synthesize`` after a stream on the same connection).

The socket is read with ``recv_into`` into the connection's own buffer: no file object holds
its descriptor, so closing the socket really closes it and the server learns at once (a
``makefile`` reader keeps the descriptor open after ``close``, and the server would go on
synthesising for nobody).

Wyoming has no statuses: an utterance answered with audio is recorded as 200, one answered
with an ``error`` event (after which the server closes) as 500, the HTTP statuses they amount
to.
"""

from __future__ import annotations

import contextlib
import json
import socket
from urllib.parse import urlsplit

import gevent

from ..clock import mono
from .base import Answered, TransportError
from .session import Connection, Item, Kind, SessionTransport, os_error

READ_BYTES = 64 * 1024
#: Longest header line accepted; a longer one is not Wyoming.
MAX_HEADER_BYTES = 64 * 1024
#: Largest data or payload one event may announce.
MAX_EVENT_BYTES = 16 * 1024 * 1024
_SNIPPET = 80


def event(kind: str, data: dict | None = None, payload: bytes = b"") -> bytes:
    """One Wyoming event as bytes on the wire."""
    body = json.dumps(data, ensure_ascii=False).encode() if data else b""
    head: dict[str, str | int] = {"type": kind}
    if body:
        head["data_length"] = len(body)
    if payload:
        head["payload_length"] = len(payload)
    return json.dumps(head).encode() + b"\n" + body + payload


class WyomingConnection(Connection):
    def __init__(self, sock: socket.socket, plain: bool):
        super().__init__()
        self.sock = sock
        self.plain = plain  # whole texts: audio-stop ends the utterance
        self.buf = bytearray(READ_BYTES)
        self.start_at = self.end_at = 0  # what of buf is read and not yet parsed
        self.width = 2
        self.info: dict | None = None  # the data of the server's latest info event

    def _fill(self) -> bool:
        """Read more into the buffer; False at the end of the stream."""
        if self.start_at and self.end_at == len(self.buf):
            rest = self.buf[self.start_at : self.end_at]
            self.buf[: len(rest)] = rest
            self.start_at, self.end_at = 0, len(rest)
        if self.end_at == len(self.buf):
            self.buf.extend(bytes(len(self.buf)))
        received = self.sock.recv_into(memoryview(self.buf)[self.end_at :])
        self.end_at += received
        return received > 0

    def _take(self, size: int) -> bytes | None:
        while self.end_at - self.start_at < size:
            if not self._fill():
                return None
        out = bytes(self.buf[self.start_at : self.start_at + size])
        self.start_at += size
        return out

    def _line(self) -> bytes | None:
        while True:
            cut = self.buf.find(b"\n", self.start_at, self.end_at)
            if cut >= 0:
                out = bytes(self.buf[self.start_at : cut])
                self.start_at = cut + 1
                return out
            if self.end_at - self.start_at > MAX_HEADER_BYTES:
                return bytes(self.buf[self.start_at : self.end_at])
            if not self._fill():
                return None

    def read(self) -> Item | None:
        line = self._line()
        if line is None:
            return Item(Kind.CLOSED, mono(), message="the server closed the connection")
        try:
            head = json.loads(line)
        except ValueError:
            return _broken(f"a Wyoming header that is not a line of JSON: {_snippet(line)!r}")
        if not isinstance(head, dict) or not isinstance(head.get("type"), str):
            return _broken(f"a Wyoming header without a type: {_snippet(line)!r}")
        kind = head["type"]
        sizes = [head.get("data_length") or 0, head.get("payload_length") or 0]
        if not all(type(length) is int and 0 <= length <= MAX_EVENT_BYTES for length in sizes):
            return _broken(f"a Wyoming {kind} event whose lengths are not byte counts: {_snippet(line)!r}")
        data: dict = head["data"] if isinstance(head.get("data"), dict) else {}
        if sizes[0]:  # the data is judged before the payload is waited for: a wrong length shows here
            blob = self._take(sizes[0])
            if blob is None:
                return _closed_inside(kind)
            try:
                more = json.loads(blob)
            except ValueError:
                return _broken(
                    f"a Wyoming {kind} event whose {sizes[0]} bytes of data are not JSON "
                    f"(its data_length is wrong, or the data is): {_snippet(blob)!r}"
                )
            if not isinstance(more, dict):
                return _broken(f"a Wyoming {kind} event whose data is not a JSON object")
            data = {**data, **more}
        payload = self._take(sizes[1]) if sizes[1] else b""
        if payload is None:
            return _closed_inside(kind)
        return self._item(kind, data, payload, mono(), len(line) + 1 + sizes[0] + sizes[1])

    def _item(self, kind: str, data: dict, payload: bytes, arrived_at: float, nbytes: int) -> Item | None:
        """The item a whole Wyoming event of type ``kind`` is for the utterance (None: none)."""
        if kind == "audio-chunk":
            return self._chunk(data, payload, arrived_at, nbytes)
        if kind == "audio-start":
            return self._format(data, arrived_at, nbytes) or Item(
                Kind.START, arrived_at, nbytes, rate=_int(data.get("rate"))
            )
        if kind == "audio-stop":
            return Item(Kind.END, arrived_at, nbytes) if self.plain else None
        if kind == "synthesize-stopped":
            return Item(Kind.END, arrived_at, nbytes)
        if kind == "error":
            text = " ".join(str(data.get("text") or "no text").split())[:200]
            code = data.get("code")
            return Item(Kind.ERROR, arrived_at, nbytes, message=text + (f" ({code})" if code else ""))
        if kind == "info":
            self.info = data
        return None  # info and whatever else a server says between the audio

    def _format(self, data: dict, arrived_at: float, nbytes: int) -> Item | None:
        """A broken item when the audio is not PCM16 (all tts-knee times and writes)."""
        width = data.get("width", 2)
        if width != 2:
            return Item(
                Kind.BROKEN,
                arrived_at,
                nbytes,
                message=f"the server sends {width}-byte samples; tts-knee reads 16-bit PCM",
            )
        return None

    def _chunk(self, data: dict, pcm: bytes, arrived_at: float, nbytes: int) -> Item:
        return self._format(data, arrived_at, nbytes) or Item(
            Kind.AUDIO, arrived_at, nbytes, pcm, _int(data.get("rate"))
        )

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class WyomingTransport(SessionTransport[WyomingConnection]):
    """One TCP connection per user, kept across its utterances."""

    request_type = "Wyoming"

    def __init__(self, settings):
        super().__init__(settings)
        parts = urlsplit(settings.host)
        self.address = (parts.hostname, parts.port)
        self.plain = not settings.text_rate
        self.name = "synthesize" if self.plain else "synthesize-start"
        self.voice = {"name": settings.tts_voice} if settings.tts_voice else None

    def connect(self) -> WyomingConnection:
        conn = self.connect_only()
        conn.start()
        return conn

    def connect_only(self) -> WyomingConnection:
        """A connection whose reader is not started yet."""
        settings = self.s
        try:
            sock = socket.create_connection(self.address, timeout=settings.connect_timeout)
        except OSError as error:
            raise TransportError(f"connection error ({os_error(error)}): {settings.host}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)  # the attempt's timeout bounds an utterance
        return WyomingConnection(sock, self.plain)

    def streams_text(self) -> tuple[bool | None, str | None]:
        """Whether the server takes streamed text (``synthesize-start/chunk/stop``), from its
        answer to ``describe``: (True/False, its TTS program's name), or (None, why) where it
        did not say within the connect timeout. A server without it ignores those events, and
        every utterance would wait out ``--request-timeout``."""
        try:
            with gevent.Timeout(self.s.connect_timeout):
                conn = self.connect_only()
                try:
                    conn.send(event("describe"))
                    for _ in range(64):
                        item = conn.read()
                        if conn.info is not None:
                            return _streaming(conn.info, self.s.tts_voice)
                        if item is not None and item.kind in (Kind.CLOSED, Kind.BROKEN):
                            return None, item.message
                finally:
                    conn.drop()
        except gevent.Timeout:
            return None, f"no info within {self.s.connect_timeout:g} s"
        except OSError as error:
            return None, os_error(error)
        return None, "no info event among its first 64"

    def begin(self, conn: WyomingConnection, key: str, text: str) -> None:
        if not self.plain:
            conn.send(event("synthesize-start", {"voice": self.voice} if self.voice else None))

    def send_text(self, conn: WyomingConnection, key: str, text: str) -> None:
        if self.plain:
            conn.send(event("synthesize", {"text": text, **({"voice": self.voice} if self.voice else {})}))
        else:
            conn.send(event("synthesize-chunk", {"text": text}))

    def send_end(self, conn: WyomingConnection, key: str) -> None:
        if not self.plain:
            conn.send(event("synthesize-stop"))

    def answered(self):
        return Answered(200, True, "Wyoming", 200)

    def refusal(self, item: Item) -> Answered | None:
        if item.kind is Kind.ERROR:
            return Answered(500, False, "Wyoming error", 500)
        return None


def _streaming(info: dict, voice: str | None) -> tuple[bool | None, str]:
    """From an info event's data: whether the TTS program (the one with ``voice``, where one is
    named and found) says ``supports_synthesize_streaming``, and its name."""
    programs = [tts_program for tts_program in info.get("tts") or [] if isinstance(tts_program, dict)]
    if not programs:
        return None, "its info lists no TTS program"
    named = (
        [
            tts_program
            for tts_program in programs
            if any(isinstance(entry, dict) and entry.get("name") == voice for entry in tts_program.get("voices") or [])
        ]
        if voice
        else []
    )
    program = (named or programs)[0]
    return bool(program.get("supports_synthesize_streaming")), str(program.get("name") or "its TTS program")


def _closed_inside(kind: str) -> Item:
    return Item(Kind.CLOSED, mono(), message=f"the server closed the connection inside a {kind} event")


def _broken(what: str) -> Item:
    return Item(Kind.BROKEN, mono(), message=f"the server sent {what}")


def _int(value) -> int | None:
    return value if type(value) is int and 0 < value <= 1_000_000 else None


def _snippet(data: bytes) -> str:
    return " ".join(data[:_SNIPPET].decode("utf-8", "replace").split())
