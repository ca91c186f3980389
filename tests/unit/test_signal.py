"""The signal checks (audio.signal) and the audible TTFA of the playback model, in-process."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tts_knee.analysis.playback import heard_at
from tts_knee.audio import signal

RATE = 22050


def tone(ms: float, amplitude: float = 0.1) -> np.ndarray:
    n = int(RATE * ms / 1000)
    return (amplitude * 32767 * np.sin(2 * math.pi * 220 * np.arange(n) / RATE)).astype("<i2")


def silence(ms: float) -> np.ndarray:
    return np.zeros(int(RATE * ms / 1000), dtype="<i2")


def test_leading_and_trailing_silence_are_measured_to_the_frame():
    pcm = np.concatenate([silence(600), tone(1000), silence(250)]).tobytes()
    got = signal.check(pcm, RATE, 1)
    assert not got["silent"]
    assert got["leading_silence_ms"] == pytest.approx(600, abs=signal.FRAME_MS)
    assert got["trailing_silence_ms"] == pytest.approx(250, abs=signal.FRAME_MS)
    assert got["clipped_share"] == 0


def test_sound_below_the_level_is_silence_and_above_it_is_not():
    quiet = 10 ** ((signal.SILENCE_DBFS - 6) / 20)  # 6 dB under the level (RMS of a sine: amplitude / sqrt 2)
    assert signal.check(tone(500, quiet).tobytes(), RATE, 1)["silent"]
    assert signal.check(silence(500).tobytes(), RATE, 1)["silent"]
    assert signal.check(b"", RATE, 1)["silent"]
    loud = 10 ** ((signal.SILENCE_DBFS + 6) / 20) * math.sqrt(2)
    assert signal.check(tone(500, loud).tobytes(), RATE, 1)["leading_silence_ms"] == 0


def test_clipping_is_the_share_of_samples_at_full_scale():
    x = np.clip(1.5 * 32767 * np.sin(2 * math.pi * 220 * np.arange(RATE) / RATE), -32768, 32767).astype("<i2")
    share = signal.check(x.tobytes(), RATE, 1)["clipped_share"]
    expected = np.mean((x == 32767) | (x == -32768))
    assert share == pytest.approx(expected, abs=1e-6) and 0.3 < share < 0.7


def test_stereo_frames_count_both_channels():
    mono = np.concatenate([silence(300), tone(500)])
    stereo = np.repeat(mono, 2)
    assert signal.check(stereo.tobytes(), RATE, 2)["leading_silence_ms"] == pytest.approx(300, abs=signal.FRAME_MS)


def test_runaway_and_truncated_are_judged_against_their_languages_median():
    pace = np.array([0.06] * 10 + [0.5, 0.01] + [0.1] * 6 + [0.5])
    lang = np.array([0] * 12 + [1] * 6 + [2])
    runaway, truncated = signal.pace_outliers(pace, lang)
    assert np.flatnonzero(runaway).tolist() == [10]  # 8x the median of language 0
    assert np.flatnonzero(truncated).tolist() == [11]  # a sixth of it
    # language 2 has one attempt: too few to have a median, so it judges nothing
    assert not runaway[18]


def test_the_first_sound_plays_after_the_leading_silence_and_any_stall_before_it():
    # one arrival at 100 ms of 1 s: the first sound 600 ms in plays at 700
    assert heard_at([100.0], [1000.0], 0.0, 600.0) == pytest.approx(700)
    # 200 ms at 100, the rest at 500: the player runs dry at 300 and waits 200 ms; 600 ms in plays at 900
    assert heard_at([100.0, 500.0], [200.0, 800.0], 0.0, 600.0) == pytest.approx(900)
    # the same stall after the first sound does not delay it
    assert heard_at([100.0, 500.0], [200.0, 800.0], 0.0, 50.0) == pytest.approx(150)
    assert heard_at([], [], 0.0, 0.0) is None


def _defined(pcm: bytes, rate: int, channels: int) -> dict:
    """The signal fields by their definition, over the whole audio at once: the oracle the
    block-wise :func:`signal.check_blocks` must agree with to the last digit."""
    x = np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2)
    if not len(x):
        return {"silent": True, "leading_silence_ms": None, "trailing_silence_ms": None, "clipped_share": None}
    frame = max(1, rate * channels * signal.FRAME_MS // 1000)
    n = len(x) // frame
    f = x[: n * frame].reshape(n, frame).astype(np.float32)
    loud = np.flatnonzero(np.einsum("ij,ij->i", f, f) >= signal._LEVEL_SQ * frame)
    clipped = round(float(np.count_nonzero((x == 32767) | (x == -32768))) / len(x), 6)
    tail = x[n * frame :].astype(np.float32)
    tail_loud = bool(len(tail)) and float(np.mean(tail**2)) >= signal._LEVEL_SQ
    if not len(loud) and not tail_loud:
        return {"silent": True, "leading_silence_ms": None, "trailing_silence_ms": None, "clipped_share": clipped}
    total_ms = len(x) / channels / rate * 1000.0
    frame_ms = frame / channels / rate * 1000.0
    lead = (loud[0] if len(loud) else n) * frame_ms
    trail = 0.0 if tail_loud else total_ms - (loud[-1] + 1) * frame_ms
    return {
        "silent": False,
        "leading_silence_ms": round(min(lead, total_ms), 3),
        "trailing_silence_ms": round(max(0.0, trail), 3),
        "clipped_share": clipped,
    }


#: A stretch of audio: its length in ms and its level (0: silence; 1.2: a sine clipped at full
#: scale; levels near -40 dBFS sit at the silence threshold, frame by frame).
_stretch = st.tuples(
    st.integers(0, 900),
    st.sampled_from([0.0, 10 ** (-41 / 20), 10 ** (-40 / 20) * math.sqrt(2), 10 ** (-39 / 20), 0.05, 0.5, 1.2]),
    st.booleans(),  # noise rather than a tone
)


@settings(max_examples=300, deadline=None)
@given(
    stretches=st.lists(_stretch, max_size=6),
    rate=st.sampled_from([8000, 16000, 22050, 24000, 44100]),
    channels=st.sampled_from([1, 2]),
    header=st.integers(0, 60),
    odd_end=st.booleans(),
    cuts=st.lists(st.floats(0, 1), max_size=12),
    seed=st.integers(0, 2**16),
)
def test_the_checks_of_a_body_read_in_blocks_are_those_of_the_whole_audio(
    stretches: list, rate: int, channels: int, header: int, odd_end: bool, cuts: list, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    parts = []
    for ms, level, noisy in stretches:
        n = int(rate * ms / 1000) * channels
        wave = rng.standard_normal(n) / math.sqrt(2) if noisy else np.sin(2 * math.pi * 220 * np.arange(n) / rate)
        parts.append(np.clip(np.round(level * 32767 * wave), -32768, 32767).astype("<i2"))
    pcm = np.concatenate(parts).tobytes() if parts else b""
    pcm += b"\x7f" * odd_end
    body = bytes(rng.integers(0, 256, header, dtype=np.uint8)) + pcm + b"trailer"
    at = sorted({int(c * len(body)) for c in cuts} | {0, len(body)})
    blocks = [bytearray(body[a:b]) for a, b in zip(at, at[1:])] or [bytearray()]
    assert signal.check_blocks(blocks, header, len(pcm), rate, channels) == _defined(pcm, rate, channels)
