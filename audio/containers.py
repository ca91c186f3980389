"""Audio containers and framings, parsed whole or as their bytes arrive: where the audio
samples start, how much audio each arrival carried, and whether a body is the audio it should be.

The duration of audio always comes from the PCM byte count and the format in the header,
never from the header's size fields: streaming servers write placeholders there.

A transport feeds a body, block by block with each block's arrival time, to the parser
:func:`parser_for` picks from the Content-Type (and the body's first bytes):

- WAV, incrementally: the header may arrive alone or split anywhere, sizes may be
  placeholders, extra chunks (LIST, fact) may precede the data; durations are exact. One
  walker (:func:`walk_wav`) reads WAV headers here, for whole bodies and streams alike.
- raw PCM16 (``--tts-format pcm``) at ``--tts-sample-rate``: exact.
- MP3 and ADTS-AAC by their frame headers, Ogg (Opus, Vorbis) by its pages' granule
  positions: exact sample counts per frame or page (the encoder's priming and padding
  included, as the container counts them); FLAC by its frame headers, exact too.
- ``text/event-stream``: OpenAI's ``speech.audio.delta`` events with base64 PCM16 (and the
  variants servers send), framed per the WHATWG server-sent-events rules.

A protocol that frames audio itself (gRPC's messages of raw PCM) adds each message's audio to
:class:`PcmPieces` instead.

Each parser reports arrivals to a sink's ``add(at, ms)`` (ms None: a duration it cannot
know); nothing here reads the clock itself. :func:`check_audio` judges a whole body. A body
that cannot be the stream it claims raises :class:`StreamError`, one that is not the audio it
should be :class:`AudioError`, each with one sentence.
"""

from __future__ import annotations

import binascii
import json
import math
import struct
from dataclasses import dataclass
from typing import Any, Protocol

#: Size fields streaming servers put in a WAV header before they know the length.
PLACEHOLDER_SIZES = (0, 0xFFFFFFFF, 0x7FFFFFFF)
#: Body bytes looked at before deciding what a non-WAV body is.
SNIFF_BYTES = 256
_MAGIC = {
    b"ID3": "mp3",
    b"\xff\xfb": "mp3",
    b"\xff\xf3": "mp3",
    b"OggS": "ogg",
    b"fLaC": "flac",
    b"\xff\xf1": "aac",
    b"\xff\xf9": "aac",
}
_TEXTUAL = (b"<", b"{", b"[")


#: A body or its first bytes, as they arrive or are kept.
BytesLike = bytes | bytearray
#: ``(frame bytes, samples, rate)`` of a compressed frame's header.
FrameHeader = tuple[int, int, int]
#: ``(number, samples, rate, header bytes)`` of a FLAC frame header.
FlacHeader = tuple[int, int, int, int]


class Sink(Protocol):
    """Where a parser reports each arrival that carried audio: at ``arrived_at``, ``audio_ms`` of it."""

    def add(self, arrived_at: float, audio_ms: float) -> None: ...


class Parser(Protocol):
    """A streaming body parser: each block as it arrives, then the body's end."""

    def feed(self, block: bytes, arrived_at: float) -> None: ...

    def finish(self) -> None: ...


class AudioError(ValueError):
    """The body is not the audio it should be; the message says why, in one sentence."""


class StreamError(ValueError):
    """The stream broke its own format, or the server said it failed; one sentence."""


@dataclass(frozen=True)
class Audio:
    format: str  # "wav", "pcm", "mp3", "ogg", "aac" or "flac"
    audio_s: float | None  # seconds of audio; None where it cannot be known without decoding
    sample_rate: int | None = None
    channels: int | None = None
    sample_width: int | None = None  # bytes per sample
    data_offset: int = 0  # where the PCM data starts in the body
    data_bytes: int = 0  # PCM bytes present


# ---- whole bodies --------------------------------------------------------------------------


