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


def test_the_web_ui_tab_and_the_summary_give_the_same_underrun_figures(records, tmp_path):
    from tts_knee.dashboard.table import tab_rows

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
    summary = analyze(load(tmp_path))
    by_step = {s["step"]: s for s in summary["steps"]}
    live = {row["step"]: row["underrun_pct"] for row in tab_rows(summary)}
    assert sorted(live) == [1, 2]
    for step, pct in live.items():
        assert by_step[step]["streams"]["counted"] == sum(r["step"] == step for r in records)
        assert pct == round(100.0 * by_step[step]["underrun_rate"], 1), step
        assert 0 < pct < 100  # both kinds of stream are in each step
