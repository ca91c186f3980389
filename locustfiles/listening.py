"""Listening (``--asr-model``): which attempts the ASR judge hears, and getting their clips to it.

**What is judged.** ``--asr-sample N`` texts spread evenly over the corpus (every k-th) are the
judged texts; at each step the first successful, uncancelled answer to each of them sent past the
step's settle window (``--settle-time``: not beside the last step's load) is judged,
so every step judges the same texts where it sends them (the method compares steps on equal
work, and the speech knee pairs the steps' clips by text). A text split into segments is not
judged (each segment is an attempt of its own).

**Where the judge runs.** One judge process (:mod:`audio.judge`) beside the master, or beside
the local runner: a worker ships each clip it picked to the master as a Locust message
(:data:`runformat.wire.CLIP`), about 24 clips a step of a few hundred kB each. So the judge's CPU
is never spent on a load generator (a worker keeps its cores for the load), the model is loaded
once per run, not once per worker, and the clips and verdicts land in the run directory with the
records (``speech/``, ``speech.jsonl``). Beside a local runner it runs at a lower priority
(nice 10): the load and its timing come first.

**What it hears** (:mod:`audio.hearing`): the words, the voice and the sound, or the words alone
(``--asr-words-only``, or the listening models not installed: the run says so). **Kept, not
judged** (``--asr-keep``): the same clips are picked and kept in ``speech/``, each with its line in
``speech.jsonl``, and no judge runs: ``tts-knee judge RUN_DIR`` judges them afterwards.

**Falling behind.** A judge slower than the clips come (listening costs more CPU than the words
alone, and the judge runs at a lower priority than the load) works through them after the load:
up to :data:`QUEUE_BYTES` of clips wait for it, and the run's end waits for it as long as it keeps
answering (:data:`FINISH_IDLE_S` at most without an answer). A clip beyond that is not judged and
its line in ``speech.jsonl`` says so, as does the line of every clip still waiting when the judge
stopped answering at the run's end, or when the judge process died. Nothing of
the load run depends on the judge: a judge that dies mid-run leaves every record intact.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import deque
from typing import IO

import gevent
from gevent import subprocess
from gevent.event import Event

from tts_knee import runformat
from tts_knee.analysis import speech as speech_mod
from tts_knee.audio import asr, containers, hearing as hearing_mod, judge as judge_proc
from tts_knee.collectors import puller
from tts_knee.runformat import wire

log = logging.getLogger("tts_knee.listening")

#: Clips waiting for the judge at most, in bytes (a run's --asr-sample clips a step, hundreds of
#: kB each, fit many times over); one beyond is not judged.
QUEUE_BYTES = 256 << 20
#: At the run's end, the judge is waited for while it answers: at most this long for each answer.
FINISH_IDLE_S = 180.0
#: How long the judge process may take to load its model.
READY_S = 180.0


class Picker:
    """On every load-generating node: picks the attempts to judge and hands their clips on."""

    def __init__(self, run):
        self.run = run
        settings = run.settings
        self.ids = speech_mod.judged_texts([text.id for text in settings.texts], settings.asr_sample)
        self.cap = settings.asr_sample
        self.taken: dict[int, set] = {}

    def consider(self, rec: dict, seg, parts: list) -> None:
        """After an attempt's record went out: hand its clip on if it is one to judge."""
        if not rec["ok"] or not rec["final"] or rec.get("cancelled") or seg.n != 1 or rec["step"] is None:
            return
        if rec.get("settled") is False:  # sent in the step's warm-up, beside the last step's load
            return
        text = seg.text
        if text.id not in self.ids:
            return
        taken = self.taken.setdefault(rec["step"], set())
        if text.id in taken or len(taken) >= self.cap:
            return
        taken.add(text.id)
        data, audio = parts[-1]
        body = data if isinstance(data, (bytes, bytearray)) else b"".join(data)
        if audio.format == "pcm":
            body = (
                containers.wav_header(len(body), audio.sample_rate, audio.channels or 1, audio.sample_width or 2) + body
            )
        settings = self.run.settings
        clip = {
            "req_id": rec["req_id"],
            "step": rec["step"],
            "concurrency": rec["concurrency"],
            "text_id": text.id,
            "text": seg.words,
            "language": settings.asr_language or seg.ask.language or text.written_in or settings.tts_language or None,
            "reference": (seg.ask.ref_audio.path if seg.ask.ref_audio is not None else settings.reference_voice)
            or None,
        }
        if self.run.is_worker:
            self.run.environment.runner.send_message(wire.CLIP.name, wire.CLIP(**clip, audio=bytes(body)))
        elif self.run.judge is not None:
            self.run.judge.offer(clip, bytes(body))


