"""The simulator's HTTP face: a WSGI app (gevent's pywsgi) that parses speech requests (JSON, or
multipart/form-data with a reference clip as a file part), admits them through the shared
:class:`~testbed.sim.capacity.Capacity`, and answers whole WAV or PCM bodies, chunked audio
streams or OpenAI-style server-sent events, with the faults of :mod:`testbed.sim.faults`
carried out the HTTP way. ``/v1/audio/voices`` registers, lists and deletes voices the way
vLLM-Omni's server does (:class:`~testbed.sim.voices.Registry`). WebSocket upgrades on
vLLM-Omni's path go to the WebSocket face (:mod:`testbed.sim.ws`)."""

from __future__ import annotations

import argparse
import base64
import email.utils
import errno
import json
import math
import os
import random
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.pywsgi import WSGIHandler
from werkzeug.formparser import parse_form_data

from tts_knee.testbed.sim import metrics, ws
from tts_knee.testbed.sim.audio import Clip, Speaker, wav_header
from tts_knee.testbed.sim.capacity import Capacity, Refused, Turn
from tts_knee.testbed.sim.faults import BODY_FAULTS, MID_STREAM_FAULTS, RETRY_FAULTS, Faults
from tts_knee.testbed.sim.voices import Registry, clip_key

HTML_PAGE = (
    b"<!doctype html><html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>Bad Gateway</h1><p>upstream returned an error</p></body></html>\n"
)
RESPONSE_FORMATS = ("wav", "pcm")
STREAM_FORMATS = ("sse", "audio")
SSE_CHARS_PER_TOKEN = 4  # usage figures in speech.audio.done: placeholders with a fixed rule
SSE_AUDIO_TOKENS_PER_S = 50
#: --unspeakable: how a text with no letter or digit is answered.
UNSPEAKABLE = ("audio", "400", "500", "hang")
SPEECH_PATHS = {"/v1/audio/speech": "input", "/synthesize": "text", "/tts": "text"}
VOICES_PATH = "/v1/audio/voices"
#: The model ``GET /v1/models`` lists, as an OpenAI-style server does.
MODEL_ID = "tts-knee-sim"
REFUSED_STATUS = {
    "rate_limited": "429 Too Many Requests",
    "out_of_memory": "500 Internal Server Error",
    "queue_full": "503 Service Unavailable",
}


@dataclass
class Speech:
    """One parsed synthesis request."""

    text: str
    response_format: str
    stream: bool
    request_id: str
    sse: bool = False  # server-sent events (always streamed)
    received: float = 0.0  # unix seconds the request's body had been read
    voice: str | None = None  # the key of its voice in the voice cache (None: the default voice)
    slowed: bool = False  # its language (or voice) is the one --slow-above slows


