"""What the simulator answers with: a quiet PCM16 mono tone, as long as the text asks for, and
the WAV header that frames it."""
from __future__ import annotations

import array
import math
import struct
import sys

AUDIO_S_PER_CHAR = 0.06
MIN_AUDIO_S = 0.2
TONE_HZ = 220.0
TONE_AMPLITUDE = 0.1  # of full scale


def audio_seconds(text: str) -> float:
    return max(MIN_AUDIO_S, AUDIO_S_PER_CHAR * len(text))


def wav_header(data_bytes: int, sample_rate: int, placeholder: bool = False) -> bytes:
    """A 44-byte PCM16 mono WAV header; ``placeholder`` writes 0xFFFFFFFF sizes (streaming)."""
    riff = 0xFFFFFFFF if placeholder else 36 + data_bytes
    data = 0xFFFFFFFF if placeholder else data_bytes
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1,
                       sample_rate, sample_rate * 2, 2, 16, b"data", data)


class Tone:
    """PCM16 audio of a quiet tone, sliced from one precomputed second."""

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        amp = int(32767 * TONE_AMPLITUDE)
        step = 2 * math.pi * TONE_HZ / sample_rate
        samples = array.array("h", (int(amp * math.sin(i * step)) for i in range(sample_rate)))
        if sys.byteorder == "big":
            samples.byteswap()
        self._second = samples.tobytes()

    def pcm(self, audio_s: float) -> bytes:
        n = int(audio_s * self.sample_rate) * 2
        reps = n // len(self._second) + 1
        return (self._second * reps)[:n]

    def seconds(self, pcm: bytes) -> float:
        """The audio ``pcm`` holds."""
        return len(pcm) / 2 / self.sample_rate
