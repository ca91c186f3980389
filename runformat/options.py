"""The run's options: each one's flag, its key in ``run.json``'s ``options``, unit, default and
help, declared once.

The load generator's parser (``locustfiles.settings.add_arguments``) is built from
:data:`OPTIONS` and the reader takes its defaults from :data:`DEFAULTS`, so a default cannot
differ between the two. An option's ``default`` is what the flag holds when it is not given;
where that is a stand-in for a value worked out from the others (an empty ``--steps``, a
negative ``--settle-time``) the help says what it becomes, and ``run.json`` records the value
worked out. ``key`` None: the run does not record the option (a secret, a path or a reaction
that says nothing of what was measured); ``flag`` None: a figure only ``run.json`` records.

To add an option: one :class:`Option` here, in its :class:`Group` (``{default}`` in its help
becomes the default; a number's bounds, ``at_least`` or ``above``, make it checked by its
declaration), then a field of its name in ``locustfiles.settings.Settings``
(``docs/adding.md``); the manual's option reference (``docs/options.md``) is made from these
declarations (:func:`reference`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

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


_TARGET = Group("target and request", "What the requests go to and what they ask for.")
_STREAMING = Group(
    "streaming and sessions", "Streamed answers, the playback model, and sessions that take the text in pieces."
)
_PLAN = Group("load plan", "The steps: concurrency or offered rates, how long each lasts, the run's end.")
_RETRIES = Group("retries", "Which failures are retried, and how long to back off.")
_SLO = Group(
    "SLO and plan decisions",
    "An objective each step is judged against as it ends, and what the plan does with the verdicts.",
)
_CAPACITY = Group(
    "capacity and cost",
    "The recommendation in replicas and money: a replica's price and the "
    "demand to plan for (the report takes them too).",
)
_VOICES = Group("voices", "The voices requests ask for, and sweeps over distinct voices.")
_BARGE_IN = Group("barge-in", "Listeners who interrupt, and how the utterance is cancelled.")
_LISTENING = Group("listening", "The ASR judge: whether the speech is still right under load.")
_TELEMETRY = Group("telemetry", "The collectors beside the server and the server's own metrics.")
_OUTPUT = Group("output", "The run directory and the audio written.")
GROUPS: tuple[Group, ...] = (
    _TARGET,
    _PLAN,
    _STREAMING,
    _RETRIES,
    _SLO,
    _CAPACITY,
    _VOICES,
    _BARGE_IN,
    _LISTENING,
    _TELEMETRY,
    _OUTPUT,
)


class Option(NamedTuple):
    flag: str | None  # the command-line option; None: a figure only run.json records
    key: str | None  # its key in run.json's options; None: not recorded
    unit: str
    default: object  # the flag's value when it is not given
    help: str  # "{default}" is replaced by the default as the help shows it
    kind: type | str = str  # str, int, float, bool (a switch) or "list" (repeatable)
    choices: tuple[Any, ...] | None = None
    secret: bool = False  # kept out of run.json and masked in the web UI
    env: str | None = None  # an environment variable that sets it when the flag is not given
    group: Group | None = None  # where --help and the manual list it; None: a figure only run.json records
    web_ui: bool = True  # in Locust's web UI form; False: read once at start, so the form could not change it
    # A number's bounds: an option that declares one is checked by its declaration (:meth:`checked`)
    # and is the run's setting of its name as it is (locustfiles.settings); the others are worked
    # out by their group's validator there.
    at_least: float | None = None  # the least value it may take
    above: float | None = None  # it must be greater than this

    @property
    def dest(self) -> str:
        """Its name on Locust's parsed options and in the run's settings: ``--step-time`` is ``step_time``."""
        return (self.flag or "").lstrip("-").replace("-", "_")

    def help_text(self) -> str:
        shown = self.default
        if isinstance(shown, float):
            shown = f"{shown:g}"
        return self.help.replace("{default}", str(shown))

    def checked(self, value: object) -> object:
        """``value`` as the option's kind (int or float), finite and within its bounds; a
        ValueError says in one sentence what the option expects."""
        try:
            number = self.kind(value)  # type: ignore[operator]  # int or float, the options with bounds
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


_O = Option
OPTIONS: tuple[Option, ...] = (
    _O(
        "--tts-api",
        "tts_api",
        "",
        "openai",
        "Request shape: OpenAI /v1/audio/speech, piper POST /synthesize, or a JSON template (default {default}).",
        choices=tuple(sorted(APIS)),
        group=_TARGET,
    ),
    _O(
        "--tts-path",
        "tts_path",
        "",
        "",
        "Path of the TTS endpoint (default: the API's usual path); run.json records the path used.",
        group=_TARGET,
    ),
    _O("--tts-model", "tts_model", "", "tts-1", "`model` field for the openai API (default {default}).", group=_TARGET),
    _O(
        "--tts-voice",
        "tts_voice",
        "",
        "alloy",
        "`voice` field for the openai API, empty to omit it (default {default}); over ws and wyoming the "
        "voice sent where the protocol has one (default: none, the server's own).",
        group=_TARGET,
    ),
    _O(
        "--tts-format",
        "tts_format",
        "",
        "wav",
        f"Audio format asked for and checked: {', '.join(FORMATS)} (default {{default}}).",
        group=_TARGET,
    ),
    _O(
        "--tts-stream",
        "tts_stream",
        "",
        False,
        "Ask for a streamed response (openai: stream=true; default off).",
        bool,
        group=_STREAMING,
    ),
    _O(
        "--tts-stream-format",
        "tts_stream_format",
        "",
        "",
        "openai stream_format: sse (server-sent events) or audio; implies --tts-stream (default: none).",
        group=_STREAMING,
    ),
    _O(
        "--playback-buffer-ms",
        "playback_buffer_ms",
        "ms",
        0.0,
        "Audio (ms) the simulated player buffers before it starts playing a stream (default {default}).",
        float,
        group=_STREAMING,
        at_least=0,
    ),
    _O(
        "--ttfa-floor-ms",
        "ttfa_floor_ms",
        "ms",
        300.0,
        "A rise in time to first audio counts toward the knee only above this, in ms (default {default}).",
        float,
        group=_STREAMING,
        at_least=0,
    ),
    # Text paced as a language model writes it, for protocols that take text in pieces.
    _O(
        "--text-rate",
        "text_rate",
        "tokens/s",
        0.0,
        "Send the text as a language model writes it, this many tokens per second (a token is a word "
        "with its trailing space), where the protocol takes text in pieces (default 0: the whole text at "
        "once).",
        float,
        group=_STREAMING,
        at_least=0,
    ),
    _O(
        "--text-jitter",
        "text_jitter",
        "",
        0.0,
        "With --text-rate: each gap between tokens is 1/rate times 1 +/- up to this fraction, drawn "
        "uniformly (default {default}: even gaps).",
        float,
        group=_STREAMING,
    ),
    _O(
        "--flush",
        "flush",
        "",
        "sentence",
        "With --text-rate: send the protocol's flush after each sentence, or only at the end of the text "
        "(default {default}).",
        choices=FLUSH_MODES,
        group=_STREAMING,
    ),
    # Sessions: protocols that keep a connection open and take the text in pieces (voice agents).
    _O(
        "--tts-protocol",
        "tts_protocol",
        "",
        "http",
        "What carries an utterance: an HTTP request (-H http://...), a WebSocket session in a preset's "
        "dialect (-H http://..., see --tts-preset), Wyoming over TCP (-H tcp://host:port) or a gRPC call "
        "(-H grpc://host:port, see --tts-preset) (default {default}).",
        choices=tuple(PROTOCOLS),
        group=_STREAMING,
    ),
    _O(
        "--tts-preset",
        "tts_preset",
        "",
        "",
        "ws: the WebSocket dialect, a preset tts-knee ships (vllm-omni, elevenlabs, elevenlabs-multi, deepgram, "
        "cartesia) or a .toml file of your own; grpc: riva (Riva's Synthesize, SynthesizeOnline with "
        "--tts-stream), triton (a Triton model) or a .json preset file, whose voice, model and language "
        "--tts-voice, --tts-model and --tts-language left at their defaults take (default: none; ws and grpc "
        "need one).",
        group=_STREAMING,
    ),
    _O(
        "--turns",
        "turns",
        "count",
        0,
        "Utterances per conversation: a user closes its session after this many and opens a new one "
        "(default 0: one session for as long as the user runs; a preset that does not reuse its connection "
        "opens one per utterance anyway).",
        int,
        group=_STREAMING,
    ),
    _O(
        "--think-time",
        "think_time",
        "s",
        0.0,
        "Seconds a user waits between the turns of a conversation (default {default}).",
        float,
        group=_STREAMING,
    ),
    _O(
        "--contexts",
        "contexts",
        "count",
        1,
        "Utterances each user keeps in flight on its one session, where the preset has contexts (cartesia, "
        "elevenlabs-multi) (default {default}).",
        int,
        group=_STREAMING,
    ),
    # Barge-in: the listener interrupts, and the utterance is cancelled the way its protocol can.
    _O(
        "--barge-in",
        "barge_in",
        "share",
        0.0,
        "Share of utterances the listener interrupts (barge-in), 0 to 1; each is cancelled (see --cancel-by) "
        "and recorded as cancelled, not failed (default 0: none).",
        float,
        group=_BARGE_IN,
    ),
    _O(
        "--barge-in-after",
        "barge_in_after",
        "ms",
        "",
        "When the listener interrupts, in ms after the first audio heard: MS, or LO-HI drawn uniformly "
        f"(default: drawn uniformly over the utterance's expected length, its characters at "
        f"{SPEAKING_CHARS_PER_S:g} a second).",
        group=_BARGE_IN,
    ),
    _O(
        "--cancel-by",
        "cancel_by",
        "",
        "",
        "How an interruption cancels: the preset's cancel message, or closing the connection (HTTP: the "
        "stream; gRPC: the call's stream, RST_STREAM CANCEL) (default: the preset's cancel message where it has "
        "one, else close).",
        choices=("",) + CANCEL_MODES,
        group=_BARGE_IN,
    ),
    _O(
        "--barge-in-seed",
        "barge_in_seed",
        "",
        -1,
        "Seed of which utterances are interrupted and when, recorded in run.json (default: a random one).",
        int,
        group=_BARGE_IN,
    ),
    # Reaching a real service: TLS that verifies, and credentials that never reach the run directory
    _O(
        "--header",
        "headers",
        "",
        [],
        "An HTTP header sent with every request and WebSocket upgrade, 'NAME: VALUE' (repeatable); "
        "${VAR} in the value is read from the environment. run.json records the names, never the "
        "values (default: none).",
        "list",
        secret=True,
        group=_TARGET,
    ),
    _O(
        "--grpc-metadata",
        "grpc_metadata",
        "",
        [],
        "gRPC: metadata sent with every call, KEY=VALUE (repeatable); ${VAR} in the value is read from the "
        "environment. run.json records the keys, never the values (default: none).",
        "list",
        secret=True,
        group=_TARGET,
    ),
    _O(
        "--tls-ca",
        "tls_ca",
        "",
        "",
        "CA certificates (a PEM file) that https://, wss:// and grpcs:// targets are verified against, "
        "for a private CA (default: the system's).",
        group=_TARGET,
    ),
    _O(
        "--tls-client-cert",
        "tls_client_cert",
        "",
        "",
        "A client certificate (PEM, its chain after it) for a TLS target that asks for one (mutual TLS); its "
        "key in the same file or in --tls-client-key. run.json records the certificate's path (default: none).",
        group=_TARGET,
    ),
    _O(
        "--tls-client-key",
        None,
        "",
        "",
        "The private key of --tls-client-cert, when it is a file of its own (default: in the certificate's file).",
        group=_TARGET,
    ),
    _O(
        "--tls-insecure",
        "tls_insecure",
        "",
        False,
        "Do not verify the target's TLS certificate; the report says so (default off).",
        bool,
        group=_TARGET,
    ),
    _O(
        "--tts-template",
        None,
        "",
        "",
        'JSON payload for --tts-api json with "{text}" where the text goes, or @FILE (default: none).',
        group=_TARGET,
    ),
    _O(
        "--tts-sample-rate",
        None,
        "Hz",
        24000,
        "Sample rate of raw PCM responses and of SSE audio events, in Hz (default {default}).",
        int,
        group=_TARGET,
        above=0,
    ),
    # gRPC: NVIDIA Riva's speech synthesis and Triton models (-H grpc://host:port, --tts-preset)
    _O(
        "--tts-language",
        "tts_language",
        "",
        "",
        "riva: the request's language_code (default: the preset's, en-US).",
        group=_TARGET,
    ),
    _O(
        "--texts",
        "texts",
        "",
        "",
        "Corpus: .txt (one text per line) or .jsonl (text, id, tier) (default: the bundled "
        "configs/texts/default.jsonl); run.json records the file read.",
        group=_TARGET,
    ),
    _O(None, "texts_count", "count", None, "Texts in the corpus."),
    _O(
        "--steps",
        "steps",
        "users",
        "",
        f"Concurrency levels, in order (closed loop; default {DEFAULT_STEPS}).",
        group=_PLAN,
    ),
    # Open loop: offered arrivals per second instead of a number of users.
    _O(
        "--rates",
        "rates",
        "req/s",
        "",
        "Open loop instead of --steps: offered requests per second, in order, for the whole run (split "
        "across workers), e.g. 1,2,4,8; each arrival is sent on its schedule (default: none, closed loop).",
        group=_PLAN,
    ),
    _O(
        "--arrival",
        "arrival",
        "",
        "poisson",
        "Open loop: gaps between arrivals, exponential (poisson) or equal (constant) (default {default}; "
        "run.json: null in a closed-loop run).",
        choices=("poisson", "constant"),
        group=_PLAN,
    ),
    _O(
        "--arrival-seed",
        "arrival_seed",
        "",
        -1,
        "Open loop: seed of the Poisson arrivals, recorded in run.json (default: a random one).",
        int,
        group=_PLAN,
    ),
    _O(
        "--max-inflight",
        "max_inflight",
        "count",
        1000,
        "Open loop: an arrival that finds this many requests in flight (per worker) is not sent and "
        "counted as dropped (default {default}).",
        int,
        group=_PLAN,
    ),
    _O(
        "--trace",
        "trace",
        "",
        "",
        "Open loop: replay this log of arrivals (JSONL or CSV: offset_s and text, text_len or text_id; voice, "
        "language, conversation, turn) instead of --rates, each step at one --trace-speed (default: none).",
        group=_PLAN,
    ),
    _O(
        "--trace-speed",
        "trace_speed",
        "x",
        "1",
        "With --trace: the replay's speeds, in order, e.g. 0.5,1,2,4 (2: twice the log's pace); each step "
        "replays the trace from its start for --step-time or the whole trace (default {default}).",
        group=_PLAN,
    ),
    _O(
        "--step-time",
        "step_time",
        "s",
        0.0,
        f"Seconds per step (default {DEFAULT_STEP_TIME_S:g}; a cap with --step-requests, "
        f"default {STEP_REQUESTS_CAP_S:g} there).",
        float,
        group=_PLAN,
    ),
    _O(
        "--step-requests",
        "step_requests",
        "count",
        0,
        "End each step after this many settled requests (default 0: by time).",
        int,
        group=_PLAN,
    ),
    _O(
        "--settle-time",
        "settle_time",
        "s",
        -1.0,
        f"Seconds at the start of each step whose records are marked settled=false (default "
        f"{SETTLE_FRACTION:.0%} of the step, at most {SETTLE_MAX_S:g} s; 0 with --step-requests). A step that "
        "adds more users than start in this time (100 a second), or stops users whose requests are still "
        "running, settles longer and runs that much longer.",
        float,
        group=_PLAN,
    ),
    _O(
        "--split-max-chars",
        "split_max_chars",
        "chars",
        0,
        "Split longer texts at sentence ends into segments of at most this many characters, one request "
        "each, joined into one WAV on the client (default 0: off).",
        int,
        group=_TARGET,
        at_least=0,
    ),
    _O(
        "--retry-max-attempts",
        "retry_max_attempts",
        "count",
        3,
        "Attempts per request, the first included (default {default}).",
        int,
        group=_RETRIES,
    ),
    _O(
        "--retry-base-ms",
        "retry_base_ms",
        "ms",
        200.0,
        "First backoff in ms; doubles per attempt (default {default}).",
        float,
        group=_RETRIES,
    ),
    _O(
        "--retry-max-ms",
        "retry_max_ms",
        "ms",
        2000.0,
        "Longest backoff in ms (default {default}).",
        float,
        group=_RETRIES,
    ),
    _O(
        "--retry-on",
        "retry_on",
        "",
        "429,500,502,503,504",
        f"Statuses to retry, comma-separated; add `{CONNECTION_ERROR}` for connection errors, gRPC code "
        f"names for gRPC (RESOURCE_EXHAUSTED and UNAVAILABLE count as 429 and 503) (default {{default}}); "
        f"run.json records them as a sorted list.",
        group=_RETRIES,
    ),
    _O(
        "--retry-after-cap",
        "retry_after_cap",
        "s",
        60.0,
        "Longest Retry-After honoured, in seconds (default {default}).",
        float,
        group=_RETRIES,
    ),
    _O(
        "--request-timeout",
        "request_timeout",
        "s",
        120.0,
        "Seconds before an attempt is abandoned (default {default}).",
        float,
        group=_TARGET,
        above=0,
    ),
    _O(
        "--connect-timeout",
        None,
        "s",
        10.0,
        "Seconds to wait for a connection (default {default}).",
        float,
        group=_TARGET,
        above=0,
    ),
    _O("--audio-dir", "audio_dir", "", "", "Where audio is written (default RUN_DIR/audio).", group=_OUTPUT),
    _O(
        "--audio-keep",
        "audio_keep",
        "count",
        4,
        "Audio files kept per text, overwritten in turn so disk use stays bounded (default {default}; 0: keep all).",
        int,
        group=_OUTPUT,
        at_least=0,
    ),
    _O(
        "--on-audio-error",
        None,
        "",
        "continue",
        "When audio cannot be written (disk full, no permission): go on without writing, or stop (default {default}).",
        choices=("continue", "stop"),
        group=_OUTPUT,
    ),
    _O("--run-dir", None, "", "", "Run directory (default runs/<UTC timestamp>).", group=_OUTPUT),
    _O(
        "--junit",
        None,
        "",
        "",
        "Once the run ends, judge it as tts-knee report does and write its SLO verdicts as JUnit XML to "
        "this file, and append the verdict to $GITHUB_STEP_SUMMARY where that is set (default: neither).",
        group=_OUTPUT,
    ),
    _O("--collector", "collectors", "", [], "Collector URL (repeatable; default none).", "list", group=_TELEMETRY),
    _O(
        "--collector-token",
        None,
        "",
        "",
        f"Bearer token for the collectors (default: ${COLLECTOR_TOKEN_ENV}, as the collector's --token).",
        secret=True,
        env=COLLECTOR_TOKEN_ENV,
        group=_TELEMETRY,
    ),
    _O(
        "--metrics-port",
        None,
        "",
        0,
        "Serve the run's live figures as Prometheus text at /metrics on this port, from the master or "
        "the local runner (default: off; see the manual's live metrics page).",
        int,
        group=_TELEMETRY,
        web_ui=False,
    ),
    _O(
        "--metrics-host",
        None,
        "",
        "127.0.0.1",
        "The address --metrics-port listens on (default {default}: this host only; 0.0.0.0 for every interface).",
        group=_TELEMETRY,
        web_ui=False,
    ),
    _O(
        "--require-collectors",
        None,
        "",
        False,
        "End the run if a collector is unreachable at the start (default off).",
        bool,
        group=_TELEMETRY,
    ),
    _O(
        "--skip-preflight",
        None,
        "",
        False,
        "Do not send the one warm-up request that checks the target before the run, nor the health probe "
        "after it (default off).",
        bool,
        group=_TARGET,
    ),
    _O(
        "--health-path",
        "health_path",
        "",
        "",
        "After the run, GET this path of the target (e.g. /health; a 2xx is healthy) instead of sending the "
        "warm-up request once more (default: the warm-up request).",
        group=_TARGET,
    ),
    # The SLO and the step plan: each step judged as it ends, the plan decided from the verdicts.
    _O(
        "--slo",
        "slo",
        "",
        "",
        "Service-level objective each step is judged against as it ends, e.g. "
        "p95_ms<=1200,error_rate<=0.01 (default: none).",
        group=_SLO,
    ),
    _O(
        "--refine",
        "refine",
        "",
        False,
        "After the grid, bisect between the largest passing and the smallest failing concurrency "
        "until they are adjacent, or rate until --refine-to (needs --slo; default off).",
        bool,
        group=_SLO,
    ),
    _O(
        "--stop-past-knee",
        "stop_past_knee",
        "",
        False,
        "Skip the rest of the grid once a step fails the SLO (the knee rule without --slo) and the "
        "next step fails too (default off).",
        bool,
        group=_SLO,
    ),
    # Capacity and cost (analysis.capacity): read at the recommendation after the run.
    _O(
        "--cost-per-hour",
        "cost_per_hour",
        "per h",
        "",
        "A replica's price per hour, in any currency: the report adds the cost per million characters and "
        "per hour of audio at the recommendation (default: none).",
        group=_CAPACITY,
    ),
    _O(
        "--plan-for",
        "plan_for",
        "",
        "",
        "A demand to plan replicas for: N concurrent requests or sessions (500), or a rate (20/s); the "
        "report adds the replicas it needs at the recommendation (default: none).",
        group=_CAPACITY,
    ),
    _O(
        "--headroom",
        "headroom",
        "",
        "20%",
        "With --plan-for: the share of a replica's measured capacity left unplanned, 0.2 or 20% (default {default}).",
        group=_CAPACITY,
    ),
    _O(
        "--text-reuse",
        "text_reuse",
        "",
        "same",
        "same: the corpus's texts again at every step (steps compare on equal work); unique: every request a "
        'text of its own, its number put first ("17, Hello there."), so a server that caches answers or '
        "prompt prefixes is measured on new text (default {default}).",
        choices=TEXT_REUSE,
        group=_PLAN,
    ),
    _O(
        "--repeat",
        "repeat",
        "count",
        1,
        "Run the grid of --steps (or --rates) this many times (default {default}).",
        int,
        group=_PLAN,
        above=0,
    ),
    # Rates against an SLO: how close --refine brings the passing and the failing rate.
    _O(
        "--refine-to",
        "refine_to",
        "",
        DEFAULT_REFINE_TO,
        "Open loop: --refine bisects until the passing and the failing rate are this close, a share of "
        "the rate (5%) or requests per second (0.5) (default {default}).",
        group=_SLO,
    ),
    # The run's end: what is in flight when it stops is waited for, then recorded as cut.
    _O(
        "--drain-time",
        "drain_time",
        "s",
        -1.0,
        f"When the run stops, seconds to wait for the requests in flight; those still running then are "
        f"recorded as failed attempts with error {CUT_BY_RUN_END} (default: the request timeout, at most "
        f"{DRAIN_DEFAULT_MAX_S:g} s; at most {DRAIN_MAX_S:g} s).",
        float,
        group=_PLAN,
    ),
    # The server's own metrics, scraped by the master (for servers with no collector beside them).
    _O(
        "--server-metrics",
        "server_metrics",
        "",
        [],
        "The TTS server's Prometheus endpoint (e.g. http://host:8000/metrics), scraped by the master "
        "into resources.jsonl each second (repeatable; default none).",
        "list",
        group=_TELEMETRY,
    ),
    # What a scraped series means, for a server whose names tts-knee does not know.
    _O(
        "--server-role",
        "server_roles",
        "",
        [],
        "ROLE=SERIES: read the scraped series (a metric family) as the server's ROLE, one of "
        "queue_depth, running, batch_size, kv_cache_usage (repeatable; default: the names tts-knee knows).",
        "list",
        group=_TELEMETRY,
    ),
    # Which label keeps a pipeline's stages apart in the server's series.
    Option(
        flag="--server-stage-label",
        key="server_stage_label",
        unit="",
        default="",
        help="NAME: the label that tells the server's stages apart in its series, each stage's queue and compute "
        "read on its own and the verdict naming the stage that broke (default: Triton's model, vLLM-Omni's stage); "
        "one that no series of --server-metrics or the collectors carries stops the run before it starts.",
        group=_TELEMETRY,
    ),
    # The soak: one level held for long, its drift reported (analysis.soak).
    _O(
        "--soak",
        "soak",
        "s",
        "",
        "Hold one level this long and report drift (latency, throughput, server RSS, GPU memory, the "
        "load generator's RSS per window): after the sweep at its recommended level, or on its own "
        "with one --steps or --rates level. Locust's duration format: 300s, 20m, 1h; run.json records "
        "seconds (default: no soak).",
        group=_PLAN,
    ),
    # The spike after the sweep (locustfiles.spike, analysis.spike).
    _O(
        "--spike",
        "spike",
        "",
        "",
        "FACTORxSECONDS, e.g. 3x30: after the sweep (and a soak), hold the recommended concurrency (or "
        "--spike-at) for --step-time, then FACTOR times as many users for SECONDS, then the level again for "
        "twice SECONDS; the report says how the server took it (sheds, queues, fails, crashed, absorbs) and "
        "how long it took to recover (default: no spike).",
        group=_PLAN,
    ),
    _O(
        "--spike-at",
        "spike_at",
        "users",
        0,
        "The concurrency the spike starts from and returns to (default: the sweep's recommendation).",
        int,
        group=_PLAN,
    ),
    # The hostile-text probe after the sweep (locustfiles.probe, analysis.probe).
    _O(
        "--probe-texts",
        "probe_texts",
        "",
        "",
        "After the sweep (and a soak), send a few texts of each class users send and a server must guard "
        "against, at concurrency 1 and at the recommended concurrency, and report per class what the server "
        "did: all, or some of empty, whitespace, one-char, long, emoji, mixed-script, numbers, ssml, "
        "invalid-utf8 (HTTP JSON bodies only); left out of the sweep's figures (default: no probe).",
        group=_PLAN,
    ),
    # Voices: the request mix (voice, language, reference audio) and the sweep over distinct voices.
    _O(
        "--tts-form",
        "tts_form",
        "",
        "",
        "Send each request as multipart/form-data instead of JSON, its fields as form fields and the "
        "reference clip as a file part of this name, e.g. speaker_wav (default: JSON).",
        group=_VOICES,
    ),
    _O(
        "--voices",
        "voices",
        "",
        "",
        "Voices given to requests whose corpus entry names none: comma-separated names, or @FILE (.txt: one "
        "name per line; .jsonl: voice, ref_audio, ref_text per line) (default: none); run.json records the "
        "names.",
        group=_VOICES,
    ),
    _O(
        "--voice-mix",
        "voice_mix",
        "",
        "round-robin",
        "How requests draw from --voices: round-robin, uniform or zipf:S (weight 1/k^S for the k-th voice) "
        "(default {default}).",
        group=_VOICES,
    ),
    _O(
        "--voice-seed",
        "voice_seed",
        "",
        -1,
        "Seed of the uniform and zipf voice draws, recorded in run.json (default: a random one).",
        int,
        group=_VOICES,
    ),
    _O(
        "--voice-steps",
        "voice_steps",
        "count",
        "",
        "A sweep over distinct voices instead of concurrency: at the one concurrency of --steps (or the one rate "
        "of --rates), each step draws from the first N voices of --voices, e.g. 1,4,8,16,32 (default: none).",
        group=_VOICES,
    ),
    _O(
        "--voice-upload",
        "voice_upload",
        "",
        False,
        "Register each voice's reference clip once before the run (POST /v1/audio/voices, as vLLM-Omni takes "
        "it), send requests by voice name, and delete what was registered at the end (default off).",
        bool,
        group=_VOICES,
    ),
    _O(
        "--server-stats",
        "server_stats",
        "",
        [],
        "A JSON endpoint of the TTS server (its cache figures, say) polled by the master each second, its "
        "numbers into resources.jsonl as series (names ending _total as per-second rates) (repeatable; "
        "default none).",
        "list",
        group=_TELEMETRY,
    ),
    # Listening: an ASR judge of what the audio says (audio.asr), and the signal checks' level.
    _O(
        "--asr-model",
        "asr_model",
        "",
        "",
        "Judge the speech with faster-whisper (pip install 'tts-knee[asr]'): a model directory, or a model name "
        "faster-whisper fetches where the machine has a network (base, small, ...). It hears the words (each "
        "step's word error rate against the text sent), the voice (speaker similarity) and the sound (DNSMOS), "
        "each with its knee; the words alone where the listening models are not installed, and the run says so "
        "(default: not judged).",
        group=_LISTENING,
    ),
    _O(
        "--asr-sample",
        "asr_sample",
        "count",
        24,
        "Utterances judged per step, the same texts at every step, spread over the corpus (default {default}).",
        int,
        group=_LISTENING,
        above=0,
    ),
    _O(
        "--asr-language",
        "asr_language",
        "",
        "",
        "Language the judge listens for (en, zh ...) (default: the corpus entry's, else --tts-language, else "
        "detected).",
        group=_LISTENING,
    ),
    _O(
        "--asr-metric",
        "asr_metric",
        "",
        "",
        "wer (words) or cer (characters) (default: cer for zh, ja, ko and other languages written without "
        "spaces, else wer).",
        str,
        ("", "wer", "cer"),
        group=_LISTENING,
    ),
    _O(
        "--asr-listen",
        "asr_listen",
        "",
        False,
        "Hear each judged clip's voice and sound, and stop the run where their models are not installed: "
        "speaker similarity to the same text at the lowest step (and to --reference-voice or the voice's "
        "ref_audio) and predicted naturalness (DNSMOS), with their knees (default: heard with --asr-model "
        "wherever the models are installed).",
        bool,
        group=_LISTENING,
    ),
    _O(
        flag="--asr-words-only",
        key="asr_words_only",
        unit="",
        default=False,
        help="Judge the words alone: no speaker similarity, no naturalness (default off).",
        kind=bool,
        group=_LISTENING,
    ),
    _O(
        flag="--asr-keep",
        key="asr_keep",
        unit="",
        default=False,
        help="Keep the clips the judge would hear (speech/, a line each in speech.jsonl) without judging them "
        "during the run: tts-knee judge RUN_DIR judges them afterwards, on this machine or another (default off).",
        kind=bool,
        group=_LISTENING,
    ),
    _O(
        flag="--asr-device",
        key="asr_device",
        unit="",
        default="cpu",
        help="Where the judge's recogniser runs: cpu, cuda (a GPU; CTranslate2 built with CUDA) or auto (cuda "
        "where there is one) (default {default}).",
        choices=("cpu", "cuda", "auto"),
        group=_LISTENING,
    ),
    _O(
        "--reference-voice",
        "reference_voice",
        "",
        "",
        "An audio file of the voice the server should speak in: each judged clip's similarity to it "
        "(similarity_ref) where its voice has no ref_audio of its own (default none).",
        group=_LISTENING,
    ),
    _O(
        "--asr-threads",
        "asr_threads",
        "count",
        1,
        "CPU threads of the judge: one process beside the master (or the local runner) (default {default}).",
        int,
        group=_LISTENING,
        above=0,
    ),
)

#: What a run that does not record an option had, by its run.json key: the flag's default.
DEFAULTS = {o.key: o.default for o in OPTIONS if o.key is not None}

#: ``run.json``'s ``options``: every recorded option, by its key.
RUN_OPTIONS: tuple[Field, ...] = tuple(Field(o.key, o.unit, True, o.help_text()) for o in OPTIONS if o.key is not None)


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
        for o in OPTIONS:
            if o.group is not group:
                continue
            default = o.default
            shown = (
                "off"
                if o.kind is bool and not default
                else "none"
                if default in ("", [], None)
                else f"{default:g}"
                if isinstance(default, float)
                else str(default)
            )
            unit = f" {o.unit}" if o.unit and shown not in ("off", "none") else ""
            text = o.help_text().replace("|", "\\|").replace("\n", " ")
            env = f" Also `{o.env}` in the environment." if o.env else ""
            out.append(f"| `{o.flag}` | {shown}{unit} | {f'`{o.key}`' if o.key else '—'} | {text}{env} |")
        out.append("")
    return "\n".join(out)
