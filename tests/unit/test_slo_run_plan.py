"""The step plan on step dicts alone: grid order and repeats, stopping past the knee (with and
without an SLO), bisection to adjacent integers; the reader's cut-off; the live table's
percentiles and the per-user record tracking the shape waits on."""

from __future__ import annotations

import json

import pytest

from tts_knee import runformat
from tts_knee.analysis import slo as slo_mod
from tts_knee.locustfiles.plan import RateAxis, StepPlan, StepReader, VoiceAxis


def stats(c, p95, requests=50, fail_rate=0.0):
    lat = {
        "count": requests,
        "mean": p95 * 0.8,
        "p50": p95 * 0.8,
        "p90": p95 * 0.95,
        "p95": p95,
        "p99": p95,
        "max": p95,
    }
    return {
        "step": None,
        "concurrency": c,
        "requests": requests,
        "ok": requests,
        "error_rate": fail_rate,
        "attempt_failure_rate": fail_rate,
        "latency_ms": lat,
        "e2e_ms": lat,
        "throughput_rps": 1.0,
    }


def drive(plan, latency, fail_rate=lambda c: 0.0):
    """Run the plan to its end against ``latency(c)`` (p95 ms); returns the steps run."""
    run = []
    while (nxt := plan.next()) is not None:
        assert len(run) < 100
        step = {"step": len(run) + 1, "concurrency": nxt.level, "phase": nxt.phase, "repeat": nxt.repeat}
        run.append(step)
        st = stats(nxt.level, latency(nxt.level), fail_rate=fail_rate(nxt.level))
        st["step"] = step["step"]
        plan.finish(step, st)
    return run


def five_slots(c):  # 250 ms a request, 5 at a time: past 5 one request in six waits a turn
    return 260.0 if c <= 5 else 480.0 * c / 6


def test_grid_in_order_then_repeated():
    run = drive(StepPlan((1, 2, 4), repeat=2), five_slots)
    assert [(s["concurrency"], s["phase"], s["repeat"]) for s in run] == [
        (1, "grid", 1),
        (2, "grid", 1),
        (4, "grid", 1),
        (1, "grid", 2),
        (2, "grid", 2),
        (4, "grid", 2),
    ]


