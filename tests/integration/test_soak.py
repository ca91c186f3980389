"""The soak: the trend statistics, the drift verdicts on synthetic soaks with a known truth,
the option, and a real soak against a leaking simulator."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from procs import dashboard, finish, free_port, locust, locust_count, master, read_jsonl, spawn, worker
from rundirs import assert_declared
from tts_knee import runformat
from tts_knee.analysis import trend
from tts_knee.analysis.summary import analyze, load

START = 1_700_000_000.0
MB = 1e6


# ---- the statistics ------------------------------------------------------------------------


def test_theil_sen_finds_the_slope_and_ignores_an_outlier():
    t = np.arange(20, dtype=float)
    y = 3.0 * t + 10
    y[7] = 500.0  # one wild window: a least-squares slope would move, the median slope does not
    slope, lo, hi = trend.theil_sen(t, y)
    assert slope == pytest.approx(3.0)
    assert lo <= 3.0 <= hi
    assert trend.theil_sen(np.zeros(5), np.arange(5.0)) is None  # no two distinct times


def test_mann_kendall_tells_a_trend_from_noise():
    rng = np.random.default_rng(3)
    t = np.arange(30, dtype=float)
    assert trend.mann_kendall(t, t + rng.normal(0, 2, 30)) < 1e-6
    assert trend.mann_kendall(t, rng.normal(0, 2, 30)) > 0.05
    assert trend.mann_kendall(t, np.full(30, 7.0)) is None  # all ties: no variance
    assert trend.mann_kendall(t[:4], t[:4]) is None  # too few points
    # by hand: 45 pairs, 2 of them falling, S = 41; Var(S) = 10 * 9 * 25 / 18 = 125; continuity-corrected z
    y = np.array([1, 2, 3, 5, 4, 6, 8, 7, 9, 10], dtype=float)
    assert trend.mann_kendall(np.arange(10.0), y) == pytest.approx(math.erfc((41 - 1) / math.sqrt(125) / math.sqrt(2)))


def test_a_warm_up_is_left_out_and_a_leak_after_it_found():
    rng = np.random.default_rng(5)
    t = np.arange(40, dtype=float)
    warm_then_flat = 100 + 40 * np.minimum(t, 6) / 6 + rng.normal(0, 0.5, 40)
    k = trend.steady_from(t, warm_then_flat)
    assert k >= 3
    assert trend.mann_kendall(t[k:], warm_then_flat[k:]) > 0.01
    warm_then_leak = warm_then_flat + 2.0 * t
    k = trend.steady_from(t, warm_then_leak)
    assert trend.theil_sen(t[k:], warm_then_leak[k:])[0] == pytest.approx(2.0, rel=0.1)
    assert trend.steady_from(t, 2.0 * t + rng.normal(0, 0.5, 40)) == 0


# ---- drift on synthetic soaks ------------------------------------------------------------------


def _soak_run(
    path: Path,
    minutes: float = 20,
    rate: float = 20.0,
    rss_mb=lambda m: 500.0,
    p95=lambda m: 100.0,
    sweep: tuple = (),
    seed: int = 0,
) -> Path:
    """A run directory holding a soak of ``minutes`` at concurrency 4 (after a sweep of
    ``sweep`` levels, 60 s each), ``rate`` requests a second, latency ``p95(minute)``
    (lognormal), the server's RSS ``rss_mb(minute)`` sampled each second with a little noise."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    steps, recs, samples = [], [], []
    t = START
    for i, conc in enumerate([*sweep, 4], 1):
        soak = i == len(sweep) + 1
        span = minutes * 60 if soak else 60.0
        steps.append(
            runformat.step_entry(
                step=i,
                concurrency=conc,
                start=t,
                end=t + span,
                phase=runformat.SOAK_PHASE if soak else "grid",
                repeat=1,
                settle_s=1.0,
                cutoff=None,
            )
        )
        for k in range(int(span * rate)):
            t0 = t + k / rate
            minute = (t0 - t) / 60.0
            wait = (p95(minute) / 1.6) * rng.lognormal(0, 0.3) * (1 + 0.4 * max(0, conc - 4))
            recs.append(
                runformat.attempt(
                    step=i,
                    concurrency=conc,
                    worker="local",
                    user=k % conc,
                    t0=t0,
                    t1=t0 + wait / 2000,
                    t2=t0 + wait / 1000,
                    ttfb_ms=wait / 2,
                    wait_ms=wait,
                    status=200,
                    ok=True,
                    bytes=1000,
                    audio_s=1.0,
                    settled=t0 >= t + 1.0,
                    req_id=f"r{i}-{k}",
                    attempt=1,
                    final=True,
                    text_id="a",
                    text_len=10,
                    tier="short",
                )
            )
        for s in range(int(span)):
            minute = s / 60.0
            samples.append(
                runformat.resource_sample(
                    ts=t + s,
                    host="tts",
                    role="server",
                    cpu_percent=30.0,
                    cpu_max_core_percent=50.0,
                    mem_used_bytes=8e9,
                    mem_total_bytes=64e9,
                    gpus=[],
                    proc=runformat.proc_reading(
                        pid=1, cpu_percent=80.0, rss_bytes=(rss_mb(minute) + rng.normal(0, 0.3)) * MB
                    ),
                )
            )
        t += span
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (path / "resources.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    runformat.write_json(
        path / "run.json",
        runformat.run_info(
            format_version=2,
            run_id=path.name,
            start=START,
            end=t,
            target="http://x",
            mode="closed",
            options={"soak": minutes * 60},
            settle_s=1.0,
            steps=steps,
            workers=[],
            collectors=[],
            versions=runformat.versions(),
        ),
    )
    assert_declared(path)
    return path