def walk_wav(head: BytesLike) -> tuple[tuple[int, int, int], int, int, int] | str:
    """Walk a WAV header's chunks: ``((rate, channels, width), data start, data size, RIFF size)``
    once ``head`` (the body's first bytes) reaches the data chunk's header; while it does not,
    what is missing, as the sentence a body ending there deserves. Raises AudioError for a
    header that cannot be integer PCM."""
    if len(head) < 12:
        return "body is not a WAV file (no RIFF/WAVE header)"
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise AudioError("body is not a WAV file (no RIFF/WAVE header)")
    pos, fmt = 12, None
    while pos + 8 <= len(head):
        chunk_id = bytes(head[pos : pos + 4])
        size = struct.unpack_from("<I", head, pos + 4)[0]
        start = pos + 8
        if chunk_id == b"fmt ":
            if size < 16:
                raise AudioError("truncated WAV: the fmt chunk is cut short")
            if start + 16 > len(head):
                return "truncated WAV: the fmt chunk is cut short"
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", head, start)
            if tag not in (1, 0xFFFE) or bits not in (8, 16, 24, 32):
                raise AudioError(f"WAV is not integer PCM (format tag {tag}, {bits} bits)")
            if channels == 0 or rate == 0:
                raise AudioError("WAV header has 0 channels or a 0 Hz sample rate")
            fmt = (rate, channels, bits // 8)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioError("WAV has a data chunk before its fmt chunk")
            return fmt, start, size, struct.unpack_from("<I", head, 4)[0]
        pos = start + size + (size & 1)
    return "truncated WAV: no data chunk" if fmt else "truncated WAV: no fmt chunk"


def parse_wav(body: BytesLike, size: int | None = None) -> Audio:
    """Parse a PCM WAV body; raise AudioError if it is not one or is cut short. ``body`` may be
    only the first bytes of the body, through the data chunk's header, when ``size`` gives the
    whole body's length."""
    layout = walk_wav(body)
    if isinstance(layout, str):
        raise AudioError(layout)
    (rate, channels, width), start, data_size, riff_size = layout
    present = (len(body) if size is None else size) - start
    if data_size in PLACEHOLDER_SIZES or riff_size in PLACEHOLDER_SIZES and data_size > present:
        data = present  # streamed: sizes unknown when sent
    elif data_size > present:
        raise AudioError(f"truncated WAV: header promises {data_size} bytes of audio, got {present}")
    else:
        data = data_size
    frame = channels * width
    data -= data % frame
    if data <= 0:
        raise AudioError("WAV holds no audio samples")
    return Audio("wav", data / (rate * frame), rate, channels, width, start, data)


def check_audio(
    body: BytesLike, content_type: str | None, expect: str = "wav", pcm_rate: int = 24000, size: int | None = None
) -> Audio:
    """Validate a 2xx response body as audio of the expected format.

    An empty body, HTML, JSON, or a truncated WAV raises AudioError naming the problem. With
    ``size`` (the whole body's length), ``body`` may be the body's first bytes alone: at least
    SNIFF_BYTES of them (all, if fewer), and for a WAV its header through the data chunk's.
    """
    size = len(body) if size is None else size
    if not size:
        raise AudioError("empty body under status 200")
    ctype = (content_type or "").split(";")[0].strip().lower()
    if body[:4] == b"RIFF":  # a WAV whatever the label says (piper's server sends text/html)
        return parse_wav(body, size)
    if ctype.startswith("text/") or ctype.endswith("json") or looks_textual(body):
        kind = "HTML" if body.lstrip()[:1] == b"<" and ctype != "application/json" else ctype or "text"
        raise AudioError(f"got {kind} instead of audio: {_snippet(body)!r}")
    if expect == "wav":
        raise AudioError(f"body is not a WAV file (starts {bytes(body[:8])!r}, content type {ctype or 'none'})")
    if expect == "pcm":
        if size % 2:
            raise AudioError("PCM16 body has an odd number of bytes: cut short")
        return Audio("pcm", size / (2 * pcm_rate), pcm_rate, 1, 2, 0, size)
    for magic, fmt in _MAGIC.items():
        if body.startswith(magic):
            return Audio(fmt, None)
    raise AudioError(f"body is not recognisable {expect} audio (starts {bytes(body[:8])!r})")


def audio_kind(head: bytes) -> str | None:
    """What audio file ``head`` (a file's first bytes) begins: ``wav``, ``mp3``, ``ogg``, ``aac`` or
    ``flac``; None for anything else."""
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    return next((fmt for magic, fmt in _MAGIC.items() if head.startswith(magic)), None)


def looks_textual(body: BytesLike) -> bool:
    head = bytes(body[:SNIFF_BYTES])
    if head.lstrip()[:1] not in _TEXTUAL:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start >= len(head) - 3  # only a character cut at the end
    return True


def wav_header(data_bytes: int, rate: int, channels: int = 1, width: int = 2, placeholder: bool = False) -> bytes:
    """The 44-byte header of integer PCM in a WAV file (PCM16 mono unless told); ``placeholder``
    writes 0xFFFFFFFF sizes, as a server streaming audio of a length it does not know yet does."""
    frame = channels * width
    riff, data = (0xFFFFFFFF, 0xFFFFFFFF) if placeholder else (36 + data_bytes, data_bytes)
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff,
        b"WAVE",
        b"fmt ",
        16,
        1,
        channels,
        rate,
        rate * frame,
        frame,
        width * 8,
        b"data",
        data,
    )


