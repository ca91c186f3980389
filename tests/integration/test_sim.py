"""The simulator as a real process on port 0, driven over real HTTP."""

from __future__ import annotations

import email.utils
import http.client
import io
import json
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil
import pytest

from procs import ROOT, spawn

FAST = ["--base-ms", "5", "--per-char-ms", "0", "--jitter", "0"]


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    ttfb_s: float  # request sent -> first body byte
    total_s: float  # request sent -> body read

    def json(self):
        return json.loads(self.body)

    def timing(self) -> dict[str, float]:
        found = re.findall(r"(\w+);dur=([\d.]+)", self.headers.get("Server-Timing", ""))
        return {name: float(ms) for name, ms in found}


def request(
    url: str, path: str, body=None, method: str = "POST", timeout: float = 10, headers: dict | None = None
) -> Reply:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        t0 = time.monotonic()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        first = resp.read(1)
        t1 = time.monotonic()
        rest = resp.read()
        return Reply(resp.status, resp.headers, first + rest, t1 - t0, time.monotonic() - t0)
    finally:
        conn.close()


def tts(url: str, text: str, **kw) -> Reply:
    return request(url, "/tts", {"text": text}, **kw)


def concurrently(n: int, fn, *args) -> list:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: fn(*args), range(n)))


def wav_seconds(body: bytes) -> float:
    with wave.open(io.BytesIO(body)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        return w.getnframes() / w.getframerate()


def test_wav_is_valid_and_grows_with_text():
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST]) as sim:
        short, long = tts(sim.url, "Hi."), tts(sim.url, "x" * 50)
        for r in (short, long):
            assert r.status == 200
            assert r.headers["Content-Type"] == "audio/wav"
            assert r.headers["X-Request-Id"]
            assert set(r.timing()) == {"queue", "infer", "total"}
        assert wav_seconds(short.body) == pytest.approx(0.2, abs=0.001)  # the minimum
        assert wav_seconds(long.body) == pytest.approx(3.0, abs=0.001)  # 60 ms per char
        with wave.open(io.BytesIO(long.body)) as w:
            assert w.getframerate() == 24000
            assert max(w.readframes(2000)) > 0  # not silence


def test_endpoints_and_bad_requests():
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST, "--sample-rate", "16000"]) as sim:
        piper = request(sim.url, "/synthesize", {"text": "hello"})
        assert piper.status == 200 and wav_seconds(piper.body) == pytest.approx(0.3, abs=0.001)
        openai = request(
            sim.url,
            "/v1/audio/speech",
            {"model": "tts-1", "input": "hello", "voice": "alloy", "response_format": "pcm"},
        )
        assert openai.status == 200 and openai.headers["Content-Type"] == "audio/pcm"
        assert len(openai.body) == int(0.3 * 16000) * 2  # raw PCM16, no header
        sent = request(sim.url, "/tts", {"text": "hi"}, headers={"X-Request-Id": "abc-1"})
        assert sent.headers["X-Request-Id"] == "abc-1"  # echoed when the client sends one
        assert tts(sim.url, "hi").headers["X-Request-Id"] != tts(sim.url, "hi").headers["X-Request-Id"]

        bad = [
            request(sim.url, "/tts", {"text": ""}),
            request(sim.url, "/tts", {"nope": "x"}),
            request(sim.url, "/tts", b"{not json"),
            request(sim.url, "/v1/audio/speech", {"input": "hi", "response_format": "mp3"}),
        ]
        for r in bad:
            assert r.status == 400 and "error" in r.json()
        assert "mp3" in bad[-1].json()["error"]
        assert request(sim.url, "/tts", method="GET").status == 405
        assert request(sim.url, "/health", method="POST").status == 405
        assert request(sim.url, "/nowhere", {"text": "hi"}).status == 404


def test_slots_queue_fifo_and_server_timing():
    service_ms = 300
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "2",
            "--base-ms",
            str(service_ms),
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        replies = sorted(concurrently(4, tts, sim.url, "hello"), key=lambda r: r.total_s)
    assert all(r.status == 200 for r in replies)
    first, second = replies[:2], replies[2:]
    # The service time is a sleep, which a busy machine ends late, never early: durations that
    # hold it are bounded from below; only the server's queue time (no sleep of its own for the
    # first two) keeps an upper bound, half a service time, between "not queued" and "queued".
    for r in first:
        assert r.total_s >= 0.299  # the 300 ms service, less 1 ms of rounding; late is fine
        assert r.timing()["queue"] < 150  # not queued: under half the 300 ms it would be
    for r in second:  # waited one service time for a slot
        # its queue (>= 240, below) plus its 299 ms service; lower bound only (late timers)
        assert r.total_s >= 0.539
        # waited for the first two's service (a sleep: no upper bound), less 60 ms for the
        # client threads' requests arriving a little apart
        assert r.timing()["queue"] >= service_ms - 60
        # the server's own total holds its queue then its whole service time (1 ms rounding)
        assert r.timing()["total"] - r.timing()["queue"] >= service_ms - 1
    for r in replies:
        assert r.timing()["infer"] == pytest.approx(service_ms)


