"""tts-knee's options: registered on Locust's parser from their one declaration
(:mod:`runformat.options`, so they work on the command line, in ``.conf`` files and in the web
UI) and validated into one :class:`Settings` object.

A bad value raises :class:`SettingsError` whose message names the option and what it expects.
"""

from __future__ import annotations

import json
import math
import random
import ssl
import time
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import urlsplit

from tts_knee.analysis import capacity as capacity_mod, slo as slo_mod
from tts_knee.audio import hearing
from tts_knee.runformat import options as run_options
from tts_knee.runformat.fields import Builder
from tts_knee.runformat.grpc_codes import CODES as GRPC_CODES
from tts_knee.runformat.metric_roles import LABEL_NAME, parse_roles
from tts_knee.runformat.options import (
    APIS,
    CANCEL_MODES,
    CONNECTION_ERROR,
    DEFAULT_REFINE_TO,
    DEFAULT_STEP_TIME_S,
    DEFAULT_STEPS,
    DEFAULTS,
    DRAIN_DEFAULT_MAX_S,
    DRAIN_MAX_S,
    FLUSH_MODES,
    FORMATS,
    PROTOCOLS,
    SETTLE_FRACTION,
    SETTLE_MAX_S,
    SOAK_MIN_S,
    STEP_REQUESTS_CAP_S,
    STREAM_FORMATS,
)

from . import probe as probe_mod, spike as spike_mod, tls
from .inputs import bodies, corpus, presets, trace as trace_mod, voices as voices_mod
from .retry import RetryPolicy
from .transports.base import NO_ASK, Ask


class SettingsError(ValueError):
    """An option has a value tts-knee cannot use; the message names the option."""


def add_arguments(parser) -> None:
    """Register tts-knee's options (:data:`runformat.options.OPTIONS`) on Locust's parser
    (``init_command_line_parser``): the command line, ``.conf`` files and the web UI; ``--help``
    lists them after Locust's, in their groups (:data:`runformat.options.GROUPS`)."""
    for group in run_options.GROUPS:
        container = parser.add_argument_group(f"tts-knee: {group.title}", group.about)
        for o in run_options.OPTIONS:
            if o.flag is not None and o.group is group:
                _add(container, o)


def _add(container, o: run_options.Option) -> None:
    """One option on an argument group: argparse's own, with the attributes Locust's add_argument
    would set for its web UI form (a group's add_argument does not take them)."""
    kw = {
        # a list option's default is a sequence
        "default": list(o.default) if o.kind == "list" else o.default,  # type: ignore[call-overload]
        "help": o.help_text().replace("%", "%%"),
    }  # argparse formats help with %
    if o.kind is bool:
        kw["action"] = "store_true"
    elif o.kind == "list":
        kw["action"] = "append"
    elif o.kind is not str:
        kw["type"] = o.kind
    if o.choices:
        kw["choices"] = o.choices
    if o.env:
        kw["env_var"] = o.env
    action = container.add_argument(o.flag, **kw)
    action.include_in_web_ui, action.is_secret = o.web_ui, bool(o.secret)
    action.is_required = action.is_multiple = False


