"""The transport seam: a protocol is a transport and nothing else. A real headless Locust run
whose transport is a scripted protocol (no HTTP: a gRPC-like one that refuses with
RESOURCE_EXHAUSTED, then streams three pieces of audio) gets the retry, the records, the Locust
request events, the playback figures and the audio file from the shared attempt path; and
only the HTTP transport reaches into geventhttpclient."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from procs import ROOT, read_jsonl
from rundirs import assert_declared

LOCUSTFILE = """
import gevent
from tts_knee.locustfiles import attempt, node, preflight  # noqa: F401  (node attaches the listeners)
from tts_knee.locustfiles.clock import mono
from tts_knee.audio.containers import Audio
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.transports import NO_ASK, Answered, AudioPiece, Ended, Received, Transport
from tts_knee.locustfiles.user import TTSUser  # noqa: F401

PCM = b"\\x00\\x10\\x00\\xf0" * 1200   # 100 ms at 24 kHz, 16-bit mono: a square wave at -18 dBFS (sound, not silence)


class Scripted(Transport):
    request_type, name = "GRPC", "/tts.Synth/Speak"

    def __init__(self, s, payload=None):
        self.sent = 0

    def exchange(self, text, ask=NO_ASK):
        self.sent += 1
        if self.sent % 2:   # every other request is refused, with a pushback of 0 s
            yield Answered("RESOURCE_EXHAUSTED", False, "gRPC RESOURCE_EXHAUSTED", 429, "0")
            yield Ended(mono(), "gRPC RESOURCE_EXHAUSTED: try later")
            return
        yield Answered("OK", True, "gRPC OK", 200)
        for delay in (0.01, 0.04, 0.2):   # pieces at about 10, 50 and 250 ms: dry at 210 ms
            gevent.sleep(delay)
            at = mono()
            yield Received(at, len(PCM))
            yield AudioPiece(at, 100.0)
        yield Ended(mono(), audio=Audio("pcm", 0.3, 24000, 1, 2, 0, 3 * len(PCM)), data=[PCM, PCM, PCM])

    def reset(self):
        pass

    def close(self):
        pass


attempt.transport_for = preflight.transport_for = Scripted
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seam")
    (tmp / "scripted.py").write_text(LOCUSTFILE)
    run_dir = tmp / "run"
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("locust")),
            "-f",
            str(tmp / "scripted.py"),
            "--headless",
            "-H",
            "http://127.0.0.1:9",
            "--steps",
            "1",
            "--step-time",
            "2",
            "--settle-time",
            "0",
            "--tts-stream",
            "--exit-code-on-error",
            "0",
            "--run-dir",
            str(run_dir),
            "--json-file",
            str(tmp / "locust"),
        ],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    assert_declared(run_dir)
    return read_jsonl(run_dir / "requests.jsonl"), json.loads((tmp / "locust.json").read_text()), run_dir


def test_a_refusal_is_retried_as_the_http_status_it_amounts_to(run):
    records, _, _ = run
    first, second = records[0], records[1]
    assert (first["attempt"], first["final"], first["ok"], first["status"]) == (1, False, False, "RESOURCE_EXHAUSTED")
    assert first["error"] == "gRPC RESOURCE_EXHAUSTED: try later"
    assert (first["retry_after_raw"], first["retry_after_s"]) == ("0", 0.0)
    assert first["ttfa_ms"] is None and first["chunks"] is None  # a refusal carries no audio to time
    assert (second["req_id"], second["attempt"], second["final"], second["ok"]) == (first["req_id"], 2, True, True)


def test_the_shared_path_makes_the_record_and_the_audio_file(run):
    records, _, run_dir = run
    ok = [r for r in records if r["ok"]]
    assert ok and all(r["status"] == "OK" and r["chunks"] == 3 and r["audio_s"] == 0.3 for r in ok)
    for r in ok:
        assert r["t0"] <= r["t1"] <= r["t2"] <= r["t3"] and r["bytes"] == 3 * 4800
        assert 5 <= r["ttfa_ms"] <= r["ttfb_ms"] + 0.01 and r["ttfa_ms"] == r["ttfb_ms"]
        # dry at ~210 ms, the last piece at ~250. The pieces come after sleeps a busy machine
        # stretches (the second after a dry player too, if 60 ms late), so the figures are held to
        # the arrivals the record gives (0.1 ms each), replayed by hand: 100 ms each, no buffer
        at, dry, stalls = r["chunk_at_ms"], r["chunk_at_ms"][0] + 100, []
        for t in at[1:]:
            if t > dry:
                stalls.append(t - dry)
            dry = max(dry, t) + 100
        assert r["underruns"] == len(stalls) >= 1
        assert r["underrun_ms"] == pytest.approx(sum(stalls), abs=0.25)
        # and a floor late timers cannot break: the last piece comes >= 200 ms after the second,
        # which comes >= 40 ms after the first (1 ms rounding slack)
        assert r["underrun_ms"] >= 40 - 1
        assert r["chunk_audio_ms"] == [100.0, 100.0, 100.0] and len(r["chunk_at_ms"]) == 3
    files = list((run_dir / "audio").iterdir())
    assert files and all(f.stat().st_size == 3 * 4800 for f in files)


def test_locust_counts_each_attempt_under_the_transports_name(run):
    records, stats, _ = run
    names = {(e["method"], e["name"]): e["num_requests"] for e in stats}
    assert set(names) == {("GRPC", "/tts.Synth/Speak"), ("GRPC", "/tts.Synth/Speak (retry)")}
    assert sum(names.values()) == len(records)


def test_only_the_http_transport_reaches_into_geventhttpclient():
    reach = {}
    for path in (ROOT / "locustfiles").rglob("*.py"):
        text = path.read_text()
        if "geventhttpclient" in text or "_body_buffer" in text:
            reach[path.relative_to(ROOT).as_posix()] = "_body_buffer" in text
    # the collector puller and the node's clock probes speak HTTP to tts-knee's own parts
    assert reach.pop("locustfiles/transports/http.py") is True
    assert not any(reach.values()), reach
    assert "locustfiles/attempt.py" not in reach and "locustfiles/preflight.py" not in reach
