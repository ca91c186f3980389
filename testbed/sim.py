"""A TTS server with a known capacity, for aiming tts-knee at something predictable.

Run it::

    python -m testbed.sim --port 8300 --slots 4 --base-ms 50 --per-char-ms 1
    python -m testbed.sim --port 8300 --capacity 5 --stream      # streaming, shared capacity

Once it accepts connections it prints one line to stdout::

    listening on http://127.0.0.1:8300

and logs its knobs once to stderr. Every answer holds ``AUDIO_S_PER_CHAR`` seconds of a quiet
tone per input character (at least ``MIN_AUDIO_S``) as PCM16 mono: a WAV by default, raw PCM
for ``response_format: "pcm"`` (``audio/pcm``), with ``Server-Timing`` and ``X-Request-Id``.

Two models of the time it takes:

- Slots (default): ``--slots`` requests (default 4) synthesise at a time, the rest wait in a
  FIFO queue; latency = queue wait + service time, service time = ``--base-ms`` +
  ``--per-char-ms`` x characters, +/- ``--jitter``. A streamed answer sends its first chunk
  after ``--first-chunk-ms`` and the rest evenly until the service time is over.
- Shared capacity (``--capacity X``): the server makes X audio-seconds per second in all,
  shared equally by the requests generating at that moment (processor sharing), each at most
  ``--max-speed`` x real time (default X): with n generating, each makes audio at
  min(max_speed, X / n) x real time, recomputed exactly whenever one starts or stops. A
  request first waits ``--prefill-ms`` (default 100; uses no capacity), then makes its audio
  in chunks of ``--chunk-ms`` (default 200); a streamed answer writes each chunk as soon as it
  is made. Short texts at ``--capacity 5``: time to first audio = 100 + 200 / (5 / n) ms, so
  about 140/180/260/420 ms at 1/2/4/8 concurrent streams, and 8 streams fall behind playback.
  ``--base-ms``, ``--per-char-ms``, ``--jitter`` and ``--first-chunk-ms`` are refused with
  it (as are the capacity knobs without it), and ``--slots`` is unlimited unless given (a
  request holds its slot while it generates and streams). A request that is not streamed
  shares the capacity alike and is answered whole once all its audio is made.

Streaming (``--stream``, or per request ``"stream": true`` or a ``"stream_format"``): chunked
transfer, one write per chunk. WAV streams carry 0xFFFFFFFF placeholder sizes, the header in
the first audio write, or as its own write first with ``--wav-header-alone``. Server-sent
events (``--sse``, or per request ``"stream_format": "sse"``; ``"audio"`` opts out) answer
``text/event-stream`` in OpenAI's format: one ``data: {"type": "speech.audio.delta", "audio":
BASE64}`` event per chunk, where the audio is always raw PCM16, then ``data: {"type":
"speech.audio.done", "usage": {"input_tokens", "output_tokens", "total_tokens"}}``.
``--chunk-log FILE`` appends one JSON line per streamed answer when it ends: ``request_id``,
``format``, ``received`` (unix seconds the request had been read), ``generating`` (when it
began to share the capacity, after the prefill; null in the slots model) and ``sent`` (unix
seconds at which each audio-carrying write had been handed to the socket) with ``audio_ms``
(audio in each of those writes): the truth to time a client by.

Endpoints: ``POST /v1/audio/speech`` (OpenAI: ``input``, ``voice``, ``response_format`` wav or
pcm, ``stream``, ``stream_format`` sse or audio), ``POST /synthesize`` (piper: ``text``),
``POST /tts`` (``text``) and ``GET /health`` -> ``{"status", "slots" (null: unlimited),
"busy", "queued", "served", "rejected"}``, plus ``"generating"`` with ``--capacity``, and
``GET /metrics``: the same in Prometheus text exposition, named the way vLLM names its own
(``sim:num_requests_waiting``, ``sim:num_requests_running``, ``sim:requests_served_total`` ...),
so a collector's ``--scrape`` has a server queue to read.

Limits: ``--queue-limit`` (503 + Retry-After), ``--rate``/``--burst`` (token bucket, 429 +
Retry-After), ``--oom-above`` (500 "CUDA out of memory"), and ``--fault`` knobs for drills
(see ``FAULTS``; one is picked per faulty request). In a streamed answer ``truncate`` ends the
body cleanly after half the audio (SSE: without the done event), ``reset`` aborts the
connection (RST) there, ``sse-error`` sends an SSE ``error`` event there and ``garbage`` a
malformed SSE event (bad base64 or bad JSON); ``sse-error`` leaves other answers alone, and
``garbage``, ``html``, ``json`` and ``empty`` answer non-SSE streams with their whole wrong body.
SIGTERM or SIGINT stops it with exit status 0.
"""
from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402  (after patching, as gevent requires)
import array  # noqa: E402
import base64  # noqa: E402
import email.utils  # noqa: E402
import errno  # noqa: E402
import heapq  # noqa: E402
import itertools  # noqa: E402
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

