"""tts-knee's options: registered on Locust's parser from their one declaration
(:class:`runformat.options.RunOptions`: the command line, ``.conf`` files and the web UI) and
validated into one :class:`Settings`, a RunOptions whose options are checked against their
declarations, worked out where their help says so, and parsed where they name something else.

A bad value raises :class:`SettingsError` whose message names the option and what it expects.
"""

from __future__ import annotations

import json
import math
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tts_knee.analysis import capacity as capacity_mod, slo as slo_mod
from tts_knee.audio import hearing
from tts_knee.runformat import options as run_options
from tts_knee.runformat.fields import Builder
from tts_knee.runformat.grpc_codes import CODES as GRPC_CODES
from tts_knee.runformat.metric_roles import LABEL_NAME, parse_roles
from tts_knee.runformat.options import (
    APIS,
    CONNECTION_ERROR,
    DEFAULT_REFINE_TO,
    DEFAULT_STEP_TIME_S,
    DEFAULT_STEPS,
    DEFAULTS,
    DRAIN_DEFAULT_MAX_S,
    DRAIN_MAX_S,
    FORMATS,
    PROTOCOLS,
    SETTLE_FRACTION,
    SETTLE_MAX_S,
    SOAK_MIN_S,
    STEP_REQUESTS_CAP_S,
    STREAM_FORMATS,
    RunOptions,
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
        for declared in run_options.OPTIONS:
            if declared.group is group:
                _add(container, declared)


def _add(container, declared: run_options.Option) -> None:
    """One option on an argument group: argparse's own, with the attributes Locust's add_argument
    would set for its web UI form (a group's add_argument does not take them)."""
    argument: dict[str, Any] = {"default": declared.default, "help": declared.help_text().replace("%", "%%")}
    if declared.kind is bool:
        argument["action"] = "store_true"
    elif declared.kind is tuple:  # repeatable: argparse appends to a list
        argument.update(action="append", default=list(declared.default))
    elif declared.kind is not str:
        argument["type"] = declared.kind
    if declared.choices:
        argument["choices"] = declared.choices
    if declared.env:
        argument["env_var"] = declared.env
    action = container.add_argument(declared.flag, **argument)
    action.include_in_web_ui, action.is_secret = declared.web_ui, declared.secret
    action.is_required = action.is_multiple = False


@dataclass(frozen=True, kw_only=True)
class Settings(RunOptions):
    """One run's options, checked: every option of :class:`RunOptions`, named as its flag
    (``--step-time`` is ``step_time``, in its unit: seconds), worked out where its help says so (no
    ``--step-time`` is 30 s); below, the options parsed into values of their own (``Parsed`` in
    RunOptions), and what the options make together. :meth:`public` is run.json's ``options``."""

    host: str
    # options parsed into values of their own
    texts: tuple[corpus.Text, ...]  # the corpus --texts names (texts_source: the file read)
    steps: tuple[int, ...]
    rates: tuple[float, ...]  # open loop: offered req/s per step for the whole run; () = closed loop
    refine_to: tuple[float, bool]  # open loop: (resolution, relative: a share of the rate, else req/s)
    trace: trace_mod.Trace | None  # --trace: the log replayed (its steps' rates are its speeds')
    trace_speed: tuple[float, ...]  # --trace-speed, one per grid step
    soak: float | None  # --soak: how long the soak holds its level; None: no soak
    spike: tuple[float, float] | None  # --spike: (factor, seconds); None: no spike (locustfiles.spike)
    probe_texts: tuple[corpus.Text, ...]  # --probe-texts: the probe's texts (ids probe:CLASS:N)
    slo: slo_mod.SLO | None
    voices: tuple[voices_mod.Voice, ...]  # for requests whose corpus entry names none
    voice_steps: tuple[int, ...]  # numbers of distinct voices, one per step; (): not a voice sweep
    barge_in_after: tuple[float, float] | None  # (lo, hi) ms after the first audio; None: over the expected length
    grpc_metadata: tuple[tuple[str, str], ...]  # (key, value) for every gRPC call
    run_dir: Path
    audio_dir: Path
    junit: Path | None  # where the run's verdicts go as JUnit XML once it ends
    cost_per_hour: float | None  # capacity and cost (analysis.capacity): the report reads them
    plan_for: str | None  # the demand, as analysis.capacity.Demand spells it
    headroom: float
    # what the options make together
    texts_source: str  # the corpus file read
    retry: RetryPolicy
    preset: presets.Preset | None  # --tts-protocol ws: the dialect --tts-preset names
    grpc_preset: dict | None  # --tts-protocol grpc: the --tts-preset file's content
    headers: tuple[tuple[str, str], ...]  # (name, value) for every HTTP request and WebSocket upgrade
    tls: ssl.SSLContext | None  # the client context, for a TLS target (https, wss, grpcs)
    collectors: tuple[str, ...]
    server_roles: tuple[str, ...]  # --server-role as given: "ROLE=SERIES" each
    probe: tuple[str, ...]  # --probe-texts: the classes probed after the sweep (locustfiles.probe)

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

    def public(self) -> dict[str, object]:
        """What run.json records of the options (:data:`runformat.options.RUN_OPTIONS`): each the
        setting named as its key, as its declaration says (:meth:`runformat.options.Option.recorded`);
        an option parsed into something else, as :data:`_AS_RECORDED` writes it back."""
        recorded = {}
        for key, declared in run_options.RECORDED.items():
            written_back = _AS_RECORDED.get(key)
            recorded[key] = declared.recorded(self, written_back(self) if written_back else getattr(self, key))
        return _recorded(**recorded)


def _span_text(span: tuple[float, float] | None) -> str | None:
    if span is None:
        return None
    low, high = span
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _resolution_text(refine_to: tuple[float, bool]) -> str:
    value, relative = refine_to
    return f"{value * 100:g}%" if relative else f"{value:g}"


#: How run.json records what an option was parsed into: as it was given (the names of the voices,
#: the trace's path ...); every other key records the setting of its name.
_AS_RECORDED: dict[str, Callable[[Settings], object]] = {
    "texts": lambda s: s.texts_source,
    "retry_on": lambda s: sorted(map(str, s.retry.retry_on)),
    "slo": lambda s: s.slo.spec if s.slo else None,
    "refine_to": lambda s: _resolution_text(s.refine_to),
    "voices": lambda s: [voice.name for voice in s.voices],
    "barge_in_after": lambda s: _span_text(s.barge_in_after),
    "headers": lambda s: [name for name, _ in s.headers],
    "grpc_metadata": lambda s: [key for key, _ in s.grpc_metadata],
    "probe_texts": lambda s: list(s.probe),
    "spike": lambda s: None if s.spike is None else f"{s.spike[0]:g}x{s.spike[1]:g}",
    "trace": lambda s: s.trace.path if s.trace else None,
}
_recorded = Builder("run.json's options", run_options.RUN_OPTIONS)


def parse_steps(raw) -> tuple[int, ...]:
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        steps = tuple(int(item) for item in items if str(item) != "")
    except ValueError:
        raise SettingsError(f"--steps must be comma-separated whole numbers like 1,2,4,8, got {raw!r}") from None
    if not steps or min(steps) < 1:
        raise SettingsError(f"--steps needs at least one concurrency of 1 or more, got {raw!r}")
    return steps


def parse_rates(raw) -> tuple[float, ...]:
    items = raw if isinstance(raw, list) else str(raw).replace(" ", "").split(",")
    try:
        rates = tuple(float(item) for item in items if str(item) != "")
    except ValueError:
        raise SettingsError(f"--rates must be comma-separated requests per second like 1,2,4,8, got {raw!r}") from None
    if not rates or not all(math.isfinite(rate) and rate > 0 for rate in rates):
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


def _retry_on(raw: str) -> frozenset[str | int]:
    out: set[str | int] = set()
    for tok in raw.replace(" ", "").split(","):
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
        except OSError as error:
            raise SettingsError(f"--tts-template file {raw[1:]} cannot be read: {error.strerror}") from None
    if "{text}" not in raw:
        raise SettingsError('--tts-template must contain "{text}" where the text goes')
    try:
        filled = json.loads(bodies.sample(raw))
    except json.JSONDecodeError as error:
        raise SettingsError(
            f"--tts-template is not valid JSON once its placeholders are filled in ({error.msg})"
        ) from None
    if form and not isinstance(filled, dict):
        raise SettingsError(
            "--tts-form sends a template's top-level fields as form fields: --tts-template must be a JSON object"
        )
    return raw


def _voice_steps(given: RunOptions, voices: tuple, steps: tuple, rates: tuple, steps_given: bool) -> tuple[int, ...]:
    raw = str(given.voice_steps).replace(" ", "")
    if not raw:
        return ()
    try:
        counts = tuple(int(item) for item in raw.split(",") if item)
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
    if str(given.soak).strip():
        raise SettingsError(
            "--soak holds one load, and --voice-steps sweeps voices at one load: run the soak on "
            "its own, with the number of voices it should draw from in --voices"
        )
    return counts


def _check_asks(settings: Settings) -> None:
    """Every request the run can make has a value for each placeholder of the template."""
    if settings.tts_template is None:
        return
    for text in dict.fromkeys(settings.texts + (settings.trace.texts if settings.trace else ())):
        for voice in (None,) if voices_mod.owns_voice(text) or not settings.voices else settings.voices:
            lack = bodies.missing(
                settings.tts_template, settings, voices_mod.ask_for(text, voice, settings.voice_upload)
            )
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


def _collectors(urls: tuple[str, ...], flag: str = "collector") -> tuple[str, ...]:
    out = []
    for item in urls:
        for url in item.replace(" ", "").split(","):
            if not url:
                continue
            if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise SettingsError(f"--{flag} must be an http:// URL, got {url!r}")
            out.append(url.rstrip("/"))
    return tuple(out)


def _slo(raw: str) -> slo_mod.SLO | None:
    if not raw.strip():
        return None
    try:
        return slo_mod.parse(raw)
    except slo_mod.SLOError as error:
        raise SettingsError(f"--slo: {error}") from None


def _soak(raw: str) -> float | None:
    text = raw.strip()
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


def _target(host: str | None, protocol: str) -> str:
    """The checked ``-H`` for ``--tts-protocol``."""
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


def _sessions(given: RunOptions, protocol: str, rates: tuple) -> tuple[presets.Preset | None, str]:
    """The dialect --tts-preset names (and its name as given), and what --turns, --think-time and
    --contexts ask of it."""
    preset = None
    source = given.tts_preset.strip()
    if source and protocol != "grpc":  # a gRPC service's preset is _grpc's to read
        if source in ("riva", "triton") or source.endswith(".json"):
            raise SettingsError(f"--tts-preset {source} is a gRPC service's preset: add --tts-protocol grpc")
        try:
            preset = presets.load(source)
        except presets.PresetError as error:
            raise SettingsError(str(error)) from None
        if preset.protocol != protocol:
            raise SettingsError(
                f"--tts-preset {source} is a {preset.protocol} dialect: add --tts-protocol {preset.protocol}"
            )
    elif protocol == "ws":
        raise SettingsError(
            f"--tts-protocol ws needs --tts-preset: one of {', '.join(presets.names())}, or a .toml "
            f"file of your own (configs/presets/README.md)"
        )
    contexts = given.contexts
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
    if given.turns and contexts > 1:
        raise SettingsError("--turns works with one utterance in flight per session, not with --contexts")
    if rates and (given.turns or given.think_time or contexts > 1):
        raise SettingsError("--turns, --think-time and --contexts work with --steps only, not with --rates")
    return preset, source


def parse_barge_in_after(raw) -> tuple[float, float] | None:
    """``--barge-in-after``: ``MS`` or ``LO-HI`` as (lo, hi) ms; empty: None (the default draw)."""
    text = str(raw or "").replace(" ", "")
    if not text:
        return None
    low, sep, high = text.partition("-")
    try:
        bounds = (float(low), float(high if sep else low))
    except ValueError:
        bounds = (math.nan, math.nan)
    if not all(math.isfinite(bound) and bound >= 0 for bound in bounds) or bounds[0] > bounds[1]:
        raise SettingsError(
            f"--barge-in-after must be ms after the first audio like 50, or a range like 50-400 "
            f"(low to high, 0 or more), got {raw!r}"
        )
    return bounds


def _barge_in(given: RunOptions, protocol: str, preset: presets.Preset | None) -> dict:
    """The barge-in group: --barge-in-after, --cancel-by (by default the preset's cancel message
    where it has one) and --barge-in-seed (by default a random one)."""
    if given.barge_in > 1:
        raise SettingsError(f"--barge-in must be a share of utterances from 0 to 1, got {given.barge_in!r}")
    has_message = preset is not None and "cancel" in preset.send
    cancel_by = given.cancel_by or ("message" if has_message else "close")
    if cancel_by == "message" and not has_message:
        what = f"preset {preset.name}" if preset is not None else f"--tts-protocol {protocol}"
        raise SettingsError(f"--cancel-by message needs a cancel message, and {what} has none: cancel by close")
    if given.barge_in and cancel_by == "close" and given.contexts > 1:
        raise SettingsError(
            "--cancel-by close would end every context on the session: with --contexts, cancel by message"
        )
    return dict(
        barge_in_after=parse_barge_in_after(given.barge_in_after),
        cancel_by=cancel_by,
        barge_in_seed=_seed(given.barge_in_seed),
    )


def _seed(given: int) -> int:
    """A seed as given, or a random one for a negative (the flag's default)."""
    return given if given >= 0 else random.SystemRandom().randrange(2**31)


def from_options(options, host: str | None) -> Settings:
    """Validate Locust's parsed options (command line, .conf file or web UI) into Settings: every
    option checked against its declaration, then each concern by its own function (the target and
    request, the load plan, streaming and sessions, retries, the plan's decisions, voices,
    barge-in, telemetry, output, ...), each mistake one sentence naming the option; then what only
    the options together can tell."""
    try:
        given = RunOptions.given(options)
    except ValueError as error:
        raise SettingsError(str(error)) from None
    protocol = given.tts_protocol
    host = _target(host, protocol)
    grpc = _grpc(given) if protocol == "grpc" else {}
    request = _request(given, protocol, grpc)
    plan = _plan(given, request["texts"])
    steps_given = plan.pop("steps_given")
    streaming = _streaming(given, protocol, plan["rates"], grpc)
    settings = Settings(
        **{
            **vars(given),
            "host": host,
            **request,
            **plan,
            **streaming,
            **_retries(given),
            **_decisions(given),
            **_voice_options(given, plan, steps_given),
            **_barge_in(given, protocol, streaming["preset"]),
            **_telemetry(given),
            **_output(given),
            **_listening(given),
            **_reach(given, host, protocol),
            **_capacity(given),
            "health_path": _health_path(given, protocol),
            **_probe(given, protocol, request["tts_form"], plan["rates"]),
            **_spike(given, plan["rates"]),
        }
    )
    if settings.trace is not None:
        _check_trace(settings)
    if protocol != "http" and (
        settings.voices
        or settings.tts_form
        or any(
            voices_mod.owns_voice(text) for text in settings.texts + (settings.trace.texts if settings.trace else ())
        )
    ):
        raise SettingsError(
            f"--tts-protocol {protocol} sends the one voice of --tts-voice: --voices, "
            f"--tts-form and voices named in the corpus or the trace are for HTTP requests"
        )
    _check_asks(settings)
    return settings


def _request(given: RunOptions, protocol: str, grpc: dict) -> dict:
    """The target and request group: what each request asks for and how (--tts-path, --tts-format,
    --tts-template and --tts-form, the corpus)."""
    api = given.tts_api
    path = given.tts_path or grpc.get("path") or APIS[api]
    if not path.startswith("/"):
        raise SettingsError(f"--tts-path must start with /, got {path!r}")
    audio_format = given.tts_format.lower()
    if audio_format not in FORMATS:
        raise SettingsError(f"--tts-format must be one of {', '.join(FORMATS)}, got {given.tts_format!r}")
    if api == "json" and not given.tts_template:
        raise SettingsError('--tts-api json needs --tts-template, e.g. \'{"text": "{text}"}\'')
    form = given.tts_form.strip()
    try:
        texts = corpus.load(str(given.texts) or None)
    except corpus.CorpusError as error:
        raise SettingsError(f"--texts: {error}") from None
    voice = given.tts_voice
    if protocol != "http" and voice == DEFAULTS["tts_voice"]:
        voice = ""  # OpenAI's voice: a session sends one only when it is named
    return dict(
        tts_path=path,
        tts_model=grpc.get("model", given.tts_model),
        tts_voice=grpc.get("voice", voice),
        tts_format=audio_format,
        tts_template=_template(str(given.tts_template), form) if api == "json" else None,
        tts_form=form,
        tts_language=grpc.get("language", ""),
        texts=tuple(texts),
        texts_source=str(given.texts or corpus.DEFAULT_CORPUS),
        texts_count=len(texts),
        grpc_preset=grpc.get("preset"),
    )


def _plan(given: RunOptions, texts: list) -> dict:
    """The load plan group: the levels (--steps, or --rates and its arrivals, or a --trace at
    --trace-speed), how long each is held and settles, the drain at the end, a soak."""
    steps_given = bool(str(given.steps).strip())
    steps = parse_steps(given.steps if steps_given else DEFAULT_STEPS)
    rates = parse_rates(given.rates) if str(given.rates).strip() else ()
    if rates and steps_given:
        raise SettingsError(
            "--rates and --steps were both given: use --rates for an open-loop run "
            "(requests per second) or --steps for a closed-loop one (concurrency), not both"
        )
    refine_to = parse_refine_to(given.refine_to or DEFAULT_REFINE_TO)
    trace, speeds = _trace(given, texts, rates, steps_given)
    if trace is not None:
        rates = tuple(speed * trace.base_rps for speed in speeds)
        refine_to = (trace_mod.REFINE_TO * trace.base_rps, False)
    elif not rates and str(given.refine_to or DEFAULT_REFINE_TO).strip() != DEFAULT_REFINE_TO:
        raise SettingsError(
            "--refine-to sets how close --refine brings two rates (--rates); a concurrency "
            "(--steps) is refined to adjacent whole numbers"
        )
    step_time = given.step_time or (STEP_REQUESTS_CAP_S if given.step_requests else DEFAULT_STEP_TIME_S)
    settle = given.settle_time
    if settle < 0:
        settle = 0.0 if given.step_requests else min(SETTLE_MAX_S, SETTLE_FRACTION * step_time)
    elif settle >= step_time:
        raise SettingsError(f"--settle-time ({settle:g} s) must be shorter than --step-time ({step_time:g} s)")
    drain = given.drain_time
    if drain < 0:
        drain = min(given.request_timeout, DRAIN_DEFAULT_MAX_S)
    elif drain > DRAIN_MAX_S:
        raise SettingsError(
            f"--drain-time must be at most {DRAIN_MAX_S:g} s (a master waits 60 s for its workers "
            f"to stop), got {given.drain_time!r}"
        )
    return dict(
        steps=steps,
        steps_given=steps_given,
        rates=rates,
        arrival_seed=_seed(given.arrival_seed),
        refine_to=refine_to,
        trace=trace,
        trace_speed=speeds,
        step_time=step_time,
        settle_time=settle,
        drain_time=drain,
        soak=_soak(str(given.soak)),
    )


def _streaming(given: RunOptions, protocol: str, rates: tuple, grpc: dict) -> dict:
    """The streaming and sessions group: whether responses are read as streams, the text paced in
    (--text-jitter) and the sessions (:func:`_sessions`)."""
    stream_format = given.tts_stream_format.lower()
    if stream_format not in STREAM_FORMATS:
        raise SettingsError(f"--tts-stream-format must be sse or audio, got {given.tts_stream_format!r}")
    preset, preset_source = _sessions(given, protocol, rates)
    if given.text_jitter > 1:
        raise SettingsError(f"--text-jitter must be a fraction from 0 to 1, got {given.text_jitter!r}")
    return dict(
        tts_stream=given.tts_stream
        or bool(stream_format)
        or protocol in ("ws", "wyoming")
        or grpc.get("stream", False),
        tts_stream_format=stream_format,
        preset=preset,
        tts_preset=preset_source,
    )


def _retries(given: RunOptions) -> dict:
    """The retries group: --retry-max-attempts, --retry-base-ms, --retry-max-ms, --retry-on and
    --retry-after-cap as one policy."""
    if given.retry_max_ms < given.retry_base_ms:
        raise SettingsError(
            f"--retry-max-ms ({given.retry_max_ms:g}) must not be below --retry-base-ms ({given.retry_base_ms:g})"
        )
    retry_on = _retry_on(given.retry_on)
    policy = RetryPolicy(
        given.retry_max_attempts, given.retry_base_ms, given.retry_max_ms, retry_on, given.retry_after_cap
    )
    return {"retry": policy}


def _decisions(given: RunOptions) -> dict:
    """The SLO and plan decisions group: --slo, and --refine (which needs it)."""
    slo = _slo(str(given.slo))
    if given.refine and slo is None:
        raise SettingsError("--refine needs --slo: refinement bisects between a passing and a failing step")
    return {"slo": slo}


def _voice_options(given: RunOptions, plan: dict, steps_given: bool) -> dict:
    """The voices group: --voices and their mix and seed, a sweep over them (--voice-steps), and
    --voice-upload (which needs their reference clips)."""
    try:
        voices = voices_mod.parse_voices(str(given.voices))
        voices_mod.parse_mix(given.voice_mix)
    except voices_mod.VoiceError as error:
        raise SettingsError(str(error)) from None
    voice_steps = _voice_steps(given, voices, plan["steps"], plan["rates"], steps_given)
    if given.voice_upload and not any(voice.ref_audio is not None for voice in voices):
        raise SettingsError(
            "--voice-upload registers the reference clips of --voices: give it a .jsonl file "
            "whose voices have ref_audio"
        )
    return dict(
        voices=voices,
        voice_mix=given.voice_mix.strip(),
        voice_seed=_seed(given.voice_seed),
        voice_steps=voice_steps,
    )


def _telemetry(given: RunOptions) -> dict:
    """The telemetry group: the collectors, the server's own metrics and stats, and what its
    series mean (--server-role, --server-stage-label)."""
    try:
        parse_roles(list(given.server_role))
    except ValueError as error:
        raise SettingsError(str(error)) from None
    stage_label = (given.server_stage_label or "").strip() or None
    if stage_label is not None and not LABEL_NAME.fullmatch(stage_label):
        raise SettingsError(f"--server-stage-label takes a label name (letters, digits and _), got {stage_label!r}")
    return dict(
        collectors=_collectors(given.collector),
        collector_token=given.collector_token or None,
        server_metrics=_collectors(given.server_metrics, "server-metrics"),
        server_roles=tuple(part.strip() for item in given.server_role for part in item.split(",") if part.strip()),
        server_stats=_collectors(given.server_stats, "server-stats"),
        server_stage_label=stage_label,
    )


def _output(given: RunOptions) -> dict:
    """The output group: the run directory, where the audio goes, and the JUnit file."""
    run_dir = Path(str(given.run_dir)) if given.run_dir else default_run_dir()
    return dict(
        run_dir=run_dir,
        audio_dir=Path(str(given.audio_dir)) if given.audio_dir else run_dir / "audio",
        junit=Path(str(given.junit)) if given.junit else None,
    )


def _reach(given: RunOptions, host: str, protocol: str) -> dict:
    """--header, --grpc-metadata and TLS (:mod:`locustfiles.tls`): the credentials, their
    ``${VAR}`` read from the environment, and the client context a TLS target is reached with."""
    try:
        headers = tls.pairs(given.header, "--header", ":")
        metadata = tls.pairs(given.grpc_metadata, "--grpc-metadata", "=")
        secure = urlsplit(host).scheme in ("https", "wss", "grpcs")
        if (given.tls_client_cert or given.tls_client_key) and not secure:
            raise tls.CredentialError(
                f"--tls-client-cert is shown in a TLS handshake, but the target {host} is "
                f"plaintext: give -H https:// (wss://, grpcs://) or drop it"
            )
        context = (
            tls.client_context(
                given.tls_ca,
                given.tls_insecure,
                ("h2",) if protocol == "grpc" else (),
                given.tls_client_cert,
                given.tls_client_key,
            )
            if secure or given.tls_ca
            else None
        )
    except tls.CredentialError as error:
        raise SettingsError(str(error)) from None
    if metadata and protocol != "grpc":
        raise SettingsError("--grpc-metadata is for --tts-protocol grpc; HTTP and WebSocket take --header")
    if headers and protocol in ("grpc", "wyoming"):
        raise SettingsError(
            f"--header is for HTTP and WebSocket; --tts-protocol {protocol} "
            + ("takes --grpc-metadata" if protocol == "grpc" else "has no headers")
        )
    return {"headers": headers, "grpc_metadata": metadata, "tls": context if secure else None}


def _trace(given: RunOptions, texts, rates: tuple, steps_given: bool):
    """--trace and --trace-speed: the trace resolved against the corpus and its speeds."""
    path = str(given.trace).strip()
    raw = str(given.trace_speed).strip()
    if not path:
        if raw and raw != DEFAULTS["trace_speed"]:
            raise SettingsError("--trace-speed sets the speeds a trace is replayed at: give --trace FILE too")
        return None, ()
    if rates or steps_given:
        raise SettingsError(
            f"--trace replays its own arrivals at --trace-speed: drop --{'rates' if rates else 'steps'}"
        )
    try:
        speeds = trace_mod.parse_speeds(raw or "1")
        trace = trace_mod.load(path, tuple(texts))
    except trace_mod.TraceError as error:
        raise SettingsError(str(error)) from None
    if str(given.refine_to or DEFAULT_REFINE_TO).strip() != DEFAULT_REFINE_TO:
        raise SettingsError(f"--refine-to is for --rates; a trace's speeds are refined to {trace_mod.REFINE_TO:g}x")
    return trace, speeds


def _check_trace(settings: Settings) -> None:
    """What a trace replay cannot be combined with, and a replay too short to settle."""
    for flag, given in (
        ("--step-requests", settings.step_requests),
        ("--soak", settings.soak),
        ("--voice-steps", settings.voice_steps),
        ("--text-rate", settings.text_rate),
    ):
        if given:
            raise SettingsError(
                f"--trace replays each step for --step-time or the whole trace; {flag} does not apply to it"
            )
    for speed in settings.trace_speed or ():
        span = settings.trace.span_s(speed, settings.step_time)  # type: ignore[union-attr]  # trace speeds come with a trace
        if span <= settings.settle_time:
            raise SettingsError(
                f"--trace at {speed:g}x lasts {span:.1f} s, no longer than --settle-time "
                f"({settings.settle_time:g} s): nothing of it would be settled; lower that speed or "
                f"--settle-time"
            )


def _probe(given: RunOptions, protocol: str, form: str, rates: tuple) -> dict:
    """--probe-texts: its classes and their texts (the bytes-only class where the body is JSON)."""
    try:
        classes = probe_mod.parse(str(given.probe_texts).strip() or None)
    except probe_mod.ProbeError as error:
        raise SettingsError(str(error)) from None
    if classes and rates:
        raise SettingsError(
            "--probe-texts runs at concurrency 1 and the recommended concurrency: use it with --steps, not --rates"
        )
    json_body = protocol == "http" and not form
    return {"probe": classes, "probe_texts": tuple(probe_mod.texts(classes, json_body))}


def _spike(given: RunOptions, rates: tuple) -> dict:
    """--spike and --spike-at."""
    spec = str(given.spike).strip()
    start_level = given.spike_at or 0
    if not spec:
        if start_level:
            raise SettingsError("--spike-at is the level of --spike: give --spike FACTORxSECONDS too")
        return {"spike": None, "spike_at": None}
    try:
        factor, seconds = spike_mod.parse(spec)
    except spike_mod.SpikeError as error:
        raise SettingsError(str(error)) from None
    if rates:
        raise SettingsError("--spike multiplies a concurrency: use it with --steps, not --rates")
    if start_level < 0:
        raise SettingsError(f"--spike-at must be a concurrency of 1 or more, got {start_level}")
    return {"spike": (factor, seconds), "spike_at": start_level or None}


def _health_path(given: RunOptions, protocol: str) -> str:
    path = given.health_path.strip()
    if path and not path.startswith("/"):
        raise SettingsError(f"--health-path must be a path starting with /, such as /health, got {path!r}")
    if path and protocol in ("grpc", "wyoming"):
        raise SettingsError(
            f"--health-path is an HTTP path; --tts-protocol {protocol} has none (its health probe "
            f"is the warm-up request once more)"
        )
    return path


def _capacity(given: RunOptions) -> dict:
    """--cost-per-hour, --plan-for and --headroom, checked before the run (the report reads them)."""
    cost, plan = str(given.cost_per_hour).strip(), str(given.plan_for).strip()
    try:
        return dict(
            cost_per_hour=capacity_mod.parse_cost(cost) if cost else None,
            plan_for=capacity_mod.parse_demand(plan).spec if plan else None,
            headroom=capacity_mod.parse_headroom(given.headroom or DEFAULTS["headroom"]),
        )
    except capacity_mod.CapacityError as error:
        raise SettingsError(str(error)) from None


def _listening(given: RunOptions) -> dict:
    """The ASR judge's settings (--asr-*); the model itself is checked where the judge runs, the
    master or the local runner, before the run's first step (locustfiles.listening.check): a
    worker needs no recogniser installed."""
    model, language, metric = given.asr_model.strip(), given.asr_language.strip(), given.asr_metric.strip()
    reference = given.reference_voice.strip()
    if model and given.asr_keep:
        raise SettingsError(
            "--asr-keep keeps the clips for tts-knee judge without judging them, and --asr-model judges them "
            "during the run (keeping them too): give one"
        )
    if not (model or given.asr_keep) and (language or metric):
        raise SettingsError("--asr-language and --asr-metric tell the ASR judge how to listen: give --asr-model")
    told = [
        flag
        for flag, switched_on in (
            ("--asr-listen", given.asr_listen),
            ("--asr-words-only", given.asr_words_only),
            ("--reference-voice", reference),
            ("--asr-device", given.asr_device != "cpu"),
        )
        if switched_on
    ]
    if told and not model:
        later = " (tts-knee judge takes them for a run kept with --asr-keep)" if given.asr_keep else ""
        raise SettingsError(f"{' and '.join(told)} tell the ASR judge how to listen: give --asr-model{later}")
    if given.asr_words_only and (given.asr_listen or reference):
        raise SettingsError(hearing.CONTRARY)
    return {"asr_model": model, "asr_language": language, "asr_metric": metric, "reference_voice": reference}


def _grpc(given: RunOptions) -> dict:
    """What --tts-protocol grpc adds to the settings: the preset, the method called, and the
    voice, model and language the preset fills where the options were left at their defaults."""
    from .transports import grpc  # only gRPC runs need h2 and the published protos

    if not given.tts_preset:
        raise SettingsError("--tts-protocol grpc needs --tts-preset: riva, triton, or a preset file")
    try:
        preset, name = grpc.load_preset(given.tts_preset)
    except grpc.PresetError as error:
        raise SettingsError(str(error)) from None
    if given.tts_stream_format:
        raise SettingsError("--tts-stream-format is for HTTP; a gRPC stream is asked for with --tts-stream")
    out: dict[str, Any] = {"preset": preset, "language": given.tts_language or preset.get("language", "")}
    if preset["service"] == "riva":
        if given.tts_voice == DEFAULTS["tts_voice"]:
            out["voice"] = preset.get("voice", "")
    else:
        if given.tts_model == DEFAULTS["tts_model"]:
            out["model"] = preset["model"]
        if given.tts_stream and not preset.get("decoupled"):
            raise SettingsError(
                f"--tts-stream needs a decoupled Triton model; --tts-preset {name} says "
                f'"decoupled": false, so its answers are whole'
            )
        out["stream"] = bool(preset.get("decoupled"))
    out["path"] = grpc.method_path(preset, given.tts_stream or out.get("stream", False))
    return out
