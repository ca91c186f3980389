"""Dashboard analysis, report and CLI on synthetic run directories (tests/rundirs.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from procs import ROOT, busy_port, dashboard, read_jsonl
from rundirs import GIB, SCENARIOS, Model, build_run
from tts_knee import runformat
from tts_knee.analysis.knee import find_knee
from tts_knee.analysis.summary import analyze, load

_run = dashboard


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_each_diagnosis_kind(tmp_path, kind):
    model, knee, rec = SCENARIOS[kind]
    s = analyze(load(build_run(tmp_path / kind, model)))
    assert s["diagnosis"]["kind"] == kind, s["diagnosis"]
    assert s["knee"]["concurrency"] == knee
    assert s["recommended_concurrency"] == rec
    assert any(ch.isdigit() for ch in s["diagnosis"]["evidence"][0])


def test_step_fields_and_contract(tmp_path):
    s = analyze(load(build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])))
    step = s["steps"][0]
    for k in (
        "step",
        "concurrency",
        "requests",
        "ok",
        "failed",
        "error_rate",
        "throughput_rps",
        "latency_ms",
        "ttfb_ms",
        "write_ms",
        "retries",
        "throttled",
        "status_counts",
        "server",
        "client",
        "e2e_ms",
    ):
        assert k in step
    assert set(step["latency_ms"]) >= {"mean", "p50", "p90", "p95", "p99", "max"}
    assert step["server"]["gpu_util_mean"] is not None and step["server"]["gpu_mem_peak_bytes"] > 0
    assert {"concurrency", "methods", "agree"} <= set(s["knee"])
    assert "latency_vs_lowest" in s["knee"]["agree"] and "piecewise" in s["knee"]["methods"]
    assert s["usl"]["peak_concurrency"] and 3 < s["usl"]["peak_concurrency"] < 16
    assert all(x["ok"] for x in s["little_law"])
    # the window is the step's own span from run.json, after the settle time: 12 s - 2 s
    w = step["window"]
    assert w["source"] == "run.json" and w["duration_s"] == pytest.approx(10.0)
    assert w["start"] == pytest.approx(step["planned_start"] + 2.0) and w["end"] == step["planned_end"]
    assert step["throughput_rps"] == pytest.approx(w["ok_completions"] / 10.0)
    assert step["server"]["by_host"]["tts-server"]["gpu_util_mean"] == step["server"]["gpu_util_mean"]


def _step(c, p50, p95=None, rps=None, fail=0.0):
    return {
        "concurrency": c,
        "requests": 100,
        "ok": 100,
        "attempt_failure_rate": fail,
        "latency_ms": {"p50": p50, "p95": p95 or p50 * 1.5},
        "e2e_ms": None,
        "throughput_rps": rps if rps is not None else c / p50 * 1000,
    }


def test_noise_is_not_a_knee():
    wiggle = [1.0, 1.1, 0.92, 1.1, 0.95, 1.08]
    steps = [_step(c, 300 * w) for c, w in zip((1, 2, 4, 8, 16, 32), wiggle)]
    k = find_knee(steps)
    assert k["concurrency"] is None and k["methods"]["throughput_efficiency"] is None


def test_single_spike_is_not_a_knee():
    steps = [_step(c, p) for c, p in zip((1, 2, 4, 8, 16), (300, 310, 700, 305, 320))]
    assert find_knee(steps)["concurrency"] is None


def test_failures_make_a_knee():
    steps = [_step(c, 300, fail=f) for c, f in zip((1, 2, 4, 8), (0, 0, 0.2, 0.4))]
    assert find_knee(steps)["concurrency"] == 4


def test_bad_and_cut_lines_counted(tmp_path):
    p = build_run(tmp_path / "r", Model(bad_lines=3))
    with open(p / "requests.jsonl", "a") as f:
        f.write('{"req_id": "x", "t0": 17')  # cut mid-line
    with open(p / "resources.jsonl", "a") as f:
        f.write("garbage\n")
    s = analyze(load(p))
    assert s["bad_lines"] == {"requests": 3, "resources": 1}
    assert s["incomplete_last_line"]["requests"] is True
    assert s["knee"]["concurrency"] == 8


def test_missing_resources_is_queueing_with_the_knee_as_before(tmp_path):
    s = analyze(load(build_run(tmp_path / "r", Model(resources=False))))
    assert s["steps"][0]["server"] is None
    assert s["diagnosis"]["kind"] == "queueing" and s["diagnosis"]["resource_data"] is False
    assert s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    first = s["diagnosis"]["evidence"][0]
    assert "requests queue; without server samples the cause cannot be told" in first
    assert "at 8" in first and " ms" in first
    text = " ".join(s["diagnosis"]["evidence"])
    assert "--collector" in text and "No resource samples" in text


def test_client_samples_only_is_queueing_too(tmp_path):
    # A run with the Locust workers' heartbeats but no collector beside the server.
    p = build_run(tmp_path / "r", Model(slots=4, client_workers=2))
    rows = [json.loads(x) for x in (p / "resources.jsonl").read_text().splitlines()]
    (p / "resources.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["role"] == "client"))
    s = analyze(load(p))
    assert s["diagnosis"]["kind"] == "queueing", s["diagnosis"]
    assert s["diagnosis"]["resource_data"] is True
    assert any("No server samples" in e for e in s["diagnosis"]["evidence"])


def test_run_in_progress(tmp_path):
    # the run read half-way through its last step (16), as the live view reads it
    p = build_run(tmp_path / "r", Model(in_progress=True))
    s = analyze(load(p))
    assert s["run"]["in_progress"] is True and s["incomplete_last_line"]["requests"] is True
    open_step = s["steps"][-1]
    assert open_step["requests"] > 0 and open_step["open"]["settling"] is False and not open_step["open"]["withheld"]
    # its throughput is over the part of its window that has passed: within 10% of what the whole
    # window gives once the step has run (the same seed, the run complete)
    done = analyze(load(build_run(tmp_path / "done", Model())))
    assert open_step["throughput_rps"] == pytest.approx(done["steps"][-1]["throughput_rps"], rel=0.10)
    assert [st for st in s["steps"][:-1]] == [dict(st, window=st["window"]) for st in done["steps"][:-1]]
    # the verdict waits: the levels, the knee and the recommendation are the closed steps'
    assert [lv["concurrency"] for lv in s["levels"]] == [1, 2, 4, 8]
    assert s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    assert s["in_progress_step"]["step"] == 5 and s["in_progress_step"]["closed_steps"] == [1, 2, 3, 4]
    assert "Step 5 (concurrency 16) is in progress: the verdict is from steps 1-4" in s["in_progress_step"]["note"]
    assert "open" not in done["steps"][-1] and done["in_progress_step"] is None
    r = _run(p, "--no-report")
    assert r.returncode == 0 and "(in progress)" in r.stdout and "5 open" in r.stdout, r.stdout
    assert "Step 5 (concurrency 16) is in progress" in r.stdout


def test_an_open_step_withholds_what_its_window_cannot_give_yet(tmp_path):
    """Read in its settle time, the last step measures nothing; a moment past it, with fewer than
    OPEN_MIN_COUNT requests finished, its rates and percentiles are withheld, not a rate from a
    handful of requests over a fraction of a second."""
    from tts_knee.analysis.steps import OPEN_MIN_COUNT
    from tts_knee.dashboard.report import report_html
    from tts_knee.dashboard.table import WITHHELD, tab_rows

    whole = build_run(tmp_path / "whole", Model())
    info = json.loads((whole / "run.json").read_text())
    last = info["steps"][-1]
    records = [json.loads(line) for line in (whole / "requests.jsonl").read_text().splitlines()]
    for name, reach in (("settling", last["start"] + 1.0), ("few", last["start"] + info["settle_s"] + 0.25)):
        p = tmp_path / name
        p.mkdir()
        part = dict(info, end=None, steps=info["steps"][:-1] + [dict(last, end=None)])
        (p / "run.json").write_text(json.dumps(part))
        (p / "requests.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records if (r["t3"] or r["t2"] or r["t0"]) <= reach)
        )
        rd = load(p)
        s = analyze(rd)
        st = s["steps"][-1]
        assert st["open"]["settling"] is (name == "settling"), st["open"]
        assert st["throughput_rps"] is None and st["latency_ms"] is None and st["little"] is None
        if name == "few":
            assert 0 < st["open"]["completions"] < OPEN_MIN_COUNT
            assert "throughput_rps" in st["open"]["withheld"]
        row = tab_rows(s)[-1]
        assert row["rps"] == row["p95_ms"] == WITHHELD and row["state"] != "done"
        assert [lv["concurrency"] for lv in s["levels"]] == [1, 2, 4, 8] and s["recommended_concurrency"] != 16
        page = report_html(rd, s)
        assert "class='open' title='step 5 is in progress" in page and "Step 5 (concurrency 16) is in progress" in page


def test_cli_table_summary_and_report(tmp_path):
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    r = _run(p)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for word in (
        "conc",
        "p95",
        "ttfb p50",
        "GPU%",
        "knee: 8",
        "diagnosis: compute_bound",
        "recommended concurrency: 4",
        "report:",
    ):
        assert word in out
    summary = json.loads((p / "summary.json").read_text())
    assert summary["diagnosis"]["kind"] == "compute_bound"
    html = (p / "report.html").read_text()
    assert html.count('<script type="text/javascript">/**\n* plotly.js') <= 1 and "Plotly.newPlot" in html
    assert len(html) < 8_000_000
    j = _run(p, "--json", "--no-report")
    assert json.loads(j.stdout)["recommended_concurrency"] == 4


def test_the_report_says_in_a_line_what_it_has_nothing_to_draw_for(tmp_path):
    # no GPU sampled and no Retry-After: a line each instead of empty axes
    bare = build_run(tmp_path / "bare", Model(steps=(1, 2, 4), gpu=False))
    assert _run(bare).returncode == 0
    html = (bare / "report.html").read_text()
    assert "No GPU memory was sampled" in html and "GPU memory per step (GiB)" not in html
    assert "No answer carried a Retry-After header" in html and "Retry-After (s)" not in html
    # a GPU sampled and answers throttled with Retry-After: both figures, no such line
    full = build_run(tmp_path / "full", Model(steps=(1, 2, 4), rate_limit_from=4))
    assert _run(full).returncode == 0
    html = (full / "report.html").read_text()
    assert "GPU memory per step (GiB)" in html and "No GPU memory was sampled" not in html
    assert "Retry-After (s)" in html and "No answer carried a Retry-After header" not in html


def test_capacity_per_step_and_at_the_recommendation(tmp_path):
    """Characters per second are the text of the window's successful completions; the report
    prices the recommendation and plans replicas, the run's own options unless the flags say
    otherwise; a recorded value that does not parse is one sentence."""
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    info = json.loads((p / "run.json").read_text())
    info.setdefault("options", {}).update(cost_per_hour=3.0, plan_for="100")
    (p / "run.json").write_text(json.dumps(info))
    r = _run(p)
    assert r.returncode == 0, r.stderr
    s = json.loads((p / "summary.json").read_text())
    records = read_jsonl(p / "requests.jsonl")
    for st in s["steps"]:
        w = st["window"]
        done = [x for x in records if x["ok"] and x["final"] and w["start"] <= (x["t3"] or x["t2"]) <= w["end"]]
        assert st["chars_per_s"] == pytest.approx(sum(x["text_len"] for x in done) / w["duration_s"])
        assert st["utterances_per_hour"] == pytest.approx(3600 * st["throughput_rps"])
    cap, rec = s["capacity"], next(lv for lv in s["levels"] if lv["concurrency"] == 4)
    assert s["recommended_concurrency"] == 4 and cap["at"] == {"concurrency": 4}
    assert cap["chars_per_s"] == rec["chars_per_s"] > 0
    assert cap["cost_per_million_chars"] == pytest.approx(3.0 / (rec["chars_per_s"] * 3600 / 1e6))
    assert cap["plan"]["replicas"] == 32  # 100 in flight, 4 a replica at 80 %: 31.25
    assert f"capacity: {cap['text']}" in r.stdout and "32 replicas" in (p / "report.html").read_text()
    r = _run(p, "--plan-for", "20/s", "--headroom", "0", "--no-report")
    plan = json.loads((p / "summary.json").read_text())["capacity"]["plan"]
    assert plan["replicas"] == math.ceil(20 / rec["throughput_rps"]) and plan["headroom"] == 0
    bad = _run(p, "--plan-for", "a few")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --plan-for 'a few' is neither a number of concurrent requests (500) nor a rate in requests per "
        "second (20/s)."
    ]
    info["options"]["headroom"] = 2
    (p / "run.json").write_text(json.dumps(info))
    bad = _run(p)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "options: --headroom 2" in bad.stderr


@pytest.mark.parametrize("make", ["missing", "empty", "file", "badjson", "norecords"])
def test_cli_errors_exit_2_with_one_sentence(tmp_path, make):
    p = tmp_path / "run"
    if make == "empty":
        p.mkdir()
    elif make == "file":
        p.write_text("x")
    elif make == "badjson":
        p.mkdir()
        (p / "run.json").write_text("{nope")
        (p / "requests.jsonl").write_text("")
    elif make == "norecords":
        p.mkdir()
        (p / "run.json").write_text("{}")
    r = _run(p)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_markup_in_texts_and_errors_is_escaped(tmp_path):
    evil = "<script>alert('x')</script>"
    p = build_run(
        tmp_path / "r",
        Model(text_ids=[evil, "</script><img src=x onerror=alert(1)>", "c"], error_from=8, error_text=f"boom {evil}"),
    )
    s = analyze(load(p))
    from tts_knee.analysis.summary import load as ld
    from tts_knee.dashboard.report import report_html

    html = report_html(ld(p), s)
    assert evil not in html and "onerror=alert(1)>" not in html
    assert "&lt;script&gt;alert" in html or "\\u003cscript" in html


def test_compare_two_runs(tmp_path):
    a = build_run(tmp_path / "a", SCENARIOS["compute_bound"][0])
    b = build_run(tmp_path / "b", SCENARIOS["no_knee"][0])
    r = _run(a, b, "--out", tmp_path / "cmp")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "cmp" / "report.html").read_text()
    assert "comparison of 2 runs" in html and ">a<" in html and ">b<" in html
    runs = json.loads((tmp_path / "cmp" / "summary.json").read_text())["runs"]
    assert [x["diagnosis"]["kind"] for x in runs] == ["compute_bound", "no_knee"]
    assert (a / "report.html").exists() and (b / "summary.json").exists()


def test_dashboard_does_not_import_locust():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tts_knee.dashboard.__main__, tts_knee.dashboard.serve; "
            "print('locust' in sys.modules, 'gevent' in sys.modules)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.strip() == "False False", r.stderr


def test_long_requests_keep_their_throughput_and_littles_law(tmp_path):
    # Users carry on across steps as Locust's do; 8 slots, so at 16 users a request takes
    # 5-15 s (10 s on average): 16 users / 10 s = 1.6 req/s, with every user always busy.
    m = Model(
        continuous=True, step_s=30, settle_s=3, slots=8, base_ms=5000, noise=0.5, tier_factor={}, gpu_busy_util=97
    )
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["diagnosis"]["kind"] == "compute_bound", s["diagnosis"]
    assert s["knee"]["concurrency"] == 16 and s["recommended_concurrency"] == 8
    top = s["steps"][-1]
    lat = top["latency_ms"]["mean"] / 1000
    assert 9 < lat < 11
    assert top["throughput_rps"] == pytest.approx(16 / lat, rel=0.05)
    assert top["throughput_rps"] == pytest.approx(1.6, rel=0.05)
    assert top["window"]["duration_s"] == pytest.approx(27.0)
    for step in s["steps"]:
        assert step["little"]["ratio"] == pytest.approx(1.0, abs=0.05), step["concurrency"]
    assert all(x["ok"] for x in s["little_law"])


def test_idle_users_still_break_littles_law(tmp_path):
    # The same long requests, but from 16 users on each loses 6 s between requests.
    m = Model(
        steps=(1, 2, 4, 8, 16, 32),
        continuous=True,
        step_s=30,
        settle_s=3,
        slots=8,
        base_ms=5000,
        noise=0.5,
        tier_factor={},
        gpu_busy_util=97,
        user_gap_ms=6000,
        user_gap_from=16,
    )
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["diagnosis"]["kind"] == "client_bound", s["diagnosis"]
    assert s["steps"][3]["little"]["ratio"] > 0.95 and s["steps"][4]["little"]["ratio"] < 0.75
    assert "Little's law does not hold at concurrency 16" in s["diagnosis"]["evidence"][0]


def test_a_saturated_worker_is_not_averaged_away(tmp_path):
    # The master's host idles (2%) while both Locust workers' processes sit at 99% from 8 users on.
    m = Model(slots=4, gpu_busy_util=97, client_cpu_per_user=0, client_workers=2, worker_cpu_per_user=25)
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["diagnosis"]["kind"] == "client_bound", s["diagnosis"]
    assert "concurrency 8" in s["diagnosis"]["evidence"][0] and "worker-" in s["diagnosis"]["evidence"][0]
    at8 = next(x for x in s["steps"] if x["concurrency"] == 8)
    assert at8["client"]["proc_cpu_mean"] == pytest.approx(99.0)
    assert set(at8["client"]["by_host"]) == {"loadgen", "worker-0", "worker-1"}
    assert at8["client"]["by_host"]["loadgen"]["proc_cpu_mean"] < 5


def _busy_loadgen_host(path, worker_cpu=None):
    """The load generator's host at 100% CPU while its own Locust process idles at 1% of a core
    (the server, or anything else, running on that machine); with ``worker_cpu``, a Locust
    worker of that host (its id is the hostname, '_', a hex id) reports that much CPU."""
    out = []
    for line in (path / "resources.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["role"] == "client":
            r.update(
                cpu_percent=100.0,
                cpu_max_core_percent=100.0,
                proc=runformat.proc_reading(pid=999, cpu_percent=1.0, rss_bytes=GIB),
            )
            if worker_cpu is not None:
                out.append(
                    json.dumps(
                        runformat.resource_sample(
                            ts=r["ts"] + 0.1,
                            host="loadgen_1f2e3d",
                            role="client",
                            source="locust-heartbeat",
                            gpus=[],
                            proc=runformat.proc_reading(cpu_percent=worker_cpu, rss_bytes=GIB),
                        )
                    )
                )
        out.append(json.dumps(r))
    (path / "resources.jsonl").write_text("\n".join(out) + "\n")


def test_a_busy_client_host_with_an_idle_locust_is_not_client_bound(tmp_path):
    # The server shares the load generator's machine unwatched (no collector on it): the host's
    # CPU is the server's, not the load generator's, and the verdict must not blame the client.
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    _busy_loadgen_host(p)
    s = analyze(load(p))
    assert s["diagnosis"]["kind"] == "compute_bound", s["diagnosis"]
    assert s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    assert any(
        "its Locust process used 1% of one core: another process there took the CPU" in e
        for e in s["diagnosis"]["evidence"]
    ), s["diagnosis"]["evidence"]


def test_a_busy_client_host_running_locust_workers_is_client_bound(tmp_path):
    # The same busy host, but Locust workers run on it: they are what fills its CPU.
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    _busy_loadgen_host(p, worker_cpu=80.0)
    s = analyze(load(p))
    assert s["diagnosis"]["kind"] == "client_bound", s["diagnosis"]
    assert "client CPU on loadgen 100%" in s["diagnosis"]["evidence"][0]


def test_a_saturated_server_host_is_not_averaged_away(tmp_path):
    # Two server hosts: the one with its GPU saturated, and an idle one (a replica that gets
    # nothing): their mean GPU utilisation is under GPU_BUSY, the busy host's is not.
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    lines = (p / "resources.jsonl").read_text().splitlines()
    extra = []
    for line in lines:
        r = json.loads(line)
        if r["role"] == "server":
            gpu = dict(r["gpus"][0], util_percent=0.0, mem_used_bytes=2 * GIB, uuid="GPU-idle")
            r.update(
                host="replica",
                cpu_percent=2.0,
                cpu_max_core_percent=4.0,
                gpus=[gpu],
                proc=runformat.proc_reading(pid=1, cpu_percent=2.0, rss_bytes=GIB),
            )
            extra.append(json.dumps(r))
    (p / "resources.jsonl").write_text("\n".join(lines + extra) + "\n")
    s = analyze(load(p))
    assert s["diagnosis"]["kind"] == "compute_bound", s["diagnosis"]
    assert "tts-server" in s["diagnosis"]["evidence"][0]


def test_memory_that_grows_with_load_and_comes_back_is_not_a_leak(tmp_path):
    # Steps back to back: the level right after a step is the next (higher) step's. Memory
    # grows with concurrency and is back at its baseline once the run is over.
    m = Model(slots=None, gap_s=0, gpu_busy_util=40, gpu_mem_per_slot=0.5 * GIB, post_run_gap_s=5.5, post_run_s=12)
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["diagnosis"]["kind"] == "no_knee", s["diagnosis"]
    assert s["gpu_memory_after_run_bytes"] == pytest.approx(s["gpu_memory_baseline_bytes"])


def test_memory_left_after_the_run_is_a_leak(tmp_path):
    m = Model(slots=None, gpu_busy_util=40, gpu_mem_leak_per_step=1.5 * GIB)
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["diagnosis"]["kind"] == "memory_bound", s["diagnosis"]
    assert "13.5 GiB" in s["diagnosis"]["evidence"][0] and "6.0 GiB" in s["diagnosis"]["evidence"][0]
    assert s["gpu_memory_creep"]["rise_bytes"] == pytest.approx(7.5 * GIB)


def test_memory_creep_needs_samples_after_the_run(tmp_path):
    # No collector samples once the run ended: nothing to judge creep by.
    m = Model(slots=None, gpu_busy_util=40, gpu_mem_leak_per_step=1.5 * GIB, post_run_s=0)
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert s["gpu_memory_creep"] is None and s["diagnosis"]["kind"] == "no_knee", s["diagnosis"]


def test_serve_on_a_busy_port_says_so(tmp_path):
    p = build_run(tmp_path / "r", Model())
    with busy_port() as port:
        r = _run(p, "--no-report", "--serve", "--port", port)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "in use" in r.stderr


@pytest.mark.parametrize(
    "entry, word",
    [
        ({"step": "x", "concurrency": "abc"}, "concurrency 'abc'"),
        ({"step": 1, "concurrency": 2.5}, "concurrency 2.5"),
        ({"step": "x", "concurrency": 4}, "step 'x'"),
        ({"step": 1, "concurrency": 4, "start": "soon"}, "start 'soon'"),
        ("four", "not an object"),
    ],
)
def test_malformed_step_entries_exit_2_naming_the_entry(tmp_path, entry, word):
    p = build_run(tmp_path / "r", Model())
    run = json.loads((p / "run.json").read_text())
    run["steps"][1] = entry
    (p / "run.json").write_text(json.dumps(run))
    r = _run(p, "--no-report")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "step entry 2" in r.stderr and word in r.stderr, r.stderr


def test_unwritable_summary_exits_2_with_one_sentence(tmp_path):
    p = build_run(tmp_path / "r", Model())
    (p / "summary.json").mkdir()  # os.replace cannot put a file there, root or not
    r = _run(p)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "summary.json" in r.stderr
    assert not [f.name for f in p.iterdir() if f.name.endswith(".tmp")]


def test_a_steps_own_settle_time_starts_its_window(tmp_path):
    # A step that lowered the concurrency settles longer while the previous step's requests
    # drain; run.json gives that step its own settle_s, and its window starts after it.
    path = tmp_path / "run"
    build_run(path, Model(steps=(1, 2, 4)))
    run = json.loads((path / "run.json").read_text())
    run["steps"][2]["settle_s"] = 3.0
    (path / "run.json").write_text(json.dumps(run))
    s = analyze(load(path))
    start = run["steps"][2]["start"]
    assert s["steps"][2]["window"]["start"] == pytest.approx(start + 3.0)
    assert s["steps"][1]["window"]["start"] == pytest.approx(run["steps"][1]["start"] + run["settle_s"])


def test_client_io_needs_the_clients_own_time_to_matter_beside_the_wait(tmp_path):
    """A write time that rose many times over but stays a few ms beside a wait of seconds is no
    bottleneck (CI saw "client_io" for wyoming-piper's 2 -> 7 ms of writing beside a 1.9 s wait)."""
    import copy

    from tts_knee.analysis.diagnosis import CLIENT_IO_SHARE, diagnose

    s = analyze(load(build_run(tmp_path / "r", SCENARIOS["client_io"][0])))
    assert s["diagnosis"]["kind"] == "client_io"
    levels = copy.deepcopy(s["levels"])
    k = s["knee"]["index"]
    wait = levels[k]["latency_ms"]["p50"]
    # the same rise in ratio (and so past LATENCY_RISE), scaled down under a quarter of the wait
    scale = 0.5 * CLIENT_IO_SHARE * wait / (levels[k]["write_ms"]["p50"] - levels[0]["write_ms"]["p50"])
    for lv in levels:
        lv["write_ms"] = {q: v * scale for q, v in lv["write_ms"].items()}
    assert levels[k]["write_ms"]["p50"] / levels[0]["write_ms"]["p50"] > 1.5
    d = diagnose(levels, s["knee"], s["gpu_memory_creep"], True)
    assert d["kind"] != "client_io", d