@dataclass(frozen=True)
class Settings:
    """One run's options, checked.

    A field is named as its option (``--step-time`` is ``step_time``, in the option's unit:
    seconds) and, where run.json records it, as its key there (:meth:`public`); what an option
    gives parsed has a name of its own (``preset`` is the dialect ``tts_preset`` names,
    ``texts`` the corpus ``texts_source`` holds)."""

    host: str
    tts_api: str
    tts_path: str
    tts_model: str
    tts_voice: str
    tts_format: str
    tts_stream: bool
    tts_stream_format: str
    playback_buffer_ms: float
    ttfa_floor_ms: float
    tts_template: str | None
    tts_sample_rate: int
    texts: tuple
    texts_source: str
    steps: tuple
    step_time: float
    step_requests: int
    settle_time: float
    split_max_chars: int
    retry: RetryPolicy
    request_timeout: float
    connect_timeout: float
    run_dir: Path
    audio_dir: Path
    audio_keep: int
    stop_on_audio_error: bool
    junit: Path | None  # --junit: where the run's verdicts go as JUnit XML once it ends
    collectors: tuple
    collector_token: str | None
    require_collectors: bool
    preflight: bool
    slo: slo_mod.SLO | None
    refine: bool
    stop_past_knee: bool
    repeat: int
    server_metrics: tuple
    rates: tuple  # open loop: offered req/s per step for the whole run; () = closed loop
    arrival: str
    arrival_seed: int
    max_inflight: int
    text_rate: float  # tokens per second; 0: the whole text at once
    text_jitter: float
    flush: str
    refine_to: tuple[float, bool]  # open loop: (resolution, relative: a share of the rate, else req/s)
    drain_time: float  # the run's end: how long requests in flight are waited for
    server_roles: tuple  # --server-role as given: "ROLE=SERIES" each
    server_stage_label: str | None  # --server-stage-label; None: Triton's model, vLLM-Omni's stage
    tts_protocol: str
    preset: presets.Preset | None  # --tts-protocol ws: the dialect
    tts_preset: str
    turns: int  # utterances per session; 0: one session for the user's life
    think_time: float
    contexts: int
    soak: float | None  # --soak: how long the soak holds its level; None: no soak
    tts_form: str  # multipart/form-data with the clip as this file part; "": JSON
    voices: tuple  # voices_mod.Voice, for requests whose corpus entry names none
    voice_mix: str
    voice_seed: int
    voice_upload: bool
    server_stats: tuple
    voice_steps: tuple  # numbers of distinct voices, one per step; (): not a voice sweep
    barge_in: float  # share of utterances the listener interrupts
    barge_in_after: tuple | None  # (lo, hi) ms after the first audio; None: over the expected length
    cancel_by: str  # "message" or "close"
    barge_in_seed: int
    # gRPC
    grpc_preset: dict | None = None  # --tts-protocol grpc: the --tts-preset file's content
    tts_language: str = ""
    # listening (--asr-model): the ASR judge (locustfiles.listening)
    asr_model: str = ""
    asr_sample: int = 24
    asr_language: str = ""
    asr_metric: str = ""
    asr_threads: int = 1
    asr_listen: bool = False  # listening asked for by name: its models missing stop the run
    asr_words_only: bool = False
    asr_keep: bool = False  # the judge's clips kept, judged afterwards (tts-knee judge)
    asr_device: str = "cpu"
    reference_voice: str = ""
    # reaching a real service (locustfiles.tls): credentials sent, never recorded; TLS that verifies
    headers: tuple = ()  # (name, value) for every HTTP request and WebSocket upgrade
    grpc_metadata: tuple = ()  # (key, value) for every gRPC call
    tls_ca: str = ""
    tls_client_cert: str = ""  # --tls-client-cert: its path (the key's is not recorded)
    tls_insecure: bool = False
    tls: ssl.SSLContext | None = None  # the client context, for a TLS target (https, wss, grpcs)
    # capacity and cost (analysis.capacity): recorded for the report, read at the recommendation
    capacity: capacity_mod.Options = capacity_mod.Options()
    health_path: str = ""  # after the run: GET this path; "": the warm-up request once more
    text_reuse: str = "same"  # "unique": every request a text of its own (corpus.unique)
    probe: tuple = ()  # --probe-texts: the classes probed after the sweep (locustfiles.probe)
    probe_texts: tuple = ()  # their texts (corpus.Text, ids probe:CLASS:N)
    spike: tuple[float, float] | None = None  # --spike: (factor, seconds); None: no spike (locustfiles.spike)
    spike_at: int | None = None  # --spike-at: the level it starts from; None: the recommendation
    trace: trace_mod.Trace | None = None  # --trace: the log replayed (its steps' rates are its speeds')
    trace_speed: tuple = ()  # --trace-speed, one per grid step

    @property
    def mode(self) -> str:
        """run.json's ``mode``: ``open`` with --rates, else ``closed``."""
        return "open" if self.rates else "closed"

    @property
    def target(self) -> str:
        """What the run's requests go to, as messages name it: the URL, or Wyoming's address."""
        if self.tts_protocol == "ws":  # ws has a preset: the settings refuse ws without one
            voice_model = {"voice": self.tts_voice, "model": self.tts_model}
            return self.preset.url(self.host, voice_model)  # type: ignore[union-attr]
        return self.host if self.tts_protocol == "wyoming" else f"{self.host}{self.tts_path}"

    def payload(self, text: str, ask: Ask = NO_ASK) -> tuple[bytes, str]:
        """The request body for one text and what it asks for (:mod:`locustfiles.inputs.bodies`), and
        its content type."""
        return bodies.body(self, text, ask)

    def public(self) -> dict:
        """What run.json records of the options (:data:`runformat.options.RUN_OPTIONS`; the token
        left out): every field named as a key as it is (a tuple as a list), unless derived below."""
        r, open_loop, barge = self.retry, bool(self.rates), bool(self.barge_in)
        derived = {
            "texts": self.texts_source,
            "texts_count": len(self.texts),
            "retry_max_attempts": r.max_attempts,
            "retry_base_ms": r.base_ms,
            "retry_max_ms": r.max_ms,
            "retry_on": sorted(map(str, r.retry_on)),
            "retry_after_cap": r.retry_after_cap_s,
            "audio_dir": str(self.audio_dir),
            "slo": self.slo.spec if self.slo else None,
            "arrival": self.arrival if open_loop else None,
            "arrival_seed": self.arrival_seed if open_loop else None,
            "max_inflight": self.max_inflight if open_loop else None,
            "refine_to": self.refine_to_text if open_loop else None,
            "tts_preset": self.tts_preset or None,
            "tts_language": self.tts_language or None,
            "voices": [v.name for v in self.voices],
            "voice_seed": self.voice_seed if self.voices else None,
            "barge_in_after": self.barge_in_after_text,
            "cancel_by": self.cancel_by if barge else None,
            "barge_in_seed": self.barge_in_seed if barge else None,
            "asr_model": self.asr_model or None,
            "asr_sample": self.asr_sample if self.asr_model or self.asr_keep else None,
            "asr_language": self.asr_language or None,
            "asr_metric": self.asr_metric or None,
            "asr_threads": self.asr_threads if self.asr_model else None,
            "asr_listen": self.asr_listen if self.asr_model else None,
            "asr_words_only": self.asr_words_only if self.asr_model else None,
            "asr_keep": self.asr_keep or None,
            "asr_device": self.asr_device if self.asr_model else None,
            "reference_voice": self.reference_voice or None,
            "headers": [name for name, _ in self.headers],
            "grpc_metadata": [key for key, _ in self.grpc_metadata],
            "tls_ca": self.tls_ca or None,
            "tls_client_cert": self.tls_client_cert or None,
            "health_path": self.health_path or None,
            "probe_texts": list(self.probe) or None,
            "spike": None if self.spike is None else f"{self.spike[0]:g}x{self.spike[1]:g}",
            "trace": self.trace.path if self.trace else None,
            "trace_speed": list(self.trace_speed) or None,
            "cost_per_hour": self.capacity.cost_per_hour,
            "plan_for": self.capacity.plan_for.spec if self.capacity.plan_for else None,
            "headroom": capacity_mod.HEADROOM if self.capacity.headroom is None else self.capacity.headroom,
        }
        plain = {k: getattr(self, k) for k in _FIELD_KEYS if k not in derived}
        return _recorded(**{k: list(v) if isinstance(v, tuple) else v for k, v in plain.items()}, **derived)

    @property
    def barge_in_after_text(self) -> str | None:
        if not self.barge_in or self.barge_in_after is None:
            return None
        lo, hi = self.barge_in_after
        return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"

    @property
    def refine_to_text(self) -> str:
        value, relative = self.refine_to
        return f"{value * 100:g}%" if relative else f"{value:g}"


