"""``--voice-upload``: the voices a run clones registered on the server once, before it starts,
and deleted again when it ends, the way vLLM-Omni's server takes them:

- ``POST /v1/audio/voices``, multipart/form-data: ``audio_sample`` (the clip, a file part),
  ``consent`` (a consent recording's id; tts-knee sends :data:`CONSENT`), ``name`` (the voice's
  name), and ``ref_text`` where the voice has one (wrappers that take it; vLLM-Omni ignores
  it). 200 with ``{"success": true, "voice": {...}}``; 400 with ``{"detail": ...}`` when it
  refuses (a name that exists, a clip too large or of the wrong type).
- ``DELETE /v1/audio/voices/{name}``: 200, or 404 when there is no such voice.

The requests then name the voice alone. Each registration and deletion is timed as a record
of its own (run.json ``voice_uploads``). A refusal ends the run with one sentence naming the
voice; whatever was created is deleted on every way out (the run ends, fails or is stopped).
"""

from __future__ import annotations

import json
import logging
from http.client import HTTPException
from urllib.parse import quote, urlsplit

from geventhttpclient import HTTPClient

from tts_knee import runformat

from .clock import mono, wall

log = logging.getLogger("tts_knee")
VOICES_PATH = "/v1/audio/voices"
CONSENT = "tts-knee"
DETAIL_CHARS = 200


class VoiceUploads:
    """The voices this run registered on the server at ``settings.host``, and a record of each call."""

    def __init__(self, settings):
        self.s = settings
        self.records: list[dict] = []
        self.created: list[str] = []
        parts = urlsplit(settings.host)
        self._client_args = dict(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            concurrency=1,
            connection_timeout=settings.connect_timeout,
            network_timeout=settings.request_timeout,
            headers={"User-Agent": "tts-knee"},
        )

    def register(self) -> str | None:
        """Register every voice of ``--voices`` that has a clip; None when all were taken, else
        why not, in one sentence (what was created so far stays listed in ``created``)."""
        # imported here: urllib3 imported before Locust patches ssl for gevent breaks Locust's import
        from urllib3 import encode_multipart_formdata

        http = HTTPClient(**self._client_args)
        try:
            for voice in self.s.voices:
                if voice.ref_audio is None:
                    continue
                fields = [
                    ("audio_sample", (voice.ref_audio.name, voice.ref_audio.data, voice.ref_audio.content_type)),
                    ("consent", CONSENT),
                    ("name", voice.name),
                ]
                if voice.ref_text is not None:
                    fields.append(("ref_text", voice.ref_text))
                body, ctype = encode_multipart_formdata(fields)
                status, said, error = self._call(
                    http, "create", voice.name, "POST", VOICES_PATH, body, {"Content-Type": ctype}
                )
                if error is None:
                    self.created.append(voice.name)
                    continue
                return (
                    f"the server refused to register voice {voice.name!r} ({error}): --voice-upload needs "
                    f"{self.s.host}{VOICES_PATH} to take it"
                )
            log.info("registered %d voices on %s%s", len(self.created), self.s.host, VOICES_PATH)
            return None
        finally:
            http.close()

    def remove(self) -> None:
        """Delete every voice this run created (a 404, already gone, counts as deleted)."""
        if not self.created:
            return
        http = HTTPClient(**self._client_args)
        try:
            for name in list(self.created):
                status, _, error = self._call(http, "delete", name, "DELETE", f"{VOICES_PATH}/{quote(name, safe='')}")
                if error is None or status == 404:
                    self.created.remove(name)
                else:
                    log.error("could not delete voice %r from %s (%s); delete it by hand", name, self.s.host, error)
        finally:
            http.close()

    def _call(
        self, http, action: str, voice: str, method: str, path: str, body: bytes = b"", headers: dict | None = None
    ) -> tuple[int | None, str, str | None]:
        """One timed call, recorded: (status, body text, error or None)."""
        sent_at, sent_mono = wall(), mono()
        status, text, error = None, "", None
        try:
            resp = http.request(method, path, body=body, headers=headers or {})
            try:
                status, text = resp.status_code, resp.read().decode("utf-8", "replace")
            finally:
                resp.release()
        except OSError as failure:  # refused, reset, timed out
            error = f"connection error: {failure.strerror or str(failure) or type(failure).__name__}"
        except HTTPException as failure:  # an answer that is not HTTP
            error = f"bad HTTP response: {type(failure).__name__}: {failure}"
        if status is not None and not 200 <= status < 300:
            error = f"HTTP {status}: {_detail(text)}"
        self.records.append(
            runformat.voice_upload_entry(
                voice=voice,
                action=action,
                t0=sent_at,
                ms=round((mono() - sent_mono) * 1000.0, 3),
                status=status,
                ok=error is None,
                error=error,
            )
        )
        return status, text, error


def _detail(text: str) -> str:
    """What a refusal says: FastAPI's ``detail``, an ``error`` object's message, or the body."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        said = obj.get("detail") or obj.get("error")
        if isinstance(said, dict):
            said = said.get("message")
        if said:
            return str(said)[:DETAIL_CHARS]
    return " ".join(text.split())[:DETAIL_CHARS] or "no body"
