"""gRPC's wire on a gevent socket: one HTTP/2 connection (the pure-Python ``h2`` library) whose
calls run one after another, each message stamped with the monotonic clock at the read that
completed it, as the HTTP transport stamps its body blocks.

Why not grpcio: under gevent, grpcio (with ``grpc.experimental.gevent.init_gevent()``, the way
the gRPC project supports it) hands every completion event from its own native threads to the
hub's thread pool and back. At 256 concurrent streams in one Locust process that put the
arrival stamps 56 ms late at p95 (and cost 368 us of CPU per chunk) where this client's were
1.9 ms late (168 us per chunk), medians of bench/grpc_cost.py's rounds in the manual's gRPC
section.

The wire is grpc/doc/PROTOCOL-HTTP2.md: a call is one HTTP/2 stream, ``POST /package.Service/
Method`` with ``content-type: application/grpc`` and ``te: trailers``; each message is a
compressed flag, a 4-byte big-endian length and the protobuf bytes; the call's status comes in
the trailers (``grpc-status``, ``grpc-message``), or in the headers of a trailers-only answer.
An answer that is not gRPC (an HTTP error from a proxy), a stream the server resets and a
connection going away map onto gRPC codes the way gRPC's own clients map them.

The frames a unary-in, stream-out call mostly receives are DATA frames of its open stream:
those this client reads itself (a 9-byte header, the payload handed to the call, the windows
opened again in batches), without h2's frame objects, stream state machine, event per frame
and the ``repr`` of each frame it formats for a log that is off; every other frame (SETTINGS,
HEADERS, trailers, RST_STREAM, GOAWAY, PING, WINDOW_UPDATE, a padded or last DATA frame, one on
another stream) goes to h2 in the order it came, and h2 is the reference for what they mean.

A :class:`Connection` has one reader: the greenlet iterating its current call's
:meth:`Call.messages`. Another greenlet may :meth:`Call.send` meanwhile (text paced in):
writes are serialised by a lock. Nothing here times out by itself: the caller's timeout is
raised where it waits, after which the connection is to be dropped (:meth:`Connection.close`).
"""

from __future__ import annotations

import errno
import socket
import ssl
import struct
import urllib.parse
from collections import deque
from dataclasses import dataclass, field

import gevent.lock
import gevent.socket
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from tts_knee.runformat import grpc_codes

from ..clock import mono

#: The receive window advertised for the connection and each stream: big enough that a
#: server never waits on this client's flow control at hundreds of chunks a second.
WINDOW_BYTES = 16 << 20
READ_BYTES = 256 << 10
#: DATA bytes read past h2 that open the windows again (WINDOW_UPDATE) once this many are taken:
#: a quarter of each window, so the server never waits on it.
WINDOW_BATCH = WINDOW_BYTES // 4
_PREFIX = struct.Struct(">BI")  # compressed flag, length
_FRAME = struct.Struct(">HBBBL")  # HTTP/2 frame header: length (high 16 bits, low 8), type, flags, stream
_WINDOW_UPDATE = struct.Struct(">HBBBLL")  # ... and its increment
_DATA, _HEADERS, _SETTINGS, _PUSH_PROMISE, _CONTINUATION = 0x0, 0x1, 0x4, 0x5, 0x9
_END_STREAM, _END_HEADERS, _PADDED = 0x1, 0x4, 0x8
#: A non-gRPC answer's HTTP status, as gRPC's clients read it (grpc/doc/http-grpc-status-mapping.md); None
#: (no headers came) finds none, as any status not here.
HTTP_AS_GRPC: dict[int | None, str] = {
    400: "INTERNAL",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "UNIMPLEMENTED",
    429: "UNAVAILABLE",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "UNAVAILABLE",
}
#: A stream the server reset, as gRPC reads its error code (PROTOCOL-HTTP2.md, "Errors").
RESET_AS_GRPC = {
    h2.errors.ErrorCodes.REFUSED_STREAM: "UNAVAILABLE",
    h2.errors.ErrorCodes.CANCEL: "CANCELLED",
    h2.errors.ErrorCodes.ENHANCE_YOUR_CALM: "RESOURCE_EXHAUSTED",
    h2.errors.ErrorCodes.INADEQUATE_SECURITY: "PERMISSION_DENIED",
}
BODY_SNIPPET_BYTES = 200


class ConnectionLost(Exception):
    """The connection failed before the call ended: refused, reset, closed, or not HTTP/2; one
    sentence. The connection is unusable."""


