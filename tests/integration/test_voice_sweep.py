"""The knee over distinct voices: the simulator keeps 8 speaker embeddings and a miss costs
300 ms; at concurrency 4, --voice-steps 1,4,8,16,32 bends at 16 voices and recommends 8, with
the diagnosis voice_cache, whether or not the server's cache counters are scraped; against an
SLO, --refine finds the cache's 8."""

from __future__ import annotations

import json

import pytest

from procs import dashboard, locust, spawn
from rundirs import assert_declared

VOICES = ",".join(f"speaker{i:02d}" for i in range(32))


@pytest.fixture(scope="module")
def sim():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--voice-cache",
            "8",
            "--voice-miss-ms",
            "300",
            "--seed",
            "1",
        ]
    ) as p:
        yield p


@pytest.mark.parametrize("scraped", [True, False], ids=["with-cache-metrics", "without"])
def test_the_knee_over_distinct_voices(tmp_path, sim, scraped):
    run = tmp_path / "run"
    extra = ["--server-metrics", sim.url + "/metrics"] if scraped else []
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "4",
            "--step-time",
            "3",
            "--voice-steps",
            "1,4,8,16,32",
            "--voices",
            VOICES,
            "--run-dir",
            str(run),
            *extra,
        ],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    info = json.loads((run / "run.json").read_text())
    assert [(s["concurrency"], s["voices"]) for s in info["steps"]] == [(4, n) for n in (1, 4, 8, 16, 32)]
    recs = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    names = VOICES.split(",")
    for step, n in enumerate((1, 4, 8, 16, 32), 1):
        sent = [r["voice"] for r in recs if r["step"] == step]
        assert set(sent) == set(names[: min(n, len(sent))])  # round robin over the first N voices
    out = dashboard(str(run))
    assert out.returncode == 0, out.stdout + out.stderr
    s = json.loads((run / "summary.json").read_text())
    assert (s["knee"]["voices"], s["knee"]["concurrency"], s["knee"]["axis"]) == (16, 4, "voices")
    assert (s["recommended_voices"], s["recommended_concurrency"]) == (8, 4)
    d = s["diagnosis"]
    assert d["kind"] == "voice_cache"
    assert (
        d["evidence"][0].startswith("At concurrency 4 throughout, p95 wait rose from ")
        and " with 8 distinct voices to " in d["evidence"][0]
        and " with 16 (p50 " in d["evidence"][0]
    )
    if scraped:
        cache = d["evidence"][1]
        assert cache.startswith("The server's voice cache says so: with 16 voices it hit ") and "evicted" in cache
        roles = s["levels"][3]["server"]["server_roles"]
        assert roles["voice_cache_misses"]["series"] == "sim:voice_cache_misses_total"
        assert roles["voice_cache_evictions"]["mean"] > 0
        assert (
            s["levels"][2]["server"]["server_roles"]["voice_cache_hits"]["mean"]
            > 5 * s["levels"][2]["server"]["server_roles"]["voice_cache_misses"]["mean"]
        )  # 8 voices: hits
    else:
        assert d["evidence"][1].startswith("The server publishes no voice-cache figures")
    assert "knee: 16 distinct voices at concurrency 4" in out.stdout
    assert "recommended voices: 8 (at concurrency 4)" in out.stdout
    html = (run / "report.html").read_text()
    assert "Latency (wait) vs distinct voices" in html and "Latency by voice" in html
    assert_declared(run)


def test_a_voice_sweep_against_an_slo_is_refined_to_the_cache_size(tmp_path, sim):
    run = tmp_path / "run"
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "4",
            "--step-time",
            "3",
            "--voice-steps",
            "1,8,16",
            "--voices",
            VOICES,
            "--slo",
            "p50_ms<=250",
            "--refine",
            "--run-dir",
            str(run),
        ],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    info = json.loads((run / "run.json").read_text())
    assert [(s["concurrency"], s["voices"], s["phase"]) for s in info["steps"]] == [
        (4, 1, "grid"),
        (4, 8, "grid"),
        (4, 16, "grid"),
        (4, 12, "refine"),
        (4, 10, "refine"),
        (4, 9, "refine"),
    ]
    plan = info["plan"]
    assert plan["max_voices"] == 8
    assert [(lv["voices"], lv["pass"]) for lv in plan["levels"]] == [
        (1, True),
        (8, True),
        (9, False),
        (10, False),
        (12, False),
        (16, False),
    ]
    assert plan["decisions"][-1]["why"] == (
        "8 voices meets the SLO and 9 voices fails: the highest number of voices that meets it is 8 voices"
    )
    out = dashboard(str(run))
    assert out.returncode == 0, out.stdout + out.stderr
    s = json.loads((run / "summary.json").read_text())
    assert (s["slo"]["max_voices"], s["recommended_voices"]) == (8, 8)
    assert "per number of voices; repeats pooled; largest meeting it with every lower one: 8" in out.stdout
    gate = dashboard(str(run), "--require", "8")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "8 voices at 4 concurrent: p50 " in gate.stdout
    s = json.loads((run / "summary.json").read_text())
    assert (s["require"]["voices"], s["require"]["concurrency"], s["require"]["holds"]) == (8, 4, True)
    assert_declared(run)
    gate = dashboard(str(run), "--require", "9")
    assert gate.returncode == 1 and "The SLO p50_ms<=250 does not hold at 9: p50_ms " in gate.stderr, gate.stderr


def test_a_voice_sweep_needs_one_load_and_enough_voices(tmp_path, sim):
    for args, message in (
        (
            ["--steps", "2,4", "--voices", VOICES],
            "--voice-steps sweeps the number of voices at one load: give one concurrency",
        ),
        (["--steps", "4", "--voices", "a,b"], "--voice-steps goes up to 4 voices but --voices names 2"),
        (["--steps", "4"], "--voice-steps draws each step's voices from --voices"),
        (
            ["--steps", "4", "--voices", VOICES, "--soak", "1m"],
            "--soak holds one load, and --voice-steps sweeps voices",
        ),
        (
            ["--steps", "4", "--voices", VOICES, "--tts-protocol", "ws", "--tts-preset", "vllm-omni"],
            "--tts-protocol ws sends the one voice of --tts-voice",
        ),
    ):
        proc = locust(
            ["--headless", "-H", sim.url, "--voice-steps", "1,4", "--run-dir", str(tmp_path / "r"), *args], timeout=60
        )
        errors = [line for line in proc.stdout.splitlines() if "/ERROR/" in line]
        assert proc.returncode == 2 and "Traceback" not in proc.stdout
        assert len(errors) == 1 and message in errors[0], proc.stdout
