"""The simulator's Wyoming face (``--wyoming-port``): Home Assistant's protocol for voice
services over TCP, as wyoming-piper speaks it, on the shared capacity.

An event is a line of JSON (``type``, ``data_length``, ``payload_length``), that many bytes of
JSON data, then the payload. ``describe`` is answered with ``info``; a plain ``synthesize``
with one ``audio-start``, the ``audio-chunk`` s of all its sentences and one ``audio-stop``;
a stream (``synthesize-start``, ``synthesize-chunk`` x N, ``synthesize-stop``) with
``audio-start`` ... ``audio-stop`` per sentence, each once its text is in, then
``synthesize-stopped``. A ``synthesize`` inside a stream is ignored (Home Assistant sends one
for servers that do not stream). A refusal by the capacity's limits is an ``error`` event,
then the connection closes, as wyoming-piper does on an error.

Faults (``--fault``): ``stall`` delays an utterance's first audio; after half of its first
sentence ``reset`` aborts the connection (RST), ``garbage`` sends a header whose
``data_length`` is wrong, ``sse-error`` an ``error`` event and a close, ``truncate`` ends the
utterance there.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from typing import Any

import gevent
from gevent.lock import Semaphore
from gevent.server import StreamServer

from tts_knee.testbed.sim.capacity import Refused
from tts_knee.testbed.sim.faults import MID_STREAM_FAULTS
from tts_knee.testbed.sim.session import Utterance, Voice

READ_BYTES = 65536
MAX_LINE_BYTES = 65536
VERSION = "1.10.2"  # the wyoming library version whose events these are


def event(kind: str, data: dict | None = None, payload: bytes = b"", data_length: int | None = None) -> bytes:
    body = json.dumps(data).encode() if data else b""
    head: dict[str, Any] = {"type": kind, "version": VERSION}
    if body:
        head["data_length"] = len(body) if data_length is None else data_length
    if payload:
        head["payload_length"] = len(payload)
    return json.dumps(head).encode() + b"\n" + body + payload


def server(app, host: str, port: int) -> StreamServer:
    """The Wyoming face's server, not yet started."""
    return StreamServer((host, port), lambda sock, _addr: Session(app, sock).run(), backlog=1024)


