"""Session presets: a server's JSON-over-WebSocket dialect as data, one TOML file each
(``configs/presets/NAME.toml``, or any file given to ``--tts-preset``), read and checked here.

A preset says what the client sends to open a connection, to begin an utterance, per piece of
text, to flush, to end the text and to close (``[send]``: one table per message, the JSON
object it sends), and how to read what the server sends (``[receive]``: a binary frame is
audio or an error; each JSON text frame is classified by the first ``[[receive.rule]]`` whose
``match`` holds). The format, key by key, is in ``configs/presets/README.md``; a mistake in a
file is one sentence naming the file, the key and what was expected (:class:`PresetError`).

String values in ``[send]``, ``path``, ``query`` and ``headers`` may hold placeholders:
``{text}``, ``{voice}``, ``{model}``, ``{context_id}`` (one per utterance), ``{utterance}``
(its number on the connection) and ``{env.NAME}``. A value that is exactly one placeholder
takes the value's type; a key whose placeholder has no value (no ``--tts-voice``, an unset
variable) is left out. A frame that cannot be what the dialect says (a text frame that is not
JSON, audio that is not base64, a binary frame where the dialect sends none) raises
:class:`~audio.containers.StreamError` with one sentence.
"""

from __future__ import annotations

import binascii
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from tts_knee.audio.containers import StreamError

#: The presets that ship with tts-knee (``--tts-preset NAME``).
PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "presets"
#: Protocols whose dialects are presets.
PROTOCOLS = ("ws",)
SENDS = ("open", "begin", "text", "flush", "end", "cancel", "close", "keepalive")
#: What a rule makes of a frame. ``cancelled`` answers the ``cancel`` message (barge-in).
EVENTS = ("audio", "audio_start", "flushed", "end", "cancelled", "error", "ignore")
ENDS_ON = ("end", "ack_of_end")
ENCODINGS = ("pcm_s16le",)
_KEYS = {
    "name",
    "protocol",
    "path",
    "query",
    "headers",
    "reuse",
    "contexts",
    "ends_on",
    "min_interval_ms",
    "keepalive_s",
    "audio",
    "send",
    "receive",
}
_RULE_KEYS = {"match", "event", "audio", "rate", "context", "message", "fatal"}
_PLACEHOLDER = re.compile(r"\{(text|voice|model|context_id|utterance|env\.[A-Za-z_][A-Za-z0-9_]*)\}")
_UNSET = object()
SNIPPET_CHARS = 80


class PresetError(ValueError):
    """A preset that cannot be used: one sentence naming the file, the key and what it must be."""


@dataclass(frozen=True, slots=True)
class Frame:
    """What one server frame is to the utterance: ``event`` (one of :data:`EVENTS`), the audio
    it carries, the sample rate it names, the context it belongs to, an error's message and
    whether that error ends the utterance."""

    event: str
    audio: bytes = b""
    rate: int | None = None
    context: object = None
    message: str | None = None
    fatal: bool = True


@dataclass(frozen=True, slots=True)
class Rule:
    match: tuple  # ((path, value), ...): every field must hold its value ("*": present, not null)
    event: str
    audio: tuple | None  # the field holding base64 audio, as a path
    rate: tuple | None
    context: tuple | None
    message: tuple  # fields tried in order for an error's sentence, as paths
    fatal: bool


