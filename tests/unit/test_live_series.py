"""deploy/grafana/'s board and the manual's table of the live series (runformat.live_series).

The board is checked without a Grafana (none installs offline from Debian or PyPI): its
structure as Grafana's dashboard JSON lays it out, and every series its queries name is one that
tts-knee's live metrics or the collector (collectors.http) export. tests/external/test_prometheus.py
runs each of its queries on a real Prometheus."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from tts_knee.collectors.http import render_metrics
from tts_knee.runformat import live_series

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tts-knee-live.json"
SERIES_NAME = re.compile(r"\btts_knee_[a-z0-9_]+")
PANEL_TYPES = {"row", "timeseries", "bargauge", "stat", "table"}
GRID_WIDTH = 24


def board() -> dict:
    return json.loads(BOARD.read_text())


def collector_names() -> set[str]:
    """The sample names of the collector's /metrics, a GPU and a watched process among them."""
    gpu = {
        "index": 0,
        "uuid": "GPU-0",
        "util_percent": 50.0,
        "mem_used_bytes": 1.0,
        "mem_total_bytes": 2.0,
        "power_w": 100.0,
        "temp_c": 60.0,
        "sm_clock_mhz": 1400,
        "proc_mem_bytes": 1.0,
        "clock_event_reasons": ["sw_power_cap"],
    }
    sample = {
        "ts": 1.0,
        "cpu_percent": 10.0,
        "cpu_max_core_percent": 20.0,
        "mem_used_bytes": 1.0,
        "mem_total_bytes": 2.0,
        "proc": {"pid": 1, "cpu_percent": 5.0, "rss_bytes": 1.0, "num_children": 0},
        "gpus": [gpu],
    }
    sampler = SimpleNamespace(latest=lambda: sample, count=1, missed_ticks=0, last_sample_s=0.01, nvml_available=True)
    text = render_metrics(sampler)
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def targets(panel: dict) -> list[dict]:
    return panel.get("targets", [])


def test_the_board_is_laid_out_as_grafana_reads_it():
    b = board()
    assert isinstance(b["schemaVersion"], int) and b["uid"] and b["title"]
    assert [v["name"] for v in b["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in b["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    taken: set[tuple[int, int]] = set()
    for p in b["panels"]:
        assert p["type"] in PANEL_TYPES, p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= GRID_WIDTH and g["h"] > 0, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert targets(p) and p["description"], p["title"]
        refs = [t["refId"] for t in targets(p)]
        assert len(refs) == len(set(refs)) and all(t["expr"] for t in targets(p)), p["title"]


def test_every_series_the_board_reads_is_exported():
    exported = live_series.sample_names() | collector_names()
    read = {name for p in board()["panels"] for t in targets(p) for name in SERIES_NAME.findall(t["expr"])}
    assert read and read <= exported, read - exported
    # the run's figures and the server's are on it: steps, outcomes, wait, TTFA, underruns, GPU, CPU
    for name in (
        "tts_knee_step",
        "tts_knee_attempts_total",
        "tts_knee_wait_seconds_bucket",
        "tts_knee_ttfa_seconds_bucket",
        "tts_knee_underrun_seconds_bucket",
        "tts_knee_retries_total",
        "tts_knee_speech_wer_ratio_sum",
        "tts_knee_gpu_utilization_ratio",
        "tts_knee_cpu_utilization_ratio",
    ):
        assert name in read, name


def test_the_manual_lists_every_live_series():
    page = (Path(__file__).resolve().parents[2] / "docs" / "live-metrics.md").read_text()
    assert live_series.reference() in page


def test_a_listened_clips_similarity_and_mos_are_histograms_by_step():
    from tts_knee.locustfiles.metrics import LiveMetrics

    metrics = LiveMetrics()
    metrics.start_run("r", streamed=False)
    for similarity, mos in ((1.0, 3.4), (0.45, 2.2)):
        metrics.observe_judged({"step": 2, "metric": "wer", "error": 0.0, "similarity": similarity, "mos": mos})
    metrics.observe_judged({"step": 2, "metric": "wer", "error": 0.5, "similarity": None, "mos": None})
    samples = {
        (s.name, s.labels.get("le")): s.value
        for family in text_string_to_metric_families(metrics.text())
        for s in family.samples
        if s.labels.get("step") == "2"
    }
    assert samples["tts_knee_speech_similarity_ratio_count", None] == 2
    assert samples["tts_knee_speech_similarity_ratio_sum", None] == 1.45
    assert samples["tts_knee_speech_similarity_ratio_bucket", "0.5"] == 1
    assert samples["tts_knee_speech_mos_count", None] == 2
    assert samples["tts_knee_speech_mos_bucket", "2.5"] == 1
    assert samples["tts_knee_speech_wer_ratio_count", None] == 3
