"""A TTS server with a known capacity, for aiming tts-knee at something predictable.

Run it::

    python -m testbed.sim --port 8300 --slots 4 --base-ms 50 --per-char-ms 1

Once it accepts connections it prints one line to stdout::

    listening on http://127.0.0.1:8300

and logs its knobs once to stderr. ``--slots`` requests synthesise at a time; the rest wait in
a FIFO queue, so latency = queue wait + service time, where service time = ``--base-ms`` +
``--per-char-ms`` x characters, +/- ``--jitter``. Every 200 is a PCM16 mono WAV holding
``AUDIO_S_PER_CHAR`` seconds of a quiet tone per character (at least ``MIN_AUDIO_S``), with
``Server-Timing: queue;dur=.., infer;dur=.., total;dur=..`` and ``X-Request-Id`` headers.

Endpoints: ``POST /v1/audio/speech`` (OpenAI: ``input``, ``voice``, ``response_format`` wav or
pcm, ``stream``), ``POST /synthesize`` (piper: ``text``), ``POST /tts`` (``text``) and
``GET /health`` -> ``{"status", "slots", "busy", "queued", "served", "rejected"}``.

Limits: ``--queue-limit`` (503 + Retry-After), ``--rate``/``--burst`` (token bucket, 429 +
Retry-After), ``--oom-above`` (500 "CUDA out of memory"), and ``--fault`` knobs for drills
(see ``FAULTS``). ``--stream`` sends chunked audio with placeholder sizes in the WAV header.
SIGTERM or SIGINT stops it with exit status 0.
"""
from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402  (after patching, as gevent requires)
import array  # noqa: E402
import email.utils  # noqa: E402
import errno  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pool import Pool  # noqa: E402
from gevent.pywsgi import WSGIHandler, WSGIServer  # noqa: E402

from testbed.cli import Parser, number  # noqa: E402  (one-line errors and checked numbers, shared)

__all__ = ["main"]

PROG = "python -m testbed.sim"
AUDIO_S_PER_CHAR = 0.06
MIN_AUDIO_S = 0.2
TONE_HZ = 220.0
TONE_AMPLITUDE = 0.1  # of full scale
STREAM_CHUNK_MS = 40.0  # spacing of streamed chunks after the first
STOP_TIMEOUT_S = 2.0  # in-flight requests get this long after SIGTERM
LISTEN_BACKLOG = 1024
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.65 GiB total "
               "capacity; 22.91 GiB already allocated; 118.06 MiB free)")
HTML_PAGE = b"<!doctype html><html><head><title>502 Bad Gateway</title></head>" \
            b"<body><h1>Bad Gateway</h1><p>upstream returned an error</p></body></html>\n"
RETRY_FAULTS = ("bad-retry-after", "huge-retry-after")
BODY_FAULTS = ("reset", "truncate", "html", "json", "empty", "garbage")  # 200s, not audio
FAULTS = ("stall", "close") + RETRY_FAULTS + BODY_FAULTS
RESPONSE_FORMATS = ("wav", "pcm")
SPEECH_PATHS = {"/v1/audio/speech": "input", "/synthesize": "text", "/tts": "text"}

log = logging.getLogger("testbed.sim")


# --- settings -------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="A TTS server with a known capacity (see module doc).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=number(int, 0, 65535), default=8300,
                   help="port to bind; 0 picks a free one (default 8300)")
    p.add_argument("--slots", type=number(int, 1), default=4,
                   help="requests synthesised at once; the rest queue FIFO (default 4)")
    p.add_argument("--base-ms", type=number(float, 0), default=50.0,
                   help="fixed service time per request in ms (default 50)")
    p.add_argument("--per-char-ms", type=number(float, 0), default=1.0,
                   help="service time per input character in ms (default 1)")
    p.add_argument("--jitter", type=number(float, 0, 1, high_open=True), default=0.1,
                   help="uniform +/- fraction around the service time (default 0.1)")
    p.add_argument("--seed", type=int, help="random seed for jitter and faults")
    p.add_argument("--queue-limit", type=number(int, 0),
                   help="requests allowed to wait for a slot; more get 503 (default unlimited)")
    p.add_argument("--rate", type=number(float, 0.001),
                   help="token-bucket rate in requests/s; over it -> 429 (default off)")
    p.add_argument("--burst", type=number(int, 1),
                   help="token-bucket size (default: the rate rounded up, at least 1)")
    p.add_argument("--retry-after-format", choices=("seconds", "http-date"), default="seconds",
                   help="Retry-After as delta-seconds or an HTTP-date (default seconds)")
    p.add_argument("--stream", action="store_true",
                   help="stream every response chunked (a request's \"stream\": true also does)")
    p.add_argument("--first-chunk-ms", type=number(float, 0), default=20.0,
                   help="when streaming, delay of the first audio chunk in ms (default 20)")
    p.add_argument("--oom-above", type=number(int, 0),
                   help="500 'CUDA out of memory' when more than N requests are in flight")
    p.add_argument("--sample-rate", type=number(int, 8000, 192000), default=22050,
                   help="audio sample rate in Hz (default 22050)")
    p.add_argument("--fault", action="append", choices=FAULTS, default=[],
                   help="inject a fault (repeatable; one is picked per faulty request)")
    p.add_argument("--fault-rate", type=number(float, 0, 1), default=1.0,
                   help="probability that a request gets a fault (default 1)")
    p.add_argument("--stall-s", type=number(float, 0), default=10.0,
                   help="the stall fault's delay before the first byte (default 10)")
    p.add_argument("--log-requests", action="store_true", help="log one line per request")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.burst is not None and args.rate is None:
        parser.error("--burst needs --rate")
    if args.burst is None and args.rate is not None:
        args.burst = max(1, math.ceil(args.rate))
    return args


