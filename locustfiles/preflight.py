"""The warm-up request a run starts with, through the same transport as the run's attempts: it
tells an unreachable or wrong target apart from a TTS server before any step is measured."""
from __future__ import annotations

import logging

import gevent

from .clock import wall
from .transports import Answered, Ended, TransportError
from .transports.http import HttpTransport

log = logging.getLogger("tts_knee")


def preflight(s) -> dict:
    """``{"ok", "status", "ms", "message"}`` of one request for the corpus's shortest text."""
    text = min(s.texts, key=lambda t: len(t.text)).text
    start = wall()
    out = {"ok": False, "status": None, "ms": None, "message": None}
    transport = HttpTransport(s)
    target = f"{s.host}{s.path}"
    answer = ended = None
    try:
        with gevent.Timeout(s.request_timeout_s):
            for ev in transport.exchange(text):
                if isinstance(ev, Answered):
                    answer = ev
                elif isinstance(ev, Ended):
                    ended = ev
    except gevent.Timeout:
        out["message"] = f"{target} did not answer within {s.request_timeout_s:g} s; is the TTS server up?"
        return out
    except TransportError as e:   # no connection, or an answer that is not HTTP
        out["message"] = f"cannot reach {s.host}: {e}; is the TTS server running there?"
        return out
    finally:
        transport.close()
    status = answer.status
    out.update(status=status, ms=round((wall() - start) * 1000, 1))
    if answer.ok:
        if ended.audio is None:
            out["message"] = (f"{target} answered {status} but not with audio ({ended.error}); is it a TTS server, "
                              f"and is --tts-api {s.api} right?")
            return out
        out["ok"] = True
        return out
    snippet = " ".join(b"".join(ended.data)[:120].decode("utf-8", "replace").split())
    if status in (404, 405, 501):
        out["message"] = f"{target} answered {status}: no TTS endpoint there; check --tts-path and --tts-api (now {s.api})"
    elif status in (401, 403):
        out["message"] = f"{target} refused the request with {status}: {snippet}"
    elif status < 500 and status != 429:
        out["message"] = f"{target} rejected the request with {status} ({snippet}); check --tts-api and its fields"
    else:
        out["ok"] = True   # busy or failing, but a server: the run will measure it
        log.warning("warm-up request got %s from %s; running anyway", status, target)
    return out
