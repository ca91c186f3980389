"""Streamed responses, parsed as their bytes arrive: where the audio samples start, how much
audio each arrival carried, and what a player fed by those arrivals would have heard.

The user reads a body in blocks, stamps each block with the monotonic clock and feeds it to
the parser :func:`parser_for` picked from the Content-Type (and the body's first bytes):

- WAV, incrementally: the header may arrive alone or split anywhere, sizes may be
  placeholders, extra chunks (LIST, fact) may precede the data; durations are exact.
- raw PCM16 (``--tts-format pcm``) at ``--tts-sample-rate``: exact.
- MP3 and ADTS-AAC by their frame headers, Ogg (Opus, Vorbis) by its pages' granule
  positions: exact sample counts per frame or page (the encoder's priming and padding
  included, as the container counts them). FLAC: timed from its first frame, durations null.
- ``text/event-stream``: OpenAI's ``speech.audio.delta`` events with base64 PCM16 (and the
  variants servers send), framed per the WHATWG server-sent-events rules.

Each parser reports arrivals to a :class:`Timeline`; nothing here reads the clock itself.
A body that cannot be the stream it claims raises :class:`StreamError` with one sentence.
"""
from __future__ import annotations

import binascii
import json
import math
import struct

from . import audio as audio_mod

#: Most arrivals kept per attempt in ``chunk_at_ms``; later ones merge into the last entry.
MAX_CHUNKS = 4000
#: Body bytes looked at before deciding what a non-WAV body is (as audio.check_audio does).
SNIFF_BYTES = 256


class StreamError(ValueError):
    """The stream broke its own format, or the server said it failed; one sentence."""


# ---- arrivals and the player ---------------------------------------------------------------

class Timeline:
    """Arrivals that carried audio: when (monotonic seconds) and how much (ms, or None)."""

    __slots__ = ("at", "audio_ms")

    def __init__(self):
        self.at: list[float] = []
        self.audio_ms: list[float | None] = []

    def add(self, at: float, ms: float | None) -> None:
        self.at.append(at)
        self.audio_ms.append(ms)

    def fields(self, m0: float, buffer_ms: float, keep_lists: bool) -> dict:
        """The attempt record's streaming fields, times relative to ``m0``."""
        at, n = self.at, len(self.at)
        known = n and None not in self.audio_ms
        out = {"ttfa_ms": round((at[0] - m0) * 1000.0, 3) if n else None, "chunks": n,
               "gap_max_ms": round(max(b - a for a, b in zip(at, at[1:])) * 1000.0, 3) if n > 1 else None,
               "underruns": None, "underrun_ms": None, "chunk_at_ms": None, "chunk_audio_ms": None}
        if known:
            runs, silent_ms = playback([(t - m0) * 1000.0 for t in at], self.audio_ms, buffer_ms)
            out["underruns"], out["underrun_ms"] = runs, round(silent_ms, 3)
        if keep_lists:
            cut = min(n, MAX_CHUNKS)
            out["chunk_at_ms"] = [round((t - m0) * 1000.0, 1) for t in at[:cut]]
            if known:
                ms = self.audio_ms[:cut]
                if n > cut:
                    ms[-1] = sum(self.audio_ms[cut - 1:])
                out["chunk_audio_ms"] = [round(x, 3) for x in ms]
        return out


_FLOAT_NOISE_MS = 1e-6   # sums of float milliseconds; not a gap anyone could hear


def playback(at_ms, audio_ms, buffer_ms: float) -> tuple[int, float]:
    """Underruns of a player fed by these arrivals: ``(count, silence in ms)``.

    It starts once ``buffer_ms`` of audio is in (at least some audio), or at the last
    arrival if that never happens, and plays at 1x. Each time it runs dry before the next
    arrival with audio is one underrun, and the wait until that arrival is silence; it resumes
    at once. An arrival without a whole frame neither ends nor splits a stall.
    """
    have = 0.0
    for i, (t, ms) in enumerate(zip(at_ms, audio_ms)):
        have += ms
        if have > 0 and have >= buffer_ms:
            break
    else:
        return 0, 0.0   # never buffered enough: starts at the end with everything in
    dry_at, runs, silent = t + have, 0, 0.0
    for t, ms in zip(at_ms[i + 1:], audio_ms[i + 1:]):
        if not ms:
            continue   # no whole frame in it: the player stays dry (or keeps playing) as it was
        if t - dry_at > _FLOAT_NOISE_MS:
            runs += 1
            silent += t - dry_at
            dry_at = t + ms
        else:
            dry_at += ms
    return runs, silent