def _summary(path: Path) -> dict:
    return analyze(load(path))


def test_a_leak_is_named_with_its_rate(tmp_path):
    s = _summary(_soak_run(tmp_path / "run", rss_mb=lambda m: 500 + 5.0 * m))
    soak = s["soak"]
    assert soak["window_s"] == 60 and len(soak["windows"]) == 20
    (line,) = soak["drift"]
    m = re.fullmatch(r"server RSS grew (\d+) MB over 20 min, ([\d.]+) MB/min, steady after 0 min: a leak", line)
    assert m, line
    assert float(m.group(2)) == pytest.approx(5.0, rel=0.05)
    assert float(m.group(1)) == pytest.approx(5.0 * 19, rel=0.1)  # first to last window's middle


def test_a_clean_server_and_a_warm_up_get_no_drift(tmp_path):
    assert _summary(_soak_run(tmp_path / "clean"))["soak"]["drift"] == []
    warm = _summary(_soak_run(tmp_path / "warm", rss_mb=lambda m: 500 + 60 * min(m, 3) / 3))["soak"]
    assert warm["drift"] == []
    rss = next(t for t in warm["trends"] if t["figure"] == "server_rss_bytes")
    assert rss["steady_after_s"] >= 120 and rss["last"] - rss["first"] > 50 * MB


def test_latency_creeping_up_is_a_drift(tmp_path):
    s = _summary(_soak_run(tmp_path / "run", p95=lambda m: 100 + 4 * m, seed=1))
    lines = s["soak"]["drift"]
    assert any(line.startswith("p95 latency rose from") and "requests slow down" in line for line in lines), lines
    p95 = next(t for t in s["soak"]["trends"] if t["figure"] == "p95_ms")
    assert p95["slope_per_min"] == pytest.approx(4.0, rel=0.25)


