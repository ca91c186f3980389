"""Text corpora: the batch of texts sent, in the same order, at every step.

A corpus is a ``.txt`` file (one text per line; blank lines and ``#`` comments ignored) or a
``.jsonl`` file of objects with ``text`` and optional ``id`` and ``tier``, and what the request
for that text asks for beside its words: ``voice``, ``language``, ``speed`` (a number above 0),
``instructions``, ``ref_audio`` (a reference clip to clone the voice from: a WAV, MP3, Ogg, AAC
or FLAC file, its path relative to the corpus file) and ``ref_text`` (what the clip says). An
entry's ``text_language`` names the language its text is written in for tts-knee alone, never
sent: its records' ``language`` (slices by language) and the language the ASR judge listens for,
where the entry asks for no ``language`` (which is sent, in the request shape's own place for it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tts_knee.audio.containers import audio_kind

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "configs" / "texts" / "default.jsonl"
TIERS = ("short", "medium", "long")
#: Tier boundaries in characters when a corpus does not name the tier.
SHORT_MAX_CHARS, MEDIUM_MAX_CHARS = 40, 160
#: The content type each kind of reference clip is sent with.
CLIP_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac"}
#: Optional string fields of a corpus entry (the request's mix; ``ref_audio`` names a file).
_ASKS = ("voice", "language", "instructions", "ref_text")
#: Optional string fields of a corpus entry that describe its text and are never sent.
_LABELS = ("text_language",)
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；…])\s*")
_SOFT_BREAK = re.compile(r"(?<=[,，、:：])\s*|\s+")


class CorpusError(ValueError):
    """The corpus file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Clip:
    """A reference clip, read once: a request sends the same bytes every time. Compared and
    hashed by its path alone."""

    path: str
    data: bytes = field(repr=False, compare=False)
    content_type: str = field(compare=False, default="audio/wav")

    @property
    def name(self) -> str:
        return Path(self.path).name


@dataclass(frozen=True)
class Text:
    id: str
    text: str
    tier: str
    voice: str | None = None
    language: str | None = None
    speed: float | None = None
    instructions: str | None = None
    ref_audio: Clip | None = None
    ref_text: str | None = None
    text_language: str | None = None  # the language of the text, never sent (the module doc)

    @property
    def written_in(self) -> str | None:
        """The language the text is written in: the one its request asks for, else its label."""
        return self.language or self.text_language


def unique(text: Text, request_number: int) -> Text:
    """``text`` made a text of its own for request ``request_number`` (--text-reuse unique): the
    number and a comma put first, so that neither an answer cache nor a prefix cache has seen it,
    while its length (a few characters more) and its words stay the corpus's."""
    return replace(text, text=f"{request_number}, {text.text}")


def load_clip(path: Path, what: str) -> Clip:
    """The reference clip at ``path``; raises CorpusError naming ``what`` (the entry that names
    it) when the file is missing, unreadable or not audio."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{what} has ref_audio {str(path)!r}, which does not exist") from None
    except OSError as error:
        raise CorpusError(f"{what} has ref_audio {str(path)!r}, which cannot be read ({error.strerror})") from None
    kind = audio_kind(data[:16])
    if kind is None:
        raise CorpusError(
            f"{what} has ref_audio {str(path)!r}, which is not an audio file "
            f"(WAV, MP3, Ogg, AAC or FLAC; it starts {data[:8]!r})"
        )
    return Clip(str(path), data, CLIP_TYPES[kind])


def tier_of(text: str) -> str:
    length = len(text)
    return "short" if length <= SHORT_MAX_CHARS else "medium" if length <= MEDIUM_MAX_CHARS else "long"


def load(path: str | Path | None = None) -> list[Text]:
    path = Path(path) if path else DEFAULT_CORPUS
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"corpus file {path} does not exist") from None
    except UnicodeDecodeError as error:
        raise CorpusError(f"corpus file {path} is not UTF-8 text (byte {error.start})") from None
    except ValueError:  # no file can have the name
        raise CorpusError(f"corpus file {str(path)!r} cannot be a file's name (it holds a NUL byte)") from None
    except OSError as error:
        raise CorpusError(f"cannot read corpus file {path}: {error.strerror}") from None
    texts = _load_jsonl(path, raw) if path.suffix == ".jsonl" else _load_txt(path, raw)
    if not texts:
        raise CorpusError(f"corpus file {path} holds no texts")
    return texts


def _load_txt(path: Path, raw: str) -> list[Text]:
    texts = []
    for line_number, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            texts.append(Text(f"{path.stem}:{line_number}", line, tier_of(line)))
    return texts


def _load_jsonl(path: Path, raw: str) -> list[Text]:
    texts: list[Text] = []
    seen: set[str] = set()
    clips: dict[str, Any] = {}
    for line_number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}, line {line_number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{where} is not valid JSON ({error.msg})") from None
        if not isinstance(obj, dict):
            raise CorpusError(f'{where} must be a JSON object with a "text" field')
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f'{where} has no non-empty "text" string')
        tid = str(obj.get("id", f"{path.stem}:{line_number}"))
        if tid in seen:
            raise CorpusError(f"{where} repeats the id {tid!r}")
        seen.add(tid)
        tier = obj.get("tier") or tier_of(text)
        if tier not in TIERS:
            raise CorpusError(f"{where} has tier {tier!r}; expected one of {', '.join(TIERS)}")
        texts.append(Text(tid, text.strip(), tier, **_asks(obj, path, f"{where} (id {tid!r})", clips)))
    return texts


def _asks(obj: dict, path: Path, where: str, clips: dict) -> dict:
    """The entry's voice, language, speed, instructions, reference clip and its text, and the
    language its text is written in; ``clips`` holds the clips read so far, so a clip many
    entries name is read once."""
    out: dict[str, Any] = {}
    for key in _ASKS + _LABELS:
        value = obj.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise CorpusError(f"{where} has {key} {value!r}; expected a non-empty string")
        out[key] = value
    speed = obj.get("speed")
    if speed is not None and (
        isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0 or speed == float("inf")
    ):
        raise CorpusError(f"{where} has speed {speed!r}; expected a number above 0")
    out["speed"] = speed
    ref = obj.get("ref_audio")
    if ref is not None:
        if not isinstance(ref, str) or not ref.strip():
            raise CorpusError(f"{where} has ref_audio {ref!r}; expected the path of an audio file")
        clip_path = path.parent / ref
        if clip_path not in clips:
            clips[clip_path] = load_clip(clip_path, where)
        out["ref_audio"] = clips[clip_path]
    return out


def split(text: str, max_chars: int) -> list[str]:
    """Split a long text into segments of at most ``max_chars``, at sentence ends where possible."""
    if max_chars <= 0 or len(text) <= max_chars:
        return [text]
    segments: list[str] = []
    for sentence in filter(None, (part.strip() for part in _SENTENCE_END.split(text))):
        for piece in _fit(sentence, max_chars, _SOFT_BREAK):
            if segments and len(segments[-1]) + 1 + len(piece) <= max_chars:
                segments[-1] += (" " if segments[-1][-1].isascii() else "") + piece
            else:
                segments.append(piece)
    return segments


def _fit(sentence: str, max_chars: int, breaks: re.Pattern) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    out: list[str] = []
    for word in filter(None, breaks.split(sentence)):
        while len(word) > max_chars:  # no break inside: cut hard
            out.append(word[:max_chars])
            word = word[max_chars:]
        if out and len(out[-1]) + 1 + len(word) <= max_chars:
            out[-1] += (" " if out[-1][-1].isascii() else "") + word
        else:
            out.append(word)
    return out