# --- audio ----------------------------------------------------------------------------------

def wav_header(data_bytes: int, sample_rate: int, placeholder: bool = False) -> bytes:
    """A 44-byte PCM16 mono WAV header; ``placeholder`` writes 0xFFFFFFFF sizes (streaming)."""
    riff = 0xFFFFFFFF if placeholder else 36 + data_bytes
    data = 0xFFFFFFFF if placeholder else data_bytes
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1,
                       sample_rate, sample_rate * 2, 2, 16, b"data", data)


class Tone:
    """PCM16 audio of a quiet tone, sliced from one precomputed second."""

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        amp = int(32767 * TONE_AMPLITUDE)
        step = 2 * math.pi * TONE_HZ / sample_rate
        samples = array.array("h", (int(amp * math.sin(i * step)) for i in range(sample_rate)))
        if sys.byteorder == "big":
            samples.byteswap()
        self._second = samples.tobytes()

    def pcm(self, audio_s: float) -> bytes:
        n = int(audio_s * self.sample_rate) * 2
        reps = n // len(self._second) + 1
        return (self._second * reps)[:n]


def audio_seconds(text: str) -> float:
    return max(MIN_AUDIO_S, AUDIO_S_PER_CHAR * len(text))


# --- capacity -------------------------------------------------------------------------------

class Slots:
    """``n`` inference slots handed to waiters strictly first-come, first-served."""

    def __init__(self, n: int):
        self.n = n
        self.free = n
        self._waiters: deque[Event] = deque()

    @property
    def busy(self) -> int:
        return self.n - self.free

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def acquire(self) -> None:
        if self.free and not self._waiters:
            self.free -= 1
            return
        turn = Event()
        self._waiters.append(turn)
        try:
            turn.wait()
        except BaseException:
            if turn.is_set():  # handed a slot while being killed: pass it on
                self.release()
            else:
                self._waiters.remove(turn)
            raise

    def release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the slot passes straight to the next in line
        else:
            self.free += 1


