"""The warm-up request a run starts with, through the same transport as the run's attempts: it
tells an unreachable or wrong target apart from a TTS server before any step is measured. The
same request once more after the run (or a GET of ``--health-path``) is the run's health probe:
is the server still answering once the load is over?"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

import gevent

from tts_knee.runformat import grpc_codes
from tts_knee.runformat.schema import Preflight

from .clock import wall
from .inputs.voices import ask_for
from .transports import Answered, Ended, TlsError, TransportError, transport_for

log = logging.getLogger("tts_knee")
#: The health probe's longest wait: a server that takes longer to speak the shortest text after
#: the load is over is not healthy.
HEALTH_TIMEOUT_S = 30.0


def health(settings) -> Preflight:
    """After the run: ``{"ok", "status", "ms", "message"}`` of a GET of ``--health-path`` (ok: a
    2xx), else of the warm-up request once more (ok: audio came back), at most
    :data:`HEALTH_TIMEOUT_S`; ``message`` says what was wrong in one sentence."""
    if settings.health_path:
        return _get(settings, settings.health_path)
    return preflight(settings, after_run=True)


def throttled(result: Preflight) -> bool:
    """Whether a health probe (or warm-up) was refused as too many requests (429, gRPC
    RESOURCE_EXHAUSTED): a server that answers so is up, and only rate-limiting."""
    status = result.get("status")
    return (grpc_codes.AS_HTTP.get(status) if isinstance(status, str) else status) == 429


def _get(settings, path: str) -> Preflight:
    url = settings.host.rstrip("/") + path
    out: Preflight = {"ok": False, "status": None, "ms": None, "message": None}
    start = wall()
    timeout = min(settings.request_timeout, HEALTH_TIMEOUT_S)
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=dict(settings.headers)), timeout=timeout, context=settings.tls
        ) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (OSError, ValueError) as error:  # refused, reset, timed out, or no HTTP at all
        reason = getattr(error, "reason", None) or error
        out["message"] = f"{url} did not answer after the run ({reason})"
        return out
    out["status"] = status
    out["ms"] = round((wall() - start) * 1000, 1)
    out["ok"] = 200 <= status < 300
    if not out["ok"]:
        out["message"] = f"{url} answered {out['status']} after the run"
    return out


def preflight(settings, after_run: bool = False) -> Preflight:
    """``{"ok", "status", "ms", "message"}`` of one request for the corpus's shortest text, with
    the first voice of ``--voices`` where it names none. ``after_run`` (the health probe): a
    refusal or a server error is not ok either, and the wait is at most :data:`HEALTH_TIMEOUT_S`."""
    entry = min(settings.texts, key=lambda candidate: len(candidate.text))
    text, ask = entry.text, ask_for(entry, settings.voices[0] if settings.voices else None, settings.voice_upload)
    start = wall()
    out: Preflight = {"ok": False, "status": None, "ms": None, "message": None}
    transport = transport_for(settings)
    target = settings.target
    shape = (
        f"--tts-api {settings.tts_api}"
        if settings.tts_protocol == "http"
        else f"--tts-preset {settings.tts_preset}"
        if settings.tts_protocol in ("ws", "grpc")
        else "--tts-protocol wyoming"
    )
    answer: Answered | None = None
    ended: Ended | None = None
    timeout = min(settings.request_timeout, HEALTH_TIMEOUT_S) if after_run else settings.request_timeout
    try:
        if (
            settings.tts_protocol == "wyoming" and settings.text_rate and not after_run
        ):  # one without streamed text ignores it
            out["message"] = _streamed_text_refused(transport, target)
            if out["message"]:
                return out
        with gevent.Timeout(timeout):
            for event in transport.exchange(text, ask):
                if isinstance(event, Answered):
                    answer = event
                elif isinstance(event, Ended):
                    ended = event
    except gevent.Timeout:
        out["message"] = f"{target} did not answer within {timeout:g} s; is the TTS server up?"
        return out
    except TlsError as error:  # a server, reached, whose TLS does not match the run's
        out["message"] = f"cannot reach {settings.host}: {error}"
        return out
    except TransportError as error:  # no connection, or an answer that is not HTTP
        out["message"] = f"cannot reach {settings.host}: {error}; is the TTS server running there?"
        return out
    finally:
        transport.close()
    if answer is None or ended is None:  # every transport says both; never a traceback if one did not
        out["message"] = f"{target} ended the exchange without an answer"
        return out
    status = answer.status  # judged as the HTTP status it amounts to, quoted as the protocol said
    code = grpc_codes.AS_HTTP.get(status, answer.http_status) if isinstance(status, str) else answer.http_status
    out["status"], out["ms"] = status, round((wall() - start) * 1000, 1)
    # an int or None: every gRPC code name maps to its HTTP status, and other transports give one
    out["ok"], out["message"] = _judged(settings, answer, ended, code, shape, after_run)  # type: ignore[arg-type]
    return out


def _judged(
    settings, answer: Answered, ended: Ended, code: int | None, shape: str, after_run: bool
) -> tuple[bool, str | None]:
    """``(ok, message)`` of the preflight's answer (``code``: the HTTP status it amounts to)."""
    target, status = settings.target, answer.status
    if answer.ok and ended.audio is not None:
        return True, None
    if answer.ok and (code is None or code < 300):
        return False, (
            f"{target} answered {status} but not with audio ({ended.error}); is it a TTS server, and is {shape} right?"
        )
    # the body's first words where the answer has one, else how the transport put the refusal
    snippet = " ".join(b"".join(ended.data or ())[:120].decode("utf-8", "replace").split()) or str(ended.error)
    if code in (404, 405, 501):
        return False, f"{target} answered {status}: no TTS endpoint there; check " + (
            f"--tts-path and --tts-api (now {settings.tts_api})"
            if settings.tts_protocol == "http"
            else f"--tts-path and --tts-preset (now {settings.tts_preset})"
            if settings.tts_protocol == "grpc"
            else f"{shape} and -H"
        )
    if code in (400, 401, 403, 495, 496) and "certificate" in snippet.lower():
        # a TLS front end (nginx: "No required SSL certificate was sent", "The SSL certificate error")
        # that completes the handshake and refuses the request over the client certificate
        return False, f"{target} refused the request with {status} over the client certificate ({snippet}); " + (
            "is --tls-client-cert signed by a CA it trusts, and still valid?"
            if settings.tls_client_cert
            else "pass --tls-client-cert FILE (and --tls-client-key FILE)"
        )
    if code in (401, 403):
        return False, f"{target} refused the request with {status}: {snippet}"
    if code is None or code < 500 and code != 429:
        return False, f"{target} rejected the request with {status} ({snippet}); check {shape} and its fields"
    if after_run:
        return False, f"{target} answered {status} after the run ({snippet})"
    log.warning("warm-up request got %s from %s; running anyway", status, target)
    return True, None  # busy or failing, but a server: the run will measure it


def _streamed_text_refused(transport, target: str) -> str | None:
    """Why a Wyoming server that says it takes no streamed text cannot run with --text-rate, or
    None (it takes it, or does not say: then sent anyway, with a warning)."""
    streams, name = transport.streams_text()
    if streams is None:
        log.warning("%s did not say whether it takes streamed text (%s); sending it anyway", target, name)
    if streams is not False:
        return None
    return (
        f"{target} ({name}) does not support streamed synthesis (its info says "
        f"supports_synthesize_streaming false): it would ignore synthesize-start/chunk/stop "
        f"and every utterance would wait out --request-timeout; drop --text-rate to send "
        f"whole texts with synthesize"
    )