def concat(parts: list[tuple[bytes, Audio]]) -> bytes:
    """Join segments' audio into one WAV (all parts must share one PCM format)."""
    first = parts[0][1]
    if first.sample_rate is None or first.channels is None or first.sample_width is None:
        raise AudioError(f"cannot join {first.format} segments; ask for wav or pcm")
    pcm = []
    for body, audio in parts:
        if (audio.sample_rate, audio.channels, audio.sample_width) != (
            first.sample_rate,
            first.channels,
            first.sample_width,
        ):
            raise AudioError("segments came back in different audio formats")
        pcm.append(body[audio.data_offset : audio.data_offset + audio.data_bytes])
    data = b"".join(pcm)
    return wav_header(len(data), first.sample_rate, first.channels, first.sample_width) + data


def _snippet(data: BytesLike) -> str:
    return " ".join(bytes(data[:60]).decode("utf-8", "replace").split())


# ---- choosing a parser ---------------------------------------------------------------------


def parser_for(content_type: str | None, expect: str, pcm_rate: int, sink: Sink) -> SseStream | Sniffer:
    """The parser for a 2xx body with this Content-Type, expecting ``--tts-format expect``;
    it reports each arrival with audio to ``sink.add(at, ms)``."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    if ctype == "text/event-stream":
        return SseStream(sink, pcm_rate)
    return Sniffer(sink, ctype, expect, pcm_rate)


class Sniffer:
    """Holds a body's first bytes until it can tell what the body is, then hands them, with
    their arrival times, to the parser for it. Bodies that are not audio get no parser (the
    whole-body check names what they are): none of their arrivals counts as audio."""

    def __init__(self, sink: Sink, ctype: str, expect: str, pcm_rate: int):
        self.sink, self.ctype, self.expect, self.pcm_rate = sink, ctype, expect, pcm_rate
        self.held: list[tuple[bytes, float]] = []
        self.size = 0
        self.inner: Parser | None = None
        self._head = b""

    def feed(self, block: bytes, arrived_at: float) -> None:
        if self.inner is not None:
            self.inner.feed(block, arrived_at)
            return
        self.held.append((block, arrived_at))
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
        head = first if len(first) >= SNIFF_BYTES else b"".join(block for block, _ in self.held)
        self._head = head
        inner = self.inner = _pick(head[:SNIFF_BYTES], self.ctype, self.expect, self.pcm_rate, self.sink)
        held, self.held = self.held, []
        for block, arrived_at in held:
            inner.feed(block, arrived_at)

    @property
    def head(self) -> BytesLike:
        """The body's first bytes as this parser saw them: enough for :func:`check_audio` to
        judge the whole body from them and its length."""
        if isinstance(self.inner, WavStream):
            return self.inner.head
        return self._head if self.inner is not None else b"".join(block for block, _ in self.held)

    def duration_s(self) -> float | None:
        """Seconds of compressed audio counted from frame headers, or None."""
        return self.inner.duration_s() if isinstance(self.inner, (_Framed, FlacStream)) else None


def _pick(head: bytes, ctype: str, expect: str, pcm_rate: int, sink: Sink) -> Parser:
    if head[:4] == b"RIFF":
        return WavStream(sink)
    if ctype.startswith("text/") or ctype.endswith("json") or looks_textual(head):
        return _NotAudio()
    if expect == "pcm":
        return PcmStream(sink, pcm_rate, 1, 2)
    if expect == "wav":
        return _NotAudio()
    # the magic numbers check_audio accepts, so the two never disagree on what audio is
    kind = next((fmt for magic, fmt in _MAGIC.items() if head.startswith(magic)), "")
    parsers: dict[str, type[MpegStream | OggStream | AdtsStream | FlacStream | _NotAudio]] = {
        "mp3": MpegStream,
        "ogg": OggStream,
        "aac": AdtsStream,
        "flac": FlacStream,
    }
    return parsers.get(kind, _NotAudio)(sink)


class _NotAudio:
    def __init__(self, sink: Sink | None = None):
        pass

    def feed(self, block: bytes, arrived_at: float) -> None:
        pass

    def finish(self) -> None:
        pass


class FlacStream:
    """FLAC: the metadata blocks after ``fLaC`` are skipped by their lengths (STREAMINFO read for
    the sample rate a frame header may defer to), then each frame header gives its frame's
    samples. FLAC frames carry no length: a frame ends where the next header begins, and a
    candidate counts only with a valid CRC-8 and the frame (or sample) number that follows the
    previous frame's, which audio bytes that merely look like a sync code do not have. Each
    frame's samples go to the arrival that completed it (the last frame's to the body's last
    arrival), so the durations sum to the stream's exact length and lag it by at most a frame."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.buf = bytearray()  # the body from its start; once frames begin, from where a header may start
        self.next = 4  # offset of the next metadata block header; 0 once the frames begin
        self.frames = False  # the last metadata block has been seen: frames begin at self.next
        self.info_rate: int | None = None  # STREAMINFO's sample rate
        self.sync: bytes | None = None  # the first frame's two sync bytes (they carry the blocking strategy)
        self.frame: FrameHeader | None = None  # (number, samples, rate) of the frame whose bytes are arriving
        self.ms = 0.0  # audio of the frames counted
        self.last_at = 0.0

    def feed(self, block: bytes, arrived_at: float) -> None:
        self.last_at = arrived_at
        self.buf += block
        if self.next and not self._metadata():
            return
        audio_ms = self._frames(final=False)
        if self.frame is not None:
            self.sink.add(arrived_at, audio_ms)

    def finish(self) -> None:
        if self.next:  # the body ended inside its metadata
            return
        audio_ms = self._frames(final=True)
        if self.frame is not None:  # the last frame ends with the body
            last = _flac_ms(self.frame)
            self.ms += last
            self.frame = None
            self.sink.add(self.last_at, audio_ms + last)

    def duration_s(self) -> float | None:
        return self.ms / 1000.0 if self.sync is not None else None

    def _metadata(self) -> bool:
        """Walk the metadata blocks that have arrived; True once the frames begin in ``buf``."""
        buf = self.buf
        while not self.frames and len(buf) >= self.next + 4:
            kind, size = buf[self.next] & 0x7F, int.from_bytes(buf[self.next + 1 : self.next + 4], "big")
            if kind == 0:  # STREAMINFO: the sample rate is its 20 bits from byte 10
                if len(buf) < self.next + 17:
                    return False
                self.info_rate = (int.from_bytes(buf[self.next + 14 : self.next + 17], "big") >> 4) or None
            self.frames = bool(buf[self.next] & 0x80)  # the last metadata block
            self.next += 4 + size
        if not self.frames or len(buf) < self.next:
            return False
        del buf[: self.next]
        self.next = 0
        return True

    def _frames(self, final: bool) -> float:
        """Take the frame headers that have arrived; returns the audio (ms) of the frames they
        complete. ``final``: the body is over, so a header may be its last bytes."""
        buf, audio_ms = self.buf, 0.0
        while True:
            if self.sync is None:
                if len(buf) < FLAC_HEADER_MAX and not final:
                    break
                head = _flac_header(buf, 0, self.info_rate)
                if head is None:
                    if buf:
                        raise StreamError(f"FLAC stream has no frame header after its metadata: {bytes(buf[:8])!r}")
                    break
                self.sync, header_at = bytes(buf[:2]), 0
            else:
                assert self.frame is not None  # set with the sync bytes, from the first frame on
                candidate = self._candidate(final, self.frame, self.sync)
                if candidate is None:
                    break
                header_at, head = candidate
                audio_ms += _flac_ms(self.frame)
            number, samples, rate, size = head
            self.frame = (number, samples, rate)
            del buf[: header_at + size]
        self.ms += audio_ms
        return audio_ms

    def _candidate(self, final: bool, frame: FrameHeader, sync: bytes) -> tuple[int, FlacHeader] | None:
        """(offset, header) of the next frame's header in ``buf``, or None while it has not
        arrived (``buf`` then keeps only what a header could still start in); ``frame``: the
        frame whose bytes are arriving, ``sync``: the first frame's sync bytes."""
        buf, number, samples = self.buf, frame[0], frame[1]
        expect = number + 1 if sync[1] == 0xF8 else number + samples
        candidate_at = buf.find(sync)
        while candidate_at >= 0:
            if len(buf) - candidate_at < FLAC_HEADER_MAX and not final:
                del buf[:candidate_at]
                return None
            head = _flac_header(buf, candidate_at, self.info_rate)
            if head is not None and head[0] == expect:
                return candidate_at, head
            candidate_at = buf.find(sync, candidate_at + 1)
        del buf[: max(0, len(buf) - 1)]
        return None


