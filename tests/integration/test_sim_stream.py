"""The simulator's shared-capacity streaming model, timed over real HTTP against the process.

Ground truth the rest of tts-knee is tested against: with ``--capacity C`` each of n streams
makes audio at min(max_speed, C / n) x real time after ``--prefill-ms``, one write per chunk.
Tolerances are for a busy 2-core machine, whose timers fire late but never early: what the client
measures is never earlier than the formula (but for streams started a few ms apart), and within
40 ms of what the simulator's own chunk log says it sent (a late timer delays both alike).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from procs import ROOT, get_json, spawn

#: Times the client against the simulator's own clock to the millisecond: run with the machine
#: to itself (make test's second pass).
pytestmark = pytest.mark.alone

RATE = 24000
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
    t0: float  # time.monotonic() as the request was sent
    wall0: float  # time.time() then
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


def stream(url: str, body: dict, barrier: threading.Barrier | None = None, path: str = "/v1/audio/speech") -> Streamed:
    """POST ``body`` and time every read as it arrives; a broken body is kept, not raised."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.connect()
    if barrier is not None:
        barrier.wait()
    try:
        wall0, t0 = time.time(), time.monotonic()
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        got = Streamed(resp.status, resp.headers, [], t0, wall0)
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


def near(measured: list[float], want_s: float, early_s: float = 0.005) -> bool:
    """Measured on the client, so a lone stream is never earlier than the truth (but for
    clock granularity; streams started together arrive a few ms apart, and the first ones
    run faster until the rest join: ``early_s``). A lower bound only: the simulator's service
    times are timers, which a busy machine fires late; the late side is checked against the
    simulator's own log instead (:func:`behind_log`)."""
    return min(measured) >= want_s - early_s


def behind_log(streams: list[Streamed], truth: dict) -> tuple[list[float], list[float]]:
    """How long after the simulator handed each stream's first and last audio write to the
    socket (its chunk log, unix seconds on this machine's clock) the client had read it: a
    simulator timer that fires late is late in the log alike, so this is what the delivery
    and the client's own timing add (a hair below 0: the log stamps a write once it is done)."""
    first, last = [], []
    for s in streams:
        sent = truth[s.headers["X-Request-Id"]]["sent"]
        audio_from = HEADER if s.headers["Content-Type"] == "audio/wav" else 0
        first.append(s.wall0 + s.first_after(audio_from) - sent[0])
        last.append(s.wall0 + s.end_s - sent[-1])
    return first, last


def as_logged(lags: tuple[list[float], ...]) -> bool:
    """Read within TOL_S of the simulator's log in the median, each list: an accuracy check
    against an independent clock, so it keeps its tolerance (one descheduled thread on a busy
    machine is noise, a client off by tens of ms is not)."""
    return all(statistics.median(x) <= TOL_S for x in lags)


GROUP_EARLY_S = 0.02


def shared(
    starts: list[float], audio_s: float, capacity: float, max_speed: float | None = None, chunk_s: float = 0.2
) -> list[list[float]]:
    """The model, computed independently: when each stream's chunks are complete, for streams
    that start generating at ``starts`` and share ``capacity`` equally, each at most
    ``max_speed``."""
    max_speed = capacity if max_speed is None else max_speed
    sizes = [chunk_s] * int(audio_s / chunk_s + 1e-9)
    if audio_s - sum(sizes) > 1e-9:
        sizes.append(audio_s - sum(sizes))
    done: list[list[float]] = [[] for _ in starts]
    left = [sizes[0] for _ in starts]
    t = min(starts)
    while any(len(d) < len(sizes) for d in done):
        active = [i for i, s in enumerate(starts) if s <= t + 1e-12 and len(done[i]) < len(sizes)]
        rate = min(max_speed, capacity / len(active)) if active else 0.0
        joins = [s - t for s in starts if s > t + 1e-12]
        dt = min(joins + [left[i] / rate for i in active])
        t += dt
        for i in active:
            left[i] -= rate * dt
            if left[i] <= 1e-9:
                done[i].append(t)
                if len(done[i]) < len(sizes):
                    left[i] = sizes[len(done[i])]
    return done


