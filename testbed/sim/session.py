"""What the simulator's session faces (WebSocket: :mod:`testbed.sim.ws`; Wyoming:
:mod:`testbed.sim.wyoming`) share: an utterance whose text arrives in pieces and whose
sentences are synthesised one after another, each once its text is complete, on the shared
:class:`~testbed.sim.capacity.Capacity` (so paced text changes the timing as it would on a real
engine: the first audio cannot come before the first sentence's text has).

An utterance is one admitted request. It takes its turn when its first sentence is ready and
holds it to its end; each sentence is a generation of its own on the shared engine (its
prefill, then its chunks), as vLLM-Omni sends each sentence to its engine. The face reads the
client's messages and hands the utterance its text (:meth:`Utterance.add`, :meth:`Utterance.done`)
while :meth:`Utterance.speak` runs in a greenlet of its own, writing through the face's
:class:`Voice`. ``--chunk-log`` gets one line per utterance: when its first piece of text and
its end arrived, and when each audio write was handed to the socket, and, for a cancelled one,
when the cancel (or the client's going away) was seen, and what the drills did to its sentences
(``garbled``, ``silence_ms``, ``runaway``: see :class:`~testbed.sim.audio.Speaker`).

A cancelled utterance (:meth:`Utterance.cancel`) writes nothing more and stops its making at
once; its turn is abandoned, held ``--orphan-ms`` longer where that is set.
"""

from __future__ import annotations

import json
import re
import time

from gevent.queue import Queue

from tts_knee.testbed.sim.audio import Clip
from tts_knee.testbed.sim.capacity import Turn

#: Where a sentence ends: its stop (and closing quotes), then a space; a CJK stop needs none.
SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f][\u201d\u300d\u300f]*\s*")


def split_sentences(text: str) -> list[str]:
    """The sentences an utterance of ``text`` is synthesised as (what :meth:`Utterance.add` then
    :meth:`Utterance.done` make of it)."""
    sentences = []
    while True:
        m = SENTENCE_END.search(text)
        if not m:
            break
        sentence, text = text[: m.end()].strip(), text[m.end() :]
        if sentence:
            sentences.append(sentence)
    return [*sentences, text.strip()] if text.strip() else sentences


class Voice:
    """What a face writes for an utterance; each method sends one message (or several)."""

    def sentence(self, index: int, text: str, rate: int) -> None:
        """A sentence's audio begins."""

    def audio(self, index: int, pcm: bytes) -> None:
        raise NotImplementedError

    def sentence_done(self, index: int, nbytes: int) -> None:
        """A sentence's audio is complete."""

    def finished(self, sentences: int) -> None:
        """The utterance is complete."""
        raise NotImplementedError

    def fault(self, name: str) -> None:
        """Carry out a mid-stream fault (reset, garbage, sse-error, truncate) this protocol's way."""
        raise NotImplementedError


class Utterance:
    """One utterance of a session, admitted already (see the module doc). ``fault``: a
    mid-stream fault picked for it, which strikes after half of its first sentence's audio;
    ``label`` names it in the chunk log."""

    def __init__(self, app, voice: Voice, label: dict, fault: str | None = None):
        self.app, self.voice, self.label, self.fault = app, voice, label, fault
        self.buffer = ""
        self.sentences: Queue = Queue()  # complete sentences, then None once the text is done
        self.text_first: float | None = None
        self.text_done: float | None = None
        self.turn: Turn | None = None
        self.generating: float | None = None  # when its first sentence began to share the capacity
        self.sent: list[float] = []
        self.audio_ms: list[float] = []
        self.ended = False
        self.cancelled: float | None = None  # unix seconds the cancel was seen
        self.clips: list[Clip] = []  # each sentence's, for the chunk log's garbled, silence_ms, runaway

    def add(self, text: str) -> None:
        """A piece of text arrived."""
        if self.text_first is None:
            self.text_first = time.time()
        self.buffer += text
        while True:
            m = SENTENCE_END.search(self.buffer)
            if not m:
                return
            sentence, self.buffer = self.buffer[: m.end()].strip(), self.buffer[m.end() :]
            if sentence:
                self.sentences.put(sentence)

    def done(self) -> None:
        """The end of the text: what is left is the last sentence."""
        now = time.time()
        if self.text_first is None:
            self.text_first = now
        self.text_done = now
        if self.buffer.strip():
            self.sentences.put(self.buffer.strip())
        self.buffer = ""
        self.sentences.put(None)

    def cancel(self) -> None:
        """The client cancelled the utterance, or went away: nothing more is written."""
        if self.cancelled is not None or self.ended:
            return
        self.cancelled = time.time()
        self.sentences.put(None)  # wakes a speaker still waiting for text
        if self.turn is not None:
            self.turn.stop()

    def speak(self) -> None:
        """Synthesise each sentence as it becomes complete; then tell the voice the utterance is
        done. Runs in a greenlet of its own; killing it stops the making."""
        capacity, audio = self.app.capacity, self.app.audio
        index = 0
        try:
            while True:
                sentence = self.sentences.get()
                if self.cancelled is not None:
                    return
                if sentence is None:
                    break
                if self.turn is None:
                    self.turn = capacity.take(sentence)
                    if self.cancelled is not None:
                        return
                clip = audio.clip(sentence, capacity.admitted)
                self.clips.append(clip)
                pcm = clip.pcm
                nbytes = 0
                for piece in self.turn.pieces(pcm):
                    if self.cancelled is not None:
                        return
                    if self.fault and nbytes + len(piece) > len(pcm) // 2:
                        self.voice.fault(self.fault)
                        return
                    if not nbytes:  # announced with its first audio, as vLLM-Omni's streamed pcm and wyoming-piper do
                        self.voice.sentence(index, sentence, audio.sample_rate)
                    self.voice.audio(index, piece)
                    self.sent.append(time.time())
                    self.audio_ms.append(audio.seconds(piece) * 1000)
                    nbytes += len(piece)
                    if self.generating is None:
                        self.generating = self.turn.generating
                if self.cancelled is not None:
                    return
                self.voice.sentence_done(index, nbytes)
                index += 1
            self.voice.finished(index)
        finally:
            self.end()

    def end(self) -> None:
        """Release the turn (or the admission, if no sentence ever came) and log the utterance."""
        if self.ended:
            return
        self.ended = True
        capacity = self.app.capacity
        if self.turn is None:
            capacity.withdraw()
        elif self.cancelled is None:
            self.turn.finish()
        else:
            self.turn.abandon(self.app.args.orphan_ms / 1000)
        log_file = self.app.args.chunk_log
        if log_file and self.sent:
            log_file.write(
                json.dumps(
                    {
                        **self.label,
                        "text_first": _round(self.text_first),
                        "text_done": _round(self.text_done),
                        "generating": _round(self.generating),
                        "sent": [round(t, 6) for t in self.sent],
                        "audio_ms": [round(ms, 3) for ms in self.audio_ms],
                        **Clip.merged(self.clips),
                        **({} if self.cancelled is None else {"cancelled": _round(self.cancelled)}),
                    }
                )
                + "\n"
            )


def _round(t: float | None) -> float | None:
    return None if t is None else round(t, 6)