#: The longest a FLAC frame header can be, in bytes.
FLAC_HEADER_MAX = 16
_FLAC_RATES = (None, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000)


def _crc8_table() -> tuple[int, ...]:
    out = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        out.append(crc)
    return tuple(out)


_CRC8 = _crc8_table()  # FLAC's header CRC: polynomial x^8 + x^2 + x + 1


def _flac_ms(frame: tuple[int, ...]) -> float:
    return frame[1] * 1000.0 / frame[2]


def _flac_block_size(buf: bytearray, offset: int, code: int) -> tuple[int, int]:
    """A FLAC frame's samples from its block-size ``code``, read on at ``buf[offset]`` where the
    code says the size follows the frame number: ``(samples, the index after it)``."""
    if code == 1:
        return 192, offset
    if code <= 5:
        return 576 << (code - 2), offset
    if code == 6:
        return buf[offset] + 1, offset + 1
    if code == 7:
        return int.from_bytes(buf[offset : offset + 2], "big") + 1, offset + 2
    return 256 << (code - 8), offset


def _flac_rate(buf: bytearray, offset: int, code: int, info_rate: int | None) -> tuple[int | None, int]:
    """A FLAC frame's sample rate from its rate ``code`` (0: STREAMINFO's ``info_rate``), read on
    at ``buf[offset]`` where the code says it follows: ``(rate, the index after it)``."""
    if code == 0:
        return info_rate, offset
    if code <= 11:
        return _FLAC_RATES[code], offset
    if code == 12:
        return buf[offset] * 1000, offset + 1
    return int.from_bytes(buf[offset : offset + 2], "big") * (10 if code == 14 else 1), offset + 2


