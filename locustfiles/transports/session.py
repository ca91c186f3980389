"""What the session transports (WebSocket, Wyoming) share: a connection whose reader greenlet
turns the server's frames into :class:`Item` s for the utterance they belong to, and the
exchange that sends the text as :mod:`locustfiles.inputs.pacing` says while it yields what arrives.

An exchange waits on its inbox until the next piece of text is due, so one greenlet both
paces the text and times the audio; the reader stamps each frame the moment it is read.
Several exchanges may run at once on one connection (contexts), each with its own inbox.

A session's :class:`Answered` comes with the first thing the server says about the utterance,
so that a server turning an utterance away on an open session (WebSocket close 1013, a
Wyoming error) is a refusal the retry policy judges, not an answer that failed. A connection
that closes or breaks mid-utterance fails the attempt with one sentence (what arrived is still
timed), and the next exchange opens a new one: each opening is an attempt's ``connect_ms``.
Any failed utterance drops its connection, so that nothing it left behind reaches the next.

A cancelled utterance (barge-in) stops its text, sends the preset's cancel message or closes the
connection, and times what still arrives until it is quiet: the acknowledgement where the
dialect has one, the server's end of the utterance or its close, else no audio for
``QUIET_S``; all within ``CANCEL_WAIT_S``, after which the cancel is recorded as
unacknowledged and the connection dropped. Its connection is kept only where the cancel left
it clean (acknowledged, ended, or quiet on a dialect that names its contexts, whose late
frames for the cancelled one are then ignored).
"""

from __future__ import annotations

import enum
import errno
import itertools
import logging
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import gevent
from gevent.lock import Semaphore
from gevent.queue import Empty, Queue

from tts_knee.audio import containers

from ..clock import mono
from ..inputs.pacing import Pacer, schedule
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
    Transport,
    TransportError,
)

#: After a cancel: the longest wait for the utterance to go quiet (its acknowledgement, its end).
log = logging.getLogger("tts_knee")
CANCEL_WAIT_S = 2.0
#: A cancel the server does not answer: quiet once no audio came for this long.
QUIET_S = 0.5


class Kind(enum.StrEnum):
    """What a reader's :class:`Item` is (its value is how a preset's rule and the errors name it)."""

    AUDIO = "audio"  # ``data`` is PCM16, at ``rate`` where the frame names it
    START = "start"  # the audio's ``rate``
    FLUSHED = "flushed"  # the server answered a flush
    END = "end"  # the utterance's end
    CANCELLED = "cancelled"  # the server acknowledged a cancel
    ERROR = "error"  # ``message``; ``fatal`` or not
    CLOSED = "closed"  # the connection ended: ``message`` says how, ``code`` is its WebSocket close code
    BROKEN = "broken"  # a frame that cannot be the protocol: ``message``
    CANCEL = "cancel"  # not from the server: the listener's barge-in, put in the inbox by its hook


class Item:
    """What the reader hands an utterance: its :class:`Kind` and what that kind carries.
    ``key``: the utterance it names, as the frame names it (compared with the utterances' own
    names, :meth:`SessionTransport.key`; None: the one in flight)."""

    __slots__ = ("kind", "at", "nbytes", "data", "rate", "message", "fatal", "code", "key")

    def __init__(
        self,
        kind: Kind,
        arrived_at: float,
        nbytes: int = 0,
        data: bytes = b"",
        rate: int | None = None,
        message: str | None = None,
        fatal: bool = True,
        code: int | None = None,
        key: object = None,
    ):
        self.kind, self.at, self.nbytes, self.data, self.rate = kind, arrived_at, nbytes, data, rate
        self.message, self.fatal, self.code, self.key = message, fatal, code, key


class Refused(Exception):
    """The server refused the connection itself (an HTTP status on the WebSocket upgrade)."""

    def __init__(self, answered: Answered, message: str):
        super().__init__(message)
        self.answered = answered


