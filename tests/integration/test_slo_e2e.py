"""The SLO gate end to end: a sweep against the simulator (5 slots of 250 ms), then
``tts-knee report RUN --slo 'p95_ms<=400' --require N``."""

import json

from procs import dashboard, locust, spawn

SIM = ["--slots", "5", "--base-ms", "250", "--per-char-ms", "0", "--jitter", "0.05"]


def _gate(run, n):
    return dashboard(run, "--slo", "p95_ms<=400", "--require", n, "--no-report")


def test_require_on_a_real_sweep(tmp_path):
    run = tmp_path / "run"
    with spawn(["tts_knee.testbed.sim", "--port", "0", *SIM]) as sim:
        # 80 requests a step: a p95 needs 72 before anything bounds it from above
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--steps",
                "1,2,4,8",
                "--step-requests",
                "80",
                "--step-time",
                "60",
                "--run-dir",
                str(run),
            ],
            timeout=150,
        )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout
    holds = _gate(run, 4)
    assert holds.returncode == 0, holds.stdout + holds.stderr
    assert "4 concurrent: p95 " in holds.stdout and "<= 400 ms" in holds.stdout
    fails = _gate(run, 8)
    assert fails.returncode == 1, fails.stdout + fails.stderr
    assert "does not hold at 8: p95_ms" in fails.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["slo"]["max_concurrency"] == 4 == summary["recommended_concurrency"]
    for level in summary["levels"]:
        lo, hi = level["latency_ms"]["p95_ci"]
        assert lo <= level["latency_ms"]["p95"] <= hi
