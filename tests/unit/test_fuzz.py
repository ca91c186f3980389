"""The parsers, fuzzed: whatever a server, a corpus file or an option sends, each returns a value
or raises its module's own error class (one sentence for a person), never anything else."""

from __future__ import annotations

import math
import struct
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hypothesis import HealthCheck, example, given, settings, strategies as st

from procs import plain_parser
from tts_knee.audio import containers
from tts_knee.locustfiles import headers, settings as settings_mod
from tts_knee.locustfiles.inputs import corpus

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
HEADER_TEXT = st.text(st.characters(codec="latin-1"), max_size=200)  # what an HTTP header can carry
NOW = 1_750_000_000.0


# ---- headers -----------------------------------------------------------------------------


@FUZZ
@given(
    HEADER_TEXT
    | st.sampled_from(
        [
            "",
            "  ",
            "0",
            "120",
            "999999999999999999999999",
            "-1",
            "1.5",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Mon, 01 Jan 0001 00:00:00 GMT",
            "Wed, 21 Oct 2015 07:28:00",
            "soon-ish",
            "٣",
            "²",
        ]
    )
)
def test_parse_retry_after_is_total(raw):
    value = headers.parse_retry_after(raw, NOW)
    assert value is None or (isinstance(value, float) and value >= 0 and not math.isnan(value))


@FUZZ
@given(st.integers(0, 10**30))
def test_retry_after_delta_seconds_parse_exactly(n):
    assert headers.parse_retry_after(f" {n} ", NOW) == float(n)


@FUZZ
@given(
    HEADER_TEXT
    | st.lists(st.tuples(st.text(max_size=10), st.text(max_size=12)), max_size=6).map(
        lambda ms: ", ".join(f"{n};dur={d}" for n, d in ms)
    )
)
@example('queue;dur=nan, infer;dur=inf, x;dur=1e400, ok;dur="2.5"')
@example("a" * 10_000)
def test_parse_server_timing_is_total(raw):
    stages = headers.parse_server_timing(raw)
    assert stages is None or (stages and all(isinstance(k, str) and k and math.isfinite(v) for k, v in stages.items()))


@FUZZ
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
        st.floats(0, 1e6, allow_nan=False),
        min_size=1,
        max_size=5,
    )
)
def test_server_timing_round_trip(stages):
    raw = ", ".join(f'{k};desc="x";dur={v!r}' for k, v in stages.items())
    assert headers.parse_server_timing(raw) == stages


# ---- audio -------------------------------------------------------------------------------

CONTENT_TYPES = st.none() | st.sampled_from(
    [
        "audio/wav",
        "audio/x-wav; codecs=1",
        "application/json",
        "text/html; charset=utf-8",
        "application/octet-stream",
        "",
    ]
)
FORMATS = st.sampled_from(list(settings_mod.FORMATS))


def _wav_chunks(data: bytes) -> st.SearchStrategy[bytes]:
    """WAV-shaped bodies with random chunk order, sizes and fields."""
    chunk = st.tuples(
        st.sampled_from([b"fmt ", b"data", b"LIST", b"fact", b"\x00\x00\x00\x00"]),
        st.integers(0, 2**32 - 1),
        st.binary(max_size=40),
    )
    return st.lists(chunk, max_size=4).map(
        lambda cs: (
            b"RIFF"
            + struct.pack("<I", 0xFFFFFFFF)
            + b"WAVE"
            + b"".join(cid + struct.pack("<I", size) + body for cid, size, body in cs)
            + data
        )
    )


@FUZZ
@given(
    st.binary(max_size=300)
    | _wav_chunks(b"\x01\x02" * 8)
    | st.builds(
        lambda n, r, c, w, cut: containers.wav_header(n, r, c, w)[:cut] + b"\0" * n,
        st.integers(0, 64),
        st.integers(0, 2**21),
        st.integers(0, 255),
        st.integers(0, 8),
        st.integers(0, 44),
    ),
    CONTENT_TYPES,
    FORMATS,
    st.integers(1, 192000),
)
def test_check_audio_is_total(body, ctype, fmt, rate):
    try:
        a = containers.check_audio(body, ctype, fmt, rate)
    except containers.AudioError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert a.audio_s is None or (a.audio_s > 0 and math.isfinite(a.audio_s))
    assert 0 <= a.data_offset <= len(body) and a.data_offset + a.data_bytes <= len(body)


@FUZZ
@given(st.binary(max_size=200) | _wav_chunks(b""))
def test_parse_wav_is_total(body):
    try:
        a = containers.parse_wav(body)
    except containers.AudioError:
        return
    assert a.data_bytes > 0 and a.audio_s > 0


@FUZZ
@given(
    st.sampled_from([8000, 16000, 22050, 24000, 44100, 48000]),
    st.integers(1, 2),
    st.sampled_from([1, 2, 3, 4]),
    st.integers(1, 4000),
)
def test_wav_header_plus_data_parses_back_to_its_duration(rate, channels, width, frames):
    data = bytes(frames * channels * width)
    a = containers.parse_wav(containers.wav_header(len(data), rate, channels, width) + data)
    assert (a.sample_rate, a.channels, a.sample_width, a.data_offset, a.data_bytes) == (
        rate,
        channels,
        width,
        44,
        len(data),
    )
    assert a.audio_s == frames / rate


@FUZZ
@given(
    st.sampled_from(containers.PLACEHOLDER_SIZES),
    st.sampled_from(containers.PLACEHOLDER_SIZES + (12345,)),
    st.integers(1, 4000),
)
def test_placeholder_sizes_parse_as_streaming(data_size, riff_size, frames):
    """A streamed WAV's sizes are placeholders: the duration comes from the bytes that came."""
    head = bytearray(containers.wav_header(0, 24000, 1, 2))
    struct.pack_into("<I", head, 4, riff_size)
    struct.pack_into("<I", head, 40, data_size)
    a = containers.check_audio(bytes(head) + bytes(2 * frames), "audio/wav")
    assert a.data_bytes == 2 * frames and a.audio_s == frames / 24000


