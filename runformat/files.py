"""The run directory's files and how they are written: ``run.json`` atomically, the JSONL
files one compact line per record."""
from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

RUN_JSON = "run.json"
REQUESTS = "requests.jsonl"
RESOURCES = "resources.jsonl"
SUMMARY_JSON = "summary.json"
REPORT_HTML = "report.html"
AUDIO_DIR = "audio"   # default --audio-dir inside the run directory


def jsonl_line(record: dict) -> str:
    """One record as one line of a JSONL file, newline included."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def write_json(path: Path, data: dict) -> None:
    """Write atomically: readers (the live dashboard) never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def claim(path: Path) -> Path:
    """Create the run directory; a directory that already holds a run gets a -2, -3 … sibling."""
    candidate, n = path, 1
    while (candidate / REQUESTS).exists() or (candidate / RUN_JSON).exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def versions() -> dict:
    """run.json's ``versions``: python, the packages that measure, and the command line
    (with the collector token hidden)."""
    out = {"python": platform.python_version()}
    for dist in ("tts-knee", "locust", "gevent", "geventhttpclient"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out["argv"] = _redact([os.path.basename(sys.argv[0]), *sys.argv[1:]])
    return out


def _redact(argv: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(argv):
        if arg.startswith("--collector-token="):
            arg = "--collector-token=***"
        elif i and argv[i - 1] == "--collector-token":
            arg = "***"
        out.append(arg)
    return out
