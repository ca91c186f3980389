"""The audio writer: files written over with exactly the audio's bytes, in the event loop while
writes are quick and on its thread once one was slow, errors handed back to the user either
way."""

from __future__ import annotations

import pytest

gevent = pytest.importorskip("gevent")

from tts_knee.locustfiles import audio  # noqa: E402


def _write(writer, path, data):
    g = gevent.spawn(writer.write, str(path), data)
    g.join(timeout=10)
    assert g.ready()
    return g


def test_a_file_written_over_holds_only_the_new_audio(tmp_path):
    w = audio.AudioWriter()
    path = tmp_path / "a.wav"
    _write(w, path, [b"x" * 70_000, bytearray(b"y" * 5), memoryview(b"")]).get()
    assert path.read_bytes() == b"x" * 70_000 + b"y" * 5
    _write(w, path, [b"short"]).get()
    assert path.read_bytes() == b"short"
    assert w._thread is None  # quick writes stay in the event loop


def test_after_one_slow_write_the_thread_writes_and_hands_back_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(audio, "WRITE_STALL_S", 0.0)  # every write counts as slow
    w = audio.AudioWriter()
    _write(w, tmp_path / "first.wav", [b"1" * 10]).get()
    assert w._thread is not None
    # many buffers, more than one writev takes
    pieces = [bytes([i % 256]) * 3 for i in range(audio._IOV_MAX + 7)]
    _write(w, tmp_path / "second.wav", pieces).get()
    assert (tmp_path / "second.wav").read_bytes() == b"".join(pieces)
    with pytest.raises(OSError):
        _write(w, tmp_path / "no-such-dir" / "x.wav", [b"z"]).get()