def test_queue_limit_gives_503_with_retry_after_and_health_counts():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "1",
            "--queue-limit",
            "1",
            "--base-ms",
            "400",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        replies = concurrently(4, tts, sim.url, "hello")
        health = request(sim.url, "/health", method="GET").json()
    statuses = sorted(r.status for r in replies)
    assert statuses == [200, 200, 503, 503]
    for r in replies:
        if r.status == 503:
            assert int(r.headers["Retry-After"]) >= 1
            assert "error" in r.json()
    assert health == {"status": "ok", "slots": 1, "busy": 0, "queued": 0, "served": 2, "rejected": 2}


def test_health_shows_busy_and_queued():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "1",
            "--base-ms",
            "500",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(tts, sim.url, "hello") for _ in range(3)]
            time.sleep(0.25)
            during = request(sim.url, "/health", method="GET").json()
            assert all(f.result().status == 200 for f in futures)
        after = request(sim.url, "/health", method="GET").json()
    assert (during["busy"], during["queued"], during["served"]) == (1, 2, 0)
    assert (after["busy"], after["queued"], after["served"]) == (0, 0, 3)


@pytest.mark.parametrize("fmt", ["seconds", "http-date"])
def test_rate_limit_gives_429_with_retry_after(fmt):
    with spawn(
        ["tts_knee.testbed.sim", "--port", "0", *FAST, "--rate", "0.5", "--burst", "2", "--retry-after-format", fmt]
    ) as sim:
        replies = [tts(sim.url, "hi") for _ in range(3)]
        health = request(sim.url, "/health", method="GET").json()
    assert [r.status for r in replies] == [200, 200, 429]
    raw = replies[2].headers["Retry-After"]
    if fmt == "seconds":
        assert raw == "2"  # one token at 0.5/s
    else:
        delta = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
        assert 0 < delta <= 3
    assert health["rejected"] == 1 and health["served"] == 2


def test_streaming_sends_first_chunk_early_with_placeholder_sizes():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--stream",
            "--first-chunk-ms",
            "50",
            "--base-ms",
            "600",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        r = tts(sim.url, "x" * 20)
    assert r.status == 200 and r.headers["Transfer-Encoding"] == "chunked"
    # a generous 0.4 s between the 50 ms first chunk and the 600 ms whole body (which a late
    # timer only lengthens); the body's end is bounded from below only
    assert r.ttfb_s < 0.4 and r.total_s > 0.58
    assert r.body[:4] == b"RIFF" and r.body[36:40] == b"data"
    assert struct.unpack("<I", r.body[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", r.body[40:44])[0] == 0xFFFFFFFF
    assert (len(r.body) - 44) / 2 / 24000 == pytest.approx(1.2, abs=0.001)
    # a free slot: queue ~0, under 50 ms for a descheduled server process; infer is the plan
    assert r.timing().keys() == {"queue", "infer"} and r.timing()["infer"] == 600.0
    assert r.timing()["queue"] < 50


def test_stream_requested_per_request():
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST]) as sim:
        r = request(sim.url, "/v1/audio/speech", {"input": "hello", "stream": True})
    assert r.headers["Transfer-Encoding"] == "chunked"
    assert struct.unpack("<I", r.body[40:44])[0] == 0xFFFFFFFF


def test_oom_above_gives_500_cuda_out_of_memory():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--oom-above",
            "1",
            "--base-ms",
            "400",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
        ]
    ) as sim:
        replies = concurrently(2, tts, sim.url, "hello")
        alone = tts(sim.url, "hello")
    assert sorted(r.status for r in replies) == [200, 500]
    oom = next(r for r in replies if r.status == 500)
    assert "CUDA out of memory" in oom.body.decode()
    assert alone.status == 200


def test_leak_grows_the_resident_set_at_its_rate():
    """--leak-mb-per-min is a real leak: the process's RSS, as a collector reads it, grows by
    the rate; without it, serving the same requests it stays put."""

    def growth_mb_per_min(*knobs):
        with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST, *knobs]) as sim:
            proc = psutil.Process(sim.pid)
            tts(sim.url, "hello")
            time.sleep(1.0)
            r0, t0 = proc.memory_info().rss, time.monotonic()
            for _ in range(8):
                tts(sim.url, "hello")
                time.sleep(0.5)
            return (proc.memory_info().rss - r0) / 1e6 / (time.monotonic() - t0) * 60

    assert growth_mb_per_min("--leak-mb-per-min", "120") == pytest.approx(120, rel=0.2)
    assert abs(growth_mb_per_min()) < 12


def _one_fault(fault: str, *extra: str) -> Reply | Exception:
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST, "--fault", fault, *extra]) as sim:
        try:
            return tts(sim.url, "x" * 20)
        except (http.client.HTTPException, OSError) as err:
            return err


