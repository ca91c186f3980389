"""Voices in the request mix: corpus fields and --voices drawn by --voice-mix, the template's
placeholders, the multipart form, voice registration (--voice-upload), --server-stats, and the
simulator's voice cache; real Locust runs against real servers on loopback."""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import math
import struct
import threading
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from procs import get_json, locust, read_jsonl, spawn
from rundirs import assert_declared
from tts_knee.collectors.puller import JsonStats
from tts_knee.locustfiles.inputs import corpus
from tts_knee.locustfiles.inputs.voices import Mix, Voice, VoiceError, parse_mix, parse_voices
from tts_knee.testbed.sim.voices import VoiceCache


def write_clip(path: Path, hz: int, seconds: float = 0.3) -> bytes:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(
            b"".join(
                struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * t / 16000)))
                for t in range(int(16000 * seconds))
            )
        )
    return path.read_bytes()


def test_corpus_entries_carry_the_request_mix_and_their_clip(tmp_path):
    clip = write_clip(tmp_path / "ref.wav", 220)
    (tmp_path / "c.jsonl").write_text(
        '{"id": "a", "text": "Hello.", "voice": "anna", "language": "English", "speed": 1.25, '
        '"instructions": "calm", "ref_audio": "ref.wav", "ref_text": "Reference."}\n{"id": "b", "text": "Plain."}\n'
    )
    a, b = corpus.load(tmp_path / "c.jsonl")
    assert (a.voice, a.language, a.speed, a.instructions, a.ref_text) == ("anna", "English", 1.25, "calm", "Reference.")
    assert a.ref_audio.data == clip and a.ref_audio.content_type == "audio/wav" and a.ref_audio.name == "ref.wav"
    assert (b.voice, b.ref_audio, b.speed) == (None, None, None)


@pytest.mark.parametrize(
    "entry,message",
    [
        (
            '{"id": "x1", "text": "Hi.", "ref_audio": "gone.wav"}',
            "line 1 (id 'x1') has ref_audio '{d}/gone.wav', which does not exist",
        ),
        (
            '{"id": "x2", "text": "Hi.", "ref_audio": "notes.txt"}',
            "line 1 (id 'x2') has ref_audio '{d}/notes.txt', which is not an audio file",
        ),
        ('{"id": "x3", "text": "Hi.", "speed": 0}', "line 1 (id 'x3') has speed 0; expected a number above 0"),
        ('{"id": "x4", "text": "Hi.", "voice": 7}', "line 1 (id 'x4') has voice 7; expected a non-empty string"),
    ],
)
def test_a_bad_corpus_entry_is_named(tmp_path, entry, message):
    (tmp_path / "notes.txt").write_text("just words, no audio")
    (tmp_path / "c.jsonl").write_text(entry + "\n")
    with pytest.raises(corpus.CorpusError) as e:
        corpus.load(tmp_path / "c.jsonl")
    assert message.format(d=tmp_path) in str(e.value)


def test_voices_from_a_list_and_a_file(tmp_path):
    assert [v.name for v in parse_voices("a, b,c")] == ["a", "b", "c"]
    (tmp_path / "v.txt").write_text("# names\nanna\n\nben\n")
    assert [v.name for v in parse_voices(f"@{tmp_path / 'v.txt'}")] == ["anna", "ben"]
    clip = write_clip(tmp_path / "c.wav", 300)
    (tmp_path / "v.jsonl").write_text('{"voice": "clone", "ref_audio": "c.wav", "ref_text": "Hi."}\n')
    (v,) = parse_voices(f"@{tmp_path / 'v.jsonl'}")
    assert (v.name, v.ref_audio.data, v.ref_text) == ("clone", clip, "Hi.")
    with pytest.raises(VoiceError, match="names the voice 'a' twice"):
        parse_voices("a,b,a")
    (tmp_path / "bad.jsonl").write_text('{"voice": "x", "ref_audio": "missing.wav"}\n')
    with pytest.raises(VoiceError, match=r"line 1 \(voice 'x'\) has ref_audio .*missing.wav', which does not exist"):
        parse_voices(f"@{tmp_path / 'bad.jsonl'}")


