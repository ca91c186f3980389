"""What the simulator answers with: a quiet PCM16 mono tone as long as the text asks for, or
(``--speech``) the text spoken (framed by :func:`audio.containers.wav_header`, the one WAV header). :class:`Speaker`
makes every
answer's PCM, and carries out the drills that break it under load (``--garble-above``,
``--silence-above``, ``--runaway-rate``, ``--runaway-above``)."""

from __future__ import annotations

import array
import hashlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts_knee.audio.containers import wav_header  # noqa: F401  (the simulator's modules take it from here)

AUDIO_S_PER_CHAR = 0.06
MIN_AUDIO_S = 0.2
TONE_HZ = 220.0
TONE_AMPLITUDE = 0.1  # of full scale


def audio_seconds(text: str) -> float:
    return max(MIN_AUDIO_S, AUDIO_S_PER_CHAR * len(text))


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


RUNAWAY_FACTOR = 8  # a runaway answer's audio: its clip repeated to this many times its length ...
RUNAWAY_CAP_S = 25.0  # ... at most this long (the token cap)
#: --runaway-above's answer: its clip and then more speech to this many times its length (--runaway-x).
DEFAULT_RUN_ON_X = 4.0
GARBLE_KEEP = 0.4  # a garbled answer keeps this fraction of its clip's samples; another text speaks the rest
#: --noise-above: the noise's level under the clip's (dB), and how often a click comes (s).
DEFAULT_SNR_DB = 20.0
CLICK_EVERY_S = 0.05
CLICK_LEVEL = 2.0
#: The garbling speech when the pre-rendered texts hold no other text than the one answered.
GARBLE_FILLER = "Seven purple giraffes quietly repaired the old lighthouse before dawn."


@dataclass
class Clip:
    """One answer's audio (``pcm``, PCM16 mono) and what was done to it under load: ``garbled``
    (all after its first 40 % is another text's speech), ``silence_ms`` (digital silence put
    first) and ``runaway`` (repeated towards the token cap)."""

    pcm: bytes
    sample_rate: int
    garbled: bool = False
    silence_ms: float = 0.0
    runaway: bool = False

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate

    def fields(self) -> dict:
        """For the logs: ``garbled``, ``silence_ms`` and ``runaway``."""
        return {"garbled": self.garbled, "silence_ms": self.silence_ms, "runaway": self.runaway}

    @staticmethod
    def merged(clips: list[Clip]) -> dict:
        """:meth:`fields` for several clips (a session's sentences): garbled or runaway if any
        was, their silence summed."""
        return {
            "garbled": any(c.garbled for c in clips),
            "silence_ms": sum(c.silence_ms for c in clips),
            "runaway": any(c.runaway for c in clips),
        }


