"""The simulator's command line: its knobs, the checks between them, and serving until
SIGTERM. Run through ``tts-knee sim`` (see :func:`tts_knee.testbed.sim.main`, which patches the
process for gevent first)."""

from __future__ import annotations

import argparse
import errno
import logging
import math
import random
import signal
import ssl
import sys
import time
from typing import Any, NamedTuple

import gevent
from gevent.pool import Pool
from gevent.pywsgi import WSGIServer
from gevent.server import StreamServer

from tts_knee.testbed.args import Parser, number  # one-line errors and checked numbers, shared
from tts_knee.testbed.sim import wyoming
from tts_knee.testbed.sim.audio import (
    CLICK_EVERY_S,
    DEFAULT_RUN_ON_X,
    DEFAULT_SNR_DB,
    GARBLE_KEEP,
    RUNAWAY_CAP_S,
    RUNAWAY_FACTOR,
    Speaker,
)
from tts_knee.testbed.sim.capacity import CAPACITY_MODEL, DEFAULT_SLOTS, DEFAULT_SLOW_X, SLOTS_MODEL, Capacity
from tts_knee.testbed.sim.faults import FAULTS
from tts_knee.testbed.sim.http import UNSPEAKABLE, Handler, SpeechApp
from tts_knee.testbed.sim.leak import Leak
from tts_knee.testbed.sim.session import split_sentences
from tts_knee.testbed.sim.stages import STAGE_METRICS, Stage, parse as parse_stages
from tts_knee.testbed.sim.voices import DEFAULT_MISS_MS
from tts_knee.testbed.speech import DEFAULT_CACHE, DEFAULT_CORPUS, SpeechUnavailable, corpus_texts, voice_info

PROG = "tts-knee sim"
STOP_TIMEOUT_S = 2.0  # in-flight requests get this long after SIGTERM
LISTEN_BACKLOG = 1024
DEFAULT_SAMPLE_RATE = 24000
DEFAULT_SILENCE_MS = 600.0

log = logging.getLogger("testbed.sim")


class Knob(NamedTuple):
    """One option of the simulator: its flag, its help (which says its default) and the rest of
    argparse's keywords for it."""

    flag: str
    help: str
    options: dict[str, Any]


def _knob(flag: str, help: str, **options: Any) -> Knob:  # noqa: A002 - argparse's name for it
    return Knob(flag, help, options)


