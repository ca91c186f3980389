"""The sustainable rate against an SLO: a real open-loop sweep against the simulator, refined to
--refine-to, recommended with the concurrency it implies; the gate at a rate and the baseline at
each offered rate, as the dashboard's exit codes say them."""

import json
import math

import pytest

from procs import dashboard, locust, locust_count, read_jsonl, spawn

RATES = "4,8,12,16,24"


def sim(service_ms: int):
    """4 slots of ``service_ms``: 4000 / service_ms requests per second at most."""
    return spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            str(service_ms),
            "--per-char-ms",
            "0",
            "--jitter",
            "0.05",
            "--seed",
            "1",
        ]
    )


def sweep(tmp_path, host, name, rates, *extra):
    run_dir = tmp_path / name
    # 80 settled requests a step: enough for the interval to bound a p95 from above (72)
    proc = locust(
        [
            "--headless",
            "-H",
            host,
            "--rates",
            rates,
            "--arrival",
            "constant",
            "--step-requests",
            "80",
            "--slo",
            "p95_ms<=400",
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
def test_the_sustainable_rate_of_four_slots_of_250_ms(tmp_path):
    with sim(250) as fast:
        run_dir, out = sweep(tmp_path, fast.url, "fast", RATES, "--refine")
    info = json.loads((run_dir / "run.json").read_text())
    plan = info["plan"]
    done = plan["decisions"][-1]
    assert done["action"] == "done", plan["decisions"]
    best = plan["max_rate"]
    failing = min(lv["rate"] for lv in plan["levels"] if lv["rate"] > best)
    # 16 req/s is the capacity: the answer lies between 12 and 16 (to within 5%), refined to 5% of the rate
    assert 12 <= best <= 16 * 1.05 and failing - best <= 0.05 * best, plan["levels"]
    assert [s["phase"] for s in info["steps"]][:5] == ["grid"] * 5 and info["steps"][5]["phase"] == "refine"
    assert "req/s fails: bisecting at" in out

    res = dashboard(run_dir, "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["slo"]["max_rate"] == best and s["slo"]["max_concurrency"] is None
    assert s["recommended_rate"] == best
    level = next(lv for lv in s["levels"] if lv["rate"] == best)
    implied = math.ceil(best * level["sched_wait_ms"]["mean"] / 1000)
    assert s["recommended_concurrency"] == implied and 3 <= implied <= 5
    assert f"Offer at most {best:g} req/s" in s["recommendation"]
    assert f"a concurrency limit of {implied}" in s["recommendation"]
    over = next(v for v in s["slo"]["steps"] if v["rate"] == 24)
    assert over["pass"] is False and any("kept growing" in f for f in over["failed"])
    html = (run_dir / "report.html").read_text()
    assert "met up to <b>" in html and "p95_ms [95% CI]" in html

    ok = dashboard(run_dir, "--require", "12/s")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("12 req/s offered: p95 ") == 1 and "holds at 12 req/s" in ok.stdout
    bad = dashboard(run_dir, "--require", "20/s")
    assert bad.returncode == 1 and "does not hold" in bad.stderr, bad.stderr
    wrong = dashboard(run_dir, "--require", "12")
    assert wrong.returncode == 2 and "is a concurrency, but" in wrong.stderr

    # the same rates against a server 40% slower, compared with this run as its baseline
    with sim(350) as slow:
        slow_dir, _ = sweep(tmp_path, slow.url, "slow", "4,8")
    reg = dashboard(slow_dir, "--baseline", run_dir, "--json")
    assert reg.returncode == 1, reg.stderr
    r = json.loads(reg.stdout)["regression"]
    assert r["compared"] == [4, 8] and r["regressed"] == [4, 8]
    assert r["steps"][0]["p50_ms"]["ratio"] == pytest.approx(1.4, rel=0.1)
    assert "Regression against fast" in reg.stderr and "at 4 req/s: p50" in reg.stderr
    same = dashboard(run_dir, "--baseline", run_dir)
    assert same.returncode == 0, same.stderr
