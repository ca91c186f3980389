"""Text streamed in, end to end through the shared attempt path: a real headless Locust run whose
transport is a scripted session (it opens once, then takes the text in pieces as
locustfiles/inputs/pacing says and speaks each flushed unit 50 ms after its flush) gets the text
fields in its records, TTFA counted from the first text sent, the step summary's tail and the
step table's ``tail p95``, and the SLO term ``tail_p95_ms``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from procs import ROOT, dashboard, read_jsonl
from rundirs import assert_declared

#: Times the client against the simulator's own clock to the millisecond: run with the machine
#: to itself (make test's second pass).
pytestmark = pytest.mark.alone

LOCUSTFILE = """
import gevent
from tts_knee.locustfiles import attempt, node, preflight  # noqa: F401  (node attaches the listeners)
from tts_knee.locustfiles.clock import mono
from tts_knee.audio.containers import Audio
from tts_knee.locustfiles.inputs.pacing import Pacer, schedule
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.transports import NO_ASK, Answered, AudioPiece, Ended, Received, TextSent, Transport
from tts_knee.locustfiles.user import TTSUser  # noqa: F401

CONNECT_S, SPEAK_AFTER_S, MS_PER_TOKEN = 0.02, 0.05, 100.0


class Paced(Transport):
    request_type, name = "WS", "/scripted"

    def __init__(self, s, payload=None):
        self.s = s
        self.open = False

    def exchange(self, text, ask=NO_ASK):
        connect_ms = None
        if not self.open:
            began = mono()
            gevent.sleep(CONNECT_S)
            self.open, connect_ms = True, (mono() - began) * 1000.0
        yield Answered("OK", True, "session OK", 200)
        pacer = Pacer(schedule(text, self.s.text_rate, self.s.text_jitter), mono(), self.s.flush == "sentence")
        speak, unit, got = [], 0, 0   # (due, ms) of the audio to come; tokens since the last flush
        while not pacer.done or speak:
            due = min([pacer.due_at()] * (not pacer.done) + [at for at, _ in speak])
            gevent.sleep(max(0.0, due - mono()))
            now = mono()
            send = None if pacer.done else pacer.take(now)
            if send is not None:
                unit += send.pieces
                yield TextSent(mono(), len(send.text), send.flush, send.last, connect_ms)
                connect_ms = None
                if send.flush or send.last:
                    speak.append((now + SPEAK_AFTER_S, unit * MS_PER_TOKEN))
                    unit = 0
            elif speak and speak[0][0] <= now:
                _, ms = speak.pop(0)
                got += int(ms * 48)
                yield Received(now, int(ms * 48))
                yield AudioPiece(now, ms)
        sound = (b"\\x00\\x10\\x00\\xf0" * (got // 4 + 1))[:got]  # sound, not silence
        yield Ended(mono(), audio=Audio("pcm", got / 48000, 24000, 1, 2, 0, got), data=[sound])

    def reset(self):
        self.open = False

    def close(self):
        self.open = False


attempt.transport_for = preflight.transport_for = Paced
"""
TEXT = "One two three. Four five six."  # 6 tokens at 20/s: the first sentence done at 100 ms, the text at 250


def late_by(measured_ms: float, scripted_ms: float) -> bool:
    """The figure is the script's, or later: the script's times are sleeps, which a loaded 2-core
    machine ends late but never early, so a lower bound only (5 ms for the clock read a little apart
    from the schedule's start); what tells one figure from another is the record's own arrivals."""
    return measured_ms >= scripted_ms - 5


def _run(tmp: Path, flush: str):
    (tmp / "paced.py").write_text(LOCUSTFILE)
    (tmp / "texts.txt").write_text(TEXT + "\n")
    run_dir = tmp / "run"
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("locust")),
            "-f",
            str(tmp / "paced.py"),
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
            "--texts",
            str(tmp / "texts.txt"),
            "--text-rate",
            "20",
            "--flush",
            flush,
            "--exit-code-on-error",
            "0",
            "--run-dir",
            str(run_dir),
        ],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    assert_declared(run_dir)
    return read_jsonl(run_dir / "requests.jsonl"), run_dir


@pytest.fixture(scope="module")
def per_sentence(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("sentence"), "sentence")


def test_each_record_times_the_listener_against_the_text(per_sentence):
    records, run_dir = per_sentence
    ok = [r for r in records if r["ok"]]
    assert len(ok) >= 3 and len(ok) == len(records)
    for r in ok:
        # the text went out over 250 ms from its first piece; the first sentence was heard 50 ms after its flush.
        # A sleep never ends early but may end late on a busy machine: each figure is at least the script's
        # (late_by), and is pinned to what it counts by the record's own arrivals, to the 0.1 ms they are
        # rounded to, not by an upper bound a late timer could break.
        assert 0 <= r["text_first_ms"] <= r["text_done_ms"]
        assert late_by(r["text_done_ms"] - r["text_first_ms"], 250)
        assert late_by(r["ttfa_ms"], 150)
        assert r["ttfa_ms"] == pytest.approx(r["chunk_at_ms"][0] - r["text_first_ms"], abs=0.2)
        assert r["done_to_audio_ms"] == 0.0  # the first sentence was playing when the text was done
        assert late_by(r["tail_ms"], 50)
        assert r["tail_ms"] == pytest.approx(r["chunk_at_ms"][-1] - r["text_done_ms"], abs=0.2)  # to the last audio
        assert r["chunk_audio_ms"] == [300.0, 300.0] and r["underruns"] == 0
    # the session opened once, on the first turn
    assert late_by(ok[0]["connect_ms"], 20) and ok[0]["text_first_ms"] >= ok[0]["connect_ms"]
    assert all(r["connect_ms"] is None for r in ok[1:])
    options = json.loads((run_dir / "run.json").read_text())["options"]
    assert (options["text_rate"], options["text_jitter"], options["flush"]) == (20.0, 0.0, "sentence")


def test_the_step_gets_the_tail_and_the_slo_judges_it(per_sentence):
    records, run_dir = per_sentence
    # no tail is shorter than the script's 50 ms, so a 40 ms bound fails the step and a generous one passes it
    for bound, passes in ((40, False), (400, True)):
        judged = dashboard(run_dir, "--slo", f"tail_p95_ms<={bound}")
        assert judged.returncode == 0, judged.stderr
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["slo"]["steps"][0]["pass"] is passes
    tail, streams = summary["steps"][0]["tail_ms"], summary["steps"][0]["streams"]
    # a turn still speaking when the step ended finishes in the run's drain, and is not the step's
    assert streams["counted"] + streams["cut_by_step_end"] == len([r for r in records if r["ok"]])
    assert tail["count"] == streams["counted"] and late_by(tail["p95"], 50)
    assert "tail p95" in judged.stdout.splitlines()[1]
    assert summary["slo"]["steps"][0]["values"]["tail_p95_ms"] == pytest.approx(tail["p95"])


def test_flushing_only_at_the_end_leaves_the_listener_waiting_for_the_whole_text(tmp_path):
    records, _ = _run(tmp_path, "end")
    ok = [r for r in records if r["ok"]]
    assert ok
    for r in ok:
        assert late_by(r["ttfa_ms"], 300)  # one unit, spoken 50 ms after the text was done
        assert late_by(r["done_to_audio_ms"], 50)
        # lower bounds above (sleeps end late); what each counts, from the record's own arrivals (0.1 ms rounding)
        assert r["done_to_audio_ms"] == pytest.approx(r["chunk_at_ms"][0] - r["text_done_ms"], abs=0.2)
        assert r["ttfa_ms"] == pytest.approx(r["chunk_at_ms"][0] - r["text_first_ms"], abs=0.2)
        assert late_by(r["tail_ms"], 50) and r["chunk_audio_ms"] == [600.0]
