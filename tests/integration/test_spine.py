"""End-to-end sweeps: real headless Locust runs against the real simulator on loopback."""

import json
import statistics

import pytest

from procs import dashboard, locust, locust_count, read_jsonl, spawn

CONTRACT_FIELDS = {
    "req_id",
    "attempt",
    "final",
    "step",
    "concurrency",
    "worker",
    "user",
    "text_id",
    "text_len",
    "t0",
    "t1",
    "t2",
    "t3",
    "ttfb_ms",
    "wait_ms",
    "write_ms",
    "concat_ms",
    "status",
    "ok",
    "error",
    "bytes",
    "audio_s",
    "rtf",
    "retry_after_s",
    "retry_after_raw",
    "backoff_ms",
    "server_timing",
    "settled",
}


def sweep(tmp_path, host, *extra, steps="1,2,4", step_time="2", name="run", timeout=120):
    run_dir = tmp_path / name
    proc = locust(
        [
            "--headless",
            "-H",
            host,
            "--steps",
            steps,
            "--step-time",
            step_time,
            "--run-dir",
            str(run_dir),
            "--json-file",
            str(tmp_path / f"{name}-locust"),
            *extra,
        ],
        timeout=timeout,
    )
    return proc, run_dir


@pytest.fixture(scope="module")
def sim2():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "2",
            "--base-ms",
            "60",
            "--per-char-ms",
            "0",
            "--jitter",
            "0.05",
            "--seed",
            "1",
        ]
    ) as p:
        yield p


def test_sweep_records_every_attempt_per_contract(tmp_path, sim2):
    proc, run_dir = sweep(tmp_path, sim2.url, "--csv", str(tmp_path / "stats"), "--html", str(tmp_path / "l.html"))
    assert proc.returncode == 0, proc.stdout
    assert "Traceback" not in proc.stdout
    # Locust's own outputs keep working beside the run directory
    assert (tmp_path / "stats_stats.csv").read_text().count("/v1/audio/speech") >= 1
    assert (tmp_path / "l.html").stat().st_size > 1000
    records = read_jsonl(run_dir / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "run-locust") > 20
    for r in records:
        assert r.keys() >= CONTRACT_FIELDS, CONTRACT_FIELDS - r.keys()
        assert r["ok"] and r["status"] == 200 and r["audio_s"] > 0
        assert r["t0"] <= r["t1"] <= r["t2"] <= r["t3"]
        assert r["wait_ms"] == pytest.approx((r["t2"] - r["t0"]) * 1000, abs=0.01)
        assert r["ttfb_ms"] == pytest.approx((r["t1"] - r["t0"]) * 1000, abs=0.01)
        assert r["write_ms"] == pytest.approx((r["t3"] - r["t2"]) * 1000, abs=0.01)
        assert set(r["server_timing"]) >= {"queue", "infer"}
    assert len({r["req_id"] for r in records}) == len(records)
    info = json.loads((run_dir / "run.json").read_text())
    assert [(s["step"], s["concurrency"]) for s in info["steps"]] == [(1, 1), (2, 2), (3, 4)]
    assert info["end"] is not None and all(s["end"] > s["start"] for s in info["steps"])
    assert {r["concurrency"] for r in records} == {1, 2, 4}
    for s in info["steps"]:  # every record lies in the step it names
        for r in (r for r in records if r["step"] == s["step"]):
            assert s["start"] - 0.01 <= r["t0"] <= s["end"] + 0.01
            assert r["settled"] == (r["t0"] >= s["start"] + info["settle_s"])
    # the same texts in the same order at every step: one user sends them in order; c users send
    # the first c at once, one each, in whichever order the event loop sends them
    first_three = ["en-s1", "en-m1", "en-l1"]
    for s in info["steps"]:
        c = s["concurrency"]
        ids = [r["text_id"] for r in sorted(records, key=lambda r: r["t0"]) if r["step"] == s["step"]]
        if c == 1:
            assert ids[:3] == first_three
        else:
            assert len(set(ids[:c])) == c and set(first_three[:c]) <= set(ids[: max(c, 3)]), (c, ids[:6])
    # the default corpus names its texts' languages (never sent): the records carry them, the summary slices by them
    languages = {r["text_id"].split("-")[0]: set() for r in records}
    for r in records:
        languages[r["text_id"].split("-")[0]].add(r["language"])
    assert languages == {"en": {"en"}, "zh": {"zh"}, "mx": {"zh"}}, languages
    out = dashboard(run_dir)
    assert out.returncode == 0, out.stderr
    sliced = json.loads((run_dir / "summary.json").read_text())["slices"]
    assert [sl["name"] for sl in sliced["by_language"]] == ["en", "zh"], sliced


def test_two_slots_double_the_latency_at_four_users(tmp_path, sim2):
    proc, run_dir = sweep(tmp_path, sim2.url, step_time="3")
    assert proc.returncode == 0, proc.stdout
    records = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["settled"] and r["ok"]]

    def mean(c, value):
        return statistics.fmean(value(r) for r in records if r["concurrency"] == c)

    # Each step's latency in units of that step's service time as the simulator's own clock measured
    # it (Server-Timing total - queue: the slot held, its 60 ms sleep fired however late): a busy
    # machine stretches the sleep unevenly from step to step, and this divides that out; the 25%
    # tolerance is left for the client's own overhead, which has no independent clock.
    per = {
        c: mean(c, lambda r: r["wait_ms"])
        / mean(c, lambda r: r["server_timing"]["total"] - r["server_timing"]["queue"])
        for c in (1, 2, 4)
    }
    assert per[2] == pytest.approx(per[1], rel=0.25)
    assert per[4] / per[2] == pytest.approx(2.0, rel=0.25)


