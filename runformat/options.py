"""The run's options, declared once: each a field of :class:`RunOptions` that carries its group,
default, unit, bounds, choices, help, environment variable, whether the web UI shows it and
whether and how ``run.json`` records it (:class:`Option`).

``tts-knee run --help``, Locust's web UI form and ``.conf`` files (``locustfiles.settings``
registers :data:`OPTIONS` on Locust's parser), the run's settings (``locustfiles.settings.Settings``
is a RunOptions), ``run.json``'s ``options`` (:data:`RUN_OPTIONS`; the readers take their defaults
from :data:`DEFAULTS`) and the manual's reference (``docs/options.md``, :func:`reference`) are made
from these declarations: adding an option is one field here (``docs/adding.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

from .fields import Field

#: The concurrency grid without --steps.
DEFAULT_STEPS = "1,2,4,8,16"
#: Seconds per step without --step-time.
DEFAULT_STEP_TIME_S = 30.0
#: With --step-requests, a step also ends after this long unless --step-time says otherwise.
STEP_REQUESTS_CAP_S = 600.0
#: Settle window by default: this fraction of the step, at most SETTLE_MAX_S.
SETTLE_FRACTION, SETTLE_MAX_S = 0.1, 5.0
#: Request shapes (--tts-api) and the path each is served at by default.
APIS = {"openai": "/v1/audio/speech", "piper": "/synthesize", "json": "/tts"}
#: Audio formats --tts-format asks for (and the audio check expects).
FORMATS = ("wav", "pcm", "mp3", "opus", "aac", "flac")
#: --tts-stream-format: none, server-sent events, or raw audio.
STREAM_FORMATS = ("", "sse", "audio")
#: What --retry-on takes beside HTTP statuses (and gRPC code names): connection errors (no status at all).
CONNECTION_ERROR = "conn"
#: --flush: after each sentence (where the protocol has a flush message), or only at the end.
FLUSH_MODES = ("sentence", "end")
#: --refine-to without the flag: 5% of the rate.
DEFAULT_REFINE_TO = "5%"
#: The error of an attempt still in flight when the run's drain time ran out.
CUT_BY_RUN_END = "cut_by_run_end"
#: --drain-time without the flag is the request timeout, at most this; no drain may be longer than
#: DRAIN_MAX_S (a master waits 60 s for its workers to stop, their drain included).
DRAIN_DEFAULT_MAX_S, DRAIN_MAX_S = 30.0, 50.0
#: --tts-protocol: what carries an utterance, and the -H schemes each takes.
PROTOCOLS = {
    "http": ("http", "https"),
    "ws": ("http", "https", "ws", "wss"),
    "wyoming": ("tcp",),
    "grpc": ("grpc", "grpcs"),
}
#: The shortest --soak: time for enough windows to tell a trend from noise.
SOAK_MIN_S = 60.0
#: --text-reuse: the corpus's texts again at every step, or a text of its own for every request.
TEXT_REUSE = ("same", "unique")
#: --cancel-by: the protocol's cancel message, or closing the connection (the HTTP stream).
CANCEL_MODES = ("message", "close")
#: --barge-in-after by default: an utterance's expected length, its characters at this speaking rate.
SPEAKING_CHARS_PER_S = 15.0
#: Where the master and the collector both find the collectors' token, off the command line.
COLLECTOR_TOKEN_ENV = "TTS_KNEE_COLLECTOR_TOKEN"


class Group(NamedTuple):
    """Options that belong together: ``tts-knee run --help`` and the manual's reference show
    them under ``title``, in the order of :data:`GROUPS`."""

    title: str
    about: str


TARGET = Group("target and request", "What the requests go to and what they ask for.")
STREAMING = Group(
    "streaming and sessions", "Streamed answers, the playback model, and sessions that take the text in pieces."
)
PLAN = Group("load plan", "The steps: concurrency or offered rates, how long each lasts, the run's end.")
RETRIES = Group("retries", "Which failures are retried, and how long to back off.")
DECISIONS = Group(
    "SLO and plan decisions",
    "An objective each step is judged against as it ends, and what the plan does with the verdicts.",
)
CAPACITY = Group(
    "capacity and cost",
    "The recommendation in replicas and money: a replica's price and the "
    "demand to plan for (the report takes them too).",
)
VOICES = Group("voices", "The voices requests ask for, and sweeps over distinct voices.")
BARGE_IN = Group("barge-in", "Listeners who interrupt, and how the utterance is cancelled.")
LISTENING = Group("listening", "The ASR judge: whether the speech is still right under load.")
TELEMETRY = Group("telemetry", "The collectors beside the server and the server's own metrics.")
OUTPUT = Group("output", "The run directory and the audio written.")
GROUPS: tuple[Group, ...] = (
    TARGET,
    PLAN,
    STREAMING,
    RETRIES,
    DECISIONS,
    CAPACITY,
    VOICES,
    BARGE_IN,
    LISTENING,
    TELEMETRY,
    OUTPUT,
)


T = TypeVar("T")
P = ParamSpec("P")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option(Generic[T]):
    """An option's declaration: a :class:`RunOptions` field's, made with :func:`option`. Its kind
    is its default's: a str, an int, a float, a bool (a switch) or a tuple (a repeatable flag)."""

    group: Group | None  # where --help and the manual list it; None: no flag, a figure run.json records
    default: T  # the value when the flag is not given
    help: str  # "{default}" is replaced by the default as the help shows it
    unit: str = ""
    choices: tuple[str, ...] = ()
    at_least: float | None = None  # a number's least value
    above: float | None = None  # a number must be greater than this
    env: str | None = None  # an environment variable that sets it when the flag is not given
    secret: bool = False  # masked in the web UI; run.json never records its value
    web_ui: bool = True  # in Locust's web UI form; False: read once at start, so the form could not change it
    key: str | None = ""  # its key in run.json's options: "" its name, None not recorded
    empty_is_null: bool = False  # run.json records an empty value as null
    only_with: tuple[str, ...] = ()  # run.json records it only where one of these settings is set, else null
    name: str = ""  # the field's: its name on Locust's parsed options and in the settings

    @property
    def flag(self) -> str | None:
        """The command-line option: ``step_time`` is ``--step-time``."""
        return None if self.group is None else "--" + self.name.replace("_", "-")

    @property
    def kind(self) -> type:
        return type(self.default)

    def help_text(self) -> str:
        shown = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return self.help.replace("{default}", shown)

    def checked(self, value: object) -> object:
        """``value`` as Locust hands it over (parsed, or the text of a ``.conf`` file or the web UI)
        in the option's kind, one of its choices and within its bounds (None: the default); a
        ValueError says in one sentence what the option expects."""
        if value is None:
            return self.default
        if self.kind in (int, float):
            return self._number(value)
        if self.kind is bool:
            return bool(value)
        if self.kind is tuple:
            return tuple(map(str, value)) if isinstance(value, (list, tuple)) else (str(value),)
        text = str(value)
        if self.choices and text not in self.choices:
            raise ValueError(
                f"{self.flag} must be one of {', '.join(choice for choice in self.choices if choice)}, got {value!r}"
            )
        return text

    def _number(self, value: object) -> int | float:
        try:
            number: int | float = self.kind(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int("inf")
            raise ValueError(f"{self.flag} must be a number, got {value!r}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"{self.flag} must be a finite number, got {value!r}")
        if self.at_least is not None and number < self.at_least:
            least = "zero" if self.at_least == 0 else f"{self.at_least:g}"
            raise ValueError(f"{self.flag} must be {least} or more, got {value!r}")
        if self.above is not None and number <= self.above:
            above = "zero" if self.above == 0 else f"{self.above:g}"
            raise ValueError(f"{self.flag} must be greater than {above}, got {value!r}")
        return number

    def recorded(self, settings: object, value: object) -> object:
        """``value``, the run's setting of this option, as ``run.json`` records it: null where the
        declaration says so, a tuple as a list, a path as text."""
        if self.only_with and not any(getattr(settings, name) for name in self.only_with):
            return None
        if self.empty_is_null and not value:
            return None
        if isinstance(value, tuple):
            return list(value)
        return str(value) if isinstance(value, PurePath) else value


def _field_of(declare: Callable[P, Option[T]]) -> Callable[P, T]:
    """:func:`option`: a dataclass field whose default is the declaration's and whose metadata
    holds it, typed as its default (so a default of another type than its field's is an error)."""

    def field(*args: P.args, **kwargs: P.kwargs) -> T:
        declared = declare(*args, **kwargs)
        return dataclasses.field(default=declared.default, metadata={_DECLARED: declared})

    return field


_DECLARED = "option"
#: A :class:`RunOptions` field: ``step_time: float = option(group=PLAN, unit="s", default=0.0, help=...)``.
option = _field_of(Option)

#: The type of an option the run's settings parse into a value of their own type, which
#: ``locustfiles.settings.Settings`` declares (``steps``: "1,2,4" given, (1, 2, 4) set).
Parsed = object


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Every option of ``tts-knee run``, named as its flag (``--step-time`` is ``step_time``), in
    its group's order in ``--help`` and the manual, and in run.json's order."""

    tts_api: str = option(
        group=TARGET,
        default="openai",
        choices=tuple(sorted(APIS)),
        help="Request shape: OpenAI /v1/audio/speech, piper POST /synthesize, or a JSON template (default {default}).",
    )
    tts_path: str = option(
        group=TARGET,
        default="",
        help="Path of the TTS endpoint (default: the API's usual path); run.json records the path used.",
    )
    tts_model: str = option(group=TARGET, default="tts-1", help="`model` field for the openai API (default {default}).")
    tts_voice: str = option(
        group=TARGET,
        default="alloy",
        help="`voice` field for the openai API, empty to omit it (default {default}); over ws and wyoming the "
        "voice sent where the protocol has one (default: none, the server's own).",
    )
    tts_format: str = option(
        group=TARGET,
        default="wav",
        help=f"Audio format asked for and checked: {', '.join(FORMATS)} (default {{default}}).",
    )
    tts_stream: bool = option(
        group=STREAMING, default=False, help="Ask for a streamed response (openai: stream=true; default off)."
    )
    tts_stream_format: str = option(
        group=STREAMING,
        default="",
        help="openai stream_format: sse (server-sent events) or audio; implies --tts-stream (default: none).",
    )
    playback_buffer_ms: float = option(
        group=STREAMING,
        unit="ms",
        default=0.0,
        at_least=0,
        help="Audio (ms) the simulated player buffers before it starts playing a stream (default {default}).",
    )
    ttfa_floor_ms: float = option(
        group=STREAMING,
        unit="ms",
        default=300.0,
        at_least=0,
        help="A rise in time to first audio counts toward the knee only above this, in ms (default {default}).",
    )
    # Text paced as a language model writes it, for protocols that take text in pieces.
    text_rate: float = option(
        group=STREAMING,
        unit="tokens/s",
        default=0.0,
        at_least=0,
        help="Send the text as a language model writes it, this many tokens per second (a token is a word "
        "with its trailing space), where the protocol takes text in pieces (default 0: the whole text at "
        "once).",
    )
    text_jitter: float = option(
        group=STREAMING,
        default=0.0,
        at_least=0,
        help="With --text-rate: each gap between tokens is 1/rate times 1 +/- up to this fraction, drawn "
        "uniformly (default {default}: even gaps).",
    )
    flush: str = option(
        group=STREAMING,
        default="sentence",
        choices=FLUSH_MODES,
        help="With --text-rate: send the protocol's flush after each sentence, or only at the end of the text "
        "(default {default}).",
    )
    # Sessions: protocols that keep a connection open and take the text in pieces (voice agents).
    tts_protocol: str = option(
        group=STREAMING,
        default="http",
        choices=tuple(PROTOCOLS),
        help="What carries an utterance: an HTTP request (-H http://...), a WebSocket session in a preset's "
        "dialect (-H http://..., see --tts-preset), Wyoming over TCP (-H tcp://host:port) or a gRPC call "
        "(-H grpc://host:port, see --tts-preset) (default {default}).",
    )
    tts_preset: str = option(
        group=STREAMING,
        default="",
        empty_is_null=True,
        help="ws: the WebSocket dialect, a preset tts-knee ships (vllm-omni, elevenlabs, elevenlabs-multi, deepgram, "
        "cartesia) or a .toml file of your own; grpc: riva (Riva's Synthesize, SynthesizeOnline with "
        "--tts-stream), triton (a Triton model) or a .json preset file, whose voice, model and language "
        "--tts-voice, --tts-model and --tts-language left at their defaults take (default: none; ws and grpc "
        "need one).",
    )
    turns: int = option(
        group=STREAMING,
        unit="count",
        default=0,
        at_least=0,
        help="Utterances per conversation: a user closes its session after this many and opens a new one "
        "(default 0: one session for as long as the user runs; a preset that does not reuse its connection "
        "opens one per utterance anyway).",
    )
    think_time: float = option(
        group=STREAMING,
        unit="s",
        default=0.0,
        at_least=0,
        help="Seconds a user waits between the turns of a conversation (default {default}).",
    )
    contexts: int = option(
        group=STREAMING,
        unit="count",
        default=1,
        above=0,
        help="Utterances each user keeps in flight on its one session, where the preset has contexts (cartesia, "
        "elevenlabs-multi) (default {default}).",
    )
    # Barge-in: the listener interrupts, and the utterance is cancelled the way its protocol can.
    barge_in: float = option(
        group=BARGE_IN,
        unit="share",
        default=0.0,
        at_least=0,
        help="Share of utterances the listener interrupts (barge-in), 0 to 1; each is cancelled (see --cancel-by) "
        "and recorded as cancelled, not failed (default 0: none).",
    )
    barge_in_after: Parsed = option(
        group=BARGE_IN,
        unit="ms",
        default="",
        only_with=("barge_in",),
        help="When the listener interrupts, in ms after the first audio heard: MS, or LO-HI drawn uniformly "
        f"(default: drawn uniformly over the utterance's expected length, its characters at "
        f"{SPEAKING_CHARS_PER_S:g} a second).",
    )
    cancel_by: str = option(
        group=BARGE_IN,
        default="",
        choices=("",) + CANCEL_MODES,
        only_with=("barge_in",),
        help="How an interruption cancels: the preset's cancel message, or closing the connection (HTTP: the "
        "stream; gRPC: the call's stream, RST_STREAM CANCEL) (default: the preset's cancel message where it has "
        "one, else close).",
    )
    barge_in_seed: int = option(
        group=BARGE_IN,
        default=-1,
        only_with=("barge_in",),
        help="Seed of which utterances are interrupted and when, recorded in run.json (default: a random one).",
    )
    # Reaching a real service: TLS that verifies, and credentials that never reach the run directory
    header: tuple[str, ...] = option(
        group=TARGET,
        default=(),
        key="headers",
        secret=True,
        help="An HTTP header sent with every request and WebSocket upgrade, 'NAME: VALUE' (repeatable); "
        "${VAR} in the value is read from the environment. run.json records the names, never the "
        "values (default: none).",
    )
    grpc_metadata: Parsed = option(
        group=TARGET,
        default=(),
        secret=True,
        help="gRPC: metadata sent with every call, KEY=VALUE (repeatable); ${VAR} in the value is read from the "
        "environment. run.json records the keys, never the values (default: none).",
    )
    tls_ca: str = option(
        group=TARGET,
        default="",
        empty_is_null=True,
        help="CA certificates (a PEM file) that https://, wss:// and grpcs:// targets are verified against, "
        "for a private CA (default: the system's).",
    )
    tls_client_cert: str = option(
        group=TARGET,
        default="",
        empty_is_null=True,
        help="A client certificate (PEM, its chain after it) for a TLS target that asks for one (mutual TLS); its "
        "key in the same file or in --tls-client-key. run.json records the certificate's path (default: none).",
    )
    tls_client_key: str = option(
        group=TARGET,
        default="",
        key=None,
        help="The private key of --tls-client-cert, when it is a file of its own (default: in the certificate's file).",
    )
    tls_insecure: bool = option(
        group=TARGET,
        default=False,
        help="Do not verify the target's TLS certificate; the report says so (default off).",
    )
    tts_template: str | None = option(
        group=TARGET,
        default="",
        key=None,
        help='JSON payload for --tts-api json with "{text}" where the text goes, or @FILE (default: none).',
    )
    tts_sample_rate: int = option(
        group=TARGET,
        unit="Hz",
        default=24000,
        above=0,
        key=None,
        help="Sample rate of raw PCM responses and of SSE audio events, in Hz (default {default}).",
    )
    # gRPC: NVIDIA Riva's speech synthesis and Triton models (-H grpc://host:port, --tts-preset)
    tts_language: str = option(
        group=TARGET,
        default="",
        empty_is_null=True,
        help="riva: the request's language_code (default: the preset's, en-US).",
    )
    texts: Parsed = option(
        group=TARGET,
        default="",
        help="Corpus: .txt (one text per line) or .jsonl (text, id, tier) (default: the bundled "
        "configs/texts/default.jsonl); run.json records the file read.",
    )
    texts_count: int | None = option(group=None, unit="count", default=None, help="Texts in the corpus.")
    steps: Parsed = option(
        group=PLAN,
        unit="users",
        default="",
        help=f"Concurrency levels, in order (closed loop; default {DEFAULT_STEPS}).",
    )
    # Open loop: offered arrivals per second instead of a number of users.
    rates: Parsed = option(
        group=PLAN,
        unit="req/s",
        default="",
        help="Open loop instead of --steps: offered requests per second, in order, for the whole run (split "
        "across workers), e.g. 1,2,4,8; each arrival is sent on its schedule (default: none, closed loop).",
    )
    arrival: str = option(
        group=PLAN,
        default="poisson",
        choices=("poisson", "constant"),
        only_with=("rates",),
        help="Open loop: gaps between arrivals, exponential (poisson) or equal (constant) (default {default}; "
        "run.json: null in a closed-loop run).",
    )
    arrival_seed: int = option(
        group=PLAN,
        default=-1,
        only_with=("rates",),
        help="Open loop: seed of the Poisson arrivals, recorded in run.json (default: a random one).",
    )
    max_inflight: int = option(
        group=PLAN,
        unit="count",
        default=1000,
        above=0,
        only_with=("rates",),
        help="Open loop: an arrival that finds this many requests in flight (per worker) is not sent and "
        "counted as dropped (default {default}).",
    )
    trace: Parsed = option(
        group=PLAN,
        default="",
        help="Open loop: replay this log of arrivals (JSONL or CSV: offset_s and text, text_len or text_id; voice, "
        "language, conversation, turn) instead of --rates, each step at one --trace-speed (default: none).",
    )
    trace_speed: Parsed = option(
        group=PLAN,
        unit="x",
        default="1",
        empty_is_null=True,
        help="With --trace: the replay's speeds, in order, e.g. 0.5,1,2,4 (2: twice the log's pace); each step "
        "replays the trace from its start for --step-time or the whole trace (default {default}).",
    )
    step_time: float = option(
        group=PLAN,
        unit="s",
        default=0.0,
        at_least=0,
        help=f"Seconds per step (default {DEFAULT_STEP_TIME_S:g}; a cap with --step-requests, "
        f"default {STEP_REQUESTS_CAP_S:g} there).",
    )
    step_requests: int = option(
        group=PLAN,
        unit="count",
        default=0,
        at_least=0,
        help="End each step after this many settled requests (default 0: by time).",
    )
    settle_time: float = option(
        group=PLAN,
        unit="s",
        default=-1.0,
        help=f"Seconds at the start of each step whose records are marked settled=false (default "
        f"{SETTLE_FRACTION:.0%} of the step, at most {SETTLE_MAX_S:g} s; 0 with --step-requests). A step that "
        "adds more users than start in this time (100 a second), or stops users whose requests are still "
        "running, settles longer and runs that much longer.",
    )
    split_max_chars: int = option(
        group=TARGET,
        unit="chars",
        default=0,
        at_least=0,
        help="Split longer texts at sentence ends into segments of at most this many characters, one request "
        "each, joined into one WAV on the client (default 0: off).",
    )
    retry_max_attempts: int = option(
        group=RETRIES,
        unit="count",
        default=3,
        above=0,
        help="Attempts per request, the first included (default {default}).",
    )
    retry_base_ms: float = option(
        group=RETRIES,
        unit="ms",
        default=200.0,
        at_least=0,
        help="First backoff in ms; doubles per attempt (default {default}).",
    )
    retry_max_ms: float = option(
        group=RETRIES, unit="ms", default=2000.0, at_least=0, help="Longest backoff in ms (default {default})."
    )
    retry_on: str = option(
        group=RETRIES,
        default="429,500,502,503,504",
        help=f"Statuses to retry, comma-separated; add `{CONNECTION_ERROR}` for connection errors, gRPC code "
        f"names for gRPC (RESOURCE_EXHAUSTED and UNAVAILABLE count as 429 and 503) (default {{default}}); "
        f"run.json records them as a sorted list.",
    )
    retry_after_cap: float = option(
        group=RETRIES,
        unit="s",
        default=60.0,
        at_least=0,
        help="Longest Retry-After honoured, in seconds (default {default}).",
    )
    request_timeout: float = option(
        group=TARGET,
        unit="s",
        default=120.0,
        above=0,
        help="Seconds before an attempt is abandoned (default {default}).",
    )
    connect_timeout: float = option(
        group=TARGET,
        unit="s",
        default=10.0,
        above=0,
        key=None,
        help="Seconds to wait for a connection (default {default}).",
    )
    audio_dir: Parsed = option(group=OUTPUT, default="", help="Where audio is written (default RUN_DIR/audio).")
    audio_keep: int = option(
        group=OUTPUT,
        unit="count",
        default=4,
        at_least=0,
        help="Audio files kept per text, overwritten in turn so disk use stays bounded "
        "(default {default}; 0: keep all).",
    )
    on_audio_error: str = option(
        group=OUTPUT,
        default="continue",
        choices=("continue", "stop"),
        key=None,
        help="When audio cannot be written (disk full, no permission): go on without writing, or stop "
        "(default {default}).",
    )
    run_dir: Parsed = option(group=OUTPUT, default="", key=None, help="Run directory (default runs/<UTC timestamp>).")
    junit: Parsed = option(
        group=OUTPUT,
        default="",
        key=None,
        help="Once the run ends, judge it as tts-knee report does and write its SLO verdicts as JUnit XML to "
        "this file, and append the verdict to $GITHUB_STEP_SUMMARY where that is set (default: neither).",
    )
    collector: tuple[str, ...] = option(
        group=TELEMETRY, default=(), key="collectors", help="Collector URL (repeatable; default none)."
    )
    collector_token: str | None = option(
        group=TELEMETRY,
        default="",
        key=None,
        env=COLLECTOR_TOKEN_ENV,
        secret=True,
        help=f"Bearer token for the collectors (default: ${COLLECTOR_TOKEN_ENV}, as the collector's --token).",
    )
    metrics_port: int = option(
        group=TELEMETRY,
        default=0,
        key=None,
        web_ui=False,
        help="Serve the run's live figures as Prometheus text at /metrics on this port, from the master or "
        "the local runner (default: off; see the manual's live metrics page).",
    )
    metrics_host: str = option(
        group=TELEMETRY,
        default="127.0.0.1",
        key=None,
        web_ui=False,
        help="The address --metrics-port listens on (default {default}: this host only; 0.0.0.0 for every interface).",
    )
    require_collectors: bool = option(
        group=TELEMETRY,
        default=False,
        key=None,
        help="End the run if a collector is unreachable at the start (default off).",
    )
    skip_preflight: bool = option(
        group=TARGET,
        default=False,
        key=None,
        help="Do not send the one warm-up request that checks the target before the run, nor the health probe "
        "after it (default off).",
    )
    health_path: str = option(
        group=TARGET,
        default="",
        empty_is_null=True,
        help="After the run, GET this path of the target (e.g. /health; a 2xx is healthy) instead of sending the "
        "warm-up request once more (default: the warm-up request).",
    )
    # The SLO and the step plan: each step judged as it ends, the plan decided from the verdicts.
    slo: Parsed = option(
        group=DECISIONS,
        default="",
        help="Service-level objective each step is judged against as it ends, e.g. "
        "p95_ms<=1200,error_rate<=0.01 (default: none).",
    )
    refine: bool = option(
        group=DECISIONS,
        default=False,
        help="After the grid, bisect between the largest passing and the smallest failing concurrency "
        "until they are adjacent, or rate until --refine-to (needs --slo; default off).",
    )
    stop_past_knee: bool = option(
        group=DECISIONS,
        default=False,
        help="Skip the rest of the grid once a step fails the SLO (the knee rule without --slo) and the "
        "next step fails too (default off).",
    )
    # Capacity and cost (analysis.capacity): read at the recommendation after the run.
    cost_per_hour: Parsed = option(
        group=CAPACITY,
        unit="per h",
        default="",
        help="A replica's price per hour, in any currency: the report adds the cost per million characters and "
        "per hour of audio at the recommendation (default: none).",
    )
    plan_for: Parsed = option(
        group=CAPACITY,
        default="",
        help="A demand to plan replicas for: N concurrent requests or sessions (500), or a rate (20/s); the "
        "report adds the replicas it needs at the recommendation (default: none).",
    )
    headroom: Parsed = option(
        group=CAPACITY,
        default="20%",
        help="With --plan-for: the share of a replica's measured capacity left unplanned, 0.2 or 20% "
        "(default {default}).",
    )
    text_reuse: str = option(
        group=PLAN,
        default="same",
        choices=TEXT_REUSE,
        help="same: the corpus's texts again at every step (steps compare on equal work); unique: every request a "
        'text of its own, its number put first ("17, Hello there."), so a server that caches answers or '
        "prompt prefixes is measured on new text (default {default}).",
    )
    repeat: int = option(
        group=PLAN,
        unit="count",
        default=1,
        above=0,
        help="Run the grid of --steps (or --rates) this many times (default {default}).",
    )
    # Rates against an SLO: how close --refine brings the passing and the failing rate.
    refine_to: Parsed = option(
        group=DECISIONS,
        default=DEFAULT_REFINE_TO,
        only_with=("rates",),
        help="Open loop: --refine bisects until the passing and the failing rate are this close, a share of "
        "the rate (5%) or requests per second (0.5) (default {default}).",
    )
    # The run's end: what is in flight when it stops is waited for, then recorded as cut.
    drain_time: float = option(
        group=PLAN,
        unit="s",
        default=-1.0,
        help=f"When the run stops, seconds to wait for the requests in flight; those still running then are "
        f"recorded as failed attempts with error {CUT_BY_RUN_END} (default: the request timeout, at most "
        f"{DRAIN_DEFAULT_MAX_S:g} s; at most {DRAIN_MAX_S:g} s).",
    )
    # The server's own metrics, scraped by the master (for servers with no collector beside them).
    server_metrics: tuple[str, ...] = option(
        group=TELEMETRY,
        default=(),
        help="The TTS server's Prometheus endpoint (e.g. http://host:8000/metrics), scraped by the master "
        "into resources.jsonl each second (repeatable; default none).",
    )
    # What a scraped series means, for a server whose names tts-knee does not know.
    server_role: tuple[str, ...] = option(
        group=TELEMETRY,
        default=(),
        key="server_roles",
        help="ROLE=SERIES: read the scraped series (a metric family) as the server's ROLE, one of "
        "queue_depth, running, batch_size, kv_cache_usage (repeatable; default: the names tts-knee knows).",
    )
    # Which label keeps a pipeline's stages apart in the server's series.
    server_stage_label: str | None = option(
        group=TELEMETRY,
        default="",
        help="NAME: the label that tells the server's stages apart in its series, each stage's queue and compute "
        "read on its own and the verdict naming the stage that broke (default: Triton's model, vLLM-Omni's stage); "
        "one that no series of --server-metrics or the collectors carries stops the run before it starts.",
    )
    # The soak: one level held for long, its drift reported (analysis.soak).
    soak: Parsed = option(
        group=PLAN,
        unit="s",
        default="",
        help="Hold one level this long and report drift (latency, throughput, server RSS, GPU memory, the "
        "load generator's RSS per window): after the sweep at its recommended level, or on its own "
        "with one --steps or --rates level. Locust's duration format: 300s, 20m, 1h; run.json records "
        "seconds (default: no soak).",
    )
    # The spike after the sweep (locustfiles.spike, analysis.spike).
    spike: Parsed = option(
        group=PLAN,
        default="",
        help="FACTORxSECONDS, e.g. 3x30: after the sweep (and a soak), hold the recommended concurrency (or "
        "--spike-at) for --step-time, then FACTOR times as many users for SECONDS, then the level again for "
        "twice SECONDS; the report says how the server took it (sheds, queues, fails, crashed, absorbs) and "
        "how long it took to recover (default: no spike).",
    )
    spike_at: int | None = option(
        group=PLAN,
        unit="users",
        default=0,
        help="The concurrency the spike starts from and returns to (default: the sweep's recommendation).",
    )
    # The hostile-text probe after the sweep (locustfiles.probe, analysis.probe).
    probe_texts: Parsed = option(
        group=PLAN,
        default="",
        empty_is_null=True,
        help="After the sweep (and a soak), send a few texts of each class users send and a server must guard "
        "against, at concurrency 1 and at the recommended concurrency, and report per class what the server "
        "did: all, or some of empty, whitespace, one-char, long, emoji, mixed-script, numbers, ssml, "
        "invalid-utf8 (HTTP JSON bodies only); left out of the sweep's figures (default: no probe).",
    )
    # Voices: the request mix (voice, language, reference audio) and the sweep over distinct voices.
    tts_form: str = option(
        group=VOICES,
        default="",
        help="Send each request as multipart/form-data instead of JSON, its fields as form fields and the "
        "reference clip as a file part of this name, e.g. speaker_wav (default: JSON).",
    )
    voices: Parsed = option(
        group=VOICES,
        default="",
        help="Voices given to requests whose corpus entry names none: comma-separated names, or @FILE (.txt: one "
        "name per line; .jsonl: voice, ref_audio, ref_text per line) (default: none); run.json records the "
        "names.",
    )
    voice_mix: str = option(
        group=VOICES,
        default="round-robin",
        help="How requests draw from --voices: round-robin, uniform or zipf:S (weight 1/k^S for the k-th voice) "
        "(default {default}).",
    )
    voice_seed: int = option(
        group=VOICES,
        default=-1,
        only_with=("voices",),
        help="Seed of the uniform and zipf voice draws, recorded in run.json (default: a random one).",
    )
    voice_steps: Parsed = option(
        group=VOICES,
        unit="count",
        default="",
        help="A sweep over distinct voices instead of concurrency: at the one concurrency of --steps (or the one rate "
        "of --rates), each step draws from the first N voices of --voices, e.g. 1,4,8,16,32 (default: none).",
    )
    voice_upload: bool = option(
        group=VOICES,
        default=False,
        help="Register each voice's reference clip once before the run (POST /v1/audio/voices, as vLLM-Omni takes "
        "it), send requests by voice name, and delete what was registered at the end (default off).",
    )
    server_stats: tuple[str, ...] = option(
        group=TELEMETRY,
        default=(),
        help="A JSON endpoint of the TTS server (its cache figures, say) polled by the master each second, its "
        "numbers into resources.jsonl as series (names ending _total as per-second rates) (repeatable; "
        "default none).",
    )
    # Listening: an ASR judge of what the audio says (audio.asr), and the signal checks' level.
    asr_model: str = option(
        group=LISTENING,
        default="",
        empty_is_null=True,
        help="Judge the speech with faster-whisper (pip install 'tts-knee[asr]'): a model directory, or a model name "
        "faster-whisper fetches where the machine has a network (base, small, ...). It hears the words (each "
        "step's word error rate against the text sent), the voice (speaker similarity) and the sound (DNSMOS), "
        "each with its knee; the words alone where the listening models are not installed, and the run says so "
        "(default: not judged).",
    )
    asr_sample: int = option(
        group=LISTENING,
        unit="count",
        default=24,
        above=0,
        only_with=("asr_model", "asr_keep"),
        help="Utterances judged per step, the same texts at every step, spread over the corpus (default {default}).",
    )
    asr_language: str = option(
        group=LISTENING,
        default="",
        empty_is_null=True,
        help="Language the judge listens for (en, zh ...) (default: the corpus entry's, else --tts-language, else "
        "detected).",
    )
    asr_metric: str = option(
        group=LISTENING,
        default="",
        choices=("", "wer", "cer"),
        empty_is_null=True,
        help="wer (words) or cer (characters) (default: cer for zh, ja, ko and other languages written without "
        "spaces, else wer).",
    )
    asr_listen: bool = option(
        group=LISTENING,
        default=False,
        only_with=("asr_model",),
        help="Hear each judged clip's voice and sound, and stop the run where their models are not installed: "
        "speaker similarity to the same text at the lowest step (and to --reference-voice or the voice's "
        "ref_audio) and predicted naturalness (DNSMOS), with their knees (default: heard with --asr-model "
        "wherever the models are installed).",
    )
    asr_words_only: bool = option(
        group=LISTENING,
        default=False,
        only_with=("asr_model",),
        help="Judge the words alone: no speaker similarity, no naturalness (default off).",
    )
    asr_keep: bool = option(
        group=LISTENING,
        default=False,
        empty_is_null=True,
        help="Keep the clips the judge would hear (speech/, a line each in speech.jsonl) without judging them "
        "during the run: tts-knee judge RUN_DIR judges them afterwards, on this machine or another (default off).",
    )
    asr_device: str = option(
        group=LISTENING,
        default="cpu",
        choices=("cpu", "cuda", "auto"),
        only_with=("asr_model",),
        help="Where the judge's recogniser runs: cpu, cuda (a GPU; CTranslate2 built with CUDA) or auto (cuda "
        "where there is one) (default {default}).",
    )
    reference_voice: str = option(
        group=LISTENING,
        default="",
        empty_is_null=True,
        help="An audio file of the voice the server should speak in: each judged clip's similarity to it "
        "(similarity_ref) where its voice has no ref_audio of its own (default none).",
    )
    asr_threads: int = option(
        group=LISTENING,
        unit="count",
        default=1,
        above=0,
        only_with=("asr_model",),
        help="CPU threads of the judge: one process beside the master (or the local runner) (default {default}).",
    )

    @classmethod
    def given(cls, parsed: object) -> RunOptions:
        """The options as Locust parsed them (the command line, a ``.conf`` file or the web UI), each
        checked against its declaration (:meth:`Option.checked`); a ValueError names the first that
        is not as declared."""
        checked: dict[str, Any] = {
            declared.name: declared.checked(getattr(parsed, declared.name, None))
            for declared in OPTIONS
            if declared.flag
        }
        return cls(**checked)


def _named(field: dataclasses.Field[Any]) -> Option[Any]:
    """A field's declaration, named as the field (and recorded under its name unless it says otherwise)."""
    declared: Option[Any] = field.metadata[_DECLARED]
    return dataclasses.replace(declared, name=field.name, key=field.name if declared.key == "" else declared.key)


#: Every declaration, in order, named as its field.
OPTIONS: tuple[Option[Any], ...] = tuple(_named(field) for field in dataclasses.fields(RunOptions))
#: The options run.json records, by their key there, in its order.
RECORDED: dict[str, Option[Any]] = {declared.key: declared for declared in OPTIONS if declared.key is not None}

#: What a run that does not record an option had, by its run.json key: the flag's default.
DEFAULTS = {key: declared.default for key, declared in RECORDED.items()}

#: ``run.json``'s ``options``: every recorded option, by its key.
RUN_OPTIONS: tuple[Field, ...] = tuple(
    Field(key, declared.unit, True, declared.help_text()) for key, declared in RECORDED.items()
)


def reference() -> str:
    """The manual's option reference (``docs/options.md``, which ``make docs`` writes), made from
    :data:`OPTIONS`."""
    out = [
        "# Options of `tts-knee run`",
        "",
        "Generated from `runformat/options.py`, where each option is declared once: "
        "`tts-knee run --help` and Locust's web UI form are made from the same declarations. "
        "Every Locust option works too (`-H`, `--headless`, `--master`, `--worker` …); see "
        "`tts-knee run --help`. The run.json column names the option's key in `run.json`'s "
        "`options` (— where the run does not record it: a secret, a path or a reaction).",
        "",
    ]
    for group in GROUPS:
        out += [
            f"## {group.title[0].upper()}{group.title[1:]}",
            "",
            group.about,
            "",
            "| option | default | run.json | what it does |",
            "| --- | --- | --- | --- |",
        ]
        for declared in OPTIONS:
            if declared.group is not group:
                continue
            default = declared.default
            shown = (
                "off"
                if declared.kind is bool and not default
                else "none"
                if default in ("", (), None)
                else f"{default:g}"
                if isinstance(default, float)
                else str(default)
            )
            unit = f" {declared.unit}" if declared.unit and shown not in ("off", "none") else ""
            text = declared.help_text().replace("|", "\\|").replace("\n", " ")
            env = f" Also `{declared.env}` in the environment." if declared.env else ""
            out.append(
                f"| `{declared.flag}` | {shown}{unit} | {f'`{declared.key}`' if declared.key else '—'} | {text}{env} |"
            )
        out.append("")
    return "\n".join(out)