def test_the_mixes():
    voices = tuple(Voice(f"v{i}") for i in range(4))
    rr = Mix(voices, "round-robin", 0, 1, texts=2)
    # in turn, shifted by one each time the 2 texts and 4 voices come round together
    assert [rr.pick(i, 4).name for i in range(9)] == ["v0", "v1", "v2", "v3", "v1", "v2", "v3", "v0", "v2"]
    pairs = {(i % 2, rr.pick(i, 4).name) for i in range(16)}
    assert len(pairs) == 8  # every text met every voice
    assert {rr.pick(i, 2).name for i in range(40)} == {"v0", "v1"}  # only the first N
    mix, again = Mix(voices, *parse_mix("zipf:1.5"), 7, 3), Mix(voices, "zipf", 1.5, 7, 3)
    zipf = [mix.pick(i, 4).name for i in range(2000)]
    assert zipf == [again.pick(i, 4).name for i in range(2000)]  # seeded
    counts = [zipf.count(f"v{i}") for i in range(4)]
    assert counts == sorted(counts, reverse=True) and counts[0] > 2.5 * counts[1] > 0  # 1 : 2^-1.5 : ...
    mix = Mix(voices, "uniform", 0, 3, 3)
    uniform = [mix.pick(i, 4).name for i in range(2000)]
    assert all(400 < uniform.count(f"v{i}") < 600 for i in range(4))
    for bad in ("zipf", "zipf:0", "zipf:x", "random"):
        with pytest.raises(VoiceError, match="--voice-mix takes round-robin, uniform or zipf:S"):
            parse_mix(bad)


def test_json_stats_read_counters_as_rates():
    r = JsonStats(max_gap_s=5)
    assert r.read('{"size": 3, "cache": {"hits_total": 10, "ok": true}}', 100.0) == {"size": 3.0}
    assert r.read('{"size": 4, "cache": {"hits_total": 16}}', 102.0) == {"size": 4.0, "cache.hits_total": 3.0}
    assert r.read('{"cache": {"hits_total": 2}}', 103.0) == {}  # it went down: the server restarted
    assert r.read('{"cache": {"hits_total": 12}}', 110.0) == {}  # after a gap: no rate stood at its end


def test_the_voice_cache_is_lru():
    c = VoiceCache(2, 300)
    assert [c.use(k) for k in ("a", "b", "a", "c", "b", None)] == [0.3, 0.3, 0.0, 0.3, 0.3, 0.0]
    assert (c.hits, c.misses, c.evictions, c.size) == (1, 4, 2, 2)  # c evicted b, then b evicted a
    assert VoiceCache(0, 300).use("a") == 0.0


class Capture(BaseHTTPRequestHandler):
    """Answers every POST with a short WAV and keeps what it was sent."""

    bodies: list = []
    wav = b""

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        type(self).bodies.append((self.headers["Content-Type"], self.rfile.read(n)))
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        self.send_header("Content-Length", str(len(self.wav)))
        self.end_headers()
        self.wfile.write(self.wav)

    def log_message(self, *_):
        pass


@pytest.fixture
def capture(tmp_path):
    Capture.bodies = []
    Capture.wav = write_clip(tmp_path / "answer.wav", 440, 0.1)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def cloned_corpus(tmp_path) -> bytes:
    clip = write_clip(tmp_path / "speaker.wav", 180, 0.5)
    (tmp_path / "c.jsonl").write_text(
        json.dumps(
            {
                "id": "clone-1",
                "text": 'Say this, "quoted".',
                "ref_audio": "speaker.wav",
                "ref_text": "I am the speaker.",
            }
        )
        + "\n"
    )
    return clip


def test_a_multipart_request_carries_the_clip_byte_for_byte(tmp_path, capture):
    clip = cloned_corpus(tmp_path)
    proc = locust(
        [
            "--headless",
            "-H",
            capture,
            "--steps",
            "1",
            "--step-time",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--texts",
            str(tmp_path / "c.jsonl"),
            "--tts-form",
            "speaker_wav",
            "--tts-voice",
            "",
        ],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout
    ctype, body = Capture.bodies[-1]
    assert ctype.startswith("multipart/form-data; boundary=")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {ctype}\r\n\r\n".encode() + body
    )
    parts = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()}
    assert set(parts) == {"model", "input", "response_format", "ref_text", "speaker_wav"}
    assert (
        parts["input"].get_content() == 'Say this, "quoted".' and parts["ref_text"].get_content() == "I am the speaker."
    )
    f = parts["speaker_wav"]
    assert f.get_filename() == "speaker.wav" and f.get_content_type() == "audio/wav"
    assert f.get_content() == clip
    recs = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert {r["voice"] for r in recs} == {"speaker.wav"}  # no voice name: the clip names it
    assert_declared(tmp_path / "run")