def test_refine_bisects_to_adjacent_integers():
    plan = StepPlan((1, 2, 4, 8, 16), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    run = drive(plan, five_slots)
    assert [s["concurrency"] for s in run] == [1, 2, 4, 8, 16, 6, 5]
    assert [s["phase"] for s in run[5:]] == ["refine", "refine"]
    d = plan.describe()
    assert d["max_concurrency"] == 5
    assert [x["action"] for x in d["decisions"]] == ["refine", "refine", "done"]
    assert d["decisions"][0] == {
        "after_step": 5,
        "action": "refine",
        "concurrency": 6,
        "why": "4 meets the SLO and 8 fails: bisecting at 6",
    }
    assert d["decisions"][-1]["answer"] == 5 and d["decisions"][-1]["after_step"] == 7
    assert [v["pass"] for v in d["verdicts"]] == [True, True, True, False, False, False, True]


def test_refine_upwards_and_below_the_lowest_step():
    plan = StepPlan((4, 16), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    assert [s["concurrency"] for s in drive(plan, lambda c: 100.0 * c / 3)] == [4, 16, 10, 13, 11, 12]
    assert plan.describe()["max_concurrency"] == 12
    plan = StepPlan((4, 8), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    assert [s["concurrency"] for s in drive(plan, lambda c: 150.0 * c)] == [4, 8, 2, 3]
    assert plan.decisions[0]["why"] == "nothing tested meets the SLO and 4 fails: bisecting at 2"
    assert plan.describe()["max_concurrency"] == 2
    plan = StepPlan((1, 2), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    assert [s["concurrency"] for s in drive(plan, lambda c: 900.0)] == [1, 2]
    assert plan.decisions[-1]["answer"] is None and "none meets" in plan.decisions[-1]["why"]
    plan = StepPlan((1, 2), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    assert [s["concurrency"] for s in drive(plan, lambda c: 100.0)] == [1, 2]
    assert plan.decisions[-1]["answer"] == 2 and "nothing to refine" in plan.decisions[-1]["why"]


def test_inconclusive_counts_as_failing_for_the_bisection():
    plan = StepPlan((2, 4), slo=slo_mod.parse("p95_ms<=400"), refine=True)
    run = []
    while (nxt := plan.next()) is not None:
        step = {"step": len(run) + 1, "concurrency": nxt.level, "phase": nxt.phase, "repeat": nxt.repeat}
        run.append(nxt.level)
        st = stats(nxt.level, 300.0 if nxt.level < 3 else 390.0)
        if nxt.level >= 3:
            st["latency_ms"]["p95_ci"] = [350.0, 450.0]
        plan.finish(step, st)
    assert run == [2, 4, 3]
    assert plan.levels() == {2: True, 4: None, 3: None}
    assert "4 is inconclusive, which counts as failing" in plan.decisions[0]["why"]
    assert plan.describe()["max_concurrency"] == 2
    assert plan.verdict_of(3)["inconclusive"][0].startswith("p95_ms 390") and plan.verdict_of(9) is None


def test_stop_past_knee_with_an_slo_needs_a_confirming_step():
    plan = StepPlan((1, 2, 4, 8, 16, 32, 64), slo=slo_mod.parse("p95_ms<=400"), stop_past_knee=True)
    run = drive(plan, five_slots)
    assert [s["concurrency"] for s in run] == [1, 2, 4, 8, 16]
    assert plan.decisions == [
        {
            "after_step": 5,
            "action": "stop",
            "skipped": [32, 64],
            "why": "step 5 (concurrency 16) fails the SLO, confirming the step before it: "
            "the rest of the grid (32, 64) is skipped",
        }
    ]
    # a single failing step among passing ones does not stop the sweep
    plan = StepPlan((1, 2, 4, 8), slo=slo_mod.parse("p95_ms<=400"), stop_past_knee=True)
    assert len(drive(plan, lambda c: 900.0 if c == 2 else 100.0)) == 4 and not plan.decisions


def test_an_inconclusive_step_neither_stops_nor_confirms():
    # 4 fails, 8 is inconclusive (its interval straddles the threshold), 16 fails: 16 confirms 4
    plan = StepPlan((1, 2, 4, 8, 16, 32, 64), slo=slo_mod.parse("p95_ms<=400"), stop_past_knee=True)
    run = []
    while (nxt := plan.next()) is not None:
        step = {"step": len(run) + 1, "concurrency": nxt.level, "phase": nxt.phase, "repeat": nxt.repeat}
        run.append(nxt.level)
        st = stats(nxt.level, 300.0 if nxt.level < 4 else 390.0 if nxt.level == 8 else 900.0)
        if nxt.level == 8:
            st["latency_ms"]["p95_ci"] = [350.0, 450.0]
        plan.finish(step, st)
    assert run == [1, 2, 4, 8, 16]
    assert plan.decisions[0]["skipped"] == [32, 64]
    assert "step 5 (concurrency 16) fails the SLO, confirming step 3 (concurrency 4)" in plan.decisions[0]["why"]
    assert plan.levels()[8] is None


def test_stop_past_knee_by_the_knee_rule_then_the_next_pass_and_refine():
    four_slots = lambda c: 100.0 * max(1, c / 4)  # noqa: E731
    plan = StepPlan((1, 2, 4, 8, 16, 32, 64), repeat=2, stop_past_knee=True)
    run = drive(plan, four_slots)
    assert [s["concurrency"] for s in run] == [1, 2, 4, 8, 16] * 2
    assert [d["after_step"] for d in plan.decisions] == [5, 10]
    assert "latency 4.0x the lowest step's" in plan.decisions[0]["why"]
    assert "pass 2 of 2 follows" in plan.decisions[0]["why"]
    # failures alone cross the knee rule too
    plan = StepPlan((1, 2, 4, 8), stop_past_knee=True)
    assert len(drive(plan, lambda c: 100.0, lambda c: 0.5 if c >= 2 else 0.0)) == 3
    assert "50% of attempts fail" in plan.decisions[0]["why"]
    # with --refine, refinement follows the stop
    plan = StepPlan((4, 8, 16, 32, 64), slo=slo_mod.parse("p95_ms<=250"), refine=True, stop_past_knee=True)
    run = drive(plan, four_slots)
    assert [s["concurrency"] for s in run] == [4, 8, 16, 32, 12, 10, 11]
    assert [d["action"] for d in plan.decisions] == ["stop", "refine", "refine", "refine", "done"]
    assert plan.describe()["max_concurrency"] == 10


def test_refine_needs_an_slo():
    with pytest.raises(ValueError):
        StepPlan((1, 2), refine=True)
    assert not StepPlan((1, 2)).judging and StepPlan((1, 2), stop_past_knee=True).judging


def _rec(step, t0, wait_ms, ok=True, settled=True):
    return runformat.attempt(
        req_id=f"r{t0}",
        attempt=1,
        final=True,
        step=step,
        concurrency=2,
        worker="local",
        user=1,
        t0=t0,
        t1=t0,
        t2=t0 + wait_ms / 1000,
        wait_ms=wait_ms,
        ok=ok,
        status=200 if ok else 503,
        settled=settled,
    )


def test_reader_judges_what_was_sent_before_the_cutoff(tmp_path):
    recs = [_rec(1, 100.0 + i * 0.1, 200.0) for i in range(20)] + [_rec(1, 102.05, 5000.0)]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    reader = StepReader(tmp_path)
    st = reader.stats({"step": 1, "concurrency": 2, "start": 100.0}, cutoff=102.0, settle_s=0.0)
    assert st["requests"] == 20 and st["latency_ms"]["max"] == pytest.approx(200.0)
    with open(tmp_path / "requests.jsonl", "a") as f:
        f.write(json.dumps(_rec(1, 101.95, 900.0)) + "\n")
    st = reader.stats({"step": 1, "concurrency": 2, "start": 100.0}, cutoff=102.0, settle_s=0.5)
    assert st["requests"] == 21 and st["latency_ms"]["max"] == pytest.approx(900.0)
    assert st["window"]["start"] == 100.5 and st["window"]["end"] == 102.0
    assert reader.rundir.requests.lines == 22  # each call parsed only what was new


def test_the_writer_keeps_each_steps_slowest_wait_and_when_each_user_was_last_done(tmp_path):
    gevent = pytest.importorskip("gevent")
    from tts_knee.locustfiles.shipping import RecordWriter

    w = RecordWriter(tmp_path / "requests.jsonl")
    try:
        waits = [100.0, 200.0, 300.0, 400.0]
        w.add([_rec(1, 10.0 + i, x) for i, x in enumerate(waits)])
        w.add([dict(_rec(1, 20.0, 50.0), user=2, t2=None, wait_ms=None, ok=False)])
        assert w.max_wait_s(1) == pytest.approx(0.4) and w.max_wait_s(2) is None
        assert w.users_done_since(13.2) == 2 and w.users_done_since(13.5) == 1 and w.users_done_since(21) == 0
        assert w.finished[1] == w.finished_settled[1] == 5
    finally:
        w.close()
    gevent.sleep(0)


def test_a_repeated_concurrency_is_judged_on_its_pooled_steps(tmp_path):
    recs = (
        [_rec(1, 100.0 + i * 0.1, 200.0) for i in range(20)]
        + [_rec(2, 103.0 + i * 0.1, 600.0) for i in range(2)]
        + [_rec(2, 105.0, 9000.0)]
    )
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    reader = StepReader(tmp_path)
    one = reader.stats({"step": 1, "concurrency": 2, "start": 100.0}, cutoff=102.5, settle_s=0.0)
    assert not reader.repeated()
    two = reader.stats({"step": 2, "concurrency": 2, "start": 103.0}, cutoff=104.0, settle_s=0.0)
    assert reader.repeated() and two["requests"] == 2
    (level,) = reader.levels(0.0)
    assert level["repeats"] == 2 and level["steps"] == [1, 2] and level["requests"] == 22  # not the one at 105
    plan = StepPlan((2,), repeat=2, slo=slo_mod.parse("p50_ms<=400"), refine=True)
    for n, st in ((1, one), (2, two)):
        nxt = plan.next()
        plan.finish(
            {"step": n, "concurrency": nxt.level, "phase": "grid", "repeat": nxt.repeat},
            st,
            levels=reader.levels(0.0) if reader.repeated() and n == 2 else None,
        )
    # step 2 alone: 2 requests cannot bound a median (that takes 6), so it is inconclusive on its
    # own; its level, the 22 requests of both steps pooled, passes
    assert [v["pass"] for v in plan.verdicts] == [True, None]
    assert plan.levels() == {2: True} and plan.max_level() == 2
    assert plan.describe()["levels"][0]["steps"] == [1, 2]


def test_public_names():
    from tts_knee.locustfiles import plan

    assert sorted(plan.__all__) == [
        "Axis",
        "CONCURRENCY",
        "Planned",
        "RateAxis",
        "SpeedAxis",
        "StepPlan",
        "StepReader",
        "VoiceAxis",
    ]


def test_stop_past_knee_in_a_streamed_run_follows_playback_not_whole_body_time():
    # 5x real time shared: whole-body time doubles with each doubling, yet streams stay ahead
    # of playback up to 4; at 8 and 16 most of them stall
    def streamed_step(c):
        st = stats(c, 1000.0 * c)
        st.update({"ttfa_ms": {"p50": 100.0 + 40 * c, "p95": 120.0 + 40 * c}, "underrun_rate": 0.0 if c <= 4 else 0.6})
        return st

    for plan, expect, why in (
        (
            StepPlan((1, 2, 4, 8, 16, 32), stop_past_knee=True, streamed=True),
            [1, 2, 4, 8, 16],
            "60% of streams underrun",
        ),
        (StepPlan((1, 2, 4, 8, 16, 32), stop_past_knee=True), [1, 2, 4], "latency 4.0x"),
    ):
        run = []
        while (nxt := plan.next()) is not None:
            step = {"step": len(run) + 1, "concurrency": nxt.level, "phase": nxt.phase, "repeat": nxt.repeat}
            run.append(step)
            st = streamed_step(nxt.level)
            st["step"] = step["step"]
            plan.finish(step, st)
        assert [s["concurrency"] for s in run] == expect
        assert why in plan.decisions[0]["why"]


def test_a_streamed_step_is_judged_on_every_stream_it_sent_before_its_cutoff(tmp_path):
    def stream(step, t0, wait_ms, ttfa_ms):
        return dict(
            _rec(step, t0, wait_ms),
            ttfa_ms=ttfa_ms,
            chunks=2,
            gap_max_ms=10.0,
            underruns=0,
            underrun_ms=0.0,
            chunk_at_ms=[ttfa_ms, ttfa_ms + 10.0],
            chunk_audio_ms=[200.0, 200.0],
        )

    # each step: 10 streams that end before its cut-off, and one sent before it that ends after
    # (the load stays at the step's level until it has: the shape waits for it)
    recs = (
        [stream(1, 100.0 + i * 0.1, 300.0, 100.0) for i in range(10)]
        + [stream(1, 102.0, 5000.0, 3000.0)]
        + [stream(2, 110.0 + i * 0.1, 300.0, 100.0) for i in range(10)]
        + [stream(2, 112.0, 5000.0, 3000.0)]
        + [stream(2, 113.0, 300.0, 100.0)]
    )  # sent past the cut-off: not judged
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    reader = StepReader(tmp_path)
    one = reader.stats({"step": 1, "concurrency": 2, "start": 100.0}, cutoff=102.5, settle_s=0.0)
    two = reader.stats({"step": 2, "concurrency": 2, "start": 110.0}, cutoff=112.5, settle_s=0.0)
    for st in (one, two):
        assert st["ttfa_ms"]["count"] == 11 and st["ttfa_ms"]["max"] == 3000.0 and st["latency_ms"]["max"] == 5000.0
    (level,) = reader.levels(0.0)
    assert level["ttfa_ms"]["count"] == 22 and level["ttfa_ms"]["max"] == 3000.0


# ---- a rate axis (open loop) ---------------------------------------------------------------


def rate_stats(rate, p95, growing=False, requests=100):
    lat = {
        "count": requests,
        "mean": p95 * 0.8,
        "p50": p95 * 0.8,
        "p90": p95 * 0.95,
        "p95": p95,
        "p99": p95,
        "max": p95,
    }
    served = min(rate, 16.0)
    return {
        "step": None,
        "concurrency": 0,
        "rate": rate,
        "requests": requests,
        "ok": requests,
        "failed": 0,
        "error_rate": 0.0,
        "attempt_failure_rate": 0.0,
        "latency_ms": dict(lat, p95=200.0),
        "sched_wait_ms": lat,
        "throughput_rps": served,
        "dropped": 0,
        "growth": {
            "p50_thirds": [250.0, 600.0, 1200.0] if growing else [250.0, 250.0, 250.0],
            "growing": growing,
            "slope_ms_per_s": None,
        },
    }


def sixteen_per_second(rate):
    """4 slots of 250 ms: below 16 req/s no queue; above it the queue grows through the step."""
    return rate_stats(rate, 260.0) if rate < 16 else rate_stats(rate, 300.0 + 50 * rate, growing=True)


def drive_rates(plan, stats_of):
    run = []
    while (nxt := plan.next()) is not None:
        assert len(run) < 100
        step = {"step": len(run) + 1, "concurrency": 0, "rate": nxt.level, "phase": nxt.phase, "repeat": nxt.repeat}
        run.append(step)
        plan.finish(step, dict(stats_of(nxt.level), step=step["step"]))
    return run


def test_rates_are_judged_on_latency_from_the_schedule_and_refined_to_five_percent():
    # p95 from schedule is what the SLO reads (the wait p95 is 200 ms at every rate, which would pass)
    plan = StepPlan((4, 8, 12, 16, 24), slo=slo_mod.parse("p95_ms<=400"), refine=True, axis=RateAxis(lowest=4))
    run = drive_rates(plan, sixteen_per_second)
    assert [s["rate"] for s in run] == [4, 8, 12, 16, 24, 14, 15, 15.5]
    d = plan.describe()
    assert d["max_rate"] == 15.5 and "max_concurrency" not in d
    assert [v["pass"] for v in d["verdicts"]] == [True, True, True, False, False, True, True, True]
    assert d["verdicts"][3]["failed"] == [
        "p95_ms 1100 > 400",
        "latency from schedule kept growing (median 250 -> 600 -> 1200 ms over the step's thirds)",
    ]
    assert d["decisions"][0] == {
        "after_step": 5,
        "action": "refine",
        "rate": 14.0,
        "why": "12 req/s meets the SLO and 16 req/s fails: bisecting at 14 req/s",
    }
    assert d["decisions"][-1]["answer"] == 15.5 and (16 - 15.5) <= 0.05 * 15.5
    assert [lv["rate"] for lv in d["levels"]] == [4, 8, 12, 14, 15, 15.5, 16, 24]
    # an absolute resolution, and a growing queue fails a rate whatever its p95
    plan = StepPlan(
        (4, 8, 12, 16, 24), slo=slo_mod.parse("p99_ms<=5000"), refine=True, axis=RateAxis(2.0, relative=False)
    )
    assert [s["rate"] for s in drive_rates(plan, sixteen_per_second)] == [4, 8, 12, 16, 24, 14]
    assert plan.describe()["max_rate"] == 14


def test_stop_past_knee_and_repeat_on_rates():
    plan = StepPlan((4, 8, 16, 24, 32, 48), repeat=2, stop_past_knee=True, axis=RateAxis())
    run = drive_rates(plan, sixteen_per_second)
    assert [s["rate"] for s in run] == [4, 8, 16, 24] * 2
    assert plan.decisions[0]["why"] == (
        "step 4 (24 req/s) is past the knee (it served 16.00 of 24 req/s offered), "
        "confirming the step before it: the rest of the grid (32 req/s, 48 req/s) is "
        "skipped; pass 2 of 2 follows"
    )


def test_reader_gives_a_rate_step_its_open_loop_figures(tmp_path):
    recs = [
        dict(
            _rec(1, 100.0 + i * 0.1, 200.0 + 10 * (i % 5)),
            concurrency=1,
            scheduled=100.0 + i * 0.1,
            sched_wait_ms=200.0 + 10 * (i % 5),
        )
        for i in range(30)
    ]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    reader = StepReader(tmp_path, RateAxis())
    st = reader.stats(
        {"step": 1, "concurrency": 0, "start": 100.0, "rate": 10.0, "dropped": 3}, cutoff=103.5, settle_s=0.0
    )
    assert st["rate"] == 10.0 and st["dropped"] == 3 and st["offered"] == 33
    assert st["sched_wait_ms"]["p95_ci"][0] is not None and st["growth"]["growing"] is False
    v = RateAxis().judge(slo_mod.parse("p50_ms<=300"), st)
    assert v["pass"] is True and v["rate"] == 10.0


def test_a_voice_sweep_is_refined_to_adjacent_numbers_of_voices_and_stopped_by_its_own_knee():
    def eight_cached(n):  # a cache of 8 voices: past 8, every request recomputes its voice
        return 260.0 if n <= 8 else 600.0

    def drive_voices(plan):
        run = []
        while (nxt := plan.next()) is not None:
            assert len(run) < 100
            step = {
                "step": len(run) + 1,
                "concurrency": 4,
                "voices": nxt.level,
                "phase": nxt.phase,
                "repeat": nxt.repeat,
            }
            run.append(step)
            st = dict(stats(4, eight_cached(nxt.level)), step=step["step"], voices=nxt.level)
            plan.finish(step, st)
        return run

    plan = StepPlan((1, 4, 16, 32), slo=slo_mod.parse("p95_ms<=400"), refine=True, axis=VoiceAxis())
    assert [s["voices"] for s in drive_voices(plan)] == [1, 4, 16, 32, 10, 7, 8, 9]
    d = plan.describe()
    assert d["max_voices"] == 8 and "max_concurrency" not in d
    assert d["decisions"][0] == {
        "after_step": 4,
        "action": "refine",
        "voices": 10,
        "why": "4 voices meets the SLO and 16 voices fails: bisecting at 10 voices",
    }
    assert d["decisions"][-1]["why"] == (
        "8 voices meets the SLO and 9 voices fails: the highest number of voices that meets it is 8 voices"
    )
    assert [v["voices"] for v in d["levels"]] == [1, 4, 7, 8, 9, 10, 16, 32]
    # without an SLO the knee rule over the number of voices stops the grid, the load being the
    # same at every step (throughput per user says nothing of it)
    plan = StepPlan((1, 4, 8, 16, 32, 64), stop_past_knee=True, axis=VoiceAxis())
    assert [s["voices"] for s in drive_voices(plan)] == [1, 4, 8, 16, 32]
    assert plan.decisions[0]["skipped"] == [64]
    assert "step 5 (32 voices) is past the knee (latency 2.3x the lowest step's)" in plan.decisions[0]["why"]
