"""SLO verdicts, levels (refined and repeated steps) and the --require gate on synthetic run
directories (tests/rundirs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from procs import dashboard, read_jsonl
from rundirs import Model, build_run
from tts_knee.analysis import gate, slo
from tts_knee.analysis.summary import analyze, load

SPEC = "p95_ms<=500,error_rate<=0.01"  # 4 slots of ~200 ms (long texts 360 ms): 1, 2, 4 pass, 8 fails


def _run(*args):
    return dashboard(*args, "--no-report")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    # 30 s steps: even concurrency 1 finishes the 72 requests a p95 needs to be bounded above
    return build_run(tmp_path_factory.mktemp("slo") / "grid", Model(steps=(1, 2, 4, 8, 16), slo=SPEC, step_s=30))


def test_refined_steps_are_judged_by_concurrency(tmp_path):
    s = analyze(
        load(build_run(tmp_path / "r", Model(steps=(1, 2, 4, 8, 16, 6, 5), refine_from=5, step_s=30))),
        slo.parse("p95_ms<=500"),
    )
    assert [x["concurrency"] for x in s["steps"]] == [1, 2, 4, 8, 16, 6, 5]  # run order kept
    assert [x["phase"] for x in s["steps"]][-3:] == ["grid", "refine", "refine"]
    assert [x["concurrency"] for x in s["levels"]] == [1, 2, 4, 5, 6, 8, 16]
    assert s["knee"]["concurrency"] == 6  # 4 slots: wait grows as N / 4, past 1.5x of the lowest at 6
    assert [v["concurrency"] for v in s["slo"]["steps"]] == [1, 2, 4, 5, 6, 8, 16]
    assert [v["pass"] for v in s["slo"]["steps"]] == [True] * 4 + [False] * 3
    assert s["slo"]["max_concurrency"] == s["recommended_concurrency"] == 5
    assert "Limit concurrency to 5" in s["recommendation"] and "at 6 p95_ms" in s["recommendation"]
    assert len(s["slo"]["by_step"]) == 7 and s["slo"]["by_step"][-1]["phase"] == "refine"


def test_repeats_are_pooled_over_their_records(tmp_path):
    path = build_run(tmp_path / "r", Model(steps=(1, 2, 4, 8, 1, 2, 4, 8), seed=5))
    s = analyze(load(path), slo.parse("p95_ms<=500"))
    assert [x["repeat"] for x in s["steps"]] == [1, 1, 1, 1, 2, 2, 2, 2]
    lv = {x["concurrency"]: x for x in s["levels"]}
    four, steps = lv[4], {x["step"]: x for x in s["steps"]}
    assert four["steps"] == [3, 7] and four["repeats"] == 2 and four["step"] is None
    assert four["requests"] == steps[3]["requests"] + steps[7]["requests"]
    recs = [
        r
        for r in read_jsonl(path / "requests.jsonl")
        if r["step"] in (3, 7) and r["settled"] and r["final"] and r["ok"]
    ]
    assert four["latency_ms"]["p95"] == pytest.approx(np.percentile([r["wait_ms"] for r in recs], 95))
    ok_in = steps[3]["window"]["ok_completions"] + steps[7]["window"]["ok_completions"]
    dur = steps[3]["window"]["duration_s"] + steps[7]["window"]["duration_s"]
    assert four["throughput_rps"] == pytest.approx(ok_in / dur)
    lo, hi = four["latency_ms"]["p95_ci"]
    assert lo <= four["latency_ms"]["p95"] <= hi
    sp = four["spread"]
    assert sp["p95_ms"] == [
        min(steps[3]["latency_ms"]["p95"], steps[7]["latency_ms"]["p95"]),
        max(steps[3]["latency_ms"]["p95"], steps[7]["latency_ms"]["p95"]),
    ]
    assert [r["step"] for r in sp["by_repeat"]] == [3, 7]
    assert four["server"]["gpu_util_mean"] is not None and four["server"]["gpu_mem_peak_bytes"] > 0
    assert s["slo"]["max_concurrency"] == 4 and s["knee"]["concurrency"] == 8


def test_run_json_slo_is_used_and_the_flag_overrides_it(grid):
    s = analyze(load(grid))
    assert s["slo"]["spec"] == SPEC and s["slo"]["max_concurrency"] == 4 == s["recommended_concurrency"]
    s = analyze(load(grid), slo.parse("p95_ms<=100"))
    assert s["slo"]["max_concurrency"] is None and s["recommended_concurrency"] is None
    assert s["recommendation"].startswith("No tested concurrency meets the SLO p95_ms<=100: at the lowest, 1,")
    assert s["knee"]["concurrency"] == 8  # the knee is still reported


def test_every_step_carries_intervals(grid):
    for st in analyze(load(grid))["steps"]:
        lat = st["latency_ms"]
        for q in ("p50", "p95"):
            assert lat[f"{q}_ci"][0] <= lat[q] <= lat[f"{q}_ci"][1]


def test_require_holds_fails_and_untested(grid):
    ok = _run(grid, "--require", 4)
    assert ok.returncode == 0, ok.stderr
    claim = ok.stdout.strip().splitlines()[-2]
    assert claim.startswith("4 concurrent: p95 ") and "<= 500 ms, errors 0.0% <= 1%; GPU memory peak" in claim
    assert "GPU util" in claim and "requests at" in claim
    bad = _run(grid, "--require", 8)
    assert bad.returncode == 1
    assert "does not hold at 8: p95_ms" in bad.stderr and "> 500" in bad.stderr
    untested = _run(grid, "--require", 3)
    assert untested.returncode == 1 and "did not test 3 (tested: 1, 2, 4, 8, 16)" in untested.stderr
    summary = json.loads((grid / "summary.json").read_text())
    assert summary["require"]["concurrency"] == 3 and summary["require"]["holds"] is False


def test_require_inconclusive_counts_as_not_holding(grid):
    at4 = next(x for x in analyze(load(grid))["levels"] if x["concurrency"] == 4)
    lo, hi = at4["latency_ms"]["p95_ci"]
    r = _run(grid, "--slo", f"p95_ms<={(lo + hi) / 2:.3f}", "--require", 4)
    assert r.returncode == 1
    assert "is not shown to hold at 4" in r.stderr and "inconclusive counts as not holding" in r.stderr
    assert "more requests would settle it" in r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--slo", "p95<=3"], "unknown metric"),
        (["--slo", "p95_ms=3", "--require", "4"], "malformed"),
        (["--require", "0"], "whole number"),
        (["--tolerance", "-0.1", "--baseline", "."], "--tolerance"),
    ],
)
def test_bad_input_exits_2(grid, args, words):
    r = _run(grid, *args)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_require_without_any_slo_exits_2(tmp_path):
    r = _run(build_run(tmp_path / "r", Model(steps=(1, 2))), "--require", 1)
    assert r.returncode == 2 and "--require needs an SLO" in r.stderr


def test_require_needs_every_lower_concurrency():
    levels = [
        {"concurrency": c, "requests": 10, "throughput_rps": 1.0, "latency_ms": {"p95": p}}
        for c, p in ((1, 100.0), (2, 900.0), (4, 100.0))
    ]
    spec = slo.parse("p95_ms<=500")
    verdicts = [dict(slo.judge(spec, lv), steps=[lv["concurrency"]]) for lv in levels]
    summary = {
        "levels": levels,
        "slo": {"spec": spec.spec, "steps": verdicts, "max_concurrency": slo.max_level(verdicts)},
    }
    r = gate.require(summary, 4)
    assert r["exit"] == 1 and "met at 4 but not at 2 below it (p95_ms 900 > 500)" in r["reason"]
    assert gate.require(summary, 1)["exit"] == 0


def test_claim_numbers_compare_as_the_true_values_do():
    t = slo.parse("p95_ms<=400").terms[0]
    v = {"values": {"p95_ms": 400.4}}
    assert gate.term_text(t, {}, v) == "p95 400.4 ms > 400 ms"
    assert gate.term_text(t, {}, {"values": {"p95_ms": 399.6}}) == "p95 399.6 ms <= 400 ms"
    t = slo.parse("p95_ms<=1200").terms[0]
    assert gate.term_text(t, {}, {"values": {"p95_ms": 1140.0}}) == "p95 1.14 s <= 1.2 s"
    t = slo.parse("error_rate<=1%").terms[0]
    assert gate.term_text(t, {}, {"values": {"error_rate": 0.0}}) == "errors 0.0% <= 1%"
    assert gate.term_text(t, {}, {"values": {"error_rate": None}}) == "errors not measured (needed <= 1%)"