def _flac_header(buf: bytearray, start: int, info_rate: int | None) -> FlacHeader | None:
    """``(number, samples, rate, header bytes)`` of a FLAC frame header at ``buf[start]``, or None
    (not one, or cut short). ``number`` is the frame's number (fixed block size) or its first
    sample's (variable); a rate of 0 defers to STREAMINFO's ``info_rate``."""
    try:
        if buf[start] != 0xFF or buf[start + 1] & 0xFE != 0xF8:
            return None
        size_code, rate_code = buf[start + 2] >> 4, buf[start + 2] & 0xF
        channels, bits, reserved = buf[start + 3] >> 4, (buf[start + 3] >> 1) & 7, buf[start + 3] & 1
        if size_code == 0 or rate_code == 15 or channels > 10 or bits == 3 or reserved:
            return None
        offset, first = start + 5, buf[start + 4]
        extra = next(
            (extra_count for extra_count, top in enumerate((0x80, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF)) if first < top),
            None,
        )
        if extra is None or extra == 1 and first < 0xC0:  # 10xxxxxx cannot start a number
            return None
        number = first & (0xFF >> (extra + 2)) if extra else first
        for _ in range(extra):
            if buf[offset] & 0xC0 != 0x80:
                return None
            number, offset = number << 6 | buf[offset] & 0x3F, offset + 1
        samples, offset = _flac_block_size(buf, offset, size_code)
        rate, offset = _flac_rate(buf, offset, rate_code, info_rate)
        crc = 0
        for byte in buf[start:offset]:
            crc = _CRC8[crc ^ byte]
        if crc != buf[offset] or not rate:
            return None
    except IndexError:
        return None
    return number, samples, rate, offset + 1 - start


# ---- PCM and WAV ---------------------------------------------------------------------------


class PcmStream:
    """Interleaved integer PCM: every byte is audio; an arrival's duration is the whole
    frames it completes, so the durations sum to the body's ``audio_s``."""

    def __init__(self, sink: Sink, rate: int, channels: int, width: int, limit: float = math.inf):
        self.sink = sink
        self.frame = channels * width
        self.ms_per_frame = 1000.0 / rate
        self.limit = limit  # audio bytes the header promises (inf for placeholders)
        self.got: float = 0  # bytes (a whole number; a float for the comparison with inf)

    def feed(self, block: bytes, arrived_at: float) -> None:
        self.count(len(block), arrived_at)

    def count(self, byte_count: int, arrived_at: float) -> None:
        """``byte_count`` more body bytes arrived at ``arrived_at``."""
        before = self.got
        self.got = min(self.limit, before + byte_count)
        if self.got > before:
            frames = self.got // self.frame - before // self.frame
            self.sink.add(arrived_at, frames * self.ms_per_frame)

    def finish(self) -> None:
        pass