class Connection:
    """An open connection and its reader greenlet. A protocol implements :meth:`read` (the next
    item, None for a frame that concerns no utterance; ``OSError`` when the connection broke),
    :meth:`send` and :meth:`drop`."""

    def __init__(self):
        self.inboxes: dict[object, Queue] = {}  # an utterance's name -> its inbox
        self.gone: set = set()  # cancelled utterances: their late frames are ignored
        # a cancelled utterance's flushes the server had not answered when it acknowledged the
        # cancel, on a dialect whose acknowledgements name no utterance (Deepgram): the next
        # utterance drops that many, where they come before its first audio
        self.stale_flushes = 0
        self.lost: Item | None = None  # why the connection ended, once it has
        self.utterances = 0  # begun on it
        self.reader: gevent.Greenlet | None = None
        self.keeper: gevent.Greenlet | None = None  # the preset's keepalive, while it idles
        self.keepalives = 0  # sent on it

    def start(self) -> None:
        self.reader = gevent.spawn(self._read_all)

    def subscribe(self, key: str) -> None:
        inbox = self.inboxes[key] = Queue()
        if self.lost is not None:
            inbox.put(self.lost)

    def unsubscribe(self, key: str) -> None:
        self.inboxes.pop(key, None)

    def _read_all(self) -> None:
        while True:
            try:
                item = self.read()
            except OSError as error:
                item = Item(Kind.CLOSED, mono(), message=f"the connection broke ({os_error(error)})")
            if item is None:
                continue
            if item.kind not in (Kind.CLOSED, Kind.BROKEN):
                inbox = self.inboxes.get(item.key) if item.key is not None else next(iter(self.inboxes.values()), None)
                if inbox is not None:
                    inbox.put(item)
                    continue
                if item.key is None or item.kind is Kind.ERROR or item.key in self.gone:
                    continue  # between utterances, an error about none in flight, or a cancelled one's
                item = Item(
                    Kind.BROKEN,
                    item.at,
                    message=f"the server sent {item.kind} for context {item.key!r}, which is not in flight",
                )
            self.lost = item
            for inbox in list(self.inboxes.values()):
                inbox.put(item)
            self.drop()
            return

    def read(self) -> Item | None:
        raise NotImplementedError

    def send(self, data) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        """Close the socket at once."""
        raise NotImplementedError

    def stop(self, why: str = "the connection was dropped: another utterance on it failed") -> None:
        """End the reader and drop the connection; utterances still on it end, told ``why``."""
        for task in (self.reader, self.keeper):
            if task is not None and task is not gevent.getcurrent():
                task.kill(block=False)
        self.drop()
        if self.lost is None:
            self.lost = Item(Kind.CLOSED, mono(), message=why)
            for inbox in list(self.inboxes.values()):
                inbox.put(self.lost)


#: The connection a session transport opens (its subclass of :class:`Connection`).
ConnT = TypeVar("ConnT", bound=Connection)