class Judge:
    """Master or local runner: the judge process, its queue, ``speech/`` and ``speech.jsonl``;
    with ``--asr-keep`` only the clips and their lines, no process."""

    def __init__(self, settings, run_dir, disk, hearing: hearing_mod.Hearing, on_judged=None):
        self.s = settings
        self.hearing = hearing
        self.on_judged = on_judged  # --metrics-port: the live metrics take every speech.jsonl line too
        self.run_dir = run_dir
        self.disk = disk
        self.path = run_dir / runformat.SPEECH_FILE
        (run_dir / runformat.SPEECH_DIR).mkdir(exist_ok=True)
        self.disk.append(self.path, b"")
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: gevent.Greenlet[[subprocess.Popen[bytes], IO[bytes]], None] | None = None
        self.queue: deque = deque()
        self.queued_bytes = 0  # the audio of the clips in the queue
        self.sent: deque = deque()  # clips written to the judge, not answered yet
        self.taken: dict[int, set] = {}
        self.counts = {"offered": 0, "judged": 0, "not_judged": 0}
        self.first = hearing_mod.FirstHeard()  # what each clip's `similarity` compares with
        self._more = Event()
        self._done = Event()
        self.dead: str | None = None

    def describe(self) -> dict:
        """run.json's ``speech``: the clips' counts, what was heard and by which model."""
        kept = self.s.asr_keep
        return {
            **self.counts,
            "heard": [] if kept else self.hearing.heard,
            "not_heard": None if kept else self.hearing.not_heard,
            "model": None if kept else self.s.asr_model,
            "afterwards": False,
        }

    def start(self) -> str | None:
        """Start the judge and wait for its model; None once ready, else why not (a sentence).
        With --asr-keep there is none to start."""
        if self.s.asr_keep:
            return None
        try:
            settings = self.s
            proc = self.proc = subprocess.Popen(
                hearing_mod.judge_command(
                    settings.asr_model,
                    settings.asr_threads,
                    settings.asr_language,
                    settings.asr_device,
                    self.hearing.listen,
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                preexec_fn=lambda: os.nice(10),
                env=hearing_mod.judge_environment(settings.asr_threads),
            )
        except OSError as error:
            return f"the ASR judge did not start: {error}"
        puller.SIDECARS.add(proc.pid)  # its CPU is not the load generator's
        assert proc.stdin is not None and proc.stdout is not None  # both piped
        # False: the block just ends at the timeout (gevent takes it; its stubs do not say so)
        with gevent.Timeout(READY_S, False):  # type: ignore[arg-type]
            line = proc.stdout.readline()
            try:
                said = json.loads(line) if line else {}
            except ValueError:
                said = {}
            if said.get("ready"):
                gevent.spawn(self._feed, proc, proc.stdin)
                self._reader = gevent.spawn(self._read, proc, proc.stdout)
                return None
            proc.kill()
            return said.get("fatal") or "the ASR judge exited before its model loaded"
        proc.kill()
        return f"the ASR judge did not load --asr-model {self.s.asr_model} within {READY_S:g} s"

    def offer(self, clip: dict, audio: bytes) -> None:
        """A clip to judge (the first of its text at its step; at most --asr-sample a step)."""
        taken = self.taken.setdefault(clip["step"], set())
        if clip["text_id"] in taken or len(taken) >= self.s.asr_sample:
            return
        taken.add(clip["text_id"])
        self.counts["offered"] += 1
        name = f"{runformat.SPEECH_DIR}/{_safe(clip['req_id'])}.wav"
        self.disk.append(self.run_dir / name, audio)
        self.disk.close(self.run_dir / name)
        clip = {**clip, "clip": name}
        if self.s.asr_keep:
            self._write(clip, **hearing_mod.unjudged(clip, speech_mod.KEPT))
        elif self._done.is_set():
            self._unjudged(clip, "not judged: it came after the judge had finished")
        elif self.dead is not None:
            self._unjudged(clip, f"not judged: {self.dead}")
        elif self.queued_bytes + len(audio) > QUEUE_BYTES:
            self._unjudged(clip, f"not judged: the judge was behind ({len(self.queue)} clips waiting)")
        else:
            self.queue.append((clip, audio))
            self.queued_bytes += len(audio)
            self._more.set()

    def _feed(self, proc: subprocess.Popen[bytes], to_judge: IO[bytes]) -> None:
        while True:
            while not self.queue:
                if self._done.is_set():
                    with contextlib.suppress(OSError):
                        to_judge.close()
                    return
                self._more.clear()
                self._more.wait()
            clip, audio = self.queue.popleft()
            self.queued_bytes -= len(audio)
            self.sent.append(clip)
            try:
                to_judge.write(
                    judge_proc.frame(
                        {
                            "id": clip["req_id"],
                            "text": clip["text"],
                            "language": clip["language"],
                            "metric": self.s.asr_metric,
                            "reference": clip.get("reference"),
                        },
                        audio,
                    )
                )
                to_judge.flush()
            except (OSError, ValueError):
                self._died(proc)
                return

    def _read(self, proc: subprocess.Popen[bytes], from_judge: IO[bytes]) -> None:
        for line in from_judge:
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if not self.sent:
                continue
            clip = self.sent.popleft()
            self.counts["not_judged" if said.get("reason") else "judged"] += 1
            self._write(clip, **hearing_mod.judged(clip, said, self.hearing, self.first))
        if proc.poll() is None:
            proc.wait()
        if self.sent or self.queue or not self._done.is_set():
            self._died(proc)

    def _died(self, proc: subprocess.Popen[bytes]) -> None:
        if self.dead is None:
            code = proc.poll()
            self.dead = (
                f"the judge process ended (exit status {code})"
                if code is not None
                else "the judge process stopped answering"
            )
            if not self._done.is_set():
                log.error(
                    "the ASR judge went away mid-run (%s); the load run goes on, and the clips left are not judged",
                    self.dead,
                )
        for clip in list(self.sent):
            self._unjudged(clip, f"not judged: {self.dead}")
        self.sent.clear()
        while self.queue:
            self._unjudged(self.queue.popleft()[0], f"not judged: {self.dead}")

    def _answered(self) -> int:
        """Clips the judge has answered so far (judged or not)."""
        return self.counts["judged"] + self.counts["not_judged"]

    def _unjudged(self, clip: dict, reason: str) -> None:
        self.counts["not_judged"] += 1
        self._write(clip, **hearing_mod.unjudged(clip, reason))

    def _write(self, clip: dict, **said) -> None:
        entry = runformat.speech_entry(
            req_id=clip["req_id"],
            step=clip["step"],
            concurrency=clip["concurrency"],
            text_id=clip["text_id"],
            text=clip["text"],
            clip=clip.get("clip"),
            **said,
        )
        self.disk.append(self.path, runformat.jsonl_bytes(entry))
        if self.on_judged is not None:
            self.on_judged(entry)

    def finish(self) -> None:
        """The run has ended: wait for the clips the judge has while it answers (FINISH_IDLE_S at
        most for each answer), then stop it; the clips it did not get to are written as not judged."""
        proc = self.proc
        if proc is None:
            if self.s.asr_keep:
                self.disk.close(self.path)
                log.info("speech: %d clips kept for tts-knee judge (speech/, speech.jsonl)", self.counts["offered"])
            return
        waiting = len(self.queue) + len(self.sent)
        if waiting and self.dead is None:
            log.info("the ASR judge has %d clips left; waiting while it answers", waiting)
        self._done.set()
        self._more.set()
        answered = -1
        while proc.poll() is None and self._answered() > answered:
            answered = self._answered()
            with gevent.Timeout(FINISH_IDLE_S, False):  # type: ignore[arg-type]  # False: as in start
                proc.wait()
        if self._reader is not None and proc.poll() is not None:
            self._reader.join()
        if proc.poll() is None:
            # said before the kill: the reader, which sees the judge's output end first, writes it
            self.dead = f"the run's end waited {FINISH_IDLE_S:g} s for the judge's next answer"
            proc.kill()
            proc.wait()
            self._died(proc)
        elif self.sent or self.queue:
            self._died(proc)
        self.disk.close(self.path)
        counts = self.counts
        if counts["offered"]:
            log.info("speech: %d clips judged, %d not (speech.jsonl)", counts["judged"], counts["not_judged"])


def _safe(name: str) -> str:
    return "".join(char if char.isalnum() or char in "-._" else "_" for char in name)[:120]


def check(settings) -> hearing_mod.Hearing:
    """What the judge will hear; raises :class:`audio.asr.AsrError` (one sentence) where its
    options cannot work. Kept clips (--asr-keep) are heard by no one yet."""
    if settings.asr_keep:
        return hearing_mod.Hearing(False)
    asr.check_model(settings.asr_model, settings.asr_language, settings.asr_metric)
    return hearing_mod.decide(settings.asr_listen, settings.asr_words_only, settings.reference_voice)
