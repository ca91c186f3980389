"""gRPC's wire, both ways round: tts-knee's h2 client against gRPC's own server (grpcio's
C-core, tests/grpc_reference_server.py), the simulator's Riva server against gRPC's own client
(tests/grpc_reference_client.py, in a process of its own),
and each of the simulator's drills through the transport, as the attempt path sees it: the
status it ends with, what --retry-on judges it by, the pushback, the audio that arrived and the
sentence a failure leaves."""

from __future__ import annotations

import json
import subprocess
import sys

import gevent
import pytest

from procs import ROOT, plain_parser, read_jsonl, spawn
from tts_knee.locustfiles import settings as settings_mod
from tts_knee.locustfiles.transports import Answered, AudioPiece, Ended, TransportError, transport_for

SIM_CAPACITY = ["--capacity", "5", "--chunk-ms", "200", "--prefill-ms", "100", "--sample-rate", "24000"]


def settings(host: str, *args: str):
    """tts-knee's settings from these command-line options, parsed as Locust would."""
    return settings_mod.from_options(plain_parser().parse_args(["--tts-protocol", "grpc", *args]), host)


def exchange(transport, text: str = "Hello there, how are you today?") -> dict:
    """One exchange's events, as the attempt path reads them."""
    got = {"pieces": [], "answers": []}
    for ev in transport.exchange(text):
        if isinstance(ev, AudioPiece):
            got["pieces"].append(ev.ms)
        elif isinstance(ev, Answered):
            got["answers"].append(ev)
        elif isinstance(ev, Ended):
            got["ended"] = ev
    got["answer"] = got["answers"][-1]
    return got


@pytest.fixture(scope="module")
def reference():
    with spawn([str(ROOT / "tests" / "grpc_reference_server.py")], program=(sys.executable,)) as server:
        yield server.url


def test_a_stream_from_grpcs_own_server_is_timed_message_by_message(reference):
    t = transport_for(settings(reference, "--tts-preset", "riva", "--tts-stream"))
    for _ in range(2):  # the second call rides the same connection
        got = exchange(t)
        assert got["pieces"] == [200.0] * 5
        first, last = got["answers"]
        assert (first.status, first.ok) == (None, True)  # provisional: the server took the call
        assert (last.status, last.http_status, last.retry_after_raw) == ("OK", 200, None)
        assert got["ended"].error is None and got["ended"].audio.audio_s == pytest.approx(1.0)
        assert b"".join(got["ended"].data)[:4] == b"RIFF"  # written as a WAV of the LINEAR_PCM
    t.close()


def test_whole_audio_and_a_stream_past_every_flow_control_window(reference):
    whole = exchange(transport_for(settings(reference, "--tts-preset", "riva")), "x" * 1500)  # 3 MB, one message
    assert whole["answer"].status == "OK" and whole["ended"].audio.audio_s == pytest.approx(1500 * 2000 / 48000)
    many = exchange(transport_for(settings(reference, "--tts-preset", "riva", "--tts-stream", "--tts-voice", "many")))
    assert many["answer"].status == "OK" and len(many["pieces"]) == 450  # 4.3 MB


def test_a_refusal_carries_its_code_details_and_pushback(reference):
    got = exchange(
        transport_for(settings(reference, "--tts-preset", "riva", "--tts-stream", "--tts-voice", "exhausted"))
    )
    a = got["answer"]
    assert (a.status, a.ok, a.http_status) == ("RESOURCE_EXHAUSTED", False, 429)
    assert (a.retry_after_raw, a.retry_after_s) == ("grpc-retry-pushback-ms: 1000", 1.0)
    assert got["ended"].error == "gRPC RESOURCE_EXHAUSTED: busy ü 100%"  # grpc-message percent-decoded


def test_an_error_mid_stream_keeps_the_audio_that_came(reference):
    got = exchange(transport_for(settings(reference, "--tts-preset", "riva", "--tts-stream", "--tts-voice", "crash")))
    a = got["answer"]
    assert (a.status, a.ok, a.http_status) == ("INTERNAL", True, "INTERNAL")  # not retried by default
    assert got["pieces"] == [200.0] * 3
    assert got["ended"].error == "gRPC INTERNAL: model crashed after 3 audio messages"


