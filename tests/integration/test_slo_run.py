"""The step plan in real Locust runs against the simulator: refinement to the integer,
stopping past the knee, repeated grids, a bad SLO, and decisions taken on a distributed
master from the records its worker shipped."""

from __future__ import annotations

import json

import pytest

from procs import finish, free_port, locust, read_jsonl, spawn, start_locust

FIVE_SLOTS = ["--slots", "5", "--base-ms", "250", "--per-char-ms", "0", "--jitter", "0.05"]
FOUR_SLOTS = ["--slots", "4", "--base-ms", "100", "--per-char-ms", "0", "--jitter", "0.05"]


def sweep(tmp_path, sim_args, *args, timeout=150):
    with spawn(["tts_knee.testbed.sim", "--port", "0", *sim_args]) as sim:
        proc = locust(["--headless", "-H", sim.url, "--run-dir", str(tmp_path / "run"), *args], timeout=timeout)
    assert "Traceback" not in proc.stdout, proc.stdout
    assert proc.returncode == 0, proc.stdout
    return json.loads((tmp_path / "run" / "run.json").read_text()), proc.stdout


def plan_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "tts_knee.plan: plan after step" in line]


def test_refine_finds_the_largest_concurrency_that_meets_the_slo(tmp_path):
    # By Little's law 6 users on 5 slots of 250 ms wait 6 / (5 / 0.25 s) = 300 ms on average, 5 users
    # 250 ms: whatever the order of completions, mean_ms<=280 holds at 5 and fails at 6.
    info, out = sweep(
        tmp_path, FIVE_SLOTS, "--slo", "mean_ms<=280", "--steps", "1,2,4,8,16", "--refine", "--step-time", "3"
    )
    steps = [(s["concurrency"], s["phase"], s["repeat"]) for s in info["steps"]]
    assert steps == [
        (1, "grid", 1),
        (2, "grid", 1),
        (4, "grid", 1),
        (8, "grid", 1),
        (16, "grid", 1),
        (6, "refine", 1),
        (5, "refine", 1),
    ], info["plan"]
    plan = info["plan"]
    assert plan["max_concurrency"] == 5
    assert [(d["action"], d.get("concurrency"), d["after_step"]) for d in plan["decisions"]] == [
        ("refine", 6, 5),
        ("refine", 5, 6),
        ("done", None, 7),
    ]
    assert plan["decisions"][-1]["answer"] == 5
    assert [v["pass"] for v in plan["verdicts"]] == [True, True, True, False, False, False, True]
    assert info["options"]["slo"] == "mean_ms<=280" and info["options"]["refine"] is True
    assert len(plan_lines(out)) == 3
    # every step is judged on what it sent before its cut-off, and runs on until that is in
    for s in info["steps"]:
        assert s["start"] < s["cutoff"] <= s["end"]
        assert 2.9 <= s["cutoff"] - s["start"] - (s["settle_s"] - info["settle_s"]) < 4.0
    # the refine steps lower the concurrency: their settle window covers the stopped users' requests
    assert info["steps"][5]["settle_s"] > info["settle_s"]
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert {r["step"] for r in records} == set(range(1, 8))


def test_refine_on_a_p95_slo_ends_on_adjacent_integers(tmp_path):
    # The issue's case. Where 6 users on 5 slots land against p95_ms<=400 depends on how the slots'
    # completions are spread (the queued request waits for the next one, ~50 ms on average): 6 fails
    # while they are bunched and passes once they spread, so the answer is 5 or 6, rarely 7.
    # 80 requests a step: a p95 needs 72 before anything bounds it from above
    info, _ = sweep(
        tmp_path,
        FIVE_SLOTS,
        "--slo",
        "p95_ms<=400",
        "--steps",
        "1,2,4,8,16",
        "--refine",
        "--step-requests",
        "80",
        "--step-time",
        "60",
        timeout=240,
    )
    plan = info["plan"]
    assert [s["concurrency"] for s in info["steps"][:6]] == [1, 2, 4, 8, 16, 6]
    assert [s["phase"] for s in info["steps"]] == ["grid"] * 5 + ["refine"] * (len(info["steps"]) - 5)
    answer = plan["max_concurrency"]
    assert answer in (5, 6, 7) and plan["decisions"][-1]["answer"] == answer
    levels = {}
    for v in plan["verdicts"]:
        levels[v["concurrency"]] = levels.get(v["concurrency"], True) and v["pass"] is True
    assert levels[answer] and not levels[answer + 1]
    assert all(levels[c] for c in levels if c < answer) and not any(levels[c] for c in levels if c > answer)


def test_stop_past_knee_without_an_slo_skips_the_higher_steps(tmp_path):
    info, out = sweep(tmp_path, FOUR_SLOTS, "--steps", "1,2,4,8,16,32,64", "--stop-past-knee", "--step-time", "2")
    assert [s["concurrency"] for s in info["steps"]] == [1, 2, 4, 8, 16]
    (decision,) = info["plan"]["decisions"]
    assert decision["action"] == "stop" and decision["after_step"] == 5 and decision["skipped"] == [32, 64]
    assert "past the knee" in decision["why"]
    assert len(plan_lines(out)) == 1 and "stop" in plan_lines(out)[0]
    assert info["options"]["stop_past_knee"] is True and info["plan"]["verdicts"] == []


