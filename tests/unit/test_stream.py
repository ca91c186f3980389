"""The incremental parsers of audio/containers.py and the playback model
(analysis/playback.py), on hand-made bodies fed in every split; and the HTTP transport's
``read_some`` against a real server on loopback."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from tts_knee.analysis.playback import listen
from tts_knee.audio import containers
from tts_knee.locustfiles.timeline import MAX_CHUNKS, Timeline
from tts_knee.locustfiles.transports.http import read_some

RATE = 24000


def feed(parser, blocks, times=None):
    for i, block in enumerate(blocks):
        parser.feed(block, float(i if times is None else times[i]))
    parser.finish()


def wav_parser():
    tl = Timeline()
    return tl, containers.parser_for("audio/wav", "wav", RATE, tl)


def placeholder_wav(pcm: bytes, extra: bytes = b"", size=0xFFFFFFFF) -> bytes:
    head = bytearray(containers.wav_header(0, RATE, 1, 2))
    struct.pack_into("<I", head, 4, 0xFFFFFFFF)
    struct.pack_into("<I", head, 40, size)
    return bytes(head[:36]) + extra + bytes(head[36:]) + pcm


# ---- the player ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "at,ms,buffer,expect",
    [
        ([0, 100, 200, 300], [100, 100, 100, 100], 0, (0, 0.0)),  # exactly in time
        ([0, 50, 100], [100, 100, 100], 0, (0, 0.0)),  # ahead of playback
        ([0, 150, 400], [100, 100, 100], 0, (2, 200.0)),  # dry at 100 (50), at 250 (150)
        ([0, 150, 400], [100, 100, 100], 200, (1, 50.0)),  # starts at 150, dry at 350
        ([0, 150, 400], [100, 100, 100], 1000, (0, 0.0)),  # never buffered: starts at the end
        ([10, 20, 500], [0, 100, 100], 0, (1, 380.0)),  # a frameless first arrival does not start it
        ([0, 300, 500], [100, 0, 100], 0, (1, 400.0)),  # nor does a frameless one split a stall
        ([], [], 0, (0, 0.0)),
    ],
)
def test_playback_on_hand_made_arrivals(at, ms, buffer, expect):
    _, stalls = listen(at, ms, buffer)
    assert (len(stalls), sum(resumed - dry for dry, resumed in stalls)) == expect


def test_timeline_fields_and_the_cap():
    tl = Timeline()
    for i in range(MAX_CHUNKS + 10):
        tl.add(1.0 + i * 0.01, 10.0)
    f = tl.fields(1.0, 0.0, keep_lists=True)
    assert f["ttfa_ms"] == 0.0 and f["chunks"] == MAX_CHUNKS + 10
    assert f["gap_max_ms"] == pytest.approx(10.0) and f["underruns"] == 0 and f["underrun_ms"] == 0.0
    assert len(f["chunk_at_ms"]) == len(f["chunk_audio_ms"]) == MAX_CHUNKS
    assert sum(f["chunk_audio_ms"]) == pytest.approx(10.0 * (MAX_CHUNKS + 10))
    assert f["chunk_audio_ms"][-1] == 110.0
    short = tl.fields(1.0, 0.0, keep_lists=False)
    assert short["chunk_at_ms"] is None and short["chunk_audio_ms"] is None


def test_unknown_durations_time_arrivals_only():
    tl = Timeline()
    tl.add(1.0, None)
    tl.add(1.5, None)
    f = tl.fields(0.5, 0.0, keep_lists=True)
    assert (f["ttfa_ms"], f["chunks"], f["gap_max_ms"]) == (500.0, 2, 500.0)
    assert f["underruns"] is None and f["chunk_audio_ms"] is None and f["chunk_at_ms"] == [500.0, 1000.0]


# ---- WAV and PCM ---------------------------------------------------------------------------


def test_wav_header_split_at_every_byte():
    pcm = bytes(range(256)) * 12  # 3072 bytes = 1536 frames = 64 ms
    body = placeholder_wav(pcm, extra=b"LIST" + struct.pack("<I", 5) + b"INFOx\0")
    start = body.index(b"data") + 8
    for cut in range(1, len(body)):
        tl, p = wav_parser()
        feed(p, [body[:cut], body[cut:]])
        assert sum(tl.audio_ms) == pytest.approx(64.0), cut
        assert tl.at == ([1.0] if cut <= start else [0.0, 1.0]), cut  # first arrival with a sample
    tl, p = wav_parser()
    feed(p, [body[i : i + 1] for i in range(len(body))])
    assert tl.at[0] == start and sum(tl.audio_ms) == pytest.approx(64.0)


@pytest.mark.parametrize("size", containers.PLACEHOLDER_SIZES)
def test_wav_header_alone_then_chunks(size):
    tl, p = wav_parser()
    body = placeholder_wav(bytes(9600), size=size)
    feed(p, [body[:44], body[44 : 44 + 4800], body[44 + 4800 :]], times=[0.1, 0.3, 0.5])
    assert tl.at == [0.3, 0.5] and tl.audio_ms == [100.0, 100.0]


def test_wav_with_real_sizes_stops_at_the_data_chunk():
    pcm = bytes(4800)
    body = containers.wav_header(len(pcm), RATE, 1, 2) + pcm + b"LIST" + struct.pack("<I", 4) + b"INFO"
    tl, p = wav_parser()
    feed(p, [body[:1000], body[1000:]])
    assert sum(tl.audio_ms) == pytest.approx(containers.check_audio(body, "audio/wav").audio_s * 1000)
    assert len(tl.at) == 2


def test_wav_partial_frames_sum_to_whole_frames():
    body = containers.wav_header(0, RATE, 2, 2) + bytes(4 * 1000)  # stereo 16-bit: 4-byte frames
    tl, p = wav_parser()
    feed(p, [body[:47], body[47:53], body[53:]])
    assert tl.audio_ms[0] == 0.0 and sum(tl.audio_ms) == pytest.approx(1000 / RATE * 1000)


@pytest.mark.parametrize(
    "body,ctype,expect",
    [
        (b"<html><body>busy</body></html>", "text/html", "wav"),
        (b'{"error": "no"}', "application/json", "pcm"),
        (b"\x00\x01garbage" * 40, "audio/wav", "wav"),
        (b"RIFF\xff\xff\xff\xffWAVEdata\x10\x00\x00\x00" + bytes(16), "audio/wav", "wav"),  # data before fmt
    ],
)
def test_bodies_that_are_not_audio_time_no_audio(body, ctype, expect):
    tl = Timeline()
    feed(containers.parser_for(ctype, expect, RATE, tl), [body[:7], body[7:]])
    assert tl.at == []


def test_pcm_counts_every_byte():
    tl = Timeline()
    feed(containers.parser_for("application/octet-stream", "pcm", RATE, tl), [bytes(3), bytes(4797), bytes(4800)])
    assert tl.at == [0.0, 1.0, 2.0] and sum(tl.audio_ms) == pytest.approx(200.0)


# ---- compressed ----------------------------------------------------------------------------


def mp3_frames(n: int, xing: bool = False) -> bytes:
    frame = b"\xff\xfb\x90\x00" + bytes(413)  # MPEG-1 layer III, 128 kbit/s, 44.1 kHz: 417 bytes
    first = b"\xff\xfb\x90\x00" + bytes(32) + b"Info" + bytes(377)
    return (b"ID3\x03\x00\x00\x00\x00\x00\x05" + bytes(5)) + (first if xing else b"") + frame * n


def test_mp3_frames_give_exact_sample_counts():
    body = mp3_frames(20, xing=True)
    for cut in (5, 15, 300, 1000, 2000):
        tl = Timeline()
        p = containers.parser_for("audio/mpeg", "mp3", RATE, tl)
        feed(p, [body[:cut], body[cut:]])
        assert sum(tl.audio_ms) == pytest.approx(20 * 1152 / 44.1)
        assert p.duration_s() == pytest.approx(20 * 1152 / 44100)


def test_mp3_garbage_after_frames_fails_but_a_tag_does_not():
    tl = Timeline()
    with pytest.raises(containers.StreamError, match="MP3 stream lost its frame structure"):
        feed(containers.parser_for("audio/mpeg", "mp3", RATE, tl), [mp3_frames(3), b"<html>oops</html>"])
    assert len(tl.at) == 1
    tl = Timeline()
    feed(containers.parser_for("audio/mpeg", "mp3", RATE, tl), [mp3_frames(3), b"TAG" + bytes(125)])
    assert sum(tl.audio_ms) == pytest.approx(3 * 1152 / 44.1)


def adts_frame(payload: int = 100, rate_index: int = 4) -> bytes:
    length = 7 + payload
    head = bytes(
        [
            0xFF,
            0xF1,
            (1 << 6) | (rate_index << 2),
            (1 << 6) | (length >> 11),
            (length >> 3) & 0xFF,
            ((length & 7) << 5) | 0x1F,
            0xFC,
        ]
    )
    return head + bytes(payload)


def test_adts_frames():
    body = adts_frame() * 10
    tl = Timeline()
    feed(containers.parser_for("audio/aac", "aac", RATE, tl), [body[:300], body[300:]])
    assert sum(tl.audio_ms) == pytest.approx(10 * 1024 / 44.1) and len(tl.at) == 2


def ogg_page(granule: int, payload: bytes, seq: int) -> bytes:
    segs = [255] * (len(payload) // 255) + [len(payload) % 255]
    return b"OggS\x00\x00" + struct.pack("<qIII", granule, 1, seq, 0) + bytes([len(segs)]) + bytes(segs) + payload


def test_ogg_opus_granules():
    head = b"OpusHead\x01\x01" + struct.pack("<H", 312) + struct.pack("<I", 48000) + bytes(3)
    body = ogg_page(0, head, 0) + ogg_page(0, b"OpusTags" + bytes(8), 1)
    body += b"".join(ogg_page(312 + 960 * k, bytes(300), 1 + k) for k in range(1, 11))
    tl = Timeline()
    p = containers.parser_for("audio/ogg", "opus", RATE, tl)
    feed(p, [body[:40], body[40:700], body[700:]])
    assert sum(tl.audio_ms) == pytest.approx(200.0) and p.duration_s() == pytest.approx(0.2)
    assert tl.at[0] == 1.0  # the header pages carry no audio


FIXTURES = Path(__file__).parent.parent / "fixtures"
# Encoded by the reference encoder (flac 1.4.2, from sox-made WAVs): white noise, whose frames are
# full of bytes that look like a sync code, at 24 kHz mono in blocks of 4096; and two tones at
# 11025 Hz stereo in blocks of 1152, its last frame shorter, its rate in the header as 16-bit Hz.
FLAC = [("noise-24k-mono.flac", 16800, 24000, 4096), ("tones-11k-stereo.flac", 6739, 11025, 1152)]


@pytest.mark.parametrize("name, samples, rate, block", FLAC)
def test_flac_durations_come_from_its_frame_headers(name, samples, rate, block):
    body = (FIXTURES / name).read_bytes()
    truth = samples * 1000.0 / rate
    frame_ms = block * 1000.0 / rate
    # a streaming encoder writes 0 for the total in STREAMINFO (bits 108-143 of its body)
    unknown = bytearray(body)
    unknown[21] &= 0xF0
    unknown[22:26] = bytes(4)
    for b in (body, bytes(unknown)):
        for size in (1, 7, 100, 1000, len(b)):
            tl = Timeline()
            p = containers.parser_for("audio/flac", "flac", RATE, tl)
            feed(p, [b[i : i + size] for i in range(0, len(b), size)])
            assert p.duration_s() == pytest.approx(truth / 1000.0)
            assert sum(tl.audio_ms) == pytest.approx(truth)
            # each arrival is credited with the frames it completed: never ahead of the body, and
            # behind it by at most the frame still arriving (the last one, at the end)
            assert all(ms >= 0 for ms in tl.audio_ms) and tl.audio_ms[-1] <= frame_ms + 1e-9
            if size == 1000:
                assert tl.at[0] == 0.0 and max(tl.audio_ms) <= 2 * frame_ms
    assert containers.check_audio(body, "audio/flac", "flac").format == "flac"


def test_flac_without_a_frame_after_its_metadata_fails():
    body = (FIXTURES / FLAC[0][0]).read_bytes()
    tl = Timeline()
    with pytest.raises(containers.StreamError, match="FLAC stream has no frame header after its metadata"):
        feed(containers.parser_for("audio/flac", "flac", RATE, tl), [body[: body.index(b"\xff\xf8")] + bytes(40)])
    assert tl.at == []


# ---- server-sent events --------------------------------------------------------------------


def delta(pcm: bytes, kind="speech.audio.delta", field="audio", **extra) -> bytes:
    return b"data: " + json.dumps({"type": kind, field: base64.b64encode(pcm).decode(), **extra}).encode() + b"\n\n"


DONE = b'data: {"type": "speech.audio.done", "usage": {"input_tokens": 5, "output_tokens": 9}}\n\n'


def sse(blocks, rate=RATE):
    tl = Timeline()
    p = containers.parser_for("text/event-stream; charset=utf-8", "wav", rate, tl)
    feed(p, blocks)
    return tl, p


def test_openai_sse_split_at_every_byte():
    body = b": keep-alive\n\n" + delta(bytes(4800)) + delta(bytes(2400)) + DONE
    for cut in range(1, len(body)):
        tl, p = sse([body[:cut], body[cut:]])
        assert tl.audio_ms == [100.0, 50.0] and p.done
    wav, a = p.audio()
    assert a.audio_s == pytest.approx(0.15) and containers.check_audio(wav, "audio/wav").audio_s == a.audio_s
    assert p.usage == {"input_tokens": 5, "output_tokens": 9}


@pytest.mark.parametrize(
    "body",
    [
        delta(bytes(4800), kind="audio.data") + b"data: [DONE]\n\n",
        delta(bytes(4800), field="delta") + b'data: {"type": "speech.audio.done", "token_usage": {"total": 3}}\n\n',
        b"event: audio\n" + delta(bytes(4800), kind=None) + b"data: [DONE]\n\n",
        (delta(bytes(4800)) + DONE).replace(b"\n", b"\r\n"),
        (delta(bytes(4800)) + DONE).replace(b"\n", b"\r"),
        b"\xef\xbb\xbfretry: 100\nid: 1\n" + delta(bytes(4800)) + DONE,
        delta(bytes(4800)) + DONE.rstrip(b"\n"),  # no blank line after the last event
    ],
)
def test_sse_variants(body):
    for cut in range(0, len(body), 7):
        tl, p = sse([body[:cut], body[cut:]] if cut else [body])
        assert tl.audio_ms == [100.0] and p.done


def test_sse_text_events_beside_the_audio_are_not_audio():
    # a transcript delta's text is not base64 audio: neither a failure nor the first audio
    text = (
        b'data: {"type": "response.output_audio_transcript.delta", "delta": "Hello"}\n\n'
        b'data: {"type": "transcript.text.delta", "delta": "abcd"}\n\n'
        b'event: progress\ndata: {"data": "ABCD"}\n\n'
    )
    tl, p = sse([text, delta(bytes(4800)), delta(bytes(4800), kind="response.output_audio.delta", field="delta"), DONE])
    assert tl.at == [1.0, 2.0] and tl.audio_ms == [100.0, 100.0] and p.done


def test_sse_multi_line_data_joins_with_newline():
    pcm64 = base64.b64encode(bytes(480)).decode()
    body = b'data: {"type": "speech.audio.delta",\ndata: "audio": "' + pcm64.encode() + b'"}\n\n' + DONE
    tl, _ = sse([body])
    assert tl.audio_ms == [10.0]


def test_sse_event_lines_split_across_reads_wait_for_the_blank_line():
    pcm64 = base64.b64encode(bytes(480))
    blocks = [b'data: {"type": "speech.audio.delta",\n', b'data: "audio": "' + pcm64 + b'"}\n', b"\n", DONE]
    tl, p = sse(blocks)
    assert tl.at == [2.0] and p.events == 2


def test_sse_sample_rate_from_the_event():
    tl, p = sse([delta(bytes(4800), sample_rate=48000, channels=1) + DONE])
    assert tl.audio_ms == [50.0] and p.audio()[1].sample_rate == 48000


@pytest.mark.parametrize(
    "tail,message",
    [
        (
            b'event: error\ndata: {"error": {"message": "model overloaded", "code": 503}}\n\n',
            "server sent an error event: model overloaded",
        ),
        (b'data: {"type": "error", "message": "voice not found"}\n\n', "server sent an error event: voice not found"),
        (b'data: {"type": "speech.audio.delta", "audio": "AAA*"}\n\n', "malformed base64"),
        (b'data: {"type": "speech.audio.delta", "audio": "AAA"}\n\n', "malformed base64"),
        (b"data: {not json\n\n", "is not valid JSON"),
        (b"data: [1, 2]\n\n", "is not a JSON object"),
        (b'data: {"type": "speech.audio.delta"}\n\n', "carries no base64 audio"),
        (b"<html><body>502 Bad Gateway</body></html>\n\n", "not an event field"),
        (b'data: {"type": "speech.audio.delta", "aud', "ended in the middle of event"),
        (b"", "ended without speech.audio.done"),
        (delta(bytes(10), format="mp3"), "tts-knee reads PCM16"),
    ],
)
def test_sse_failures_keep_what_came_before(tail, message):
    with pytest.raises(containers.StreamError, match=message) as e:
        sse([delta(bytes(4800)), tail])
    assert "\n" not in str(e.value)


def test_sse_without_audio_has_nothing_to_write():
    _, p = sse([DONE])
    with pytest.raises(containers.StreamError, match="carried no audio"):
        p.audio()


def test_a_whole_sse_body_read_at_once_becomes_a_wav():
    _, p = sse([delta(bytes(4800)) + DONE])
    wav, a = p.audio()
    assert wav[:4] == b"RIFF" and a.audio_s == pytest.approx(0.1)
    a = containers.check_audio(placeholder_wav(bytes(4800)), "audio/wav", "wav", RATE)
    assert a.audio_s == pytest.approx(0.1)


# ---- reading as it comes -------------------------------------------------------------------


@pytest.fixture(params=["chunked", "until-close"])
def chunked_server(request):
    """Answers one POST with three 4800-byte pieces 100 ms apart: chunked, or a body without a
    length that ends when the server closes the connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    chunked = request.param == "chunked"

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: audio/pcm\r\n"
                + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Connection: close\r\n\r\n")
            )
            for _ in range(3):
                time.sleep(0.1)
                conn.sendall(b"%x\r\n%s\r\n" % (4800, bytes(4800)) if chunked else bytes(4800))
            if chunked:
                conn.sendall(b"0\r\n\r\n")
                conn.recv(1)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    srv.close()


def test_read_some_returns_each_chunk_as_it_arrives(chunked_server):
    from geventhttpclient import HTTPClient

    client = HTTPClient("127.0.0.1", chunked_server, block_size=65536)
    resp = client.request("POST", "/", body=b"{}")
    t0, got = time.monotonic(), []
    while block := read_some(resp):
        got.append((time.monotonic() - t0, len(block)))
    client.close()
    assert [n for _, n in got] == [4800, 4800, 4800]
    assert [round(t, 1) for t, _ in got] == [0.1, 0.2, 0.3]