def test_a_wrong_method_and_an_unreachable_server(reference, refused_port):
    got = exchange(transport_for(settings(reference, "--tts-preset", "riva", "--tts-path", "/tts.Nope/Speak")))
    assert got["answer"].status == "UNIMPLEMENTED"
    assert "is not served there: wrong --tts-preset, or the wrong port?" in got["ended"].error
    t = transport_for(settings(f"grpc://127.0.0.1:{refused_port}", "--tts-preset", "riva"))
    with pytest.raises(TransportError, match=r"cannot connect to 127.0.0.1:\d+ \(ECONNREFUSED.*UNAVAILABLE"):
        exchange(t)


def test_a_timeout_mid_stream_drops_the_connection_and_the_next_call_opens_another(reference):
    t = transport_for(settings(reference, "--tts-preset", "riva", "--tts-stream", "--tts-voice", "slow"))
    pieces = 0
    with pytest.raises(gevent.Timeout), gevent.Timeout(1.2):
        for ev in t.exchange("Hello."):
            pieces += isinstance(ev, AudioPiece)
    assert 1 <= pieces <= 3 and t.conn is None
    t.s = settings(reference, "--tts-preset", "riva", "--tts-stream")
    t._request.voice_name = ""
    assert exchange(t)["answer"].status == "OK"


# ---- the simulator's Riva server, read by gRPC's own client ------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    log = tmp_path_factory.mktemp("grpc-sim") / "chunks.jsonl"
    with spawn(
        ["tts_knee.testbed.sim", "--port", "0", "--grpc-port", "0", *SIM_CAPACITY, "--chunk-log", str(log)]
    ) as proc:
        yield proc.listening("grpc"), log


