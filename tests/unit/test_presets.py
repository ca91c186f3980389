"""Session presets (locustfiles/inputs/presets.py, configs/presets/): every shipped dialect loads, its
messages render as its server expects them, frames copied from each server's own protocol are
classified as meant, and a preset with a mistake is one sentence naming the file and the key."""

from __future__ import annotations

import base64
import json

import pytest

from tts_knee.audio.containers import StreamError
from tts_knee.locustfiles.inputs import presets

SHIPPED = ("cartesia", "deepgram", "elevenlabs", "elevenlabs-multi", "vllm-omni")
VALUES = {"voice": "V1", "model": "M1", "context_id": "ctx-1", "utterance": 1}


def test_the_shipped_presets_are_the_documented_ones():
    assert presets.names() == sorted(SHIPPED)
    readme = (presets.PRESET_DIR / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_preset_loads_and_renders(name):
    p = presets.load(name)
    assert p.name == name and p.protocol == "ws"
    text = json.loads(p.message("text", {**VALUES, "text": 'say "hi" '}))
    assert 'say "hi" ' in text.values() and isinstance(json.loads(p.message("end", VALUES)), dict)
    assert p.url("https://api.example.com", VALUES).startswith("wss://api.example.com/")
    assert p.url("http://127.0.0.1:8091", VALUES).startswith("ws://127.0.0.1:8091/")


def test_vllm_omni_asks_for_pcm_sentence_by_sentence():
    p = presets.load("vllm-omni")
    opening = json.loads(p.message("open", VALUES))
    assert opening == {
        "type": "session.config",
        "model": "M1",
        "voice": "V1",
        "response_format": "pcm",
        "stream_audio": True,
        "split_granularity": "sentence",
    }
    assert json.loads(p.message("open", {"model": "M1"})).get("voice") is None  # no --tts-voice: left out
    assert not p.reuse and p.ends_on == "end" and p.message("flush", VALUES) is None
    assert p.classify(b"\x01\x02").event == "audio" and p.classify(b"\x01\x02").audio == b"\x01\x02"
    start = p.classify('{"type": "audio.start", "sentence_index": 0, "sample_rate": 44100, "format": "pcm"}')
    assert (start.event, start.rate) == ("audio_start", 44100)
    assert (
        p.classify('{"type": "audio.done", "sentence_index": 0, "total_bytes": 9600, "error": false}').event == "ignore"
    )
    failed = p.classify('{"type": "audio.done", "sentence_index": 1, "total_bytes": 0, "error": true}')
    assert failed.event == "error" and failed.fatal
    assert p.classify('{"type": "session.done", "total_sentences": 2}').event == "end"
    err = p.classify('{"type": "error", "message": "Unknown message type: input.cancel"}')
    assert (err.event, err.fatal, err.message) == ("error", False, "Unknown message type: input.cancel")
    chunk = p.classify(
        json.dumps({"type": "audio.chunk", "audio_b64": base64.b64encode(b"\0\0\1\0").decode(), "sample_rate": 24000})
    )
    assert (chunk.event, chunk.audio, chunk.rate) == ("audio", b"\0\0\1\0", 24000)
    assert p.classify('{"type": "session.configured", "session_id": "x"}').event == "ignore"  # sglang-omni
    assert p.classify('{"type": "something.new"}').event == "ignore"  # a server's new messages do not break a run


def test_elevenlabs_audio_is_base64_in_json_and_its_url_names_the_voice():
    p = presets.load("elevenlabs")
    url = p.url("https://api.elevenlabs.io", VALUES)
    assert (
        url == "wss://api.elevenlabs.io/v1/text-to-speech/V1/stream-input?model_id=M1&output_format=pcm_24000"
        "&inactivity_timeout=20"
    )
    frame = p.classify(
        json.dumps({"audio": base64.b64encode(b"\1\0" * 4).decode(), "isFinal": None, "normalizedAlignment": None})
    )
    assert frame.event == "audio" and frame.audio == b"\1\0" * 4
    assert p.classify('{"isFinal": true}').event == "end"
    err = p.classify(
        '{"message": "Maximum simultaneous contexts exceeded (5)", "error": "max_active_conversations", "code": 1008}'
    )
    assert err.event == "error" and err.fatal and err.message.startswith("Maximum simultaneous")
    with pytest.raises(StreamError, match="binary frame"):
        p.classify(b"\0\0")
    assert json.loads(p.message("flush", VALUES)) == {"text": " ", "flush": True}


def test_deepgram_ends_an_utterance_at_the_flush_that_answers_its_end():
    p = presets.load("deepgram")
    assert p.ends_on == "ack_of_end" and p.reuse
    assert json.loads(p.message("end", VALUES)) == {"type": "Flush"}
    assert p.classify('{"type": "Flushed", "sequence_id": 0}').event == "flushed"
    assert p.classify('{"type": "Metadata", "request_id": "r"}').event == "ignore"
    assert p.classify('{"type": "Cleared", "sequence_id": 1}').event == "cancelled"
    assert (
        p.url("https://api.deepgram.com", {}) == "wss://api.deepgram.com/v1/speak?encoding=linear16&sample_rate=24000"
    )


def test_a_deepgram_warning_ends_the_utterance_at_once_with_its_text():
    """Past 20 Flush a minute Deepgram warns and never sends the Flushed that would end the
    utterance: the Warning ends it as failed, quoting it, instead of a wait to the timeout."""
    f = presets.load("deepgram").classify('{"type": "Warning", "description": "Too many flushes", "code": "W"}')
    assert (f.event, f.message, f.fatal) == ("error", "Too many flushes", True)


def test_the_api_key_header_comes_from_the_environment_or_is_left_out(monkeypatch):
    p = presets.load("deepgram")
    monkeypatch.delenv("DEEPGRAM_API_KEY", raising=False)
    assert p.handshake_headers(VALUES) == []
    monkeypatch.setenv("DEEPGRAM_API_KEY", "k3y")
    assert p.handshake_headers(VALUES) == ["Authorization: Token k3y"]


def test_cartesia_routes_frames_by_context_and_repeats_its_fields():
    p = presets.load("cartesia")
    assert p.routed and p.contexts > 1
    end = json.loads(p.message("end", VALUES))
    assert end["context_id"] == "ctx-1" and end["continue"] is False and end["model_id"] == "M1"
    assert end["voice"] == {"mode": "id", "id": "V1"} and end["transcript"] == ""
    chunk = p.classify(
        json.dumps(
            {
                "type": "chunk",
                "data": base64.b64encode(b"\0\1").decode(),
                "done": False,
                "status_code": 206,
                "context_id": "ctx-9",
            }
        )
    )
    assert (chunk.event, chunk.context, chunk.audio) == ("audio", "ctx-9", b"\0\1")
    assert p.classify('{"type": "done", "done": true, "context_id": "ctx-9"}').context == "ctx-9"
    with pytest.raises(StreamError, match="not base64"):
        p.classify('{"type": "chunk", "data": "%%not base64%%", "context_id": "ctx-9"}')
    with pytest.raises(StreamError, match="not JSON"):
        p.classify('{"type": "chunk", "data": ')


def _preset(tmp_path, text: str):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return path


GOOD = """
protocol = "ws"
path = "/tts"
[send]
text = { op = "say", text = "{text}" }
end = { op = "done" }
[[receive.rule]]
match = { op = "finished" }
event = "end"
"""


def test_elevenlabs_multi_ends_a_context_with_a_flush_then_a_close_context():
    """Two messages, as ElevenLabs' cookbook, pipecat and bolna send them: close_context alone
    means no further audio is generated, so sent with the flush it may cut the tail."""
    p = presets.load("elevenlabs-multi")
    end = [json.loads(m) for m in p.messages("end", VALUES)]
    assert end == [{"text": "", "context_id": "ctx-1", "flush": True}, {"context_id": "ctx-1", "close_context": True}]
    assert p.messages("flush", VALUES) == [p.message("flush", VALUES)] and p.messages("begin", {}) != []
    assert presets.load("vllm-omni").messages("cancel", VALUES) == []


def test_a_users_own_dialect_is_a_file(tmp_path):
    p = presets.load(str(_preset(tmp_path, GOOD)))
    assert p.name == "mine" and p.binary == "audio" and p.rate == 24000 and not p.reuse
    assert p.message("text", {"text": "hi "}) == '{"op":"say","text":"hi "}'
    assert p.classify('{"op": "finished"}').event == "end"


@pytest.mark.parametrize(
    "change,key,expected",
    [
        (lambda t: t.replace('protocol = "ws"', 'protocol = "smoke"'), "`protocol`", "must be one of ws"),
        (lambda t: t.replace('path = "/tts"', 'path = "tts"'), "`path`", "must start with /"),
        (lambda t: t.replace('end = { op = "done" }', ""), "`send.end`", "is missing"),
        (lambda t: t.replace('text = "{text}"', 'text = "x"'), "`send.text`", '"{text}"'),
        (lambda t: t.replace('event = "end"', 'event = "fin"'), "`receive.rule[1].event`", "must be one of audio"),
        (lambda t: t.replace('event = "end"', 'event = "ignore"'), "`receive.rule`", "ends an utterance"),
        (lambda t: 'reuse = "yes"\n' + t, "`reuse`", "must be true or false"),
        (lambda t: "contexts = 3\nreuse = true\n" + t, "`contexts`", "no rule names the field"),
        (lambda t: "colour = 1\n" + t, "`colour`", "is not a preset key"),
        (lambda t: t + '[audio]\nencoding = "mp3"\n', "`audio.encoding`", "must be one of pcm_s16le"),
        (lambda t: t + '[receive]\nbinary = "video"\n', "`receive.binary`", 'must be "audio" or "error"'),
        (lambda t: t.replace("[send]", "[send]\nhello = { a = 1 }"), "`send.hello`", "is not a message"),
        (
            lambda t: t + '[[receive.rule]]\nmatch = { a = 1 }\nevent = "audio"\n',
            "`receive.rule[2].audio`",
            "names the field holding base64",
        ),
        (
            lambda t: t.replace('end = { op = "done" }', 'end = [{ op = "done" }, "bye"]'),
            "`send.end[1]`",
            "must be a table",
        ),
        (lambda t: t.replace('end = { op = "done" }', "end = []"), "`send.end`", "at least one message"),
        (
            lambda t: t.replace('text = { op = "say", text = "{text}" }', 'text = [{ op = "say", text = "{text}" }]'),
            "`send.text`",
            "must be one table",
        ),
    ],
    ids=[
        "protocol",
        "path",
        "no-end",
        "no-text-placeholder",
        "event",
        "no-end-rule",
        "reuse",
        "contexts",
        "unknown-key",
        "encoding",
        "binary",
        "unknown-message",
        "audio-field",
        "sequence-item",
        "empty-sequence",
        "text-sequence",
    ],
)
def test_a_mistake_is_one_sentence_naming_the_file_and_the_key(tmp_path, change, key, expected):
    path = _preset(tmp_path, change(GOOD))
    with pytest.raises(presets.PresetError) as e:
        presets.load(str(path))
    msg = str(e.value)
    assert str(path) in msg and key in msg and expected in msg and "\n" not in msg


def test_a_file_that_is_not_toml_or_not_there(tmp_path):
    with pytest.raises(presets.PresetError, match="is not valid TOML"):
        presets.load(str(_preset(tmp_path, "protocol = \n")))
    with pytest.raises(presets.PresetError, match="cannot be read"):
        presets.load(str(tmp_path / "missing.toml"))
    with pytest.raises(presets.PresetError, match="neither a preset tts-knee ships"):
        presets.load("vllm")
