"""One playback model: the underruns the load generator records per attempt, the summary (and
so the web UI's live step table) and the report's drawing of a stream all come from
``analysis.playback.listen``. The arrivals go through the attempt path's own Timeline; the
cases include what a second model would judge differently: a hand-over exact but for float
noise (50 + (100.1 + 100.3) is 250.39999999999998, the next chunk comes at 250.4), arrivals
without a whole frame, a buffer never filled, two chunks at once filling it."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from rundirs import assert_declared
from tts_knee import runformat
from tts_knee.analysis.playback import playback
from tts_knee.analysis.summary import analyze, load
from tts_knee.locustfiles.timeline import Timeline

BUFFER_MS = 150.0
START = 1_700_000_000.0
STEP_S = 20.0
M0 = 5000.0  # the monotonic clock at t0 of every attempt (any value: times are relative)

HAND_MADE = [  # (arrivals in ms after t0, audio ms each)
    ([50.0, 50.0, 250.4], [100.1, 100.3, 100.0]),  # back to back, but for float noise
    ([50.0, 120.0, 400.0], [100.0, 100.0, 100.0]),  # buffer full at 120, dry at 320
    ([50.0, 60.0, 70.0, 900.0], [40.0, 0.0, 40.0, 100.0]),  # never 150 ms until the end
    ([10.0, 20.0, 500.0, 501.0, 900.0], [0.0, 200.0, 0.0, 100.0, 100.0]),  # frameless arrivals
    ([100.0, 100.0, 400.0], [100.0, 100.0, 100.0]),  # two at once fill it, then one stall
]


def _random_stream(rng: random.Random) -> tuple[list[float], list[float]]:
    at, audio, t = [], [], rng.choice([40.0, 80.0, 300.0])
    for _ in range(rng.randint(1, 12)):
        ms = rng.choice([0.0, 33.3, 100.1, 100.2, 200.0])
        at.append(round(t, 1))
        audio.append(ms)
        t += rng.choice([0.0, ms, ms, ms * 0.5, ms * 1.6])  # on time, early, or late
    return at, audio


def _record(step: int, k: int, at_ms: list[float], audio_ms: list[float]) -> dict:
    tl = Timeline()
    for t, ms in zip(at_ms, audio_ms):
        tl.add(M0 + t / 1000.0, ms)
    fields = tl.fields(M0, BUFFER_MS, keep_lists=True)
    t0 = START + (step - 1) * STEP_S + 3.0 + k * 0.01
    end = t0 + (at_ms[-1] + 1.0) / 1000.0
    return runformat.attempt(
        req_id=f"w-{step}-{k}",
        attempt=1,
        final=True,
        step=step,
        concurrency=step,
        worker="local",
        user=k,
        text_id="t",
        text_len=10,
        tier="short",
        t0=t0,
        t1=t0 + at_ms[0] / 1000.0,
        t2=end,
        ttfb_ms=at_ms[0],
        wait_ms=(end - t0) * 1000.0,
        status=200,
        ok=True,
        bytes=1000,
        audio_s=sum(audio_ms) / 1000.0 or None,
        rtf=(end - t0) / (sum(audio_ms) / 1000.0) if sum(audio_ms) else None,
        settled=True,
        **fields,
    )


@pytest.fixture(scope="module")
def records():
    rng = random.Random(7)
    streams = {1: HAND_MADE + [_random_stream(rng) for _ in range(15)], 2: [_random_stream(rng) for _ in range(40)]}
    return [_record(step, k, at, audio) for step, ss in streams.items() for k, (at, audio) in enumerate(ss)]


def test_the_report_replays_each_stream_as_the_client_heard_it(records):
    for rec in records:
        pb = playback(np.array(rec["chunk_at_ms"]), np.array(rec["chunk_audio_ms"]), BUFFER_MS)
        if pb is None:
            assert rec["underruns"] == 0 and sum(rec["chunk_audio_ms"]) == 0
            continue
        assert (pb.underruns, round(pb.underrun_ms, 3)) == (rec["underruns"], rec["underrun_ms"]), rec["req_id"]
    stalled = {r["req_id"]: (r["underruns"], r["underrun_ms"]) for r in records[: len(HAND_MADE)]}
    assert list(stalled.values()) == [(0, 0.0), (1, 80.0), (0, 0.0), (2, 580.0), (1, 100.0)]


@pytest.fixture(scope="module")
def summary(records, tmp_path_factory):
    """The records as a run directory, analysed."""
    tmp_path = tmp_path_factory.mktemp("run")
    steps = [
        runformat.step_entry(
            step=s,
            concurrency=s,
            start=START + (s - 1) * STEP_S,
            end=START + s * STEP_S,
            phase="grid",
            repeat=1,
            settle_s=2.0,
        )
        for s in (1, 2)
    ]
    run = runformat.run_info(
        format_version=runformat.FORMAT_VERSION,
        run_id="r",
        start=START,
        end=START + 2 * STEP_S,
        target="http://127.0.0.1:8300",
        steps=steps,
        settle_s=2.0,
        versions={},
        options={"steps": "1,2", "tts_stream": True, "playback_buffer_ms": BUFFER_MS},
        workers=[runformat.worker_entry(id="local", offset_s=0.0, rtt_s=0.0)],
        collectors=[],
    )
    (tmp_path / runformat.RUN_JSON).write_text(json.dumps(run))
    (tmp_path / runformat.REQUESTS).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert_declared(tmp_path)
    return analyze(load(tmp_path))


def test_the_web_ui_tab_and_the_summary_give_the_same_underrun_figures(records, summary):
    from tts_knee.dashboard.table import tab_rows

    by_step = {s["step"]: s for s in summary["steps"]}
    live = {row["step"]: row["underrun_pct"] for row in tab_rows(summary)}
    assert sorted(live) == [1, 2]
    for step, pct in live.items():
        assert by_step[step]["streams"]["counted"] == sum(r["step"] == step for r in records)
        assert pct == round(100.0 * by_step[step]["underrun_rate"], 1), step
        assert 0 < pct < 100  # both kinds of stream are in each step


# -- the arrivals judged without a buffer: the pre-roll and the longest stall ------------------


def _peer_worst_deficit(at_ms: list[float], audio_ms: list[float]) -> float:
    """vLLM-Omni's worst-case underrun, written out as its benchmark computes it
    (vllm_omni/benchmarks/audio_continuity.py): a player at 1x from the first chunk's arrival,
    the audio played by each later arrival against the audio received before it."""
    chunks = [(t, ms) for t, ms in zip(at_ms, audio_ms) if ms]
    worst, received = 0.0, 0.0
    for i, (t, ms) in enumerate(chunks):
        if i:
            worst = max(worst, (t - chunks[0][0]) - received)
        received += ms
    return worst


def _from_first_bytes(at_ms: list[float], audio_ms: list[float]) -> float:
    """vLLM-Omni's worst-case underrun of the arrivals that carried audio, counted from the first
    bytes (TTFA) as its benchmark counts from its first read: the wait for the first whole frame
    adds to it."""
    first_frame = next(t for t, ms in zip(at_ms, audio_ms) if ms)
    return first_frame - at_ms[0] + _peer_worst_deficit(at_ms, audio_ms)


def _peer_longest_underrun(at_ms: list[float], audio_ms: list[float]) -> float | None:
    """sglang-omni's maximum playback underrun, written out as its benchmark computes it
    (benchmarks/metrics/playback_continuity.py): each chunk is due when the audio before it has
    played, a late one plays as soon as it comes; None for fewer than two chunks."""
    chunks = [(t, ms) for t, ms in zip(at_ms, audio_ms) if ms]
    if len(chunks) < 2:
        return None
    due, worst = chunks[0][0] + chunks[0][1], 0.0
    for t, ms in chunks[1:]:
        worst = max(worst, t - due)
        due = max(due, t) + ms
    return worst


def test_the_pre_roll_and_the_longest_stall_of_the_hand_made_streams(records):
    hand = [(r["preroll_ms"], r["stall_max_ms"]) for r in records[: len(HAND_MADE)]]
    # 3: 80 ms of audio by 70 ms, the last arrival at 900: it needed 900 - 50 - 80 = 770 ms of start-up
    # buffer. 4: its first whole frame came 10 ms after the first bytes, so a buffer from those bytes
    # needs 900 - 10 - 300 = 590 ms, while the longest of its two stalls with none is 299 ms.
    assert hand == [(0.0, 0.0), (150.0, 150.0), (770.0, 770.0), (590.0, 299.0), (100.0, 100.0)]
    alone = Timeline()
    alone.add(M0 + 0.05, 200.0)
    assert {"preroll_ms": 0.0, "stall_max_ms": None}.items() <= alone.fields(M0, BUFFER_MS, False).items()
    silent = Timeline()
    silent.add(M0 + 0.05, None)
    assert "preroll_ms" not in silent.fields(M0, BUFFER_MS, keep_lists=False)  # audio unknown: no figure


def test_the_pre_roll_is_the_peers_worst_underrun_and_plays_every_stream_without_a_gap(records):
    for rec in records:
        at, audio = rec["chunk_at_ms"], rec["chunk_audio_ms"]
        if not any(audio):
            continue
        assert rec["preroll_ms"] == pytest.approx(_from_first_bytes(at, audio), abs=2e-3)
        assert rec["stall_max_ms"] == pytest.approx(_peer_longest_underrun(at, audio), abs=2e-3)
        # a player that waits that long after the first bytes never runs dry; 1 ms less, it does
        start = at[0] + rec["preroll_ms"]
        assert all(t <= start + played + 2e-3 for t, played in _due(at, audio)), rec["req_id"]
        if rec["preroll_ms"] >= 1:
            assert any(t > start - 1 + played for t, played in _due(at, audio)), rec["req_id"]


def _due(at: list[float], audio: list[float]) -> list[tuple[float, float]]:
    """Each arrival with audio and the audio before it."""
    out, before = [], 0.0
    for t, ms in zip(at, audio):
        if ms:
            out.append((t, before))
            before += ms
    return out


def test_a_steps_peer_figures_are_the_peers_definitions_over_its_streams(records, summary):
    for step in summary["steps"]:
        mine = [r for r in records if r["step"] == step["step"]]
        assert step["streams"]["counted"] == len(mine)
        worst = [_from_first_bytes(r["chunk_at_ms"], r["chunk_audio_ms"]) for r in mine if any(r["chunk_audio_ms"])]
        longest = [v for r in mine if (v := _peer_longest_underrun(r["chunk_at_ms"], r["chunk_audio_ms"])) is not None]
        assert 0 < step["continuity_ok_rate"] < 1  # both kinds in each step
        assert step["continuity_ok_rate"] == pytest.approx(np.mean([w <= 100 for w in worst]))
        for key, limit in (("c50", 50), ("c100", 100), ("c200", 200)):
            assert step[key] == pytest.approx(np.mean([v <= limit for v in longest])), key
        rtf = [r["wait_ms"] / (1000 * r["audio_s"]) for r in mine if r["audio_s"]]
        assert step["audio_rtf"]["p50"] == pytest.approx(np.median(rtf), rel=1e-6)
        assert step["audio_rtf"]["p95"] == pytest.approx(np.percentile(rtf, 95), rel=1e-6)
        pre = [r["preroll_ms"] for r in mine if r.get("preroll_ms") is not None]
        assert step["preroll_ms"]["p95"] == pytest.approx(np.percentile(pre, 95))
        smooth = [r["ttfa_ms"] + r["preroll_ms"] for r in mine if r.get("preroll_ms") is not None]
        assert step["smooth_start_ms"]["p50"] == pytest.approx(np.median(smooth))
