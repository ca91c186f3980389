"""What CI reads from ``tts-knee report``: ``--junit FILE`` (JUnit XML: a test case per SLO term and
level, per --require, per level compared with --baseline, each failure's sentence its message)
and, with ``GITHUB_STEP_SUMMARY`` set, the verdict and tables appended as Markdown. On synthetic
run directories (tests/rundirs.py): 4 slots of ~200 ms, so p95_ms<=500 holds at 1, 2 and 4 and
fails from 8."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import markdown
import pytest

from procs import dashboard, locust, spawn
from rundirs import Model, build_run

SPEC = "p95_ms<=500,error_rate<=0.01"
STEPS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    new = build_run(root / "new", Model(steps=STEPS, slo=SPEC, step_s=30))
    old = build_run(root / "old", Model(steps=STEPS, slo=SPEC, step_s=30, base_ms=120))  # faster
    return new, old


def _check_junit(root: ET.Element) -> None:
    """JUnit's structure as GitLab, Jenkins and GitHub's readers take it: <testsuites> of
    <testsuite name tests failures errors>, each of <testcase name classname>, a failed one with
    one <failure message type>; the counts agree with the cases."""
    assert root.tag == "testsuites" and root.get("name")
    total = failed = 0
    for suite in root:
        assert suite.tag == "testsuite" and suite.get("name"), suite.attrib
        assert set(suite.attrib) >= {"name", "tests", "failures", "errors"}
        cases = list(suite)
        assert cases and all(c.tag == "testcase" and c.get("name") and c.get("classname") for c in cases)
        failures = [c.find("failure") for c in cases if c.find("failure") is not None]
        assert all(set(c.tag for c in case) <= {"failure"} for case in cases)
        assert all(f.get("message") and f.get("type") for f in failures)
        assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failures)
        total, failed = total + len(cases), failed + len(failures)
    assert int(root.get("tests")) == total and int(root.get("failures")) == failed


def test_junit_names_each_failing_term_and_level_the_gate_and_the_regression(runs, tmp_path):
    new, old = runs
    junit = tmp_path / "junit.xml"
    done = dashboard(new, "--no-report", "--require", "8", "--baseline", old, "--junit", junit)
    assert done.returncode == 1, done.stderr
    root = ET.parse(junit).getroot()
    _check_junit(root)
    suites = {s.get("name"): {c.get("name"): c.find("failure") for c in s} for s in root}
    assert list(suites) == ["slo", "require", "baseline"]
    slo = suites["slo"]
    assert list(slo) == [f"{term} at {n}" for n in STEPS for term in SPEC.split(",")]
    assert [name for name, f in slo.items() if f is not None] == ["p95_ms<=500 at 8"]
    message = slo["p95_ms<=500 at 8"].get("message")
    assert message.startswith("The SLO term p95_ms<=500 fails at 8: p95_ms ") and "> 500" in message
    gate = suites["require"]["--require 8"]
    assert gate is not None and "does not hold at 8" in gate.get("message")
    regressed = {name for name, f in suites["baseline"].items() if f is not None}
    assert regressed and all(name.startswith("against old at ") for name in regressed), suites["baseline"]
    assert all("Regression against old" in suites["baseline"][n].get("message") for n in regressed)


def test_the_step_summary_renders_the_verdict_and_tables(runs, tmp_path, monkeypatch):
    new, _ = runs
    summary_file = tmp_path / "step-summary.md"
    summary_file.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    done = dashboard(new, "--no-report", "--require", "4")
    assert done.returncode == 0, done.stderr
    text = summary_file.read_text()
    assert text.startswith("earlier step\n")  # appended, as GitHub's steps share the file
    html = markdown.markdown(text, extensions=["tables"])
    assert "recommended concurrency: <strong>4</strong>" in html and "gate: <strong>holds</strong>" in html
    tables = ET.fromstring(f"<div>{html}</div>").findall("table")
    assert len(tables) == 2  # the steps, the SLO verdicts
    steps, verdicts = ([[c.text for c in row] for row in t.iter("tr")] for t in tables)
    assert steps[0][:3] == ["step", "conc", "req"] and [row[1] for row in steps[1:]] == [str(n) for n in STEPS]
    assert verdicts[0] == ["concurrency", "verdict", "why"]
    assert [row[:1] for row in verdicts[1:]] == [[str(n)] for n in STEPS]
    assert "FAIL" in ET.tostring(tables[1], encoding="unicode") and "p95_ms" in verdicts[-1][2]


def test_a_run_with_junit_judges_itself_once_it_ends(tmp_path, monkeypatch):
    summary_file = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "20", "--per-char-ms", "0"]) as sim:
        done = locust(
            ["--headless", "-H", sim.url, "--steps", "1,2", "--step-time", "1", "--settle-time", "0"]
            + ["--slo", "p95_ms<=1,error_rate<=0.01", "--run-dir", str(tmp_path / "run"), "--junit", "junit.xml"],
            cwd=tmp_path,
            timeout=60,
        )
    assert done.returncode == 0, done.stdout[-3000:]
    root = ET.parse(tmp_path / "junit.xml").getroot()
    _check_junit(root)
    failed = [c.get("name") for s in root for c in s if c.find("failure") is not None]
    assert failed == ["p95_ms<=1 at 1", "p95_ms<=1 at 2"]  # 20 ms a request: never within 1 ms
    assert "### SLO `p95_ms<=1,error_rate<=0.01`" in summary_file.read_text()
