"""The run directory's files and how they are written: ``run.json``, ``summary.json`` and
``report.html`` atomically, the JSONL files one compact line per record."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

RUN_JSON = "run.json"
REQUESTS = "requests.jsonl"
RESOURCES = "resources.jsonl"
SUMMARY_JSON = "summary.json"
REPORT_HTML = "report.html"
AUDIO_DIR = "audio"  # default --audio-dir inside the run directory
SPEECH_FILE = "speech.jsonl"  # the ASR judge's verdicts (--asr-model): runformat.schema.SPEECH
SPEECH_DIR = "speech"  # the clips it judged, one WAV per request


def jsonl_bytes(record: dict[str, Any]) -> bytes:
    """One record as one line of a JSONL file, newline included, UTF-8: orjson (several times
    cheaper per record than the standard library, and NaN becomes null), or ``json`` for what
    orjson refuses (an integer beyond 64 bits, a key that is not a string)."""
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def jsonl_line(record: dict[str, Any]) -> str:
    """:func:`jsonl_bytes` as text, for files opened in text mode."""
    return jsonl_bytes(record).decode()


def write_text(path: Path, text: str) -> Path:
    """Write ``path`` atomically (a temporary file beside it, then renamed over it): readers
    (the live dashboard, a browser reloading the report) never see half a file. On an OSError
    nothing is left behind and the old file, if any, stays whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return path


def json_text(data: Mapping[str, object], indent: int = 2) -> str:
    """``data`` as the JSON text of a run directory's file."""
    return json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n"


def write_json(path: Path, data: Mapping[str, object], indent: int = 2) -> Path:
    """``data`` as JSON, written atomically (see :func:`write_text`)."""
    return write_text(path, json_text(data, indent))


def claim(path: Path) -> Path:
    """Create the run directory; a directory that already holds a run gets a -2, -3 … sibling."""
    candidate, number = path, 1
    while (candidate / REQUESTS).exists() or (candidate / RUN_JSON).exists():
        number += 1
        candidate = path.with_name(f"{path.name}-{number}")
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def versions() -> dict[str, Any]:
    """run.json's ``versions``: python, the packages that measure, and the command line
    (with the collector token hidden)."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("tts-knee", "locust", "gevent", "geventhttpclient"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out["argv"] = _redact([os.path.basename(sys.argv[0]), *sys.argv[1:]])
    return out


#: run.json options the options' digest leaves out: where the audio went (it names the run
#: directory), and where the corpus was read from (its content has a digest of its own,
#: ``provenance.corpus_sha256``; the default corpus's path is the clone's).
UNDIGESTED_OPTIONS = ("audio_dir", "texts")


def options_digest(options: dict[str, Any]) -> str:
    """run.json ``provenance.options_sha256``: SHA-256 (hex) of ``options`` as canonical JSON
    (keys sorted, no spaces, UTF-8), :data:`UNDIGESTED_OPTIONS` left out; a script recomputes it
    from run.json's ``options`` the same way."""
    kept = {option: value for option, value in options.items() if option not in UNDIGESTED_OPTIONS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _redact(argv: list[str]) -> list[str]:
    out = []
    for index, arg in enumerate(argv):
        if arg.startswith("--collector-token="):
            arg = "--collector-token=***"
        elif index and argv[index - 1] == "--collector-token":
            arg = "***"
        out.append(arg)
    return out
