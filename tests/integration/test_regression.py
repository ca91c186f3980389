"""--baseline: the same synthetic server twice is no regression, 40% slower is one."""

from __future__ import annotations

import json

import pytest

from procs import dashboard
from rundirs import Model, build_run
from tts_knee.analysis.regression import compare
from tts_knee.analysis.summary import analyze, load

STEPS = (1, 2, 4, 8)


def _run(*args):
    return dashboard(*args, "--no-report")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("reg")
    return {
        "old": build_run(d / "old", Model(steps=STEPS, seed=1)),
        "same": build_run(d / "same", Model(steps=STEPS, seed=2)),
        "slow": build_run(d / "slow", Model(steps=STEPS, seed=3, base_ms=280)),  # 40% slower
        "bit_slower": build_run(d / "bit", Model(steps=STEPS, seed=4, base_ms=210, step_s=30)),
        "other": build_run(d / "other", Model(steps=(3, 5), seed=5)),
    }


def test_same_server_twice_is_no_regression(runs):
    r = _run(runs["same"], "--baseline", runs["old"])
    assert r.returncode == 0, r.stderr
    reg = json.loads((runs["same"] / "summary.json").read_text())["regression"]
    assert reg["compared"] == [1, 2, 4, 8] and reg["regressed"] == [] and reg["warnings"] == []
    assert all(not row["regression"] for row in reg["steps"])
    assert "No significant regression beyond the 10% tolerance" in r.stdout


def test_forty_percent_slower_is_a_regression(runs):
    r = _run(runs["slow"], "--baseline", runs["old"])
    assert r.returncode == 1
    reg = json.loads((runs["slow"] / "summary.json").read_text())["regression"]
    assert reg["regressed"] == [1, 2, 4, 8]
    at4 = next(row for row in reg["steps"] if row["concurrency"] == 4)
    assert at4["p95_ms"]["ratio"] == pytest.approx(1.4, rel=0.05)
    assert at4["p95_ms"]["significant"] and at4["p95_ms"]["regression"]
    assert at4["throughput_rps"]["regression"]  # 4 slots, closed loop: throughput falls with latency
    assert not at4["error_rate"]["regression"]
    assert "Regression against old beyond the 10% tolerance at 1: p" in r.stderr and "p95 " in r.stderr
    # the other way round it is an improvement, not a regression
    better = _run(runs["old"], "--baseline", runs["slow"])
    assert better.returncode == 0 and "significantly better at 1, 2, 4, 8" in better.stdout


def test_a_significant_change_within_tolerance_passes(runs):
    new, old = load(runs["bit_slower"]), load(runs["old"])
    reg = compare(new, analyze(new), old, analyze(old), 0.10)
    at4 = next(row for row in reg["steps"] if row["concurrency"] == 4)
    assert at4["p50_ms"]["significant"] and 1.0 < at4["p50_ms"]["ratio"] < 1.1
    assert reg["regressed"] == []
    reg = compare(new, analyze(new), old, analyze(old), 0.01)
    assert 4 in reg["regressed"]
    assert any("step_time" in w for w in reg["warnings"])  # 30 s steps against 12 s ones


def test_no_concurrency_in_common_is_bad_input(runs):
    r = _run(runs["other"], "--baseline", runs["old"])
    assert r.returncode == 2 and "share no tested concurrency" in r.stderr


def test_report_overlays_both_runs(runs, tmp_path):
    r = dashboard(runs["slow"], "--baseline", runs["old"])
    assert r.returncode == 1
    page = (runs["slow"] / "report.html").read_text()
    assert "Against the baseline" in page and "baseline old" in page and "this run slow" in page


def test_a_streamed_run_compares_the_streams_its_figures_count(tmp_path):
    # streams still playing when their step ended are left out of the step's figures; the
    # comparison's old/new percentiles are those same figures
    m = Model(steps=(1, 2, 4), stream_capacity=5.0, continuous=True, slots=None)
    rd_new, rd_old = load(build_run(tmp_path / "new", m)), load(build_run(tmp_path / "old", m))
    new, old = analyze(rd_new), analyze(rd_old)
    assert any(lv["streams"]["cut_by_step_end"] for lv in new["levels"])
    rows = compare(rd_new, new, rd_old, old)["steps"]
    checked = 0
    for lv, ol, row in zip(new["levels"], old["levels"], rows):
        for key, fig in (("latency_ms", "p95_ms"), ("ttfa_ms", "ttfa_p95_ms")):
            if row[fig] is not None:
                assert row[fig]["new"] == pytest.approx(lv[key]["p95"])
                assert row[fig]["old"] == pytest.approx(ol[key]["p95"])
                checked += 1
    assert checked >= 2