# ---- corpus --------------------------------------------------------------------------------

LINES = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.sampled_from(
            [
                "",
                "# comment",
                "{}",
                "[]",
                "null",
                '{"text": ""}',
                '{"text": 5}',
                '{"text": "hi", "id": 1}',
                '{"text": "hi", "tier": "huge"}',
                '{"text": "hi", "tier": null}',
                '{"text": "a", "id": "x"}',
                '{"text": "\\ud800"}',
                '{"text": "ok", "id": {"a": 1}}',
            ]
        ),
        st.builds(
            lambda t, i: f'{{"text": {t!r}, "id": "{i}"}}'.replace("'", '"'), st.text(max_size=20), st.integers(0, 3)
        ),
    ),
    max_size=8,
)


@FUZZ
@given(LINES, st.sampled_from([".txt", ".jsonl", ".csv", ""]), st.booleans())
def test_corpus_load_is_total(lines, suffix, as_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"texts{suffix}"
        raw = "\n".join(lines)
        if as_bytes:  # not necessarily UTF-8
            path.write_bytes(raw.encode("utf-8", "surrogatepass")[::-1])
        else:
            path.write_text(raw, encoding="utf-8", errors="surrogatepass")
        try:
            texts = corpus.load(path)
        except corpus.CorpusError as e:
            assert str(path) in str(e) and "\n" not in str(e)
            return
    assert texts and all(t.text.strip() and t.tier in corpus.TIERS for t in texts)
    assert len({t.id for t in texts}) == len(texts) or suffix != ".jsonl"


def test_corpus_load_of_a_directory_or_nothing():
    with tempfile.TemporaryDirectory() as tmp:
        for path in (Path(tmp), Path(tmp) / "missing.jsonl"):
            try:
                corpus.load(path)
            except corpus.CorpusError as e:
                assert str(path) in str(e)
            else:
                raise AssertionError(f"{path} loaded")


def _non_space(s: str) -> str:
    return "".join(s.split())


@FUZZ
@given(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=600)
    | st.lists(
        st.sampled_from(
            [
                "Hello world.",
                "你好，世界。",
                "a,b,c",
                "  ",
                "…",
                "Mr. X!",
                "123;456",
                "supercalifragilistic",
                "🙂🙂",
                "\n",
            ]
        ),
        max_size=40,
    ).map("".join),
    st.integers(-1, 120),
)
def test_split_keeps_every_character_within_the_limit(text, max_chars):
    segments = corpus.split(text, max_chars)
    assert segments or not text.strip()  # the corpus never holds a blank text; split makes none either
    if max_chars > 0 and len(text) > max_chars:
        assert all(0 < len(s) <= max_chars for s in segments), segments
    assert _non_space("".join(segments)) == _non_space(text)


# ---- settings ------------------------------------------------------------------------------


def _defaults() -> dict:
    return vars(plain_parser().parse_args([]))


DEFAULTS = _defaults()
SPECIAL = st.sampled_from(
    [
        "",
        "0",
        "-3",
        "1,2,4",
        "1,,2",
        "a,b",
        "429,conn",
        "conn,999",
        "@/nonexistent",
        "\x00",  # no file can have the name
        "@\x00",
        '{"text": "{text}"}',
        "{text}",
        "http://127.0.0.1:9300",
        "ftp://x",
        "json",
        "openai",
        "PCM",
        "stop",
        "nan",
        "inf",
        "-inf",
        "1e309",
        "9" * 400,
    ]
)
#: What Locust can hand over for an option: its parsed type, or the text of a .conf file or the web UI.
BY_TYPE = {
    bool: st.booleans(),
    int: st.integers(-10, 10**12),
    float: st.floats(),
    list: st.lists(st.text(max_size=20) | SPECIAL, max_size=3),
}


def _option_values(name: str) -> st.SearchStrategy:
    return BY_TYPE.get(type(DEFAULTS[name]), st.nothing()) | st.text(max_size=30) | SPECIAL


OPTIONS = st.sampled_from(sorted(DEFAULTS)).flatmap(lambda name: st.tuples(st.just(name), _option_values(name)))
HOSTS = (
    st.none()
    | st.sampled_from(
        ["http://127.0.0.1:8300", "https://tts.example:443/", "127.0.0.1:8300", "", "http://", "http://[::1]:8300"]
    )
    | st.text(max_size=20)
)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPTIONS, max_size=4), HOSTS)
@example([("trace", "\x00")], "http://127.0.0.1:8300")  # a name no file can have: found by this test
@example([("texts", "\x00")], "http://127.0.0.1:8300")
@example([("voices", "@\x00")], "http://127.0.0.1:8300")
def test_from_options_is_total(changes, host):
    options = SimpleNamespace(**{**DEFAULTS, **dict(changes)})
    try:
        s = settings_mod.from_options(options, host)
    except settings_mod.SettingsError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert s.steps and min(s.steps) >= 1 and s.retry.max_attempts >= 1
    assert 0 <= s.settle_time < s.step_time
    assert math.isfinite(s.step_time) and math.isfinite(s.request_timeout)
    s.payload('héllo "quoted" {text}')  # every accepted API shape can build a request


def test_from_options_defaults_are_valid():
    s = settings_mod.from_options(SimpleNamespace(**DEFAULTS), "http://127.0.0.1:8300")
    assert s.tts_api == "openai" and s.steps == (1, 2, 4, 8, 16)