@dataclass(frozen=True)
class Preset:
    name: str
    file: Path
    protocol: str
    path: str
    query: dict
    headers: dict
    reuse: bool  # several utterances per connection; False: one connection per utterance
    contexts: int  # utterances the dialect keeps in flight on one connection
    ends_on: str  # "end": a rule's end event; "ack_of_end": the flushed that answers the end
    min_interval_s: float  # sends of text at least this far apart (servers that drop fast senders)
    rate: int  # the audio's sample rate unless the server names it
    channels: int
    send: dict  # kind -> the JSON object it sends (placeholders unfilled)
    binary: str  # "audio" or "error"
    rules: tuple
    keepalive_s: float | None = None  # send.keepalive this often while a kept connection idles

    @property
    def routed(self) -> bool:
        """Frames name the utterance they belong to (contexts)."""
        return any(rule.context for rule in self.rules)

    @property
    def acks_cancel(self) -> bool:
        """The server answers the ``cancel`` message (a rule's ``cancelled`` event)."""
        return any(rule.event == "cancelled" for rule in self.rules)

    def url(self, host: str, values: dict) -> str:
        """The WebSocket URL for the run's ``-H`` (``http://`` -> ``ws://``, ``https://`` -> ``wss://``)."""
        parts = urlsplit(host)
        scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}[parts.scheme]
        path = render(self.path, values)
        if path is _UNSET:
            raise PresetError(
                f"preset {self.file}: `path` names a placeholder with no value ({self.path}); "
                f"give --tts-voice or --tts-model"
            )
        query = {
            name: value
            for name, value in ((name, render(value, values)) for name, value in self.query.items())
            if value is not _UNSET
        }
        base = parts.path.rstrip("/")
        return f"{scheme}://{parts.netloc}{base}{quote(path)}" + (f"?{urlencode(query)}" if query else "")

    def handshake_headers(self, values: dict) -> list[str]:
        return [
            f"{name}: {value}"
            for name, value in ((name, render(value, values)) for name, value in self.headers.items())
            if value is not _UNSET
        ]

    def messages(self, kind: str, values: dict) -> list[str]:
        """The JSON texts the client sends for ``kind``, in order: one, or the sequence a
        ``[[send.KIND]]`` array gives (ElevenLabs ends a context with a flush, then a
        close_context); none when the dialect has no such message."""
        return [
            json.dumps(render(body, values), ensure_ascii=False, separators=(",", ":"))
            for body in self.send.get(kind) or ()
        ]

    def message(self, kind: str, values: dict) -> str | None:
        """The first of :meth:`messages` (the only one, but for a sequence), or None."""
        out = self.messages(kind, values)
        return out[0] if out else None

    def classify(self, frame) -> Frame:
        """What a frame is: ``bytes`` for a binary frame, ``str`` for a text one."""
        if isinstance(frame, (bytes, bytearray, memoryview)):
            if self.binary == "audio":
                return Frame("audio", bytes(frame))
            raise StreamError(f"the server sent a binary frame, which the {self.name} dialect never sends")
        try:
            obj = json.loads(frame)
        except ValueError:
            raise StreamError(f"the server sent a text frame that is not JSON: {_snippet(frame)!r}") from None
        if not isinstance(obj, dict):
            raise StreamError(f"the server sent JSON that is not an object: {_snippet(frame)!r}")
        for rule in self.rules:
            if all(_holds(_get(obj, path), want) for path, want in rule.match):
                return self._apply(rule, obj, frame)
        return Frame("ignore")

    def _apply(self, rule: Rule, obj: dict, frame: str) -> Frame:
        context = None if rule.context is None else _get(obj, rule.context)
        context = None if context is _UNSET else context
        rate = None if rule.rate is None else _get(obj, rule.rate)
        rate = rate if type(rate) is int and 0 < rate <= 1_000_000 else None
        if rule.event == "audio":
            assert rule.audio is not None  # the dialect check: an audio rule names its field
            b64 = _get(obj, rule.audio)
            if not isinstance(b64, str):
                raise StreamError(
                    f"an audio frame has no base64 string in {_dotted(rule.audio)!r}: {_snippet(frame)!r}"
                )
            try:
                audio = binascii.a2b_base64(b64, strict_mode=True)
            except (binascii.Error, ValueError) as error:  # ValueError: non-ASCII text
                raise StreamError(f"an audio frame's {_dotted(rule.audio)!r} is not base64 ({error})") from None
            return Frame("audio", audio, rate, context)
        if rule.event == "error":
            said = next(
                (
                    found
                    for found in (_get(obj, path) for path in rule.message)
                    if found is not _UNSET and found is not None
                ),
                None,
            )
            message = " ".join(str(said).split())[:200] if said is not None else _snippet(frame)
            return Frame("error", rate=rate, context=context, message=message, fatal=rule.fatal)
        return Frame(rule.event, rate=rate, context=context)