def _stages(text: str) -> list[Stage]:
    try:
        return parse_stages(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_LISTENING = (
    _knob("--host", "address to bind (default 127.0.0.1)", default="127.0.0.1"),
    _knob("--port", "port to bind; 0 picks a free one (default 8300)", type=number(int, 0, 65535), default=8300),
    _knob(
        "--tls-cert",
        "serve every face over TLS with this certificate (chain) file, with --tls-key (default off)",
        metavar="PEM",
        default="",
    ),
    _knob("--tls-key", "the private key of --tls-cert (default none)", metavar="PEM", default=""),
    _knob(
        "--tls-client-ca",
        "with --tls-cert: ask every client for a certificate and refuse the handshake without one "
        "this CA signed (mutual TLS; default: none asked)",
        metavar="PEM",
        default="",
    ),
    _knob(
        "--require-header",
        "answer 401 to a request (or WebSocket upgrade) without this header, and "
        "UNAUTHENTICATED to a gRPC call without it as metadata (NAME lowercased) (default off)",
        metavar="'NAME: VALUE'",
        default="",
    ),
    _knob(
        "--wyoming-port",
        "also serve Wyoming (Home Assistant's TTS protocol) on this TCP port; 0 picks a free one "
        "(default off; needs --capacity)",
        type=number(int, 0, 65535),
    ),
    _knob(
        "--grpc-port",
        "also serve NVIDIA Riva's RivaSpeechSynthesis (gRPC) on this port; 0 picks a free one (default off)",
        type=number(int, 0, 65535),
    ),
    _knob("--log-requests", "log one line per request (default off)", action="store_true"),
)
_SLOTS = (
    _knob(
        "--slots",
        f"requests synthesised at once; the rest queue FIFO (default {DEFAULT_SLOTS}; unlimited with --capacity)",
        type=number(int, 1),
    ),
    _knob(
        "--base-ms",
        f"fixed service time per request in ms (default {SLOTS_MODEL['base_ms']:g}; not with --capacity)",
        type=number(float, 0),
    ),
    _knob(
        "--per-char-ms",
        f"service time per input character in ms (default {SLOTS_MODEL['per_char_ms']:g}; not with --capacity)",
        type=number(float, 0),
    ),
    _knob(
        "--jitter",
        f"uniform +/- fraction around the service time (default {SLOTS_MODEL['jitter']:g}; not with --capacity)",
        type=number(float, 0, 1, high_open=True),
    ),
    _knob("--seed", "random seed for jitter, faults and --runaway-rate (default: a different one each run)", type=int),
    _knob(
        "--queue-limit", "requests allowed to wait for a slot; more get 503 (default unlimited)", type=number(int, 0)
    ),
)
_STAGES = (
    _knob(
        "--stages",
        "serve as a pipeline of stages, each with its own slots and cost per request in ms (+/- --jitter), "
        "e.g. talker:8:50,code2wav:2:200: a request waits for a slot of each in turn, its audio comes once the "
        "last is done; /metrics shows each stage's series (default: one stage, the slots model)",
        type=_stages,
        metavar="NAME:SLOTS:MS,...",
    ),
    _knob(
        "--stage-metrics",
        "with --stages, whose names the stages' series take: vLLM-Omni's (vLLM's families with stage and "
        "replica labels) or Triton's (nv_inference_* by model) (default %(default)s)",
        choices=STAGE_METRICS,
        default=STAGE_METRICS[0],
    ),
)
_SHARED = (
    _knob(
        "--capacity",
        "audio-seconds made per second, shared equally by the requests "
        "generating at once (enables the shared-capacity model; default off)",
        type=number(float, 0.001),
    ),
    _knob(
        "--max-speed",
        "with --capacity, the fastest one request generates, x real time (default: the capacity)",
        type=number(float, 0.001),
    ),
    _knob(
        "--chunk-ms",
        f"with --capacity, audio per chunk in ms (default {CAPACITY_MODEL['chunk_ms']:g})",
        type=number(float, 1),
    ),
    _knob(
        "--prefill-ms",
        f"with --capacity, delay before a request starts generating, using no "
        f"capacity (default {CAPACITY_MODEL['prefill_ms']:g})",
        type=number(float, 0),
    ),
)
_REFUSALS = (
    _knob("--rate", "token-bucket rate in requests/s; over it -> 429 (default off)", type=number(float, 0.001)),
    _knob("--burst", "token-bucket size (default: the rate rounded up, at least 1)", type=number(int, 1)),
    _knob(
        "--retry-after-format",
        "Retry-After as delta-seconds or an HTTP-date (default seconds)",
        choices=("seconds", "http-date"),
        default="seconds",
    ),
    _knob(
        "--oom-above",
        "500 'CUDA out of memory' when more than N requests are in flight (default off)",
        type=number(int, 0),
    ),
    _knob(
        "--max-chars",
        "refuse a text longer than N characters with 400, as OpenAI's API does past 4096 (HTTP; default: no limit)",
        type=number(int, 1),
        metavar="N",
    ),
    _knob(
        "--crash-above",
        "exit (status 70) when a request would make more than K in flight, as an engine that "
        "dies past its limit instead of queueing or refusing (default: never)",
        type=number(int, 1),
        metavar="K",
    ),
    _knob(
        "--recovery-s",
        "a server slow to come back from overload: while requests queue and for S seconds after "
        "one last had to, every request takes twice its time (slots model; default: none)",
        type=number(float, 0),
        metavar="S",
    ),
    _knob(
        "--pushback-ms",
        "the exhausted fault's wait: gRPC's grpc-retry-pushback-ms, HTTP's Retry-After rounded "
        "up to seconds (default 1000)",
        type=number(float, 0),
        default=1000.0,
    ),
)
_STREAMING = (
    _knob(
        "--stream",
        'stream every response chunked (a request\'s "stream": true also does; default off)',
        action="store_true",
    ),
    _knob(
        "--first-chunk-ms",
        f"when streaming, delay of the first audio chunk in ms (default "
        f"{SLOTS_MODEL['first_chunk_ms']:g}; not with --capacity)",
        type=number(float, 0),
    ),
    _knob(
        "--wav-header-alone",
        "stream the WAV header as its own write before any audio (default off)",
        action="store_true",
    ),
    _knob(
        "--sse",
        "answer server-sent events (OpenAI speech.audio.delta/done, PCM16) "
        'unless a request asks for "stream_format": "audio" (default off)',
        action="store_true",
    ),
    _knob(
        "--chunk-log",
        "append one JSON line per streamed answer with each audio write's send time (default off)",
        metavar="FILE",
    ),
    _knob(
        "--sample-rate",
        f"audio sample rate in Hz (default {DEFAULT_SAMPLE_RATE}: OpenAI's PCM rate, and the "
        f"client's --tts-sample-rate; with --speech the voice's own, 22050, and no other)",
        type=number(int, 8000, 192000),
    ),
)
_SPEECH = (
    _knob(
        "--speech",
        "answer with real speech instead of the tone: each text spoken by piper's joe voice "
        "(the piper extra), rendered once and cached; the audio is as long as the speech, the "
        "timing model unchanged (default off)",
        action="store_true",
    ),
    _knob(
        "--speech-cache",
        f"with --speech, the folder of rendered speech, one WAV per text (default {DEFAULT_CACHE}/)",
        metavar="DIR",
    ),
    _knob(
        "--speech-corpus",
        "with --speech, the corpus whose texts are rendered before listening (.jsonl text "
        "fields, or .txt lines); other texts are rendered when first asked for (default the "
        "load generator's default corpus, configs/texts/default.jsonl)",
        metavar="FILE",
    ),
    _knob(
        "--garble-above",
        f"with --speech, when more than K requests are in flight, keep an answer's first "
        f"{GARBLE_KEEP * 100:.0f}%% and speak the rest with another text's speech, the length unchanged "
        f"(default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--other-voice-above",
        "with --speech, when more than K requests are in flight, answer in another speaker's voice: "
        "the text spoken by espeak-ng (Debian's espeak-ng) instead of joe (default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--noise-above",
        f"when more than K requests are in flight, add white noise at --snr-db below the answer's level "
        f"and a click every {CLICK_EVERY_S * 1000:.0f} ms (default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--snr-db",
        f"with --noise-above, the signal-to-noise ratio in dB (default {DEFAULT_SNR_DB:g})",
        type=number(float, 0),
        metavar="DB",
    ),
    _knob(
        "--silence-above",
        "when more than K requests are in flight, an answer starts with --silence-ms of "
        "digital silence, that much longer; its first audio comes when it would have "
        "(default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--silence-ms",
        f"with --silence-above, the silence put first, in ms (default {DEFAULT_SILENCE_MS:g})",
        type=number(float, 0),
        metavar="MS",
    ),
    _knob(
        "--runaway-rate",
        f"probability that an answer runs away to the token cap: its clip repeated to "
        f"{RUNAWAY_FACTOR}x its length, at most {RUNAWAY_CAP_S:g} s (default 0)",
        type=number(float, 0, 1),
        default=0.0,
        metavar="P",
    ),
    _knob(
        "--runaway-above",
        "when more than K requests are in flight, every answer runs on past its text: its clip "
        "followed by more speech (other texts'; the tone without --speech) to --runaway-x times its "
        "length (default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--runaway-x",
        f"with --runaway-above, how many times its own length an answer runs on to (default {DEFAULT_RUN_ON_X:g})",
        type=number(float, 1),
        metavar="X",
    ),
)
_VOICES = (
    _knob(
        "--slow-above",
        "when more than K requests are in flight, a request for --slow-language (or --slow-voice) takes "
        "--slow-x times its service time, the others theirs (slots model, HTTP; default off)",
        type=number(int, 0),
        metavar="K",
    ),
    _knob(
        "--slow-language",
        'with --slow-above, the language slowed: requests whose "language" is LANG (default none)',
        metavar="LANG",
    ),
    _knob(
        "--slow-voice",
        'with --slow-above, the voice slowed: requests whose "voice" is NAME (default none)',
        metavar="NAME",
    ),
    _knob(
        "--slow-x",
        f"with --slow-above, how many times its service time a slowed request takes (default {DEFAULT_SLOW_X:g})",
        type=number(float, 1),
        metavar="X",
    ),
    _knob(
        "--voice-cache",
        "speaker embeddings kept, least recently used evicted; a request's voice "
        "(its voice name, or its reference clip's bytes) that is not kept costs "
        "--voice-miss-ms (default 0: no cache, voices cost nothing)",
        type=number(int, 0),
        default=0,
    ),
    _knob(
        "--voice-miss-ms",
        f"with --voice-cache, the time a miss adds to the request's slot, in ms (default {DEFAULT_MISS_MS:g})",
        type=number(float, 0),
    ),
    _knob(
        "--cache-hit-ms",
        "a server that caches its answers: a text (with its voice) it has served before "
        "takes MS in its slot instead of the timing model's time (slots model; default: no "
        "cache)",
        type=number(float, 0),
        metavar="MS",
    ),
    _knob(
        "--unspeakable",
        "how a text with no letter or digit in it (emoji and symbols only) is answered: "
        "audio as any text, 400, 500 (a front end that finds nothing to say and fails), or "
        "hang (--stall-s, then 500) (HTTP; default audio)",
        choices=UNSPEAKABLE,
        default="audio",
    ),
)
_FAULTS = (
    _knob(
        "--fault",
        "inject a fault (repeatable; one is picked per faulty request; default none)",
        action="append",
        choices=FAULTS,
        default=[],
    ),
    _knob("--fault-rate", "probability that a request gets a fault (default 1)", type=number(float, 0, 1), default=1.0),
    _knob(
        "--stall-s", "the stall fault's delay before the first byte (default 10)", type=number(float, 0), default=10.0
    ),
    _knob(
        "--leak-mb-per-min",
        "keep this many more MB (10^6 bytes) of memory each minute, a leak for a soak to find (default 0: none)",
        type=number(float, 0),
        default=0.0,
    ),
)
_SESSIONS = (
    _knob(
        "--ws-close-after-done",
        "close a WebSocket session after session.done, as vLLM-Omni before its PR #5517 and "
        "sglang-omni do (default: keep it open for the next utterance)",
        action="store_true",
    ),
    _knob(
        "--orphan-ms",
        "after a client cancels an utterance or goes away, keep generating (holding its slot and "
        "its share of --capacity) this many ms, as servers that synthesise for nobody do "
        "(default 0: stop at once)",
        type=number(float, 0),
        default=0.0,
    ),
    _knob(
        "--ws-idle-timeout-s",
        "close a WebSocket session that sends nothing for S seconds with no utterance in "
        "flight, 1008 as ElevenLabs does (default: never)",
        type=number(float, 0.001),
        metavar="S",
    ),
    _knob(
        "--ws-close-late-ms",
        "answer a WebSocket client's close frame this many ms late, the utterance's audio going on "
        "meanwhile (default 0)",
        type=number(float, 0),
        default=0.0,
    ),
)
_METRICS = (
    _knob(
        "--metrics-prefix",
        "name /metrics' series PREFIX_requests_waiting, PREFIX_requests_running ... as a custom "
        "server might (default: vLLM's pattern, sim:num_requests_waiting ...)",
        metavar="PREFIX",
    ),
)
#: The simulator's options, in the groups ``--help`` lists them by.
KNOBS: tuple[tuple[str, tuple[Knob, ...]], ...] = (
    ("where it listens", _LISTENING),
    ("capacity: slots and a FIFO queue (the default model)", _SLOTS),
    ("capacity: a pipeline of stages, each its own slots (--stages)", _STAGES),
    ("capacity: audio-seconds per second shared by the requests generating (--capacity)", _SHARED),
    ("refusals and limits", _REFUSALS),
    ("streaming and the audio", _STREAMING),
    ("real speech, and the drills that break it under load", _SPEECH),
    ("languages, voices and caches", _VOICES),
    ("faults", _FAULTS),
    ("sessions (WebSocket, Wyoming)", _SESSIONS),
    ("metrics", _METRICS),
)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The simulator's parser, made from :data:`KNOBS`."""
    parser = Parser(
        prog=prog,
        description="A TTS server with a known capacity: slots and a FIFO queue, or audio-seconds per second "
        "shared by the requests generating at once (see testbed/sim).",
    )
    for title, knobs in KNOBS:
        group = parser.add_argument_group(title)
        for knob in knobs:
            group.add_argument(knob.flag, help=knob.help, **knob.options)
    return parser


def parse_args(argv: list[str] | None = None, prog: str = PROG) -> argparse.Namespace:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.burst is not None and args.rate is None:
        parser.error("--burst needs --rate")
    if args.burst is None and args.rate is not None:
        args.burst = max(1, math.ceil(args.rate))
    check_model(parser, args)
    if args.capacity is not None:
        args.max_speed = args.capacity if args.max_speed is None else args.max_speed
    if args.stages and args.capacity is not None:
        parser.error("--stages is for the slots model (without --capacity)")
    if args.slots is None and args.capacity is None and not args.stages:
        args.slots = DEFAULT_SLOTS
    if args.slots is None and args.queue_limit is not None:
        parser.error(
            "--queue-limit needs --slots with --capacity (slots are unlimited otherwise, so nothing ever queues)"
        )
    if args.wyoming_port is not None and args.capacity is None:
        parser.error("--wyoming-port needs --capacity (a session's sentences share the capacity)")
    if args.voice_miss_ms is not None and not args.voice_cache:
        parser.error("--voice-miss-ms needs --voice-cache")
    if args.voice_miss_ms is None:
        args.voice_miss_ms = DEFAULT_MISS_MS
    if args.cache_hit_ms is not None and args.capacity is not None:
        parser.error("--cache-hit-ms is for the slots model (without --capacity)")
    check_speech(parser, args)
    check_slow(parser, args)
    if args.chunk_log:
        try:
            args.chunk_log = open(args.chunk_log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the server's log
        except OSError as err:
            parser.error(f"argument --chunk-log: cannot open {args.chunk_log!r} for appending: {err.strerror or err}")
    return args


def check_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Each model's knobs: given with the other model, one would silently do nothing; those of
    the model in use not given take their defaults."""
    own, other = (SLOTS_MODEL, CAPACITY_MODEL) if args.capacity is None else (CAPACITY_MODEL, SLOTS_MODEL)
    for flag in other:
        if getattr(args, flag) is not None:
            parser.error(
                f"--{flag.replace('_', '-')} "
                + (
                    "needs --capacity"
                    if args.capacity is None
                    else "does not apply with --capacity (see --prefill-ms and --chunk-ms)"
                )
            )
    for flag in own:
        if getattr(args, flag) is None:
            setattr(args, flag, own[flag])


def check_slow(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--slow-above and what it slows: a language or a voice, and the slots model."""
    named = args.slow_language is not None or args.slow_voice is not None
    if args.slow_above is None:
        for flag in ("slow_language", "slow_voice", "slow_x"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} needs --slow-above")
    elif not named:
        parser.error("--slow-above needs --slow-language or --slow-voice (what it slows)")
    elif args.capacity is not None:
        parser.error("--slow-above is for the slots model (without --capacity)")
    if args.slow_x is None:
        args.slow_x = DEFAULT_SLOW_X


def check_speech(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--speech and its drills: the flags that need it, its sample rate (the voice's), its corpus
    read (``args.speech_texts``)."""
    for flag in ("speech_cache", "speech_corpus"):
        if getattr(args, flag) is not None and not args.speech:
            parser.error(f"--{flag.replace('_', '-')} needs --speech")
    if args.garble_above is not None and not args.speech:
        parser.error("--garble-above needs --speech (the rest of a clip is another text's speech)")
    if args.other_voice_above is not None and not args.speech:
        parser.error("--other-voice-above needs --speech (joe's voice is the one it changes from)")
    if args.snr_db is not None and args.noise_above is None:
        parser.error("--snr-db needs --noise-above")
    if args.silence_ms is not None and args.silence_above is None:
        parser.error("--silence-ms needs --silence-above")
    if args.silence_ms is None:
        args.silence_ms = DEFAULT_SILENCE_MS
    if args.runaway_x is not None and args.runaway_above is None:
        parser.error("--runaway-x needs --runaway-above")
    args.speech_texts = []
    if not args.speech:
        if args.sample_rate is None:
            args.sample_rate = DEFAULT_SAMPLE_RATE
        return
    try:
        voice, rate = voice_info()
        args.speech_texts = corpus_texts(args.speech_corpus or DEFAULT_CORPUS)
    except SpeechUnavailable as err:
        parser.error(str(err))
    if args.sample_rate not in (None, rate):
        parser.error(
            f"--speech answers at its voice's own {rate} Hz ({voice}); leave --sample-rate out, or give it {rate}"
        )
    args.sample_rate = rate


def describe(args: argparse.Namespace) -> str:
    """The simulator's knobs in one line: the model's, then each drill that is on."""
    knobs = [f"slots={'unlimited' if args.slots is None else args.slots}"]
    if args.capacity:
        knobs.append(
            f"capacity={args.capacity:g} max_speed={args.max_speed:g} "
            f"chunk_ms={args.chunk_ms:g} prefill_ms={args.prefill_ms:g}"
        )
    elif args.stages:
        shown = ",".join(f"{s.name}:{s.slots.n}:{s.cost_ms:g}" for s in args.stages)
        knobs.append(f"stages={shown} stage_metrics={args.stage_metrics} jitter={args.jitter:g}")
    else:
        knobs.append(f"base_ms={args.base_ms:g} per_char_ms={args.per_char_ms:g} jitter={args.jitter:g}")
    knobs += [
        f"queue_limit={'unlimited' if args.queue_limit is None else args.queue_limit}",
        f"rate={args.rate if args.rate else 'off'}",
        f"stream={args.stream}",
        f"sse={args.sse}",
        f"sample_rate={args.sample_rate}",
    ]
    exhausted = f" pushback_ms={args.pushback_ms:g}" if args.fault and "exhausted" in args.fault else ""
    drills = (  # (on, what it says): said only where on
        (args.rate, lambda: f"burst={args.burst} retry_after={args.retry_after_format}"),
        ((args.stream or args.sse) and not args.capacity, lambda: f"first_chunk_ms={args.first_chunk_ms:g}"),
        (args.wav_header_alone, lambda: "wav_header_alone=True"),
        (args.chunk_log, lambda: f"chunk_log={args.chunk_log.name}"),
        (args.wyoming_port is not None, lambda: f"wyoming_port={args.wyoming_port}"),
        (args.ws_close_after_done, lambda: "ws_close_after_done=True"),
        (args.grpc_port is not None, lambda: f"grpc_port={args.grpc_port}"),
        (args.ws_close_late_ms, lambda: f"ws_close_late_ms={args.ws_close_late_ms:g}"),
        (args.ws_idle_timeout_s, lambda: f"ws_idle_timeout_s={args.ws_idle_timeout_s:g}"),
        (args.orphan_ms, lambda: f"orphan_ms={args.orphan_ms:g}"),
        (args.oom_above is not None, lambda: f"oom_above={args.oom_above}"),
        (args.fault, lambda: f"faults={','.join(args.fault)} fault_rate={args.fault_rate:g}{exhausted}"),
        (args.leak_mb_per_min, lambda: f"leak_mb_per_min={args.leak_mb_per_min:g}"),
        (args.voice_cache, lambda: f"voice_cache={args.voice_cache} voice_miss_ms={args.voice_miss_ms:g}"),
        (args.cache_hit_ms is not None, lambda: f"cache_hit_ms={args.cache_hit_ms:g}"),
        (args.speech, lambda: f"speech=True speech_texts={len(args.speech_texts)}"),
        (args.garble_above is not None, lambda: f"garble_above={args.garble_above}"),
        (args.other_voice_above is not None, lambda: f"other_voice_above={args.other_voice_above}"),
        (
            args.noise_above is not None,
            lambda: f"noise_above={args.noise_above} snr_db={args.snr_db or DEFAULT_SNR_DB:g}",
        ),
        (args.silence_above is not None, lambda: f"silence_above={args.silence_above} silence_ms={args.silence_ms:g}"),
        (
            args.runaway_above is not None,
            lambda: f"runaway_above={args.runaway_above} runaway_x={args.runaway_x or DEFAULT_RUN_ON_X:g}",
        ),
        (args.runaway_rate, lambda: f"runaway_rate={args.runaway_rate:g}"),
    )
    knobs += [say() for on, say in drills if on]
    return "sim: " + " ".join(knobs)


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    """The server's TLS keyword (``ssl_context``; empty without --tls-cert); raises ValueError
    with the sentence for flags that do not go together or a key that does not load."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together.")
    if args.tls_client_ca and not args.tls_cert:
        raise ValueError("--tls-client-ca asks clients for a certificate over TLS: give --tls-cert and --tls-key.")
    if not args.tls_cert:
        return {}
    try:
        return {"ssl_context": server_context(args.tls_cert, args.tls_key, args.tls_client_ca)}
    except (OSError, ssl.SSLError) as err:
        raise ValueError(f"--tls-cert/--tls-key: {err}.") from None


def _start(servers: list, host: str) -> None:
    """Start every server, or none: raises ValueError naming the port that cannot listen."""
    for srv, port in servers:
        try:
            srv.start()
        except OSError as err:
            in_use = err.errno == errno.EADDRINUSE
            reason = "it is already in use" if in_use else err.strerror or str(err)
            for started, _ in servers:
                started.stop()
            raise ValueError(f"cannot listen on {host}:{port}: {reason}.") from None


def serve(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    rng = random.Random(args.seed)  # one seeded source for jitter, faults and runaways
    capacity = Capacity(args, rng)
    try:
        speaker = make_speaker(args, rng)
    except SpeechUnavailable as err:
        print(f"{prog}: {err}.", file=sys.stderr)
        return 2
    try:
        tls = _tls(args)
    except ValueError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    app = SpeechApp(args, capacity, rng, speaker)
    server = WSGIServer(
        (args.host, args.port),
        app,
        handler_class=Handler,
        spawn=Pool(),  # a pool, so that stop() waits for requests in flight
        backlog=LISTEN_BACKLOG,
        log=log if args.log_requests else None,
        **tls,
    )
    servers: list[tuple[StreamServer, int]] = [(server, args.port)]
    if args.wyoming_port is not None:
        servers.append((wyoming.server(app, args.host, args.wyoming_port), args.wyoming_port))
    grpc = None
    if args.grpc_port is not None:
        try:
            from tts_knee.testbed.sim.grpc import RivaServer
        except ImportError as err:
            print(f"{prog}: --grpc-port needs the grpc extra (pip install 'tts-knee[grpc]'): {err}.", file=sys.stderr)
            return 2
        grpc = RivaServer(args, capacity, rng, speaker, tls.get("ssl_context")).server
        servers.append((grpc, args.grpc_port))
    try:
        _start(servers, args.host)
    except ValueError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    if args.wyoming_port is not None:  # before the HTTP line, which tells a watcher all is up
        print(f"wyoming on {_url('tcp', servers[1][0].address)}", flush=True)
    # one write, newline included: a log line from another thread cannot land inside it
    print(f"listening on {_url('https' if tls else 'http', server.address)}\n", end="", flush=True)
    if grpc is not None:
        # one write, newline included: a log line from another thread cannot land inside it
        print(f"listening on {_url('grpcs' if tls else 'grpc', grpc.address)}\n", end="", flush=True)
    log.info(describe(args))

    def stop():
        for srv, _ in servers[1:]:
            srv.stop(STOP_TIMEOUT_S)
        server.stop(STOP_TIMEOUT_S)

    if args.leak_mb_per_min:
        Leak(args.leak_mb_per_min).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop)
    server.serve_forever()
    return 0


def make_speaker(args: argparse.Namespace, rng: random.Random) -> Speaker:
    """What makes every answer's PCM; with --speech, its corpus rendered (or read from the cache)
    first, and with --capacity each text's sentences too, as a session synthesises them."""
    if not args.speech:
        return Speaker(args, rng)
    from tts_knee.testbed.speech import SpeechCache

    speech = SpeechCache(args.speech_cache)
    speaker = Speaker(args, rng, speech)
    texts = args.speech_texts
    sentences = [] if args.capacity is None else [s for t in texts for s in split_sentences(t) if s != t]
    started = time.monotonic()
    speaker.prepare(texts, sentences)
    log.info(
        f"sim: speech: {len(speech)} texts ready in {time.monotonic() - started:.1f} s "
        f"({speech.rendered} rendered, {speech.loaded} from the cache in {speech.folder})"
    )
    return speaker


def server_context(cert: str, key: str, client_ca: str = "") -> ssl.SSLContext:
    """The TLS context every face serves with: the certificate and key, HTTP/1.1 and h2 offered;
    with ``client_ca`` a client certificate that CA signed is required."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    if client_ca:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def _url(scheme: str, address) -> str:
    host, port = address[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
