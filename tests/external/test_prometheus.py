"""Live metrics (--metrics-port) read by a real Prometheus (Debian's package; .ci/run installs
it): it scrapes a streamed run against the simulator, and the collector beside it, every second.
What PromQL reads from the step-labelled histograms is the report's figure for that step: TTFA
and wait p95 within 5 % (the buckets are 4.4 % wide, see runformat.live_series), the counts
exactly; and every query of deploy/grafana/'s board runs, with data where the run has some."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from procs import ROOT, busy_port, dashboard, free_port, get_json, http_get, locust, read_jsonl, spawn

PROMETHEUS = shutil.which("prometheus")
#: How far a quantile read from the histogram may be from summary.json's exact percentile.
TOLERANCE = 0.05


@pytest.fixture
def prometheus(tmp_path):
    """A Prometheus on loopback scraping two loopback ports each second, tts-knee's and a
    collector's: yields (API URL, tts-knee's port, the collector's port)."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    target, collector, web = free_port(), free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"- job_name: tts-knee\n  static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
        f"- job_name: collector\n  static_configs: [{{targets: ['127.0.0.1:{collector}']}}]\n"
    )
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=open(tmp_path / "prometheus.log", "w"),  # noqa: SIM115 - the child's, for its life
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http_get(f"{url}/-/ready", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url, target, collector
    finally:
        proc.kill()
        proc.wait(10)


def query(url: str, promql: str, at: float | None = None) -> list[dict]:
    params = {"query": promql, **({} if at is None else {"time": f"{at:.3f}"})}
    answer = get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode(params))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def value(url: str, promql: str) -> float:
    [result] = query(url, promql)
    return float(result["value"][1])


def board_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query on the Grafana board, Grafana's variables filled in."""
    board = json.loads((ROOT / "deploy" / "grafana" / "tts-knee-live.json").read_text())
    return [
        (p["title"], t["expr"].replace("$__rate_interval", "4s").replace("$__range", "5m"))
        for p in board["panels"]
        for t in p.get("targets", [])
    ]


#: Board queries with nothing to show in this run: no GPU, no open loop, no retries, no judge.
NO_DATA_HERE = re.compile(r"gpu_|offered_requests|retr|speech_")


def test_prometheus_reads_each_steps_ttfa_p95_within_5_percent_of_the_report(prometheus, tmp_path):
    url, port, collector_port = prometheus
    run_dir = tmp_path / "run"
    # quick answers, hundreds a step: the report's percentile and the histogram's rank differ by
    # up to one order statistic, which is far apart in a thin tail
    sim_args = ["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "10", "--per-char-ms", "0.1"]
    sim_args += ["--first-chunk-ms", "10"]
    with (
        spawn(sim_args) as sim,
        spawn(["tts_knee.collectors", "--port", str(collector_port), "--pid", str(sim.pid)]),
    ):
        done = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--tts-stream",
                "--steps",
                "4,16",
                "--step-time",
                "3",
                "--run-dir",
                str(run_dir),
                "--metrics-port",
                str(port),
            ],
            timeout=90,
        )
    assert done.returncode == 0, done.stdout
    assert f"live metrics: listening on http://127.0.0.1:{port}/metrics" in done.stdout
    report = dashboard(run_dir)
    assert report.returncode == 0, report.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    records = read_jsonl(run_dir / "requests.jsonl")

    # scraped through the run (a loaded Prometheus skips some of its 1 s scrapes: at least one a
    # step), and the last scrape came after its last record
    assert value(url, 'sum_over_time(up{job="tts-knee"}[5m])') >= 2
    assert value(url, "sum(last_over_time(tts_knee_attempts_total[5m]))") == len(records)
    for step in summary["steps"]:
        n = step["step"]

        def last(series: str, n: int = n) -> str:
            return f'last_over_time({series}{{step="{n}"}}[5m])'

        assert value(url, last("tts_knee_ttfa_seconds_count")) == step["streams"]["counted"] > 100
        assert value(url, last("tts_knee_wait_seconds_count")) == step["latency_ms"]["count"]
        for family, figure in (("ttfa_seconds", step["ttfa_ms"]), ("wait_seconds", step["latency_ms"])):
            read = value(url, f"histogram_quantile(0.95, {last('tts_knee_' + family + '_bucket')})") * 1000
            assert read == pytest.approx(figure["p95"], rel=TOLERANCE), (n, family, read, figure["p95"])
        assert value(url, last("tts_knee_step_info")) == 1
    concurrency = query(url, "last_over_time(tts_knee_step_info[5m])")
    assert sorted((r["metric"]["step"], r["metric"]["concurrency"]) for r in concurrency) == [("1", "4"), ("2", "16")]

    # the board's queries at the end of the run (a rate needs two scrapes in its 4 s, and the
    # first scrape can come seconds into the run)
    end = json.loads((run_dir / "run.json").read_text())["steps"][-1]["end"]
    for title, promql in board_queries():
        result = query(url, promql, at=end)
        assert result or NO_DATA_HERE.search(promql), (title, promql)


def test_a_busy_metrics_port_is_one_sentence_and_exit_2(tmp_path):
    # a target that answers: a run refuses an unreachable one before it would bind the port
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "10"]) as sim, busy_port() as port:
        done = locust(
            ["--headless", "-H", sim.url, "--run-dir", str(tmp_path / "run"), "--metrics-port", str(port)],
            timeout=60,
        )
    assert done.returncode == 2, done.stdout
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in done.stdout
    assert "Traceback" not in done.stdout
    assert not Path(tmp_path / "run").exists()
