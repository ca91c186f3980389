"""Checking, joining and writing the audio a TTS server returns.

The duration of audio always comes from the PCM byte count and the format in the header,
never from the header's size fields: streaming servers write placeholders there.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

#: Size fields streaming servers put in a WAV header before they know the length.
PLACEHOLDER_SIZES = (0, 0xFFFFFFFF, 0x7FFFFFFF)
_MAGIC = {b"ID3": "mp3", b"\xff\xfb": "mp3", b"\xff\xf3": "mp3", b"OggS": "ogg", b"fLaC": "flac",
          b"\xff\xf1": "aac", b"\xff\xf9": "aac"}
_TEXTUAL = (b"<", b"{", b"[")


class AudioError(ValueError):
    """The body is not the audio it should be; the message says why, in one sentence."""


@dataclass(frozen=True)
class Audio:
    format: str               # "wav", "pcm", "mp3", "ogg", "aac" or "flac"
    audio_s: float | None     # seconds of audio; None where it cannot be known without decoding
    sample_rate: int | None = None
    channels: int | None = None
    sample_width: int | None = None  # bytes per sample
    data_offset: int = 0      # where the PCM data starts in the body
    data_bytes: int = 0       # PCM bytes present


def _snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace")
    return " ".join(text.split())


def _looks_textual(body: bytes) -> bool:
    head = body[:256]
    if head.lstrip()[:1] not in _TEXTUAL:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3   # only a character cut at the end
    return True


def parse_wav(body: bytes) -> Audio:
    """Parse a PCM WAV body; raise AudioError if it is not one or is cut short."""
    if len(body) < 12 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
        raise AudioError("body is not a WAV file (no RIFF/WAVE header)")
    riff_size = struct.unpack_from("<I", body, 4)[0]
    pos = 12
    fmt = None
    while pos + 8 <= len(body):
        chunk_id = body[pos:pos + 4]
        size = struct.unpack_from("<I", body, pos + 4)[0]
        start = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or start + 16 > len(body):
                raise AudioError("truncated WAV: the fmt chunk is cut short")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body, start)
            if tag not in (1, 0xFFFE) or bits not in (8, 16, 24, 32):
                raise AudioError(f"WAV is not integer PCM (format tag {tag}, {bits} bits)")
            if channels == 0 or rate == 0:
                raise AudioError("WAV header has 0 channels or a 0 Hz sample rate")
            fmt = (rate, channels, bits // 8)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioError("WAV has a data chunk before its fmt chunk")
            rate, channels, width = fmt
            present = len(body) - start
            if size in PLACEHOLDER_SIZES or riff_size in PLACEHOLDER_SIZES and size > present:
                data = present                      # streamed: sizes unknown when sent
            elif size > present:
                raise AudioError(f"truncated WAV: header promises {size} bytes of audio, got {present}")
            else:
                data = size
            frame = channels * width
            data -= data % frame
            if data <= 0:
                raise AudioError("WAV holds no audio samples")
            return Audio("wav", data / (rate * frame), rate, channels, width, start, data)
        pos = start + size + (size & 1)
    raise AudioError("truncated WAV: no data chunk" if fmt else "truncated WAV: no fmt chunk")


def check_audio(body: bytes, content_type: str | None, expect: str = "wav",
                pcm_rate: int = 24000) -> Audio:
    """Validate a 200 response body as audio of the expected format.

    An empty body, HTML, JSON, or a truncated WAV raises AudioError naming the problem.
    """
    if not body:
        raise AudioError("empty body under status 200")
    ctype = (content_type or "").split(";")[0].strip().lower()
    if body[:4] == b"RIFF":   # a WAV whatever the label says (piper's server sends text/html)
        return parse_wav(body)
    if ctype.startswith("text/") or ctype.endswith("json") or _looks_textual(body):
        kind = "HTML" if body.lstrip()[:1] == b"<" and ctype != "application/json" else ctype or "text"
        raise AudioError(f"got {kind} instead of audio: {_snippet(body)!r}")
    if expect == "wav":
        raise AudioError(f"body is not a WAV file (starts {body[:8]!r}, content type {ctype or 'none'})")
    if expect == "pcm":
        if len(body) % 2:
            raise AudioError("PCM16 body has an odd number of bytes: cut short")
        return Audio("pcm", len(body) / (2 * pcm_rate), pcm_rate, 1, 2, 0, len(body))
    for magic, fmt in _MAGIC.items():
        if body.startswith(magic):
            return Audio(fmt, None)
    raise AudioError(f"body is not recognisable {expect} audio (starts {body[:8]!r})")


def wav_header(data_bytes: int, rate: int, channels: int, width: int) -> bytes:
    frame = channels * width
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + data_bytes, b"WAVE", b"fmt ", 16, 1,
                       channels, rate, rate * frame, frame, width * 8, b"data", data_bytes)


def concat(parts: list[tuple[bytes, Audio]]) -> bytes:
    """Join segments' audio into one WAV (all parts must share one PCM format)."""
    first = parts[0][1]
    if first.sample_rate is None:
        raise AudioError(f"cannot join {first.format} segments; ask for wav or pcm")
    pcm = []
    for body, audio in parts:
        if (audio.sample_rate, audio.channels, audio.sample_width) != (
                first.sample_rate, first.channels, first.sample_width):
            raise AudioError("segments came back in different audio formats")
        pcm.append(body[audio.data_offset:audio.data_offset + audio.data_bytes])
    data = b"".join(pcm)
    return wav_header(len(data), first.sample_rate, first.channels, first.sample_width) + data