def render(value, values: dict):
    """``value`` with its placeholders filled from ``values`` (see the module doc); _UNSET for a
    string whose placeholder has no value, and such keys and items are left out."""
    if isinstance(value, dict):
        return {
            key: rendered
            for key, rendered in ((key, render(item, values)) for key, item in value.items())
            if rendered is not _UNSET
        }
    if isinstance(value, list):
        return [rendered for rendered in (render(item, values) for item in value) if rendered is not _UNSET]
    if not isinstance(value, str) or "{" not in value:
        return value
    whole = _PLACEHOLDER.fullmatch(value)
    if whole:
        return _lookup(whole.group(1), values)
    missing = False

    def fill(match):
        nonlocal missing
        found = _lookup(match.group(1), values)
        missing = missing or found is _UNSET
        return "" if found is _UNSET else str(found)

    out = _PLACEHOLDER.sub(fill, value)
    return _UNSET if missing else out


def _lookup(key: str, values: dict):
    value = os.environ.get(key[4:]) if key.startswith("env.") else values.get(key)
    return _UNSET if value is None or value == "" else value


def _get(obj, path: tuple):
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _UNSET
        obj = obj[part]
    return obj


def _holds(value, want) -> bool:
    if want == "*":
        return value is not _UNSET and value is not None
    return value is not _UNSET and type(value) is type(want) and value == want


def _dotted(path: tuple) -> str:
    return ".".join(path)


def _snippet(text) -> str:
    return " ".join(str(text)[:SNIPPET_CHARS].split())


# ---- reading a file -------------------------------------------------------------------------


def names() -> list[str]:
    """The presets that ship with tts-knee."""
    return sorted(path.stem for path in PRESET_DIR.glob("*.toml"))


def find(name_or_file: str) -> Path:
    """The file ``--tts-preset`` names: a shipped preset's name, or a path."""
    path = Path(name_or_file)
    if path.suffix == ".toml" or path.parent != Path("."):
        return path
    shipped = PRESET_DIR / f"{name_or_file}.toml"
    if name_or_file not in names():
        raise PresetError(
            f"--tts-preset {name_or_file!r} is neither a preset tts-knee ships ({', '.join(names())}) nor a .toml file"
        )
    return shipped


