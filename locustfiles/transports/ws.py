"""WebSocket sessions in the dialect of a preset (:mod:`locustfiles.inputs.presets`: vLLM-Omni,
ElevenLabs, Deepgram, Cartesia, or a user's own file). Frames go through websocket-client,
the only code that reaches into it.

websocket-client because it cooperates with gevent as it is (its sockets are the patched
ones), its frames cost about what the HTTP stream path's chunks do, and it hands over the
close frame's code and reason. The upgrade is written and read here (:func:`upgrade`): its
own handshake reads the answer a byte at a time, half a millisecond of CPU per connection,
which one connection per utterance (vLLM-Omni, ElevenLabs) pays every turn. The socket it
reads is buffered (:class:`_Socket`), so a frame costs one system call or less, not three.
The upgrade is bounded by ``--connect-timeout``; a refused one gives its status and
Retry-After, as an HTTP answer would.

Statuses: an utterance the server took is recorded as 101 (the session's upgrade); a refused
upgrade as its HTTP status; a session the server ends with close 1013 (try again later)
before answering an utterance as 1013, which the retry policy judges as a 503. A close
mid-utterance fails the attempt with its code and reason.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import struct
from urllib.parse import urlsplit

import gevent
import websocket
from websocket import ABNF

from tts_knee.audio.containers import StreamError

from .. import tls
from ..clock import mono
from ..inputs.presets import Preset
from .base import Answered, TlsError, TransportError
from .session import Connection, Item, Kind, Refused, SessionTransport, os_error

TRY_AGAIN_LATER = 1013
ERROR_BODY_CHARS = 200
READ_BYTES = 256 * 1024
#: Longest upgrade answer read: its status line and headers, and a refusal's body up to here.
MAX_ANSWER_BYTES = 64 * 1024
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _Socket:
    """The connection's socket as websocket-client reads it, a few bytes at a time: what one
    ``recv`` brought is kept and handed out as asked."""

    __slots__ = ("sock", "buf")

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def recv(self, size: int) -> bytes:
        buf = self.buf
        if not buf:
            buf = self.sock.recv(READ_BYTES)
        if len(buf) <= size:
            self.buf = b""
            return buf
        self.buf = buf[size:]
        return buf[:size]

    def gettimeout(self):
        return self.sock.gettimeout()

    def send(self, data) -> int:
        return self.sock.send(data)

    def __getattr__(self, name):  # settimeout, shutdown, close, fileno ...: the socket's own
        return getattr(self.sock, name)


_ADDRESSES: dict[tuple[str | None, int], tuple] = {}


def _connect(host: str | None, port: int, timeout: float) -> socket.socket:
    """A TCP connection to ``host``, resolved once per process: under gevent each resolution is
    a hand-off to a thread, which one connection per utterance would pay every turn."""
    found = _ADDRESSES.get((host, port))
    if found is None:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
        found = _ADDRESSES[(host, port)] = (family, kind, proto, address)
    family, kind, proto, address = found
    sock = socket.socket(family, kind, proto)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def upgrade(
    url: str, headers: list[str], timeout: float, tls: ssl.SSLContext | None = None
) -> tuple[_Socket | None, int, dict, bytes]:
    """Open ``url`` and ask to upgrade it: ``(socket, 101, headers, b"")``, or for a refusal
    ``(None, status, headers, the body's first bytes)``. Raises OSError (timeouts included) and
    ValueError for an answer that is not HTTP or not the WebSocket handshake."""
    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    raw = _connect(parts.hostname, port, timeout)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if secure:
            raw = (tls or ssl.create_default_context()).wrap_socket(raw, server_hostname=parts.hostname)
        sock = _Socket(raw)
        key = base64.b64encode(os.urandom(16))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {parts.netloc}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key.decode()}",
            "Sec-WebSocket-Version: 13",
            "User-Agent: tts-knee",
            *headers,
        ]
        raw.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
        head = b""
        while b"\r\n\r\n" not in head:
            more = raw.recv(READ_BYTES)
            if not more or len(head) > MAX_ANSWER_BYTES:
                raise ValueError(
                    "the server closed the connection before answering the upgrade"
                    if not more
                    else "the upgrade's answer has no end of headers"
                )
            head += more
        head, sock.buf = head.split(b"\r\n\r\n", 1)  # what follows is the first frames, or a refusal's body
        status_line, *rest = head.decode("latin-1").split("\r\n")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            raise ValueError(f"the answer to the upgrade is not HTTP: {status_line[:80]!r}")
        answer = {}
        for line in rest:
            name, _, value = line.partition(":")
            answer[name.strip().lower()] = value.strip()
        status = int(fields[1])
        if status != 101:
            body = sock.buf
            want = min(int(answer.get("content-length", "0") or 0), ERROR_BODY_CHARS)
            while len(body) < want:
                more = raw.recv(READ_BYTES)
                if not more:
                    break
                body += more
            raw.close()
            return None, status, answer, body[:ERROR_BODY_CHARS]
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        if answer.get("sec-websocket-accept") != accept:
            raise ValueError("the server's Sec-WebSocket-Accept does not answer the key sent")
        return sock, 101, answer, b""
    except BaseException:
        raw.close()
        raise


class WsConnection(Connection):
    def __init__(self, web_socket: websocket.WebSocket, preset: Preset):
        super().__init__()
        self.ws = web_socket
        self.preset = preset
        self.routed = preset.routed

    def read(self) -> Item | None:
        try:
            opcode, frame = self.ws.recv_data_frame(True)
        except websocket.WebSocketConnectionClosedException:
            return Item(Kind.CLOSED, mono(), message="the server closed the connection without a close frame")
        except websocket.WebSocketException as error:  # a frame that is not WebSocket
            return Item(Kind.BROKEN, mono(), message=f"the server broke the WebSocket protocol ({error})")
        arrived_at = mono()
        data = frame.data
        if opcode == ABNF.OPCODE_CLOSE:
            code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
            reason = data[2:].decode("utf-8", "replace").strip()
            said = f"close {code}" if code is not None else "a close frame without a code"
            return Item(
                Kind.CLOSED,
                arrived_at,
                message=f"the server closed the session ({said}{': ' + reason if reason else ''})",
                code=code,
            )
        if opcode not in (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY):
            return None  # ping and pong: websocket-client answers pings itself
        try:
            classified = self.preset.classify(data if opcode == ABNF.OPCODE_BINARY else data.decode("utf-8", "replace"))
        except StreamError as error:
            return Item(Kind.BROKEN, arrived_at, message=str(error))
        kind = classified.event
        if kind == "ignore":
            return None
        key = classified.context if self.routed else None
        if kind == "audio":
            return Item(Kind.AUDIO, arrived_at, len(data), classified.audio, classified.rate, key=key)
        if kind == "audio_start":
            return Item(Kind.START, arrived_at, len(data), rate=classified.rate, key=key)
        if kind == "error":
            return Item(Kind.ERROR, arrived_at, len(data), message=classified.message, fatal=classified.fatal, key=key)
        return Item(Kind(kind), arrived_at, len(data), key=key)  # flushed, end, cancelled

    def send(self, data: str) -> None:
        try:
            self.ws.send(data)
        except websocket.WebSocketConnectionClosedException as error:
            raise ConnectionResetError(str(error)) from None

    def drop(self) -> None:
        sock = self.ws.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked on it
            sock.close()
        self.ws.sock, self.ws.connected = None, False


class WsTransport(SessionTransport[WsConnection]):
    """One WebSocket connection per user (per utterance where the preset does not reuse one)."""

    request_type = "WS"

    def __init__(self, settings):
        super().__init__(settings)
        preset = self.preset = settings.preset
        self.values = {"voice": settings.tts_voice, "model": settings.tts_model}
        self.url = preset.url(settings.host, self.values)
        self.name = urlsplit(self.url).path
        self.reuse = preset.reuse
        self.routed = preset.routed
        self.acks_cancel = preset.acks_cancel
        self.ends_on_ack = preset.ends_on == "ack_of_end"
        self.flush_sentences = settings.flush == "sentence" and "flush" in preset.send
        self.min_interval_s = preset.min_interval_s
        self.rate, self.channels = preset.rate, preset.channels

    def handshake_headers(self) -> list[str]:
        """The headers the upgrade sends: the preset's, then --header's."""
        return self.preset.handshake_headers(self.values) + [f"{name}: {value}" for name, value in self.s.headers]

    def connect(self) -> WsConnection:
        settings, preset = self.s, self.preset
        try:
            sock, status, headers, body = upgrade(
                self.url, self.handshake_headers(), settings.connect_timeout, settings.tls
            )
        except ssl.SSLError as error:
            raise TlsError(
                f"{self.url}: {tls.verify_hint(error, settings.tls_insecure, bool(settings.tls_client_cert))}"
            ) from None
        except TimeoutError:
            raise self._failed(
                f"the WebSocket handshake did not complete within {settings.connect_timeout:g} s"
            ) from None
        except ValueError as error:
            raise self._failed(f"the WebSocket handshake failed: {error}") from None
        except OSError as error:
            raise self._failed(f"connection error ({os_error(error)})") from None
        if sock is None:
            said = " ".join(body.decode("utf-8", "replace").split())
            raise Refused(
                Answered(status, False, f"HTTP {status}", status, headers.get("retry-after")),
                f"HTTP {status} on the WebSocket upgrade" + (f": {said}" if said else ""),
            )
        sock.settimeout(None)  # the attempt's timeout bounds an utterance, not the socket's
        web_socket = websocket.WebSocket(skip_utf8_validation=True, enable_multithread=True)
        # upgraded here (see upgrade): its frames from now on, read through the buffered stand-in
        # for a socket, which has what WebSocket calls on one
        web_socket.sock, web_socket.connected = sock, True  # type: ignore[assignment]
        conn = WsConnection(web_socket, preset)
        conn.start()
        if preset.keepalive_s is not None and self.reuse:
            conn.keeper = gevent.spawn(self._keep_alive, conn, preset.keepalive_s)
        try:
            for opening in preset.messages("open", self.values):
                conn.send(opening)
        except OSError as error:
            conn.stop()
            raise self._failed(f"the connection broke as the session opened ({os_error(error)})") from error
        return conn

    def _keep_alive(self, conn: WsConnection, every_s: float) -> None:
        """The preset's keepalive every ``every_s`` while nothing is in flight on ``conn`` (a
        server that closes an idle socket, ElevenLabs' 20 s, would end the session in a long
        think time); a server that answers it with a close ends the session, and the next turn
        opens a new one."""
        while conn.lost is None:
            gevent.sleep(every_s)
            if conn.lost is None and not conn.inboxes:
                try:
                    self._send(conn, "keepalive", self.values)
                except OSError:
                    return  # the reader sees the connection go
                conn.keepalives += 1

    def _failed(self, why: str) -> TransportError:
        return TransportError(f"{why}: {self.url}")

    def _values(self, conn: Connection, key: str, text: str | None = None) -> dict:
        return {**self.values, "context_id": key, "utterance": conn.utterances, "text": text}

    def _send(self, conn, kind: str, values: dict) -> None:
        for msg in self.preset.messages(kind, values):  # a sequence goes in order, one frame each
            conn.send(msg)

    def begin(self, conn: WsConnection, key: str, text: str) -> None:
        self._send(conn, "begin", self._values(conn, key))

    def send_text(self, conn: WsConnection, key: str, text: str) -> None:
        self._send(conn, "text", self._values(conn, key, text))

    def send_flush(self, conn: WsConnection, key: str) -> None:
        self._send(conn, "flush", self._values(conn, key))

    def send_end(self, conn: WsConnection, key: str) -> None:
        self._send(conn, "end", self._values(conn, key))

    def send_cancel(self, conn: WsConnection, key: str) -> None:
        self._send(conn, "cancel", self._values(conn, key))

    def close_now(self, conn: WsConnection) -> None:
        """The close handshake: what the server sends until its close frame answers is timed."""
        try:
            conn.ws.send_close()
        except websocket.WebSocketException as error:
            raise ConnectionResetError(str(error)) from None

    def answered(self):
        return Answered(101, True, "WebSocket", 101)

    def refusal(self, item: Item) -> Answered | None:
        if item.kind is Kind.CLOSED and item.code == TRY_AGAIN_LATER:
            return Answered(TRY_AGAIN_LATER, False, "WebSocket close 1013", 503)
        return None

    def goodbye(self, conn: WsConnection) -> None:
        # the preset's close is for a connection kept across utterances; one per utterance just closes
        msgs = self.preset.messages("close", self.values) if self.reuse else []
        if conn.keeper is not None:
            conn.keeper.kill(block=False)
        try:
            for msg in msgs:
                conn.send(msg)
            conn.ws.send_close()
        except (OSError, websocket.WebSocketException):
            pass  # gone already: dropping it is all that is left
        conn.stop("the session was closed")