class PcmPieces:
    """Raw PCM16 mono that a protocol delivers one message at a time (gRPC's LINEAR_PCM): each
    piece is timed whole as it is added. Raw PCM names no format, so a server that sends a WAV,
    Ogg, FLAC or MP3 file (or text) where raw PCM was asked for is told by the first piece's
    first bytes; :meth:`audio` is what to write, as a WAV."""

    def __init__(self, rate: int):
        self.rate = rate
        self.pieces: list[bytes] = []
        self.bytes = 0

    def add(self, piece: bytes) -> float:
        """Take the next piece; returns the ms of audio it holds. Raises StreamError for a
        first piece that is a container or text, not raw samples."""
        if not self.bytes and piece:
            kind = (
                "WAV"
                if piece[:4] == b"RIFF"
                else next((fmt.upper() for magic, fmt in _MAGIC.items() if piece.startswith(magic)), None)
            )
            if kind is None and looks_textual(piece):
                kind = f"text ({_snippet(piece)!r})"
            if kind is not None:
                raise StreamError(f"the audio is {kind}, not the raw 16-bit PCM (LINEAR_PCM) asked for")
        self.pieces.append(piece)
        self.bytes += len(piece)
        return len(piece) / 2 / self.rate * 1000.0

    def audio(self) -> tuple[list[Any], Audio]:
        """The pieces as a WAV (header first, as buffers) and what it is; AudioError for an odd
        byte count (not 16-bit samples)."""
        if self.bytes % 2:
            raise AudioError(f"LINEAR_PCM audio of {self.bytes} bytes, an odd number: not 16-bit samples")
        return (
            [wav_header(self.bytes, self.rate, 1, 2), *self.pieces],
            Audio("wav", self.bytes / (2 * self.rate), self.rate, 1, 2, 44, self.bytes),
        )


