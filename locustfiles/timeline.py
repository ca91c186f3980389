"""The listener's side of an attempt: the arrivals that carried audio, and the record fields
they give (TTFA, chunks, the largest gap, the underruns of the one playback model,
:func:`analysis.playback.listen`, and the pre-roll and longest stall without a buffer), timed
against the text where it was sent in pieces (the first piece, the end of the text, the tail
after it). Reads no clock and imports neither locust nor gevent: the container tests feed it by
hand."""

from __future__ import annotations

from typing import Any, overload

from tts_knee.analysis.playback import heard_at, listen, preroll, stall_max

#: Most arrivals kept per attempt in ``chunk_at_ms``; later ones merge into the last entry.
MAX_CHUNKS = 4000


class Timeline:
    """Arrivals that carried audio: when (monotonic seconds) and how much (ms, or None); and,
    where the text went in pieces, when the first piece and the end of the text were sent."""

    __slots__ = ("at", "audio_ms", "text_first", "text_done", "connect_ms")

    def __init__(self):
        self.at: list[float] = []
        self.audio_ms: list[float | None] = []
        self.text_first: float | None = None
        self.text_done: float | None = None  # the end of the text, its final flush
        self.connect_ms: float | None = None  # opening the session the text went on

    def add(self, arrived_at: float, audio_ms: float | None) -> None:
        self.at.append(arrived_at)
        self.audio_ms.append(audio_ms)

    def text_sent(self, sent_at: float, last: bool, connect_ms: float | None = None) -> None:
        if self.text_first is None:
            self.text_first = sent_at
            self.connect_ms = None if connect_ms is None else round(connect_ms, 3)
        if last:
            self.text_done = sent_at

    def text_fields(self, sent_mono: float) -> dict:
        """``text_first_ms`` and ``text_done_ms`` after ``sent_mono``, and ``connect_ms``, where text
        was sent in pieces (else nothing: the record leaves the fields out)."""
        if self.text_first is None:
            return {}
        return {
            "text_first_ms": _ms(sent_mono, self.text_first),
            "text_done_ms": _ms(sent_mono, self.text_done),
            "connect_ms": self.connect_ms,
        }

    def audible_ms(self, sent_mono: float, buffer_ms: float, lead_ms: float) -> float | None:
        """``ttfa_audible_ms``: when the player of these arrivals plays the first sound, past
        ``lead_ms`` of leading silence, from TTFA's origin; None where an arrival's audio is
        unknown."""
        if not self.at or None in self.audio_ms:
            return None
        at_ms = [(arrived_at - sent_mono) * 1000.0 for arrived_at in self.at]
        heard = heard_at(at_ms, self.audio_ms, buffer_ms, lead_ms)  # type: ignore[arg-type]  # no None: checked above
        if heard is None:
            return None
        first = sent_mono if self.text_first is None else self.text_first
        return round(heard - (first - sent_mono) * 1000.0, 3)

    def fields(self, sent_mono: float, buffer_ms: float, keep_lists: bool) -> dict:
        """The attempt record's streaming fields, times relative to ``sent_mono`` (the monotonic
        clock at sending). Where text was sent in pieces, TTFA counts from the first one, and the
        text's fields come along: the wait for audio after the end of the text (0 when audio was
        already flowing) and the tail, from the end of the text to the last audio."""
        arrivals, count = self.at, len(self.at)
        known = count and None not in self.audio_ms
        first = sent_mono if self.text_first is None else self.text_first
        out: dict[str, Any] = {
            "ttfa_ms": _ms(first, arrivals[0]) if count else None,
            "chunks": count,
            "gap_max_ms": round(max(later - earlier for earlier, later in zip(arrivals, arrivals[1:])) * 1000.0, 3)
            if count > 1
            else None,
            "underruns": None,
            "underrun_ms": None,
            "chunk_at_ms": None,
            "chunk_audio_ms": None,
        }
        if known:
            at_ms = [(arrived_at - sent_mono) * 1000.0 for arrived_at in arrivals]
            heard: list[float] = self.audio_ms  # type: ignore[assignment]  # known: no None in it
            _, stalls = listen(at_ms, heard, buffer_ms)
            out["underruns"] = len(stalls)
            out["underrun_ms"] = round(sum((resumed - dry for dry, resumed in stalls), 0.0), 3)
            need, longest = preroll(at_ms, heard), stall_max(at_ms, heard)
            out["preroll_ms"] = None if need is None else round(need, 3)
            out["stall_max_ms"] = None if longest is None else round(longest, 3)
        if keep_lists:
            cut = min(count, MAX_CHUNKS)
            out["chunk_at_ms"] = [round((arrived_at - sent_mono) * 1000.0, 1) for arrived_at in arrivals[:cut]]
            if known:
                # known: no None in them
                audio_ms: list[float] = self.audio_ms[:cut]  # type: ignore[assignment]
                if count > cut:
                    audio_ms[-1] = sum(self.audio_ms[cut - 1 :])  # type: ignore[arg-type]
                out["chunk_audio_ms"] = [round(piece_ms, 3) for piece_ms in audio_ms]
        if self.text_first is not None:
            out.update(self.text_fields(sent_mono))
            done = self.text_done
            if count and done is not None:
                out["done_to_audio_ms"] = max(0.0, _ms(done, arrivals[0]))
                out["tail_ms"] = max(0.0, _ms(done, arrivals[-1]))
            else:
                out["done_to_audio_ms"] = out["tail_ms"] = None
        return out


@overload
def _ms(start: float, end: float) -> float: ...
@overload
def _ms(start: float, end: float | None) -> float | None: ...
def _ms(start: float, end: float | None) -> float | None:
    return None if end is None else round((end - start) * 1000.0, 3)