def test_the_sweep_is_judged_without_the_soak(tmp_path):
    """The soak's long step at 4 is not pooled into the sweep's level 4: the knee, the levels
    and the recommendation are the sweep's; the step table still lists the soak, marked."""
    s = _summary(_soak_run(tmp_path / "run", minutes=5, sweep=(1, 2, 4, 8)))
    assert [lv["steps"] for lv in s["levels"]] == [[1], [2], [3], [4]]
    assert s["recommended_concurrency"] == 4 and s["soak"]["step"] == 5
    done = dashboard(tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^ *5 soak +4 ", done.stdout, re.M), done.stdout
    assert "soak: step 5 held concurrency 4 for 5.0 min (12 windows of 25 s): no drift" in done.stdout


def test_a_live_view_of_a_growing_soak_gives_the_fresh_figures(tmp_path):
    """The live reader keeps each window's figures and recomputes the windows new rows fall
    in: at each point of a soak growing in pieces (its step still open), the summary is the
    one a fresh read of the same files gives."""
    from tts_knee.runformat.reader import RunDir

    whole = _soak_run(tmp_path / "whole", minutes=6, rss_mb=lambda m: 500 + 5.0 * m, p95=lambda m: 100 + 3 * m)
    lines = (whole / "requests.jsonl").read_bytes().splitlines(keepends=True)
    run = json.loads((whole / "run.json").read_text())
    run["steps"][-1]["end"], run["end"] = None, None  # still running
    live_dir, fresh_dir = tmp_path / "live", tmp_path / "fresh"
    for d in (live_dir, fresh_dir):
        d.mkdir()
        (d / "run.json").write_text(json.dumps(run))
        (d / "resources.jsonl").write_bytes((whole / "resources.jsonl").read_bytes())
    live = RunDir(live_dir, live=True)
    done = 0
    for cut in (len(lines) // 3, len(lines) // 3 + 5, 2 * len(lines) // 3, len(lines)):
        for d in (live_dir, fresh_dir):
            with open(d / "requests.jsonl", "ab") as f:
                f.write(b"".join(lines[done:cut]))
        done = cut
        live.refresh()
        got, want = (json.loads(json.dumps(analyze(rd)["soak"])) for rd in (live, load(fresh_dir)))
        assert got == want and got["windows"], cut


# ---- the option ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, says",
    [
        ("abc", "--soak must be a duration like 300s, 20m or 1h, got 'abc'"),
        ("10s", "--soak needs at least 60 s (1m) of windows to tell a trend from noise, got '10s'"),
    ],
)
def test_a_bad_soak_is_one_sentence(tmp_path, value, says):
    done = locust(
        ["--headless", "-H", "http://127.0.0.1:9", "--soak", value, "--run-dir", str(tmp_path / "run")], timeout=60
    )
    assert done.returncode == 2 and says in done.stdout and "Traceback" not in done.stdout, done.stdout


# ---- a real soak ------------------------------------------------------------------------------

LEAK_MB_PER_MIN = 40.0


@pytest.mark.slow
def test_a_soak_after_the_sweep_names_the_simulators_leak(tmp_path):
    """A sweep, then a minute at the level it recommends against a simulator leaking
    LEAK_MB_PER_MIN, its RSS read by a real collector: the summary, the report and the terminal
    name the leak, at a rate within 20% of the truth; nothing recorded is lost."""
    run_dir = tmp_path / "run"
    sim_args = [
        "tts_knee.testbed.sim",
        "--port",
        "0",
        "--slots",
        "4",
        "--base-ms",
        "40",
        "--per-char-ms",
        "0",
        "--leak-mb-per-min",
        str(LEAK_MB_PER_MIN),
    ]
    with (
        spawn(sim_args) as sim,
        spawn(["tts_knee.collectors", "--port", "0", "--interval", "1", "--pid", str(sim.pid)]) as col,
    ):
        done = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--steps",
                "1,2,4,8",
                "--step-time",
                "4",
                "--soak",
                "1m",
                "--collector",
                col.url,
                "--run-dir",
                str(run_dir),
                "--json-file",
                str(tmp_path / "locust"),
            ],
            timeout=240,
        )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "soak: the sweep recommends 4" in done.stdout and "soak: holding 4 users for 1 min" in done.stdout
    assert len(read_jsonl(run_dir / "requests.jsonl")) == locust_count(tmp_path / "locust")
    report = dashboard(run_dir)
    assert report.returncode == 0, report.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    soak = s["soak"]
    assert soak["concurrency"] == 4 == s["recommended_concurrency"]
    rss = next(t for t in soak["trends"] if t["figure"] == "server_rss_bytes")
    assert rss["drift"] and rss["slope_per_min"] / MB == pytest.approx(LEAK_MB_PER_MIN, rel=0.2), rss
    assert [line for line in soak["drift"] if line.startswith("server RSS grew")] == [rss["verdict"]]
    assert f"  - {rss['verdict']}" in report.stdout
    assert "Soak: drift over time" in (run_dir / "report.html").read_text()
    client = [t for t in soak["trends"] if t["figure"] == "client_rss_bytes"]
    assert client and not any(t["drift"] for t in client), client


@pytest.mark.slow
def test_an_open_loop_soak_alone_offers_its_rate_for_its_whole_length_across_workers(tmp_path):
    """``--rates 10 --soak 1m`` on a master with two workers: the soak is the run (no sweep), each
    worker lays its share of the arrivals over the soak's minute (not --step-time's 30 s), and
    nothing is lost."""
    port = free_port()
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--slots", "8", "--base-ms", "50", "--per-char-ms", "0"]) as sim:
        m = master(
            tmp_path,
            sim.url,
            port,
            workers=2,
            steps="",
            step_time="30",
            extra=["--rates", "10", "--soak", "1m", "--arrival", "constant"],
        )
        workers = [worker(tmp_path, port, n) for n in (1, 2)]
        finish(m, *workers, timeout=150, run_dir=tmp_path / "run")
    out = (tmp_path / "master.log").read_text()
    assert m.returncode == 0, out[-3000:]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (step,) = run["steps"]
    assert step["phase"] == "soak" and step["rate"] == 10 and step["workers"] == 2
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust")
    late = max(r["scheduled"] for r in records) - step["start"]
    assert 55 <= late <= 61, late
    assert len(records) == pytest.approx(600, rel=0.05)
    assert {r["worker"] for r in records} == {w["id"] for w in run["workers"]}
