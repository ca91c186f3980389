"""The figures NVIDIA's riva_tts_perf_client prints, per step of every streamed run: first audio
and chunk latency (avg, p90, p95, p99 pooled over the step's streams, percentiles as the perf
client takes them: sorted[int(q n)]) and RTFX, in summary.json, the terminal and the report."""

import json

import numpy as np
import pytest

from procs import dashboard, read_jsonl
from rundirs import Model, build_run
from tts_knee.analysis.steps import riva_stats


def test_percentiles_are_the_perf_clients_nearest_rank():
    # riva_tts_perf_client: std::sort, then v[static_cast<int>(0.90 * v.size())]
    values = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0, np.nan])
    assert riva_stats(values) == {"count": 10, "avg": 5.5, "p90": 10.0, "p95": 10.0, "p99": 10.0}
    twenty = np.arange(1.0, 21.0)
    got = riva_stats(twenty)
    assert (got["p90"], got["p95"], got["p99"]) == (19.0, 20.0, 20.0)  # numpy would say 18.1, 19.05, 19.81
    assert riva_stats(np.array([np.nan])) is None


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    run = build_run(tmp_path_factory.mktemp("riva") / "run", Model(steps=(1, 2, 4), stream_capacity=5))
    judged = dashboard(run, "--no-report")
    assert judged.returncode == 0, judged.stderr
    return run, json.loads((run / "summary.json").read_text()), judged.stdout


def test_the_summary_pools_each_steps_streams(streamed):
    run, summary, _ = streamed
    records = read_jsonl(run / "requests.jsonl")
    for step in summary["steps"]:
        counted = [
            r
            for r in records
            if r["step"] == step["step"]
            and r["settled"]
            and r["final"]
            and r["ok"]
            and r["t3"] <= step["window"]["end"]
        ]
        assert len(counted) == step["streams"]["counted"] > 0
        gaps = sorted(b - a for r in counted for a, b in zip(r["chunk_at_ms"], r["chunk_at_ms"][1:]))
        chunk = step["riva"]["chunk_ms"]
        assert chunk["count"] == len(gaps)
        assert chunk["avg"] == pytest.approx(sum(gaps) / len(gaps), abs=1e-3)
        for q in (90, 95, 99):
            assert chunk[f"p{q}"] == pytest.approx(gaps[int(q / 100 * len(gaps))], abs=1e-3)
        first = sorted(r["ttfa_ms"] for r in counted)
        assert step["riva"]["first_audio_ms"]["p95"] == pytest.approx(first[int(0.95 * len(first))])
        assert step["rtfx"] == step["audio_s_per_s"] > 0


def test_the_terminal_and_the_report_show_them(streamed, tmp_path):
    run, summary, stdout = streamed
    assert "riva_tts_perf_client's figures" in stdout and "first audio avg" in stdout and "RTFX" in stdout
    top = summary["steps"][-1]
    assert f"{top['riva']['chunk_ms']['p95']:.1f}" in stdout and f"{top['rtfx']:.2f}" in stdout
    assert dashboard(run).returncode == 0
    html = (run / "report.html").read_text()
    assert "Riva&#x27;s figures" in html or "Riva's figures" in html
    assert f"{top['riva']['first_audio_ms']['p99']:.1f}" in html


def test_a_run_that_was_not_streamed_has_none(tmp_path):
    run = build_run(tmp_path / "run", Model(steps=(1, 2)))
    judged = dashboard(run, "--no-report")
    summary = json.loads((run / "summary.json").read_text())
    assert all(s["riva"] is None and s["rtfx"] is not None for s in summary["steps"])
    assert "riva_tts_perf_client" not in judged.stdout
