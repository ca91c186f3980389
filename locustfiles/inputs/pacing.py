"""Text paced as a language model writes it, for every protocol that takes text in pieces
(WebSocket, Wyoming, gRPC's bidirectional streams).

A text becomes :class:`Piece` s, each with the time it is due after the utterance's first
piece: with ``--text-rate R`` one token every 1/R s (a token is a word with its trailing space;
in scripts written without spaces, one character), each gap drawn from (1 +/- ``--text-jitter``)
times that; without a rate, the whole text at once. A :class:`Pacer` then says, on the
transport's clock, when the next send is due and what to send then (:class:`Send`): the pieces
due by then, joined, so a sender that fell behind catches up in one message instead of
queueing many (some servers drop a client that queues too many messages while they generate,
sglang-omni past 16); ``min_interval_s`` spaces sends at least that far apart for such
servers. A send stops at a sentence's end where the run flushes per sentence
(``--flush sentence``), so that the transport can send the protocol's flush after it.

Nothing here knows a protocol or reads a socket: the transport asks :meth:`Pacer.wait_s`
how long it may wait for the server, and :meth:`Pacer.take` what is due; :meth:`Pacer.sends`
does both with a sleep, for a protocol whose client library pulls its requests from an
iterator.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Han, kana, hangul and the full-width forms: scripts written without spaces, where a language
# model's token is about one character. Anything else is a word up to the next space.
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"\s*(?:[{_CJK}][\u3000-\u303f\uff00-\uffef]*|[^\s{_CJK}]+)\s*")
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\]\u300d\u300f]*\s*$")


@dataclass(frozen=True, slots=True)
class Piece:
    """One token of a text, ``due_s`` seconds after the first; ``sentence_end``: it completes a
    sentence; ``last``: it is the text's last."""

    text: str
    due_s: float
    sentence_end: bool
    last: bool


@dataclass(frozen=True, slots=True)
class Send:
    """What to send now: ``text`` (``pieces`` pieces joined); ``flush``: a sentence ends here
    and the run flushes per sentence; ``last``: the text is complete (the final flush follows)."""

    text: str
    pieces: int
    flush: bool
    last: bool


def tokens(text: str) -> list[str]:
    """``text`` as a language model's tokens: words with their trailing space (the text's
    leading space goes with the first), single characters in scripts without spaces. Joined,
    they are the text (one of nothing but spaces is one token)."""
    return _TOKEN.findall(text) or ([text] if text else [])


def ends_sentence(token: str) -> bool:
    return bool(_SENTENCE_END.search(token))


def schedule(text: str, rate: float | None, jitter: float = 0.0, rng: random.Random | None = None) -> list[Piece]:
    """The pieces of ``text`` and when each is due: ``rate`` tokens per second (None or 0: the
    whole text at once), each gap (1 +/- ``jitter``) / rate, drawn from ``rng``."""
    if not rate:
        return [Piece(text, 0.0, True, True)]
    toks = tokens(text) or [text]
    gap, due_s, out = 1.0 / rate, 0.0, []
    draw = (rng or random).uniform
    for i, tok in enumerate(toks):
        if i:
            due_s += gap * (1.0 + draw(-jitter, jitter)) if jitter else gap
        out.append(Piece(tok, due_s, ends_sentence(tok), i == len(toks) - 1))
    return out


class Pacer:
    """Sends ``pieces`` on their schedule from ``start`` (seconds on the caller's clock),
    coalescing what is due (see the module doc). ``flush_sentences``: a send stops after a
    sentence's end, flagged ``flush``."""

    __slots__ = ("pieces", "start", "flush_sentences", "min_interval_s", "next", "last_sent")

    def __init__(self, pieces: list[Piece], start: float, flush_sentences: bool = False, min_interval_s: float = 0.0):
        self.pieces = pieces
        self.start = start
        self.flush_sentences = flush_sentences
        self.min_interval_s = min_interval_s
        self.next = 0  # the first piece not yet sent
        self.last_sent: float | None = None

    @property
    def done(self) -> bool:
        return self.next >= len(self.pieces)

    def due_at(self) -> float | None:
        """When the next send is due on the caller's clock; None once everything is sent."""
        if self.done:
            return None
        due = self.start + self.pieces[self.next].due_s
        if self.last_sent is not None:
            due = max(due, self.last_sent + self.min_interval_s)
        return due

    def wait_s(self, now: float) -> float | None:
        """Seconds from ``now`` until the next send is due (0: now); None once all is sent."""
        due = self.due_at()
        return None if due is None else max(0.0, due - now)

    def take(self, now: float) -> Send | None:
        """The send due at ``now``, or None when nothing is due yet (or nothing is left)."""
        due = self.due_at()
        if due is None or due > now:
            return None
        first, pieces = self.next, self.pieces
        end = first
        while end < len(pieces) and self.start + pieces[end].due_s <= now:
            end += 1
            if self.flush_sentences and pieces[end - 1].sentence_end:
                break
        self.next, self.last_sent = end, now
        tail = pieces[end - 1]
        return Send(
            "".join(piece.text for piece in pieces[first:end]),
            end - first,
            self.flush_sentences and tail.sentence_end and not tail.last,
            tail.last,
        )

    def sends(self, clock: Callable[[], float], sleep: Callable[[float], object]) -> Iterator[Send]:
        """Every send, each once it is due: sleeps with ``sleep`` on ``clock`` in between."""
        while not self.done:
            now = clock()
            wait = self.wait_s(now)
            if wait:
                sleep(wait)
                now = clock()
            send = self.take(now)
            if send is not None:
                yield send