@pytest.mark.parametrize("fault", ["html", "json", "empty", "garbage"])
def test_fault_wrong_200_bodies(fault):
    r = _one_fault(fault)
    assert r.status == 200
    ctype = r.headers["Content-Type"]
    if fault == "html":
        assert ctype == "text/html" and r.body.startswith(b"<!doctype html>")
    elif fault == "json":
        assert ctype == "application/json" and "error" in r.json()
    elif fault == "empty":
        assert ctype == "audio/wav" and r.body == b""
    else:
        assert ctype == "audio/wav" and len(r.body) > 1000 and not r.body.startswith(b"RIFF")


def test_fault_reset_breaks_the_body():
    err = _one_fault("reset")
    assert isinstance(err, (http.client.IncompleteRead, ConnectionError)), err


def test_fault_truncate_sends_a_short_wav_and_closes():
    r = _one_fault("truncate")
    assert r.status == 200 and r.headers["Connection"] == "close"
    promised = struct.unpack("<I", r.body[40:44])[0]
    assert promised == int(1.2 * 24000) * 2 > len(r.body) - 44


def test_fault_stall_delays_the_first_byte():
    r = _one_fault("stall", "--stall-s", "0.6")
    assert r.status == 200 and r.ttfb_s >= 0.6
    assert wav_seconds(r.body) == pytest.approx(1.2, abs=0.001)


@pytest.mark.parametrize("fault, value", [("bad-retry-after", None), ("huge-retry-after", "999999")])
def test_fault_retry_after(fault, value):
    r = _one_fault(fault)
    assert r.status == 429
    raw = r.headers["Retry-After"]
    if value:
        assert raw == value
    else:
        assert raw and not raw.isdigit() and not _parses_as_date(raw)


def _parses_as_date(raw: str) -> bool:
    try:
        return email.utils.parsedate_to_datetime(raw) is not None
    except (TypeError, ValueError):
        return False


def test_fault_close_answers_then_closes():
    r = _one_fault("close")
    assert r.status == 200 and r.headers["Connection"] == "close"
    assert wav_seconds(r.body) == pytest.approx(1.2, abs=0.001)


def test_fault_rate_mixes_faults_into_good_replies():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            *FAST,
            "--fault",
            "html",
            "--fault",
            "empty",
            "--fault-rate",
            "0.5",
            "--seed",
            "7",
        ]
    ) as sim:
        kinds = {_kind(tts(sim.url, "hi")) for _ in range(30)}
    assert kinds == {"wav", "html", "empty"}


def _kind(r: Reply) -> str:
    if r.headers["Content-Type"] == "text/html":
        return "html"
    return "empty" if not r.body else "wav"


@pytest.mark.parametrize(
    "args",
    [
        ["--slots", "0"],
        ["--jitter", "1.5"],
        ["--port", "70000"],
        ["--fault", "boom"],
        ["--fault-rate", "2"],
        ["--burst", "3"],
        ["--rate", "-1"],
        ["--base-ms", "fast"],
        ["--retry-after-format", "never"],
        ["--no-such-flag"],
    ],
)
def test_bad_flags_give_one_line_and_exit_2(args):
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.sim", *args], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_port_in_use_gives_one_line_and_exit_2():
    with spawn(["tts_knee.testbed.sim", "--port", "0"]) as sim:
        port = str(urlsplit(sim.url).port)
        done = subprocess.run(
            [sys.executable, "-m", "tts_knee.testbed.sim", "--port", port],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tts-knee sim: cannot listen on 127.0.0.1:{port}: it is already in use."
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_cleanly(sig):
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST]) as sim:
        assert tts(sim.url, "hi").status == 200
        assert sim.stop(sig) == 0
    out = sim.output()
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) == 2  # the listening line and the knobs line


def test_sigterm_lets_in_flight_requests_finish():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "300", "--per-char-ms", "0"]) as sim:
        box = []
        t = threading.Thread(target=lambda: box.append(tts(sim.url, "hi")))
        t.start()
        time.sleep(0.1)
        assert sim.stop(signal.SIGTERM) == 0
        t.join(5)
    assert box and box[0].status == 200


@pytest.mark.parametrize(
    "args, message",
    [
        (["--slots", "0"], "argument --slots: expected an integer >= 1, got '0'"),
        (["--port", "70000"], "argument --port: expected an integer >= 0 and <= 65535, got '70000'"),
        (["--jitter", "1"], "argument --jitter: expected a number >= 0 and < 1, got '1'"),
        (["--base-ms", "nan"], "argument --base-ms: expected a number >= 0, got 'nan'"),
    ],
)
def test_bad_numbers_keep_their_messages(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.sim", *args], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"tts-knee sim: {message}"


def test_argument_checks_are_the_testbeds_shared_ones():
    code = (
        "import tts_knee.testbed.sim.cli as s, tts_knee.testbed.args as c; "
        "print(type(s.build_parser()) is c.Parser, hasattr(s, '_number'), hasattr(s, '_Parser'))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert done.stdout.split() == ["True", "False", "False"], done.stderr
    from tts_knee.testbed.args import number

    assert number(int, 1)("3") == 3 and number(float, 0, 1, high_open=True)("0.5") == 0.5