class TokenBucket:
    """``rate`` tokens/s, at most ``burst`` saved up; refilled from the time that passed."""

    def __init__(self, rate: float, burst: int):
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self._last = time.monotonic()

    def take(self) -> float:
        """Take a token; 0 when granted, else the seconds until one is there."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        self._last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


# --- HTTP -----------------------------------------------------------------------------------

@dataclass
class Speech:
    """One parsed synthesis request."""
    text: str
    response_format: str
    stream: bool
    request_id: str


class _Reject(Exception):
    """Ends a request early with an error response."""

    def __init__(self, status: str, message: str, headers: list | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or []


def _json_body(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


class _Handler(WSGIHandler):
    """Sends without Nagle delays, and lets the ``reset`` fault reach its socket."""

    def handle(self):
        # pywsgi writes headers and body separately; with Nagle on, the body waits for the
        # client's delayed ACK (~40 ms on Linux), which would swamp the configured latency.
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return super().handle()

    def get_environ(self):
        env = super().get_environ()
        env["sim.socket"] = self.socket
        return env


class Simulator:
    """The WSGI application: parses, admits, queues, 'synthesises' and answers."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.slots = Slots(args.slots)
        self.bucket = TokenBucket(args.rate, args.burst) if args.rate else None
        self.tone = Tone(args.sample_rate)
        self.admitted = 0  # queued + holding a slot
        self.served = 0
        self.rejected = 0
        self.mean_service_s = args.base_ms / 1000  # moving average, for queue Retry-After

    # routing

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "/health":
                if method != "GET":
                    raise _Reject("405 Method Not Allowed", f"{method} not allowed on {path}",
                                  [("Allow", "GET")])
                return self._respond(start_response, "200 OK", _json_body(self.health()))
            if path not in SPEECH_PATHS:
                raise _Reject("404 Not Found", f"no endpoint at {path}")
            if method != "POST":
                raise _Reject("405 Method Not Allowed", f"{method} not allowed on {path}",
                              [("Allow", "POST")])
            return self.speech(environ, start_response, path)
        except _Reject as rej:
            return self._respond(start_response, rej.status, _json_body({"error": str(rej)}),
                                 rej.headers)

    def health(self) -> dict:
        """served: requests that held a slot; rejected: 429, 503 and out-of-memory 500s."""
        return {"status": "ok", "slots": self.slots.n, "busy": self.slots.busy,
                "queued": self.slots.queued, "served": self.served, "rejected": self.rejected}

    @staticmethod
    def _respond(start_response, status, body: bytes, headers=(), ctype="application/json"):
        start_response(status, [("Content-Type", ctype), *headers])
        return [body]

    # synthesis

    def parse(self, environ, path: str) -> Speech:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            data = json.loads(environ["wsgi.input"].read(length) or b"null")
        except (ValueError, UnicodeDecodeError):
            raise _Reject("400 Bad Request", "the body is not valid JSON")
        if not isinstance(data, dict):
            raise _Reject("400 Bad Request", "the body must be a JSON object")
        field = SPEECH_PATHS[path]
        text = data.get(field)
        if not isinstance(text, str) or not text.strip():
            raise _Reject("400 Bad Request", f"'{field}' must be a non-empty string")
        fmt = data.get("response_format", "wav")
        if fmt not in RESPONSE_FORMATS:
            raise _Reject("400 Bad Request", f"response_format {fmt!r} is not supported; "
                                             f"use one of {', '.join(RESPONSE_FORMATS)}")
        request_id = environ.get("HTTP_X_REQUEST_ID") or uuid.uuid4().hex
        return Speech(text, fmt, self.args.stream or data.get("stream") is True, request_id)

    def speech(self, environ, start_response, path: str):
        req = self.parse(environ, path)
        fault = self.pick_fault()
        if fault == "stall":
            gevent.sleep(self.args.stall_s)
        ids = [("X-Request-Id", req.request_id)]
        if fault in RETRY_FAULTS:
            self.rejected += 1
            value = "soon-ish" if fault == "bad-retry-after" else "999999"
            raise _Reject("429 Too Many Requests", "rate limit exceeded",
                          [("Retry-After", value), *ids])
        self.admit(ids)
        self.admitted += 1
        started = time.monotonic()
        try:
            self.slots.acquire()
        except BaseException:
            self.admitted -= 1
            raise
        queue_s = time.monotonic() - started
        service_s = self.service_seconds(req.text)
        pcm = self.tone.pcm(audio_seconds(req.text))
        if req.stream and fault not in BODY_FAULTS:
            return self.stream(start_response, req, pcm, queue_s, service_s, ids, fault)
        try:
            gevent.sleep(service_s)
        finally:
            self.finish(service_s)
        timing = self.server_timing(queue_s, service_s, time.monotonic() - started)
        headers = [timing, *ids]
        if fault in BODY_FAULTS:
            return self.body_fault(fault, environ, start_response, req, pcm, headers)
        if fault == "close":
            headers.append(("Connection", "close"))
        body = pcm if req.response_format == "pcm" else \
            wav_header(len(pcm), self.tone.sample_rate) + pcm
        return self._respond(start_response, "200 OK", body, headers, self.content_type(req))

    def pick_fault(self) -> str | None:
        if self.args.fault and self.rng.random() < self.args.fault_rate:
            return self.rng.choice(self.args.fault)
        return None

    def admit(self, ids) -> None:
        """Refuse the request (429, 500 OOM or 503) when a limit says so."""
        if self.bucket is not None:
            wait_s = self.bucket.take()
            if wait_s:
                self.rejected += 1
                raise _Reject("429 Too Many Requests", "rate limit exceeded",
                              [self.retry_after(wait_s), *ids])
        if self.args.oom_above is not None and self.admitted + 1 > self.args.oom_above:
            self.rejected += 1
            raise _Reject("500 Internal Server Error", OOM_MESSAGE, ids)
        limit = self.args.queue_limit
        if limit is not None and self.slots.free == 0 and self.slots.queued >= limit:
            self.rejected += 1
            drain_s = (self.slots.queued + 1) / self.slots.n * self.mean_service_s
            raise _Reject("503 Service Unavailable", "the queue is full",
                          [self.retry_after(drain_s), *ids])

    def service_seconds(self, text: str) -> float:
        planned_ms = self.args.base_ms + self.args.per_char_ms * len(text)
        jitter = self.args.jitter
        return planned_ms * (1 + self.rng.uniform(-jitter, jitter)) / 1000

    def finish(self, service_s: float) -> None:
        self.slots.release()
        self.admitted -= 1
        self.served += 1
        self.mean_service_s += 0.1 * (service_s - self.mean_service_s)

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
        return "audio/pcm" if req.response_format == "pcm" else "audio/wav"

    def stream(self, start_response, req, pcm, queue_s, service_s, ids, fault):
        """Headers now, the first chunk after --first-chunk-ms, the rest until service_s."""
        headers = [("Content-Type", self.content_type(req)),
                   self.server_timing(queue_s, service_s), *ids]
        if fault == "close":
            headers.append(("Connection", "close"))
        try:
            write = start_response("200 OK", headers)
            write(b"")  # flush the headers before any audio exists
        except BaseException:
            self.finish(service_s)
            raise
        return _Stream(self, req, pcm, service_s)

    def body_fault(self, fault, environ, start_response, req, pcm, headers):
        """A 200 that is not the audio it should be."""
        wav = wav_header(len(pcm), self.tone.sample_rate) + pcm
        if fault == "html":
            return self._respond(start_response, "200 OK", HTML_PAGE, headers, "text/html")
        if fault == "json":  # quotes the input, as many servers' errors do (markup and all)
            body = _json_body({"error": f"synthesis failed: {req.text[:80]}", "request_id": req.request_id})
            return self._respond(start_response, "200 OK", body, headers)
        if fault == "empty":
            return self._respond(start_response, "200 OK", b"", headers, "audio/wav")
        if fault == "garbage":
            return self._respond(start_response, "200 OK", os.urandom(len(wav)), headers,
                                 "audio/wav")
        if fault == "truncate":  # a complete HTTP body, but the WAV header promises more
            cut = wav[: 44 + len(pcm) // 4]
            return self._respond(start_response, "200 OK", cut,
                                 [*headers, ("Connection", "close")], "audio/wav")
        # reset: promise the whole body, send half of it, then abort the connection (RST)
        start_response("200 OK", [("Content-Type", "audio/wav"),
                                  ("Content-Length", str(len(wav))),
                                  ("Connection", "close"), *headers])
        sock = environ["sim.socket"]

        def half_then_reset():
            yield wav[: len(wav) // 2]
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return half_then_reset()


class _Stream:
    """A streamed response body; holds its slot until the last chunk or until closed."""

    def __init__(self, sim: Simulator, req: Speech, pcm: bytes, service_s: float):
        self.sim, self.req, self.pcm, self.service_s = sim, req, pcm, service_s
        self._done = False

    def __iter__(self):
        first_s = min(self.sim.args.first_chunk_ms / 1000, self.service_s)
        rest_s = self.service_s - first_s
        chunks = 1 + max(1, round(rest_s * 1000 / STREAM_CHUNK_MS))
        frames = len(self.pcm) // 2
        bounds = [2 * (frames * i // chunks) for i in range(chunks + 1)]
        gevent.sleep(first_s)
        head = b"" if self.req.response_format == "pcm" else \
            wav_header(0, self.sim.tone.sample_rate, placeholder=True)
        yield head + self.pcm[bounds[0]:bounds[1]]
        for i in range(1, chunks):
            gevent.sleep(rest_s / (chunks - 1))
            yield self.pcm[bounds[i]:bounds[i + 1]]
        self.close()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self.sim.finish(self.service_s)


# --- process --------------------------------------------------------------------------------

def describe(args: argparse.Namespace) -> str:
    knobs = [f"slots={args.slots}", f"base_ms={args.base_ms:g}",
             f"per_char_ms={args.per_char_ms:g}", f"jitter={args.jitter:g}",
             f"queue_limit={'unlimited' if args.queue_limit is None else args.queue_limit}",
             f"rate={args.rate if args.rate else 'off'}", f"stream={args.stream}",
             f"sample_rate={args.sample_rate}"]
    if args.rate:
        knobs.append(f"burst={args.burst} retry_after={args.retry_after_format}")
    if args.stream:
        knobs.append(f"first_chunk_ms={args.first_chunk_ms:g}")
    if args.oom_above is not None:
        knobs.append(f"oom_above={args.oom_above}")
    if args.fault:
        knobs.append(f"faults={','.join(args.fault)} fault_rate={args.fault_rate:g}")
    return "sim: " + " ".join(knobs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    server = WSGIServer((args.host, args.port), Simulator(args), handler_class=_Handler,
                        spawn=Pool(),  # a pool, so that stop() waits for requests in flight
                        backlog=LISTEN_BACKLOG, log=log if args.log_requests else None)
    try:
        server.start()
    except OSError as err:
        in_use = err.errno == errno.EADDRINUSE
        reason = "it is already in use" if in_use else err.strerror or str(err)
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {reason}.", file=sys.stderr)
        return 2
    host, port = server.address[:2]
    host = f"[{host}]" if ":" in host else host
    print(f"listening on http://{host}:{port}", flush=True)
    log.info(describe(args))
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, server.stop, STOP_TIMEOUT_S)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