class SessionTransport(Transport, Generic[ConnT]):
    """A connection kept across utterances (``reuse``; else one per utterance), each utterance
    an exchange. Subclasses say how to connect, what to send and what a refusal is."""

    reuse = True
    routed = False  # frames name the utterance they belong to
    acks_cancel = False  # the server answers the cancel message
    ends_on_ack = False  # an utterance ends when its last flush is acknowledged
    flush_sentences = False  # the protocol has a flush, and the run flushes per sentence
    min_interval_s = 0.0
    rate, channels = 24000, 1  # the audio, unless the server says otherwise

    def __init__(self, settings):
        self.s = settings
        self.conn: ConnT | None = None
        self.rng = random.Random()
        self.opening = Semaphore()  # contexts share one connection: one of them opens it
        self.numbers = itertools.count(1)
        self.tag = f"{id(self):x}"

    # what a protocol provides

    def connect(self) -> ConnT:
        """A new, started connection; raises :class:`Refused`, or TransportError."""
        raise NotImplementedError

    def begin(self, conn: ConnT, key: str, text: str) -> None:
        """Send what starts an utterance (its number on the connection is ``conn.utterances``)."""

    def send_text(self, conn: ConnT, key: str, text: str) -> None:
        raise NotImplementedError

    def send_flush(self, conn: ConnT, key: str) -> None:
        """Send the protocol's flush (only called where ``flush_sentences`` is set)."""

    def send_end(self, conn: ConnT, key: str) -> None:
        raise NotImplementedError

    def send_cancel(self, conn: ConnT, key: str) -> None:
        """Send the protocol's cancel message for utterance ``key``."""
        raise NotImplementedError

    def close_now(self, conn: ConnT) -> None:
        """Close the connection to cancel what is on it; the reader's closed item follows."""
        conn.stop("the connection was closed to cancel the utterance")

    def answered(self) -> Answered:
        """The Answered of an utterance the server took."""
        raise NotImplementedError

    def refusal(self, item: Item) -> Answered | None:
        """The Answered of a first item that turns the utterance away, or None."""
        return None

    def goodbye(self, conn: ConnT) -> None:
        """End a connection politely (the protocol's close), then drop it."""
        conn.stop()

    # the session

    def key(self, number: int) -> str:
        """The inbox (and context) name of utterance ``number`` of this transport."""
        return f"{self.tag}-{number}"

    def _session(self) -> tuple[ConnT, float | None]:
        with self.opening:
            old = self.conn
            if old is not None and old.lost is None:
                return old, None
            if old is not None and old.lost is not None and not old.inboxes:  # ended while it idled (think time)
                log.info(
                    "%s: the session ended while it idled (%s, after %d keepalives); opening a new one",
                    self.s.target,
                    old.lost.message,
                    old.keepalives,
                )
            began = mono()
            self.conn = None
            conn = self.connect()
            self.conn = conn
            return conn, round((mono() - began) * 1000.0, 3)

    def exchange(self, text: str, ask: Ask = NO_ASK, cancel: Cancel | None = None):
        # a session speaks the run's one voice (--tts-voice): settings refuse a request mix for it
        key = self.key(next(self.numbers))
        try:
            conn, connect_ms = self._session()
        except Refused as refused:
            yield refused.answered
            yield Ended(mono(), str(refused))
            return
        conn.subscribe(key)
        conn.utterances += 1
        ok = False
        try:
            for event in self._converse(conn, key, text, connect_ms, cancel):
                if type(event) is Ended:
                    ok = event.audio is not None or self._clean(event, cancel)
                yield event
        except BaseException:  # broken, timed out, or the user stopped: the connection is mid-utterance
            self._drop(conn)
            raise
        finally:
            conn.unsubscribe(key)
        if not ok:
            self._drop(conn)
        elif not self.reuse:
            self._retire(conn)

    def _clean(self, ended: Ended, cancel: Cancel | None) -> bool:
        """A cancel that leaves the connection fit for the next utterance."""
        if ended.quiet is None or cancel is None or cancel.by != "message" or ended.note:
            return False
        return ended.quiet in ("acknowledged", "ended") or ended.quiet == "quiet" and self.routed

    def _drop(self, conn: ConnT) -> None:
        conn.stop()
        if self.conn is conn:
            self.conn = None

    def _retire(self, conn: ConnT) -> None:
        if not conn.inboxes:
            if self.conn is conn:
                self.conn = None
            self.goodbye(conn)

    def reset(self) -> None:
        if self.conn is not None:
            self._drop(self.conn)

    def hang_up(self) -> None:
        self.close()

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            if conn.lost is None:
                self.goodbye(conn)
            else:
                conn.stop()

    def _converse(
        self, conn: ConnT, key: str, text: str, connect_ms: float | None, cancel: Cancel | None
    ) -> Iterator[Event]:
        """One utterance on ``conn``: its text goes out as the pacer says while what the server
        sends about it (the utterance's inbox, filled by the reader) becomes events, until one of
        them is the :class:`Ended` that closes it. A barge-in's cancel hands the rest of the
        utterance to :meth:`_cancelled`."""
        inbox = conn.inboxes[key]
        if cancel is not None:  # the exchange's own greenlet carries the cancel out
            cancel.hook = lambda: inbox.put(Item(Kind.CANCEL, mono()))
        self._begin(conn, key, text)
        settings = self.s
        pacer = Pacer(
            schedule(text, settings.text_rate, settings.text_jitter, self.rng),
            mono(),
            self.flush_sentences,
            self.min_interval_s,
        )
        talk = _Talk(pacer, _Audio(self.rate, self.channels), self.answered(), connect_ms)
        while True:
            item = _next_item(inbox, pacer.wait_s(mono()))
            if item is None:  # text is due before the server said more
                yield from self._send_due(conn, key, talk)
            elif item.kind is Kind.CANCEL:
                assert cancel is not None  # only the cancel's own hook puts CANCEL in the inbox
                yield from self._cancelled(conn, key, inbox, talk.utt, cancel.by, talk.flushes - talk.acked)
                return
            elif not _stale_flush(conn, talk, item):
                for event in self._events(talk, item):
                    yield event
                    if type(event) is Ended:
                        return

    def _begin(self, conn: ConnT, key: str, text: str) -> None:
        """Send what starts the utterance; a connection that broke is said by its reader's item,
        or here where the reader has not seen it yet."""
        try:
            self.begin(conn, key, text)
        except OSError as error:
            if conn.lost is None:
                raise self._broke(conn, None, error) from None

    def _send_due(self, conn: ConnT, key: str, talk: _Talk) -> Iterator[TextSent]:
        """Send the text that is due, if any, and say so (:class:`TextSent`)."""
        send = talk.pacer.take(mono())
        if send is None:
            return
        try:
            self.send_text(conn, key, send.text)
            if send.flush:
                self.send_flush(conn, key)
            if send.last:
                self.send_end(conn, key)
        except OSError as error:
            if conn.lost is not None:
                return  # the reader saw why first: its item is in the inbox, told as it says
            raise self._broke(conn, talk.said and talk.answered, error) from None
        talk.flushes += send.flush + send.last
        yield TextSent(mono(), len(send.text), send.flush, send.last, talk.connect_ms)
        talk.connect_ms = None

    def _events(self, talk: _Talk, item: Item) -> list[Event]:
        """The events of an item the server sent about the utterance: its answer at the first
        (or its refusal, which ends it), what arrived, and what the item does to the utterance;
        an :class:`Ended` is the last event."""
        events: list[Event] = []
        if not talk.said:
            refused = self.refusal(item)
            if refused is not None:
                return [refused, Ended(item.at, f"{refused.said}: {item.message}")]
            if item.kind is Kind.CLOSED:
                raise TransportError(f"{item.message} before answering")
            talk.said = True
            events.append(talk.answered)
        if item.kind is Kind.CLOSED:
            raise TransportError(f"{talk.answered.said}, then {item.message} mid-utterance")
        events.append(Received(item.at, item.nbytes))
        return events + self._heard(talk, item)

    def _heard(self, talk: _Talk, item: Item) -> list[Event]:
        """What an item the server sent about the utterance does to it: the audio pieces it
        adds, or the :class:`Ended` of an utterance it ends (none for what only updates it)."""
        kind, utt = item.kind, talk.utt
        if kind is Kind.AUDIO:
            return list(utt.add(item))
        if kind is Kind.START:
            utt.start(item.rate)
        elif kind is Kind.END:
            return [utt.ended(item.at)]
        elif kind is Kind.FLUSHED:
            talk.acked += 1
            if self.ends_on_ack and talk.pacer.done and talk.acked >= talk.flushes:
                return [utt.ended(item.at)]
        elif kind is Kind.ERROR:
            if item.fatal:  # quoted after the non-fatal error that said why, where one did
                said_why = f"{utt.last_error}; then " if utt.last_error else ""
                return [Ended(item.at, f"the server said: {said_why}{item.message}")]
            utt.last_error = item.message
        elif kind is Kind.BROKEN:
            return [Ended(None, item.message)]
        return []

    def _cancelled(
        self, conn: ConnT, key: str, inbox: Queue, utt: _Audio, cancel_by: str, owed: int = 0
    ) -> Iterator[Event]:
        """The cancel carried out (see the module doc): what still arrives, then the Ended that
        says how the utterance went quiet. ``owed``: its flushes the server has not answered."""
        conn.gone.add(key)
        began = mono()
        try:
            if cancel_by == "message":
                self.send_cancel(conn, key)
            else:
                self.close_now(conn)
        except OSError as error:
            conn.stop()
            yield Ended(mono(), quiet="closed", note=f"the connection broke as the cancel was sent ({os_error(error)})")
            return
        waits_for_answer = cancel_by == "close" or self.acks_cancel
        deadline, last = began + CANCEL_WAIT_S, began
        while True:
            until = deadline if waits_for_answer else min(deadline, last + QUIET_S)
            try:
                item = inbox.get(timeout=max(0.0, until - mono()))
            except Empty:
                if not waits_for_answer:
                    yield Ended(mono(), quiet="quiet")
                    return
                conn.stop()
                answer = "acknowledge the cancel" if cancel_by == "message" else "close the connection"
                yield Ended(
                    mono(),
                    quiet="unacknowledged" if cancel_by == "message" else "closed",
                    note=f"the server did not {answer} within {CANCEL_WAIT_S:g} s: the connection was dropped",
                )
                return
            kind = item.kind
            if kind is Kind.AUDIO:
                yield Received(item.at, item.nbytes)
                yield from utt.add(item)
                last = item.at
            elif kind is Kind.FLUSHED:
                owed -= 1
            elif kind is Kind.CANCELLED:
                if item.key is None:  # the next utterance on the socket may yet see the flushes' answers
                    conn.stale_flushes = max(owed, 0)
                yield Ended(item.at, quiet="acknowledged")
                return
            elif kind is Kind.END:
                yield Ended(item.at, quiet="ended")
                return
            elif kind is Kind.CLOSED:
                yield Ended(
                    item.at,
                    quiet="closed",
                    note=None
                    if cancel_by == "close"
                    else f"{item.message} on the cancel: the next utterance opens a new connection",
                )
                return
            elif kind is Kind.BROKEN or kind is Kind.ERROR and item.fatal:
                yield Ended(
                    item.at, quiet="closed", note=f"after the cancel {item.message}: the connection was dropped"
                )
                return

    def _broke(self, conn: ConnT, answered, error: OSError) -> TransportError:
        why = f"the connection broke ({os_error(error)})"
        conn.stop()
        return TransportError(
            f"{answered.said}, then {why} while sending text" if answered else f"{why} while sending text"
        )


