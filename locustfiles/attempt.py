"""The attempt path every user shares, whatever the protocol: :class:`Caller` sends a text (its
segments, each with its attempts and retries) through a transport (locustfiles/transports/),
and turns the events the transport yields into the attempt's record (its audio arrivals
through :class:`~locustfiles.timeline.Timeline`).

Each attempt is timed on the monotonic clock — ``t0`` before sending, ``t1`` at the first byte
of the answer, ``t2`` when the answer is complete, ``t3`` when the audio is written and closed
— and becomes one record and one Locust request event. Failures the retry policy names are
retried, except once the run is stopping (``Run.stopping``): an attempt in flight then is
waited for (``Run.drain``), and one still running when the drain ends and its user is stopped
becomes a failed attempt with error ``cut_by_run_end`` and what had arrived by then. Audio is timed as it arrives,
and the playback it allows is judged by the one
playback model (:func:`analysis.playback.listen`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent

from tts_knee import runformat
from tts_knee.audio import containers, signal
from tts_knee.runformat.options import CUT_BY_RUN_END

from . import audio as audio_out
from .bargein import Listener
from .clock import mono, wall
from .headers import parse_retry_after
from .inputs import bodies
from .inputs.corpus import Text, split
from .timeline import Timeline
from .transports import (
    Answered,
    Ask,
    AudioPiece,
    Cancel,
    Ended,
    Event,
    Received,
    TextSent,
    TransportError,
    transport_for,
)

#: The streaming fields of an attempt whose answer carried no audio to time (refused, no answer).
_NO_STREAM = dict.fromkeys(runformat.ATTEMPT_STREAM)


#: An answer's audio as it came, per segment of a text: its buffers in order, and what they hold.
Parts = list[tuple[list[signal.Buffer], containers.Audio]]


def _signal(data: list[signal.Buffer] | None, audio: containers.Audio) -> dict[str, Any] | None:
    """The signal fields of an answer's PCM16 audio (:func:`audio.signal.check`), or None for
    audio it cannot read without decoding (MP3, Opus, AAC, FLAC, other sample widths)."""
    if (
        not data
        or audio.format not in ("wav", "pcm")
        or audio.sample_width != 2
        or not audio.data_bytes
        or not audio.sample_rate
    ):
        return None
    return signal.check_blocks(data, audio.data_offset, audio.data_bytes, audio.sample_rate, audio.channels or 1)


class AttemptFailed(Exception):
    """What Locust shows for a failed attempt: the reason, in one line."""


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000.0, 3)


@dataclass(frozen=True)
class Segment:
    """One logical request: a text, or one segment of a long one (``k`` of ``n``)."""

    req_id: str
    text: Text
    ask: Ask  # what the request asks for beside its words (voice, language, clip ...)
    words: str  # what is said
    k: int
    n: int
    seq: int  # the user's request number (it names the audio file with --audio-keep 0)
    sent: dict[str, Any] | None  # open loop: the step it was scheduled in, its ``scheduled`` time, in flight


class _BargeIn:
    """A listener's interruption of one attempt: its ``cancel``, fired ``after_s`` after the
    first audio heard (by ``timer``), and the audio that still arrived after it."""

    __slots__ = ("cancel", "after_s", "timer", "ms", "last")

    def __init__(self, cancel: Cancel, after_s: float) -> None:
        self.cancel, self.after_s = cancel, after_s
        self.timer: gevent.Greenlet[[], None] | None = None
        self.ms = 0.0
        self.last: float | None = None

    def add(self, piece: AudioPiece) -> None:
        self.ms += piece.ms or 0.0
        self.last = piece.at

    def fields(self, sent_mono: float, ended: Ended) -> dict[str, Any]:
        """The record's cancel fields: quiet at the acknowledgement where one came, else at the
        last audio (at the cancel itself when none came after it)."""
        cancel = self.cancel
        if ended.quiet == "acknowledged":
            quiet = ended.at
        elif ended.quiet == "unacknowledged":
            quiet = None
        else:
            quiet = cancel.at if self.last is None else self.last
        return {
            "cancelled": True,
            "cancel_ms": _ms(sent_mono, cancel.at),
            "cancel_to_quiet_ms": _ms(cancel.at, quiet),
            "audio_after_cancel_ms": round(self.ms, 3),
            "cancel_quiet": ended.quiet,
            "cancel_note": ended.note,
        }


@dataclass(slots=True)
class Attempt:
    """One attempt as :meth:`Caller._request` takes it: its ``record`` (lacking only what the
    request adds: its id, attempt number …), the transport's ``ended`` (None where none came),
    the monotonic clock at sending (``m0``) and at the complete answer (``m2``), what Locust's
    event reports (``elapsed_ms``), the status ``--retry-on`` judges (``http_status``, None for
    a failed connection), and the GreenletExit that ``cut`` it at the run's end, or None."""

    record: dict[str, Any]
    ended: Ended | None
    m0: float
    m2: float | None
    elapsed_ms: float
    http_status: int | str | None
    cut: gevent.GreenletExit | None


