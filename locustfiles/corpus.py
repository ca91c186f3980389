"""Text corpora: the batch of texts sent, in the same order, at every step.

A corpus is a ``.txt`` file (one text per line; blank lines and ``#`` comments ignored) or a
``.jsonl`` file of objects with ``text`` and optional ``id`` and ``tier``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "configs" / "texts" / "default.jsonl"
TIERS = ("short", "medium", "long")
#: Tier boundaries in characters when a corpus does not name the tier.
SHORT_MAX_CHARS, MEDIUM_MAX_CHARS = 40, 160
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；…])\s*")
_SOFT_BREAK = re.compile(r"(?<=[,，、:：])\s*|\s+")


class CorpusError(ValueError):
    """The corpus file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Text:
    id: str
    text: str
    tier: str


def tier_of(text: str) -> str:
    n = len(text)
    return "short" if n <= SHORT_MAX_CHARS else "medium" if n <= MEDIUM_MAX_CHARS else "long"


def load(path: str | Path | None = None) -> list[Text]:
    path = Path(path) if path else DEFAULT_CORPUS
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"corpus file {path} does not exist") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus file {path} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise CorpusError(f"cannot read corpus file {path}: {e.strerror}") from None
    texts = _load_jsonl(path, raw) if path.suffix == ".jsonl" else _load_txt(path, raw)
    if not texts:
        raise CorpusError(f"corpus file {path} holds no texts")
    return texts


def _load_txt(path: Path, raw: str) -> list[Text]:
    texts = []
    for n, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            texts.append(Text(f"{path.stem}:{n}", line, tier_of(line)))
    return texts


def _load_jsonl(path: Path, raw: str) -> list[Text]:
    texts, seen = [], set()
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{where} is not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise CorpusError(f"{where} must be a JSON object with a \"text\" field")
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f"{where} has no non-empty \"text\" string")
        tid = str(obj.get("id", f"{path.stem}:{n}"))
        if tid in seen:
            raise CorpusError(f"{where} repeats the id {tid!r}")
        seen.add(tid)
        tier = obj.get("tier") or tier_of(text)
        if tier not in TIERS:
            raise CorpusError(f"{where} has tier {tier!r}; expected one of {', '.join(TIERS)}")
        texts.append(Text(tid, text.strip(), tier))
    return texts


def split(text: str, max_chars: int) -> list[str]:
    """Split a long text into segments of at most ``max_chars``, at sentence ends where possible."""
    if max_chars <= 0 or len(text) <= max_chars:
        return [text]
    segments: list[str] = []
    for sentence in filter(None, (s.strip() for s in _SENTENCE_END.split(text))):
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
        while len(word) > max_chars:           # no break inside: cut hard
            out.append(word[:max_chars])
            word = word[max_chars:]
        if out and len(out[-1]) + 1 + len(word) <= max_chars:
            out[-1] += (" " if out[-1][-1].isascii() else "") + word
        else:
            out.append(word)
    return out