from testbed.args import Parser, number  # noqa: E402  (one-line errors and checked numbers, shared)

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
MID_STREAM_FAULTS = ("reset", "truncate", "garbage", "sse-error")  # hit after half the audio
FAULTS = ("stall", "close") + RETRY_FAULTS + BODY_FAULTS + ("sse-error",)
RESPONSE_FORMATS = ("wav", "pcm")
STREAM_FORMATS = ("sse", "audio")
DEFAULT_SLOTS = 4  # without --capacity; with it, slots are unlimited unless given
SLOTS_MODEL = {"base_ms": 50.0, "per_char_ms": 1.0, "jitter": 0.1, "first_chunk_ms": 20.0}
CAPACITY_MODEL = {"max_speed": None, "chunk_ms": 200.0, "prefill_ms": 100.0}  # defaults
SSE_CHARS_PER_TOKEN = 4  # usage figures in speech.audio.done: placeholders with a fixed rule
SSE_AUDIO_TOKENS_PER_S = 50
ENGINE_EPS_S = 1e-9  # audio-seconds: a chunk this close to complete counts as complete
SPEECH_PATHS = {"/v1/audio/speech": "input", "/synthesize": "text", "/tts": "text"}

log = logging.getLogger("testbed.sim")


# --- settings -------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="A TTS server with a known capacity (see module doc).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=number(int, 0, 65535), default=8300,
                   help="port to bind; 0 picks a free one (default 8300)")
    p.add_argument("--slots", type=number(int, 1),
                   help=f"requests synthesised at once; the rest queue FIFO (default "
                        f"{DEFAULT_SLOTS}; unlimited with --capacity)")
    p.add_argument("--base-ms", type=number(float, 0),
                   help="fixed service time per request in ms (default 50; not with --capacity)")
    p.add_argument("--per-char-ms", type=number(float, 0),
                   help="service time per input character in ms (default 1; not with --capacity)")
    p.add_argument("--jitter", type=number(float, 0, 1, high_open=True),
                   help="uniform +/- fraction around the service time (default 0.1; not with "
                        "--capacity)")
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
    p.add_argument("--first-chunk-ms", type=number(float, 0),
                   help="when streaming, delay of the first audio chunk in ms (default 20; "
                        "not with --capacity)")
    p.add_argument("--capacity", type=number(float, 0.001),
                   help="audio-seconds made per second, shared equally by the requests "
                        "generating at once (enables the shared-capacity model; default off)")
    p.add_argument("--max-speed", type=number(float, 0.001),
                   help="with --capacity, the fastest one request generates, x real time "
                        "(default: the capacity)")
    p.add_argument("--chunk-ms", type=number(float, 1),
                   help="with --capacity, audio per chunk in ms (default 200)")
    p.add_argument("--prefill-ms", type=number(float, 0),
                   help="with --capacity, delay before a request starts generating, using no "
                        "capacity (default 100)")
    p.add_argument("--wav-header-alone", action="store_true",
                   help="stream the WAV header as its own write before any audio")
    p.add_argument("--sse", action="store_true",
                   help="answer server-sent events (OpenAI speech.audio.delta/done, PCM16) "
                        "unless a request asks for \"stream_format\": \"audio\"")
    p.add_argument("--chunk-log", metavar="FILE",
                   help="append one JSON line per streamed answer with each audio write's "
                        "send time (default off)")
    p.add_argument("--oom-above", type=number(int, 0),
                   help="500 'CUDA out of memory' when more than N requests are in flight")
    p.add_argument("--sample-rate", type=number(int, 8000, 192000), default=24000,
                   help="audio sample rate in Hz (default 24000: OpenAI's PCM rate, and the client's "
                        "--tts-sample-rate)")
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
    # each model's knobs: given with the other model, one would silently do nothing
    own, other = (SLOTS_MODEL, CAPACITY_MODEL) if args.capacity is None else \
        (CAPACITY_MODEL, SLOTS_MODEL)
    for flag in other:
        if getattr(args, flag) is not None:
            parser.error(f"--{flag.replace('_', '-')} " + (
                "needs --capacity" if args.capacity is None else
                "does not apply with --capacity (see --prefill-ms and --chunk-ms)"))
    for flag in own:
        if getattr(args, flag) is None:
            setattr(args, flag, own[flag])
    if args.capacity is not None:
        args.max_speed = args.capacity if args.max_speed is None else args.max_speed
    if args.slots is None and args.capacity is None:
        args.slots = DEFAULT_SLOTS
    if args.slots is None and args.queue_limit is not None:
        parser.error("--queue-limit needs --slots with --capacity (slots are unlimited "
                     "otherwise, so nothing ever queues)")
    if args.chunk_log:
        try:
            args.chunk_log = open(args.chunk_log, "a", buffering=1, encoding="utf-8")
        except OSError as err:
            parser.error(f"argument --chunk-log: cannot open {args.chunk_log!r} for appending: "
                         f"{err.strerror or err}")
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
    """``n`` inference slots (None: unlimited) handed to waiters strictly first-come,
    first-served."""

    def __init__(self, n: int | None):
        self.n = n
        self.busy = 0
        self._waiters: deque[Event] = deque()

    @property
    def free(self) -> int | None:
        return None if self.n is None else self.n - self.busy

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def acquire(self) -> None:
        if self.n is None or (self.busy < self.n and not self._waiters):
            self.busy += 1
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
            self.busy -= 1