def late_by(
    streams: list[Streamed],
    truth: dict,
    audio_s: float,
    capacity: float,
    max_speed: float | None = None,
    prefill_s: float = 0.1,
) -> tuple[list, list]:
    """How much later than the model each stream's first audio and last byte arrived (unix
    seconds on this machine), the model fed with when each request began to generate (the
    simulator's chunk log): threads started "together" send their requests ms apart, and a
    busy machine stretches the prefill of some."""
    records = [truth[s.headers["X-Request-Id"]] for s in streams]
    for r in records:
        assert r["generating"] - r["received"] >= prefill_s - 0.001
    starts = [r["generating"] for r in records]
    done = shared(starts, audio_s, capacity, max_speed)
    ttfa = [s.wall0 + s.first_after(HEADER) - d[0] for s, d in zip(streams, done)]
    end = [s.wall0 + s.end_s - d[-1] for s, d in zip(streams, done)]
    return ttfa, end


@contextlib.contextmanager
def capacity_sim(*args: str):
    """The simulator with ``args``, warmed up by one stream (first requests are slower);
    once stopped, ``sim.truth`` maps each streamed request's id to its chunk log line."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "chunks.jsonl"
        truth: dict[str, dict] = {}
        with spawn(["tts_knee.testbed.sim", "--port", "0", *args, "--chunk-log", str(log)]) as sim:
            sim.truth = truth
            stream(sim.url, {"input": "hi", "stream": True})
            yield sim
        for line in log.read_text().splitlines():
            record = json.loads(line)
            truth[record["request_id"]] = record


def server_total_s(s: Streamed) -> float:
    """The ``total`` of the answer's ``Server-Timing`` (queue + service, measured by the
    simulator), in seconds."""
    return float(re.search(r"total;dur=([\d.]+)", s.headers["Server-Timing"]).group(1)) / 1000


def repeat(k: int, fn, *args) -> list:
    return [fn(*args) for _ in range(k)]


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_ttfa_follows_the_shared_capacity(n):
    with capacity_sim(*CAPACITY_5) as sim:
        body = {"input": SHORT, "stream": True}
        rounds = repeat(2, together, n, sim.url, body)
    streams = [s for group in rounds for s in group]
    for s in streams:
        assert s.status == 200 and s.headers["Transfer-Encoding"] == "chunked"
        assert len(s.body) - HEADER == frames(SHORT) * 2
    # the ground truth: 140/180/260/420 ms, and 0.66 s of audio at 5 / n x real time
    ttfa_s, end_s = 0.1 + 0.2 / (5 / n), 0.1 + 0.66 / (5 / n)
    assert shared([0.1] * n, 0.66, 5)[0] == pytest.approx([0.1 + x * n / 5 for x in (0.2, 0.4, 0.6, 0.66)])
    ttfa = [s.first_after(HEADER) for s in streams]
    # not earlier than the formula by more than TOL_S (sent ms apart, the first run faster
    # until the rest join); no upper bound: the prefill and the chunks are timers, whose late
    # side is checked against the simulator's log below
    assert statistics.median(ttfa) >= ttfa_s - TOL_S, ttfa
    assert statistics.median(s.end_s for s in streams) >= end_s - TOL_S
    # and exactly so, given when each request was really sent: never early by the model, and
    # read as the simulator's log says it sent them (TOL_S in the median)
    for group in rounds:
        late_ttfa, late_end = late_by(group, sim.truth, 0.66, 5)
        assert near(late_ttfa, 0) and near(late_end, 0), (late_ttfa, late_end)
        lags = behind_log(group, sim.truth)
        assert as_logged(lags), lags


def test_rate_sharing_and_the_single_stream_cap():
    body = {"input": LONG, "stream": True}
    with capacity_sim("--capacity", "4", "--max-speed", "2", "--prefill-ms", "0") as sim:
        alone = repeat(3, stream, sim.url, body)
        two = together(2, sim.url, body)
        four = together(4, sim.url, body)
    assert near([s.end_s for s in alone], 1.2 / 2)  # capped at 2x, not 4x
    # lower bounds, TOL_S for streams sent ms apart (timers fire late, so no upper bound here;
    # the late side is the simulator's log's, below)
    assert statistics.median(s.end_s for s in two) >= 0.6 - TOL_S  # the cap
    assert statistics.median(s.end_s for s in four) >= 1.2 - TOL_S  # 1x
    for group in (alone, two, four):
        lags = behind_log(group, sim.truth)
        assert as_logged(lags), lags  # read when the log says sent, TOL_S in the median
    for group in (two, four):
        late_ttfa, late_end = late_by(group, sim.truth, 1.2, 4, 2, prefill_s=0)
        assert near(late_ttfa, 0) and near(late_end, 0), (late_ttfa, late_end)


def test_four_streams_take_four_times_as_long():
    body = {"input": LONG, "stream": True}
    with capacity_sim(*CAPACITY_5) as sim:
        alone = repeat(3, stream, sim.url, body)
        four = together(4, sim.url, body)
    assert near([s.end_s for s in alone], 0.1 + 1.2 / 5)
    # a lower bound, TOL_S for streams sent ms apart; the late side is the log's, below
    assert statistics.median(s.end_s for s in four) >= 0.1 + 4 * 1.2 / 5 - TOL_S
    late_ttfa, late_end = late_by(four, sim.truth, 1.2, 5)
    assert near(late_ttfa, 0) and near(late_end, 0), (late_ttfa, late_end)
    for group in (alone, four):
        lags = behind_log(group, sim.truth)
        assert as_logged(lags), lags  # read when the log says sent, TOL_S in the median


def test_the_rate_is_recomputed_when_a_stream_joins():
    # capacity 2x, no prefill. A starts alone at 2x; d (~0.2) s later B joins and both make
    # 1x: A, with 1.2 - 2d s of audio left, is done at 1.2 - d; then B, with 1.2 - 2d made,
    # makes its last 2d s alone at 2x, done at 1.2 (on A's clock).
    def a_then_b():
        with ThreadPoolExecutor(1) as pool:
            a = pool.submit(stream, sim.url, {"input": LONG, "stream": True})
            time.sleep(0.2)
            b = stream(sim.url, {"input": LONG, "stream": True})
            return a.result(), b

    with capacity_sim("--capacity", "2", "--prefill-ms", "0") as sim:
        pairs = repeat(3, a_then_b)
    d = [b.t0 - a.t0 for a, b in pairs]
    # the formulas below hold for any d from A's first chunk (0.1 s) to B's first chunk made
    # before A is done (d < 0.5): 0.45, not 0.3, above the 0.2 s sleep, which may end late
    assert all(0.15 < x < 0.45 for x in d), d
    # checked as the time left after the truth: 0 at best (lower bounds: timers end late)
    assert near([a.first_after(HEADER) - 0.1 for a, _ in pairs], 0)
    assert near([a.end_s - (1.2 - x) for (a, _), x in zip(pairs, d)], 0)
    assert near([b.first_after(HEADER) - 0.2 for _, b in pairs], 0)  # 0.2 s of audio at 1x
    assert near([x + b.end_s - 1.2 for (_, b), x in zip(pairs, d)], 0)
    # and B sped up once A was done: by the simulator's own log, B's last write came d after A's
    # (d: B began generating d after A); not recomputed, it would be 2d. Told apart at 1.5 d, on
    # send times where a wake-up late for both alike cancels, rather than by an upper bound on
    # B's end (timers end late)
    ratios = []
    for a, b in pairs:
        la, lb = (sim.truth[s.headers["X-Request-Id"]] for s in (a, b))
        ratios.append((lb["sent"][-1] - la["sent"][-1]) / (lb["generating"] - la["generating"]))
    assert statistics.median(ratios) < 1.5, ratios
    lags = behind_log([s for pair in pairs for s in pair], sim.truth)
    assert as_logged(lags), lags  # read when the log says sent, TOL_S in the median


def test_each_chunk_is_its_own_write_at_its_time():
    with capacity_sim("--capacity", "1", "--prefill-ms", "50") as sim:
        runs = repeat(3, stream, sim.url, {"input": SHORT, "stream": True, "response_format": "pcm"})
    # 1x real time: audio at 0.25, 0.45, 0.65 and 0.71 s (the last chunk is 60 ms)
    starts = []
    for s in runs:
        starts.append([])
        for at, _ in s.arrivals:
            if not starts[-1] or at - starts[-1][-1] > 0.03:
                starts[-1].append(at)
        assert len(starts[-1]) == 4, starts
    for i, want in enumerate([0.25, 0.45, 0.65, 0.71]):
        assert near([run[i] for run in starts], want), starts  # never early (timers end late)
    # each write read when the simulator's log says it sent it: TOL_S in the median
    lags = [
        s.wall0 + at - sent
        for s, run in zip(runs, starts)
        for at, sent in zip(run, sim.truth[s.headers["X-Request-Id"]]["sent"], strict=True)
    ]
    assert statistics.median(lags) <= TOL_S, lags


def test_sse_carries_the_same_pcm_as_the_wav_stream():
    with capacity_sim(*CAPACITY_5) as sim:
        wav = stream(sim.url, {"input": SHORT, "stream": True})
        sse = stream(sim.url, {"input": SHORT, "stream_format": "sse"})
    assert sse.status == 200 and sse.headers["Content-Type"] == "text/event-stream"
    events = sse.events()
    assert len(events) == 5  # four chunks, then done
    assert pcm_of(events) == wav.body[HEADER:]
    assert json.loads(events[-1]) == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": 3, "output_tokens": 33, "total_tokens": 36},
    }
    assert sse.first_after(0) > 0.135 and sse.end_s > 0.232


def test_sse_flag_and_the_audio_opt_out():
    with spawn(["tts_knee.testbed.sim", "--port", "0", *CAPACITY_5, "--sse"]) as sim:
        sse = stream(sim.url, {"input": "hi"})  # --sse streams even unasked
        audio = stream(sim.url, {"input": "hi", "stream_format": "audio"})
        bad = stream(sim.url, {"input": "hi", "stream_format": "mp3"})
    assert sse.headers["Content-Type"] == "text/event-stream"
    assert pcm_of(sse.events()) == audio.body[HEADER:]
    assert audio.headers["Content-Type"] == "audio/wav"
    assert bad.status == 400 and "stream_format" in bad.body.decode()


def test_wav_header_alone_comes_first_with_placeholder_sizes():
    with capacity_sim(*CAPACITY_5, "--wav-header-alone") as sim:
        alone = stream(sim.url, {"input": SHORT, "stream": True})
    with capacity_sim(*CAPACITY_5) as sim:
        joined = stream(sim.url, {"input": SHORT, "stream": True})
    head_at, head = alone.arrivals[0]
    assert len(head) == HEADER and head[:4] == b"RIFF"
    assert struct.unpack("<I", head[4:8])[0] == struct.unpack("<I", head[40:44])[0] == 0xFFFFFFFF
    assert alone.first_after(HEADER) - head_at > 0.08  # the audio came after the prefill
    assert len(joined.arrivals[0][1]) > HEADER  # by default the header rides with the audio
    assert alone.body == joined.body


def test_pcm_is_raw():
    with capacity_sim(*CAPACITY_5) as sim:
        pcm = stream(sim.url, {"input": SHORT, "stream": True, "response_format": "pcm"})
        wav = stream(sim.url, {"input": SHORT, "stream": True})
    assert pcm.headers["Content-Type"] == "audio/pcm"
    assert pcm.body == wav.body[HEADER:] and pcm.body[:4] != b"RIFF"
    assert pcm.first_after(0) > 0.135


def test_unstreamed_requests_share_the_capacity_too():
    with spawn(["tts_knee.testbed.sim", "--port", "0", *CAPACITY_5]) as sim:
        two = together(2, sim.url, {"input": LONG})
        health = get_json(sim.url + "/health")
    for s in two:
        assert s.headers.get("Transfer-Encoding") != "chunked"
        assert len(s.body) == HEADER + frames(LONG) * 2
    # a lower bound, TOL_S for requests sent ms apart: prefill and generation are timers,
    # which end late; the late side is the simulator's own Server-Timing total instead
    assert statistics.median(s.end_s for s in two) >= 0.1 + 1.2 / 2.5 - TOL_S
    behind = [s.end_s - server_total_s(s) for s in two]
    assert statistics.median(behind) <= TOL_S, behind  # body read TOL_S after the server's own total
    # with --capacity the slots do not limit unless given
    assert health == {
        "status": "ok",
        "slots": None,
        "busy": 0,
        "queued": 0,
        "served": 2,
        "rejected": 0,
        "generating": 0,
    }


def test_slots_still_apply_when_given():
    # one slot: the second stream waits for the first to finish, then runs alone
    with capacity_sim(*CAPACITY_5, "--slots", "1") as sim:
        pairs = repeat(2, together, 2, sim.url, {"input": LONG, "stream": True})
    pairs = [sorted(pair, key=lambda s: s.end_s) for pair in pairs]
    alone_s = 0.1 + 1.2 / 5
    assert near([first.end_s for first, _ in pairs], alone_s, GROUP_EARLY_S)
    assert near([second.first_after(HEADER) for _, second in pairs], alone_s + 0.14, GROUP_EARLY_S)
    assert near([second.end_s for _, second in pairs], 2 * alone_s, GROUP_EARLY_S)
    # the near()s are lower bounds (timers end late): the late side, against the log
    lags = behind_log([s for pair in pairs for s in pair], sim.truth)
    assert as_logged(lags), lags  # read when the log says sent, TOL_S in the median


def _faulty(fault: str, body: dict) -> Streamed:
    with spawn(["tts_knee.testbed.sim", "--port", "0", *CAPACITY_5, "--fault", fault, "--seed", "1"]) as sim:
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
    for body, audio in ((WAV_LONG, lambda s: len(s.body) - HEADER), (SSE_LONG, lambda s: len(pcm_of(s.events())))):
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
    with spawn(["tts_knee.testbed.sim", "--port", "0", *CAPACITY_5, "--fault", "garbage", "--seed", "3"]) as sim:
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
    assert len(s.body) == frames("hi") // 2 * 2
    assert s.first_after(0) > 0.135


def test_chunk_log_records_each_audio_write(tmp_path):
    log = tmp_path / "chunks.jsonl"
    with spawn(
        ["tts_knee.testbed.sim", "--port", "0", *CAPACITY_5, "--chunk-log", str(log), "--wav-header-alone"]
    ) as sim:
        wav = stream(sim.url, {"input": SHORT, "stream": True})
        sse = stream(sim.url, {"input": SHORT, "stream_format": "sse"})
        pcm = stream(sim.url, {"input": LONG, "stream": True, "response_format": "pcm"})
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["request_id"], r["format"]) for r in lines] == [
        (wav.headers["X-Request-Id"], "wav"),
        (sse.headers["X-Request-Id"], "sse"),
        (pcm.headers["X-Request-Id"], "pcm"),
    ]
    assert lines[0]["audio_ms"] == pytest.approx([200, 200, 200, 60], abs=0.1)  # no header
    assert len(lines[1]["sent"]) == 4 and len(lines[2]["sent"]) == 6
    for s, line, audio_s in zip((wav, sse, pcm), lines, (0.66, 0.66, 1.2)):
        sent = line["sent"]
        # a lone stream at 5x: chunks made 40 ms apart after the prefill
        model = shared([line["generating"]], audio_s, 5)[0]
        assert line["generating"] - line["received"] >= 0.099
        late = [a - b for a, b in zip(sent, model)]
        assert min(late) >= -0.001 and statistics.median(late) < 0.01, late
        assert s.wall0 <= line["received"] < sent[0]
        # each audio write arrives after it was sent, and soon after
        arrived = [s.wall0 + at for at, data in s.arrivals if len(data) != HEADER]
        lag = [min(a for a in arrived if a >= t - 0.005) - t for t in sent]
        assert statistics.median(lag) < 0.01, lag


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-speed", "2"], "--max-speed needs --capacity"),
        (["--chunk-ms", "100"], "--chunk-ms needs --capacity"),
        (["--prefill-ms", "0"], "--prefill-ms needs --capacity"),
        (["--capacity", "5", "--base-ms", "10"], "--base-ms does not apply with --capacity"),
        (["--capacity", "5", "--first-chunk-ms", "10"], "--first-chunk-ms does not apply with --capacity"),
        (["--capacity", "0"], "argument --capacity: expected a number >= 0.001, got '0'"),
        (["--capacity", "5", "--chunk-ms", "0"], "argument --chunk-ms: expected a number >= 1, got '0'"),
        (["--fault", "sse-errors"], "argument --fault: invalid choice"),
        (["--capacity", "5", "--queue-limit", "2"], "--queue-limit needs --slots with --capacity"),
        (["--chunk-log", "/nonexistent/dir/x.jsonl"], "argument --chunk-log: cannot open"),
    ],
)
def test_bad_streaming_flags_give_one_line(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.sim", *args], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"tts-knee sim: {message}"), done.stderr


def test_the_slots_model_streams_sse_and_pcm_too():
    # capacity_sim warms the process up and keeps its chunk log (the slots model's too)
    with capacity_sim(
        "--base-ms", "300", "--per-char-ms", "0", "--jitter", "0", "--first-chunk-ms", "30", "--sse"
    ) as sim:
        sse = repeat(3, stream, sim.url, {"input": LONG})
        pcm = repeat(
            3, stream, sim.url, {"input": LONG, "stream": True, "stream_format": "audio", "response_format": "pcm"}
        )
    assert sse[0].headers["Content-Type"] == "text/event-stream"
    assert pcm_of(sse[0].events()) == pcm[0].body and len(pcm[0].body) == frames(LONG) * 2
    assert json.loads(sse[0].events()[-1])["type"] == "speech.audio.done"
    for runs in (sse, pcm):
        # never early: the 30 ms first chunk and the 300 ms service are timers, which end late
        assert near([s.first_after(0) for s in runs], 0.03)
        assert near([s.end_s for s in runs], 0.3)
        lags = behind_log(runs, sim.truth)
        assert as_logged(lags), lags  # the late side: read as the log says sent, TOL_S median


def test_the_engine_is_exact_by_its_own_send_times():
    # the simulator's own record (request read -> each audio write) against the model
    with capacity_sim(*CAPACITY_5) as sim:
        streams = together(8, sim.url, {"input": LONG, "stream": True})
    lines = [sim.truth[s.headers["X-Request-Id"]] for s in streams]
    done = shared([line["generating"] for line in lines], 1.2, 5)
    late = [s - d for line, ds in zip(lines, done) for s, d in zip(line["sent"], ds)]
    assert len(late) == 8 * 6
    # never early; late by the time the writes take (one after another) and wake-ups, which a
    # busy machine stretches now and then
    assert min(late) >= -0.001 and statistics.median(late) < 0.01, late


def test_a_client_that_leaves_frees_its_share():
    # capacity 2x shared by A and B (1x each); A hangs up after its first chunk. The server
    # notices at one of A's next writes, and B makes the rest alone at 2x: done by about
    # 0.9 s instead of 1.2 s.
    def leave_early(url: str, barrier: threading.Barrier) -> None:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.connect()
        barrier.wait()
        conn.request(
            "POST",
            "/v1/audio/speech",
            headers={"Content-Type": "application/json"},
            body=json.dumps({"input": LONG, "stream": True}),
        )
        conn.getresponse().read1(1 << 16)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()

    with capacity_sim("--capacity", "2", "--prefill-ms", "0") as sim:
        barrier = threading.Barrier(2)
        with ThreadPoolExecutor(1) as pool:
            gone = pool.submit(leave_early, sim.url, barrier)
            b = stream(sim.url, {"input": LONG, "stream": True}, barrier)
            gone.result()
        health = get_json(sim.url + "/health")
    assert len(b.body) == HEADER + frames(LONG) * 2
    # B shared until A's first chunk (>= 0.2 s) then ran alone at 2x: >= 0.7 s, less
    # GROUP_EARLY_S for B sent a few ms after A (2x alone all along would be 0.6)
    assert b.end_s > 0.7 - GROUP_EARLY_S
    # A's share freed, told apart by the simulator's own log rather than by an upper bound on
    # B's end (timers end late): B's writes after A was seen gone came 0.1 s apart (2x), not
    # 0.2 s (1x); the due times do not add up late wake-ups, so 0.15 between the two is safe
    a_line = next(line for line in sim.truth.values() if "cancelled" in line)
    sent = sim.truth[b.headers["X-Request-Id"]]["sent"]
    after = [t for t in sent if t > a_line["cancelled"]]
    gaps = [y - x for x, y in zip(after, after[1:])]
    assert len(gaps) >= 2 and statistics.median(gaps) < 0.15, (a_line, sent)
    lags = behind_log([b], sim.truth)
    assert as_logged(lags), lags  # read as the log says sent, TOL_S
    assert (health["busy"], health["generating"]) == (0, 0)