class _Arrivals:
    """What the transport's events said during one attempt: the first byte (``m1``), the whole
    answer (``m2``, ``ended``), the bytes, the answer's head, the audio's arrivals, and a
    barge-in (None where the listener does not interrupt this attempt)."""

    __slots__ = ("m1", "m2", "nbytes", "answer", "ended", "timeline", "barge_in")

    def __init__(self, barge_in: _BargeIn | None) -> None:
        self.m1: float | None = None
        self.m2: float | None = None
        self.nbytes = 0
        self.answer: Answered | None = None
        self.ended: Ended | None = None
        self.timeline = Timeline()
        self.barge_in = barge_in

    def audio(self, piece: AudioPiece) -> None:
        barge_in = self.barge_in
        if barge_in is not None and barge_in.cancel.at is not None:
            barge_in.add(piece)  # heard by nobody: not in the playback figures
            return
        self.timeline.add(piece.at, piece.ms)
        if barge_in is not None and barge_in.timer is None:  # counted from the first audio heard
            barge_in.timer = gevent.spawn_later(barge_in.after_s, barge_in.cancel.fire)

    def received(self, event: Received) -> None:
        if self.m1 is None:
            self.m1 = event.at
        self.nbytes += event.nbytes

    def text_sent(self, event: TextSent) -> None:
        self.timeline.text_sent(event.at, event.last, event.connect_ms)

    def answered(self, event: Answered) -> None:
        self.answer = event

    def end(self, event: Ended) -> None:
        self.ended, self.m2 = event, event.at


#: Each transport event's handler (another type of event is not the attempt's to time). Each
#: takes the event of its key's type, which a dict's type cannot say: hence ``Any``.
_ON_EVENT: dict[type[Event], Callable[[_Arrivals, Any], None]] = {
    AudioPiece: _Arrivals.audio,
    Received: _Arrivals.received,
    TextSent: _Arrivals.text_sent,
    Answered: _Arrivals.answered,
    Ended: _Arrivals.end,
}