@dataclass
class Status:
    """How a call ended: the code's name, its details, and the metadata that came with it
    (headers and trailers, names lower case)."""

    code: str
    details: str
    metadata: dict = field(default_factory=dict)


class Connection:
    """One HTTP/2 connection to ``host:port`` (raises OSError when it cannot be opened)."""

    def __init__(self, host: str, port: int, connect_timeout_s: float, tls: ssl.SSLContext | None = None):
        self.authority = f"{host}:{port}"
        self.scheme = "https" if tls is not None else "http"
        self.sock: socket.socket | None = gevent.socket.create_connection((host, port), timeout=connect_timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:  # grpcs://: TLS offering h2, the handshake bounded by the connect timeout
            try:
                self.sock = tls.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.sock.settimeout(None)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW_BYTES,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(WINDOW_BYTES - self.h2.inbound_flow_control_window)
        self.lock = gevent.lock.RLock()
        self.call: Call | None = None
        self.going_away: int | None = None  # GOAWAY's last stream id: no new call here
        self.heard = False  # the server has sent something
        self.send_failed = False  # a send broke: the reader says how
        self._raw = False  # what is read goes to h2 as it comes (not HTTP/2 frames)
        self._h2_fed = False  # the last read handed h2 something
        self._inbox = bytearray()  # bytes read that do not make a whole frame yet
        self._in_header_block = False  # a HEADERS frame's CONTINUATION frames are due
        self._taken = 0  # DATA bytes read past h2 whose window is not opened again yet
        self._window_updates = b""  # WINDOW_UPDATE frames for the next flush
        self._flush()

    @property
    def usable(self) -> bool:
        return self.sock is not None and self.going_away is None and not self.send_failed

    def start(self, path: str, metadata: tuple = ()) -> Call:
        """Open a call to ``path`` (``/package.Service/Method``) with ``metadata`` (name, value)
        pairs; the previous call, if still open, is cancelled."""
        if self.call is not None and self.call.status is None:
            self.call.cancel()
        with self.lock:
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(
                sid,
                [
                    (":method", "POST"),
                    (":scheme", self.scheme),
                    (":path", path),
                    (":authority", self.authority),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                    *metadata,
                ],
            )
            self.call = Call(self, sid)
            self._flush()
        return self.call

    def wake(self) -> None:
        """PING the server: its answer wakes the reader waiting on the socket (after a call was
        ended from another greenlet)."""
        with self.lock:
            if self.sock is None:
                return
            self.h2.ping(b"tts-knee")
            self._flush()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _flush(self) -> None:
        """Send what h2 has queued. A send that fails is left to the reader, which still reads
        what the server said before it closed (an HTTP/1 error page, say) and says why."""
        with self.lock:
            data = self.h2.data_to_send()
            if self._window_updates:
                data, self._window_updates = data + self._window_updates, b""
            if data and self.sock is not None and not self.send_failed:
                try:
                    self.sock.sendall(data)
                except OSError:
                    self.send_failed = True

    def read(self) -> None:
        """Read what the socket has (waiting for it) and hand it to the current call."""
        try:
            # read by the call in flight, and closed (None) only as it fails: no check on the hot path
            data = self.sock.recv(READ_BYTES)  # type: ignore[union-attr]
        except OSError as error:
            self.close()
            raise ConnectionLost(f"the connection broke ({os_error(error)})") from None
        read_at = mono()
        if not data:
            self.close()
            raise ConnectionLost(
                "the server closed the connection"
                if self.heard
                else "the server closed the connection without a word of HTTP/2 (is grpc:// aimed at an HTTP/1 port?)"
            )
        if not self.heard and data.startswith(b"HTTP/"):
            self.close()
            line = data.split(b"\r\n", 1)[0].decode("latin-1")
            raise ConnectionLost(
                f"the server answered in HTTP/1 ({line}), not HTTP/2: is grpc:// aimed at an HTTP/1 port?"
            )
        if not self.heard and (len(data) < 4 or data[3] != _SETTINGS):
            self._raw = True  # not the SETTINGS frame a server's preface begins with: h2 judges it
        self.heard = True
        self._h2_fed = False
        if self._raw:
            self._to_h2(data, read_at)
        else:
            self._frames(data, read_at)
        if self._h2_fed or self._window_updates:  # h2 may have an answer to send (SETTINGS ACK, PING ACK ...)
            self._flush()

    def _frames(self, data: bytes, read_at: float) -> None:
        """Take the whole frames read so far: the current call's DATA frames here, the rest
        through h2, in the order they came."""
        inbox = self._inbox
        inbox += data
        call, end, start, h2_from = self.call, len(inbox), 0, 0
        while start + 9 <= end:
            length_high, length_low, kind, flags, sid = _FRAME.unpack_from(inbox, start)
            size = (length_high << 8) | length_low
            if size > self.h2.max_inbound_frame_size:
                self._raw = True  # from here on h2 has the bytes, and says what is wrong with them
                self._to_h2(bytes(inbox[h2_from:]), read_at)
                inbox.clear()
                return
            if start + 9 + size > end:
                break
            if self._in_header_block:
                self._in_header_block = kind == _CONTINUATION and not flags & _END_HEADERS
            elif kind in (_HEADERS, _PUSH_PROMISE):
                self._in_header_block = not flags & _END_HEADERS
            elif (
                kind == _DATA
                and not flags & (_END_STREAM | _PADDED)
                and call is not None
                and sid == call.sid
                and call.fast
                and call.status is None
            ):
                if h2_from < start:  # what came before goes first
                    self._to_h2(bytes(inbox[h2_from:start]), read_at)
                call._data(inbox[start + 9 : start + 9 + size], read_at)
                self._took(call, size)
                h2_from = start + 9 + size
            start += 9 + size
        if h2_from < start:
            self._to_h2(bytes(inbox[h2_from:start]), read_at)
        del inbox[:start]

    def _to_h2(self, data: bytes, read_at: float) -> None:
        """Hand whole frames (or bytes that are not) to h2 and their events to the call."""
        self._h2_fed = True
        conn = self.h2
        try:
            with self.lock:
                events = conn.receive_data(data)
                for event in events:  # the data is taken at once: the server's window opens again
                    if type(event) is h2.events.DataReceived:
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        except h2.exceptions.ProtocolError as error:
            self.close()
            raise ConnectionLost(
                f"the server does not speak HTTP/2 ({type(error).__name__}: {error}); "
                "is grpc:// aimed at an HTTP/1 port?"
            ) from None
        call = self.call
        for event in events:
            if type(event) is h2.events.ConnectionTerminated:
                self.going_away = event.last_stream_id or 0
                if call is not None and call.status is None and call.sid > self.going_away:
                    self.close()
                    raise ConnectionLost(
                        f"the server is going away (GOAWAY {_code(event.error_code)}) and did not take the call"
                    )
            elif call is not None and getattr(event, "stream_id", None) == call.sid:
                call.on(event, read_at)

    def _took(self, call: Call, size: int) -> None:
        """``size`` DATA bytes of ``call`` were read past h2: open the connection's and the
        stream's windows again once a batch of them is taken."""
        self._taken += size
        call.taken += size
        if self._taken >= WINDOW_BATCH:
            self._window_updates += _WINDOW_UPDATE.pack(0, 4, 0x8, 0, 0, self._taken)
            self._taken = 0
        if call.taken >= WINDOW_BATCH:
            self._window_updates += _WINDOW_UPDATE.pack(0, 4, 0x8, 0, call.sid, call.taken)
            call.taken = 0


class Call:
    """One call on a :class:`Connection`: send its messages, then read the answer's."""

    def __init__(self, conn: Connection, sid: int):
        self.conn, self.sid = conn, sid
        self.status: Status | None = None  # set once the call has ended
        self.ended_at: float | None = None
        self.answered = False  # the server's headers said gRPC
        self.fast = False  # ... and named no content-length h2 would check: DATA frames are read past h2
        self.taken = 0  # this call's DATA bytes read past h2 whose window is not opened again yet
        self._messages: deque = deque()
        self._buf = bytearray()
        self._metadata: dict = {}
        self._http: int | None = None
        self._body = b""

    def send(self, message: bytes, end: bool = False) -> bool:
        """Send one message (``end``: and end the request stream: no more messages); whether it
        went: nothing goes once the call has ended (the server may answer before it has all the
        requests) or the connection broke."""
        frame = _PREFIX.pack(0, len(message)) + message
        conn = self.conn
        with conn.lock:
            if self.status is not None or conn.sock is None or conn.send_failed:
                return False
            size = conn.h2.max_outbound_frame_size
            try:
                for offset in range(0, len(frame), size):
                    conn.h2.send_data(
                        self.sid, frame[offset : offset + size], end_stream=end and offset + size >= len(frame)
                    )
            except h2.exceptions.StreamClosedError:  # the server ended the call meanwhile
                return False
            conn._flush()
            return not conn.send_failed

    def outcome(self) -> tuple[Status, float]:
        """How the call ended (:attr:`status`) and when (:attr:`ended_at`): known once
        :meth:`messages` is exhausted or the call is cancelled."""
        status, ended_at = self.status, self.ended_at
        assert status is not None and ended_at is not None, "the call has not ended"
        return status, ended_at

    def cancel(self) -> None:
        """Reset the stream (RST_STREAM CANCEL): the server stops; the call ends CANCELLED."""
        self._abort(Status("CANCELLED", "cancelled by the client"), mono())

    def _abort(self, status: Status, ended_at: float) -> None:
        """End the call with ``status`` and reset its stream, so the server stops sending."""
        if self.status is not None:
            return
        self._end(status, ended_at)
        if self.conn.sock is not None:
            with self.conn.lock:
                try:
                    self.conn.h2.reset_stream(self.sid, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.StreamClosedError:  # it ended meanwhile: nothing to stop
                    return
                self.conn._flush()

    def messages(self):
        """The answer's messages as ``(arrival, bytes)``, as they come; when it is exhausted
        the call has ended and :attr:`status` says how. Raises :class:`ConnectionLost`."""
        while True:
            while self._messages:
                yield self._messages.popleft()
            if self.status is not None:
                return
            self.conn.read()

    # what the connection's reader hands over

    def on(self, event, read_at: float) -> None:
        kind = type(event)
        if kind is h2.events.ResponseReceived:
            self._headers(dict(event.headers), read_at)
        elif kind is h2.events.DataReceived:
            self._data(event.data, read_at)
        elif kind is h2.events.TrailersReceived:
            self._trailers(dict(event.headers), read_at)
        elif kind is h2.events.StreamEnded:
            self._stream_ended(read_at)
        elif kind is h2.events.StreamReset:
            code = RESET_AS_GRPC.get(event.error_code, "INTERNAL")
            self._end(Status(code, f"the server reset the stream ({_code(event.error_code)})", self._metadata), read_at)

    def _headers(self, headers: dict, read_at: float) -> None:
        self._metadata.update((name, value) for name, value in headers.items() if not name.startswith(":"))
        try:
            self._http = int(headers.get(":status", ""))
        except ValueError:
            self._http = 0
        grpc = (headers.get("content-type") or "").startswith("application/grpc")
        if self._http == 200 and grpc:
            self.answered = True
            self.fast = "content-length" not in headers
            if "grpc-status" in headers:  # trailers-only: the call ends here
                self._trailers(headers, read_at)

    def _data(self, data: bytes | bytearray, read_at: float) -> None:
        if not self.answered:  # not gRPC: keep the start of the body to quote
            self._body = (self._body + data)[:BODY_SNIPPET_BYTES]
            return
        buf = self._buf
        buf += data
        while len(buf) >= 5:
            compressed, length = _PREFIX.unpack_from(buf)
            if len(buf) < 5 + length:
                break
            if compressed:
                self._abort(
                    Status("INTERNAL", "the server sent a compressed message, which was not asked for"), read_at
                )
                return
            self._messages.append((read_at, bytes(buf[5 : 5 + length])))
            del buf[: 5 + length]

    def _trailers(self, headers: dict, read_at: float) -> None:
        self._metadata.update((name, value) for name, value in headers.items() if not name.startswith(":"))
        raw = headers.get("grpc-status", "")
        code = grpc_codes.name(int(raw)) if raw.isdigit() else "UNKNOWN"
        details = urllib.parse.unquote(headers.get("grpc-message", ""))
        if self._buf:
            code, details = "INTERNAL", f"the stream ended inside a message ({len(self._buf)} bytes of it)"
        self._end(Status(code, details, self._metadata), read_at)

    def _stream_ended(self, read_at: float) -> None:
        if self.status is not None:
            return
        if self.answered:
            self._end(Status("INTERNAL", "the stream ended without a gRPC status", self._metadata), read_at)
            return
        snippet = " ".join(self._body.decode("utf-8", "replace").split())
        ctype = self._metadata.get("content-type") or "no content type"
        said = f"HTTP {self._http} ({ctype})" + (f": {snippet}" if snippet else "")
        self._end(
            Status(HTTP_AS_GRPC.get(self._http, "UNKNOWN"), f"not a gRPC answer: {said}", self._metadata), read_at
        )

    def _end(self, status: Status, ended_at: float) -> None:
        if self.status is None:
            self.status, self.ended_at = status, ended_at


def _code(error_code) -> str:
    return getattr(error_code, "name", str(error_code))


def os_error(error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0)
    return f"{name}: {error.strerror}" if name and error.strerror else str(error) or type(error).__name__