# ---- choosing a parser ---------------------------------------------------------------------

def parser_for(content_type: str | None, expect: str, pcm_rate: int, timeline: Timeline):
    """The parser for a 2xx body with this Content-Type, expecting ``--tts-format expect``."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    if ctype == "text/event-stream":
        return SseStream(timeline, pcm_rate)
    return Sniffer(timeline, ctype, expect, pcm_rate)


class Sniffer:
    """Holds a body's first bytes until it can tell what the body is, then hands them, with
    their arrival times, to the parser for it. Bodies that are not audio get no parser (the
    whole-body check names what they are): none of their arrivals counts as audio."""

    def __init__(self, timeline: Timeline, ctype: str, expect: str, pcm_rate: int):
        self.timeline, self.ctype, self.expect, self.pcm_rate = timeline, ctype, expect, pcm_rate
        self.held: list[tuple[bytes, float]] = []
        self.size = 0
        self.inner = None

    def feed(self, block: bytes, at: float) -> None:
        if self.inner is not None:
            self.inner.feed(block, at)
            return
        self.held.append((block, at))
        self.size += len(block)
        if self.size >= SNIFF_BYTES or (self.size >= 4 and self.held[0][0][:4] == b"RIFF"):
            self._choose()

    def finish(self) -> None:
        if self.inner is None and self.held:
            self._choose()
        if self.inner is not None:
            self.inner.finish()

    def _choose(self) -> None:
        first = self.held[0][0]
        head = first[:SNIFF_BYTES] if len(first) >= SNIFF_BYTES else b"".join(b for b, _ in self.held)[:SNIFF_BYTES]
        self.inner = _pick(head, self.ctype, self.expect, self.pcm_rate, self.timeline)
        held, self.held = self.held, []
        for block, at in held:
            self.inner.feed(block, at)

    def duration_s(self) -> float | None:
        """Seconds of compressed audio counted from frame headers, or None."""
        return self.inner.duration_s() if isinstance(self.inner, _Framed) else None


def _pick(head: bytes, ctype: str, expect: str, pcm_rate: int, timeline: Timeline):
    if head[:4] == b"RIFF":
        return WavStream(timeline)
    if ctype.startswith("text/") or ctype.endswith("json") or audio_mod._looks_textual(head):
        return _NotAudio()
    if expect == "pcm":
        return PcmStream(timeline, pcm_rate, 1, 2)
    if expect == "wav":
        return _NotAudio()
    # the magic numbers audio.check_audio accepts, so the two never disagree on what audio is
    kind = next((fmt for magic, fmt in audio_mod._MAGIC.items() if head.startswith(magic)), None)
    return {"mp3": MpegStream, "ogg": OggStream, "aac": AdtsStream, "flac": FlacStream}.get(kind, _NotAudio)(timeline)


class _NotAudio:
    def __init__(self, timeline: Timeline | None = None):
        pass

    def feed(self, block: bytes, at: float) -> None:
        pass

    def finish(self) -> None:
        pass


class FlacStream:
    """FLAC: the metadata blocks after ``fLaC`` are skipped by their lengths; each arrival
    with frame bytes is timed, its duration null (FLAC frames do not carry their length)."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.buf = bytearray()   # the body from its start, until the frames begin
        self.next = 4            # offset of the next metadata block header
        self.frames_at = None    # offset of the first frame, once known
        self.got = 0

    def feed(self, block: bytes, at: float) -> None:
        self.got += len(block)
        if self.frames_at is None:
            self.buf += block
            while len(self.buf) >= self.next + 4:
                head = self.buf[self.next:self.next + 4]
                self.next += 4 + int.from_bytes(head[1:4], "big")
                if head[0] & 0x80:   # the last metadata block
                    self.frames_at, self.buf = self.next, bytearray()
                    break
        if self.frames_at is not None and self.got > self.frames_at:
            self.timeline.add(at, None)

    def finish(self) -> None:
        pass


# ---- PCM and WAV ---------------------------------------------------------------------------