def test_repeat_runs_the_grid_again_with_the_texts_restarted(tmp_path):
    info, _ = sweep(tmp_path, FOUR_SLOTS, "--steps", "1,2", "--repeat", "2", "--step-time", "2")
    assert [(s["concurrency"], s["repeat"], s["phase"]) for s in info["steps"]] == [
        (1, 1, "grid"),
        (2, 1, "grid"),
        (1, 2, "grid"),
        (2, 2, "grid"),
    ]
    assert info["options"]["repeat"] == 2 and info["plan"]["decisions"] == [] and info["mode"] == "closed"
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    # each step's first texts, one a user: which of a step's users sends first is the event loop's
    # order (at 2 users the second text can go out first), so the first c texts are compared as a set.
    # Going from 2 users to 1 (step 3), the user Locust stops may take the step's first text just
    # before it is stopped and never send it (CI saw step 3 begin with the second): its first text
    # is one of the corpus's first two, where without the restart it would be step 2's next one.
    first = {
        s["step"]: {
            r["text_id"]
            for r in sorted((r for r in records if r["step"] == s["step"]), key=lambda r: r["t0"])[: s["concurrency"]]
        }
        for s in info["steps"]
    }
    assert first[2] == first[4] and len(first[2]) == 2 and first[1] < first[2], first
    assert len(first[3]) == 1 and first[3] <= first[2], first
    sent_at_2 = sum(r["step"] == 2 for r in records)
    assert sent_at_2 > 2, sent_at_2  # step 2 went well past its first two texts: the restart is seen


@pytest.mark.parametrize(
    "args, words",
    [
        (["--slo", "p95<=400"], ["--slo", "unknown metric", "p95_ms"]),
        (["--slo", "p95_ms=400"], ["--slo", "malformed"]),
        (["--refine"], ["--refine needs --slo"]),
        (["--repeat", "0"], ["--repeat must be greater than zero"]),
    ],
)
def test_bad_plan_options_are_one_sentence_and_exit_2(tmp_path, args, words):
    proc = locust(["--headless", "-H", "http://127.0.0.1:9", "--run-dir", str(tmp_path / "run"), *args], timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout, proc.stdout
    errors = [line for line in proc.stdout.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stdout


def test_a_distributed_master_decides_from_its_workers_records(tmp_path):
    port = free_port()
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FIVE_SLOTS]) as sim:
        master = start_locust(
            [
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                "1",
                "--headless",
                "-H",
                sim.url,
                "--steps",
                "4,8",
                "--slo",
                "mean_ms<=280",
                "--refine",
                "--step-time",
                "3",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            tmp_path / "master.log",
        )
        worker = start_locust(
            ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], tmp_path / "worker.log"
        )
        try:
            finish(master, timeout=120)
            finish(worker, timeout=30, run_dir=tmp_path / "run")
        finally:
            for p in (master, worker):
                if p.poll() is None:
                    p.kill()
    log = (tmp_path / "master.log").read_text()
    assert master.returncode == 0 and "Traceback" not in log, log
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [(s["concurrency"], s["phase"]) for s in info["steps"]] == [
        (4, "grid"),
        (8, "grid"),
        (6, "refine"),
        (5, "refine"),
    ], info["plan"]
    assert info["plan"]["max_concurrency"] == 5
    assert all(v["unanswered"] == 0 for v in info["plan"]["verdicts"])
    # judged from what the worker had shipped: every verdict counted the requests sent before the cut-off
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    for s, v in zip(info["steps"], info["plan"]["verdicts"]):
        sent = [r for r in records if r["step"] == s["step"] and r["final"] and r["settled"] and r["t0"] < s["cutoff"]]
        assert v["requests"] == len(sent)


def test_refine_with_step_requests_restarts_the_texts_at_every_step(tmp_path):
    info, _ = sweep(
        tmp_path, FIVE_SLOTS, "--slo", "mean_ms<=280", "--steps", "4,8", "--refine", "--step-requests", "40"
    )
    assert [(s["concurrency"], s["phase"]) for s in info["steps"]] == [
        (4, "grid"),
        (8, "grid"),
        (6, "refine"),
        (5, "refine"),
    ], info["plan"]
    assert info["plan"]["max_concurrency"] == 5
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    first = {}
    for s in info["steps"]:
        mine = sorted((r for r in records if r["step"] == s["step"]), key=lambda r: r["t0"])
        assert sum(1 for r in mine if r["final"] and r["settled"] and r["t0"] < s["cutoff"]) >= 40
        # the texts restart at every step: its first c attempts (one a user, sent in whichever order
        # the event loop sends them) hold the corpus's first text
        first[s["step"]] = {r["text_id"] for r in mine[: s["concurrency"]]}
    assert set.intersection(*first.values()), first
