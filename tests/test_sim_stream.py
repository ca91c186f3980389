"""The simulator's shared-capacity streaming model, timed over real HTTP against the process.

Ground truth the rest of tts-knee is tested against: with ``--capacity C`` each of n streams
makes audio at min(max_speed, C / n) x real time after ``--prefill-ms``, one write per chunk.
Tolerances are for a busy 2-core machine: the formula's numbers +/- 40 ms.
"""
from __future__ import annotations

import base64
import http.client
import json
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from procs import spawn

RATE = 22050
HEADER = 44
CAPACITY_5 = ["--capacity", "5", "--chunk-ms", "200", "--prefill-ms", "100"]
SHORT = "hello world"  # 11 chars x 60 ms = 0.66 s of audio: chunks of 200, 200, 200, 60 ms
LONG = "x" * 20  # 1.2 s of audio: six 200 ms chunks
TOL_S = 0.04


def frames(text: str) -> int:
    return int(max(0.2, 0.06 * len(text)) * RATE)  # as the simulator counts: 60 ms a char


@dataclass
class Streamed:
    status: int
    headers: http.client.HTTPMessage
    arrivals: list[tuple[float, bytes]]  # (seconds since the request was sent, bytes read)
    error: Exception | None = None

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.arrivals)

    @property
    def end_s(self) -> float:
        return self.arrivals[-1][0]

    def first_after(self, offset: int) -> float:
        """When the body first held more than ``offset`` bytes (WAV: 44 = first audio)."""
        seen = 0
        for at, data in self.arrivals:
            seen += len(data)
            if seen > offset:
                return at
        raise AssertionError(f"only {seen} bytes arrived")

    def events(self) -> list[str]:
        text = self.body.decode()
        return [block.removeprefix("data: ") for block in text.split("\n\n") if block]