def load(name_or_file: str) -> Preset:
    """Read and check a preset; raises :class:`PresetError` with one sentence."""
    path = find(name_or_file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:  # ValueError: no file can have the name (a NUL in it), or not UTF-8
        why = (
            "it is not UTF-8 text"
            if isinstance(error, UnicodeDecodeError)
            else getattr(error, "strerror", None) or error
        )
        raise PresetError(f"preset {path} cannot be read: {why}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PresetError(f"preset {path} is not valid TOML: {error}") from None
    return _Checker(path).preset(raw)


class _Checker:
    """Checks one preset's keys, each failure one sentence naming the file and the key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, expected: str):
        raise PresetError(f"preset {self.path}: `{key}` {expected}")

    def kind(self, raw: dict, key: str, types, expected: str, default=_UNSET):
        value = raw.get(key.rsplit(".", 1)[-1], default)
        if value is _UNSET:
            self.fail(key, f"is missing; it must be {expected}")
        if not isinstance(value, types) or isinstance(value, bool) and types is not bool:  # TOML true is no number
            self.fail(key, f"must be {expected}, not {value!r}")
        return value

    def table(self, raw: dict, key: str) -> dict:
        return self.kind(raw, key, dict, "a table", {})

    def strings(self, raw: dict, key: str) -> dict:
        table = self.table(raw, key)
        for name, value in table.items():
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                self.fail(f"{key}.{name}", f"must be a string or a number, not {value!r}")
        return {name: str(value) for name, value in table.items()}

    def audio(self, audio: dict) -> tuple[int, int]:
        """The preset's ``[audio]``: ``(rate, channels)`` (its encoding is PCM16, checked)."""
        unknown = sorted(set(audio) - {"encoding", "rate", "channels"})
        if unknown:
            self.fail(f"audio.{unknown[0]}", "is not an [audio] key; the keys are encoding, rate, channels")
        encoding = self.kind(audio, "audio.encoding", str, f"one of {', '.join(ENCODINGS)}", "pcm_s16le")
        if encoding not in ENCODINGS:
            self.fail(
                "audio.encoding",
                f"must be one of {', '.join(ENCODINGS)} (the audio tts-knee times and writes), not {encoding!r}",
            )
        rate = self.kind(audio, "audio.rate", int, "a sample rate in Hz", 24000)
        channels = self.kind(audio, "audio.channels", int, "a number of channels", 1)
        if not 0 < rate <= 1_000_000 or not 0 < channels <= 64:
            self.fail("audio.rate" if not 0 < rate <= 1_000_000 else "audio.channels", "is out of range")
        return rate, channels

    def receive(self, receive: dict, ends_on: str) -> tuple[str, tuple]:
        """The preset's ``[receive]``: ``(what binary frames are, its rules)``, the rules checked
        to end an utterance as ``ends_on`` says and to find its audio."""
        unknown = sorted(set(receive) - {"binary", "rule"})
        if unknown:
            self.fail(f"receive.{unknown[0]}", "is not a [receive] key; the keys are binary and rule")
        binary = self.kind(receive, "receive.binary", str, '"audio" or "error"', "audio")
        if binary not in ("audio", "error"):
            self.fail("receive.binary", f'must be "audio" or "error", not {binary!r}')
        rules_raw = self.kind(receive, "receive.rule", list, "a list of [[receive.rule]] tables", [])
        rules = tuple(self.rule(rule, number) for number, rule in enumerate(rules_raw, 1))
        events = {rule.event for rule in rules}
        needed = "end" if ends_on == "end" else "flushed"
        if needed not in events:
            self.fail(
                "receive.rule",
                f"has no rule whose event is {needed!r}, which ends an utterance (ends_on = {ends_on!r})",
            )
        if binary != "audio" and "audio" not in events:
            self.fail("receive.rule", "has no audio rule, and binary frames are not audio: nothing would be audio")
        return binary, rules

    def keepalive(self, raw: dict, send: dict, reuse: bool) -> float | int | None:
        """``keepalive_s``, checked against its message (``send.keepalive``) and ``reuse``."""
        keepalive = (
            None if "keepalive_s" not in raw else self.kind(raw, "keepalive_s", (int, float), "a number of seconds > 0")
        )
        if keepalive is not None and not keepalive > 0:
            self.fail("keepalive_s", f"must be a number of seconds > 0, not {keepalive}")
        if (keepalive is None) != ("keepalive" not in send):
            self.fail(
                "keepalive_s" if keepalive is None else "send.keepalive",
                "is missing: a keepalive needs both its message (send.keepalive) and how often (keepalive_s)",
            )
        if keepalive is not None and not reuse:
            self.fail("keepalive_s", "is set, but reuse is false: a connection used once never idles")
        return keepalive

    def preset(self, raw: dict) -> Preset:
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            self.fail(unknown[0], f"is not a preset key; the keys are {', '.join(sorted(_KEYS))}")
        protocol = self.kind(raw, "protocol", str, f"one of {', '.join(PROTOCOLS)}")
        if protocol not in PROTOCOLS:
            self.fail("protocol", f"must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        path = self.kind(raw, "path", str, "the endpoint's path, starting with /")
        if not path.startswith("/"):
            self.fail("path", f"must start with /, not {path!r}")
        contexts = self.kind(raw, "contexts", int, "a whole number of 1 or more", 1)
        if contexts < 1:
            self.fail("contexts", f"must be 1 or more, not {contexts}")
        ends_on = self.kind(raw, "ends_on", str, f"one of {', '.join(ENDS_ON)}", "end")
        if ends_on not in ENDS_ON:
            self.fail("ends_on", f"must be one of {', '.join(ENDS_ON)}, not {ends_on!r}")
        interval = self.kind(raw, "min_interval_ms", (int, float), "a number of ms, 0 or more", 0)
        if interval < 0:
            self.fail("min_interval_ms", f"must be 0 or more, not {interval}")
        rate, channels = self.audio(self.table(raw, "audio"))
        send = self.sends(self.table(raw, "send"))
        binary, rules = self.receive(self.table(raw, "receive"), ends_on)
        reuse = self.kind(raw, "reuse", bool, "true or false", False)
        if contexts > 1 and not reuse:
            self.fail("contexts", "is more than 1, but reuse is false: contexts share one connection")
        if contexts > 1 and not any(rule.context for rule in rules):
            self.fail(
                "contexts",
                "is more than 1, but no rule names the field that says which context a frame belongs to (`context`)",
            )
        keepalive = self.keepalive(raw, send, reuse)
        return Preset(
            name=self.kind(raw, "name", str, "a name", self.path.stem),
            file=self.path,
            protocol=protocol,
            path=path,
            query=self.strings(raw, "query"),
            headers=self.strings(raw, "headers"),
            reuse=reuse,
            contexts=contexts,
            ends_on=ends_on,
            min_interval_s=interval / 1000.0,
            rate=rate,
            channels=channels,
            send=send,
            binary=binary,
            rules=rules,
            keepalive_s=None if keepalive is None else float(keepalive),
        )

    def sends(self, send: dict) -> dict:
        unknown = sorted(set(send) - set(SENDS))
        if unknown:
            self.fail(f"send.{unknown[0]}", f"is not a message tts-knee sends; the messages are {', '.join(SENDS)}")
        for kind in ("text", "end"):
            if kind not in send:
                self.fail(f"send.{kind}", "is missing: every dialect needs the text and the end of the text")
        out: dict[str, Any] = {}
        for kind, bodies in send.items():
            many = isinstance(bodies, list)
            if many and (kind == "text" or not bodies):
                self.fail(
                    f"send.{kind}",
                    "must be one table: the text goes in one message"
                    if kind == "text"
                    else "must hold at least one message",
                )
            out[kind] = []
            for i, body in enumerate(bodies if many else [bodies]):
                where = f"send.{kind}[{i}]" if many else f"send.{kind}"
                if not isinstance(body, dict):
                    self.fail(where, f"must be a table (the JSON object sent), not {body!r}")
                base = body.get("extends")
                if base is not None:
                    if base not in send or not isinstance(send[base], dict) or "extends" in send[base]:
                        self.fail(
                            f"{where}.extends",
                            f"must name another [send] message (one table) that extends none, not {base!r}",
                        )
                    body = {**send[base], **{key: value for key, value in body.items() if key != "extends"}}
                out[kind].append(body)
        if "{text}" not in json.dumps(out["text"]):
            self.fail("send.text", 'must hold "{text}" where each piece of text goes')
        return out

    def rule(self, rule, number: int) -> Rule:
        key = f"receive.rule[{number}]"
        if not isinstance(rule, dict):
            self.fail(key, "must be a table")
        unknown = sorted(set(rule) - _RULE_KEYS)
        if unknown:
            self.fail(f"{key}.{unknown[0]}", f"is not a rule key; the keys are {', '.join(sorted(_RULE_KEYS))}")
        match = self.kind(rule, f"{key}.match", dict, "a table of field = value")
        if not match:
            self.fail(f"{key}.match", "is empty: a rule needs at least one field to match")
        event = self.kind(rule, f"{key}.event", str, f"one of {', '.join(EVENTS)}")
        if event not in EVENTS:
            self.fail(f"{key}.event", f"must be one of {', '.join(EVENTS)}, not {event!r}")

        def path(name):
            dotted = rule.get(name)
            if dotted is None:
                return None
            if not isinstance(dotted, str) or not dotted:
                self.fail(f"{key}.{name}", f"must name a field (dotted for nested ones), not {dotted!r}")
            return tuple(dotted.split("."))

        audio = path("audio")
        if event == "audio" and audio is None:
            self.fail(f"{key}.audio", "is missing: an audio rule names the field holding base64 audio")
        message = rule.get("message", [])
        message = [message] if isinstance(message, str) else message
        if not isinstance(message, list) or not all(isinstance(field, str) and field for field in message):
            self.fail(f"{key}.message", f"must be a field name or a list of them, not {rule.get('message')!r}")
        fatal = self.kind(rule, f"{key}.fatal", bool, "true or false", True)
        return Rule(
            tuple(_flatten(match)),
            event,
            audio,
            path("rate"),
            path("context"),
            tuple(tuple(field.split(".")) for field in message),
            fatal,
        )


def _flatten(match: dict, prefix: tuple = ()):
    """``{"a": {"b": 1}}`` as ``((("a", "b"), 1),)``; dotted keys split likewise."""
    for key, value in match.items():
        path = prefix + tuple(key.split("."))
        if isinstance(value, dict):
            yield from _flatten(value, path)
        else:
            yield path, value
