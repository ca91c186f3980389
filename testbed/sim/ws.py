"""The simulator's WebSocket face: vLLM-Omni's ``/v1/audio/speech/stream`` on the HTTP port,
in its dialect since PR #5517 (the connection stays open for the next utterance; ``--ws-close-after-done``
closes it after ``session.done``, as older vLLM-Omni and sglang-omni do).

The client sends ``session.config`` first, then ``input.text`` pieces and ``input.done``;
each sentence is answered, once its text is in, with ``audio.start`` (sample rate and
channels), binary PCM16 frames as the shared capacity makes them, and ``audio.done``; then
``session.done``. ``--ws-close-late-ms`` answers a client's close frame that late, its audio
going on meanwhile (audio that keeps coming after a close); ``--ws-idle-timeout-s`` closes a
session that sends nothing that long with no utterance in flight (1008, as ElevenLabs does). Cancels:
``input.cancel`` (the message vLLM-Omni's RFC #1480 proposed; no
released vLLM-Omni has it) stops the utterance in flight and is answered ``input.cancelled``;
a client that closes the session, or goes away, cancels it too (``--orphan-ms`` holds its turn
on). The upgrade is answered by hand on the socket pywsgi holds, and frames go
through wsproto's post-handshake connection.

Refusals: the capacity's limits refuse a session at the upgrade with the HTTP status and
Retry-After of the HTTP face, and a later utterance on an open session with close 1013 (try
again later). Faults (``--fault``): ``stall`` delays the upgrade's answer, the retry faults
answer it 429 with a broken Retry-After; after half an utterance's first sentence ``reset``
closes the session (1011), ``garbage`` sends a frame that is not JSON or audio that is not
base64, ``sse-error`` an error and a failed ``audio.done``, ``truncate`` ends the utterance
there; ``close`` closes the session after the utterance.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket

import gevent
from gevent.lock import Semaphore
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

from tts_knee.testbed.sim.capacity import Refused
from tts_knee.testbed.sim.faults import MID_STREAM_FAULTS, RETRY_FAULTS
from tts_knee.testbed.sim.session import Utterance, Voice

PATH = "/v1/audio/speech/stream"
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
READ_BYTES = 65536
TRY_AGAIN_LATER = 1013
CLOSE_OPCODE = 0x8


def serve(app, environ, start_response):
    """Answer one WebSocket upgrade (or refuse it) and run the session until it ends."""
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "").encode()
    if environ.get("HTTP_UPGRADE", "").lower() != "websocket" or not key:
        return app.reject("400 Bad Request", f"{PATH} speaks WebSocket: send an upgrade", start_response)
    if app.args.capacity is None:
        return app.reject("501 Not Implemented", "the simulator speaks WebSocket with --capacity only", start_response)
    fault = app.faults.pick()
    if fault == "stall":
        gevent.sleep(app.args.stall_s)
    if fault in RETRY_FAULTS:
        app.capacity.rejected += 1
        return app.reject(
            "429 Too Many Requests",
            "rate limit exceeded",
            start_response,
            [("Retry-After", "soon-ish" if fault == "bad-retry-after" else "999999")],
        )
    try:
        app.capacity.admit()  # the first utterance's
    except Refused as refused:
        return app.refuse(refused, start_response)
    handler = environ["sim.handler"]
    sock = handler.socket
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    try:
        sock.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        Session(app, sock, fault, environ.get("HTTP_X_REQUEST_ID")).run()
    except OSError:
        pass  # the client went away
    # the socket is the session's: pywsgi must neither answer nor read another request on it
    handler.close_connection = True
    return []


class Session(Voice):
    """One upgraded connection: reads the client's messages, one utterance at a time."""

    def __init__(self, app, sock, fault: str | None, request_id: str | None):
        self.app, self.sock, self.request_id = app, sock, request_id
        self.conn = Connection(ConnectionType.SERVER)
        self.writing = Semaphore()
        self.picked = _mid_stream(fault)
        self.number = app.next_session()
        self.utterances = 0
        self.configured = False
        self.utterance: Utterance | None = None
        self.speaking: Utterance | None = None  # the utterance the speaker greenlet runs
        self.speaker: gevent.Greenlet | None = None
        self.admitted = True  # the upgrade admitted the first utterance

    # the client's side

    def run(self) -> None:
        try:
            for msg in self.messages():
                if not self.handle(msg):
                    return
        finally:
            if self.speaker is not None and self.speaking is not None:  # set together
                self.speaking.cancel()  # the client went away: a cancel, as a close is
                if self.speaking.turn is None:
                    self.speaker.kill()  # still waiting for a slot
            elif self.admitted:
                self.app.capacity.withdraw()
            self.drop()

    def messages(self):
        """The client's text messages as they complete (a str, or None for a binary one)."""
        parts: list[str] = []
        idle_s = getattr(self.app.args, "ws_idle_timeout_s", None)
        if idle_s:
            self.sock.settimeout(idle_s)
        while True:
            try:
                data = self.sock.recv(READ_BYTES)
            except TimeoutError:
                if self.utterance is not None or self.speaker is not None and not self.speaker.dead:
                    continue  # an utterance in flight: the client waits for its audio
                self.close(1008, f"Have not received a new text input within the timeout of {idle_s:g} seconds")
                return
            if not data:
                return
            if data[0] & 0x0F == CLOSE_OPCODE and self.app.args.ws_close_late_ms:
                # read late, while the utterance's audio goes on (wsproto sends nothing once it has read a close)
                gevent.sleep(self.app.args.ws_close_late_ms / 1000)
            self.conn.receive_data(data)
            for ev in self.conn.events():
                if isinstance(ev, TextMessage):
                    parts.append(ev.data)
                    if ev.message_finished:
                        yield "".join(parts)
                        parts = []
                elif isinstance(ev, BytesMessage):
                    if ev.message_finished:
                        yield None
                elif isinstance(ev, Ping):
                    self.write(ev.response())
                elif isinstance(ev, CloseConnection):
                    self.write(ev.response())
                    return

    def handle(self, raw: str | None) -> bool:
        """One client message; False once the session is over."""
        try:
            msg = json.loads(raw) if raw is not None else None
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self.send_json({"type": "error", "message": "Invalid JSON message"})
            return True
        kind = msg.get("type")
        if not self.configured:
            if kind != "session.config":
                self.send_json({"type": "error", "message": "The first message must be session.config"})
                self.close(1008, "no session.config")
                return False
            self.configured = True
            return True
        if kind == "input.text":
            text = msg.get("text")
            if not isinstance(text, str):
                self.send_json({"type": "error", "message": "input.text needs a string text"})
                return True
            utt = self.current()
            if utt is None:
                return False
            utt.add(text)
        elif kind == "input.done":
            utt = self.current()
            if utt is None:
                return False
            utt.done()
            self.utterance = None
        elif kind == "input.cancel":
            if self.speaking is not None:
                self.speaking.cancel()
            self.utterance = None
            self.send_json({"type": "input.cancelled", "utterance_index": self.utterances - 1})
        elif kind == "session.close":
            self.close(1000, "")
            return False
        elif kind != "session.config":
            self.send_json({"type": "error", "message": f"Unknown message type: {kind}"})
        return True

    def current(self) -> Utterance | None:
        """The utterance the text belongs to: a new one after the last was done (once its audio
        is out, as vLLM-Omni's handler answers one utterance at a time); None when refused."""
        if self.utterance is not None:
            return self.utterance
        if self.speaker is not None:
            self.speaker.join()
        if not self.admitted:
            try:
                self.app.capacity.admit()
            except Refused as refused:
                self.close(TRY_AGAIN_LATER, f"try again later: {refused}")
                return None
            self.picked = _mid_stream(self.app.faults.pick())
        self.admitted = False
        label = {"protocol": "ws", "session": self.number, "utterance": self.utterances, "request_id": self.request_id}
        self.utterance = Utterance(self.app, self, label, self.picked if self.picked != "close" else None)
        self.utterances += 1
        self.speaking = self.utterance
        self.speaker = gevent.spawn(self._speak, self.utterance)
        return self.utterance

    def _speak(self, utt: Utterance) -> None:
        with contextlib.suppress(OSError):  # the client went away mid-utterance
            utt.speak()

    # the server's side (Voice)

    def sentence(self, index: int, text: str, rate: int) -> None:
        self.send_json(
            {
                "type": "audio.start",
                "utterance_index": self.utterances - 1,
                "sentence_index": index,
                "sentence_text": text,
                "format": "pcm",
                "sample_rate": rate,
                "channels": 1,
            }
        )

    def audio(self, index: int, pcm: bytes) -> None:
        self.write(BytesMessage(data=pcm))

    def sentence_done(self, index: int, nbytes: int) -> None:
        self.send_json(
            {
                "type": "audio.done",
                "utterance_index": self.utterances - 1,
                "sentence_index": index,
                "total_bytes": nbytes,
                "error": False,
            }
        )

    def finished(self, sentences: int) -> None:
        self.send_json({"type": "session.done", "utterance_index": self.utterances - 1, "total_sentences": sentences})
        if self.app.args.ws_close_after_done or self.picked == "close":
            self.close(1000, "")
            self.drop()

    def fault(self, name: str) -> None:
        if name == "reset":
            self.close(1011, "the reset fault")
            self.drop()
        elif name == "garbage":
            if self.app.rng.random() < 0.5:
                self.write(TextMessage(data='{"type": "audio.chunk", "audio_b64": "%%not base64%%"'))
            else:
                self.send_json(
                    {
                        "type": "audio.chunk",
                        "utterance_index": self.utterances - 1,
                        "audio_b64": "%%not base64%%",
                        "sample_rate": self.app.audio.sample_rate,
                    }
                )
        elif name == "sse-error":
            self.send_json({"type": "error", "message": "synthesis failed mid-stream (the sse-error fault)"})
            self.send_json(
                {
                    "type": "audio.done",
                    "utterance_index": self.utterances - 1,
                    "sentence_index": 0,
                    "total_bytes": 0,
                    "error": True,
                }
            )
            self.finished(1)
        else:  # truncate: the utterance ends early
            self.finished(1)

    # the wire

    def send_json(self, obj: dict) -> None:
        self.write(TextMessage(data=json.dumps(obj)))

    def write(self, event) -> None:
        with self.writing:
            self.sock.sendall(self.conn.send(event))

    def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(OSError):
            self.write(CloseConnection(code=code, reason=reason))

    def drop(self) -> None:
        """End the connection once what was written is out (the client reads a close frame first)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


def _mid_stream(fault: str | None) -> str | None:
    """The faults a session carries out itself (the others strike at the upgrade)."""
    return fault if fault in MID_STREAM_FAULTS + ("close",) else None