def stream(url: str, body: dict, barrier: threading.Barrier | None = None,
           path: str = "/v1/audio/speech") -> Streamed:
    """POST ``body`` and time every read as it arrives; a broken body is kept, not raised."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.connect()
    if barrier is not None:
        barrier.wait()
    try:
        t0 = time.monotonic()
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        got = Streamed(resp.status, resp.headers, [])
        try:
            while data := resp.read1(1 << 16):
                got.arrivals.append((time.monotonic() - t0, data))
        except (http.client.HTTPException, OSError) as err:
            got.error = err
        return got
    finally:
        conn.close()


def together(n: int, url: str, body: dict) -> list[Streamed]:
    barrier = threading.Barrier(n)
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: stream(url, body, barrier), range(n)))


def pcm_of(events: list[str]) -> bytes:
    deltas = [json.loads(e) for e in events if '"speech.audio.delta"' in e]
    return b"".join(base64.b64decode(d["audio"], validate=True) for d in deltas)


@pytest.mark.parametrize("n", [1, 4])
def test_ttfa_follows_the_shared_capacity(n):
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        stream(sim.url, {"input": SHORT, "stream": True})  # warm up the process
        streams = together(n, sim.url, {"input": SHORT, "stream": True})
    want_s = 0.100 + 0.200 / (5 / n)  # 140 ms alone, 260 ms at 4
    for s in streams:
        assert s.status == 200 and s.headers["Transfer-Encoding"] == "chunked"
        assert s.first_after(HEADER) == pytest.approx(want_s, abs=TOL_S)
        # 0.66 s of audio at 5 / n x real time after the prefill
        assert s.end_s == pytest.approx(0.100 + 0.66 / (5 / n), abs=TOL_S)
        assert len(s.body) - HEADER == frames(SHORT) * 2


def test_rate_sharing_and_the_single_stream_cap():
    with spawn(["testbed.sim", "--port", "0", "--capacity", "4", "--max-speed", "2",
                "--prefill-ms", "0"]) as sim:
        alone = stream(sim.url, {"input": LONG, "stream": True})
        two = together(2, sim.url, {"input": LONG, "stream": True})
        four = together(4, sim.url, {"input": LONG, "stream": True})
    assert alone.end_s == pytest.approx(1.2 / 2, abs=TOL_S)  # capped at 2x, not 4x
    assert [s.end_s for s in two] == pytest.approx([1.2 / 2] * 2, abs=TOL_S)  # 4 / 2 = the cap
    assert [s.end_s for s in four] == pytest.approx([1.2 / 1] * 4, abs=TOL_S)  # 4 / 4 = 1x


def test_four_streams_take_four_times_as_long():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        alone = stream(sim.url, {"input": LONG, "stream": True})
        four = together(4, sim.url, {"input": LONG, "stream": True})
    assert alone.end_s - 0.1 == pytest.approx(1.2 / 5, abs=TOL_S)
    for s in four:
        assert s.end_s - 0.1 == pytest.approx(4 * 1.2 / 5, abs=TOL_S)


def test_the_rate_is_recomputed_when_a_stream_joins():
    # capacity 2x, no prefill. A starts alone at 2x; at 0.2 s B joins and both make 1x; A has
    # 0.8 s of audio left, done at 1.0 s, then B (0.4 s made) finishes its 0.8 s alone at 2x.
    with spawn(["testbed.sim", "--port", "0", "--capacity", "2", "--prefill-ms", "0"]) as sim:
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(stream, sim.url, {"input": LONG, "stream": True})
            time.sleep(0.2)
            b = stream(sim.url, {"input": LONG, "stream": True})
            a = a.result()
    assert a.first_after(HEADER) == pytest.approx(0.1, abs=TOL_S)
    assert a.end_s == pytest.approx(1.0, abs=TOL_S)
    assert b.first_after(HEADER) == pytest.approx(0.2, abs=TOL_S)  # 0.2 s of audio at 1x
    assert b.end_s == pytest.approx(1.2 - 0.2, abs=TOL_S)


def test_each_chunk_is_its_own_write_at_its_time():
    with spawn(["testbed.sim", "--port", "0", "--capacity", "1", "--prefill-ms", "50"]) as sim:
        s = stream(sim.url, {"input": SHORT, "stream": True, "response_format": "pcm"})
    # 1x real time: audio at 0.25, 0.45, 0.65 and 0.71 s (the last chunk is 60 ms)
    starts = []
    for at, _ in s.arrivals:
        if not starts or at - starts[-1] > 0.03:
            starts.append(at)
    assert starts == pytest.approx([0.25, 0.45, 0.65, 0.71], abs=TOL_S)


def test_sse_carries_the_same_pcm_as_the_wav_stream():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        wav = stream(sim.url, {"input": SHORT, "stream": True})
        sse = stream(sim.url, {"input": SHORT, "stream_format": "sse"})
    assert sse.status == 200 and sse.headers["Content-Type"] == "text/event-stream"
    events = sse.events()
    assert len(events) == 5  # four chunks, then done
    assert pcm_of(events) == wav.body[HEADER:]
    assert json.loads(events[-1]) == {"type": "speech.audio.done", "usage": {
        "input_tokens": 3, "output_tokens": 33, "total_tokens": 36}}
    assert sse.first_after(0) == pytest.approx(0.14, abs=TOL_S)


def test_sse_flag_and_the_audio_opt_out():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--sse"]) as sim:
        sse = stream(sim.url, {"input": "hi"})  # --sse streams even unasked
        audio = stream(sim.url, {"input": "hi", "stream_format": "audio"})
        bad = stream(sim.url, {"input": "hi", "stream_format": "mp3"})
    assert sse.headers["Content-Type"] == "text/event-stream"
    assert pcm_of(sse.events()) == audio.body[HEADER:]
    assert audio.headers["Content-Type"] == "audio/wav"
    assert bad.status == 400 and "stream_format" in bad.body.decode()


def test_wav_header_alone_comes_first_with_placeholder_sizes():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--wav-header-alone"]) as sim:
        alone = stream(sim.url, {"input": SHORT, "stream": True})
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        joined = stream(sim.url, {"input": SHORT, "stream": True})
    head_at, head = alone.arrivals[0]
    assert len(head) == HEADER and head[:4] == b"RIFF"
    assert struct.unpack("<I", head[4:8])[0] == struct.unpack("<I", head[40:44])[0] == 0xFFFFFFFF
    assert head_at < 0.06 and alone.first_after(HEADER) == pytest.approx(0.14, abs=TOL_S)
    assert len(joined.arrivals[0][1]) > HEADER  # by default the header rides with the audio
    assert alone.body == joined.body


def test_pcm_is_raw():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        pcm = stream(sim.url, {"input": SHORT, "stream": True, "response_format": "pcm"})
        wav = stream(sim.url, {"input": SHORT, "stream": True})
    assert pcm.headers["Content-Type"] == "audio/pcm"
    assert pcm.body == wav.body[HEADER:] and pcm.body[:4] != b"RIFF"
    assert pcm.first_after(0) == pytest.approx(0.14, abs=TOL_S)


def test_unstreamed_requests_share_the_capacity_too():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        two = together(2, sim.url, {"input": LONG})
        health = get_json(sim.url, "/health")
    for s in two:
        assert s.headers.get("Transfer-Encoding") != "chunked"
        assert s.first_after(0) == pytest.approx(0.1 + 1.2 / 2.5, abs=TOL_S)
        assert len(s.body) == HEADER + frames(LONG) * 2
    # with --capacity the slots do not limit unless given
    assert health == {"status": "ok", "slots": None, "busy": 0, "queued": 0, "served": 2,
                      "rejected": 0}


def test_slots_still_apply_when_given():
    # one slot: the second stream waits for the first to finish, then runs alone
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--slots", "1"]) as sim:
        first, second = sorted(together(2, sim.url, {"input": LONG, "stream": True}),
                               key=lambda s: s.end_s)
    alone_s = 0.1 + 1.2 / 5
    assert first.end_s == pytest.approx(alone_s, abs=TOL_S)
    assert second.first_after(HEADER) == pytest.approx(alone_s + 0.14, abs=TOL_S)
    assert second.end_s == pytest.approx(2 * alone_s, abs=TOL_S)


def get_json(url: str, path: str) -> dict:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _faulty(fault: str, body: dict) -> Streamed:
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--fault", fault,
                "--seed", "1"]) as sim:
        return stream(sim.url, body)


SSE_LONG = {"input": LONG, "stream_format": "sse"}
WAV_LONG = {"input": LONG, "stream": True}
HALF = frames(LONG) // 2 * 2  # bytes of PCM before a mid-stream fault: half the audio


def test_truncate_ends_a_stream_cleanly_after_half_the_audio():
    wav = _faulty("truncate", WAV_LONG)
    assert wav.error is None and len(wav.body) - HEADER == HALF
    sse = _faulty("truncate", SSE_LONG)
    assert sse.error is None and len(pcm_of(sse.events())) == HALF
    assert "speech.audio.done" not in sse.body.decode()


def test_reset_aborts_a_stream_after_half_the_audio():
    for body, audio in ((WAV_LONG, lambda s: len(s.body) - HEADER),
                        (SSE_LONG, lambda s: len(pcm_of(s.events())))):
        s = _faulty("reset", body)
        assert isinstance(s.error, (http.client.IncompleteRead, ConnectionError)), s.error
        assert audio(s) == HALF


def test_sse_error_event_after_good_chunks():
    s = _faulty("sse-error", SSE_LONG)
    events = s.events()
    assert len(pcm_of(events[:-1])) == HALF
    last = json.loads(events[-1])
    assert last["type"] == "error" and last["error"]["message"]
    assert s.error is None
    wav = _faulty("sse-error", WAV_LONG)  # only SSE answers have error events
    assert len(wav.body) - HEADER == frames(LONG) * 2


def test_garbage_after_good_sse_chunks():
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--fault", "garbage",
                "--seed", "3"]) as sim:
        bad = [stream(sim.url, SSE_LONG).events() for _ in range(6)]
    reasons = set()
    for events in bad:
        assert len(pcm_of(events[:-1])) == HALF
        try:
            json.loads(events[-1])["audio"].encode()
            base64.b64decode(json.loads(events[-1])["audio"], validate=True)
        except json.JSONDecodeError:
            reasons.add("json")
        except ValueError:
            reasons.add("base64")
        else:
            raise AssertionError(f"the last event decodes: {events[-1]!r}")
    assert reasons == {"json", "base64"}


def test_a_short_stream_cut_mid_chunk():
    # one 200 ms chunk: a fault cuts it in half, sent when the chunk is made
    s = _faulty("truncate", {"input": "hi", "stream": True, "response_format": "pcm"})
    assert len(s.body) == frames('hi') // 2 * 2
    assert s.first_after(0) == pytest.approx(0.14, abs=TOL_S)


def test_chunk_log_records_each_audio_write(tmp_path):
    log = tmp_path / "chunks.jsonl"
    with spawn(["testbed.sim", "--port", "0", *CAPACITY_5, "--chunk-log", str(log),
                "--wav-header-alone"]) as sim:
        wall0 = time.time()
        s = stream(sim.url, {"input": SHORT, "stream": True})
        sse = stream(sim.url, {"input": SHORT, "stream_format": "sse"})
        cut = stream(sim.url, {"input": LONG, "stream": True, "response_format": "pcm"})
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["request_id"], r["format"]) for r in lines] == [
        (s.headers["X-Request-Id"], "wav"), (sse.headers["X-Request-Id"], "sse"),
        (cut.headers["X-Request-Id"], "pcm")]
    first = lines[0]
    assert first["audio_ms"] == pytest.approx([200, 200, 200, 60], abs=0.1)  # no header write
    sent = [t - wall0 for t in first["sent"]]
    arrived = [at for at, data in s.arrivals if len(data) != HEADER]
    assert sent == pytest.approx([0.14, 0.18, 0.22, 0.232], abs=TOL_S)
    assert all(a >= b - 0.005 for a, b in zip(arrived[:1], sent))  # sent before it arrived
    assert len(lines[1]["sent"]) == 4 and len(lines[2]["sent"]) == 6


@pytest.mark.parametrize("args, message", [
    (["--max-speed", "2"], "--max-speed needs --capacity"),
    (["--chunk-ms", "100"], "--chunk-ms needs --capacity"),
    (["--prefill-ms", "0"], "--prefill-ms needs --capacity"),
    (["--capacity", "0"], "argument --capacity: expected a number >= 0.001, got '0'"),
    (["--capacity", "5", "--chunk-ms", "0"], "argument --chunk-ms: expected a number >= 1, got '0'"),
    (["--fault", "sse-errors"], "argument --fault: invalid choice"),
    (["--chunk-log", "/nonexistent/dir/x.jsonl"], "argument --chunk-log: cannot open"),
])
def test_bad_streaming_flags_give_one_line(args, message):
    import subprocess
    import sys
    from procs import ROOT
    done = subprocess.run([sys.executable, "-m", "testbed.sim", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"python -m testbed.sim: {message}"), done.stderr
