"""The HTTP request body for one utterance: its words and its :class:`~locustfiles.transports.Ask`
(voice, language, speed, instructions, a reference clip and its text) in the run's request shape.

- ``openai``: ``/v1/audio/speech``'s JSON: ``model``, ``input``, ``response_format``, ``voice``
  (the request's, else ``--tts-voice``), and where the request has them ``language``, ``speed``,
  ``instructions``, ``ref_audio`` (the clip as a base64 ``data:`` URL, as vLLM-Omni takes it)
  and ``ref_text``.
- ``piper``: ``{"text"}``, with ``voice`` (piper's server loads that voice from its data
  directory) and ``length_scale`` (1 / speed) where the request has them.
- ``json``: ``--tts-template`` with each placeholder filled: ``{text}``, ``{voice}``,
  ``{language}``, ``{instructions}`` and ``{ref_text}`` as JSON string content, ``{speed}`` as a
  number, ``{ref_audio_b64}`` as the clip's bytes in base64. A placeholder the request has no
  value for is refused before the run (:func:`missing`).

``--tts-form FIELD`` sends the same fields as multipart/form-data instead (each top-level field
a form field: strings as they are, anything else as JSON) with the reference clip as a file
part named FIELD, as XTTS-style servers (``speaker_wav``) and the cloning servers' wrappers
take it; urllib3 (a dependency of Locust's) encodes it.
"""

from __future__ import annotations

import base64
import json
import re

from ..transports.base import Ask

JSON_TYPE = "application/json; charset=utf-8"
PLACEHOLDERS = ("text", "voice", "language", "speed", "instructions", "ref_audio_b64", "ref_text")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
#: What a template is checked with: every placeholder filled with a value of its kind.
_SAMPLE = dict.fromkeys(PLACEHOLDERS, "x") | {"speed": "1"}


def used(template: str) -> list[str]:
    """The placeholders ``template`` uses, in order of first use."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(template)))


def sample(template: str) -> str:
    """``template`` with every placeholder filled, to check it is JSON."""
    return _PLACEHOLDER.sub(lambda match: _SAMPLE[match.group(1)], template)


def values(settings, text: str, ask: Ask) -> dict:
    """Each placeholder's value for this request (None: it has none)."""
    clip = ask.ref_audio
    return {
        "text": text,
        "voice": ask.voice or settings.tts_voice or None,
        "language": ask.language,
        "speed": ask.speed,
        "instructions": ask.instructions,
        "ref_audio_b64": None if clip is None else base64.b64encode(clip.data).decode("ascii"),
        "ref_text": ask.ref_text,
    }


def missing(template: str, settings, ask: Ask) -> list[str]:
    """The placeholders of ``template`` this request has no value for."""
    have = values(settings, "", ask)
    return [name for name in used(template) if name != "text" and have[name] is None]


def voice_label(settings, ask: Ask) -> str | None:
    """The voice a request names, as its record says: its own, else the clip's file name,
    else ``--tts-voice`` where the request shape sends it."""
    if ask.voice:
        return ask.voice
    if ask.ref_audio is not None:
        return ask.ref_audio.name
    return (settings.tts_voice or None) if settings.tts_api != "piper" else None


def fields(settings, text: str, ask: Ask) -> dict:
    """The request's fields in the run's request shape, the clip among them unless it goes as a
    form's file part."""
    clip = None if settings.tts_form else ask.ref_audio
    if settings.tts_api == "openai":
        body = {"model": settings.tts_model, "input": text, "response_format": settings.tts_format}
        if ask.voice or settings.tts_voice:
            body["voice"] = ask.voice or settings.tts_voice
        for key in ("language", "speed", "instructions"):
            if getattr(ask, key) is not None:
                body[key] = getattr(ask, key)
        if clip is not None:
            body["ref_audio"] = f"data:{clip.content_type};base64,{base64.b64encode(clip.data).decode('ascii')}"
        if ask.ref_text is not None:
            body["ref_text"] = ask.ref_text
        if settings.tts_stream:
            body["stream"] = True
        if settings.tts_stream_format:
            body["stream_format"] = settings.tts_stream_format
        return body
    if settings.tts_api == "piper":
        body = {"text": text}
        if ask.voice:
            body["voice"] = ask.voice
        if ask.speed:
            body["length_scale"] = round(1.0 / ask.speed, 6)
        return body
    return json.loads(fill(settings.tts_template, values(settings, text, ask)))


def fill(template: str, vals: dict) -> str:
    """``template`` with its placeholders filled from ``vals`` in one pass (a text that holds
    "{voice}" stays as it is)."""

    def one(match) -> str:
        value = vals[match.group(1)]
        if match.group(1) == "speed":
            return json.dumps(value)
        return json.dumps(value, ensure_ascii=False)[1:-1]  # escaped for a JSON string literal

    return _PLACEHOLDER.sub(one, template)


def body(settings, text: str, ask: Ask) -> tuple[bytes, str]:
    """(the request body, its content type)."""
    if not settings.tts_form:
        if settings.tts_api == "json":  # the template as written, not re-encoded
            return fill(settings.tts_template, values(settings, text, ask)).encode(
                "utf-8", "surrogateescape"
            ), JSON_TYPE
        # surrogateescape: a probe text's escaped byte (--probe-texts invalid-utf8) goes as that byte
        return json.dumps(fields(settings, text, ask), ensure_ascii=False).encode("utf-8", "surrogateescape"), JSON_TYPE
    # imported here: urllib3 imported before Locust patches ssl for gevent breaks Locust's import
    from urllib3 import encode_multipart_formdata

    parts: list[tuple[str, str | tuple[str, bytes, str]]] = [
        (name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for name, value in fields(settings, text, ask).items()
    ]
    if ask.ref_audio is not None:
        parts.append((settings.tts_form, (ask.ref_audio.name, ask.ref_audio.data, ask.ref_audio.content_type)))
    return encode_multipart_formdata(parts)