def test_a_template_carries_the_clip_as_base64_byte_for_byte(tmp_path, capture):
    clip = cloned_corpus(tmp_path)
    template = (
        '{"text": "{text}", "voice": "{voice}", "prompt_wav": "{ref_audio_b64}", "prompt_text": "{ref_text}", '
        '"speed": {speed}}'
    )
    (tmp_path / "c.jsonl").write_text(
        json.dumps(
            {
                "id": "clone-1",
                "text": "Say {voice} literally.",
                "voice": "me",
                "speed": 1.5,
                "ref_audio": "speaker.wav",
                "ref_text": "I am the speaker.",
            }
        )
        + "\n"
    )
    proc = locust(
        [
            "--headless",
            "-H",
            capture,
            "--steps",
            "1",
            "--step-time",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--texts",
            str(tmp_path / "c.jsonl"),
            "--tts-api",
            "json",
            "--tts-template",
            template,
        ],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout
    ctype, body = Capture.bodies[-1]
    assert ctype.startswith("application/json")
    sent = json.loads(body)
    assert base64.b64decode(sent.pop("prompt_wav"), validate=True) == clip
    assert sent == {"text": "Say {voice} literally.", "voice": "me", "prompt_text": "I am the speaker.", "speed": 1.5}


@pytest.fixture(scope="module")
def sim():
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--base-ms",
            "5",
            "--per-char-ms",
            "0",
            "--voice-cache",
            "2",
            "--voice-miss-ms",
            "20",
        ]
    ) as p:
        yield p


def run_bad(tmp_path, *args):
    proc = locust(
        ["--headless", "--steps", "1", "--step-time", "1", "--run-dir", str(tmp_path / "run"), *args], timeout=60
    )
    assert "Traceback" not in proc.stdout, proc.stdout
    return proc, [line for line in proc.stdout.splitlines() if "/ERROR/" in line]


def test_a_placeholder_without_a_value_is_named(tmp_path, sim):
    (tmp_path / "c.jsonl").write_text('{"id": "e1", "text": "One."}\n{"id": "e2", "text": "Two.", "ref_text": "x"}\n')
    proc, errors = run_bad(
        tmp_path,
        "-H",
        sim.url,
        "--texts",
        str(tmp_path / "c.jsonl"),
        "--tts-api",
        "json",
        "--tts-template",
        '{"text": "{text}", "prompt_text": "{ref_text}"}',
    )
    assert proc.returncode == 2
    assert len(errors) == 1 and errors[0].endswith(
        "--tts-template uses {ref_text}, but corpus entry 'e1' has no ref_text"
    )
    (tmp_path / "v.jsonl").write_text('{"voice": "bare"}\n')
    proc, errors = run_bad(
        tmp_path,
        "-H",
        sim.url,
        "--voices",
        f"@{tmp_path / 'v.jsonl'}",
        "--tts-api",
        "json",
        "--tts-template",
        '{"text": "{text}", "clip": "{ref_audio_b64}"}',
    )
    assert proc.returncode == 2 and len(errors) == 1
    assert "--tts-template uses {ref_audio_b64}, but voice 'bare' (given to corpus entry " in errors[0]
    assert errors[0].endswith("has no ref_audio")


def test_a_corpus_clip_that_is_not_audio_is_named(tmp_path, sim):
    (tmp_path / "notes.wav").write_text("RIFX but not really")
    (tmp_path / "c.jsonl").write_text('{"id": "n1", "text": "One.", "ref_audio": "notes.wav"}\n')
    proc, errors = run_bad(tmp_path, "-H", sim.url, "--texts", str(tmp_path / "c.jsonl"))
    assert proc.returncode == 2 and len(errors) == 1
    assert f"line 1 (id 'n1') has ref_audio '{tmp_path / 'notes.wav'}', which is not an audio file" in errors[0]


def voices_file(tmp_path, n: int) -> Path:
    lines = []
    for i in range(n):
        write_clip(tmp_path / f"clip{i}.wav", 200 + 40 * i, 0.1)
        lines.append(json.dumps({"voice": f"clone{i}", "ref_audio": f"clip{i}.wav", "ref_text": f"number {i}"}))
    (tmp_path / "voices.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "voices.jsonl"


def test_voices_are_drawn_recorded_and_counted_by_the_servers_cache(tmp_path, sim):
    before = get_json(sim.url + "/health")
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "2",
            "--step-time",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--voices",
            "a,b,c",
            "--voice-mix",
            "zipf:1.2",
            "--voice-seed",
            "11",
            "--server-stats",
            sim.url + "/health",
        ],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    opts = run["options"]
    assert (opts["voices"], opts["voice_mix"], opts["voice_seed"]) == (["a", "b", "c"], "zipf:1.2", 11)
    recs = read_jsonl(tmp_path / "run" / "requests.jsonl")
    names = [r["voice"] for r in recs]
    assert set(names) == {"a", "b", "c"} and names.count("a") > names.count("c")
    after = get_json(sim.url + "/health")
    # three voices through a cache of two: the server counted every request's voice
    used = sum(after[k] - before[k] for k in ("voice_cache_hits_total", "voice_cache_misses_total"))
    assert used == after["served"] - before["served"] >= len(recs) - 2
    stats = [s for s in read_jsonl(tmp_path / "run" / "resources.jsonl") if s.get("source") == sim.url + "/health"]
    assert stats and any("voice_cache_misses_total" in (s["metrics"] or {}) for s in stats)
    assert_declared(tmp_path / "run")