class WavStream:
    """A WAV body: header bytes are held until :func:`walk_wav` finds the data chunk, then it
    is PCM. A header that cannot be PCM makes the rest no audio (check_audio names the fault)."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.head: bytes | bytearray = b""  # the header as far as it was walked (the first block, or the blocks so far)
        self.inner: PcmStream | _NotAudio | None = None  # PcmStream once the data chunk has begun; _NotAudio if broken

    def feed(self, block: bytes, arrived_at: float) -> None:
        if self.inner is not None:
            self.inner.feed(block, arrived_at)
            return
        if not self.head:
            self.head = block  # the usual case: the whole header in the first read, not copied
        else:
            if not isinstance(self.head, bytearray):
                self.head = bytearray(self.head)
            self.head += block
        try:
            layout = walk_wav(self.head)
        except AudioError:
            self.inner = _NotAudio()
            return
        if isinstance(layout, str):
            return
        (rate, channels, width), start, size, _ = layout
        self.inner = PcmStream(self.sink, rate, channels, width, math.inf if size in PLACEHOLDER_SIZES else size)
        self.inner.count(len(self.head) - start, arrived_at)

    def finish(self) -> None:
        pass


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


def _mpeg_header(buf: bytearray, start: int) -> FrameHeader | None:
    """``(frame bytes, samples, rate)`` of an MPEG audio frame header at ``buf[start]``, or None."""
    if len(buf) < start + 4 or buf[start] != 0xFF or buf[start + 1] & 0xE0 != 0xE0:
        return None
    version, layer_bits = (buf[start + 1] >> 3) & 3, (buf[start + 1] >> 1) & 3
    rate_i, kbps_i, pad = (buf[start + 2] >> 2) & 3, buf[start + 2] >> 4, (buf[start + 2] >> 1) & 1
    if version == 1 or layer_bits == 0 or rate_i == 3 or kbps_i in (0, 15):
        return None  # reserved values, or free format (no frame length in the header)
    layer, mpeg1 = 4 - layer_bits, version == 3
    rate = _MPEG_RATES[version][rate_i]
    kbps = _MPEG_KBPS[(mpeg1, layer)][kbps_i - 1]
    if layer == 1:
        return (12000 * kbps // rate + pad) * 4, 384, rate
    samples = 1152 if layer == 2 or mpeg1 else 576
    return samples // 8 * 1000 * kbps // rate + pad, samples, rate


def _adts_header(buf: bytearray, start: int) -> FrameHeader | None:
    """``(frame bytes, samples, rate)`` of an ADTS (AAC) frame header at ``buf[start]``, or None."""
    if len(buf) < start + 7 or buf[start] != 0xFF or buf[start + 1] & 0xF6 != 0xF0:
        return None
    rate_i = (buf[start + 2] >> 2) & 0xF
    length = ((buf[start + 3] & 3) << 11) | (buf[start + 4] << 3) | (buf[start + 5] >> 5)
    if rate_i >= len(_ADTS_RATES) or length < 7:
        return None
    return length, 1024 * ((buf[start + 6] & 3) + 1), _ADTS_RATES[rate_i]


class _Framed:
    """A body cut into self-delimiting frames; each arrival is credited with the samples of
    the frames it completes. Losing the frame structure after audio began is a failure,
    except for the tags that end MP3 files."""

    name = ""
    TRAILERS: tuple[Any, ...] = ()

    def __init__(self, sink: Sink):
        self.sink = sink
        self.buf = bytearray()
        self.ms = 0.0  # audio counted so far
        self.offset = 0  # body bytes consumed
        self.started = False  # audio frames have begun
        self.ended = False  # a trailer tag: the rest is not audio

    def feed(self, block: bytes, arrived_at: float) -> None:
        if self.ended:
            return
        buf = self.buf
        buf += block
        audio_ms, consumed = 0.0, 0
        carried = self.started
        while True:
            frame = self._frame(buf, consumed)
            if frame is None:
                break
            size, frame_ms, audio = frame
            if len(buf) < consumed + size:
                carried = carried or audio
                break
            consumed += size
            if audio:
                carried, self.started = True, True
                audio_ms += frame_ms
        if consumed:
            del buf[:consumed]
            self.offset += consumed
        self.ms += audio_ms
        if carried:
            self.sink.add(arrived_at, audio_ms)

    def finish(self) -> None:
        if self.buf and not self.ended:
            self._lost(self.buf, 0)
            if not self.ended:
                raise StreamError(f"{self.name} stream ended inside a frame at byte {self.offset}")

    def duration_s(self) -> float | None:
        return self.ms / 1000.0 if self.started else None

    def _lost(self, buf: bytearray, start: int) -> None:
        if bytes(buf[start : start + 8]).startswith(self.TRAILERS):
            self.ended = True
            return
        if len(buf) - start >= 10:
            raise StreamError(
                f"{self.name} stream lost its frame structure at byte {self.offset + start}: "
                f"{bytes(buf[start : start + 8])!r}"
            )

    def _frame(self, buf: bytearray, start: int) -> tuple[int, float, bool] | None:
        """``(frame bytes, ms of audio, whether it is audio)`` of the frame at ``buf[start]``, or None
        while its header has not arrived."""
        raise NotImplementedError


class MpegStream(_Framed):
    name = "MP3"
    TRAILERS = (b"TAG", b"APETAGEX", b"LYRICS")

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.first = True

    def _frame(self, buf: bytearray, start: int) -> tuple[int, float, bool] | None:
        if self.offset == 0 and start == 0 and buf[:3] == b"ID3":
            if len(buf) < 10:
                return None
            size = (buf[6] & 0x7F) << 21 | (buf[7] & 0x7F) << 14 | (buf[8] & 0x7F) << 7 | (buf[9] & 0x7F)
            return 10 + size + (10 if buf[5] & 0x10 else 0), 0.0, False
        head = _mpeg_header(buf, start)
        if head is None:
            if len(buf) - start >= 4:
                self._lost(buf, start)
            return None
        size, samples, rate = head
        if self.first:  # a Xing/Info/VBRI frame carries the encoder's tag, not audio
            if len(buf) < start + min(size, 40):
                return size, 0.0, False
            self.first = len(buf) < start + size  # decided again until the frame is whole
            if any(tag in buf[start + 4 : start + 40] for tag in (b"Xing", b"Info", b"VBRI")):
                return size, 0.0, False
        return size, samples * 1000.0 / rate, True


class AdtsStream(_Framed):
    name = "AAC (ADTS)"
    TRAILERS = (b"TAG", b"APETAGEX")

    def _frame(self, buf: bytearray, start: int) -> tuple[int, float, bool] | None:
        head = _adts_header(buf, start)
        if head is None:
            if len(buf) - start >= 7:
                self._lost(buf, start)
            return None
        size, samples, rate = head
        return size, samples * 1000.0 / rate, True


class OggStream(_Framed):
    """Ogg pages; a page's audio is the advance of its granule position (Opus: 48 kHz less
    the pre-skip; Vorbis: its own rate). Other codecs in Ogg: timed, durations null."""

    name = "Ogg"

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.rate: int | None = None
        self.skip = 0
        self.played = 0  # samples up to the last page's granule position
        self.codec: str | None = None

    def _frame(self, buf: bytearray, start: int) -> tuple[int, float, bool] | None:
        if len(buf) < start + 27:
            return None
        if buf[start : start + 4] != b"OggS":
            self._lost(buf, start)
            return None
        nseg = buf[start + 26]
        if len(buf) < start + 27 + nseg:
            return None
        size = 27 + nseg + sum(buf[start + 27 : start + 27 + nseg])
        if len(buf) < start + size:
            return size, 0.0, self.codec is not None and self.rate is not None
        granule = struct.unpack_from("<q", buf, start + 6)[0]
        body = bytes(buf[start + 27 + nseg : start + 27 + nseg + 19])
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
        if granule <= 0 or self.rate is None:  # header pages (granule 0), or continued packets
            return size, 0.0, self.played > 0 and self.rate is not None
        played = max(0, granule - self.skip)
        audio_ms = (played - self.played) * 1000.0 / self.rate
        self.played = max(self.played, played)
        return size, max(0.0, audio_ms), True


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

    def __init__(self, sink: Sink, pcm_rate: int):
        self.sink = sink
        self.rate, self.channels = pcm_rate, 1
        self.pcm: list[bytes] = []
        self.pcm_bytes = 0
        self.partial: list[bytes] = []  # the current line so far, across reads
        self.after_cr = False
        self.first = True
        self.data: list[bytes] = []
        self.event = b""
        self.events = 0
        self.done = False
        self.usage = None
        self.last_at = 0.0

    def feed(self, block: bytes, arrived_at: float) -> None:
        self.last_at = arrived_at
        if self.first and block:
            self.first = False
            if block.startswith(b"\xef\xbb\xbf"):
                block = block[3:]
        if self.after_cr and block:  # a CR ended the last read: an LF now is the same line end
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
        tail = lines.pop()  # the line still open at the end of this read
        self.partial = [tail] if tail else []
        for line in lines:
            self._line(line, arrived_at)

    def finish(self) -> None:
        if self.partial or self.data:  # no blank line after the last event: take it if it is whole
            try:
                self.feed(b"\n\n", self.last_at)
            except StreamError as error:
                raise StreamError(f"SSE stream ended in the middle of event {self.events}: {error}") from None
        if not self.done:
            raise StreamError(f"SSE stream ended without speech.audio.done or [DONE] after {self.events} events")

    def _line(self, line: bytes, arrived_at: float) -> None:
        if not line:
            if self.data:
                self._dispatch(b"\n".join(self.data), arrived_at)
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
            raise StreamError(
                f"SSE stream has a line that is not an event field after {self.events} events: {_snippet(line)!r}"
            )

    def _dispatch(self, data: bytes, arrived_at: float) -> None:
        self.events += 1
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError
            raise StreamError(
                f"SSE event {self.events} is not valid JSON ({_reason(error)}): {_snippet(data)!r}"
            ) from None
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
            return  # a typed event of another kind (a transcript or text delta, progress): no audio
        b64 = next((obj[field] for field in ("audio", "delta", "data") if isinstance(obj.get(field), str)), None)
        if b64 is None:
            if kind in _AUDIO_TYPES:
                raise StreamError(f"SSE event {self.events} ({kind}) carries no base64 audio")
            return  # other events (progress, text) carry no audio
        try:
            pcm = binascii.a2b_base64(b64, strict_mode=True)
        except (binascii.Error, ValueError) as error:  # ValueError: non-ASCII text
            raise StreamError(f"SSE event {self.events} has malformed base64 audio ({error})") from None
        self._format(obj)
        if pcm:
            frame = 2 * self.channels
            before = self.pcm_bytes
            self.pcm_bytes += len(pcm)
            self.pcm.append(pcm)
            self.sink.add(arrived_at, (self.pcm_bytes // frame - before // frame) * 1000.0 / self.rate)

    def _format(self, obj: dict[str, Any]) -> None:
        rate, channels, fmt = obj.get("sample_rate"), obj.get("channels"), obj.get("format", "pcm")
        if isinstance(fmt, str) and fmt.lower() not in _PCM_FORMATS:
            raise StreamError(f"SSE audio is {fmt!r}; tts-knee reads PCM16 in SSE events")
        if (rate, channels) == (None, None) or self.pcm_bytes:
            return
        if isinstance(rate, int) and 0 < rate <= 1_000_000:
            self.rate = rate
        if isinstance(channels, int) and 0 < channels <= 64:
            self.channels = channels

    def audio(self) -> tuple[bytes, Audio]:
        """The decoded PCM wrapped as a WAV, and its Audio; raises StreamError if there is none."""
        frame = 2 * self.channels
        whole_bytes = self.pcm_bytes - self.pcm_bytes % frame
        if not whole_bytes:
            raise StreamError(f"SSE stream carried no audio in {self.events} events")
        data = b"".join(self.pcm)[:whole_bytes]
        wav = wav_header(whole_bytes, self.rate, self.channels, 2) + data
        return wav, Audio("wav", whole_bytes / (self.rate * frame), self.rate, self.channels, 2, 44, whole_bytes)


def _error_message(obj: dict[str, Any]) -> str:
    err = obj.get("error", obj)
    msg = err.get("message") if isinstance(err, dict) else err
    if not isinstance(msg, str) or not msg.strip():
        message = obj.get("message")
        msg = message if isinstance(message, str) else json.dumps(err)[:200]
    return " ".join(msg.split())[:200] or "no message"


def _reason(error: Exception) -> str:
    return getattr(error, "msg", None) or type(error).__name__