class Speaker:
    """The one place an answer's PCM is made, for every protocol: :meth:`clip`.

    A text's clip is the quiet tone, ``audio_seconds(text)`` long, or with ``speech`` (a
    :class:`tts_knee.testbed.speech.SpeechCache`: ``--speech``) the text spoken, at least
    ``MIN_AUDIO_S`` long. Then, from ``args`` (the simulator's knobs) and the number of requests in
    flight as the capacity counts them (admitted: queued or holding a slot, this one included):

    - ``--garble-above K`` (speech only): above K in flight, the clip's first ``GARBLE_KEEP`` of
      its samples are kept and the rest are another text's speech (the next of the pre-rendered
      texts, cycled, repeated if shorter), the length unchanged;
    - ``--runaway-rate P``: with probability P (drawn from the simulator's seeded ``rng``, only
      when P > 0) the clip is repeated until it is ``RUNAWAY_FACTOR`` x as long, at most
      ``RUNAWAY_CAP_S`` (a clip already longer stays as it is);
    - ``--runaway-above K``: above K in flight, the clip runs on past its text: followed by more
      speech (the next pre-rendered texts', cycled; with the tone, more tone) until it is
      ``--runaway-x`` times its length (no cap: a server that runs on under load, not to its
      token cap);
    - ``--other-voice-above K`` (speech only): above K in flight, the text is spoken by another
      speaker (espeak-ng) instead of joe;
    - ``--noise-above K``: above K in flight, white noise at ``--snr-db`` below the clip's level and
      a click (a 1 ms step of :data:`CLICK_LEVEL` times the clip's RMS level, as a seam between chunks
      that do not meet makes) every :data:`CLICK_EVERY_S` are added;
    - ``--silence-above K``: above K in flight, ``--silence-ms`` of zeros come first.

    in that order, so the silence is the first audio sent, and comes on top of a runaway's cap.
    """

    def __init__(self, args, rng, speech=None):
        self.sample_rate = args.sample_rate
        self.rng = rng
        self.speech = speech
        self.tone = Tone(args.sample_rate)
        self.garble_above = getattr(args, "garble_above", None)
        self.silence_above = getattr(args, "silence_above", None)
        self.silence_ms = getattr(args, "silence_ms", None) or 0.0
        self.runaway_rate = getattr(args, "runaway_rate", 0.0) or 0.0
        self.runaway_above = getattr(args, "runaway_above", None)
        self.runaway_x = getattr(args, "runaway_x", None) or DEFAULT_RUN_ON_X
        self.pool: list[str] = []  # the pre-rendered texts: where garbling speech comes from
        self.other_voice_above = getattr(args, "other_voice_above", None)
        self.noise_above = getattr(args, "noise_above", None)
        self.snr_db = getattr(args, "snr_db", None) or DEFAULT_SNR_DB
        self.other_voice: dict[str, bytes] = {}  # text -> espeak-ng's PCM
        self.noisy: dict[bytes, bytes] = {}  # a clip's sha1 -> it with noise and clicks (made once)

    def prepare(self, texts: list[str], extra: Sequence[str] = ()) -> None:
        """With speech, render (or read from the cache) ``texts``, the garbling pool, and ``extra``
        (more texts to have at hand: a session's sentences), before any request comes."""
        if self.speech is None:
            return
        self.pool = list(dict.fromkeys(texts))
        if (self.garble_above is not None or self.runaway_above is not None) and len(self.pool) < 2:
            self.pool.append(GARBLE_FILLER if GARBLE_FILLER not in self.pool else "Hello there.")
        self.speech.prerender([*self.pool, *extra])
        if self.other_voice_above is not None:
            for text in [*self.pool, *extra]:
                self._other_voice(text)

    def base(self, text: str) -> bytes:
        """``text``'s clip before any effect."""
        if self.speech is None:
            return self.tone.pcm(audio_seconds(text))
        pcm = self.speech.pcm(text)
        least = int(MIN_AUDIO_S * self.sample_rate) * 2
        return pcm if len(pcm) >= least else pcm + bytes(least - len(pcm))

    def clip(self, text: str, in_flight: int) -> Clip:
        """``text``'s answer with ``in_flight`` requests in flight (see the class doc)."""
        clip = Clip(self.base(text), self.sample_rate)
        if self.speech is not None and self.garble_above is not None and in_flight > self.garble_above:
            clip.pcm, clip.garbled = self._garble(text, clip.pcm), True
        if self.speech is not None and self.other_voice_above is not None and in_flight > self.other_voice_above:
            clip.pcm = self._other_voice(text)
        if self.noise_above is not None and in_flight > self.noise_above:
            clip.pcm = self._noisy(clip.pcm)
        if self.runaway_rate and self.rng.random() < self.runaway_rate:
            clip.pcm, clip.runaway = self._run_away(clip.pcm), True
        elif self.runaway_above is not None and in_flight > self.runaway_above:
            clip.pcm, clip.runaway = self._run_on(text, clip.pcm), True
        if self.silence_above is not None and in_flight > self.silence_above and self.silence_ms:
            frames = round(self.silence_ms * self.sample_rate / 1000)
            clip.pcm, clip.silence_ms = bytes(2 * frames) + clip.pcm, self.silence_ms
        return clip

    def seconds(self, pcm: bytes) -> float:
        """The audio ``pcm`` holds."""
        return len(pcm) / 2 / self.sample_rate

    def other(self, text: str) -> str:
        """The text whose speech garbles ``text``'s: the next pre-rendered one after it (cycled),
        or for a text not among them one picked by its hash; never ``text`` itself."""
        pool = self.pool or [GARBLE_FILLER]
        start = pool.index(text) + 1 if text in pool else int(hashlib.sha1(text.encode()).hexdigest(), 16)
        for k in range(len(pool)):
            candidate = pool[(start + k) % len(pool)]
            if candidate != text:
                return candidate
        return GARBLE_FILLER if text != GARBLE_FILLER else "Hello there."

    def _garble(self, text: str, pcm: bytes) -> bytes:
        frames = len(pcm) // 2
        keep = int(frames * GARBLE_KEEP)
        other = self.base(self.other(text))
        need = 2 * (frames - keep)
        return pcm[: 2 * keep] + (other * (need // len(other) + 1))[:need]

    def _run_on(self, text: str, pcm: bytes) -> bytes:
        """``pcm`` followed by more speech (other texts', in turn) to ``runaway_x`` times its length."""
        target = 2 * int(self.runaway_x * (len(pcm) // 2))
        out, other = [pcm], text
        have = len(pcm)
        for _ in range(1000):  # bounded: each turn adds at least MIN_AUDIO_S of audio
            if have >= target:
                break
            other = self.other(other) if self.speech is not None else text
            more = self.base(other)
            out.append(more)
            have += len(more)
        return b"".join(out)[:target]

    def _other_voice(self, text: str) -> bytes:
        pcm = self.other_voice.get(text)
        if pcm is None:
            from tts_knee.testbed.speech import espeak_pcm

            pcm = self.other_voice[text] = espeak_pcm(text, self.sample_rate)
        return pcm

    def _noisy(self, pcm: bytes) -> bytes:
        key = hashlib.sha1(pcm).digest()
        if key not in self.noisy:
            self.noisy[key] = self._add_noise(pcm, int.from_bytes(key[:4], "big"))
        return self.noisy[key]

    def _add_noise(self, pcm: bytes, seed: int) -> bytes:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
        if not len(samples):
            return pcm
        level = float(np.sqrt(np.mean(samples**2))) or 1.0
        noisy = samples + np.random.default_rng(seed).normal(0.0, level / 10 ** (self.snr_db / 20), len(samples))
        every = int(CLICK_EVERY_S * self.sample_rate)
        width = max(1, self.sample_rate // 1000)
        for start in range(every // 2, len(noisy), every):
            noisy[start : start + width] += CLICK_LEVEL * level
        return np.clip(noisy, -32768, 32767).astype("<i2").tobytes()

    def _run_away(self, pcm: bytes) -> bytes:
        frames = len(pcm) // 2
        target = max(frames, min(RUNAWAY_FACTOR * frames, int(RUNAWAY_CAP_S * self.sample_rate)))
        return (pcm * (target // frames + 1))[: 2 * target] if frames else pcm
