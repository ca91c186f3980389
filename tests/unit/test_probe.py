"""The hostile-text probe's parts that need no server: --probe-texts named wrong is one sentence,
the bytes-only class goes in HTTP JSON bodies only (as the raw byte its text escapes), and each
final attempt reads as the outcome a team guards against."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.analysis.probe import outcome
from tts_knee.audio.signal import SILENT
from tts_knee.locustfiles import probe, settings as settings_mod
from tts_knee.runformat.probe import CLASSES, class_of


def _settings(host="http://127.0.0.1:8300", **changes):
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), host)


def test_all_probes_every_class_and_run_json_names_them():
    s = _settings(probe_texts="all")
    assert s.probe == tuple(CLASSES) and s.public()["probe_texts"] == list(CLASSES)
    assert {class_of(t.id) for t in s.probe_texts} == set(CLASSES)
    assert all(t.id.startswith("probe:") for t in s.probe_texts)
    assert _settings().probe == () and _settings().public()["probe_texts"] is None
    assert _settings(probe_texts="long, empty").probe == ("empty", "long")  # in the classes' order


@pytest.mark.parametrize(
    "changes, says",
    [
        (
            {"probe_texts": "empty,nonsense"},
            "--probe-texts names 'nonsense', which is not a class of text; the classes are empty, whitespace",
        ),
        (
            {"probe_texts": "all", "rates": "2,4"},
            "--probe-texts runs at concurrency 1 and the recommended concurrency: use it with --steps, not --rates",
        ),
    ],
)
def test_a_probe_named_wrong_is_one_sentence(changes, says):
    with pytest.raises(settings_mod.SettingsError) as e:
        _settings(**changes)
    assert says in str(e.value)


def test_invalid_utf8_is_the_raw_byte_in_a_json_body_and_left_out_elsewhere(caplog):
    s = _settings(probe_texts="invalid-utf8")
    (text,) = s.probe_texts
    body, _ = s.payload(text.text)
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    assert b"caf\xe9 au lait" in body
    assert json.loads(body.decode("latin-1"))["input"].startswith("caf")  # JSON otherwise
    w = _settings("tcp://127.0.0.1:10200", tts_protocol="wyoming", probe_texts="invalid-utf8,numbers")
    assert {class_of(t.id) for t in w.probe_texts} == {"numbers"}
    assert "invalid-utf8 is sent in HTTP JSON bodies only" in caplog.text


@pytest.mark.parametrize(
    "status, ok, error, expected",
    [
        (200, True, None, "audio"),
        (400, False, "400 Bad Request", "refused"),
        (422, False, None, "refused"),
        (500, False, None, "server_error"),
        (503, False, None, "server_error"),
        (504, False, None, "timeout"),
        (-1, False, "timed out after 2 s waiting for the first byte", "timeout"),
        (200, False, SILENT, "silent"),
        (-1, False, "connection reset by peer", "error"),
        (200, False, "the body is not audio", "error"),
    ],
)
def test_each_final_attempt_reads_as_one_outcome(status, ok, error, expected):
    assert outcome(status, ok, error) == expected


def test_a_probe_step_waits_for_every_text_twice_and_two_per_user():
    p = probe.Probe(probe.texts(("empty", "one-char"), True))
    assert len(p.texts) == 4
    assert p.requests_at(1) == 8 and p.requests_at(8) == 16