_recorded = Builder("run.json's options", run_options.RUN_OPTIONS)
#: run.json's option keys that are Settings fields of the same name: recorded as they are (a tuple
#: as a list) unless public() says how it is derived.
_FIELD_KEYS = tuple(f.name for f in run_options.RUN_OPTIONS if f.name in {f.name for f in fields(Settings)})


def _number(name: str, value, kind=float):
    try:
        v = kind(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int("inf")
        raise SettingsError(f"--{name} must be a number, got {value!r}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise SettingsError(f"--{name} must be a finite number, got {value!r}")
    return v


def _positive(name: str, value, kind=float, allow_zero=False):
    v = _number(name, value, kind)
    if v < 0 or (v == 0 and not allow_zero):
        raise SettingsError(f"--{name} must be {'zero or more' if allow_zero else 'greater than zero'}, got {value!r}")
    return v


def parse_steps(raw) -> tuple[int, ...]:
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        steps = tuple(int(s) for s in items if str(s) != "")
    except ValueError:
        raise SettingsError(f"--steps must be comma-separated whole numbers like 1,2,4,8, got {raw!r}") from None
    if not steps or min(steps) < 1:
        raise SettingsError(f"--steps needs at least one concurrency of 1 or more, got {raw!r}")
    return steps


def parse_rates(raw) -> tuple[float, ...]:
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        rates = tuple(float(s) for s in items if str(s) != "")
    except ValueError:
        raise SettingsError(f"--rates must be comma-separated requests per second like 1,2,4,8, got {raw!r}") from None
    if not rates or not all(math.isfinite(r) and r > 0 for r in rates):
        raise SettingsError(
            f"--rates needs at least one rate, each a number of requests per second above 0, got {raw!r}"
        )
    return rates


def parse_refine_to(raw) -> tuple[float, bool]:
    """``--refine-to``: ``5%`` (a share of the rate) or ``0.5`` (req/s) as (value, relative)."""
    text = str(raw).strip()
    relative = text.endswith("%")
    try:
        value = float(text[:-1] if relative else text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or relative and value >= 100:
        raise SettingsError(
            f"--refine-to must be a share of the rate like 5% (below 100%) or requests per second "
            f"like 0.5, above 0, got {raw!r}"
        )
    return (value / 100.0, True) if relative else (value, False)


def _retry_on(raw) -> frozenset[str | int]:
    out: set[str | int] = set()
    for tok in str(raw).replace(" ", "").split(","):
        if not tok:
            continue
        if tok == CONNECTION_ERROR or tok in GRPC_CODES:
            out.add(tok)
        elif tok.isdigit() and 100 <= int(tok) <= 599:
            out.add(int(tok))
        else:
            raise SettingsError(
                f"--retry-on takes HTTP statuses, gRPC code names (UNAVAILABLE …) and `{CONNECTION_ERROR}`, got {tok!r}"
            )
    return frozenset(out)


def _template(raw: str, form: str = "") -> str:
    if raw.startswith("@"):
        try:
            raw = Path(raw[1:]).read_text(encoding="utf-8")
        except OSError as e:
            raise SettingsError(f"--tts-template file {raw[1:]} cannot be read: {e.strerror}") from None
    if "{text}" not in raw:
        raise SettingsError('--tts-template must contain "{text}" where the text goes')
    try:
        filled = json.loads(bodies.sample(raw))
    except json.JSONDecodeError as e:
        raise SettingsError(f"--tts-template is not valid JSON once its placeholders are filled in ({e.msg})") from None
    if form and not isinstance(filled, dict):
        raise SettingsError(
            "--tts-form sends a template's top-level fields as form fields: --tts-template must be a JSON object"
        )
    return raw


def _voices(o) -> tuple:
    try:
        got = voices_mod.parse_voices(o.voices)
        voices_mod.parse_mix(o.voice_mix)
    except voices_mod.VoiceError as e:
        raise SettingsError(str(e)) from None
    return got


def _voice_steps(o, voices: tuple, steps: tuple, rates: tuple, steps_given: bool) -> tuple[int, ...]:
    raw = str(o.voice_steps or "").replace(" ", "")
    if not raw:
        return ()
    try:
        counts = tuple(int(x) for x in raw.split(",") if x)
    except ValueError:
        raise SettingsError(f"--voice-steps must be comma-separated whole numbers like 1,4,8,16, got {raw!r}") from None
    if not counts or min(counts) < 1:
        raise SettingsError(f"--voice-steps needs at least one number of voices of 1 or more, got {raw!r}")
    if not voices:
        raise SettingsError("--voice-steps draws each step's voices from --voices: give --voices LIST or @FILE")
    if max(counts) > len(voices):
        raise SettingsError(f"--voice-steps goes up to {max(counts)} voices but --voices names {len(voices)}")
    if len(rates or steps) != 1 or not (steps_given or rates):
        raise SettingsError(
            "--voice-steps sweeps the number of voices at one load: give one concurrency "
            "(--steps 4) or one rate (--rates 2)"
        )
    if o.soak:
        raise SettingsError(
            "--soak holds one load, and --voice-steps sweeps voices at one load: run the soak on "
            "its own, with the number of voices it should draw from in --voices"
        )
    return counts


def _check_asks(s: Settings) -> None:
    """Every request the run can make has a value for each placeholder of the template."""
    if s.tts_template is None:
        return
    for text in dict.fromkeys(s.texts + (s.trace.texts if s.trace else ())):
        for voice in (None,) if voices_mod.owns_voice(text) or not s.voices else s.voices:
            lack = bodies.missing(s.tts_template, s, voices_mod.ask_for(text, voice, s.voice_upload))
            if lack:
                name = lack[0]
                whose = (
                    f"corpus entry {text.id!r}"
                    if voice is None or name not in voices_mod.VOICE_ASKS
                    else f"voice {voice.name!r} (given to corpus entry {text.id!r})"
                )
                key = "ref_audio" if name == "ref_audio_b64" else name
                hint = " and --tts-voice is empty" if name == "voice" else ""
                raise SettingsError(f"--tts-template uses {{{name}}}, but {whose} has no {key}{hint}")


def _collectors(raw, flag: str = "collector") -> tuple[str, ...]:
    urls = raw if isinstance(raw, list) else [raw]
    out = []
    for item in urls:
        for url in str(item).replace(" ", "").split(","):
            if not url:
                continue
            if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise SettingsError(f"--{flag} must be an http:// URL, got {url!r}")
            out.append(url.rstrip("/"))
    return tuple(out)


def _slo(raw) -> slo_mod.SLO | None:
    if not str(raw or "").strip():
        return None
    try:
        return slo_mod.parse(str(raw))
    except slo_mod.SLOError as e:
        raise SettingsError(f"--slo: {e}") from None


def _soak(raw) -> float | None:
    text = str(raw or "").strip()
    if not text:
        return None
    # imported here: importing locust patches the process for gevent, which the settings' other
    # users (the dashboard, tests, tools reading options) must not get for a --soak they never use
    from locust.util.timespan import parse_timespan

    try:
        seconds = float(parse_timespan(text))
    except ValueError:
        raise SettingsError(f"--soak must be a duration like 300s, 20m or 1h, got {raw!r}") from None
    if seconds < SOAK_MIN_S:
        raise SettingsError(
            f"--soak needs at least {SOAK_MIN_S:g} s (1m) of windows to tell a trend from noise, got {raw!r}"
        )
    return seconds


def default_run_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _target(host: str | None, protocol) -> str:
    """The checked ``-H`` for ``--tts-protocol``."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise SettingsError(f"--tts-protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not host:
        raise SettingsError(
            "no target: give the TTS server's base URL with -H/--host, e.g. -H http://127.0.0.1:8300"
            + (" (Wyoming: -H tcp://HOST:PORT)" if protocol == "wyoming" else "")
        )
    parts = urlsplit(host)
    try:
        port = parts.port
    except ValueError:
        raise SettingsError(f"--host has a port that is not a number: {host!r}") from None
    if protocol == "wyoming":
        if parts.scheme != "tcp" or not parts.hostname or port is None:
            raise SettingsError(f"--tts-protocol wyoming takes -H tcp://HOST:PORT, got {host!r}")
    elif protocol == "grpc":
        if parts.scheme not in ("grpc", "grpcs") or not parts.hostname or port is None or parts.path not in ("", "/"):
            raise SettingsError(
                f"--host must be grpc://HOST:PORT (grpcs:// for TLS) with --tts-protocol grpc, got {host!r}"
            )
    elif parts.scheme not in PROTOCOLS[protocol] or not parts.hostname:
        hint = {
            "tcp": " (tcp:// is for --tts-protocol wyoming)",
            "grpc": "; a gRPC server needs --tts-protocol grpc",
        }.get(parts.scheme, "")
        raise SettingsError(f"--host must be a base URL like http://127.0.0.1:8300, got {host!r}{hint}")
    return host.rstrip("/")


def _sessions(o, protocol: str, rates: tuple) -> tuple:
    """``(preset, turns, think time, contexts)`` of --tts-preset, --turns, --think-time, --contexts."""
    preset = None
    source = str(o.tts_preset or "").strip()
    if source and protocol != "grpc":  # a gRPC service's preset is _grpc's to read
        if source in ("riva", "triton") or source.endswith(".json"):
            raise SettingsError(f"--tts-preset {source} is a gRPC service's preset: add --tts-protocol grpc")
        try:
            preset = presets.load(source)
        except presets.PresetError as e:
            raise SettingsError(str(e)) from None
        if preset.protocol != protocol:
            raise SettingsError(
                f"--tts-preset {source} is a {preset.protocol} dialect: add --tts-protocol {preset.protocol}"
            )
    elif protocol == "ws":
        raise SettingsError(
            f"--tts-protocol ws needs --tts-preset: one of {', '.join(presets.names())}, or a .toml "
            f"file of your own (configs/presets/README.md)"
        )
    turns = int(_positive("turns", o.turns, int, allow_zero=True))
    think = _positive("think-time", o.think_time, allow_zero=True)
    contexts = int(_positive("contexts", o.contexts, int))
    if contexts > 1:
        most = preset.contexts if preset is not None and preset.routed else 1
        if most == 1:
            raise SettingsError(
                f"--contexts {contexts} needs a preset with contexts (cartesia, elevenlabs-multi); "
                f"{'preset ' + preset.name if preset else '--tts-protocol ' + protocol} keeps one "
                f"utterance in flight per connection"
            )
        if contexts > most:
            # most > 1: a preset's
            raise SettingsError(f"--contexts {contexts} is more than preset {preset.name} allows ({most})")  # type: ignore[union-attr]
    if turns and contexts > 1:
        raise SettingsError("--turns works with one utterance in flight per session, not with --contexts")
    if rates and (turns or think or contexts > 1):
        raise SettingsError("--turns, --think-time and --contexts work with --steps only, not with --rates")
    return preset, source, turns, think, contexts


def parse_barge_in_after(raw) -> tuple[float, float] | None:
    """``--barge-in-after``: ``MS`` or ``LO-HI`` as (lo, hi) ms; empty: None (the default draw)."""
    text = str(raw or "").replace(" ", "")
    if not text:
        return None
    lo, sep, hi = text.partition("-")
    try:
        bounds = (float(lo), float(hi if sep else lo))
    except ValueError:
        bounds = (math.nan, math.nan)
    if not all(math.isfinite(b) and b >= 0 for b in bounds) or bounds[0] > bounds[1]:
        raise SettingsError(
            f"--barge-in-after must be ms after the first audio like 50, or a range like 50-400 "
            f"(low to high, 0 or more), got {raw!r}"
        )
    return bounds


def _barge_in(o, protocol: str, preset, contexts: int) -> dict:
    """The barge-in group: --barge-in (the share interrupted), --barge-in-after, --cancel-by and
    --barge-in-seed."""
    share = _positive("barge-in", o.barge_in, allow_zero=True)
    if share > 1:
        raise SettingsError(f"--barge-in must be a share of utterances from 0 to 1, got {o.barge_in!r}")
    after = parse_barge_in_after(o.barge_in_after)
    has_message = preset is not None and "cancel" in preset.send
    by = str(o.cancel_by or "") or ("message" if has_message else "close")
    if by not in CANCEL_MODES:
        raise SettingsError(f"--cancel-by must be one of {', '.join(CANCEL_MODES)}, got {o.cancel_by!r}")
    if by == "message" and not has_message:
        what = f"preset {preset.name}" if preset is not None else f"--tts-protocol {protocol}"
        raise SettingsError(f"--cancel-by message needs a cancel message, and {what} has none: cancel by close")
    if share and by == "close" and contexts > 1:
        raise SettingsError(
            "--cancel-by close would end every context on the session: with --contexts, cancel by message"
        )
    seed = int(_number("barge-in-seed", o.barge_in_seed, int))
    if seed < 0:
        seed = random.SystemRandom().randrange(2**31)
    return dict(barge_in=share, barge_in_after=after, cancel_by=by, barge_in_seed=seed)


def _declared(o) -> dict:
    """Every option that declares its bounds (:meth:`runformat.options.Option.checked`), checked:
    the setting of its name, as given."""
    try:
        return {opt.dest: opt.checked(getattr(o, opt.dest)) for opt in _CHECKED}
    except ValueError as e:
        raise SettingsError(str(e)) from None


#: The options checked by their declaration alone.
_CHECKED = tuple(o for o in run_options.OPTIONS if o.flag and (o.at_least is not None or o.above is not None))


def from_options(options, host: str | None) -> Settings:
    """Validate Locust's parsed options (command line, .conf file or web UI) into Settings: each
    concern by its own function (the target and request, the load plan, streaming and sessions,
    retries, the plan's decisions, voices, barge-in, telemetry, output, ...), each mistake one
    sentence naming the option; then what only the options together can tell."""
    o = options
    protocol = o.tts_protocol
    host = _target(host, protocol)
    grpc = _grpc(o, host) if protocol == "grpc" else {}
    declared = _declared(o)
    request = _request(o, protocol, grpc)
    plan = _plan(o, request["texts"], declared["request_timeout"])
    steps_given = plan.pop("steps_given")
    retry, decisions = _retries(o), _decisions(o)
    streaming = _streaming(o, protocol, plan["rates"], grpc)
    barge_in = _barge_in(o, protocol, streaming["preset"], streaming["contexts"])
    voices = _voice_options(o, plan, steps_given)
    s = Settings(
        host=host,
        **declared,
        **request,
        **plan,
        **streaming,
        retry=retry,
        **decisions,
        **voices,
        **barge_in,
        **_telemetry(o),
        **_output(o),
        **_listening(o),
        **_reach(o, host, protocol),
        capacity=_capacity(o),
        health_path=_health_path(o, protocol),
        **_probe(o, protocol, request["tts_form"], plan["rates"]),
        **_spike(o, plan["rates"]),
    )
    if s.trace is not None:
        _check_trace(s, o)
    if protocol != "http" and (
        s.voices or s.tts_form or any(voices_mod.owns_voice(t) for t in s.texts + (s.trace.texts if s.trace else ()))
    ):
        raise SettingsError(
            f"--tts-protocol {protocol} sends the one voice of --tts-voice: --voices, "
            f"--tts-form and voices named in the corpus or the trace are for HTTP requests"
        )
    _check_asks(s)
    return s


def _request(o, protocol: str, grpc: dict) -> dict:
    """The target and request group: what each request asks for and how (--tts-api, --tts-path,
    --tts-format, --tts-template and --tts-form, the corpus), and how long it may take."""
    api = o.tts_api
    if api not in APIS:
        raise SettingsError(f"--tts-api must be one of {', '.join(sorted(APIS))}, got {api!r}")
    path = o.tts_path or grpc.get("path") or APIS[api]
    if not path.startswith("/"):
        raise SettingsError(f"--tts-path must start with /, got {path!r}")
    fmt = str(o.tts_format).lower()
    if fmt not in FORMATS:
        raise SettingsError(f"--tts-format must be one of {', '.join(FORMATS)}, got {o.tts_format!r}")
    if api == "json" and not o.tts_template:
        raise SettingsError('--tts-api json needs --tts-template, e.g. \'{"text": "{text}"}\'')
    form = str(o.tts_form or "").strip()
    try:
        texts = corpus.load(o.texts or None)
    except corpus.CorpusError as e:
        raise SettingsError(f"--texts: {e}") from None
    voice = o.tts_voice
    if protocol != "http" and voice == DEFAULTS["tts_voice"]:
        voice = ""  # OpenAI's voice: a session sends one only when it is named
    return dict(
        tts_api=api,
        tts_path=path,
        tts_model=grpc.get("model", o.tts_model),
        tts_voice=grpc.get("voice", voice),
        tts_format=fmt,
        tts_template=_template(o.tts_template, form) if api == "json" else None,
        tts_form=form,
        tts_language=grpc.get("language", ""),
        texts=tuple(texts),
        texts_source=str(o.texts or corpus.DEFAULT_CORPUS),
        preflight=not o.skip_preflight,
        grpc_preset=grpc.get("preset"),
        text_reuse=str(getattr(o, "text_reuse", None) or "same"),
    )


def _plan(o, texts: list, timeout: float) -> dict:
    """The load plan group: the levels (--steps, or --rates and its arrivals, or a --trace at
    --trace-speed), how long each is held and settles, repeats, the drain at the end, a soak."""
    steps_given = bool(str(o.steps or "").strip())
    steps = parse_steps(o.steps if steps_given else DEFAULT_STEPS)
    rates = parse_rates(o.rates) if str(o.rates or "").strip() else ()
    if rates and steps_given:
        raise SettingsError(
            "--rates and --steps were both given: use --rates for an open-loop run "
            "(requests per second) or --steps for a closed-loop one (concurrency), not both"
        )
    max_inflight = int(_positive("max-inflight", o.max_inflight, int))
    refine_to = parse_refine_to(o.refine_to or DEFAULT_REFINE_TO)
    trace, speeds = _trace(o, texts, rates, steps_given)
    if trace is not None:
        rates = tuple(v * trace.base_rps for v in speeds)
        refine_to = (trace_mod.REFINE_TO * trace.base_rps, False)
    elif not rates and str(o.refine_to or DEFAULT_REFINE_TO).strip() != DEFAULT_REFINE_TO:
        raise SettingsError(
            "--refine-to sets how close --refine brings two rates (--rates); a concurrency "
            "(--steps) is refined to adjacent whole numbers"
        )
    seed = int(_number("arrival-seed", o.arrival_seed, int))
    if seed < 0:
        seed = random.SystemRandom().randrange(2**31)
    step_requests = int(_positive("step-requests", o.step_requests, int, allow_zero=True))
    step_time = _positive("step-time", o.step_time, allow_zero=True)
    if not step_time:
        step_time = STEP_REQUESTS_CAP_S if step_requests else DEFAULT_STEP_TIME_S
    settle = _number("settle-time", o.settle_time)
    if settle < 0:
        settle = 0.0 if step_requests else min(SETTLE_MAX_S, SETTLE_FRACTION * step_time)
    elif settle >= step_time:
        raise SettingsError(f"--settle-time ({settle:g} s) must be shorter than --step-time ({step_time:g} s)")
    drain = _number("drain-time", o.drain_time)
    if drain < 0:
        drain = min(timeout, DRAIN_DEFAULT_MAX_S)
    elif drain > DRAIN_MAX_S:
        raise SettingsError(
            f"--drain-time must be at most {DRAIN_MAX_S:g} s (a master waits 60 s for its workers "
            f"to stop), got {o.drain_time!r}"
        )
    return dict(
        steps=steps,
        steps_given=steps_given,
        rates=rates,
        arrival=o.arrival,
        arrival_seed=seed,
        max_inflight=max_inflight,
        refine_to=refine_to,
        trace=trace,
        trace_speed=speeds,
        step_time=step_time,
        step_requests=step_requests,
        settle_time=settle,
        drain_time=drain,
        soak=_soak(o.soak),
    )


def _streaming(o, protocol: str, rates: tuple, grpc: dict) -> dict:
    """The streaming and sessions group: whether responses are read as streams and how they are
    played, the text paced in (--text-rate, --text-jitter, --flush), and the sessions
    (:func:`_sessions`)."""
    stream_format = str(o.tts_stream_format or "").lower()
    if stream_format not in STREAM_FORMATS:
        raise SettingsError(f"--tts-stream-format must be sse or audio, got {o.tts_stream_format!r}")
    preset, preset_source, turns, think, contexts = _sessions(o, protocol, rates)
    text_jitter = _positive("text-jitter", o.text_jitter, allow_zero=True)
    if text_jitter > 1:
        raise SettingsError(f"--text-jitter must be a fraction from 0 to 1, got {o.text_jitter!r}")
    if o.flush not in FLUSH_MODES:
        raise SettingsError(f"--flush must be one of {', '.join(FLUSH_MODES)}, got {o.flush!r}")
    return dict(
        tts_stream=bool(o.tts_stream)
        or bool(stream_format)
        or protocol in ("ws", "wyoming")
        or grpc.get("stream", False),
        tts_stream_format=stream_format,
        text_jitter=text_jitter,
        flush=o.flush,
        tts_protocol=protocol,
        preset=preset,
        tts_preset=preset_source,
        turns=turns,
        think_time=think,
        contexts=contexts,
    )


def _retries(o) -> RetryPolicy:
    """The retries group: --retry-max-attempts, --retry-base-ms, --retry-max-ms, --retry-on and
    --retry-after-cap."""
    attempts = int(_positive("retry-max-attempts", o.retry_max_attempts, int))
    base = _positive("retry-base-ms", o.retry_base_ms, allow_zero=True)
    cap = _positive("retry-max-ms", o.retry_max_ms, allow_zero=True)
    if cap < base:
        raise SettingsError(f"--retry-max-ms ({cap:g}) must not be below --retry-base-ms ({base:g})")
    return RetryPolicy(
        attempts, base, cap, _retry_on(o.retry_on), _positive("retry-after-cap", o.retry_after_cap, allow_zero=True)
    )


def _decisions(o) -> dict:
    """The SLO and plan decisions group: --slo, and --refine (which needs it) and --stop-past-knee."""
    slo = _slo(o.slo)
    if o.refine and slo is None:
        raise SettingsError("--refine needs --slo: refinement bisects between a passing and a failing step")
    return dict(slo=slo, refine=bool(o.refine), stop_past_knee=bool(o.stop_past_knee))


def _voice_options(o, plan: dict, steps_given: bool) -> dict:
    """The voices group: --voices and their mix and seed, a sweep over them (--voice-steps), and
    --voice-upload (which needs their reference clips)."""
    voices = _voices(o)
    voice_seed = int(_number("voice-seed", o.voice_seed, int))
    if voice_seed < 0:
        voice_seed = random.SystemRandom().randrange(2**31)
    voice_steps = _voice_steps(o, voices, plan["steps"], plan["rates"], steps_given)
    if o.voice_upload and not any(v.ref_audio is not None for v in voices):
        raise SettingsError(
            "--voice-upload registers the reference clips of --voices: give it a .jsonl file "
            "whose voices have ref_audio"
        )
    return dict(
        voices=voices,
        voice_mix=str(o.voice_mix).strip(),
        voice_seed=voice_seed,
        voice_steps=voice_steps,
        voice_upload=bool(o.voice_upload),
    )


def _telemetry(o) -> dict:
    """The telemetry group: the collectors, the server's own metrics and stats, and what its
    series mean (--server-role, --server-stage-label)."""
    try:
        parse_roles(o.server_role or [])
    except ValueError as e:
        raise SettingsError(str(e)) from None
    stage_label = str(o.server_stage_label or "").strip() or None
    if stage_label is not None and not LABEL_NAME.fullmatch(stage_label):
        raise SettingsError(f"--server-stage-label takes a label name (letters, digits and _), got {stage_label!r}")
    return dict(
        collectors=_collectors(o.collector),
        collector_token=o.collector_token or None,
        require_collectors=bool(o.require_collectors),
        server_metrics=_collectors(o.server_metrics or [], "server-metrics"),
        server_roles=tuple(p.strip() for item in (o.server_role or []) for p in str(item).split(",") if p.strip()),
        server_stats=_collectors(o.server_stats or [], "server-stats"),
        server_stage_label=stage_label,
    )


def _output(o) -> dict:
    """The output group: the run directory, the audio written and kept, and what an audio error does."""
    run_dir = Path(o.run_dir) if o.run_dir else default_run_dir()
    return dict(
        run_dir=run_dir,
        audio_dir=Path(o.audio_dir) if o.audio_dir else run_dir / "audio",
        stop_on_audio_error=o.on_audio_error == "stop",
        junit=Path(o.junit) if getattr(o, "junit", "") else None,
    )


def _reach(o, host: str, protocol: str) -> dict:
    """--header, --grpc-metadata and TLS (:mod:`locustfiles.tls`): the credentials, their
    ``${VAR}`` read from the environment, and the client context a TLS target is reached with."""
    try:
        headers = tls.pairs(getattr(o, "header", None), "--header", ":")
        metadata = tls.pairs(getattr(o, "grpc_metadata", None), "--grpc-metadata", "=")
        ca, insecure = str(getattr(o, "tls_ca", "") or ""), bool(getattr(o, "tls_insecure", False))
        cert, key = (str(getattr(o, k, "") or "") for k in ("tls_client_cert", "tls_client_key"))
        secure = urlsplit(host).scheme in ("https", "wss", "grpcs")
        if (cert or key) and not secure:
            raise tls.CredentialError(
                f"--tls-client-cert is shown in a TLS handshake, but the target {host} is "
                f"plaintext: give -H https:// (wss://, grpcs://) or drop it"
            )
        context = (
            tls.client_context(ca, insecure, ("h2",) if protocol == "grpc" else (), cert, key) if secure or ca else None
        )
    except tls.CredentialError as e:
        raise SettingsError(str(e)) from None
    if metadata and protocol != "grpc":
        raise SettingsError("--grpc-metadata is for --tts-protocol grpc; HTTP and WebSocket take --header")
    if headers and protocol in ("grpc", "wyoming"):
        raise SettingsError(
            f"--header is for HTTP and WebSocket; --tts-protocol {protocol} "
            + ("takes --grpc-metadata" if protocol == "grpc" else "has no headers")
        )
    return {
        "headers": headers,
        "grpc_metadata": metadata,
        "tls_ca": ca,
        "tls_insecure": insecure,
        "tls_client_cert": cert,
        "tls": context if secure else None,
    }


def _trace(o, texts, rates: tuple, steps_given: bool):
    """--trace and --trace-speed: the trace resolved against the corpus and its speeds."""
    path = str(getattr(o, "trace", "") or "").strip()
    raw = str(getattr(o, "trace_speed", "") or "").strip()
    if not path:
        if raw and raw != DEFAULTS.get("trace_speed", "1"):
            raise SettingsError("--trace-speed sets the speeds a trace is replayed at: give --trace FILE too")
        return None, ()
    if rates or steps_given:
        raise SettingsError(
            f"--trace replays its own arrivals at --trace-speed: drop --{'rates' if rates else 'steps'}"
        )
    try:
        speeds = trace_mod.parse_speeds(raw or "1")
        trace = trace_mod.load(path, tuple(texts))
    except trace_mod.TraceError as e:
        raise SettingsError(str(e)) from None
    if str(o.refine_to or DEFAULT_REFINE_TO).strip() != DEFAULT_REFINE_TO:
        raise SettingsError(f"--refine-to is for --rates; a trace's speeds are refined to {trace_mod.REFINE_TO:g}x")
    return trace, speeds


def _check_trace(s: Settings, o) -> None:
    """What a trace replay cannot be combined with, and a replay too short to settle."""
    for flag, given in (
        ("--step-requests", s.step_requests),
        ("--soak", s.soak),
        ("--voice-steps", s.voice_steps),
        ("--text-rate", s.text_rate),
    ):
        if given:
            raise SettingsError(
                f"--trace replays each step for --step-time or the whole trace; {flag} does not apply to it"
            )
    for v in s.trace_speed or ():
        span = s.trace.span_s(v, s.step_time)  # type: ignore[union-attr]  # trace speeds come with a trace
        if span <= s.settle_time:
            raise SettingsError(
                f"--trace at {v:g}x lasts {span:.1f} s, no longer than --settle-time "
                f"({s.settle_time:g} s): nothing of it would be settled; lower that speed or "
                f"--settle-time"
            )


def _probe(o, protocol: str, form: str, rates: tuple) -> dict:
    """--probe-texts: its classes and their texts (the bytes-only class where the body is JSON)."""
    try:
        classes = probe_mod.parse(str(getattr(o, "probe_texts", "") or "").strip() or None)
    except probe_mod.ProbeError as e:
        raise SettingsError(str(e)) from None
    if classes and rates:
        raise SettingsError(
            "--probe-texts runs at concurrency 1 and the recommended concurrency: use it with --steps, not --rates"
        )
    json_body = protocol == "http" and not form
    return {"probe": classes, "probe_texts": tuple(probe_mod.texts(classes, json_body))}


def _spike(o, rates: tuple) -> dict:
    """--spike and --spike-at."""
    spec = str(getattr(o, "spike", "") or "").strip()
    at = int(_number("spike-at", getattr(o, "spike_at", 0) or 0, int))
    if not spec:
        if at:
            raise SettingsError("--spike-at is the level of --spike: give --spike FACTORxSECONDS too")
        return {}
    try:
        factor, seconds = spike_mod.parse(spec)
    except spike_mod.SpikeError as e:
        raise SettingsError(str(e)) from None
    if rates:
        raise SettingsError("--spike multiplies a concurrency: use it with --steps, not --rates")
    if at < 0:
        raise SettingsError(f"--spike-at must be a concurrency of 1 or more, got {at}")
    return {"spike": (factor, seconds), "spike_at": at or None}


def _health_path(o, protocol: str) -> str:
    path = str(getattr(o, "health_path", "") or "").strip()
    if path and not path.startswith("/"):
        raise SettingsError(f"--health-path must be a path starting with /, such as /health, got {path!r}")
    if path and protocol in ("grpc", "wyoming"):
        raise SettingsError(
            f"--health-path is an HTTP path; --tts-protocol {protocol} has none (its health probe "
            f"is the warm-up request once more)"
        )
    return path


def _capacity(o) -> capacity_mod.Options:
    """--cost-per-hour, --plan-for and --headroom, checked before the run (the report reads them)."""
    cost, plan = str(getattr(o, "cost_per_hour", "") or "").strip(), str(getattr(o, "plan_for", "") or "").strip()
    try:
        return capacity_mod.Options(
            capacity_mod.parse_cost(cost) if cost else None,
            capacity_mod.parse_demand(plan) if plan else None,
            capacity_mod.parse_headroom(getattr(o, "headroom", None) or "20%"),
        )
    except capacity_mod.CapacityError as e:
        raise SettingsError(str(e)) from None


def _listening(o) -> dict:
    """The ASR judge's settings (--asr-*); the model itself is checked where the judge runs, the
    master or the local runner, before the run's first step (locustfiles.listening.check): a
    worker needs no recogniser installed."""
    model = str(o.asr_model or "").strip()
    out: dict[str, str | bool] = {
        "asr_model": model,
        "asr_language": str(o.asr_language or "").strip(),
        "asr_metric": str(o.asr_metric or "").strip(),
        "asr_listen": bool(getattr(o, "asr_listen", False)),
        "asr_words_only": bool(getattr(o, "asr_words_only", False)),
        "asr_keep": bool(getattr(o, "asr_keep", False)),
        "asr_device": str(getattr(o, "asr_device", "") or "cpu"),
        "reference_voice": str(getattr(o, "reference_voice", "") or "").strip(),
    }
    if model and out["asr_keep"]:
        raise SettingsError(
            "--asr-keep keeps the clips for tts-knee judge without judging them, and --asr-model judges them "
            "during the run (keeping them too): give one"
        )
    if not (model or out["asr_keep"]) and (out["asr_language"] or out["asr_metric"]):
        raise SettingsError("--asr-language and --asr-metric tell the ASR judge how to listen: give --asr-model")
    given = [
        flag
        for flag, on in (
            ("--asr-listen", out["asr_listen"]),
            ("--asr-words-only", out["asr_words_only"]),
            ("--reference-voice", out["reference_voice"]),
            ("--asr-device", out["asr_device"] != "cpu"),
        )
        if on
    ]
    if given and not model:
        later = " (tts-knee judge takes them for a run kept with --asr-keep)" if out["asr_keep"] else ""
        raise SettingsError(f"{' and '.join(given)} tell the ASR judge how to listen: give --asr-model{later}")
    if out["asr_words_only"] and (out["asr_listen"] or out["reference_voice"]):
        raise SettingsError(hearing.CONTRARY)
    return out


def _grpc(o, host: str) -> dict:
    """What --tts-protocol grpc adds to the settings: the preset, the method called, and the
    voice, model and language the preset fills where the options were left at their defaults."""
    from .transports import grpc  # only gRPC runs need h2 and the published protos

    if not o.tts_preset:
        raise SettingsError("--tts-protocol grpc needs --tts-preset: riva, triton, or a preset file")
    try:
        preset, name = grpc.load_preset(o.tts_preset)
    except grpc.PresetError as e:
        raise SettingsError(str(e)) from None
    if o.tts_stream_format:
        raise SettingsError("--tts-stream-format is for HTTP; a gRPC stream is asked for with --tts-stream")
    defaults = run_options.DEFAULTS
    out = {"preset": preset, "language": o.tts_language or preset.get("language", "")}
    if preset["service"] == "riva":
        if o.tts_voice == defaults["tts_voice"]:
            out["voice"] = preset.get("voice", "")
    else:
        if o.tts_model == defaults["tts_model"]:
            out["model"] = preset["model"]
        if o.tts_stream and not preset.get("decoupled"):
            raise SettingsError(
                f"--tts-stream needs a decoupled Triton model; --tts-preset {name} says "
                f'"decoupled": false, so its answers are whole'
            )
        out["stream"] = bool(preset.get("decoupled"))
    out["path"] = grpc.method_path(preset, bool(o.tts_stream) or out.get("stream", False))
    return out