class Caller:
    """One transport to the TTS endpoint and the attempt path: sends a text, records every
    attempt and fires its Locust request event. The closed-loop user owns one; the open-loop
    user one per request in flight."""

    def __init__(self, user, user_no: int, lane: int = 0):
        self.environment = user.environment
        self.run = user.environment.tts_knee.run
        self.s = self.run.settings
        self.no = user_no
        self.rng = random.Random()
        self.transport = transport_for(self.s, self.run.payload)
        # its own draws per user and lane (the open-loop user's callers side by side)
        self.listener = Listener(self.s, f"{self.run.worker_index}-{user_no}-{lane}") if self.s.barge_in else None

    def close(self) -> None:
        self.transport.close()

    def send(self, text: Text, ask: Ask, seq: int, sent: dict[str, Any] | None = None) -> None:
        """Send ``text``, asking for ``ask``, as request number ``seq`` of this caller's user. ``sent`` (open loop):
        the step it was scheduled in, its ``scheduled`` time and the ``concurrency`` at sending,
        which the records carry instead of the step running when each attempt starts."""
        segments = split(text.text, self.s.split_max_chars)
        base_id = f"{self.run.worker_tag}-{self.no}-{seq}"
        segment_count = len(segments)
        parts: Parts = []
        for segment_number, words in enumerate(segments, 1):
            req_id = base_id if segment_count == 1 else f"{base_id}.{segment_number}"
            rec = self._request(Segment(req_id, text, ask, words, segment_number, segment_count, seq, sent), parts)
            if rec is None or rec.get("cancelled"):
                return  # failed, or the listener interrupted: the rest of the text is not said

    def _request(self, seg: Segment, parts: Parts) -> dict[str, Any] | None:
        """All attempts of one segment; returns its final record, or None once it finally fails."""
        attempt, backoff_ms = 1, None
        run = self.run
        while True:
            run.in_flight += 1
            try:
                done = self._attempt(seg.words, seg.ask, seg.sent)
                rec, cut = done.record, done.cut
                retry = (
                    not rec["ok"]
                    and cut is None
                    and not run.stopping
                    and self.s.retry.should_retry(attempt, done.http_status)
                )
                runformat.attempt.update(
                    rec,
                    req_id=seg.req_id,
                    attempt=attempt,
                    final=not retry,
                    text_id=seg.text.id,
                    text_len=len(seg.words),
                    tier=seg.text.tier,
                    segment=f"{seg.k}/{seg.n}" if seg.n > 1 else None,
                    backoff_ms=backoff_ms,
                )
                voice = bodies.voice_label(self.s, seg.ask)
                language = seg.ask.language or seg.text.text_language
                if voice is not None or language is not None:
                    runformat.attempt.update(rec, voice=voice, language=language)
                if rec["ok"] and not rec.get("cancelled"):
                    ended, ended_mono = done.ended, done.m2
                    # an ok answer that was not interrupted came whole, with its audio (_hear)
                    assert (
                        ended is not None
                        and ended.data is not None
                        and ended.audio is not None
                        and ended_mono is not None
                    )
                    parts.append((ended.data, ended.audio))
                    if seg.k == seg.n:
                        try:
                            self._finish_audio(rec, parts, done.m0, ended_mono, seg)  # yields while the file is written
                        except gevent.GreenletExit as stop:
                            cut = stop  # stopped while writing: the attempt itself is whole, t3 stays null
                # The Locust event and the record go out together, with no yield in between, so a
                # user stopped mid-attempt leaves both or neither: the two counts always agree.
                self._fire(rec, attempt, done.elapsed_ms)
                run.emit(rec)
                if run.picker is not None and rec["ok"] and not retry:
                    run.picker.consider(rec, seg, parts)  # --asr-model: a clip for the judge
            finally:
                run.in_flight -= 1
            if cut is not None:
                raise cut
            if not retry:
                return rec if rec["ok"] else None
            delay = self.s.retry.delay_s(attempt, rec["retry_after_s"], self.rng)
            if rec["retry_after_s"] is not None and delay > 0:
                # Honour Retry-After measured from when the answer arrived, not from now.
                assert done.m2 is not None  # a refusal that said when to come back came whole
                delay = max(0.0, done.m2 + delay - mono())
            backoff_ms = round(delay * 1000.0, 3)
            gevent.sleep(delay)
            if run.stopping:
                return None  # the run stopped during the backoff: no attempt is sent now
            attempt += 1

    def _attempt(self, words: str, ask: Ask, sent: dict[str, Any] | None) -> Attempt:
        """One attempt: sent, timed as its events arrive, and judged (see :class:`Attempt`)."""
        settings = self.s
        step = self.run.state.current if sent is None else sent["step"]
        sent_wall, sent_mono = wall(), mono()
        after_s = self.listener.draw(words) if self.listener is not None else None
        got = _Arrivals(None if after_s is None else _BargeIn(Cancel(settings.cancel_by), after_s))
        error, cut = self._exchange(words, ask, got)
        answer, ended, first_byte_mono, ended_mono = got.answer, got.ended, got.m1, got.m2
        # a connection that failed after the answer began leaves no status: the answer never
        # completed; one cut at the run's end keeps the status that had come
        status = answer.status if answer is not None and (error is None or cut is not None) else None
        if answer is not None and answer.ok:
            stream = got.timeline.fields(sent_mono, settings.playback_buffer_ms, settings.tts_stream)
        else:
            stream = {**_NO_STREAM, **got.timeline.text_fields(sent_mono)}
        rec = runformat.attempt(
            step=step.step if step else None,
            concurrency=(step.concurrency if step else None) if sent is None else sent["concurrency"],
            worker=self.run.worker_id,
            user=self.no,
            t0=sent_wall,
            t1=None if first_byte_mono is None else sent_wall + (first_byte_mono - sent_mono),
            t2=None if ended_mono is None else sent_wall + (ended_mono - sent_mono),
            ttfb_ms=_ms(sent_mono, first_byte_mono),
            wait_ms=_ms(sent_mono, ended_mono),
            status=status,
            ok=False,
            error=error,  # an exchange that ran to its end: its answer's, below
            bytes=got.nbytes,
            settled=self.run.state.settled(step, sent_wall),
            **stream,
        )
        if sent is not None:  # open loop: waited from when the caller arrived, not from sending
            runformat.attempt.update(
                rec,
                scheduled=sent["scheduled"],
                sched_wait_ms=None
                if ended_mono is None
                else round((sent_wall + (ended_mono - sent_mono) - sent["scheduled"]) * 1000.0, 3),
            )
        if error is None:
            # an exchange that ran to its end was answered, and ended: the transports' contract
            assert answer is not None and ended is not None
            rec["error"] = ended.error
            self._judge(rec, got, answer, ended, sent_mono)
        elapsed_ms = rec["wait_ms"] if rec["wait_ms"] is not None else (mono() - sent_mono) * 1000.0
        http_status = None if status is None or answer is None else answer.http_status
        return Attempt(rec, ended, sent_mono, ended_mono, elapsed_ms, http_status, cut)

    def _exchange(self, words: str, ask: Ask, got: _Arrivals) -> tuple[str | None, gevent.GreenletExit | None]:
        """Run the transport's exchange into ``got`` within ``--request-timeout``: ``(the error
        that ended it, the GreenletExit that cut it at the run's end)``, each None where none did."""
        settings = self.s
        on_event = _ON_EVENT.get
        timeout = gevent.Timeout(settings.request_timeout)
        timeout.start()
        barge_in = got.barge_in
        try:
            events = (
                self.transport.exchange(words, ask)
                if barge_in is None
                else self.transport.exchange(words, ask, barge_in.cancel)
            )
            for event in events:
                handle = on_event(type(event))
                if handle is not None:
                    handle(got, event)
        except gevent.Timeout as fired:
            if fired is not timeout:
                raise
            stage = "before the first byte" if got.m1 is None else "while reading the body"
            error = f"timed out after {settings.request_timeout:g} s {stage}"
            return (error if got.answer is None else f"{got.answer.said}, then {error}"), None
        except TransportError as raised:
            return str(raised), None
        except gevent.GreenletExit as raised:
            if not self.run.stopping:
                raise  # a user stopped mid-step leaves no record (nor a Locust event)
            return CUT_BY_RUN_END, raised
        finally:
            timeout.close()
            if barge_in is not None and barge_in.timer is not None:
                barge_in.timer.kill(block=False)
        return None, None

    def _judge(self, rec: dict[str, Any], got: _Arrivals, answer: Answered, ended: Ended, sent_mono: float) -> None:
        """An answer that came whole, into its record: its audio heard and checked where it
        carries audio, its Retry-After where it refused (in place)."""
        rec["server_timing"] = answer.server_timing
        if not answer.ok:
            if answer.retry_after_raw is not None:
                rec["retry_after_raw"] = answer.retry_after_raw
                rec["retry_after_s"] = (
                    answer.retry_after_s
                    if answer.retry_after_s is not None
                    else parse_retry_after(answer.retry_after_raw, wall())
                )
        elif ended.quiet is not None:
            rec["ok"] = True  # interrupted, not failed
            heard = [piece_ms for piece_ms in got.timeline.audio_ms if piece_ms is not None]
            rec["audio_s"] = round(sum(heard) / 1000.0, 6) if heard else None
            barge_in = got.barge_in
            assert barge_in is not None  # only an exchange the listener interrupted goes quiet
            runformat.attempt.update(rec, **barge_in.fields(sent_mono, ended))
        elif ended.audio is not None:
            self._hear(rec, got, ended, ended.audio, sent_mono)

    def _hear(
        self, rec: dict[str, Any], got: _Arrivals, ended: Ended, audio: containers.Audio, sent_mono: float
    ) -> None:
        """A whole answer's ``audio`` (``ended.audio``): its length and real-time factor, and the
        signal checks (a silent answer fails with ``signal.SILENT``)."""
        heard = _signal(ended.data, audio)
        if heard is not None and heard.pop("silent"):
            rec["error"] = signal.SILENT
            return
        rec["ok"] = True
        rec["audio_s"] = None if audio.audio_s is None else round(audio.audio_s, 6)
        if audio.audio_s:
            ended_mono = ended.at
            assert ended_mono is not None  # audio that checked out came whole
            rec["rtf"] = round((ended_mono - sent_mono) / audio.audio_s, 6)
        if heard is not None:
            heard["ttfa_audible_ms"] = got.timeline.audible_ms(
                sent_mono, self.s.playback_buffer_ms, heard["leading_silence_ms"]
            )
            runformat.attempt.update(rec, **heard)

    def _fire(self, rec: dict[str, Any], attempt: int, elapsed_ms: float) -> None:
        # Retried attempts get a name of their own so Locust's table shows them apart.
        name = self.transport.name if attempt == 1 else f"{self.transport.name} (retry)"
        self.environment.events.request.fire(
            request_type=self.transport.request_type,
            name=name,
            response_time=elapsed_ms,
            response_length=rec["bytes"],
            response=None,
            context={},
            exception=None if rec["ok"] else AttemptFailed(rec["error"]),
        )

    def _finish_audio(
        self, rec: dict[str, Any], parts: Parts, sent_mono: float, ended_mono: float, seg: Segment
    ) -> None:
        data: list[signal.Buffer]
        if len(parts) > 1:
            try:
                data = [containers.concat([(b"".join(blocks), segment_audio) for blocks, segment_audio in parts])]
            except containers.AudioError as error:
                rec.update(ok=False, error=str(error))
                return
            rec["concat_ms"] = round((mono() - ended_mono) * 1000.0, 3)
            # PCM that joined has every segment's length (only a format it cannot join lacks one)
            rec["audio_s"] = round(sum(segment_audio.audio_s or 0.0 for _, segment_audio in parts), 6)
        else:
            data = parts[0][0]
        path = self.run.audio_path(seg.text, self.no, seg.seq)
        if path is None:
            return
        try:
            audio_out.writer(self.environment.tts_knee).write(path, data)
        except audio_out.AudioMissing as error:  # the disk did not keep up: the record says so
            runformat.attempt.update(rec, audio_file=error.kind)
            return
        except OSError as error:
            self.run.audio_failed(error)
            return
        written_mono = mono()
        rec["t3"] = rec["t0"] + (written_mono - sent_mono)
        rec["write_ms"] = _ms(ended_mono, written_mono)
