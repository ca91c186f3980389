"""What made a run, for run.json's ``provenance`` (:data:`runformat.schema.PROVENANCE`): tts-knee's
version and commit, the corpus's and the options' digests, Python and Locust, the load host, and
what the TTS server says of itself, from one bounded request before the run (``GET /v1/models``:
its Server header, the HTTP version it answers in, a model it names). See docs/results.md.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from tts_knee import runformat
from tts_knee.runformat.files import options_digest

#: The server request's longest wait (connect and answer), and the most of its body read.
SERVER_TIMEOUT_S = 5.0
SERVER_BODY_BYTES = 1 << 20
#: How long a git command may take to say the clone's commit.
GIT_TIMEOUT_S = 5.0
#: Answer headers that name the model, in the order they are believed.
MODEL_HEADERS = ("openai-model", "x-model", "x-model-name", "x-model-id", "model")
#: The most model ids /v1/models' list gives ``model``; the rest are counted.
MAX_MODEL_IDS = 5
_HTTP_VERSIONS = {9: "HTTP/0.9", 10: "HTTP/1.0", 11: "HTTP/1.1"}
#: The package's folder: in a clone (an editable install) its parent holds .git.
_SOURCE_ROOT = Path(__file__).resolve().parents[1]


def describe(settings: Any, options: dict[str, Any]) -> dict[str, Any]:
    """run.json's ``provenance`` for a run with ``settings`` (``locustfiles.settings.Settings``)
    and run.json ``options``; sends the server request (:func:`server_info`)."""
    commit, modified = clone_commit()
    return runformat.provenance_entry(
        tts_knee=_version("tts-knee"),
        commit=commit,
        modified=modified,
        python=platform.python_version(),
        locust=_version("locust"),
        corpus=str(settings.texts_source),
        corpus_sha256=file_sha256(settings.texts_source),
        **({"trace_sha256": file_sha256(settings.trace.path)} if settings.trace else {}),
        options_sha256=options_digest(options),
        host=load_host(),
        server=server_info(settings),
    )


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def file_sha256(path: str | Path) -> str | None:
    """SHA-256 (hex) of a file's bytes; None where it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def clone_commit(root: Path = _SOURCE_ROOT) -> tuple[str | None, bool | None]:
    """The commit of the clone tts-knee runs from, and whether tracked files were changed in it;
    (None, None) when it was installed from a package (no clone of tts-knee around it)."""
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None, None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head.strip(), None if status is None else bool(status.strip())


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def load_host() -> dict[str, Any]:
    """``provenance.host``: this machine's CPU model, cores and memory."""
    return runformat.load_host_entry(
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count(),
        cpu_physical_cores=psutil.cpu_count(logical=False),
        memory_bytes=psutil.virtual_memory().total,
        os=platform.platform(),
    )


def _model_ids(body: bytes) -> str | None:
    """The model ids an OpenAI-style ``/v1/models`` answer lists (``{"data": [{"id": …}]}``)."""
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    ids = [str(model["id"]) for model in data if isinstance(model, dict) and model.get("id") is not None]
    if not ids:
        return None
    more = len(ids) - MAX_MODEL_IDS
    return ", ".join(ids[:MAX_MODEL_IDS]) + (f" and {more} more" if more > 0 else "")


def server_info(settings: Any) -> dict[str, Any]:
    """``provenance.server``: one ``GET /v1/models`` under the target's base URL, with the run's
    headers and TLS, at most :data:`SERVER_TIMEOUT_S`: the version of HTTP and the Server header
    it is answered with, and the model a header of the answer names, else the ids it lists. A
    gRPC target speaks HTTP/2 and is sent nothing; a Wyoming one has no HTTP."""
    if settings.tts_protocol == "grpc":
        return runformat.server_info_entry(http_version="HTTP/2")
    if settings.tts_protocol == "wyoming":
        return runformat.server_info_entry()
    parts = urlsplit(settings.host)
    secure = parts.scheme in ("https", "wss")
    path = parts.path.rstrip("/") + "/v1/models"
    url = f"{'https' if secure else 'http'}://{parts.netloc}{path}"
    out = runformat.server_info_entry(url=url)
    try:
        conn = (
            http.client.HTTPSConnection(parts.hostname, parts.port, timeout=SERVER_TIMEOUT_S, context=settings.tls)
            if secure
            else http.client.HTTPConnection(parts.hostname, parts.port, timeout=SERVER_TIMEOUT_S)
        )
        try:
            conn.request("GET", path, headers={"Accept": "application/json", **dict(settings.headers)})
            answer = conn.getresponse()
            body = answer.read(SERVER_BODY_BYTES)
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError) as error:
        out["error"] = f"GET {url} got no answer: {str(error) or type(error).__name__}"
        return out
    out.update(status=answer.status, http_version=_HTTP_VERSIONS.get(answer.version), server=answer.getheader("Server"))
    for name in MODEL_HEADERS:
        value = answer.getheader(name)
        if value:
            out.update(model=value.strip(), model_from=f"header {name}")
            return out
    ids = _model_ids(body) if 200 <= answer.status < 300 else None
    if ids:
        out.update(model=ids, model_from="/v1/models")
    return out