def test_uploaded_voices_are_used_by_name_and_removed(tmp_path, sim):
    path = voices_file(tmp_path, 3)
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "2",
            "--step-time",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--voices",
            f"@{path}",
            "--voice-upload",
        ],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    ups = run["voice_uploads"]
    assert [(u["voice"], u["action"], u["status"], u["ok"]) for u in ups] == [
        (f"clone{i}", "create", 200, True) for i in range(3)
    ] + [(f"clone{i}", "delete", 200, True) for i in range(3)]
    assert all(u["ms"] > 0 and u["t0"] >= run["start"] for u in ups)
    assert {r["voice"] for r in read_jsonl(tmp_path / "run" / "requests.jsonl")} == {"clone0", "clone1", "clone2"}
    assert get_json(sim.url + "/v1/audio/voices")["voices"] == []
    assert_declared(tmp_path / "run")


def test_a_run_that_fails_after_registering_removes_its_voices(tmp_path, sim):
    path = voices_file(tmp_path, 2)
    proc, errors = run_bad(tmp_path, "-H", sim.url, "--voices", f"@{path}", "--voice-upload", "--tts-path", "/nowhere")
    assert proc.returncode == 2 and len(errors) == 1 and "answered 404" in errors[0]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [(u["voice"], u["action"], u["ok"]) for u in run["voice_uploads"]] == [
        ("clone0", "create", True),
        ("clone1", "create", True),
        ("clone0", "delete", True),
        ("clone1", "delete", True),
    ]
    assert get_json(sim.url + "/v1/audio/voices")["voices"] == []
    assert_declared(tmp_path / "run")


def test_a_refused_upload_is_named_and_what_was_created_is_removed(tmp_path, sim):
    import urllib.request

    path = voices_file(tmp_path, 3)
    # clone1 is on the server already: the run registers clone0, then is refused clone1. The form is
    # written out here: urllib3 imported in this process before Locust patches ssl breaks Locust's import
    clip, b = (tmp_path / "clip1.wav").read_bytes(), b"tts-knee-test-form"
    body = b"".join(
        [
            b"--" + b + b'\r\nContent-Disposition: form-data; name="audio_sample"; filename="c.wav"\r\n'
            b"Content-Type: audio/wav\r\n\r\n" + clip + b"\r\n",
            *(
                b"--" + b + b'\r\nContent-Disposition: form-data; name="' + k + b'"\r\n\r\n' + v + b"\r\n"
                for k, v in ((b"consent", b"c"), (b"name", b"clone1"))
            ),
            b"--" + b + b"--\r\n",
        ]
    )
    ctype = "multipart/form-data; boundary=" + b.decode()
    urllib.request.urlopen(urllib.request.Request(sim.url + "/v1/audio/voices", body, {"Content-Type": ctype}))
    try:
        proc, errors = run_bad(tmp_path, "-H", sim.url, "--voices", f"@{path}", "--voice-upload")
        assert proc.returncode == 2 and len(errors) == 1, proc.stdout
        assert errors[0].endswith(
            "the server refused to register voice 'clone1' (HTTP 400: Voice 'clone1' already "
            f"exists): --voice-upload needs {sim.url}/v1/audio/voices to take it"
        )
        run = json.loads((tmp_path / "run" / "run.json").read_text())
        assert [(u["voice"], u["action"], u["ok"]) for u in run["voice_uploads"]] == [
            ("clone0", "create", True),
            ("clone1", "create", False),
            ("clone0", "delete", True),
        ]
        assert get_json(sim.url + "/v1/audio/voices")["voices"] == ["clone1"]  # ours gone, the server's own kept
        assert_declared(tmp_path / "run")
    finally:
        urllib.request.urlopen(urllib.request.Request(sim.url + "/v1/audio/voices/clone1", method="DELETE"))
