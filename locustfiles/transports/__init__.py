"""The seam between an attempt and the wire: a transport carries one utterance to the TTS
server and yields what happened, as timed events; the attempt path (locustfiles/attempt.py)
turns those events into the record, the Locust request event, the retry and the audio file,
the same way for every protocol.

Adding a protocol means writing one :class:`Transport` subclass, in a module of this package,
and naming it in :func:`transport_for`. What it must do:

- ``exchange(text, ask)`` sends ``text`` with what the request asks for beside it (an
  :class:`Ask`: voice, language, speed, instructions, a reference clip and its text; the
  transport sends each its protocol has a place for) and is a generator of events, each stamped with the
  monotonic clock (``locustfiles.clock.mono``) the moment the transport saw it:

  1. :class:`Answered` once the server has said how it takes the request (HTTP: the status
     line and headers; a protocol that says so only at the end, like gRPC's trailing status,
     yields it just before :class:`Ended`). ``ok`` says the answer carries audio to time.
  2. :class:`Received` for each piece of the answer read off the connection (the first one's
     ``at`` is ``t1``, the time to first byte), and :class:`AudioPiece` for each arrival of
     audio in it, with its duration in ms (None where the format cannot tell): decode audio
     with the parsers of :mod:`audio.containers`, which report arrivals to a sink.
     A protocol that takes the text in pieces sends them as :mod:`locustfiles.inputs.pacing` says
     (``--text-rate``, ``--text-jitter``, ``--flush``) and yields :class:`TextSent` for each
     send, the last one flagged ``last`` when the end of the text (the final flush) went out:
     the attempt then times the listener against the text (``text_first_ms``,
     ``text_done_ms``, ``ttfa_ms`` from the first text sent, ``done_to_audio_ms``,
     ``tail_ms``). The first ``TextSent`` of an exchange that had to open its session (TCP and
     the protocol's handshake) carries how long that took, for ``connect_ms``.
  3. :class:`Ended` when the answer is complete (``at`` is ``t2``): for an ok answer the audio
     to write and what it is (or ``error``: the body was not the audio it should be), for a
     refused one the refusal in one line, quoted as ``Answered.said`` ("HTTP 503: busy"). ``at``
     is None when the answer broke off inside its own format (a stream error mid-body): the
     transport then drops the connection.

  A failure of the connection itself (refused, reset, closed early, a reply that is not the
  protocol) raises :class:`TransportError` with one sentence, after the transport has dropped
  the connection so that the next exchange starts clean. The attempt path owns the request
  timeout (``--request-timeout``): it is raised inside ``exchange`` where it waits, and the
  transport drops the connection then too (as when the user is stopped mid-answer), before
  letting it through.
- ``request_type`` and ``name``: what the Locust request events are called (HTTP: the method
  and the path).
- ``http_status`` on :class:`Answered`: the HTTP status the answer amounts to, which the
  retry policy (``--retry-on``) and the preflight judge it by. HTTP's is its own; a protocol
  with codes of its own maps them (gRPC: ``RESOURCE_EXHAUSTED`` as 429, ``UNAVAILABLE`` as
  503, other codes by their names, which ``--retry-on`` may list; None: judged as a timeout),
  while ``status`` keeps what the protocol said, for the record. ``retry_after_raw`` is the
  server's word on when to come back as sent, read as HTTP's ``Retry-After`` unless the
  transport read it itself (``retry_after_s``: gRPC's pushback in ms).
- An answer whose status comes only at its end (gRPC) may yield a provisional
  :class:`Answered` (``status`` None, ``ok`` true) once the server has taken the request, so
  that the audio which arrives is timed even if the connection breaks before the status.

The protocols: :mod:`~locustfiles.transports.http` (whole bodies, chunked streams, SSE),
:mod:`~locustfiles.transports.grpc` (Riva and Triton, on :mod:`~locustfiles.transports.h2grpc`),
:mod:`~locustfiles.transports.ws` (WebSocket sessions in a preset's dialect) and
:mod:`~locustfiles.transports.wyoming` (Wyoming over TCP), the last two on
:mod:`~locustfiles.transports.session`:

- A session that stays open across turns keeps its connection on the transport between
  exchanges, exactly as HTTP keeps its keep-alive connection: one transport per user (per
  request in flight, open loop); :meth:`Transport.hang_up` ends a conversation (the next
  exchange opens a new session), ``close`` ends it for good.
- Text sent in pieces over time (a language model's tokens) is paced inside ``exchange``,
  which sends each piece when due and yields what arrives meanwhile, and :class:`TextSent`
  for each piece sent.
- Several utterances in flight on one connection (contexts) are several exchanges running at
  once on one transport, each in its own greenlet, the connection's reader routing what
  arrives to the exchange it belongs to.
- Cancelling (barge-in): ``exchange(text, cancel)`` is given a :class:`Cancel`, which the
  attempt path fires from another greenlet; the transport sets its ``hook`` to carry it out
  (HTTP closes the stream; a session sends the preset's cancel message or closes the
  connection), yields what still arrives and ends with an :class:`Ended` whose ``quiet`` says
  how it went quiet, bounded in time.
"""

from __future__ import annotations

from .base import (
    NO_ASK,
    Answered,
    Ask,
    AudioPiece,
    Cancel,
    Ended,
    Event,
    Received,
    TextSent,
    TlsError,
    Transport,
    TransportError,
)
from .http import HttpTransport
from .ws import WsTransport
from .wyoming import WyomingTransport

__all__ = [
    "NO_ASK",
    "Answered",
    "Ask",
    "AudioPiece",
    "Cancel",
    "Ended",
    "Event",
    "Received",
    "TextSent",
    "TlsError",
    "Transport",
    "TransportError",
    "transport_for",
]


def transport_for(settings, payload=None) -> Transport:
    """The transport for the run's ``settings`` (``--tts-protocol``): HTTP, a session, or gRPC
    (:mod:`locustfiles.transports.grpc`, imported only then). ``payload`` makes an HTTP request
    body from a text and its :class:`Ask` (the run's cache of them), ``settings.payload`` by default."""
    if settings.tts_protocol == "ws":
        return WsTransport(settings)
    if settings.tts_protocol == "wyoming":
        return WyomingTransport(settings)
    if settings.tts_protocol == "grpc":
        from . import grpc

        return grpc.transport_for(settings)
    return HttpTransport(settings, payload)
