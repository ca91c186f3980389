"""A listener's pre-roll and the peers' continuity figures, end to end against the simulator's
shared engine: 3x real time shared by the streams, 200 ms chunks, no prefill, texts of 1.8 s of
audio (nine chunks). One stream makes audio at 3x, two at 1.5x, four at 0.75x: at 1 and 2 every
chunk comes before the audio before it has played, at 4 each comes 67 ms late, so the stall
before each is 67 ms (sglang-omni's C50 fails, C100 holds) and the lateness adds up to
8 x 67 = 533 ms by the last chunk (vLLM-Omni's continuity fails): the pre-roll a listener
needs. The peers' figures are then worked out again from requests.jsonl, each by the peer's own
definition, and must be the summary's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from procs import dashboard, locust, read_jsonl, spawn

#: Times the client against the simulator's engine to tens of ms: run with the machine to itself.
pytestmark = [pytest.mark.alone, pytest.mark.slow]

TEXTS = [  # 30 characters each: 1.8 s of the simulator's audio
    "The train leaves at nine today",
    "Please hold the line right now",
    "Your order has shipped to you.",
    "Thanks for calling us tonight.",
]
CAPACITY, CHUNK_MS, AUDIO_MS = 3.0, 200.0, 1800.0


def by_hand(streams: int) -> tuple[float, float]:
    """(pre-roll, TTFA) of one of ``streams`` sharing the engine, in ms, from the chunk cadence:
    each chunk takes CHUNK_MS / speed to make, and chunk k is due k x CHUNK_MS after the first."""
    speed = min(CAPACITY, CAPACITY / streams)
    every = CHUNK_MS / speed
    chunks = round(AUDIO_MS / CHUNK_MS)
    return max(0.0, (chunks - 1) * (every - CHUNK_MS)), every


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers")
    texts, run_dir = tmp / "texts.txt", tmp / "run"
    texts.write_text("\n".join(TEXTS) + "\n")
    sim_args = ["--capacity", str(CAPACITY), "--chunk-ms", str(CHUNK_MS), "--prefill-ms", "0", "--sample-rate", "24000"]
    with spawn(["tts_knee.testbed.sim", "--port", "0", *sim_args]) as sim:
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--tts-stream",
                "--steps",
                "1,2,4",
                "--step-time",
                "8",
                "--texts",
                str(texts),
                "--run-dir",
                str(run_dir),
            ],
            timeout=120,
        )
    assert "Traceback" not in proc.stdout, proc.stdout
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, read_jsonl(run_dir / "requests.jsonl"), json.loads((run_dir / "run.json").read_text()), judged


def test_the_pre_roll_is_the_one_the_chunk_cadence_gives_at_every_step(run):
    summary, _, _, judged = run
    for step in summary["steps"]:
        preroll, ttfa = by_hand(step["concurrency"])
        assert step["streams"]["counted"] >= 4, step["streams"]
        got = step["preroll_ms"]["p95"]
        assert got == pytest.approx(preroll, abs=max(0.1 * preroll, 20.0)), (step["concurrency"], step["preroll_ms"])
        smooth = step["smooth_start_ms"]["p95"]
        assert smooth == pytest.approx(preroll + ttfa, abs=max(0.1 * (preroll + ttfa), 20.0)), step["concurrency"]
    at4 = summary["steps"][-1]
    assert (at4["continuity_ok_rate"], at4["c50"], at4["c100"], at4["c200"]) == (0.0, 0.0, 1.0, 1.0)
    assert all(s["continuity_ok_rate"] == s["c50"] == 1.0 for s in summary["steps"][:2])
    assert "pre-roll and the peers' figures" in judged.stdout


def _worst_deficit(at: list[float], audio: list[float]) -> float:
    """vLLM-Omni's worst-case underrun of one stream (vllm_omni/benchmarks/audio_continuity.py):
    a 1x player from the first chunk's arrival, the audio it has played by each later arrival
    less the audio received before it."""
    worst, received = 0.0, 0.0
    for i, (t, ms) in enumerate(zip(at, audio)):
        if i:
            worst = max(worst, (t - at[0]) - received)
        received += ms
    return worst


def _longest_underrun(at: list[float], audio: list[float]) -> float | None:
    """sglang-omni's maximum playback underrun of one stream
    (benchmarks/metrics/playback_continuity.py); None for fewer than two chunks."""
    if len(at) < 2:
        return None
    due, worst = at[0] + audio[0], 0.0
    for t, ms in zip(at[1:], audio[1:]):
        worst = max(worst, t - due)
        due = max(due, t) + ms
    return worst


def test_the_peers_figures_are_their_definitions_worked_out_from_the_records(run):
    summary, records, info, _ = run
    ends = {s["step"]: s["end"] for s in info["steps"]}
    for step in summary["steps"]:
        # the step's streams: its settled successful requests that ended before it did
        mine = [
            r
            for r in records
            if r["step"] == step["step"]
            and r["settled"]
            and r["final"]
            and r["ok"]
            and (r["t3"] or r["t2"]) <= ends[r["step"]]
        ]
        assert len(mine) == step["streams"]["counted"]
        worst = [_worst_deficit(r["chunk_at_ms"], r["chunk_audio_ms"]) for r in mine]
        longest = [v for r in mine if (v := _longest_underrun(r["chunk_at_ms"], r["chunk_audio_ms"])) is not None]
        assert step["continuity_ok_rate"] == np.mean([w <= 100.0 for w in worst])
        for key, limit in (("c50", 50.0), ("c100", 100.0), ("c200", 200.0)):
            assert step[key] == np.mean([v <= limit for v in longest]), key
        # vLLM-Omni's audio_rtf: the request's time to its last byte over its audio's length
        rtf = [r["wait_ms"] / 1000.0 / r["audio_s"] for r in mine]
        assert step["audio_rtf"]["p50"] == pytest.approx(np.median(rtf), rel=1e-5)
        assert step["audio_rtf"]["p95"] == pytest.approx(np.percentile(rtf, 95), rel=1e-5)