class Session(Voice):
    """One client connection: its events in, one utterance at a time."""

    def __init__(self, app, sock: socket.socket):
        self.app, self.sock = app, sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.writing = Semaphore()
        self.buf = b""
        self.number = app.next_session()
        self.utterances = 0
        self.utterance: Utterance | None = None
        self.speaker: gevent.Greenlet | None = None
        self.speaking: Utterance | None = None
        self.streaming = False
        self.picked: str | None = None

    def run(self) -> None:
        try:
            while True:
                ev = self.read()
                if ev is None or not self.handle(*ev):
                    return
        except OSError:
            pass  # the client went away
        finally:
            if self.speaker is not None and self.speaking is not None:  # set together
                self.speaking.cancel()  # the client went away: Wyoming's only cancel
                if self.speaking.turn is None:
                    self.speaker.kill()  # still waiting for a slot
            self.sock.close()

    def read(self) -> tuple[str, dict] | None:
        """The next event's type and data, or None when the client has gone (or sent what is
        not Wyoming, which ends the connection)."""
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE_BYTES:
                return None
            more = self.sock.recv(READ_BYTES)
            if not more:
                return None
            self.buf += more
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            head = json.loads(line)
            n = int(head.get("data_length") or 0) + int(head.get("payload_length") or 0)
        except (ValueError, TypeError, AttributeError):
            return None
        while len(self.buf) < n:
            more = self.sock.recv(READ_BYTES)
            if not more:
                return None
            self.buf += more
        blob, self.buf = self.buf[:n], self.buf[n:]
        data = head.get("data") if isinstance(head.get("data"), dict) else {}
        size = int(head.get("data_length") or 0)
        if size:
            try:
                data = {**data, **json.loads(blob[:size])}
            except (ValueError, TypeError):
                return None
        return str(head.get("type")), data

    def handle(self, kind: str, data: dict) -> bool:
        """One client event; False once the connection is to close."""
        if kind == "describe":
            self.write(
                event(
                    "info",
                    {
                        "tts": [
                            {
                                "name": "tts-knee-sim",
                                "description": "tts-knee's simulator",
                                "installed": True,
                                "attribution": {"name": "tts-knee", "url": ""},
                                "version": VERSION,
                                "supports_synthesize_streaming": True,
                                "voices": [
                                    {
                                        "name": "sim",
                                        "description": "a quiet tone"
                                        if self.app.audio.speech is None
                                        else "piper's joe",
                                        "installed": True,
                                        "version": VERSION,
                                        "attribution": {"name": "tts-knee", "url": ""},
                                        "languages": ["en"],
                                    }
                                ],
                            }
                        ]
                    },
                )
            )
        elif kind == "synthesize":
            if self.streaming:
                return True  # Home Assistant's copy of a streamed text, for servers that do not stream
            utt = self.begin(streamed=False)
            if utt is None:
                return False
            utt.add(str(data.get("text") or ""))
            utt.done()
        elif kind == "synthesize-start":
            return self.begin(streamed=True) is not None
        elif kind == "synthesize-chunk" and self.utterance is not None:
            self.utterance.add(str(data.get("text") or ""))
        elif kind == "synthesize-stop" and self.utterance is not None:
            self.utterance.done()
        return True

    def begin(self, streamed: bool) -> Utterance | None:
        """A new utterance, once the last one's audio is out; None when refused (the error event
        is sent, and the connection closes)."""
        if self.speaker is not None:
            self.speaker.join()
        try:
            self.app.capacity.admit()
        except Refused as refused:
            self.write(event("error", {"text": str(refused), "code": refused.reason}))
            return None
        fault = self.app.faults.pick()
        if fault == "stall":
            gevent.sleep(self.app.args.stall_s)
        self.picked = fault if fault in MID_STREAM_FAULTS else None
        self.streaming = streamed
        label = {"protocol": "wyoming", "session": self.number, "utterance": self.utterances}
        self.utterances += 1
        self.utterance = self.speaking = Utterance(self.app, self, label, self.picked)
        self.speaker = gevent.spawn(self._speak, self.utterance)
        return self.utterance

    def _speak(self, utt: Utterance) -> None:
        with contextlib.suppress(OSError):  # the client went away mid-utterance
            utt.speak()

    # the server's side (Voice)

    def _format(self) -> dict:
        return {"rate": self.app.audio.sample_rate, "width": 2, "channels": 1, "timestamp": None}

    def sentence(self, index: int, text: str, rate: int) -> None:
        if self.streaming or index == 0:
            self.write(event("audio-start", self._format()))

    def audio(self, index: int, pcm: bytes) -> None:
        self.write(event("audio-chunk", self._format(), pcm))

    def sentence_done(self, index: int, nbytes: int) -> None:
        if self.streaming:
            self.write(event("audio-stop", {"timestamp": None}))

    def finished(self, sentences: int) -> None:
        if self.streaming:
            self.write(event("synthesize-stopped"))
            self.streaming = False
        else:
            self.write(event("audio-stop", {"timestamp": None}))
        self.utterance = None

    def fault(self, name: str) -> None:
        if name == "reset":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        elif name == "garbage":  # the header promises more data than follows
            data = self._format()
            self.write(event("audio-chunk", data, b"\0" * 2048, data_length=len(json.dumps(data)) + 40))
        elif name == "sse-error":
            self.write(
                event("error", {"text": "synthesis failed mid-stream (the sse-error fault)", "code": "SimulatedError"})
            )
            self.sock.shutdown(socket.SHUT_RDWR)
        else:  # truncate
            if self.streaming:
                self.write(event("audio-stop", {"timestamp": None}))
            self.finished(1)

    def write(self, data: bytes) -> None:
        with self.writing:
            self.sock.sendall(data)
