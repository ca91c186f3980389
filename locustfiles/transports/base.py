"""The seam's interface: :class:`Transport`, the events an exchange yields and
:class:`TransportError`. The package's doc (``locustfiles/transports/__init__.py``) says how a
protocol implements them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tts_knee.audio.containers import Audio

from ..clock import mono
from ..inputs.corpus import Clip


@dataclass(frozen=True, slots=True)
class Ask:
    """What a request asks for beside its words (the corpus entry's, or the voice ``--voices``
    gave it): the protocol sends each it has a place for. None: not asked."""

    voice: str | None = None
    language: str | None = None
    speed: float | None = None
    instructions: str | None = None
    ref_audio: Clip | None = None  # a reference clip to clone the voice from
    ref_text: str | None = None  # what the clip says


NO_ASK = Ask()


class TransportError(Exception):
    """The connection failed (refused, reset, closed early, not the protocol); one sentence.
    The transport has dropped the connection by the time this is raised."""


class TlsError(TransportError):
    """The TLS handshake failed: a certificate that does not verify, or TLS on one side only."""


@dataclass(slots=True)
class Answered:
    """How the server took the request."""

    status: int | str | None  # recorded as the attempt's ``status``
    ok: bool  # the answer carries audio to time and check
    said: str  # how errors quote this answer: "HTTP 503"
    http_status: int | str | None  # what --retry-on judges it by (see the module doc)
    retry_after_raw: str | None = None  # the server's word on when to come back, as sent
    server_timing: dict[str, float] | None = None  # stage -> ms, where the server says so
    retry_after_s: float | None = None  # that word in seconds, where the transport read it itself


@dataclass(slots=True)
class Received:
    """``nbytes`` of the answer arrived at ``at``."""

    at: float
    nbytes: int


@dataclass(slots=True)
class TextSent:
    """``chars`` characters of the text were handed to the connection at ``at`` (a protocol
    that takes the text in pieces, paced by :mod:`locustfiles.inputs.pacing`). ``flush``: the
    protocol's flush went with them; ``last``: the text was complete, and the end of the
    utterance's text (its final flush) went with them. ``connect_ms``: on the first send of an
    exchange that had to open its session, how long opening it took (TCP and the protocol's
    handshake), known whether or not the server ever answers."""

    at: float
    chars: int
    flush: bool = False
    last: bool = False
    connect_ms: float | None = None


@dataclass(slots=True)
class AudioPiece:
    """An arrival of ``ms`` milliseconds of audio at ``at`` (ms None: not known)."""

    at: float
    ms: float | None


@dataclass(slots=True)
class Ended:
    """The answer is complete at ``at`` (None: it broke off inside its own format).

    ``data`` is what to write, as buffers in order, and ``audio`` what they hold, for an ok
    answer whose audio checked out; otherwise ``error`` says why in one sentence (for a
    refused answer: what the server said), and ``data`` holds the answer's bytes, where it
    had any."""

    at: float | None
    error: str | None = None
    audio: Audio | None = None
    data: list | None = None
    quiet: str | None = None  # a cancelled exchange: how it went quiet (see Cancel)
    note: str | None = None  # ... and, where it went wrong, what became of the connection


class Cancel:
    """A listener's interruption of one exchange (barge-in): the attempt path passes it to
    ``exchange`` and fires it from another greenlet; the transport sets ``hook`` to carry it
    out its protocol's way (``by``: ``message`` or ``close``), and ends the exchange with an
    :class:`Ended` whose ``quiet`` says how it went quiet: ``acknowledged`` (the server answered
    the cancel; ``at`` is its answer), ``closed`` (the connection or stream), ``ended`` (the
    server ended the utterance), ``quiet`` (no audio came for a while: a cancel the protocol
    does not answer) or ``unacknowledged`` (no answer within the bounded wait)."""

    __slots__ = ("by", "at", "hook")

    def __init__(self, by: str):
        self.by = by
        self.at: float | None = None  # monotonic, when the listener interrupted
        self.hook: Callable[[], None] | None = None

    def fire(self) -> None:
        self.at = mono()
        if self.hook is not None:
            self.hook()


Event = Answered | TextSent | Received | AudioPiece | Ended


class Transport:
    """One connection (or session) to the TTS server; see the module doc for the contract."""

    request_type: str = ""
    name: str = ""

    def exchange(self, text: str, ask: Ask = NO_ASK, cancel: Cancel | None = None) -> Iterator[Event]:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop the connection; the next exchange opens a new one."""
        raise NotImplementedError

    def close(self) -> None:
        """End the connection (or session) for good: the user is done."""
        raise NotImplementedError

    def hang_up(self) -> None:
        """End the conversation: the next exchange opens a new connection (session), after the
        protocol's goodbye where it has one."""
        self.reset()
