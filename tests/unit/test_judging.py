"""What the judge hears by default (audio.hearing: the words, the voice and the sound; the words
alone where asked, or where the listening models are missing, said in one sentence), the flags that
contradict each other, what the summary says was heard, the Whisper windows ``tts-knee judge``
hears together again, and the default corpus naming its languages without sending them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.analysis import speech as speech_mod
from tts_knee.audio import asr, hearing
from tts_knee.dashboard import judge as after
from tts_knee.locustfiles import settings as settings_mod
from tts_knee.locustfiles.inputs import bodies, corpus, voices

HOST = "http://127.0.0.1:8300"


def settings(**changes) -> settings_mod.Settings:
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), HOST)


def test_the_judge_hears_words_voice_and_sound_unless_told_the_words_only():
    assert hearing.decide(False, False) == hearing.Hearing(True, None)
    assert hearing.decide(False, False).heard == ["words", "voice", "sound"]
    words = hearing.decide(False, True)
    assert words.heard == ["words"] and words.not_heard == hearing.WORDS_ONLY


@pytest.fixture
def no_speaker_weights(tmp_path, monkeypatch):
    """A Resemblyzer package on the path that holds no weights, as the [asr] extra alone leaves it."""
    (tmp_path / "resemblyzer").mkdir()
    (tmp_path / "resemblyzer" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_listening_models_missing_is_the_words_and_a_sentence_unless_listening_was_asked_for(no_speaker_weights):
    words = hearing.decide(False, False)
    assert words.heard == ["words"] and not words.listen
    assert words.not_heard and "pip install --no-deps Resemblyzer" in words.not_heard and "\n" not in words.not_heard
    with pytest.raises(asr.AsrError, match="^--asr-listen: speaker similarity needs"):
        hearing.decide(True, False)
    with pytest.raises(asr.AsrError, match="^--reference-voice ref.wav: speaker similarity needs"):
        hearing.decide(False, False, "ref.wav")
    assert hearing.decide(False, True).heard == ["words"]  # the words alone need neither model


@pytest.mark.parametrize(
    "changes, said",
    [
        (
            {"asr_model": "base", "asr_listen": True, "asr_words_only": True},
            "--asr-words-only judges the words alone, and --asr-listen and --reference-voice ask for the voice too",
        ),
        ({"asr_model": "base", "asr_keep": True}, "--asr-keep keeps the clips for tts-knee judge without judging"),
        ({"asr_words_only": True}, "--asr-words-only tell the ASR judge how to listen: give --asr-model"),
        ({"asr_device": "cuda"}, "--asr-device tell the ASR judge how to listen: give --asr-model"),
        (
            {"asr_keep": True, "asr_listen": True},
            "--asr-listen tell the ASR judge how to listen: give --asr-model (tts-knee judge takes them",
        ),
    ],
)
def test_listening_flags_that_cannot_go_together_are_one_sentence(changes, said):
    with pytest.raises(settings_mod.SettingsError) as e:
        settings(**changes)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_kept_clips_record_their_options():
    s = settings(asr_keep=True, asr_sample=3, asr_language="en")
    recorded = s.public()
    assert (recorded["asr_keep"], recorded["asr_sample"], recorded["asr_model"]) == (True, 3, None)
    assert settings(asr_model="base").public()["asr_device"] == "cpu"


def _line(req_id: str, step: int, text_id: str, window: str | None, **more) -> dict:
    return {
        "req_id": req_id,
        "step": step,
        "text_id": text_id,
        "window": window,
        "clip": f"speech/{req_id}.wav",
        **more,
    }


def test_clips_heard_together_during_the_run_are_heard_together_again():
    lines = [
        _line("a", 1, "t0", "a"),
        _line("b", 1, "t1", "a"),
        _line("c", 1, "t2", "c"),  # alone
        _line("x", 1, "t3", None, reason="not judged: the judge was behind (48 clips waiting)"),
        _line("d", 2, "t0", "d"),
        _line("e", 2, "t1", "f"),  # heard after its window's first: the order of the lines, not of the ids
        _line("f", 2, "t2", "f"),
    ]
    assert [[e["req_id"] for e in b] for b in after.batches(lines, lines)] == [
        ["a", "b"],
        ["c"],
        ["x"],
        ["d"],
        ["e", "f"],
    ]
    # a window some of whose clips are not judged now is no window to keep: the rest go a step at a time
    some = [e for e in lines if e["req_id"] != "b"]
    assert [[e["req_id"] for e in b] for b in after.batches(some, lines)] == [["a"], ["c"], ["x"], ["d"], ["e", "f"]]


def test_the_summary_says_what_the_judge_heard():
    listened = {"error": 0.1, "similarity": 0.98, "mos": 3.2}
    run = {"speech": {"model": "/models/whisper-base", "afterwards": True}}
    said = speech_mod.judged([{"req_id": "a", **listened}, {"req_id": "b", **listened}], run)
    assert said["heard"] == ["words", "voice", "sound"] and said["not_heard"] is None and said["kept"] == 0
    assert said["text"] == (
        "the judge heard the words, the voice and the sound of 2 clips (model whisper-base, after the run, "
        "by tts-knee judge)"
    )
    missing = {"speech": {"model": "base", "not_heard": "speaker similarity needs the speaker encoder's weights"}}
    words = speech_mod.judged([{"req_id": "a", "error": 0.0}], missing)
    assert words["heard"] == ["words"] and words["text"] == (
        "the judge heard the words of 1 clip (model base, during the run), not the voice and the sound: "
        "speaker similarity needs the speaker encoder's weights"
    )
    kept = speech_mod.judged([{"req_id": "a", "error": None, "reason": speech_mod.KEPT}], {})
    assert kept["kept"] == 1 and kept["heard"] == []
    assert kept["text"] == "1 clip kept, not judged yet: tts-knee judge RUN_DIR judges them"


def test_the_default_corpus_names_its_languages_without_sending_them():
    texts = corpus.load()
    by_kind = {t.id.split("-")[0]: set() for t in texts}
    for t in texts:
        by_kind[t.id.split("-")[0]].add(t.written_in)
        assert t.language is None  # nothing asks the server for a language
    assert by_kind == {"en": {"en"}, "zh": {"zh"}, "mx": {"zh"}}
    for api, template in (("openai", ""), ("piper", ""), ("json", '{"text": "{text}"}')):
        s = settings(tts_api=api, tts_template=template)
        for t in texts:
            body, _ = bodies.body(s, t.text, voices.ask_for(t, None))
            assert "language" not in json.loads(body), (api, body)