class _Reject(Exception):
    """Ends a request early with an error response."""

    def __init__(self, status: str, message: str, headers: list | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or []


def _json_body(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Handler(WSGIHandler):
    """Sends without Nagle delays, and lets the ``reset`` fault reach its socket."""

    def handle(self):
        # pywsgi writes headers and body separately; with Nagle on, the body waits for the
        # client's delayed ACK (~40 ms on Linux), which would swamp the configured latency.
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return super().handle()

    def get_environ(self):
        env = super().get_environ()
        env["sim.socket"] = self.socket
        env["sim.handler"] = self  # a WebSocket session takes the connection over
        return env

    def format_request(self):
        """pywsgi's access line (``--log-requests``); an answer's adds its request id, its audio and
        what was done to it: ``request_id=ID audio_ms=MS garbled=false silence_ms=0 runaway=false``."""
        line = super().format_request()
        environ: dict[str, Any] = getattr(self, "environ", None) or {}
        clip = environ.get("sim.clip")
        if clip is None:
            return line
        request_id = environ.get("sim.request_id", "-")
        fields = " ".join(f"{k}={json.dumps(v)}" for k, v in clip.fields().items())
        return f"{line} request_id={request_id} audio_ms={clip.seconds * 1000:.1f} {fields}"


class SpeechApp:
    """The WSGI application: parses, admits, queues, 'synthesises' and answers."""

    def __init__(self, args: argparse.Namespace, capacity: Capacity, rng: random.Random, audio: Speaker | None = None):
        self.args = args
        self.capacity = capacity
        self.rng = rng
        self.faults = Faults(args.fault, args.fault_rate, rng)
        self.audio = audio or Speaker(args, rng)  # every face's answers' PCM (the tone, or --speech)
        self.registry = Registry()
        # --require-header: the WSGI environ key and the value a request must carry
        name, _, value = str(getattr(args, "require_header", "") or "").partition(":")
        self.required = ("HTTP_" + name.strip().upper().replace("-", "_"), value.strip()) if name.strip() else None
        self.sessions = 0  # WebSocket and Wyoming sessions begun, numbering them in the chunk log

    def next_session(self) -> int:
        self.sessions += 1
        return self.sessions

    # routing

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "/metrics" and method == "GET":
                return self._respond(
                    start_response,
                    "200 OK",
                    metrics.exposition(self.capacity, self.args.metrics_prefix).encode(),
                    ctype="text/plain; version=0.0.4; charset=utf-8",
                )
            if path == "/v1/models" and method == "GET":
                models = {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "tts-knee"}]}
                return self._respond(start_response, "200 OK", _json_body(models))
            if path == "/health":
                if method != "GET":
                    raise _Reject("405 Method Not Allowed", f"{method} not allowed on {path}", [("Allow", "GET")])
                return self._respond(start_response, "200 OK", _json_body(metrics.health(self.capacity, self.registry)))
            if self.required is not None and environ.get(self.required[0]) != self.required[1]:
                raise _Reject(
                    "401 Unauthorized", f"missing or wrong {self.args.require_header.partition(':')[0]} header"
                )
            if path == VOICES_PATH or path.startswith(VOICES_PATH + "/"):
                return self.voices(environ, start_response, path, method)
            if path == ws.PATH:
                return ws.serve(self, environ, start_response)
            if path not in SPEECH_PATHS:
                raise _Reject("404 Not Found", f"no endpoint at {path}")
            if method != "POST":
                raise _Reject("405 Method Not Allowed", f"{method} not allowed on {path}", [("Allow", "POST")])
            return self.speech(environ, start_response, path)
        except _Reject as rej:
            return self._respond(start_response, rej.status, _json_body({"error": str(rej)}), rej.headers)

    @staticmethod
    def _respond(start_response, status, body: bytes, headers=(), ctype="application/json"):
        start_response(status, [("Content-Type", ctype), *headers])
        return [body]

    def reject(self, status: str, message: str, start_response, headers=()):
        """An error answer in the HTTP face's shape (for another face's upgrade)."""
        return self._respond(start_response, status, _json_body({"error": message}), headers)

    def refuse(self, refused: Refused, start_response):
        """A limit's refusal as the HTTP face answers it: its status, and Retry-After where known."""
        headers = [] if refused.retry_after_s is None else [self.retry_after(refused.retry_after_s)]
        return self.reject(REFUSED_STATUS[refused.reason], str(refused), start_response, headers)

    # voices

    def voices(self, environ, start_response, path: str, method: str):
        """``POST /v1/audio/voices`` (form: ``audio_sample``, ``consent``, ``name``) registers a
        voice; ``DELETE /v1/audio/voices/NAME`` removes it; ``GET`` lists them."""
        if path == VOICES_PATH and method == "GET":
            return self._respond(
                start_response,
                "200 OK",
                _json_body(
                    {"voices": sorted(self.registry.voices), "uploaded_voices": list(self.registry.voices.values())}
                ),
            )
        if path == VOICES_PATH and method == "POST":
            _, form, files = parse_form_data(environ)
            sample = files.get("audio_sample")
            if sample is None or "consent" not in form or "name" not in form:
                raise _Reject("422 Unprocessable Entity", "audio_sample, consent and name are required")
            try:
                info = self.registry.add(form["name"], form["consent"], sample.read(), sample.mimetype)
            except ValueError as e:
                return self._respond(start_response, "400 Bad Request", _json_body({"detail": str(e)}))
            return self._respond(start_response, "200 OK", _json_body({"success": True, "voice": info}))
        if method == "DELETE" and path.startswith(VOICES_PATH + "/"):
            name = path[len(VOICES_PATH) + 1 :]
            if not self.registry.remove(name):
                return self._respond(
                    start_response, "404 Not Found", _json_body({"detail": f"Voice '{name}' not found"})
                )
            return self._respond(
                start_response,
                "200 OK",
                _json_body({"success": True, "message": f"Voice '{name}' deleted successfully"}),
            )
        raise _Reject("405 Method Not Allowed", f"{method} not allowed on {path}")

    def voice_key(self, data: dict, clip: bytes | None) -> str | None:
        """The request's voice in the voice cache: its clip's bytes (a form's file part, or
        ``ref_audio`` as base64 or a data: URL), else its voice by name (a registered voice by
        its clip), else None."""
        ref = data.get("ref_audio")
        if clip is None and isinstance(ref, str) and ref:
            try:
                clip = base64.b64decode(ref.split(",", 1)[1] if ref.startswith("data:") else ref, validate=True)
            except ValueError:
                clip = ref.encode()  # a URL or a path: the clip it names
        if clip is not None:
            return clip_key(clip)
        name = data.get("voice")
        if isinstance(name, str) and name:
            return self.registry.keys.get(name) or f"voice:{name}"
        return None

    # synthesis

    def parse(self, environ, path: str) -> Speech:
        clip = None
        if environ.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
            _, form, files = parse_form_data(environ)
            data: dict[str, Any] = dict(form.items())
            data["stream"] = data.get("stream") == "true"
            part = next(iter(files.values()), None)
            clip = None if part is None else part.read()
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                data = json.loads(environ["wsgi.input"].read(length) or b"null")
            except (ValueError, UnicodeDecodeError):
                raise _Reject("400 Bad Request", "the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise _Reject("400 Bad Request", "the body must be a JSON object")
        field = SPEECH_PATHS[path]
        text = data.get(field)
        if not isinstance(text, str) or not text.strip():
            raise _Reject("400 Bad Request", f"'{field}' must be a non-empty string")
        if self.args.max_chars is not None and len(text) > self.args.max_chars:
            raise _Reject(
                "400 Bad Request", f"'{field}' is {len(text)} characters; at most {self.args.max_chars} are allowed"
            )
        if self.args.unspeakable != "audio" and not any(c.isalnum() for c in text):
            if self.args.unspeakable == "hang":
                gevent.sleep(self.args.stall_s)
            if self.args.unspeakable == "400":
                raise _Reject("400 Bad Request", f"'{field}' has nothing to speak")
            raise _Reject("500 Internal Server Error", "the text front end produced no phonemes")
        fmt = data.get("response_format", "wav")
        if fmt not in RESPONSE_FORMATS:
            raise _Reject(
                "400 Bad Request", f"response_format {fmt!r} is not supported; use one of {', '.join(RESPONSE_FORMATS)}"
            )
        stream_format = data.get("stream_format")
        if stream_format is not None and stream_format not in STREAM_FORMATS:
            raise _Reject(
                "400 Bad Request",
                f"stream_format {stream_format!r} is not supported; use one of {', '.join(STREAM_FORMATS)}",
            )
        sse = stream_format == "sse" or (self.args.sse and stream_format is None)
        stream = self.args.stream or sse or stream_format is not None or data.get("stream") is True
        request_id = environ.get("HTTP_X_REQUEST_ID") or uuid.uuid4().hex
        slow_language, slow_voice = getattr(self.args, "slow_language", None), getattr(self.args, "slow_voice", None)
        slowed = (slow_language is not None and data.get("language") == slow_language) or (
            slow_voice is not None and data.get("voice") == slow_voice
        )
        return Speech(text, fmt, stream, request_id, sse, time.time(), self.voice_key(data, clip), slowed)

    def speech(self, environ, start_response, path: str):
        req = self.parse(environ, path)
        fault = self.faults.pick()
        if fault == "stall":
            gevent.sleep(self.args.stall_s)
        ids = [("X-Request-Id", req.request_id)]
        if fault in RETRY_FAULTS or fault == "exhausted":
            self.capacity.rejected += 1
            value = {"bad-retry-after": "soon-ish", "huge-retry-after": "999999"}.get(
                fault, str(math.ceil(self.args.pushback_ms / 1000))
            )
            raise _Reject("429 Too Many Requests", "rate limit exceeded", [("Retry-After", value), *ids])
        try:
            self.capacity.admit()
        except Refused as refused:
            headers = ids if refused.retry_after_s is None else [self.retry_after(refused.retry_after_s), *ids]
            raise _Reject(REFUSED_STATUS[refused.reason], str(refused), headers) from None
        clip = self.audio.clip(req.text, self.capacity.admitted)
        environ["sim.clip"], environ["sim.request_id"] = clip, req.request_id  # for the --log-requests line
        pcm = clip.pcm
        turn = self.capacity.take(req.text, req.voice, req.slowed)
        if req.stream and self.answers_streamed(req, fault):
            return self.stream(environ, start_response, req, clip, turn, ids, fault)
        try:
            for _ in turn.pieces(pcm, whole=True):
                pass
            service_s = turn.service_s
        finally:
            turn.finish()
        timing = self.server_timing(turn.queue_s, service_s, turn.queue_s + time.monotonic() - turn.acquired)
        headers = [timing, *ids]
        if fault in BODY_FAULTS:
            return self.body_fault(fault, environ, start_response, req, pcm, headers)
        if fault == "close":
            headers.append(("Connection", "close"))
        body = pcm if req.response_format == "pcm" else wav_header(len(pcm), self.audio.sample_rate) + pcm
        return self._respond(start_response, "200 OK", body, headers, self.content_type(req))

    @staticmethod
    def answers_streamed(req: Speech, fault: str | None) -> bool:
        """Whether a streamed request is answered as a stream under ``fault``: faults that
        hit mid-stream do; whole wrong bodies (and garbage outside SSE) are sent whole."""
        if fault in ("html", "json", "empty"):
            return False
        return fault != "garbage" or req.sse

    def retry_after(self, seconds: float) -> tuple[str, str]:
        delta = max(1, math.ceil(seconds))
        if self.args.retry_after_format == "http-date":
            return "Retry-After", email.utils.formatdate(time.time() + delta, usegmt=True)
        return "Retry-After", str(delta)

    @staticmethod
    def server_timing(queue_s: float, infer_s: float, total_s: float | None = None):
        parts = [f"queue;dur={queue_s * 1000:.1f}", f"infer;dur={infer_s * 1000:.1f}"]
        if total_s is not None:
            parts.append(f"total;dur={total_s * 1000:.1f}")
        return "Server-Timing", ", ".join(parts)

    @staticmethod
    def content_type(req: Speech) -> str:
        if req.sse:
            return "text/event-stream"
        return "audio/pcm" if req.response_format == "pcm" else "audio/wav"

    def stream(self, environ, start_response, req, clip: Clip, turn: Turn, ids, fault):
        """Headers now, then each chunk as it is made (see :class:`_Stream`)."""
        if turn.planned_s is not None:
            timing = self.server_timing(turn.queue_s, turn.planned_s)
        else:  # the service time is known once the audio is made
            timing = ("Server-Timing", f"queue;dur={turn.queue_s * 1000:.1f}, prefill;dur={self.args.prefill_ms:.1f}")
        pieces = turn.pieces(clip.pcm)
        headers = [("Content-Type", self.content_type(req)), timing, *ids]
        if req.sse:
            headers.append(("Cache-Control", "no-cache"))
        if fault == "close":
            headers.append(("Connection", "close"))
        try:
            write = start_response("200 OK", headers)
            write(b"")  # flush the headers before any audio exists
        except BaseException:
            pieces.close()
            turn.finish()
            raise
        fault = fault if fault in MID_STREAM_FAULTS else None
        return _Stream(self, req, clip, pieces, fault, environ["sim.socket"], turn)

    def body_fault(self, fault, environ, start_response, req, pcm, headers):
        """A 200 that is not the audio it should be."""
        wav = wav_header(len(pcm), self.audio.sample_rate) + pcm
        if fault == "html":
            return self._respond(start_response, "200 OK", HTML_PAGE, headers, "text/html")
        if fault == "json":  # quotes the input, as many servers' errors do (markup and all)
            body = _json_body({"error": f"synthesis failed: {req.text[:80]}", "request_id": req.request_id})
            return self._respond(start_response, "200 OK", body, headers)
        if fault == "empty":
            return self._respond(start_response, "200 OK", b"", headers, "audio/wav")
        if fault == "garbage":
            return self._respond(start_response, "200 OK", os.urandom(len(wav)), headers, "audio/wav")
        if fault == "truncate":  # a complete HTTP body, but the WAV header promises more
            cut = wav[: 44 + len(pcm) // 4]
            return self._respond(start_response, "200 OK", cut, [*headers, ("Connection", "close")], "audio/wav")
        # reset: promise the whole body, send half of it, then abort the connection (RST)
        start_response(
            "200 OK",
            [("Content-Type", "audio/wav"), ("Content-Length", str(len(wav))), ("Connection", "close"), *headers],
        )
        sock = environ["sim.socket"]

        def half_then_reset():
            yield wav[: len(wav) // 2]
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

        return half_then_reset()


class _Stream:
    """A streamed response body: ``pieces`` of PCM framed as WAV, raw PCM or SSE, one write
    each, as they come. Holds its turn until the last write or until closed. A client that
    hangs up mid-stream (barge-in) is seen at once, by a greenlet that waits for its socket to
    read its end, and its turn stopped and abandoned (``--orphan-ms``)."""

    def __init__(self, app: SpeechApp, req: Speech, clip: Clip, pieces, fault: str | None, sock, turn: Turn):
        self.app, self.req, self.clip, self.pcm, self.pieces = app, req, clip, clip.pcm, pieces
        self.fault = None if fault == "sse-error" and not req.sse else fault
        self.sock = sock
        self.turn = turn
        self.sent: list[float] = []  # unix seconds each audio write had been handed over
        self.audio_ms: list[float] = []
        self._done = False
        self.complete = False
        self.hung_up: float | None = None  # unix seconds the client was seen gone
        self.watcher = gevent.spawn(self._watch)

    def _watch(self) -> None:
        try:
            data = self.sock.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data and not self.complete:
            self.hung_up = time.time()
            self.turn.stop()

    def __iter__(self):
        wav = not self.req.sse and self.req.response_format != "pcm"
        head = wav_header(0, self.app.audio.sample_rate, placeholder=True) if wav else b""
        if head and self.app.args.wav_header_alone:
            yield head
            head = b""
        # a fault strikes after half the audio (whole frames), part of a chunk if need be
        left = len(self.pcm) // 4 * 2 if self.fault else len(self.pcm)
        for piece in self.pieces:
            piece = piece[:left]
            left -= len(piece)
            if piece:
                yield head + self.frame(piece)
                head = b""
                # resumed only once the server has written that chunk to the socket
                self.sent.append(time.time())
                self.audio_ms.append(self.app.audio.seconds(piece) * 1000)
            if self.fault and not left:
                break
        self.pieces.close()  # a fault: stop making the rest
        if self.hung_up is not None:
            return  # pywsgi closes the stream: close() abandons the turn
        if head:  # no audio at all: the header alone still opens the body
            yield head
        self.complete = True  # what follows is the server's own ending (or its fault), not a hang-up
        yield from self.end()
        self.close()

    def frame(self, pcm: bytes) -> bytes:
        if self.req.sse:
            return _sse({"type": "speech.audio.delta", "audio": base64.b64encode(pcm).decode()})
        return pcm

    def end(self):
        """What follows the audio: the SSE done event, or the fault."""
        if self.fault == "reset":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # pywsgi drops the connection quietly on ECONNRESET; linger 0 makes that an RST
            raise ConnectionResetError(errno.ECONNRESET, "the reset fault")
        if self.fault == "sse-error":
            yield _sse(
                {
                    "type": "error",
                    "error": {"message": "synthesis failed mid-stream (the sse-error fault)", "type": "server_error"},
                }
            )
        elif self.fault == "garbage":  # SSE only: a delta that is not base64, or not JSON
            if self.app.rng.random() < 0.5:
                yield b'data: {"type": "speech.audio.delta", "audio": "%%not base64%%"}\n\n'
            else:
                yield b'data: {"type": "speech.audio.delta", "audio": "AAAA\n\n'
        elif self.req.sse and self.fault is None:
            audio_s = self.app.audio.seconds(self.pcm)
            tokens_in = max(1, math.ceil(len(self.req.text) / SSE_CHARS_PER_TOKEN))
            tokens_out = math.ceil(audio_s * SSE_AUDIO_TOKENS_PER_S)
            yield _sse(
                {
                    "type": "speech.audio.done",
                    "usage": {
                        "input_tokens": tokens_in,
                        "output_tokens": tokens_out,
                        "total_tokens": tokens_in + tokens_out,
                    },
                }
            )

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        self.watcher.kill()  # waited for: pywsgi reads the next request on this socket next
        self.pieces.close()
        if not self.complete and self.hung_up is None:
            self.hung_up = time.time()  # gone, seen by a write that failed
        if self.complete:
            self.turn.finish()
        else:
            self.turn.stop()
            self.turn.abandon(self.app.args.orphan_ms / 1000)
        log_file = self.app.args.chunk_log
        if log_file:
            fmt = "sse" if self.req.sse else self.req.response_format
            generating = self.turn.generating
            log_file.write(
                json.dumps(
                    {
                        "request_id": self.req.request_id,
                        "format": fmt,
                        "received": round(self.req.received, 6),
                        "generating": generating and round(generating, 6),
                        "sent": [round(t, 6) for t in self.sent],
                        "audio_ms": [round(ms, 3) for ms in self.audio_ms],
                        **self.clip.fields(),
                        **({} if self.hung_up is None else {"cancelled": round(self.hung_up, 6)}),
                    }
                )
                + "\n"
            )
