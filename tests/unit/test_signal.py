"""The signal checks (audio.signal) and the audible TTFA of the playback model, in-process."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