def _reference_client(url: str, what: str) -> dict:
    """What gRPC's own client got (tests/grpc_reference_client.py, in a process of its own)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "grpc_reference_client.py"), url.removeprefix("grpc://"), what],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_simulator_serves_grpcs_own_client(sim):
    url, log = sim
    got = _reference_client(url, "calls")
    assert got["chunks"] == [9600] * 9 + [2880] and got["id"] == "ref-1"
    assert got["whole"] == int(0.72 * 24000) * 2
    assert got["wrong_rate"]["code"] == "INVALID_ARGUMENT" and "24000 Hz" in got["wrong_rate"]["details"]
    assert got["unknown_method"]["code"] == "UNIMPLEMENTED"
    entry = next(e for e in read_jsonl(log) if e["request_id"] == "ref-1")
    assert entry["format"] == "grpc" and len(entry["sent"]) == 10 and sum(entry["audio_ms"]) == pytest.approx(1860)
    assert 0.08 < entry["sent"][0] - entry["received"] < 0.3  # prefill, then 200 ms of audio at 5x


def test_the_simulators_pushback_reaches_grpcs_own_client():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--grpc-port",
            "0",
            *SIM_CAPACITY,
            "--fault",
            "exhausted",
            "--pushback-ms",
            "1500",
        ]
    ) as proc:
        got = _reference_client(proc.listening("grpc"), "refused")
    assert got["code"] == "RESOURCE_EXHAUSTED"
    assert ["grpc-retry-pushback-ms", "1500"] in got["trailers"]


# ---- the simulator's drills, through the transport ------------------------------------------

DRILLS = {  # fault: (status, retry judged as, audio messages kept, the error's words)
    "exhausted": ("RESOURCE_EXHAUSTED", 429, 0, "gRPC RESOURCE_EXHAUSTED: the server is busy"),
    "bad-retry-after": ("RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", 0, "gRPC RESOURCE_EXHAUSTED"),
    "sse-error": (
        "INTERNAL",
        "INTERNAL",
        5,
        "gRPC INTERNAL: synthesis failed mid-stream (the sse-error fault) after 5 audio messages",
    ),
    "truncate": ("OK", 200, 5, None),
    "empty": ("OK", 200, 0, "gRPC OK, but the answer carried no audio"),
    "garbage": (None, None, 5, "a message that is not a SynthesizeSpeechResponse, after 5 audio messages"),
    "wrong-encoding": ("CANCELLED", "CANCELLED", 0, "the audio is WAV, not the raw 16-bit PCM (LINEAR_PCM) asked for"),
    "json": ("CANCELLED", "CANCELLED", 0, "the audio is text"),
    "html": ("UNAVAILABLE", 503, 0, "gRPC UNAVAILABLE: not a gRPC answer: HTTP 502 (text/html): <!doctype html>"),
}


@pytest.mark.parametrize("fault", sorted(DRILLS))
def test_each_drill_ends_in_its_status_and_keeps_what_arrived(fault):
    status, retry_as, kept, words = DRILLS[fault]
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--grpc-port", "0", *SIM_CAPACITY, "--fault", fault]) as proc:
        got = exchange(transport_for(settings(proc.listening("grpc"), "--tts-preset", "riva", "--tts-stream")))
    a, ended = got["answer"], got["ended"]
    if status is not None:  # garbage: the call may have ended OK (or be cancelled) when the bad message is read
        assert (a.status, a.http_status) == (status, retry_as)
    assert len(got["pieces"]) == kept
    assert (ended.error is None) if words is None else words in ended.error, ended.error
    if fault == "truncate":
        assert ended.audio.audio_s == pytest.approx(0.93)  # half the audio, and OK: the integrity check's
    assert "\n" not in (ended.error or "")


def test_a_connection_reset_mid_stream_is_a_connection_error_after_timed_audio():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--grpc-port", "0", *SIM_CAPACITY, "--fault", "reset"]) as proc:
        t = transport_for(settings(proc.listening("grpc"), "--tts-preset", "riva", "--tts-stream"))
        events = []
        with pytest.raises(TransportError, match="gRPC stream open, then the connection broke .*UNAVAILABLE"):
            for ev in t.exchange("Hello there, how are you today?"):
                events.append(ev)
    answers = [e for e in events if isinstance(e, Answered)]
    assert sum(isinstance(e, AudioPiece) for e in events) == 5 and answers[0].ok and t.conn is None


def test_presets_and_targets_are_checked_in_one_sentence(tmp_path):
    bad = tmp_path / "bad.json"
    cases = [
        (("--tts-preset", "riva"), "http://127.0.0.1:1", "--host must be grpc://HOST:PORT"),
        ((), "grpc://127.0.0.1:1", "--tts-protocol grpc needs --tts-preset"),
        (("--tts-preset", "nope"), "grpc://127.0.0.1:1", "--tts-preset nope: cannot read nope"),
        (("--tts-preset", str(bad)), "grpc://127.0.0.1:1", "is not JSON"),
        (
            ("--tts-preset", "triton", "--tts-stream-format", "sse"),
            "grpc://127.0.0.1:1",
            "--tts-stream-format is for HTTP",
        ),
    ]
    bad.write_text("{")
    for args, host, words in cases:
        with pytest.raises(settings_mod.SettingsError, match=words) as e:
            settings(host, *args)
        assert "\n" not in str(e.value)
    not_triton = tmp_path / "t.json"
    not_triton.write_text(
        json.dumps(
            {
                "protocol": "grpc",
                "service": "triton",
                "model": "m",
                "inputs": [{"name": "TEXT", "datatype": "INT32", "value": "{text}"}],
                "output": {"name": "AUDIO", "datatype": "INT16"},
                "sample_rate": 22050,
            }
        )
    )
    with pytest.raises(settings_mod.SettingsError, match="the text input 'TEXT' must be BYTES"):
        settings("grpc://127.0.0.1:1", "--tts-preset", str(not_triton))
    for value, shape, words in (
        (3, [2], r"needs 2 INT32 values for its shape \[2\], got 3"),
        ("three", [1], r"needs 1 INT32 value for its shape \[1\], got 'three'"),
    ):
        not_triton.write_text(
            json.dumps(
                {
                    "protocol": "grpc",
                    "service": "triton",
                    "model": "m",
                    "inputs": [
                        {"name": "TEXT", "datatype": "BYTES", "value": "{text}"},
                        {"name": "speaker", "datatype": "INT32", "shape": shape, "value": value},
                    ],
                    "output": {"name": "AUDIO", "datatype": "INT16"},
                    "sample_rate": 22050,
                }
            )
        )
        with pytest.raises(settings_mod.SettingsError, match=words):
            settings("grpc://127.0.0.1:1", "--tts-preset", str(not_triton))
    s = settings("grpc://127.0.0.1:1", "--tts-preset", "triton")
    assert (s.tts_model, s.tts_stream, s.tts_path) == (
        "piper_joe",
        True,
        "/inference.GRPCInferenceService/ModelStreamInfer",
    )
    s = settings(
        "grpc://127.0.0.1:1",
        "--tts-preset",
        "riva",
        "--tts-voice",
        "English-US.Female-1",
        "--retry-on",
        "429,503,INTERNAL",
    )
    assert (s.tts_voice, s.tts_language, s.tts_stream, s.tts_path) == (
        "English-US.Female-1",
        "en-US",
        False,
        "/nvidia.riva.tts.RivaSpeechSynthesis/Synthesize",
    )
    assert s.retry.should_retry(1, "INTERNAL") and not s.retry.should_retry(1, "UNIMPLEMENTED")