@pytest.mark.parametrize("fmt", ["seconds", "http-date"])
def test_rate_limited_attempts_honour_retry_after(tmp_path, fmt):
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "8",
            "--base-ms",
            "20",
            "--per-char-ms",
            "0",
            "--rate",
            "3",
            "--burst",
            "1",
            "--retry-after-format",
            fmt,
        ]
    ) as sim:
        proc, run_dir = sweep(tmp_path, sim.url, "--retry-max-attempts", "4", steps="2", step_time="4")
    assert proc.returncode in (0, 1), proc.stdout  # Locust exits 1 when any attempt failed
    assert "Traceback" not in proc.stdout
    records = read_jsonl(run_dir / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "run-locust")
    throttled = [r for r in records if r["status"] == 429]
    assert throttled, "the rate limit never bit"
    by_id = {(r["req_id"], r["attempt"]): r for r in records}
    followed = 0
    for r in throttled:
        assert r["retry_after_raw"] is not None and r["retry_after_s"] is not None
        assert not r["ok"] and "429" in r["error"]
        if fmt == "seconds":
            assert r["retry_after_s"] == float(r["retry_after_raw"])
        nxt = by_id.get((r["req_id"], r["attempt"] + 1))
        if nxt is not None:
            followed += 1
            assert not r["final"]
            # what was slept: Retry-After counted from when the 429 arrived. backoff_ms is the planned
            # sleep, Retry-After less the time spent since the 429 arrived, so it shrinks on a busy
            # machine and only its top is bounded; the measured wait below (2 ms rounding slack; a late
            # timer only lengthens it) proves Retry-After was honoured.
            assert 0 <= nxt["backoff_ms"] <= r["retry_after_s"] * 1000
            assert nxt["t0"] >= r["t2"] + r["retry_after_s"] - 0.002
    assert followed


def test_streaming_first_byte_well_before_the_body(tmp_path):
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "300",
            "--per-char-ms",
            "0",
            "--stream",
            "--first-chunk-ms",
            "30",
        ]
    ) as sim:
        proc, run_dir = sweep(tmp_path, sim.url, "--tts-stream", steps="1,2", step_time="2")
    assert proc.returncode == 0, proc.stdout
    records = read_jsonl(run_dir / "requests.jsonl")
    assert records and all(r["ok"] and r["audio_s"] > 0 for r in records)
    for r in records:
        # the body goes on for its paced ~270 ms (jitter: 240 or more) after the first chunk's 30 ms;
        # a body sent whole has ~0 ms after its first byte. A gap of over 50 ms tells them apart, and
        # only a first chunk ~190 ms late breaks it, where ttfb < 0.5 x wait broke at ~100 ms late.
        assert r["ttfb_ms"] < r["wait_ms"] - 50


@pytest.mark.parametrize(
    "fault,reason",
    [
        ("garbage", "not a WAV"),
        ("html", "HTML"),
        ("json", "instead of audio"),
        ("empty", "empty body"),
        ("truncate", "truncated"),
    ],
)
def test_bodies_that_are_not_audio_are_failures(tmp_path, fault, reason):
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--base-ms",
            "5",
            "--per-char-ms",
            "0",
            "--fault",
            fault,
            "--fault-rate",
            "0.5",
            "--seed",
            "3",
        ]
    ) as sim:
        proc, run_dir = sweep(tmp_path, sim.url, "--skip-preflight", steps="2", step_time="2")
    assert proc.returncode in (0, 1), proc.stdout  # Locust exits 1 when any request failed
    assert "Traceback" not in proc.stdout
    records = read_jsonl(run_dir / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "run-locust")
    bad = [r for r in records if not r["ok"]]
    good = [r for r in records if r["ok"]]
    assert bad and good
    assert all(reason in r["error"] for r in bad), {r["error"] for r in bad}
    assert all(r["audio_s"] is None and r["t3"] is None for r in bad)


def test_a_step_that_adds_many_users_is_settled_once_they_all_run(tmp_path):
    """Locust starts the users a step adds 100 a second: a step from 1 user to 250 runs below its
    level for 2.49 s, so its settle window (and its length) grows to that, where the run's own
    settle window is shorter; the window the summary measures starts there."""
    sim_args = ["tts_knee.testbed.sim", "--port", "0", "--slots", "300", "--base-ms", "1000", "--per-char-ms", "0"]
    with spawn(sim_args) as sim:
        proc, run_dir = sweep(tmp_path, sim.url, "--settle-time", "0.2", steps="1,250", step_time="2")
    assert proc.returncode == 0, proc.stdout[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    first, many = info["steps"]
    assert first["settle_s"] == info["settle_s"] == 0.2  # one user starts at once: the run's window
    assert many["settle_s"] == pytest.approx(2.49)
    # the step ran its time past its longer settle window (a late tick only lengthens it)
    assert many["end"] - many["start"] >= 2 + 2.49 - 0.2 - 0.15
    records = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["step"] == 2]
    assert all(r["settled"] == (r["t0"] >= many["start"] + many["settle_s"]) for r in records)
    assert len({r["user"] for r in records if r["settled"]}) > 200  # the users were running by then
    assert "the first 2.5 s are not settled: Locust starts the 249 users it adds 100 a second" in proc.stdout
