"""The run directory: ``run.json`` (what was run, written at the start and rewritten as steps,
workers and collectors change) beside the records the sinks append."""
from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path


def claim(path: Path) -> Path:
    """Create the run directory; a directory that already holds a run gets a -2, -3 … sibling."""
    candidate, n = path, 1
    while (candidate / "requests.jsonl").exists() or (candidate / "run.json").exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def versions() -> dict:
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


def write_json(path: Path, data: dict) -> None:
    """Write atomically: readers (the live dashboard) never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
