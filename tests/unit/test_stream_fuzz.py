"""The stream parsers, fuzzed: whatever bytes a server sends, split however the network splits
them, a parser records arrivals or raises StreamError (one line), and never anything else; a
well-formed stream gives the same audio whatever the split."""

from __future__ import annotations

import base64
import json
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tts_knee.audio import containers
from tts_knee.locustfiles.timeline import Timeline

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
RATE = 24000


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [body[a:b] for a, b in zip(points, points[1:]) if b > a]


def run(ctype: str, expect: str, blocks: list[bytes]):
    tl = Timeline()
    p = containers.parser_for(ctype, expect, RATE, tl)
    try:
        for i, block in enumerate(blocks):
            p.feed(block, float(i))
        p.finish()
    except containers.StreamError as e:
        assert str(e) and "\n" not in str(e)
        return tl, p, e
    return tl, p, None


def _event(pcm: bytes, kind: str, field: str, eol: bytes, comment: bool) -> bytes:
    obj = {"type": kind, field: base64.b64encode(pcm).decode()}
    return (b": ping" + eol if comment else b"") + b"data: " + json.dumps(obj).encode() + eol + eol


EOLS = st.sampled_from([b"\n", b"\r\n", b"\r"])
EVENTS = st.lists(
    st.tuples(
        st.binary(max_size=64).map(lambda b: b[: len(b) // 2 * 2]),
        st.sampled_from(["speech.audio.delta", "audio.data"]),
        st.sampled_from(["audio", "delta"]),
        st.booleans(),
    ),
    max_size=8,
)
DONES = st.sampled_from(
    [
        b'data: {"type": "speech.audio.done", "usage": {"t": 1}}',
        b"data: [DONE]",
        b'data: {"type": "speech.audio.done", "token_usage": {"t": 1}}',
    ]
)


@FUZZ
@given(EVENTS, EOLS, DONES, st.lists(st.integers(0, 10_000), max_size=12))
def test_well_formed_sse_gives_the_same_audio_whatever_the_split(events, eol, done, cuts):
    body = b"".join(_event(pcm, kind, field, eol, comment) for pcm, kind, field, comment in events)
    body += done + eol + eol
    tl, p, err = run("text/event-stream", "wav", split(body, cuts))
    assert err is None, err
    pcm = b"".join(e[0] for e in events)
    assert p.pcm_bytes == len(pcm) and b"".join(p.pcm) == pcm
    assert len(tl.at) == sum(1 for e in events if e[0])
    assert sum(tl.audio_ms) == pytest.approx(len(pcm) / 2 / RATE * 1000)


SSE_PIECES = st.sampled_from(
    [
        b"data: ",
        b"event: error\n",
        b"event: x\n",
        b": c\n",
        b"\n",
        b"\r",
        b"\r\n",
        b'{"type": "speech.audio.delta", "audio": "AAAA"}',
        b'{"type": "error"}',
        b"[DONE]",
        b"AAA=",
        b"id: 3\n",
        b"retry: x\n",
        b"data",
        b":",
        b"\xef\xbb\xbf",
        b'{"audio": 5}',
        b'{"delta": "!!"}',
        b"\xff\xfe",
        b"{",
        b"}",
    ]
)


@FUZZ
@given(
    st.lists(SSE_PIECES | st.binary(max_size=30), max_size=20).map(b"".join),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_sse_parser_is_total(body, cuts):
    tl, p, err = run("text/event-stream", "wav", split(body, cuts))
    assert len(tl.at) == len(tl.audio_ms)
    if err is None:
        assert p.done


def _wav_like() -> st.SearchStrategy[bytes]:
    chunk = st.tuples(
        st.sampled_from([b"fmt ", b"data", b"LIST", b"fact"]), st.integers(0, 2**32 - 1), st.binary(max_size=40)
    )
    fmt = st.builds(
        lambda ch, w: containers.wav_header(0, RATE, ch, w)[12:36], st.integers(1, 3), st.sampled_from([1, 2, 3])
    )
    return st.tuples(
        fmt,
        st.lists(chunk, max_size=3),
        st.sampled_from(containers.PLACEHOLDER_SIZES + (100, 4000)),
        st.binary(max_size=300),
    ).map(
        lambda t: (
            b"RIFF"
            + struct.pack("<I", 0xFFFFFFFF)
            + b"WAVE"
            + t[0]
            + b"".join(cid + struct.pack("<I", size) + body for cid, size, body in t[1])
            + b"data"
            + struct.pack("<I", t[2])
            + t[3]
        )
    )


@FUZZ
@given(
    _wav_like() | st.binary(max_size=300),
    st.sampled_from(["wav", "pcm", "mp3", "opus", "aac", "flac"]),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_audio_parsers_agree_with_the_whole_body_check(body, expect, cuts):
    """Whatever the split, the durations timed add up to what the whole-body check measures,
    and the first bytes the parser kept are enough for that check to say what the whole body is."""
    tl, p, err = run("audio/wav", expect, split(body, cuts))
    try:
        whole = containers.check_audio(body, "audio/wav", expect, RATE)
    except containers.AudioError as e:
        if err is None:  # judged from the first bytes the parser kept, it fails the same way
            with pytest.raises(containers.AudioError, match=re.escape(str(e))):
                containers.check_audio(p.head, "audio/wav", expect, RATE, size=len(body))
        return
    if err is None:
        assert containers.check_audio(p.head, "audio/wav", expect, RATE, size=len(body)) == whole
    if err is None and whole.audio_s is not None and whole.format in ("wav", "pcm"):
        assert sum(tl.audio_ms) == pytest.approx(whole.audio_s * 1000)


MAGIC = st.sampled_from([b"\xff\xfb", b"\xff\xf3", b"\xff\xf1", b"\xff\xf9", b"OggS", b"ID3", b"fLaC"])


@FUZZ
@given(
    st.lists(
        MAGIC | st.binary(max_size=60) | st.sampled_from([b"\xff\xfb\x90\x00" + bytes(413), b"TAG"]),
        min_size=1,
        max_size=10,
    ).map(b"".join),
    st.sampled_from(["mp3", "opus", "aac", "flac"]),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_compressed_parsers_are_total(body, expect, cuts):
    tl, p, err = run("audio/mpeg", expect, split(body, cuts))
    assert len(tl.at) == len(tl.audio_ms)
    assert all(ms is None or (ms >= 0 and ms == ms) for ms in tl.audio_ms)
    if err is None and p.duration_s() is not None:
        assert p.duration_s() == pytest.approx(sum(tl.audio_ms) / 1000.0)