class PcmStream:
    """Interleaved integer PCM: every byte is audio; an arrival's duration is the whole
    frames it completes, so the durations sum to the body's ``audio_s``."""

    def __init__(self, timeline: Timeline, rate: int, channels: int, width: int, limit: float = math.inf):
        self.timeline = timeline
        self.frame = channels * width
        self.ms_per_frame = 1000.0 / rate
        self.limit = limit       # audio bytes the header promises (inf for placeholders)
        self.got = 0

    def feed(self, block: bytes, at: float) -> None:
        self.count(len(block), at)

    def count(self, n: int, at: float) -> None:
        """``n`` more body bytes arrived at ``at``."""
        before = self.got
        self.got = min(self.limit, before + n)
        if self.got > before:
            frames = self.got // self.frame - before // self.frame
            self.timeline.add(at, frames * self.ms_per_frame)

    def finish(self) -> None:
        pass


class WavStream:
    """A WAV body: header bytes are held until the data chunk starts, then it is PCM."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.head = bytearray()  # the header so far, while it spans reads
        self.pos = 12            # next chunk header to look at
        self.fmt = None
        self.inner = None        # PcmStream once the data chunk has begun; _NotAudio if broken

    def feed(self, block: bytes, at: float) -> None:
        if self.inner is not None:
            self.inner.feed(block, at)
            return
        if self.head:
            self.head += block
            buf = self.head
        else:
            buf = block          # the usual case: the whole header in one read, not copied
        start = self._data_start(buf)
        if start is not None:
            self.head = bytearray()
            self.inner.count(len(buf) - start, at)
        elif self.inner is None and buf is block:
            self.head = bytearray(block)

    def finish(self) -> None:
        pass

    def _data_start(self, head) -> int | None:
        """Walk the chunk headers present; set ``inner`` once the data chunk is found."""
        if len(head) < 12:
            return None
        if head[8:12] != b"WAVE":
            self.inner = _NotAudio()
            return None
        while self.pos + 8 <= len(head):
            cid = bytes(head[self.pos:self.pos + 4])
            size = struct.unpack_from("<I", head, self.pos + 4)[0]
            body = self.pos + 8
            if cid == b"data":
                if self.fmt is None:
                    self.inner = _NotAudio()
                    return None
                rate, channels, width = self.fmt
                limit = math.inf if size in audio_mod.PLACEHOLDER_SIZES else size
                self.inner = PcmStream(self.timeline, rate, channels, width, limit)
                return body
            if cid == b"fmt ":
                if len(head) < body + 16:
                    return None
                tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", head, body)
                if size < 16 or tag not in (1, 0xFFFE) or bits not in (8, 16, 24, 32) or not channels or not rate:
                    self.inner = _NotAudio()   # audio.check_audio names the fault
                    return None
                self.fmt = (rate, channels, bits // 8)
            self.pos = body + size + (size & 1)
        return None


# ---- compressed formats: frames and pages --------------------------------------------------

_MPEG_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MPEG_KBPS = {  # (MPEG-1?, layer) -> bitrate table, kbit/s, index 1..14
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MPEG_KBPS[(False, 3)] = _MPEG_KBPS[(False, 2)]
_ADTS_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)


def _mpeg_header(buf, i: int):
    """``(frame bytes, samples, rate)`` of an MPEG audio frame header at ``buf[i]``, or None."""
    if len(buf) < i + 4 or buf[i] != 0xFF or buf[i + 1] & 0xE0 != 0xE0:
        return None
    version, layer_bits = (buf[i + 1] >> 3) & 3, (buf[i + 1] >> 1) & 3
    rate_i, kbps_i, pad = (buf[i + 2] >> 2) & 3, buf[i + 2] >> 4, (buf[i + 2] >> 1) & 1
    if version == 1 or layer_bits == 0 or rate_i == 3 or kbps_i in (0, 15):
        return None   # reserved values, or free format (no frame length in the header)
    layer, mpeg1 = 4 - layer_bits, version == 3
    rate = _MPEG_RATES[version][rate_i]
    kbps = _MPEG_KBPS[(mpeg1, layer)][kbps_i - 1]
    if layer == 1:
        return (12000 * kbps // rate + pad) * 4, 384, rate
    samples = 1152 if layer == 2 or mpeg1 else 576
    return samples // 8 * 1000 * kbps // rate + pad, samples, rate


def _adts_header(buf, i: int):
    """``(frame bytes, samples, rate)`` of an ADTS (AAC) frame header at ``buf[i]``, or None."""
    if len(buf) < i + 7 or buf[i] != 0xFF or buf[i + 1] & 0xF6 != 0xF0:
        return None
    rate_i = (buf[i + 2] >> 2) & 0xF
    length = ((buf[i + 3] & 3) << 11) | (buf[i + 4] << 3) | (buf[i + 5] >> 5)
    if rate_i >= len(_ADTS_RATES) or length < 7:
        return None
    return length, 1024 * ((buf[i + 6] & 3) + 1), _ADTS_RATES[rate_i]


class _Framed:
    """A body cut into self-delimiting frames; each arrival is credited with the samples of
    the frames it completes. Losing the frame structure after audio began is a failure,
    except for the tags that end MP3 files."""

    name = ""
    TRAILERS: tuple = ()

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.buf = bytearray()
        self.ms = 0.0            # audio counted so far
        self.offset = 0          # body bytes consumed
        self.started = False     # audio frames have begun
        self.ended = False       # a trailer tag: the rest is not audio

    def feed(self, block: bytes, at: float) -> None:
        if self.ended:
            return
        buf = self.buf
        buf += block
        ms, i = 0.0, 0
        carried = self.started
        while True:
            frame = self._frame(buf, i)
            if frame is None:
                break
            size, frame_ms, audio = frame
            if len(buf) < i + size:
                carried = carried or audio
                break
            i += size
            if audio:
                carried, self.started = True, True
                ms += frame_ms
        if i:
            del buf[:i]
            self.offset += i
        self.ms += ms
        if carried:
            self.timeline.add(at, ms)

    def finish(self) -> None:
        if self.buf and not self.ended:
            self._lost(self.buf, 0)
            if not self.ended:
                raise StreamError(f"{self.name} stream ended inside a frame at byte {self.offset}")

    def duration_s(self) -> float | None:
        return self.ms / 1000.0 if self.started else None

    def _lost(self, buf, i: int) -> None:
        if bytes(buf[i:i + 8]).startswith(self.TRAILERS):
            self.ended = True
            return
        if len(buf) - i >= 10:
            raise StreamError(f"{self.name} stream lost its frame structure at byte {self.offset + i}: "
                              f"{bytes(buf[i:i + 8])!r}")

    def _frame(self, buf, i):
        raise NotImplementedError


class MpegStream(_Framed):
    name = "MP3"
    TRAILERS = (b"TAG", b"APETAGEX", b"LYRICS")

    def __init__(self, timeline: Timeline):
        super().__init__(timeline)
        self.first = True

    def _frame(self, buf, i):
        if self.offset == 0 and i == 0 and buf[:3] == b"ID3":
            if len(buf) < 10:
                return None
            size = (buf[6] & 0x7F) << 21 | (buf[7] & 0x7F) << 14 | (buf[8] & 0x7F) << 7 | (buf[9] & 0x7F)
            return 10 + size + (10 if buf[5] & 0x10 else 0), 0.0, False
        head = _mpeg_header(buf, i)
        if head is None:
            if len(buf) - i >= 4:
                self._lost(buf, i)
            return None
        size, samples, rate = head
        if self.first:   # a Xing/Info/VBRI frame carries the encoder's tag, not audio
            if len(buf) < i + min(size, 40):
                return size, 0.0, False
            self.first = len(buf) < i + size     # decided again until the frame is whole
            if any(tag in buf[i + 4:i + 40] for tag in (b"Xing", b"Info", b"VBRI")):
                return size, 0.0, False
        return size, samples * 1000.0 / rate, True


class AdtsStream(_Framed):
    name = "AAC (ADTS)"
    TRAILERS = (b"TAG", b"APETAGEX")

    def _frame(self, buf, i):
        head = _adts_header(buf, i)
        if head is None:
            if len(buf) - i >= 7:
                self._lost(buf, i)
            return None
        size, samples, rate = head
        return size, samples * 1000.0 / rate, True


class OggStream(_Framed):
    """Ogg pages; a page's audio is the advance of its granule position (Opus: 48 kHz less
    the pre-skip; Vorbis: its own rate). Other codecs in Ogg: timed, durations null."""

    name = "Ogg"

    def __init__(self, timeline: Timeline):
        super().__init__(timeline)
        self.rate = None
        self.skip = 0
        self.played = 0          # samples up to the last page's granule position
        self.codec = None

    def _frame(self, buf, i):
        if len(buf) < i + 27:
            return None
        if buf[i:i + 4] != b"OggS":
            self._lost(buf, i)
            return None
        nseg = buf[i + 26]
        if len(buf) < i + 27 + nseg:
            return None
        size = 27 + nseg + sum(buf[i + 27:i + 27 + nseg])
        if len(buf) < i + size:
            return size, 0.0, self.codec is not None and self.rate is not None
        granule = struct.unpack_from("<q", buf, i + 6)[0]
        body = bytes(buf[i + 27 + nseg:i + 27 + nseg + 19])
        if self.codec is None:
            if body.startswith(b"OpusHead"):
                self.codec, self.rate = "opus", 48000
                self.skip = struct.unpack_from("<H", body, 10)[0] if len(body) >= 12 else 0
            elif body.startswith(b"\x01vorbis"):
                self.codec = "vorbis"
                self.rate = struct.unpack_from("<I", body, 12)[0] if len(body) >= 16 else None
            else:
                self.codec = "other"
            return size, 0.0, False
        if granule <= 0 or self.rate is None:   # header pages (granule 0), or continued packets
            return size, 0.0, self.played > 0 and self.rate is not None
        played = max(0, granule - self.skip)
        ms = (played - self.played) * 1000.0 / self.rate
        self.played = max(self.played, played)
        return size, max(0.0, ms), True


# ---- server-sent events --------------------------------------------------------------------

_AUDIO_TYPES = ("speech.audio.delta", "audio.data", "response.audio.delta", "audio")
_DONE_TYPES = ("speech.audio.done", "audio.done", "response.audio.done", "done")
_PCM_FORMATS = ("pcm", "pcm16", "pcm_s16le", "s16le", "linear16", "wav")


class SseStream:
    """A ``text/event-stream`` of TTS events, framed per the WHATWG rules: lines end in LF,
    CRLF or CR (also split across reads), ``:`` starts a comment, ``data`` lines join with
    LF, a blank line dispatches. Audio events carry base64 PCM16 (in ``audio``, ``delta`` or
    ``data``) at ``pcm_rate`` mono unless the event names its own ``sample_rate`` and
    ``channels``; ``speech.audio.done`` or ``[DONE]`` ends the stream. An event typed as
    something other than audio (a transcript delta, progress) is skipped, whatever its fields."""

    FIELDS = (b"data", b"event", b"id", b"retry")

    def __init__(self, timeline: Timeline, pcm_rate: int):
        self.timeline = timeline
        self.rate, self.channels = pcm_rate, 1
        self.pcm: list[bytes] = []
        self.pcm_bytes = 0
        self.partial: list[bytes] = []   # the current line so far, across reads
        self.after_cr = False
        self.first = True
        self.data: list[bytes] = []
        self.event = b""
        self.events = 0
        self.done = False
        self.usage = None
        self.last_at = 0.0

    def feed(self, block: bytes, at: float) -> None:
        self.last_at = at
        if self.first and block:
            self.first = False
            if block.startswith(b"\xef\xbb\xbf"):
                block = block[3:]
        if self.after_cr and block:   # a CR ended the last read: an LF now is the same line end
            self.after_cr = False
            if block[:1] == b"\n":
                block = block[1:]
        if b"\r" in block:
            self.after_cr = block.endswith(b"\r")
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = block.find(b"\n")
        if cut < 0:
            if block:
                self.partial.append(block)
            return
        lines = block.split(b"\n")
        if self.partial:
            self.partial.append(lines[0])
            lines[0] = b"".join(self.partial)
        tail = lines.pop()   # the line still open at the end of this read
        self.partial = [tail] if tail else []
        for line in lines:
            self._line(line, at)

    def finish(self) -> None:
        if self.partial or self.data:   # no blank line after the last event: take it if it is whole
            try:
                self.feed(b"\n\n", self.last_at)
            except StreamError as e:
                raise StreamError(f"SSE stream ended in the middle of event {self.events}: {e}") from None
        if not self.done:
            raise StreamError(f"SSE stream ended without speech.audio.done or [DONE] after {self.events} events")

    def _line(self, line: bytes, at: float) -> None:
        if not line:
            if self.data:
                self._dispatch(b"\n".join(self.data), at)
            self.data, self.event = [], b""
            return
        if line[:1] == b":":
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self.data.append(value)
        elif name == b"event":
            self.event = value
        elif name not in self.FIELDS:
            raise StreamError(f"SSE stream has a line that is not an event field after {self.events} events: "
                              f"{_snippet(line)!r}")

    def _dispatch(self, data: bytes, at: float) -> None:
        self.events += 1
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as e:   # JSONDecodeError and UnicodeDecodeError
            raise StreamError(f"SSE event {self.events} is not valid JSON ({_reason(e)}): {_snippet(data)!r}") from None
        if not isinstance(obj, dict):
            raise StreamError(f"SSE event {self.events} is not a JSON object: {_snippet(data)!r}")
        kind = obj.get("type")
        kind = kind if isinstance(kind, str) else self.event.decode("utf-8", "replace")
        if kind == "error" or self.event == b"error" or obj.get("error") and kind not in _AUDIO_TYPES:
            raise StreamError(f"server sent an error event: {_error_message(obj)}")
        if kind in _DONE_TYPES:
            self.done = True
            self.usage = obj.get("usage", obj.get("token_usage"))
            return
        if kind not in _AUDIO_TYPES and kind not in ("", "message") and ("audio" not in kind or "transcript" in kind):
            return   # a typed event of another kind (a transcript or text delta, progress): no audio
        b64 = next((obj[k] for k in ("audio", "delta", "data") if isinstance(obj.get(k), str)), None)
        if b64 is None:
            if kind in _AUDIO_TYPES:
                raise StreamError(f"SSE event {self.events} ({kind}) carries no base64 audio")
            return   # other events (progress, text) carry no audio
        try:
            pcm = binascii.a2b_base64(b64, strict_mode=True)
        except (binascii.Error, ValueError) as e:   # ValueError: non-ASCII text
            raise StreamError(f"SSE event {self.events} has malformed base64 audio ({e})") from None
        self._format(obj)
        if pcm:
            frame = 2 * self.channels
            before = self.pcm_bytes
            self.pcm_bytes += len(pcm)
            self.pcm.append(pcm)
            self.timeline.add(at, (self.pcm_bytes // frame - before // frame) * 1000.0 / self.rate)

    def _format(self, obj: dict) -> None:
        rate, channels, fmt = obj.get("sample_rate"), obj.get("channels"), obj.get("format", "pcm")
        if isinstance(fmt, str) and fmt.lower() not in _PCM_FORMATS:
            raise StreamError(f"SSE audio is {fmt!r}; tts-knee reads PCM16 in SSE events")
        if (rate, channels) == (None, None) or self.pcm_bytes:
            return
        if isinstance(rate, int) and 0 < rate <= 1_000_000:
            self.rate = rate
        if isinstance(channels, int) and 0 < channels <= 64:
            self.channels = channels

    def audio(self) -> tuple[bytes, audio_mod.Audio]:
        """The decoded PCM wrapped as a WAV, and its Audio; raises StreamError if there is none."""
        frame = 2 * self.channels
        n = self.pcm_bytes - self.pcm_bytes % frame
        if not n:
            raise StreamError(f"SSE stream carried no audio in {self.events} events")
        data = b"".join(self.pcm)[:n]
        wav = audio_mod.wav_header(n, self.rate, self.channels, 2) + data
        return wav, audio_mod.Audio("wav", n / (self.rate * frame), self.rate, self.channels, 2, 44, n)


def _error_message(obj: dict) -> str:
    err = obj.get("error", obj)
    msg = err.get("message") if isinstance(err, dict) else err
    if not isinstance(msg, str) or not msg.strip():
        msg = obj.get("message") if isinstance(obj.get("message"), str) else json.dumps(err)[:200]
    return " ".join(msg.split())[:200] or "no message"


def _snippet(data: bytes) -> str:
    return " ".join(data[:60].decode("utf-8", "replace").split())


def _reason(e: Exception) -> str:
    return getattr(e, "msg", None) or type(e).__name__


# ---- whole bodies --------------------------------------------------------------------------

def check_body(body: bytes, content_type: str | None, expect: str, pcm_rate: int):
    """Check a whole body (the preflight's): ``(bytes to write, Audio)``; raises
    audio.AudioError or StreamError with the reason."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    if ctype != "text/event-stream":
        return body, audio_mod.check_audio(body, content_type, expect, pcm_rate)
    sse = SseStream(Timeline(), pcm_rate)
    sse.feed(body, 0.0)
    sse.finish()
    return sse.audio()


def read_some(resp) -> bytearray:
    """What the response's body has for us now: blocks until at least one body byte has come
    (or the body ended: b""). geventhttpclient's ``read(n)`` waits for n bytes; this reads one
    socket's worth at a time, through the same buffer and parser ``read`` uses (its 2.x
    internals, pinned by the tests that stream through it)."""
    buf = resp._body_buffer
    while not buf:
        sock = resp._sock
        if resp.message_complete or sock is None:
            return b""
        try:
            data = sock.recv(resp.block_size)
            resp.feed(data)
        except BaseException:
            resp.release()
            raise
    resp._body_buffer = bytearray()   # hand over what came, without copying it
    return buf
