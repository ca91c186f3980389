"""Dashboard analysis, report and CLI on synthetic run directories (tests/rundirs.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dashboard.knee import find_knee
from dashboard.summary import analyze, load
from rundirs import SCENARIOS, Model, build_run

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "dashboard", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


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
    for k in ("step", "concurrency", "requests", "ok", "failed", "error_rate", "throughput_rps", "latency_ms",
              "ttfb_ms", "write_ms", "retries", "throttled", "status_counts", "server", "client", "e2e_ms"):
        assert k in step
    assert set(step["latency_ms"]) >= {"mean", "p50", "p90", "p95", "p99", "max"}
    assert step["server"]["gpu_util_mean"] is not None and step["server"]["gpu_mem_peak_bytes"] > 0
    assert {"concurrency", "methods", "agree"} <= set(s["knee"])
    assert "latency_vs_lowest" in s["knee"]["agree"] and "piecewise" in s["knee"]["methods"]
    assert s["usl"]["peak_concurrency"] and 3 < s["usl"]["peak_concurrency"] < 16
    assert all(x["ok"] for x in s["little_law"])
    # throughput divides by the measured window (~10 s settled), not the 12 s step
    w = step["window"]["duration_s"]
    assert 9 < w < 10.5 and step["throughput_rps"] == pytest.approx(step["ok"] / w)


def _step(c, p50, p95=None, rps=None, fail=0.0):
    return {"concurrency": c, "requests": 100, "ok": 100, "attempt_failure_rate": fail,
            "latency_ms": {"p50": p50, "p95": p95 or p50 * 1.5}, "e2e_ms": None,
            "throughput_rps": rps if rps is not None else c / p50 * 1000}


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


def test_missing_resources(tmp_path):
    s = analyze(load(build_run(tmp_path / "r", Model(resources=False))))
    assert s["steps"][0]["server"] is None
    assert s["diagnosis"]["kind"] == "compute_bound" and s["diagnosis"]["resource_data"] is False
    text = " ".join(s["diagnosis"]["evidence"])
    assert "concurrency_limit" in text and "No resource samples" in text


def test_run_in_progress(tmp_path):
    p = build_run(tmp_path / "r", Model(in_progress=True))
    s = analyze(load(p))
    assert s["run"]["in_progress"] is True and s["incomplete_last_line"]["requests"] is True
    assert s["steps"][-1]["requests"] > 0 and s["knee"]["concurrency"] == 8
    r = _run(p, "--no-report")
    assert r.returncode == 0 and "(in progress)" in r.stdout


def test_cli_table_summary_and_report(tmp_path):
    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    r = _run(p)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for word in ("conc", "p95", "ttfb p50", "GPU%", "knee: 8", "diagnosis: compute_bound",
                 "recommended concurrency: 4", "report:"):
        assert word in out
    summary = json.loads((p / "summary.json").read_text())
    assert summary["diagnosis"]["kind"] == "compute_bound"
    html = (p / "report.html").read_text()
    assert html.count("<script type=\"text/javascript\">/**\n* plotly.js") <= 1 and "Plotly.newPlot" in html
    assert len(html) < 8_000_000
    j = _run(p, "--json", "--no-report")
    assert json.loads(j.stdout)["recommended_concurrency"] == 4


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
    p = build_run(tmp_path / "r", Model(text_ids=[evil, "</script><img src=x onerror=alert(1)>", "c"],
                                        error_from=8, error_text=f"boom {evil}"))
    s = analyze(load(p))
    from dashboard.report import report_html
    from dashboard.summary import load as ld
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
    r = subprocess.run([sys.executable, "-c", "import sys, dashboard.__main__, dashboard.serve; "
                        "print('locust' in sys.modules, 'gevent' in sys.modules)"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False False", r.stderr