def _next_item(inbox: Queue, wait_s: float | None) -> Item | None:
    """The next item the reader put in the utterance's inbox within ``wait_s`` (at once when 0;
    None: no text is left to send, so for as long as it takes), or None: text is due."""
    try:
        return inbox.get_nowait() if wait_s == 0 else inbox.get(timeout=wait_s)
    except Empty:
        return None


def _stale_flush(conn: Connection, talk: _Talk, item: Item) -> bool:
    """Whether ``item`` answers a flush of a cancelled utterance before this one (it is then
    dropped); the first audio ends that possibility."""
    if item.kind is Kind.FLUSHED and conn.stale_flushes and not talk.utt.pcm_bytes:
        conn.stale_flushes -= 1
        return True
    if item.kind is Kind.AUDIO:
        conn.stale_flushes = 0
    return False


@dataclass(slots=True)
class _Talk:
    """One utterance's exchange as it goes: the text's pacing, the audio, the answer yielded at
    the server's first word (``said``), the flushes sent and acknowledged, the connection's
    opening time (told with the first text sent)."""

    pacer: Pacer
    utt: _Audio
    answered: Answered
    connect_ms: float | None
    said: bool = False
    flushes: int = 0
    acked: int = 0


class _Audio:
    """An utterance's PCM16 as it arrives: each arrival timed through the PCM parser, and the
    whole written as one WAV."""

    def __init__(self, rate: int, channels: int):
        self.rate, self.channels = rate, channels
        self.pcm: list[bytes] = []
        self.pcm_bytes = 0
        self.stream: containers.PcmStream | None = None
        self.pieces = _Pieces()
        self.last_error: str | None = None  # a non-fatal error, quoted if no audio comes

    def start(self, rate: int | None) -> None:
        if self.stream is None and rate:
            self.rate = rate

    def add(self, item: Item) -> list[AudioPiece]:
        if self.stream is None:
            self.start(item.rate)
            self.stream = containers.PcmStream(self.pieces, self.rate, self.channels, 2)
        self.pcm.append(item.data)
        self.pcm_bytes += len(item.data)
        self.pieces.out.clear()
        self.stream.feed(item.data, item.at)
        return self.pieces.out

    def ended(self, ended_at: float) -> Ended:
        frame = 2 * self.channels
        audio_bytes = self.pcm_bytes - self.pcm_bytes % frame
        if not audio_bytes:
            why = f" ({self.last_error})" if self.last_error else ""
            return Ended(ended_at, f"the utterance ended without audio{why}")
        data = [containers.wav_header(audio_bytes, self.rate, self.channels, 2), *self.pcm]
        if audio_bytes != self.pcm_bytes:  # half a sample at the end is no audio
            data[-1] = data[-1][: len(data[-1]) - (self.pcm_bytes - audio_bytes)]
        return Ended(
            ended_at,
            audio=containers.Audio(
                "wav", audio_bytes / (self.rate * frame), self.rate, self.channels, 2, 44, audio_bytes
            ),
            data=data,
        )


class _Pieces:
    """The PCM parser's sink: its arrivals, as events for the exchange to yield."""

    __slots__ = ("out",)

    def __init__(self):
        self.out: list[AudioPiece] = []

    def add(self, arrived_at: float, audio_ms: float | None) -> None:
        self.out.append(AudioPiece(arrived_at, audio_ms))


def os_error(error: OSError) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    name = errno.errorcode.get(error.errno or 0)
    return f"{name}: {error.strerror}" if name and error.strerror else str(error) or type(error).__name__
