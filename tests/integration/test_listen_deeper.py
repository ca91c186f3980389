"""Listening deeper end to end: the simulator speaking joe at a flat 150 ms, judged by Whisper base
with --asr-model alone, which hears speaker similarity and DNSMOS too; past 2 in flight it answers
in another speaker's voice (espeak-ng), or with noise and clicks. Steps 1, 2 and 8 prove the point:
level up to 2, a knee at 8 by what changed, 2 recommended.

The simulator counts the requests in flight when one arrives. A late timer on a loaded machine
only ever lowers that count (a user whose next request is late has none at the server), never
raises it: so the fault starts at a step's own concurrency (2, which no lateness can push past)
and the step that breaks sends four times that (8: an answer there is the fault's unless six of
the other seven users are between requests at once). With the fault past 4 and the step at 8, a
loaded machine served some of step 8's judged clips in joe's voice (similarity 0.69, no knee)."""

from __future__ import annotations

import json
import shutil
import wave

import pytest

from procs import dashboard, locust, read_jsonl, spawn
from rundirs import assert_declared
from speaking import speaking
from tts_knee.testbed.whisper_base import model_dir

pytest.importorskip("piper")
pytest.importorskip("faster_whisper")
pytest.importorskip("onnxruntime")

#: the steps, and the fault past the second of them (the one below the step that breaks)
STEPS = "1,2,8"
ABOVE = "2"


def judged_run(tmp_path, corpus, *knobs, extra=()):
    """A run at :data:`STEPS` against the simulator with ``knobs``, judged with --asr-model alone; its
    summary and the dashboard's output."""
    run = tmp_path / "run"
    with speaking(corpus, *knobs) as sim:
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--texts",
                str(corpus),
                "--steps",
                STEPS,
                "--step-time",
                "3",
                "--asr-model",
                str(model_dir()),
                "--asr-sample",
                "5",
                *extra,
                "--run-dir",
                str(run),
            ],
            timeout=300,
        )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout
    out = dashboard(run)
    assert out.returncode == 0, out.stdout + out.stderr
    print(out.stdout)
    assert_declared(run)
    return run, json.loads((run / "summary.json").read_text())


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng (apt-get install espeak-ng)")
def test_another_speakers_voice_past_two_in_flight_is_a_similarity_knee(tmp_path, corpus):
    run, s = judged_run(tmp_path, corpus, "--other-voice-above", ABOVE)
    heard = read_jsonl(run / "speech.jsonl")
    assert all(h["reason"] is None and len(h["embedding"]) == 256 and h["mos"] for h in heard), heard
    by_c = {st["concurrency"]: st["speech"] for st in s["steps"]}
    print({c: (sp["similarity_mean"], sp["mos_mean"], sp["wer_mean"]) for c, sp in by_c.items()})
    assert by_c[1]["similarity_mean"] == 1.0 and by_c[2]["similarity_mean"] >= 0.9, by_c[2]
    assert by_c[8]["similarity_mean"] <= by_c[1]["similarity_mean"] - 0.25, by_c[8]
    assert by_c[8]["worst_similarity"][0]["similarity"] <= by_c[8]["similarity_mean"]
    knee = s["knee"]
    assert knee["concurrency"] == 8 and knee["methods"]["similarity"] == 8, knee
    assert knee["similarity_drop"][2]["ci"][0] > 0.2 and "similarity" in knee["speech_changed"], knee
    assert knee["similarity_drop"][1] is None or knee["similarity_drop"][1]["ci"][0] < 0.2
    assert s["recommended_concurrency"] == 2
    if knee["methods"]["latency_vs_lowest"] is None:  # a loaded machine can bend the flat 150 ms too
        assert knee["speech_first"]
        d = s["diagnosis"]
        said = d["evidence"][0]  # the voice first: it fell further past its margin than the sound
        assert said.startswith("The voice changed: speaker similarity") and " at 8 " in said, d
        assert d["kind"] == "speech_degraded" and "Least alike at 8" in said and "same voice" not in said, d


def test_noise_and_clicks_past_two_in_flight_is_a_naturalness_knee_while_the_words_survive(tmp_path, corpus):
    run, s = judged_run(tmp_path, corpus, "--noise-above", ABOVE, "--snr-db", "20")
    by_c = {st["concurrency"]: st["speech"] for st in s["steps"]}
    print({c: (sp["similarity_mean"], sp["mos_mean"], sp["wer_mean"]) for c, sp in by_c.items()})
    assert abs(by_c[2]["mos_mean"] - by_c[1]["mos_mean"]) < 0.2, by_c
    assert by_c[8]["mos_mean"] <= by_c[1]["mos_mean"] - 0.5, by_c
    assert by_c[8]["mos_bak_mean"] < by_c[1]["mos_bak_mean"]  # the background is what fell
    assert by_c[8]["wer_mean"] <= by_c[1]["wer_mean"] + 0.15  # Whisper still reads the words
    knee = s["knee"]
    assert knee["concurrency"] == 8 and knee["methods"]["mos"] == 8 and "mos" in knee["speech_changed"], (
        knee.get("mos_drop"),
        knee["methods"],
    )
    assert knee["methods"]["speech"] is None
    assert s["recommended_concurrency"] == 2
    if knee["methods"]["latency_vs_lowest"] is None:  # a loaded machine can bend the flat 150 ms too
        d = s["diagnosis"]
        assert d["kind"] == "speech_degraded" and d["evidence"][0].startswith("The sound degraded: naturalness"), d


def test_a_reference_voice_that_cannot_be_heard_stops_the_run_in_one_sentence(tmp_path):
    not_audio = tmp_path / "voice.wav"
    not_audio.write_text("not audio")
    short = tmp_path / "short.wav"
    with wave.open(str(short), "wb") as w:  # 0.2 s of a tone: audio, too little to embed
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(range(256)) * 25)
    cases = (
        (tmp_path / "missing.wav", "no such file"),
        (not_audio, "not an audio file"),
        (short, "too short to embed"),
    )
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "10"]) as sim:
        for path, said in cases:
            proc = locust(
                [
                    "--headless",
                    "-H",
                    sim.url,
                    "--steps",
                    "1",
                    "--step-time",
                    "2",
                    "--asr-model",
                    str(model_dir()),
                    "--asr-listen",
                    "--reference-voice",
                    str(path),
                    "--run-dir",
                    str(tmp_path / "run"),
                ],
                timeout=120,
            )
            assert proc.returncode == 2 and "Traceback" not in proc.stdout, proc.stdout
            assert f"--reference-voice {path}: " in proc.stdout and said in proc.stdout, proc.stdout
