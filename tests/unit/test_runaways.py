"""Runaways and truncated answers judged per text (analysis.steps.length_flags): against the same
text's own length, so that a text whose pace is far from the run's (digits spoken) is no runaway
and an answer that doubles its own text's length is one, however many of them the run has; and
the ``signal`` knee the shares set."""

from __future__ import annotations

import json

from tts_knee import runformat
from tts_knee.analysis.knee import SIGNAL_MIN_ANSWERS, SIGNAL_RISE, find_knee
from tts_knee.analysis.steps import length_flags
from tts_knee.runformat.reader import RequestLog

#: (text, characters, seconds of audio at the lowest step): joe's own lengths of three texts;
#: the digits text is 3.2x the others' audio per character.
TEXTS = {
    "plain-1": ("The train to the airport leaves at nine.", 40, 2.6),
    "plain-2": ("Thank you for calling, have a nice day.", 39, 2.5),
    "digits": ("Call 555-0199, ext. 42.", 23, 4.7),
}


def _read(tmp_path, rows: list[tuple[int, str, float]]):
    """The attempts of ``rows`` (concurrency, text id, audio seconds), each one successful request."""
    lines = []
    for i, (conc, tid, audio_s) in enumerate(rows):
        t0 = 1_700_000_000.0 + i
        lines.append(
            runformat.attempt(
                req_id=f"w0-{i}",
                attempt=1,
                final=True,
                step={1: 1, 2: 2, 8: 3}[conc],
                concurrency=conc,
                worker="w0",
                user=0,
                text_id=tid,
                text_len=TEXTS[tid][1],
                t0=t0,
                t1=t0 + 0.1,
                t2=t0 + 0.2,
                t3=t0 + 0.2,
                ttfb_ms=100.0,
                wait_ms=200.0,
                status=200,
                ok=True,
                error=None,
                bytes=int(audio_s * 44100),
                audio_s=audio_s,
                settled=True,
            )
        )
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    log = RequestLog(path)
    log.update()
    return log.attempts()


def test_a_digits_text_is_judged_by_its_own_length_and_a_doubled_answer_is_a_runaway(tmp_path):
    own = {tid: t[2] for tid, t in TEXTS.items()}
    rows = [(1, tid, own[tid]) for tid in TEXTS for _ in range(3)]
    rows += [(2, tid, own[tid] * 1.03) for tid in TEXTS for _ in range(3)]
    # at 8 the plain texts run on to twice their length, and the run has more of them than of any
    # other: the run's median pace is now the runaway's
    rows += [(8, tid, own[tid] * 2) for tid in ("plain-1", "plain-2") for _ in range(12)]
    rows += [(8, "digits", own["digits"] * 1.2)] * 2 + [(8, "digits", own["digits"] * 0.4)]
    a = _read(tmp_path, rows)
    runaway, truncated = length_flags(a)
    tid = [a.texts[c] for c in a["text"]]
    conc = a["concurrency"]
    flagged = {(int(conc[i]), tid[i]) for i in range(len(a)) if runaway[i]}
    assert flagged == {(8, "plain-1"), (8, "plain-2")}
    assert runaway[conc == 8].sum() == 24  # every doubled answer
    # the digits text's pace is 3.2x the plain texts' (and over 1.5x the run's, whose median is the
    # runaways' now), but its own length it kept: neither a runaway nor, at 1.2x, anything else
    assert not runaway[[t == "digits" for t in tid]].any()
    cut = [(int(conc[i]), tid[i]) for i in range(len(a)) if truncated[i]]
    assert cut == [(8, "digits")]  # the answer at 0.4x its own length


def test_a_text_heard_once_is_judged_by_its_languages_pace(tmp_path):
    rows = [(1, "plain-1", 2.6), (1, "plain-2", 2.5)] * 3 + [(2, "digits", 4.7)]
    runaway, truncated = length_flags(_read(tmp_path, rows))
    assert not runaway.any() and not truncated.any()  # 3.2x the median pace: inside the heard-once band
    rows = [(1, "plain-1", 2.6), (1, "plain-2", 2.5)] * 3 + [(2, "digits", 9.0)]
    runaway, _ = length_flags(_read(tmp_path, rows))
    assert runaway.tolist() == [False] * 6 + [True]  # 6x the median pace


def _level(c: int, runaway: float, requests: int = 100) -> dict:
    return {
        "concurrency": c,
        "requests": requests,
        "ok": requests,
        "latency_ms": {"p50": 150.0, "p95": 160.0},
        "runaway_rate": runaway,
        "truncated_rate": 0.0,
        "integrity": {"checked": requests, "mismatched": 0, "rate": 0.0, "examples": []},
    }


def test_a_runaway_share_that_rises_with_load_is_the_knee():
    levels = [_level(1, 0.0), _level(2, 0.0), _level(4, 0.01), _level(8, 0.96), _level(16, 0.97)]
    knee = find_knee(levels)
    assert knee["concurrency"] == 8 and knee["methods"]["signal"] == 8 and knee["signal_first"]
    # a rise under the margin, one that falls back, or one answer alone: no knee
    assert find_knee([_level(1, 0.0), _level(2, SIGNAL_RISE * 0.9), _level(4, SIGNAL_RISE * 0.9)])["index"] is None
    assert find_knee([_level(1, 0.0), _level(2, 0.5), _level(4, 0.0)])["index"] is None
    few = [_level(1, 0.0, 10), _level(2, (SIGNAL_MIN_ANSWERS - 1) / 10, 10)]
    assert find_knee(few)["index"] is None


def test_open_loop_a_runaway_share_rising_with_the_rate_is_the_knee_and_named():
    from tts_knee.analysis import openloop
    from tts_knee.analysis.summary import speech_degraded

    steps = [
        dict(_level(0, r), rate=rate, throughput_rps=rate, sched_wait_ms={"p50": 150.0, "p95": 160.0})
        for rate, r in ((5, 0.0), (10, 0.0), (20, 0.9))
    ]
    knee = openloop.find_knee(steps)
    assert knee["rate"] == 20 and knee["methods"]["signal"] == 20 and knee["signal_first"], knee
    d = speech_degraded(openloop.at_rates(steps), knee, {"kind": "no_knee", "evidence": []}, True)
    assert d["kind"] == "speech_degraded"
    assert d["evidence"][0].startswith("Runaways rose from 0% at 10 req/s to 90% at 20 req/s"), d["evidence"]
