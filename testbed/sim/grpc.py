"""The simulator's gRPC face: NVIDIA Riva's ``RivaSpeechSynthesis`` (the published protos of
``nvidia-riva-client``; no Riva needed) over HTTP/2 with the pure-Python ``h2`` library, in the
simulator's gevent process, on the same :class:`~testbed.sim.capacity.Capacity` as the HTTP
app: one ``--capacity`` or ``--slots`` is shared by the requests of both.

- ``Synthesize``: the whole audio in one ``SynthesizeSpeechResponse`` once it is made.
- ``SynthesizeOnline``: the request stream's texts are joined, synthesis starts once it ends,
  and each piece of audio the timing model makes is one message, sent as it is made.
- Any other method: ``UNIMPLEMENTED``. A request for another encoding than LINEAR_PCM, or
  another sample rate than ``--sample-rate`` (0 means it): ``INVALID_ARGUMENT``.

Refusals say what gRPC says: the rate limit ``RESOURCE_EXHAUSTED``, a full queue ``UNAVAILABLE``
(both with ``grpc-retry-pushback-ms``: the wait, in ms), out of memory ``INTERNAL`` with the CUDA
message. The drills of ``--fault`` carried out the gRPC way: ``exhausted`` is
``RESOURCE_EXHAUSTED`` with a pushback of ``--pushback-ms``; ``bad-retry-after`` and
``huge-retry-after`` the same with a pushback of ``soon-ish`` or 999999000 ms; ``stall`` waits
``--stall-s`` first; ``close`` sends GOAWAY and closes the connection after the answer. After half
the audio of a streamed answer, ``reset`` resets the TCP connection, ``truncate`` ends the call
OK, ``sse-error`` ends it ``INTERNAL``, ``garbage`` sends a message that is not a
``SynthesizeSpeechResponse``; ``html`` answers HTTP 502 with an HTML page (a proxy's, not gRPC),
``json`` puts a JSON error where the audio goes, ``empty`` ends OK without audio, and
``wrong-encoding`` sends a WAV file (header and all) where LINEAR_PCM was asked for.

HTTP/2 as a server for a load tool: streams per connection are not capped (``MAX_CONCURRENT_
STREAMS`` 4096 instead of h2's 100, past which a client sharing one connection would queue),
flow control is honoured (a message waits for the client's WINDOW_UPDATE), and a stream the
client resets (a cancel: barge-in) stops its synthesis, at once or after ``--orphan-ms`` of work
for nobody, as a hung-up HTTP stream does. ``--chunk-log`` gets one line per ``SynthesizeOnline``
answer, as for HTTP streams: ``request_id`` (the request's ``id``), ``format`` "grpc",
``received`` (unix seconds its request stream had ended), ``generating``, ``sent`` (each audio
message handed to the socket), ``audio_ms`` and, for a call the client reset, ``cancelled``
(unix seconds the reset came).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import socket
import struct
import time
import urllib.parse
import uuid

import gevent
import gevent.event
import gevent.lock
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from gevent.pool import Pool
from gevent.server import StreamServer

from tts_knee.testbed.sim.audio import Clip, Speaker, wav_header
from tts_knee.testbed.sim.capacity import OOM_MESSAGE, Capacity, Refused
from tts_knee.testbed.sim.faults import MID_STREAM_FAULTS, Faults

SERVICE = "/nvidia.riva.tts.RivaSpeechSynthesis/"
SYNTHESIZE, ONLINE = SERVICE + "Synthesize", SERVICE + "SynthesizeOnline"
MAX_STREAMS = 4096
WINDOW_BYTES = 16 << 20
WINDOW_WAIT_S = 1.0  # a message short of window looks again this often, in case an update was missed
REFUSED_CODES = {"rate_limited": "RESOURCE_EXHAUSTED", "queue_full": "UNAVAILABLE", "out_of_memory": "INTERNAL"}
CODE_NUMBERS = {
    "OK": 0,
    "CANCELLED": 1,
    "INVALID_ARGUMENT": 3,
    "RESOURCE_EXHAUSTED": 8,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
}
GARBAGE_MESSAGE = b"\x07\x00"  # field number 0: no protobuf message parses it
log = logging.getLogger("testbed.sim")
HTML_PAGE = (
    b"<!doctype html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>\n"
)


def _frame(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


class _Done(Exception):
    """The answer is over (the client went away, or a fault ended it)."""


class RivaServer:
    """Serves RivaSpeechSynthesis on ``args.grpc_port`` with the shared ``capacity``."""

    def __init__(
        self,
        args: argparse.Namespace,
        capacity: Capacity,
        rng: random.Random,
        audio: Speaker | None = None,
        ssl_context=None,
    ):
        from riva.client.proto import riva_audio_pb2, riva_tts_pb2

        self.args, self.capacity, self.rng = args, capacity, rng
        self.faults = Faults(args.fault, args.fault_rate, rng)
        self.audio = audio or Speaker(args, rng)  # the HTTP face's, shared
        self.pb, self.linear_pcm = riva_tts_pb2, riva_audio_pb2.AudioEncoding.LINEAR_PCM
        self.server = StreamServer(
            (args.host, args.grpc_port),
            self._connection,
            spawn=Pool(),
            **({"ssl_context": ssl_context} if ssl_context is not None else {}),
        )
        name, _, value = str(getattr(args, "require_header", "") or "").partition(":")
        self.required = (name.strip().lower(), value.strip()) if name.strip() else None

    def _connection(self, sock, _address) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _Connection(self, sock).serve()


class _Connection:
    """One client connection: reads frames, and answers each call in a greenlet of its own."""

    def __init__(self, server: RivaServer, sock):
        self.server, self.sock = server, sock
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW_BYTES,
            },
        )
        self.lock = gevent.lock.RLock()
        self.window = gevent.event.Event()  # set at every WINDOW_UPDATE
        self.calls: dict[int, _Call] = {}
        self.closing = False

    def flush(self) -> None:
        with self.lock:
            data = self.h2.data_to_send()
            if data:
                self.sock.sendall(data)

    def serve(self) -> None:
        try:
            with self.lock:
                self.h2.initiate_connection()
                self.h2.increment_flow_control_window(WINDOW_BYTES - self.h2.inbound_flow_control_window)
                self.flush()
            while not self.closing:
                data = self.sock.recv(256 << 10)
                if not data:
                    break
                with self.lock:
                    events = self.h2.receive_data(data)
                    for ev in events:
                        self.on(ev)
                    self.flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass
        finally:
            for call in list(self.calls.values()):
                call.stop()
            self.sock.close()

    def on(self, ev) -> None:
        kind = type(ev)
        if kind is h2.events.RequestReceived:
            headers = dict(ev.headers)
            path = headers.get(":path")
            if path not in (SYNTHESIZE, ONLINE):
                self.trailers_only(ev.stream_id, "UNIMPLEMENTED", f"Method not found: {path}")
                return
            need = self.server.required
            if need is not None and headers.get(need[0]) != need[1]:
                self.trailers_only(ev.stream_id, "UNAUTHENTICATED", f"missing or wrong {need[0]} metadata")
                return
            self.calls[ev.stream_id] = _Call(self, ev.stream_id, path == ONLINE)
        elif kind is h2.events.DataReceived:
            self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            call = self.calls.get(ev.stream_id)
            if call is not None:
                call.data(ev.data)
        elif kind is h2.events.StreamEnded:
            call = self.calls.get(ev.stream_id)
            if call is not None:
                call.input_ended()
        elif kind is h2.events.StreamReset:
            call = self.calls.pop(ev.stream_id, None)
            if call is not None:
                call.stop()
        elif kind is h2.events.WindowUpdated:
            self.window.set()
        elif kind is h2.events.ConnectionTerminated:
            self.closing = True

    def trailers_only(self, sid: int, code: str, message: str, metadata: tuple = ()) -> None:
        with self.lock:
            self.h2.send_headers(
                sid,
                [
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-status", str(CODE_NUMBERS[code])),
                    ("grpc-message", urllib.parse.quote(message)),
                    *metadata,
                ],
                end_stream=True,
            )
            self.flush()

    def send(self, sid: int, data: bytes) -> None:
        """DATA within the client's flow-control window, waiting for its updates."""
        while data:
            with self.lock:
                n = min(len(data), self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
                if n > 0:
                    self.h2.send_data(sid, data[:n])
                    data = data[n:]
                    self.flush()
                    continue
                self.window.clear()
            self.window.wait(WINDOW_WAIT_S)


class _Call:
    """One call: its request messages, then its answer from a greenlet of its own."""

    def __init__(self, conn: _Connection, sid: int, online: bool):
        self.conn, self.sid, self.online = conn, sid, online
        self.buf = bytearray()
        self.requests: list = []
        self.greenlet: gevent.Greenlet | None = None
        self.received = 0.0
        self.cancelled: float | None = None  # unix seconds the client reset the stream

    def data(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 5:
            _, n = struct.unpack_from(">BI", self.buf)
            if len(self.buf) < 5 + n:
                return
            self.requests.append(self.conn.server.pb.SynthesizeSpeechRequest.FromString(bytes(self.buf[5 : 5 + n])))
            del self.buf[: 5 + n]

    def input_ended(self) -> None:
        self.received = time.time()
        self.greenlet = gevent.spawn(self.answer)

    def stop(self) -> None:
        """The client reset the stream (a cancel): the answer stops making audio."""
        self.cancelled = time.time()
        if self.greenlet is not None:
            self.greenlet.kill(block=False)

    def answer(self) -> None:
        conn = self.conn
        try:
            _Answer(self).run()
        except (_Done, OSError, h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass
        finally:
            conn.calls.pop(self.sid, None)


class _Answer:
    """What the server answers a call with: a refusal, or audio as the timing model makes it."""

    def __init__(self, call: _Call):
        self.call, self.conn, self.server = call, call.conn, call.conn.server
        self.args = self.server.args
        self.sent: list[float] = []
        self.audio_ms: list[float] = []

    def refuse(self, code: str, message: str, pushback: str | None = None) -> None:
        self.conn.trailers_only(
            self.call.sid, code, message, () if pushback is None else (("grpc-retry-pushback-ms", pushback),)
        )

    def run(self) -> None:
        call, args, capacity = self.call, self.args, self.server.capacity
        if not call.requests:
            self.refuse("INVALID_ARGUMENT", "no SynthesizeSpeechRequest came")
            return
        first = call.requests[0]
        text = "".join(r.text for r in call.requests) if call.online else first.text
        if first.encoding != self.server.linear_pcm:
            self.refuse("INVALID_ARGUMENT", "only LINEAR_PCM is synthesised here")
            return
        if first.sample_rate_hz not in (0, args.sample_rate):
            self.refuse(
                "INVALID_ARGUMENT",
                f"this server synthesises at {args.sample_rate} Hz; ask for sample_rate_hz {args.sample_rate}",
            )
            return
        if not text.strip():
            self.refuse("INVALID_ARGUMENT", "the text is empty")
            return
        fault = self.server.faults.pick()
        if fault == "stall":
            gevent.sleep(args.stall_s)
        if fault in ("exhausted", "bad-retry-after", "huge-retry-after"):
            capacity.rejected += 1
            wait: str | None = {
                "exhausted": f"{args.pushback_ms:g}",
                "bad-retry-after": "soon-ish",
                "huge-retry-after": "999999000",
            }[fault]
            self.refuse("RESOURCE_EXHAUSTED", "the server is busy", wait)
            return
        if fault == "html":
            self.not_grpc()
            return
        try:
            capacity.admit()
        except Refused as refused:
            wait = None if refused.retry_after_s is None else str(math.ceil(refused.retry_after_s * 1000))
            message = OOM_MESSAGE if refused.reason == "out_of_memory" else str(refused)
            self.refuse(REFUSED_CODES[refused.reason], message, wait)
            return
        clip = self.server.audio.clip(text, capacity.admitted)
        turn = capacity.take(text)
        request_id = first.id.value or uuid.uuid4().hex
        try:
            self.audio(turn, clip, request_id, fault)
        finally:
            if call.cancelled is None:
                turn.finish()
            else:  # as for an HTTP stream hung up on: at once, or after --orphan-ms of work for nobody
                turn.stop()
                turn.abandon(args.orphan_ms / 1000)
            if args.log_requests:
                fields = " ".join(f"{k}={json.dumps(v)}" for k, v in clip.fields().items())
                log.info(
                    f"grpc {'SynthesizeOnline' if call.online else 'Synthesize'} request_id={request_id} "
                    f"audio_ms={clip.seconds * 1000:.1f} {fields}"
                )
        if fault == "close":
            with self.conn.lock:
                self.conn.h2.close_connection()
                self.conn.flush()
            self.conn.closing = True
            self.conn.sock.shutdown(socket.SHUT_RDWR)

    def audio(self, turn, clip: Clip, request_id: str, fault: str | None) -> None:
        """The answer's headers, its audio as the timing model makes it (one message per piece,
        or the whole), then its status; the drills as the module doc says."""
        conn, sid, pcm = self.conn, self.call.sid, clip.pcm
        with conn.lock:
            conn.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            conn.flush()
        message = self.server.pb.SynthesizeSpeechResponse()
        message.id.value = request_id  # Riva echoes the request's id
        pieces = turn.pieces(pcm, whole=not self.call.online)
        mid = fault if fault in MID_STREAM_FAULTS else None
        left = len(pcm) // 4 * 2 if mid else len(pcm)  # a mid-stream fault strikes after half the audio
        head = wav_header(len(pcm), self.args.sample_rate) if fault == "wrong-encoding" else b""
        try:
            if fault == "empty":
                pieces.close()
            for piece in pieces:
                piece = piece[:left]
                left -= len(piece)
                if piece:
                    message.audio = b'{"error": "synthesis failed"}' if fault == "json" else head + piece
                    head = b""
                    conn.send(sid, _frame(message.SerializeToString()))
                    self.sent.append(time.time())  # resumed once the message is on the socket
                    self.audio_ms.append(self.server.audio.seconds(piece) * 1000)
                if mid and not left:
                    break
        finally:
            pieces.close()
            if self.call.online:
                self.log(request_id, turn, clip)
        self.end(mid)

    def end(self, fault: str | None) -> None:
        conn, sid = self.conn, self.call.sid
        if fault == "reset":
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.sock.close()
            raise _Done()
        if fault == "garbage":
            conn.send(sid, _frame(GARBAGE_MESSAGE))
        code, message = (
            ("INTERNAL", "synthesis failed mid-stream (the sse-error fault)") if fault == "sse-error" else ("OK", "")
        )
        with conn.lock:
            conn.h2.send_headers(
                sid,
                [("grpc-status", str(CODE_NUMBERS[code])), ("grpc-message", urllib.parse.quote(message))],
                end_stream=True,
            )
            conn.flush()

    def not_grpc(self) -> None:
        with self.conn.lock:
            self.conn.h2.send_headers(self.call.sid, [(":status", "502"), ("content-type", "text/html")])
            self.conn.h2.send_data(self.call.sid, HTML_PAGE, end_stream=True)
            self.conn.flush()

    def log(self, request_id: str, turn, clip: Clip) -> None:
        log_file = self.args.chunk_log
        if log_file:
            log_file.write(
                json.dumps(
                    {
                        "request_id": request_id,
                        "format": "grpc",
                        "received": round(self.call.received, 6),
                        "generating": turn.generating and round(turn.generating, 6),
                        "sent": [round(t, 6) for t in self.sent],
                        "audio_ms": [round(ms, 3) for ms in self.audio_ms],
                        **clip.fields(),
                        **({} if self.call.cancelled is None else {"cancelled": round(self.call.cancelled, 6)}),
                    }
                )
                + "\n"
            )
