"""Slices (analysis.slices): each language's (voice's) requests judged by the pooled knee's rules,
and the sentence when one breaks before the pooled figures do; a run of one language and one
voice gets none."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tts_knee.analysis import slices as slices_mod
from tts_knee.analysis.summary import analyze, load

STEP_S = 10.0


def _write_run(
    path: Path, waits: dict[str, dict[int, float]], per_step: dict[str, int], voices=("alloy",), texts: int = 3
) -> Path:
    """A closed-loop run at 1, 2, 4, 8: per step, ``per_step[lang]`` requests of each language
    whose wait is ``waits[lang][concurrency]`` ms (+/- 2 %)."""
    rng = random.Random(7)
    path.mkdir()
    start, steps, lines = 1_800_000_000.0, [], []
    for i, c in enumerate((1, 2, 4, 8)):
        t_step = start + i * STEP_S
        steps.append({"step": i + 1, "concurrency": c, "start": t_step, "end": t_step + STEP_S})
        n = 0
        for lang, count in per_step.items():
            for j in range(count):
                wait = waits[lang][c] * rng.uniform(0.98, 1.02)
                t0 = t_step + 0.5 + j * (STEP_S - 2) / count
                lines.append(
                    {
                        "req_id": f"{lang}-{c}-{j}",
                        "attempt": 1,
                        "final": True,
                        "step": i + 1,
                        "concurrency": c,
                        "worker": "local",
                        "user": 1,
                        "text_id": f"{lang}{j % texts}",
                        "text_len": 20,
                        "t0": t0,
                        "t1": t0 + wait / 2000,
                        "t2": t0 + wait / 1000,
                        "t3": t0 + wait / 1000,
                        "wait_ms": wait,
                        "ttfb_ms": wait / 2,
                        "write_ms": 0.0,
                        "status": 200,
                        "ok": True,
                        "error": None,
                        "bytes": 1000,
                        "settled": True,
                        "language": lang,
                        "voice": voices[n % len(voices)],
                    }
                )
                n += 1
    run = {"run_id": path.name, "start": start, "end": start + 4 * STEP_S, "mode": "closed", "steps": steps}
    (path / "run.json").write_text(json.dumps(run))
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_a_language_whose_wait_doubles_at_4_breaks_there_while_the_pooled_figures_hold(tmp_path):
    # zh: a fifth of the requests, short, and twice as slow from 4 on: below en's wait still, so the
    # pooled p50 and p95 are en's and never rise
    waits = {"zh": {1: 50.0, 2: 50.0, 4: 100.0, 8: 110.0}, "en": {1: 300.0, 2: 300.0, 4: 305.0, 8: 310.0}}
    s = analyze(load(_write_run(tmp_path / "run", waits, {"zh": 10, "en": 40})))
    assert s["knee"]["concurrency"] is None
    sliced = s["slices"]
    assert sliced["axis"] == "concurrency" and sliced["knee"] is None and sliced["held_to"] == 8
    zh, en = (
        {sl["name"]: sl for sl in sliced["by_language"]}["zh"],
        {sl["name"]: sl for sl in sliced["by_language"]}["en"],
    )
    assert zh["knee"] == 4 and zh["held_to"] == 2 and zh["rules"] == ["latency_vs_lowest"], zh
    assert [lv["requests"] for lv in zh["levels"]] == [10, 10, 10, 10]
    assert en["knee"] is None and en["held_to"] == 8
    assert sliced["note"].startswith("By language, zh breaks first: at 4 its wait p")
    assert "en held to 8 (the pooled figures held to 8)." in sliced["note"]
    assert sliced["note"] == s["diagnosis"]["evidence"][-1]
    assert "by_voice" not in sliced  # one voice


def test_no_sentence_where_every_slice_breaks_with_the_pooled_figures(tmp_path):
    waits = {"zh": {1: 100.0, 2: 100.0, 4: 100.0, 8: 400.0}, "en": {1: 100.0, 2: 100.0, 4: 100.0, 8: 400.0}}
    s = analyze(load(_write_run(tmp_path / "run", waits, {"zh": 20, "en": 20}, voices=("a", "b"))))
    assert s["knee"]["concurrency"] == 8 and s["slices"]["knee"] == 8 and s["slices"]["held_to"] == 4
    assert [sl["knee"] for sl in s["slices"]["by_language"]] == [8, 8]
    assert [sl["name"] for sl in s["slices"]["by_voice"]] == ["a", "b"]
    assert s["slices"]["note"] is None
    assert not any(e.startswith("By ") for e in s["diagnosis"]["evidence"])


def test_one_language_and_one_voice_get_no_slices(tmp_path):
    waits = {"en": {1: 100.0, 2: 100.0, 4: 200.0, 8: 400.0}}
    s = analyze(load(_write_run(tmp_path / "run", waits, {"en": 20})))
    assert "slices" not in s


def test_a_slice_with_too_few_requests_at_a_level_is_not_judged(tmp_path):
    few = slices_mod.MIN_REQUESTS - 1
    waits = {"zh": {1: 50.0, 2: 50.0, 4: 200.0, 8: 200.0}, "en": {1: 300.0, 2: 300.0, 4: 300.0, 8: 300.0}}
    s = analyze(load(_write_run(tmp_path / "run", waits, {"zh": few, "en": 40})))
    zh = next(sl for sl in s["slices"]["by_language"] if sl["name"] == "zh")
    assert not zh["judged"] and zh["knee"] is None and zh["levels"][0]["requests"] == few
    assert s["slices"]["note"] is None


def test_the_judges_lines_join_their_requests_and_a_language_heard_worse_breaks_by_speech(tmp_path):
    # latency flat; what the judge heard of zh (5 of 25 texts) 10 points worse from 4 on: the pooled
    # rise, paired over every text, stays inside the speech knee's margin, the zh slice's does not
    flat = {1: 100.0, 2: 100.0, 4: 100.0, 8: 100.0}
    path = _write_run(tmp_path / "run", {"zh": flat, "en": flat}, {"zh": 10, "en": 40}, texts=20)
    records = [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]
    heard = [
        {
            "req_id": r["req_id"],
            "step": r["step"],
            "concurrency": r["concurrency"],
            "text_id": r["text_id"],
            "language": "en",  # what the judge was told (--asr-language): not the request's
            "metric": "wer",
            "error": 0.1 if r["language"] == "zh" and r["concurrency"] >= 4 else 0.0,
        }
        for r in records
    ]
    (path / "speech.jsonl").write_text("".join(json.dumps(e) + "\n" for e in heard))
    s = analyze(load(path))
    assert s["knee"]["methods"]["speech"] is None
    zh = next(sl for sl in s["slices"]["by_language"] if sl["name"] == "zh")
    assert [lv["speech"]["wer_mean"] for lv in zh["levels"]] == [0.0, 0.0, 0.1, 0.1]
    assert [lv["speech"]["judged"] for lv in zh["levels"]] == [10, 10, 10, 10]
    assert zh["knee"] == 4 and zh["rules"] == ["speech"], zh
    assert "zh breaks first: at 4 its WER rose to 10 %" in s["slices"]["note"]
