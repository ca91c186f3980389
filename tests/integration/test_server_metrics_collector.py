"""The server's own metrics on the collector side: exposition from vLLM, Triton, SGLang, TGI
and dcgm-exporter (tests/fixtures, quoted from their docs and source), rates over the time that
passed, the series cap, roles, gaps and warnings, and the collector process with --scrape and
--dcgm against real local endpoints."""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from procs import get_json, spawn
from tts_knee.collectors.dcgm import DcgmGpus, gpus_from_text
from tts_knee.collectors.exposition import ExpositionError, Reader, parse
from tts_knee.collectors.nvml import GPU_FIELDS
from tts_knee.collectors.scrape import Endpoint, Scrapes
from tts_knee.runformat.metric_roles import roles

FIXTURES = Path(__file__).parent.parent / "fixtures"
MODEL = 'model_name="unsloth/Llama-3.2-1B-Instruct"'


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class Page:
    """A local /metrics endpoint on port 0 whose body, status and delay a test sets."""

    def __init__(self, body: str = "", status: int = 200, delay_s: float = 0.0):
        self.body, self.status, self.delay_s = body, status, delay_s
        self.hits = 0
        page = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                page.hits += 1
                time.sleep(page.delay_s)
                data = page.body.encode()
                self.send_response(page.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a client that gave up on a slow page: expected here

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def page():
    pages = []

    def make(*a, **kw):
        p = Page(*a, **kw)
        pages.append(p)
        return p

    yield make
    for p in pages:
        p.close()


# -- exposition -------------------------------------------------------------------------------


def test_a_counter_has_no_rate_right_after_a_gap():
    # scrapes 1 s apart, then two that failed (no reading), then 1 s apart again: the rise over
    # the gap is not the rate at its end, so that reading has none; the next one has it again
    page = "# TYPE tts_requests_total counter\ntts_requests_total {}\n"
    r = Reader(max_gap_s=2.0)
    assert r.read(page.format(10), t=0.0) == {}
    assert r.read(page.format(20), t=1.0) == {"tts_requests_total": 10.0}
    assert r.read(page.format(200), t=4.0) == {}
    assert r.read(page.format(205), t=5.0) == {"tts_requests_total": 5.0}
    # without a limit (a reader told nothing of its interval) the rise spans the gap
    r = Reader()
    r.read(page.format(20), t=1.0)
    assert r.read(page.format(200), t=4.0) == {"tts_requests_total": 60.0}


def test_vllm_series_named_as_in_the_exposition_counters_as_rates_over_real_time():
    r = Reader()
    first = r.read(fixture("vllm_metrics.txt"), t=100.0)
    assert first[f"vllm:num_requests_waiting{{{MODEL}}}"] == 12.0
    assert first[f"vllm:num_requests_running{{{MODEL}}}"] == 8.0
    assert first[f"vllm:gpu_cache_usage_perc{{{MODEL}}}"] == 0.35
    # a counter's first scrape has no rate: absent, not 0; buckets are never kept
    assert not any("request_success_total" in k for k in first)
    assert not any("_bucket" in k for k in first)
    later = fixture("vllm_metrics.txt").replace(
        f'vllm:request_success_total{{finished_reason="stop",{MODEL}}} 100.0',
        f'vllm:request_success_total{{finished_reason="stop",{MODEL}}} 112.0',
    )
    later = later.replace(
        f"vllm:iteration_tokens_total_sum{{{MODEL}}} 0.0", f"vllm:iteration_tokens_total_sum{{{MODEL}}} 60.0"
    )
    later = later.replace(
        f"vllm:iteration_tokens_total_count{{{MODEL}}} 3.0", f"vllm:iteration_tokens_total_count{{{MODEL}}} 7.0"
    )
    second = r.read(later, t=102.5)  # 2.5 s actually passed (not the 1 s interval)
    assert second[f'vllm:request_success_total{{finished_reason="stop",{MODEL}}}'] == pytest.approx(12 / 2.5)
    assert second[f"vllm:iteration_tokens_total_count{{{MODEL}}}"] == pytest.approx(4 / 2.5)
    assert second[f"vllm:iteration_tokens_total_mean{{{MODEL}}}"] == pytest.approx(60 / 4)
    # a counter that went down (server restart) gives no rate, not a negative one
    third = r.read(fixture("vllm_metrics.txt"), t=103.5)
    assert not any("request_success_total" in k for k in third)


def test_sglang_triton_tgi_roles_from_their_own_text():
    sg = roles(Reader().read(fixture("sglang_metrics.txt"), 0.0))
    assert sg == {
        "queue_depth": ("sglang:num_queue_reqs", 2826.0),
        "running": ("sglang:num_running_reqs", 162.0),
        "kv_cache_usage": ("sglang:token_usage", 0.28),
    }
    tgi = roles(Reader().read(fixture("tgi_metrics.txt"), 0.0))
    assert tgi == {"queue_depth": ("tgi_queue_size", 6.0), "batch_size": ("tgi_batch_current_size", 4.0)}
    vl = roles(Reader().read(fixture("vllm_metrics.txt"), 0.0))
    assert vl["queue_depth"] == ("vllm:num_requests_waiting", 12.0)
    assert vl["kv_cache_usage"] == ("vllm:gpu_cache_usage_perc", 0.35)
    # Triton: queue from the pending gauge, batch size = inferences per execution (rates)
    r = Reader()
    text = fixture("triton_metrics.txt")
    assert roles(r.read(text, 10.0)) == {"queue_depth": ("nv_inference_pending_request_count", 0.0)}
    busy = text.replace(
        'nv_inference_count{model="tensorrt_llm",version="1"} 0',
        'nv_inference_count{model="tensorrt_llm",version="1"} 64',
    ).replace(
        'nv_inference_exec_count{model="tensorrt_llm",version="1"} 0',
        'nv_inference_exec_count{model="tensorrt_llm",version="1"} 8',
    )
    got = roles(r.read(busy, 12.0))
    assert got["batch_size"] == ("nv_inference_count/nv_inference_exec_count", 8.0)


def test_summary_quantiles_and_created_are_left_out_and_nan_is_absent():
    out = Reader().read(fixture("tgi_metrics.txt") + "tgi_odd NaN\n", 0.0)
    assert "tgi_odd" not in out
    assert not any("quantile" in k for k in out)
    assert out["tgi_batch_current_max_tokens"] == 8192


def test_match_and_cap_keep_known_series_first_and_say_how_many_were_dropped():
    many = "".join(f"# TYPE other_{i} gauge\nother_{i} {i}\n" for i in range(30))
    text = many + fixture("vllm_metrics.txt")
    r = Reader(max_series=5)
    out = r.read(text, 0.0)
    assert f"vllm:num_requests_waiting{{{MODEL}}}" in out
    assert f"vllm:num_requests_running{{{MODEL}}}" in out
    assert r.dropped == 30 + 5 - 5  # 30 others + 5 vLLM series (a histogram is one), 5 kept
    picked = Reader(match=r"^vllm:num_requests").read(text, 0.0)
    assert set(picked) == {f"vllm:num_requests_waiting{{{MODEL}}}", f"vllm:num_requests_running{{{MODEL}}}"}


def test_malformed_exposition_is_one_error():
    with pytest.raises(ExpositionError):
        parse("<html><body>Bad Gateway</body></html>\n")


# -- dcgm-exporter ----------------------------------------------------------------------------

MIB = 1024 * 1024


def test_two_dcgm_gpus_come_out_exactly_as_gpus_entries():
    gpus = gpus_from_text(fixture("dcgm_two_gpus.txt"))
    assert gpus == [
        {
            "index": 0,
            "mig_index": None,
            "uuid": "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",
            "name": "Tesla V100-SXM2-32GB",
            "lost": False,
            "util_percent": 98,
            "mem_used_bytes": 30256 * MIB,
            "mem_total_bytes": (30256 + 2254) * MIB,
            "power_w": 243.517,
            "temp_c": 61,
            "sm_clock_mhz": 1530,
            "clock_event_reasons": None,
            "proc_mem_bytes": None,
        },
        {
            "index": 1,
            "mig_index": None,
            "uuid": "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5",
            "name": "Tesla V100-SXM2-32GB",
            "lost": False,
            "util_percent": 0,
            "mem_used_bytes": 3 * MIB,
            "mem_total_bytes": (3 + 32507) * MIB,
            "power_w": 41.305,
            "temp_c": 34,
            "sm_clock_mhz": 135,
            "clock_event_reasons": None,
            "proc_mem_bytes": None,
        },
    ]
    assert set(gpus[0]) == {"index", "mig_index", "uuid", "name", "lost", *GPU_FIELDS}


def test_dcgm_missing_fields_are_null_and_reserved_memory_counts_in_the_total():
    text = (
        "\n".join(
            line
            for line in fixture("dcgm_two_gpus.txt").splitlines()
            if "FB_FREE" not in line and "POWER_USAGE" not in line
        )
        + "\n"
    )
    gpus = gpus_from_text(text)
    assert gpus[0]["mem_total_bytes"] is None and gpus[0]["power_w"] is None
    assert gpus[0]["mem_used_bytes"] == 30256 * MIB
    reserved = (
        fixture("dcgm_two_gpus.txt")
        + 'DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="GPU-a6158b59-2c1e-1e63-0068-9178c4298abd"} 258\n'
    )
    assert gpus_from_text(reserved)[0]["mem_total_bytes"] == (30256 + 2254 + 258) * MIB


def test_dcgm_down_keeps_the_gpus_with_null_readings(page):
    p = page(fixture("dcgm_two_gpus.txt"))
    d = DcgmGpus(p.url, interval_s=0.1, timeout_s=0.5)
    d.endpoint.scrape_once()
    assert [g["util_percent"] for g in d.sample()] == [98, 0]
    d.endpoint._latest = (time.monotonic() - 60, d.endpoint._latest[1])  # long ago
    gone = d.sample()
    assert [g["uuid"] for g in gone] == [
        "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",
        "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5",
    ]
    assert all(g[f] is None for g in gone for f in GPU_FIELDS)


# -- endpoints: gaps and one warning ----------------------------------------------------------


def test_unreachable_endpoint_is_a_gap_and_one_warning(caplog, page):
    p = page("x 1\n")
    url = p.url
    p.close()
    e = Endpoint(url, interval_s=0.05, timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="collectors"):
        for _ in range(5):
            e.scrape_once()
    assert e.latest() is None
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "unreachable" in warned[0] and url in warned[0]


def test_malformed_answer_is_one_sentence_and_recovery_is_noted(caplog, page):
    p = page("<html>502 Bad Gateway</html>\n")
    e = Endpoint(p.url, interval_s=0.05, timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="collectors"):
        for _ in range(3):
            e.scrape_once()
        assert e.latest() is None
        p.body = "# TYPE up gauge\nup 1\n"
        e.scrape_once()
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 2
    assert "did not answer with Prometheus text exposition" in msgs[0]
    assert msgs[0].count(". ") == 0 and msgs[0].endswith(".")
    assert "answers again" in msgs[1]
    assert e.latest() == {"up": 1.0}


def test_a_slow_endpoint_never_delays_reading_the_latest(page):
    fast, slow = page("# TYPE a gauge\na 1\n"), page("# TYPE b gauge\nb 2\n", delay_s=1.5)
    s = Scrapes([fast.url, slow.url], interval_s=0.1, timeout_s=0.3)
    s.start()
    try:
        time.sleep(0.5)
        deadline = time.monotonic() + 10  # a busy machine may not have scraped the fast one yet
        while "a" not in (s.metrics() or {}) and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        m = s.metrics()
        # < 0.25 s (was 0.05, which a descheduled thread can pass): still under the slow endpoint's
        # 0.3 s timeout, so a read that waited on its scrape would show
        assert time.monotonic() - t0 < 0.25
        assert m == {"a": 1.0}  # the slow one times out: a gap, not a zero
    finally:
        s.stop()


# -- the collector process --------------------------------------------------------------------

CPU_ONLY = {"TTS_KNEE_NVML_MODULE": "fake_nvml", "PYTHONPATH": "tests", "FAKE_NVML_ABSENT": "library"}


def _samples(url: str) -> list[dict]:
    return get_json(f"{url}/samples?since=0")["samples"]


def test_collector_process_scrape_and_dcgm(page, refused_port):
    srv = page(fixture("vllm_metrics.txt"))
    dcgm = page(fixture("dcgm_two_gpus.txt"))
    down_url = f"http://127.0.0.1:{refused_port}/metrics"
    args = [
        "tts_knee.collectors",
        "--port",
        "0",
        "--interval",
        "0.2",
        "--scrape",
        srv.url,
        "--scrape",
        down_url,
        "--dcgm",
        dcgm.url,
        "--scrape-timeout",
        "0.5",
    ]
    with spawn(args, env={"TTS_KNEE_NVML_MODULE": "no_such_nvml_module"}) as proc:
        deadline = time.monotonic() + 10
        samples = []
        while time.monotonic() < deadline:
            samples = [s for s in _samples(proc.url) if s.get("metrics")]
            if len(samples) >= 3:
                break
            time.sleep(0.2)
        last = samples[-1]
        states = {h["url"]: h["state"] for h in get_json(f"{proc.url}/healthz")["scrapes"]}
        assert states == {srv.url: "ok", down_url: "down"}
        assert last["metrics"][f"vllm:num_requests_waiting{{{MODEL}}}"] == 12.0
        assert last["gpus"] == gpus_from_text(fixture("dcgm_two_gpus.txt"))
        out = proc.output()
    # one warning for the unreachable endpoint; NVML never touched (so never named)
    assert out.count("is unreachable") == 1
    assert "NVML" not in out
