"""Trace replay against the simulator, 4 slots of 250 ms (16 req/s): a Poisson log of 5 req/s
replayed at speeds, each arrival at its offset over the speed, the SLO's limit found as a speed
to 0.1x (the server saturates at 3.2x) and gated there; a log with a burst and a conversation
shows the burst on the timeline with its own p95, and the conversation's turns in order; two workers
share a trace with each conversation on one of them."""

import csv
import json
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from procs import dashboard, finish, free_port, locust, locust_count, read_jsonl, spawn, start_locust, worker


def sim():
    return spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "250",
            "--per-char-ms",
            "0",
            "--jitter",
            "0.05",
            "--seed",
            "1",
        ]
    )


def poisson(seed: int, rate: float, seconds: float) -> list[float]:
    rng, t, out = random.Random(seed), 0.0, []
    while (t := t + rng.expovariate(rate)) < seconds:
        out.append(round(t, 4))
    return out


def replay(tmp_path, host, trace, name, *extra):
    run_dir = tmp_path / name
    proc = locust(
        [
            "--headless",
            "-H",
            host,
            "--trace",
            str(trace),
            "--run-dir",
            str(run_dir),
            "--json-file",
            str(tmp_path / f"{name}-locust"),
            *extra,
        ],
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "Traceback" not in proc.stdout
    assert len(read_jsonl(run_dir / "requests.jsonl")) == locust_count(tmp_path / f"{name}-locust")
    return run_dir, proc.stdout


@pytest.mark.slow
def test_the_largest_speed_within_the_slo_is_found_to_a_tenth(tmp_path):
    offsets = poisson(11, 5.0, 120)
    trace = tmp_path / "day.jsonl"
    trace.write_text("".join(json.dumps({"offset_s": o, "text_len": 60}) + "\n" for o in offsets))
    # 2x offers 10 req/s (about 100 arrivals in a 10 s step: enough to bound a p95), 4x 20 req/s
    with sim() as server:
        run_dir, out = replay(
            tmp_path,
            server.url,
            trace,
            "run",
            "--trace-speed",
            "2,4",
            "--step-time",
            "10",
            "--slo",
            "p95_ms<=1000",
            "--refine",
        )
    info = json.loads((run_dir / "run.json").read_text())
    base = info["trace"]["rate_rps"]
    assert info["trace"]["rows"] == len(offsets) and base == pytest.approx(5.0, rel=0.1)
    assert info["options"]["trace_speed"] == [2, 4] and info["mode"] == "open"
    records = read_jsonl(run_dir / "requests.jsonl")
    # each step sent exactly the trace's arrivals that fit its span, each scheduled at offset / speed
    for st in info["steps"]:
        speed = st["rate"] / base
        span = min(10.0, info["trace"]["duration_s"] / speed)
        want = np.array([o / speed for o in offsets if o / speed < span])
        got = np.sort([r["scheduled"] - st["start"] for r in records if r["step"] == st["step"] and r["attempt"] == 1])
        assert len(got) == len(want) and np.allclose(got, want, atol=1e-3), st
    plan = info["plan"]
    done = plan["decisions"][-1]
    assert done["action"] == "done", plan["decisions"]
    speeds = sorted(round(lv["rate"] / base, 6) for lv in plan["levels"])
    probes = [round(s["rate"] / base, 6) for s in info["steps"] if s["phase"] == "refine"]
    assert probes and all(abs(p * 10 - round(p * 10)) < 1e-6 for p in probes), probes  # on the 0.1x grid
    best = plan["max_rate"] / base
    above = min(s for s in speeds if s > best + 1e-9)
    assert 2.5 <= best <= 3.2 and above - best == pytest.approx(0.1), (best, speeds)
    assert "x (" in out and "req/s) fails: bisecting at" in out

    res = dashboard(run_dir, "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["slo"]["max_speed"] == pytest.approx(best) and s["trace"]["max_speed"] == pytest.approx(best)
    assert [st["speed"] for st in s["trace"]["steps"]][:2] == [2, 4]
    assert f"As a speed of the trace: {round(best, 6):g}x its pace." in s["recommendation"]
    four = next(st for st in s["steps"] if st.get("speed") == 4)
    # the shortfall is judged against what the step's settled window replayed
    assert four["offered_rps"] == pytest.approx(four["offered"] / four["window"]["duration_s"], rel=0.25)
    ok = dashboard(run_dir, "--require", "2x")
    assert ok.returncode == 0 and "At 2x the trace's pace" in ok.stdout, ok.stdout + ok.stderr
    bad = dashboard(run_dir, "--require", "4x")
    assert bad.returncode == 1 and "does not hold" in bad.stderr, bad.stderr


def test_a_burst_shows_on_the_timeline_with_its_own_p95_and_a_conversation_keeps_its_order(tmp_path):
    offsets = [round(i * 0.2, 4) for i in range(150)]  # 5 req/s for 30 s
    rows = [{"offset_s": o, "text_len": 60} for o in offsets]
    rows += [{"offset_s": round(4 + i * 0.1, 4), "text_len": 60} for i in range(20)]  # 20 more in 2 s
    # a conversation whose turns come 0.1 s apart in the log: each waits for the one above's answer
    rows += [
        {"offset_s": 1 + 0.1 * k, "text": f"Turn {k} of the call.", "conversation": "call-1", "turn": k}
        for k in range(1, 4)
    ]
    rows.sort(key=lambda r: r["offset_s"])
    trace = tmp_path / "burst.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with sim() as server:
        run_dir, _ = replay(tmp_path, server.url, trace, "run", "--trace-speed", "1", "--step-time", "8")
    res = dashboard(run_dir, "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    (b,) = s["trace"]["bursts"]
    assert 3.5 <= b["start_s"] <= 4.0 and 5.5 <= b["end_s"] <= 6.0 and b["times_mean"] > 2, b
    (st,) = s["trace"]["steps"]
    (seen,) = st["bursts"]
    assert seen["requests"] >= 25 and seen["p95_ms"] is not None and st["p95_outside_ms"] is not None
    html = (run_dir / "report.html").read_text()
    assert "<h2>Trace replay</h2>" in html and "burst p95 ms" in html
    assert html.count("#f6c343") >= 4  # the burst shaded on each of the timeline's rows
    text = dashboard(run_dir)
    assert "burst at 4.0-" in text.stdout and "p95 from schedule" in text.stdout
    records = read_jsonl(run_dir / "requests.jsonl")
    turns = sorted((r for r in records if r["text_id"].startswith("trace:")), key=lambda r: r["t0"])
    assert len(turns) == 3 and all(r["ok"] for r in turns), turns
    lines = [int(r["text_id"].split(":")[1]) for r in turns]
    assert lines == sorted(lines), lines  # turn 1, 2, 3: the rows' order
    for above, r in zip(turns, turns[1:]):
        assert r["t0"] >= above["t2"], (above, r)  # sent once the turn above was answered
        assert r["scheduled"] >= above["t2"] - 0.005  # and scheduled then: its wait for it is not the server's


def test_two_workers_share_a_trace_each_conversation_on_one_of_them(tmp_path):
    rows = [{"offset_s": round(i * 0.1, 3), "text": f"Lone request number {i}."} for i in range(30)]
    for c in ("a", "b"):
        rows += [
            {
                "offset_s": 0.2 + k * 0.5 + (0.05 if c == "b" else 0),
                "text": f"Call {c}, turn {k}.",
                "conversation": f"call-{c}",
                "turn": k,
            }
            for k in range(4)
        ]
    rows.sort(key=lambda r: r["offset_s"])
    trace = tmp_path / "calls.csv"
    with trace.open("w", newline="") as f:  # the CSV form, as an export would give it
        out = csv.writer(f)
        out.writerow(["offset_s", "text", "conversation", "turn"])
        out.writerows([r["offset_s"], r["text"], r.get("conversation", ""), r.get("turn", "")] for r in rows)
    port = free_port()
    with sim() as server:
        m = start_locust(
            [
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                "2",
                "--headless",
                "-H",
                server.url,
                "--trace",
                str(trace),
                "--step-time",
                "5",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            tmp_path / "master.log",
        )
        w = [worker(tmp_path, port, n) for n in (1, 2)]
        finish(m, *w, run_dir=tmp_path / "run")
    assert m.returncode == 0, (tmp_path / "master.log").read_text()[-3000:]
    records = [r for r in read_jsonl(tmp_path / "run" / "requests.jsonl") if r["final"]]
    by_line = {}
    for r in records:
        by_line.setdefault(r["text_id"], []).append(r)
    assert len(by_line) == len(rows) and all(len(v) == 1 for v in by_line.values())  # every row sent once
    line_of = {r["text"]: n for n, r in enumerate(rows, 2)}  # the header is line 1
    for c in ("a", "b"):
        turns = [by_line[f"trace:{line_of[f'Call {c}, turn {k}.']}"][0] for k in range(4)]
        assert len({t["worker"] for t in turns}) == 1, turns  # a conversation stays on its worker
        assert [t["t0"] for t in turns] == sorted(t["t0"] for t in turns)
    lone = [by_line[f"trace:{line_of[f'Lone request number {i}.']}"][0]["worker"] for i in range(30)]
    assert len(set(lone)) == 2 and min(lone.count(x) for x in set(lone)) >= 10, lone  # dealt out in turn
    # every row accounted for, in run.json, the summary and the master's last words
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["steps"][0]["arrivals"] == {"planned": 38, "sent": 38, "dropped": 0, "not_sent": {}}
    text = dashboard(tmp_path / "run")
    assert "38 rows planned, 38 sent, 38 recorded (0 cut by the run's end), 0 not sent" in text.stdout
    assert (
        "38 trace rows planned, 38 sent, 0 dropped at --max-inflight, every one accounted for"
        in (tmp_path / "master.log").read_text()
    )


def test_a_replay_stopped_before_its_last_rows_are_due_counts_them_as_not_sent(tmp_path):
    # 100 rows over 10 s, the run stopped by hand about 2 s in: the rows not yet due are not sent,
    # and said so with their reason in run.json, the summary, the terminal and the exit status
    trace = tmp_path / "day.jsonl"
    trace.write_text(
        "".join(json.dumps({"offset_s": round(i * 0.1, 2), "text": f"Row {i}."}) + "\n" for i in range(100))
    )
    run_dir = tmp_path / "run"
    with sim() as server:
        proc = start_locust(
            ["--headless", "-H", server.url, "--trace", str(trace), "--step-time", "30", "--run-dir", str(run_dir)],
            tmp_path / "locust.log",
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_lines(run_dir / "requests.jsonl")) < 10:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # as a supervisor stops it (Ctrl-C can land inside a request)
        finish(proc, run_dir=run_dir)
    out = (tmp_path / "locust.log").read_text()
    assert proc.returncode == 1, out[-3000:]  # --exit-code-on-error's default: the replay did not send every row
    arrivals = json.loads((run_dir / "run.json").read_text())["steps"][0]["arrivals"]
    stopped = arrivals["not_sent"].get("run_stopped", 0)
    assert arrivals["planned"] == 100 and arrivals["sent"] + stopped == 100 and stopped >= 50, arrivals
    final = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["final"]]
    assert len(final) == arrivals["sent"]  # each row sent has its record (cut or answered)
    assert f"100 trace rows planned, {arrivals['sent']} sent, 0 dropped at --max-inflight, {stopped} NOT SENT" in out
    assert "run_stopped: the run stopped before it was sent" in out
    assert "SIGTERM: the run stops now" in out  # stopped in order, not killed by the signal
    text = dashboard(run_dir)
    assert f"100 rows planned, {arrivals['sent']} sent, {len(final)} recorded" in text.stdout
    assert f"{stopped} not sent: {stopped} run_stopped" in text.stdout


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