class Job:
    """One request's audio, made in chunks of ``sizes`` audio-seconds by an :class:`Engine`;
    ``made`` counts the chunks complete, ``ready`` is set each time one completes."""

    def __init__(self, sizes: list[float]):
        self.sizes = sizes
        self.made = 0
        self.ready = Event()

    def wait(self, chunks: int) -> None:
        """Until at least ``chunks`` chunks are made."""
        while self.made < chunks:
            self.ready.wait()
            self.ready.clear()


class Engine:
    """``capacity`` audio-seconds per second shared equally by the jobs generating now, each
    at most ``max_speed`` x real time (processor sharing).

    Exact and event-driven: all generating jobs advance alike, so one "virtual" clock (audio
    made by any generating job since the engine started) places every chunk; the rate changes
    only when a job joins or leaves, and the loop sleeps until the next chunk completes or the
    set of jobs changes, whichever comes first.
    """

    def __init__(self, capacity: float, max_speed: float):
        self.capacity = capacity
        self.max_speed = max_speed
        self._virtual = 0.0  # audio-seconds made per generating job since the start
        self._at = time.monotonic()
        self._heap: list[tuple[float, int, Job]] = []  # (virtual time its chunk is done, seq, job)
        self._seq = itertools.count()
        self._changed = Event()
        self._loop: gevent.Greenlet | None = None

    @property
    def generating(self) -> int:
        return len(self._heap)

    def rate(self) -> float:
        """Audio-seconds per second each generating job makes now."""
        n = len(self._heap)
        return min(self.max_speed, self.capacity / n) if n else 0.0

    def _advance(self) -> None:
        now = time.monotonic()
        self._virtual += self.rate() * (now - self._at)
        self._at = now

    def join(self, job: Job) -> None:
        if not job.sizes:
            return
        self._advance()
        heapq.heappush(self._heap, (self._virtual + job.sizes[0], next(self._seq), job))
        self._kick()

    def leave(self, job: Job) -> None:
        """Stop making ``job``'s audio (its client left, or a fault cut it)."""
        if any(entry[2] is job for entry in self._heap):
            self._advance()
            self._heap = [entry for entry in self._heap if entry[2] is not job]
            heapq.heapify(self._heap)
            self._kick()

    def _kick(self) -> None:
        if self._loop is None:
            self._loop = gevent.spawn(self._run)
        else:
            self._changed.set()

    def _run(self) -> None:
        try:
            while self._heap:
                self._advance()
                while self._heap and self._heap[0][0] <= self._virtual + ENGINE_EPS_S:
                    due, _, job = heapq.heappop(self._heap)
                    job.made += 1
                    job.ready.set()
                    if job.made < len(job.sizes):
                        nxt = due + job.sizes[job.made]
                        heapq.heappush(self._heap, (nxt, next(self._seq), job))
                if self._heap:
                    self._changed.clear()
                    self._changed.wait((self._heap[0][0] - self._virtual) / self.rate())
        finally:
            self._loop = None


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
    sse: bool = False  # server-sent events (always streamed)
    received: float = 0.0  # unix seconds the request's body had been read
    generating: float | None = None  # unix seconds it began to use --capacity (after prefill)


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
        self.engine = Engine(args.capacity, args.max_speed) if args.capacity else None
        self.admitted = 0  # queued + holding a slot
        self.served = 0
        self.rejected = 0
        self.queue_s_total = 0.0  # time admitted requests waited for a slot, summed
        self.queue_waits = 0
        first_guess_ms = args.base_ms if args.capacity is None else args.prefill_ms
        self.mean_service_s = first_guess_ms / 1000  # moving average, for queue Retry-After

    # routing

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "/metrics" and method == "GET":
                return self._respond(start_response, "200 OK", self.metrics().encode(),
                                     ctype="text/plain; version=0.0.4; charset=utf-8")
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
        """served: requests that held a slot; rejected: 429, 503 and out-of-memory 500s;
        generating (with --capacity): requests sharing the capacity now."""
        health = {"status": "ok", "slots": self.slots.n, "busy": self.slots.busy,
                  "queued": self.slots.queued, "served": self.served, "rejected": self.rejected}
        if self.engine is not None:
            health["generating"] = self.engine.generating
        return health

    def metrics(self) -> str:
        """``/metrics``: the queue and slots as gauges, requests as counters."""
        families = [
            ("num_requests_waiting", "gauge", "Requests waiting for a slot.", self.slots.queued),
            ("num_requests_running", "gauge", "Requests holding a slot.", self.slots.busy),
            ("slots", "gauge", "Requests synthesised at once (absent: unlimited).", self.slots.n),
            ("num_requests_generating", "gauge", "Requests sharing the capacity now.",
             None if self.engine is None else self.engine.generating),
            ("requests_served_total", "counter", "Requests that held a slot.", self.served),
            ("requests_rejected_total", "counter", "Requests refused with 429, 503 or 500 OOM.",
             self.rejected),
        ]
        lines = []
        for name, kind, text, value in families:
            if value is not None:
                lines += [f"# HELP sim:{name} {text}", f"# TYPE sim:{name} {kind}",
                          f"sim:{name} {float(value)!r}"]
        lines += ["# HELP sim:request_queue_time_seconds Time requests waited for a slot.",
                  "# TYPE sim:request_queue_time_seconds summary",
                  f"sim:request_queue_time_seconds_sum {self.queue_s_total!r}",
                  f"sim:request_queue_time_seconds_count {float(self.queue_waits)!r}"]
        return "\n".join(lines) + "\n"

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
        stream_format = data.get("stream_format")
        if stream_format is not None and stream_format not in STREAM_FORMATS:
            raise _Reject("400 Bad Request", f"stream_format {stream_format!r} is not supported; "
                                             f"use one of {', '.join(STREAM_FORMATS)}")
        sse = stream_format == "sse" or (self.args.sse and stream_format is None)
        stream = self.args.stream or sse or stream_format is not None or data.get("stream") is True
        request_id = environ.get("HTTP_X_REQUEST_ID") or uuid.uuid4().hex
        return Speech(text, fmt, stream, request_id, sse, time.time())

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
        self.queue_s_total += queue_s
        self.queue_waits += 1
        pcm = self.tone.pcm(audio_seconds(req.text))
        if req.stream and self.answers_streamed(req, fault):
            return self.stream(environ, start_response, req, pcm, queue_s, ids, fault)
        acquired = time.monotonic()
        try:
            if self.engine is None:
                service_s = self.service_seconds(req.text)
                gevent.sleep(service_s)
            else:
                for _ in self.generate(req, pcm, whole=True):
                    pass
                service_s = time.monotonic() - acquired
        finally:
            self.finish(time.monotonic() - acquired if self.engine else service_s)
        timing = self.server_timing(queue_s, service_s, time.monotonic() - started)
        headers = [timing, *ids]
        if fault in BODY_FAULTS:
            return self.body_fault(fault, environ, start_response, req, pcm, headers)
        if fault == "close":
            headers.append(("Connection", "close"))
        body = pcm if req.response_format == "pcm" else \
            wav_header(len(pcm), self.tone.sample_rate) + pcm
        return self._respond(start_response, "200 OK", body, headers, self.content_type(req))

    @staticmethod
    def answers_streamed(req: Speech, fault: str | None) -> bool:
        """Whether a streamed request is answered as a stream under ``fault``: faults that
        hit mid-stream do; whole wrong bodies (and garbage outside SSE) are sent whole."""
        if fault in ("html", "json", "empty"):
            return False
        return fault != "garbage" or req.sse

    def generate(self, req: Speech, pcm: bytes, whole: bool = False):
        """Make ``pcm`` with the shared engine after the prefill: yields each chunk's PCM as
        soon as it is made (``whole``: one piece once all of it is made). Leaves the engine if
        closed early."""
        frame_s = 1 / self.tone.sample_rate
        frames = len(pcm) // 2
        per_chunk = max(1, round(self.args.chunk_ms / 1000 * self.tone.sample_rate))
        bounds = list(range(0, frames, per_chunk)) + [frames]
        sizes = [(b - a) * frame_s for a, b in zip(bounds, bounds[1:])]
        if whole:
            bounds, sizes = [0, frames], [sum(sizes)]
        gevent.sleep(self.args.prefill_ms / 1000)
        job = Job(sizes)
        req.generating = time.time()
        self.engine.join(job)
        try:
            for k in range(len(sizes)):
                job.wait(k + 1)
                yield pcm[2 * bounds[k]: 2 * bounds[k + 1]]
        finally:
            self.engine.leave(job)

    def paced(self, pcm: bytes, service_s: float):
        """The slots model's stream: the first chunk after --first-chunk-ms, the rest evenly
        until ``service_s``."""
        first_s = min(self.args.first_chunk_ms / 1000, service_s)
        rest_s = service_s - first_s
        chunks = 1 + max(1, round(rest_s * 1000 / STREAM_CHUNK_MS))
        frames = len(pcm) // 2
        bounds = [2 * (frames * i // chunks) for i in range(chunks + 1)]
        start = time.monotonic()
        for i in range(chunks):
            # due times from the start, so that late wake-ups do not add up
            due_s = first_s + rest_s * i / (chunks - 1)
            gevent.sleep(max(0.0, start + due_s - time.monotonic()))
            yield pcm[bounds[i]:bounds[i + 1]]

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
        if req.sse:
            return "text/event-stream"
        return "audio/pcm" if req.response_format == "pcm" else "audio/wav"

    def stream(self, environ, start_response, req, pcm, queue_s, ids, fault):
        """Headers now, then each chunk as it is made (see :class:`_Stream`)."""
        acquired = time.monotonic()
        if self.engine is None:
            service_s = self.service_seconds(req.text)
            timing = self.server_timing(queue_s, service_s)
            pieces = self.paced(pcm, service_s)
        else:
            service_s = None  # known once the audio is made
            timing = ("Server-Timing", f"queue;dur={queue_s * 1000:.1f}, "
                                       f"prefill;dur={self.args.prefill_ms:.1f}")
            pieces = self.generate(req, pcm)
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
            self.finish(time.monotonic() - acquired if service_s is None else service_s)
            raise
        fault = fault if fault in MID_STREAM_FAULTS else None
        return _Stream(self, req, pcm, pieces, fault, environ["sim.socket"], acquired, service_s)

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
    """A streamed response body: ``pieces`` of PCM framed as WAV, raw PCM or SSE, one write
    each, as they come. Holds its slot until the last write or until closed."""

    def __init__(self, sim: Simulator, req: Speech, pcm: bytes, pieces, fault: str | None,
                 sock, acquired: float, service_s: float | None):
        self.sim, self.req, self.pcm, self.pieces = sim, req, pcm, pieces
        self.fault = None if fault == "sse-error" and not req.sse else fault
        self.sock = sock
        self.acquired = acquired
        self.service_s = service_s  # None: the time it took
        self.sent: list[float] = []  # unix seconds each audio write had been handed over
        self.audio_ms: list[float] = []
        self._done = False

    def __iter__(self):
        wav = not self.req.sse and self.req.response_format != "pcm"
        head = wav_header(0, self.sim.tone.sample_rate, placeholder=True) if wav else b""
        if head and self.sim.args.wav_header_alone:
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
                self.audio_ms.append(len(piece) / 2 / self.sim.tone.sample_rate * 1000)
            if self.fault and not left:
                break
        self.pieces.close()  # a fault: stop making the rest
        if head:  # no audio at all: the header alone still opens the body
            yield head
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
            yield _sse({"type": "error", "error": {
                "message": "synthesis failed mid-stream (the sse-error fault)",
                "type": "server_error"}})
        elif self.fault == "garbage":  # SSE only: a delta that is not base64, or not JSON
            if self.sim.rng.random() < 0.5:
                yield b'data: {"type": "speech.audio.delta", "audio": "%%not base64%%"}\n\n'
            else:
                yield b'data: {"type": "speech.audio.delta", "audio": "AAAA\n\n'
        elif self.req.sse and self.fault is None:
            audio_s = len(self.pcm) / 2 / self.sim.tone.sample_rate
            tokens_in = max(1, math.ceil(len(self.req.text) / SSE_CHARS_PER_TOKEN))
            tokens_out = math.ceil(audio_s * SSE_AUDIO_TOKENS_PER_S)
            yield _sse({"type": "speech.audio.done", "usage": {
                "input_tokens": tokens_in, "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out}})

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        self.pieces.close()
        took_s = time.monotonic() - self.acquired
        self.sim.finish(took_s if self.service_s is None else self.service_s)
        log_file = self.sim.args.chunk_log
        if log_file:
            fmt = "sse" if self.req.sse else self.req.response_format
            log_file.write(json.dumps({
                "request_id": self.req.request_id, "format": fmt,
                "received": round(self.req.received, 6),
                "generating": self.req.generating and round(self.req.generating, 6),
                "sent": [round(t, 6) for t in self.sent],
                "audio_ms": [round(ms, 3) for ms in self.audio_ms]}) + "\n")


# --- process --------------------------------------------------------------------------------

def describe(args: argparse.Namespace) -> str:
    knobs = [f"slots={'unlimited' if args.slots is None else args.slots}"]
    if args.capacity:
        knobs.append(f"capacity={args.capacity:g} max_speed={args.max_speed:g} "
                     f"chunk_ms={args.chunk_ms:g} prefill_ms={args.prefill_ms:g}")
    else:
        knobs.append(f"base_ms={args.base_ms:g} per_char_ms={args.per_char_ms:g} "
                     f"jitter={args.jitter:g}")
    knobs += [f"queue_limit={'unlimited' if args.queue_limit is None else args.queue_limit}",
              f"rate={args.rate if args.rate else 'off'}", f"stream={args.stream}",
              f"sse={args.sse}", f"sample_rate={args.sample_rate}"]
    if args.rate:
        knobs.append(f"burst={args.burst} retry_after={args.retry_after_format}")
    if (args.stream or args.sse) and not args.capacity:
        knobs.append(f"first_chunk_ms={args.first_chunk_ms:g}")
    if args.wav_header_alone:
        knobs.append("wav_header_alone=True")
    if args.chunk_log:
        knobs.append(f"chunk_log={args.chunk_log.name}")
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
