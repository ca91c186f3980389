"""Voices a run draws from, and how each request is given one.

``--voices LIST|@FILE``: names, comma-separated, or a file of them: a ``.txt`` file with one
name per line (blank lines and ``#`` comments ignored), or a ``.jsonl`` file of objects with
``voice`` (the name) and optional ``ref_audio`` (a reference clip, its path relative to the
file) and ``ref_text`` (what the clip says): one cloned voice per line.

A request whose corpus entry names a voice or a reference clip keeps its own; every other
request is given one by ``--voice-mix`` from the first N voices (N: all of them, or the step's
number with ``--voice-steps``):

- ``round-robin``: request i of a step (on each load process) gets voice ``(i + i // L) % N``,
  L the least common multiple of N and the corpus's size: the voices in turn, shifted by one
  each time the texts and voices have come round together, so that every text meets every voice;
- ``uniform``: each drawn with equal chance;
- ``zipf:S``: voice k (1-based) drawn with weight ``1 / k**S``, a few voices popular and a
  long tail, as real traffic is.

Draws are seeded (``--voice-seed``, recorded in run.json), so a run's mix can be drawn again.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from ..transports.base import Ask
from .corpus import Clip, CorpusError, Text, load_clip

#: Template placeholders whose value comes from the voice a request was given.
VOICE_ASKS = ("voice", "ref_audio_b64", "ref_text")


class VoiceError(ValueError):
    """The voice list or mix is unusable; the message names the option and what is wrong."""


@dataclass(frozen=True)
class Voice:
    name: str
    ref_audio: Clip | None = None
    ref_text: str | None = None


def parse_voices(raw: str) -> tuple[Voice, ...]:
    """``--voices``'s value as voices, in order; () when empty."""
    raw = str(raw or "").strip()
    if not raw:
        return ()
    if raw.startswith("@"):
        path = Path(raw[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise VoiceError(f"--voices file {path} cannot be read: {error.strerror}") from None
        except UnicodeDecodeError:
            raise VoiceError(f"--voices file {path} is not UTF-8 text") from None
        except ValueError:  # no file can have the name
            raise VoiceError(f"--voices file {str(path)!r} cannot be a file's name (it holds a NUL byte)") from None
        voices = (
            _jsonl(path, text)
            if path.suffix == ".jsonl"
            else [
                Voice(line.strip()) for line in text.splitlines() if line.strip() and not line.strip().startswith("#")
            ]
        )
        where = f"--voices file {path}"
    else:
        voices = [Voice(name.strip()) for name in raw.split(",") if name.strip()]
        where = "--voices"
    if not voices:
        raise VoiceError(f"{where} names no voices")
    seen = set()
    for voice in voices:
        if voice.name in seen:
            raise VoiceError(f"{where} names the voice {voice.name!r} twice")
        seen.add(voice.name)
    return tuple(voices)


def _jsonl(path: Path, text: str) -> list[Voice]:
    voices, clips = [], {}
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--voices file {path}, line {line_number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as error:
            raise VoiceError(f"{where} is not valid JSON ({error.msg})") from None
        name = obj.get("voice") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise VoiceError(f'{where} has no non-empty "voice" string')
        ref, ref_text = obj.get("ref_audio"), obj.get("ref_text")
        if ref_text is not None and not isinstance(ref_text, str):
            raise VoiceError(f"{where} (voice {name!r}) has ref_text {ref_text!r}; expected a string")
        clip = None
        if ref is not None:
            if not isinstance(ref, str) or not ref.strip():
                raise VoiceError(f"{where} (voice {name!r}) has ref_audio {ref!r}; expected the path of an audio file")
            clip_path = path.parent / ref
            if clip_path not in clips:
                try:
                    clips[clip_path] = load_clip(clip_path, f"{where} (voice {name!r})")
                except CorpusError as error:
                    raise VoiceError(str(error)) from None
            clip = clips[clip_path]
        voices.append(Voice(name.strip(), clip, ref_text))
    return voices


def owns_voice(text: Text) -> bool:
    """Whether the corpus entry names its own voice (a name or a reference clip)."""
    return text.voice is not None or text.ref_audio is not None


def ask_for(text: Text, voice: Voice | None, by_name: bool = False) -> Ask:
    """What the request for ``text`` asks for, given ``voice`` (ignored when the entry names its
    own). ``by_name``: the voices are registered on the server (``--voice-upload``), so a voice
    from the list is asked for by its name alone."""
    if owns_voice(text) or voice is None:
        return Ask(text.voice, text.language, text.speed, text.instructions, text.ref_audio, text.ref_text)
    if by_name:
        return Ask(voice.name, text.language, text.speed, text.instructions)
    return Ask(voice.name, text.language, text.speed, text.instructions, voice.ref_audio, voice.ref_text)


def parse_mix(raw: str) -> tuple[str, float]:
    """``--voice-mix``'s value as (kind, Zipf exponent; 0 for the others)."""
    raw = str(raw or "").strip()
    kind, _, exponent = raw.partition(":")
    if kind in ("round-robin", "uniform") and not exponent:
        return kind, 0.0
    if kind == "zipf":
        try:
            zipf_exponent = float(exponent)
        except ValueError:
            zipf_exponent = float("nan")
        if zipf_exponent > 0 and zipf_exponent != float("inf"):
            return kind, zipf_exponent
    raise VoiceError(
        f"--voice-mix takes round-robin, uniform or zipf:S with S a number above 0 (zipf:1.1, say), got {raw!r}"
    )


class Mix:
    """Which voice a step's request ``request_index`` gets, from the first ``voice_count`` of ``voices``."""

    def __init__(self, voices: tuple[Voice, ...], kind: str, exponent: float, seed: int, texts: int):
        self.voices, self.kind, self.texts = voices, kind, max(1, texts)
        self.rng = random.Random(seed)
        self._weights = (
            list(accumulate(1.0 / (rank**exponent) for rank in range(1, len(voices) + 1))) if kind == "zipf" else None
        )

    def pick(self, request_index: int, voice_count: int) -> Voice:
        voice_count = min(voice_count, len(self.voices))
        if self.kind == "round-robin":
            return self.voices[(request_index + request_index // math.lcm(voice_count, self.texts)) % voice_count]
        if self.kind == "uniform":
            return self.voices[self.rng.randrange(voice_count)]
        assert self._weights is not None  # zipf, the one kind left
        return self.rng.choices(self.voices[:voice_count], cum_weights=self._weights[:voice_count])[0]
