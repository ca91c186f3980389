"""A tts-knee node's life in Locust, and the Locust events that drive it (options, init, test
start and stop, quitting, the custom messages). Importing this module only attaches listeners.

Each node's state is one :class:`Node`, made at Locust's ``init`` and kept as the environment's
only tts-knee attribute, ``environment.tts_knee``; the node holds the current :class:`Run` (the
run directory, the step plan, records, collectors, the end of the run). What the master learns
from its workers' heartbeats is :mod:`locustfiles.heartbeats`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import signal
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from tts_knee import runformat
from tts_knee.audio import asr
from tts_knee.collectors.puller import CollectorPuller
from tts_knee.runformat import exits, wire
from tts_knee.runformat.metric_roles import ServerNames, parse_roles
from tts_knee.runformat.options import CUT_BY_RUN_END
from tts_knee.runformat.schema import NOT_SENT_REASONS, Preflight

from . import heartbeats, listening, metrics as metrics_mod, provenance, settings as settings_mod, startup, timesync
from .arrivals import StepArrivals, step_entry as arrivals_entry
from .clock import mono, wall
from .disk import DiskWriter
from .inputs import corpus, voices as voices_mod
from .preflight import health, preflight, throttled
from .probe import Probe, rounds as probe_rounds
from .shape import Step, StepState
from .shipping import RecordReceiver, RecordShipper, RecordWriter
from .soak import Soak
from .spike import Spike
from .voice_upload import VoiceUploads

if TYPE_CHECKING:  # numpy and pandas: imported where the run is written (Run.open)
    from .plan import StepPlan, StepReader

log = logging.getLogger("tts_knee")
#: How long the master waits for workers' last batches when the run ends, past their drain.
FINAL_FLUSH_TIMEOUT_S = 10.0
#: How often the drain at the run's end looks at what is still in flight.
DRAIN_POLL_S = 0.05
#: Request bodies kept per run, one per distinct segment text and ask, at most so many bytes in
#: all (bodies that carry a reference clip are large, and there is one per text and voice).
MAX_CACHED_PAYLOADS = 20_000
MAX_CACHED_PAYLOAD_BYTES = 64 << 20
#: --text-reuse unique: worker k numbers its requests from k * this (k from 0).
UNIQUE_STRIDE = 100_000
#: What of a text id does not go into an audio file's name.
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class Run:
    """One run on one node. On the master (or a local runner) it owns the run directory."""

    def __init__(self, environment, settings: settings_mod.Settings, state: StepState):
        self.environment = environment
        self.settings = settings
        self.state = state
        self.failed = False
        self.closed = False
        self.cut_short: str | None = None  # why the run stops before its plan is done
        runner = environment.runner
        self.is_worker = isinstance(runner, WorkerRunner)
        self.is_master = isinstance(runner, MasterRunner)
        self.worker_id = runner.client_id if self.is_worker else "local"
        self.worker_tag = uuid.uuid4().hex[:8]
        self._audio_ok = True
        self.writer: RecordWriter | None = None  # master/local: the records, once open() made the run directory
        self.shipper: RecordShipper | None = None  # worker: the records, to the master
        self.puller: CollectorPuller | None = None  # master/local: the collectors
        self.receiver: RecordReceiver | None = None  # master: the workers' records
        self.judge: listening.Judge | None = None  # master/local: --asr-model's judge
        self.picker: listening.Picker | None = None  # the clips this node hands it
        self.run_dir: Path | None = None
        # master/local: the step plan and its reader of the run directory
        self.plan: StepPlan | None = None
        self.reader: StepReader | None = None
        self.soak: Soak | None = None  # master/local: --soak, once the plan is done
        self.probe: Probe | None = None  # master/local: --probe-texts, once the plan and a soak are done
        self.spike: Spike | None = None  # master/local: --spike, after a soak, before the probe
        self.info: dict = {}
        self.preflight: Preflight | None = None
        self.uploads: VoiceUploads | None = None  # --voice-upload: the voices registered on the server
        self.arrivals: dict[int, StepArrivals] = {}  # open loop: what this node's arrivals became, per step
        self.stopping = False  # the run is stopping: nothing new is sent, what is in flight drains
        self.in_flight = 0  # attempts in flight on this node
        self.calls: dict = {}  # open loop: this node's requests in flight -> when each was sent (wall)
        self._payloads: dict[tuple, tuple] = {}  # (body, type) per segment text and ask (a corpus repeats)
        self._payload_bytes = 0
        self.mix = (
            voices_mod.Mix(
                settings.voices, *voices_mod.parse_mix(settings.voice_mix), settings.voice_seed, len(settings.texts)
            )
            if settings.voices
            else None
        )
        self._audio_slots: dict = {}  # text id -> [its --audio-keep paths, the next one to write]
        self._unique = itertools.count(1)  # --text-reuse unique: this node's request number

    # ---- used by users -------------------------------------------------------------
    def next_request(self):
        """The next text of this step and what its request asks for (its voice from the mix);
        None in a probe step once this node has sent its texts."""
        settings = self.settings
        text_index = self.state.next_text_index()
        step = self.state.current
        if step is not None and step.phase == runformat.PROBE_PHASE and settings.probe_texts:
            if text_index >= probe_rounds(len(settings.probe_texts), step.concurrency) * len(settings.probe_texts):
                return None  # each text sent its rounds on this node: the step ends once they are done
            text = settings.probe_texts[
                text_index % len(settings.probe_texts)
            ]  # as it is: no voice from the mix, no numbering
            return text, voices_mod.ask_for(
                text, settings.voices[0] if settings.voices else None, settings.voice_upload
            )
        return self._asked(
            settings.texts[text_index % len(settings.texts)],
            text_index,
            step.voices if step is not None and step.voices else None,
        )

    def trace_request(self, row: int):
        """Trace row ``row``'s text and what its request asks for (``--trace``): the row's voice
        and language where it names them, else a voice from the mix as for a corpus text."""
        trace = self.settings.trace
        assert trace is not None  # a trace's rows are sent only with --trace
        return self._asked(trace.texts[row], row, None)

    def _asked(self, text, text_number: int, voices: int | None):
        settings = self.settings
        if settings.text_reuse == "unique":  # numbered apart per worker: workers share no number
            index = getattr(self.environment.runner, "worker_index", 0) if self.is_worker else 0
            text = corpus.unique(text, index * UNIQUE_STRIDE + next(self._unique))
        voice = (
            None
            if self.mix is None or voices_mod.owns_voice(text)
            else self.mix.pick(text_number, voices or len(settings.voices))
        )
        return text, voices_mod.ask_for(text, voice, settings.voice_upload)

    def emit(self, rec: dict[str, Any]) -> None:
        shipper = self.shipper
        if shipper is not None:
            shipper.add(rec)
            return
        writer = self.writer
        assert writer is not None  # master/local: open() made it before any user was started
        writer.add([rec])

    def payload(self, text: str, ask) -> tuple[bytes, str]:
        """The request body for one segment's text and ask, and its content type, made once per
        pair (the corpus is sent again at every step)."""
        key = (text, ask)
        body = self._payloads.get(key)
        if body is None:
            body = self.settings.payload(text, ask)
            if (
                self.settings.text_reuse != "unique"
                and len(self._payloads) < MAX_CACHED_PAYLOADS
                and self._payload_bytes + len(body[0]) <= MAX_CACHED_PAYLOAD_BYTES
            ):
                self._payloads[key] = body
                self._payload_bytes += len(body[0])
        return body

    def audio_path(self, text, user: int, seq: int) -> str | None:
        """Where the audio of ``text``, request ``seq`` of ``user``, is written: with
        ``--audio-keep N`` one of the text's N files in turn, so a file is written over with
        audio of about its own length instead of having its blocks freed or allocated on every
        write (a third of the write's system time); 0 keeps every request's."""
        if not self._audio_ok:
            return None
        keep = self.settings.audio_keep
        if not keep:
            return f"{self.settings.audio_dir}/{self.worker_tag}-u{user}-{seq}.wav"
        slots = self._audio_slots.get(text.id)
        if slots is None:
            name = _FILE_UNSAFE.sub("_", text.id)[:80]
            slots = self._audio_slots[text.id] = [
                [f"{self.settings.audio_dir}/{self.worker_tag}-{name}-{slot}.wav" for slot in range(keep)],
                0,
            ]
        paths, slot = slots
        slots[1] = (slot + 1) % keep
        return paths[slot]

    def make_audio_dir(self) -> None:
        try:
            self.settings.audio_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self.audio_failed(error)

    def audio_failed(self, error: OSError) -> None:
        if not self._audio_ok:
            return
        self._audio_ok = False
        where = self.settings.audio_dir
        if self.settings.on_audio_error == "stop":
            log.error("cannot write audio to %s: %s; stopping the run (records so far are kept)", where, error.strerror)
            self.environment.process_exit_code = exits.DISK
            gevent.spawn(self.environment.runner.quit)
        else:
            log.error(
                "cannot write audio to %s: %s; going on without writing audio "
                "(t3 and write_ms stay null; --on-audio-error stop ends the run instead)",
                where,
                error.strerror,
            )

    # ---- the step shape --------------------------------------------------------------
    def begin_step(self, step: Step) -> None:
        self.state.begin(step)
        if self.is_master:
            self.environment.runner.send_message(
                wire.STEP.name,
                wire.STEP(
                    step=step.step,
                    concurrency=step.concurrency,
                    settle_s=step.settle_s,
                    rate=step.rate,
                    workers=step.workers,
                    voices=step.voices,
                    **({} if step.hold_s is None else {"hold_s": step.hold_s}),
                    **({} if step.phase != runformat.PROBE_PHASE else {"phase": step.phase}),
                ),
            )
        metrics = self.environment.tts_knee.metrics
        if metrics is not None:
            metrics.begin_step(step)
        self.save()

    @property
    def sending_nodes(self) -> int:
        """How many nodes send the load: the master's connected workers, else this node."""
        return max(1, self.environment.runner.worker_count) if self.is_master else 1

    @property
    def worker_index(self) -> int:
        step = self.state.current
        return (step.workers or {}).get(self.worker_id, 0) if step is not None else 0

    def rate_share(self, step: Step | None) -> tuple[float, float] | None:
        """Open loop: this node's share of ``step``'s rate (req/s) and its phase (its index over
        the workers sharing it, 0 <= phase < 1); None when it has no share."""
        if step is None or step.rate is None or not step.workers:
            return None
        index = step.workers.get(self.worker_id)
        if index is None:
            return None
        sharing = len(step.workers)
        return step.rate / sharing, index / sharing

    def in_flight_before(self, cutoff: float) -> int | None:
        """Open loop: requests sent before ``cutoff`` still in flight, over this run's nodes;
        None while some live worker has not said since ``cutoff``."""
        if self.receiver is None:
            return sum(1 for sent_at in self.calls.values() if sent_at < cutoff)
        return self.receiver.in_flight_before(cutoff)

    def drain(self) -> None:
        """The run is stopping (Locust's test_stopping, before it stops the users): send
        nothing new, and wait up to ``--drain-time`` for the attempts in flight on this node.
        Those still running when the users are stopped are recorded as cut (see attempt.py)."""
        self.stopping = True
        if self.is_master or not self.in_flight:
            return
        drain = self.settings.drain_time
        log.info("the run is stopping: waiting up to %.0f s for the %d attempts in flight", drain, self.in_flight)
        deadline = mono() + drain
        while self.in_flight and mono() < deadline:
            gevent.sleep(DRAIN_POLL_S)
        if self.in_flight:
            log.warning(
                "%d attempts were still in flight %.0f s after the run stopped: they are recorded as "
                "failed attempts with error %s (--drain-time waits longer)",
                self.in_flight,
                drain,
                CUT_BY_RUN_END,
            )

    def arrivals_of(self, step: int) -> StepArrivals:
        """This node's tally of ``step``'s arrivals (made on first use)."""
        tally = self.arrivals.get(step)
        if tally is None:
            tally = self.arrivals[step] = StepArrivals()
        return tally

    def arrivals_settled_here(self) -> None:
        """This node has settled a step's arrivals (all sent, dropped or given up): a worker says so
        now rather than with its next batch, as the master may be waiting to end the step."""
        if self.shipper is not None:
            self.shipper.ship()

    def arrivals_in(self, step: int) -> StepArrivals:
        """``step``'s arrivals over this run's nodes."""
        if self.receiver is None:
            return self.arrivals.get(step) or StepArrivals()
        total = StepArrivals()
        for tallies in self.receiver.arrivals.values():
            if step in tallies:
                total.add(tallies[step])
        return total

    def arrivals_settled(self, step: Step) -> bool:
        """Open loop: whether every node sending ``step``'s arrivals has settled them all."""
        if self.receiver is None:
            tally = self.arrivals.get(step.step)
            return tally is not None and tally.done
        return self.receiver.arrivals_settled(step.step, step.workers or {})

    def _planned_rows(self, step: Step) -> int | None:
        """A replayed trace's rows due within ``step``, as the master counts them once the run is
        closed (until then the nodes' tallies are all there is: a row no worker has reported yet
        is not lost); None for any other step."""
        trace = self.settings.trace
        if not self.closed or trace is None or step.rate is None:
            return None
        return trace.replayed(step.rate / trace.base_rps, self.settings.step_time)

    def dropped_in(self, step: int) -> int:
        return self.arrivals_in(step).dropped

    def finished_in_step(self, step: int) -> int:
        return self.writer.finished_settled[step] if self.writer else 0

    # ---- run directory ---------------------------------------------------------------
    def open(self) -> None:
        """Master/local: claim the run directory, check the target, start collectors."""
        settings = self.settings
        self.run_dir = run_dir = runformat.claim(settings.run_dir)
        if run_dir != settings.run_dir:
            log.warning("%s already holds a run; writing this one to %s", settings.run_dir, run_dir)
        default_audio = settings.audio_dir == settings.run_dir / runformat.AUDIO_DIR
        self.settings = settings = dataclasses.replace(
            settings, run_dir=run_dir, audio_dir=run_dir / runformat.AUDIO_DIR if default_audio else settings.audio_dir
        )
        self.environment.parsed_options.run_dir = str(run_dir)  # workers get the same name
        self.make_audio_dir()
        disk, metrics = self.environment.tts_knee.disk, self.environment.tts_knee.metrics
        if metrics is not None:
            metrics.start_run(run_dir.name, settings.tts_stream)
        self.writer = writer = RecordWriter(
            run_dir / runformat.REQUESTS,
            disk,
            on_full=self._disk_full,
            on_records=None if metrics is None else metrics.observe,
        )
        # numpy and pandas: imported where the run is written
        from .plan import CONCURRENCY, RateAxis, SpeedAxis, StepPlan, StepReader, VoiceAxis

        self.soak = Soak.of(settings)
        self.probe = Probe.of(settings)
        self.spike = Spike.of(settings)
        grid = (
            ()
            if self.soak is not None and self.soak.alone
            else settings.voice_steps or settings.rates or settings.steps
        )
        axis = (
            VoiceAxis(bool(settings.rates))
            if settings.voice_steps
            else SpeedAxis(settings.trace.base_rps)
            if settings.trace
            else RateAxis(*settings.refine_to, lowest=min(settings.rates))
            if settings.rates
            else CONCURRENCY
        )
        # a soak after a sweep holds the level its judged steps recommend, and the probe runs at it
        self.plan = StepPlan(
            grid,
            settings.repeat,
            settings.slo,
            settings.refine,
            settings.stop_past_knee,
            settings.tts_stream,
            settings.ttfa_floor_ms,
            axis,
            judge=(self.soak is not None and not self.soak.alone) or self.probe is not None or self.spike is not None,
        )
        self.reader = StepReader(
            run_dir, axis, ServerNames(parse_roles(settings.server_roles), settings.server_stage_label)
        )
        if self.receiver is not None:
            self.receiver.reset(writer, str(run_dir))
        self.info = runformat.run_info(
            format_version=runformat.FORMAT_VERSION,
            run_id=run_dir.name,
            start=wall(),
            target=settings.host,
            mode=settings.mode,
            options=settings.public(),
            settle_s=settings.settle_time,
            steps=[],
            workers=[],
            collectors=[],
            versions=runformat.versions(),
            **({"trace": settings.trace.describe()} if settings.trace else {}),
        )
        log.info("run directory: %s", run_dir)
        # run.json from the start: what follows asks the network (voices, the warm-up, provenance), and
        # a run stopped meanwhile (audio that cannot be written, say) still leaves its record
        self.save()
        if settings.voice_upload:  # before the preflight, which asks for the first voice by its name
            self.uploads = VoiceUploads(settings)
            refused = self.uploads.register()
            if refused is not None:
                self.fail(refused)
                return
        if not settings.skip_preflight:  # a headless run sent it before Locust started (locustfiles/startup.py)
            node = self.environment.tts_knee
            self.preflight = answer = node.preflight or preflight(settings)
            node.preflight = None
            if not answer["ok"]:
                self.info["preflight"] = answer
                assert answer["message"] is not None  # a warm-up that failed says why
                self.fail(answer["message"])
                return
        self.info["provenance"] = provenance.describe(settings, self.info["options"])
        if settings.asr_model or settings.asr_keep:
            refused = self._start_judge(run_dir)
            if refused is not None:
                self.fail(refused)
                return
        self._start_puller(run_dir)  # with no --collector it still samples this host (role=client)
        self.save()

    def _start_judge(self, run_dir: Path) -> str | None:
        """--asr-model: check it, start the judge (its model loaded) and this node's picker
        (--asr-keep: the picker, and the clips kept for later); None when ready, else why not."""
        try:
            hearing = listening.check(self.settings)
        except asr.AsrError as error:
            return str(error)
        if hearing.not_heard and not self.settings.asr_words_only:
            log.warning("--asr-model hears the words only, not the voice and the sound: %s", hearing.not_heard)
        metrics = self.environment.tts_knee.metrics
        self.judge = listening.Judge(
            self.settings,
            run_dir,
            self.environment.tts_knee.disk,
            hearing,
            on_judged=None if metrics is None else metrics.observe_judged,
        )
        refused = self.judge.start()
        if refused is not None:
            self.judge = None
            return refused
        if not self.is_master:
            self.picker = listening.Picker(self)
        return None

    def _start_puller(self, run_dir: Path) -> None:
        settings = self.settings
        self.puller = puller = CollectorPuller(
            list(settings.collectors),
            run_dir / runformat.RESOURCES,
            token=settings.collector_token,
            server_metrics=list(settings.server_metrics),
            server_stats=list(settings.server_stats),
            disk=self.environment.tts_knee.disk,
            clock=wall,
        )
        for warning in puller.start():
            log.warning("%s", warning)
        if settings.require_collectors and puller.unreachable:
            self.fail(f"collector {puller.unreachable[0]} is unreachable and --require-collectors is set")
        missing = puller.missing_label(settings.server_stage_label) if settings.server_stage_label else None
        if missing:
            self.fail(missing)

    def _disk_full(self, pending_bytes: int) -> None:
        """The run directory's disk has fallen too far behind: stop the run (the shape ends it
        at its next tick), keeping everything held for the disk to write before exiting."""
        message = (
            f"the disk of {self.run_dir} has not kept up: {pending_bytes / 1e6:.1f} MB of records and samples "
            f"wait to be written; the run stops now so that memory stays bounded, and everything received "
            f"is written before tts-knee exits"
        )
        log.warning("%s", message)
        self.cut_short = message
        self.info["error"] = message
        self.environment.process_exit_code = exits.DISK

    def fail(self, message: str) -> None:
        log.error("%s", message)
        self.failed = True
        self.environment.process_exit_code = exits.BAD_INPUT
        self.info["error"] = message
        self.remove_voices()
        self.save()

    def remove_voices(self) -> None:
        """Delete the voices this run registered (--voice-upload); safe to call again."""
        if self.uploads is not None:
            self.uploads.remove()

    def save(self) -> None:
        if self.run_dir is None:
            return
        info = self.info
        info["steps"] = [
            runformat.step_entry(
                step=step.step,
                concurrency=step.concurrency,
                start=step.start,
                end=step.end,
                phase=step.phase,
                repeat=step.repeat,
                settle_s=self.state.settle_of(step),
                cutoff=step.cutoff,
                **({} if step.voices is None else {"voices": step.voices}),
                **(
                    {}
                    if step.rate is None
                    else {
                        "rate": step.rate,
                        "dropped": self.dropped_in(step.step),
                        "workers": len(step.workers or ()),
                        "arrivals": arrivals_entry(self.arrivals_in(step.step), self._planned_rows(step)),
                        **({} if step.offered_rps is None else {"offered_rps": step.offered_rps}),
                    }
                ),
            )
            for step in self.state.steps
        ]
        if self.plan is not None:
            info["plan"] = self.plan.describe()
        if self.preflight is not None:
            info["preflight"] = self.preflight
        if self.uploads is not None:
            info["voice_uploads"] = self.uploads.records
        if self.spike is not None and self.spike.probes:
            info["spike_health"] = self.spike.probes
        if self.puller is not None:
            info["collectors"] = self.puller.describe()
            info["server_metrics"] = self.puller.describe_server_metrics()
        if self.is_master and self.receiver is not None:
            info["workers"] = list(self.receiver.workers.values())
        elif not self.is_master:
            info["workers"] = [runformat.worker_entry(id="local", offset_s=0.0, rtt_s=0.0)]
        if self.writer is not None and self.writer.audio_missing:
            info["audio_missing"] = dict(self.writer.audio_missing)
        self.environment.tts_knee.disk.replace(self.run_dir / runformat.RUN_JSON, runformat.json_text(info))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.shipper is not None:
            self.shipper.finish()
            return
        run_dir = self.run_dir
        if self.writer is None:
            return
        assert run_dir is not None  # open() named it before it made the writer
        self.state.finish(wall())
        if self.receiver is not None:
            wait = FINAL_FLUSH_TIMEOUT_S + self.settings.drain_time
            stragglers = self.receiver.wait_final(wait)
            for wid in stragglers:
                log.error("worker %s sent no final batch within %.0f s; its last records may be missing", wid, wait)
        self.writer.close()
        self._account_arrivals()
        if self.judge is not None:
            self.judge.finish()
            self.info["speech"] = self.judge.describe()
        if not self.settings.skip_preflight and not self.failed:  # before the voices it asks for are removed
            self.info["health"] = health(self.settings)
            answer = self.info["health"]
            if answer["ok"]:
                log.info(
                    "health after the run: %s answered %s in %.0f ms",
                    self.settings.target,
                    answer["status"],
                    answer["ms"],
                )
            else:
                log.warning("health after the run: FAILED: %s", answer["message"])
                # a crash or a full disk said so first; a server still throttling is up, not failed
                if self.environment.process_exit_code is None and not throttled(answer):
                    self.environment.process_exit_code = exits.HEALTH_FAILED
        self.remove_voices()
        if self.receiver is not None and self.writer.count == 0 and not self.failed:
            why = "; ".join(f"{wid}: {msg}" for wid, msg in self.receiver.errors.items())
            self.fail("no worker sent a single record" + (f" ({why})" if why else "; see the workers' logs"))
        if self.puller is not None:
            self.puller.stop()
        self.info["end"] = wall()
        self.info["records"] = self.writer.count
        self.info["cut_by_run_end"] = self.writer.cut
        self.save()
        self.environment.tts_knee.disk.drain()
        missing = self.writer.audio_missing
        if missing:
            log.warning(
                "%d audio files were not written in time (%d late, %d dropped: the disk did not keep up); "
                "their records say so in audio_file",
                sum(missing.values()),
                missing["late"],
                missing["dropped"],
            )
        cut = f" ({self.writer.cut} cut by the run's end, error {CUT_BY_RUN_END})" if self.writer.cut else ""
        log.info("run finished: %d attempt records%s in %s", self.writer.count, cut, run_dir / runformat.REQUESTS)
        if self.settings.junit is not None and not self.failed and self.writer.count:
            self._report_for_ci(run_dir, self.settings.junit)

    def _account_arrivals(self) -> None:
        """An open-loop run's end: what its arrivals became, said in one line; a replayed trace
        that did not send every row it planned fails the run (--exit-code-on-error)."""
        entries = [
            arrivals_entry(self.arrivals_in(step.step), self._planned_rows(step))
            for step in self.state.steps
            if step.rate is not None
        ]
        if not entries:
            return
        not_sent: Counter[str] = Counter()
        for entry in entries:
            not_sent.update(entry["not_sent"])
        what = "trace rows" if self.settings.trace is not None else "arrivals"
        planned, sent, dropped = (
            sum(step_entry[count] for step_entry in entries) for count in ("planned", "sent", "dropped")
        )
        counts = f"{planned} {what} planned, {sent} sent, {dropped} dropped at --max-inflight"
        if not not_sent.total():
            log.info("%s, every one accounted for", counts)
            return
        reasons = "; ".join(f"{count} {why}: {NOT_SENT_REASONS.get(why, why)}" for why, count in not_sent.most_common())
        log.warning("%s, %d NOT SENT (%s)", counts, not_sent.total(), reasons)
        if self.settings.trace is not None and self.environment.process_exit_code is None:
            self.environment.process_exit_code = self.environment.parsed_options.exit_code_on_error

    def _report_for_ci(self, run_dir: Path, junit: Path) -> None:
        """--junit: the finished run judged as ``tts-knee report`` judges it (its own --slo), the
        verdicts written as JUnit XML, and the verdict appended to $GITHUB_STEP_SUMMARY where set."""
        from tts_knee.analysis.summary import analyze, load
        from tts_knee.dashboard import ci
        from tts_knee.runformat.reader import RunDirError

        def judge() -> None:
            summary = analyze(load(run_dir))
            ci.write_junit(summary, junit)
            ci.append_step_summary(summary)

        try:
            gevent.get_hub().threadpool.apply(judge)  # pandas, off the event loop
        except (OSError, RunDirError) as error:
            log.error("--junit: the run's verdicts were not written: %s", error)
            return
        log.info("the run's verdicts as JUnit XML: %s", junit)


class Node:
    """tts-knee on one Locust node for the life of the process: the current run, and what
    outlives a run — the step state a worker follows, the master's record receiver (Locust
    allows one listener per message type), a worker's clock to the master, the user numbers,
    the audio writer thread and the web UI's live view."""

    def __init__(self, environment):
        self.environment = environment
        runner = environment.runner
        self.is_master = isinstance(runner, MasterRunner)
        self.is_worker = isinstance(runner, WorkerRunner)
        self.run: Run | None = None
        self.state = StepState()
        self.receiver = RecordReceiver(runner) if self.is_master else None
        if self.is_master:
            runner.register_message(wire.CLIP.name, self._on_clip)
        self.clock = timesync.WorkerClock(runner) if self.is_worker else None
        self.audio_writer = None  # made by the first user that writes audio (locustfiles/audio.py)
        # master/local: the run directory's writer, off the event loop
        self.disk = None if self.is_worker else DiskWriter()
        self.live_view = None  # (run_dir, view) of the web UI's live dashboard
        # master/local, --metrics-port: the live metrics served, or why they cannot be
        self.metrics: metrics_mod.LiveMetrics | None = None
        self.metrics_error: str | None = None
        self.preflight: dict | None = None  # a headless run's warm-up answer, asked before Locust started
        self._user_numbers = itertools.count(1)

    def _on_clip(self, environment, msg, **_kw) -> None:
        run = self.run
        if run is not None and run.judge is not None:
            clip = {
                key: msg.data.get(key)
                for key in ("req_id", "step", "concurrency", "text_id", "text", "language", "reference")
            }
            run.judge.offer(clip, msg.data["audio"])

    def stop_on_sigterm(self) -> None:
        """SIGTERM to a headless master or local run (``docker stop``, a Kubernetes pod stopped):
        the run is cut short, so the shape ends it at its next tick as if its plan were done, what
        is in flight drains and everything received is written. Locust installs its own SIGTERM
        handler only once a headless shape has finished; until then the signal ended the process
        with the run directory never closed."""
        run = self.run
        log.warning("SIGTERM: the run stops now; what is in flight drains, and everything received is written")
        if run is not None and not run.closed:
            run.cut_short = run.cut_short or "stopped by SIGTERM"
        else:
            gevent.spawn(self.environment.runner.quit)

    def next_user_number(self) -> int:
        """Users are numbered 1, 2, 3 … on each node, across runs."""
        return next(self._user_numbers)

    def ensure_run(self) -> Run | None:
        """The current run on this node, created on first use (the shape's first tick on a
        master or local runner, the test_start on a worker). None if the options are unusable."""
        run = self.run
        if run is not None and not run.closed:
            return run
        environment = self.environment
        if self.metrics_error is not None:
            log.error("%s", self.metrics_error)
            environment.process_exit_code = 2
            return None
        try:
            settings = settings_mod.from_options(environment.parsed_options, environment.host)
        except settings_mod.SettingsError as error:
            log.error("%s", error)
            environment.process_exit_code = exits.BAD_INPUT
            if self.is_worker:
                # A worker that cannot run says why to the master and leaves the run to the others.
                environment.runner.send_message(wire.WORKER_ERROR.name, wire.WORKER_ERROR(message=str(error)))
                gevent.spawn(environment.runner.quit)
            return None
        if self.is_worker:
            if run is not None and run.shipper is not None:
                run.shipper.spool()  # the master has moved on: its acknowledgements will not come now
            run = self.run = Run(environment, settings, self.state)
            run.shipper = RecordShipper(
                environment.runner,
                run.worker_id,
                str(settings.run_dir),
                self.clock,
                run.arrivals,
                run.calls if settings.rates else None,
            )
            run.make_audio_dir()
            if settings.asr_model or settings.asr_keep:
                run.picker = listening.Picker(run)
            assert self.clock is not None  # a worker's, made with the node
            gevent.spawn(self.clock.probe)
        else:
            self.state = StepState(settle_s=settings.settle_time)
            run = self.run = Run(environment, settings, self.state)
            run.receiver = self.receiver
            run.open()
        return run


# ---- Locust events ---------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:
    settings_mod.add_arguments(parser)
    startup.default_web_host(parser)


@events.init.add_listener
def _on_init(environment, **_kw) -> None:
    warning = startup.web_ui_warning(environment.parsed_options)
    if warning:
        log.warning("%s", warning)
    node = environment.tts_knee = Node(environment)
    startup.check_before_start(environment)  # a mistake ends the process here, with its sentence
    runner = environment.runner
    if not node.is_worker:
        node.metrics, node.metrics_error = metrics_mod.listen(environment.parsed_options, lambda: runner.user_count)
    if not node.is_worker and environment.parsed_options.headless:
        gevent.signal_handler(signal.SIGTERM, node.stop_on_sigterm)
    if node.is_master:
        timesync.serve(runner)
        gevent.spawn(heartbeats.watch, node)
    elif node.is_worker:

        def on_step(environment, msg, **_kw):
            data = msg.data
            node.state.begin(
                Step(
                    data["step"],
                    data["concurrency"],
                    wall(),
                    settle_s=data["settle_s"],
                    rate=data["rate"],
                    workers=data["workers"],
                    voices=data["voices"],
                    hold_s=data.get("hold_s"),
                    phase=data.get("phase") or "grid",
                )
            )

        def on_ack(environment, msg, **_kw):
            if node.run is not None and node.run.shipper is not None:
                node.run.shipper.on_ack(msg.data)

        # Locust allows one listener per message type: registered once, routed to the current run.
        runner.register_message(wire.STEP.name, on_step)
        runner.register_message(wire.ACK.name, on_ack)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    run = environment.tts_knee.ensure_run()
    if run is not None and run.is_worker:
        run.state.settle_s = run.settings.settle_time


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    run = environment.tts_knee.run
    if run is not None and not run.closed:
        run.drain()


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    run = environment.tts_knee.run
    if run is not None:
        run.close()


def _end_with_the_sentence(environment, message: str) -> None:
    """A run that failed before it measured anything: Locust's closing statistics would be empty
    tables, so they go nowhere (unless asked for as JSON), and the sentence is the last line."""
    options = environment.parsed_options
    if not (options.json or options.json_file):
        options.json_file = os.devnull
    # printed, not logged: the log said it once already, when it happened
    events.quit.add_listener(lambda **_kw: print(f"tts-knee: {message}", file=sys.stderr, flush=True))


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    run = environment.tts_knee.run
    if environment.tts_knee.metrics is not None:
        environment.tts_knee.metrics.wait_for_scrape()  # the run's last figures, for the scraper
    if run is not None and run.failed and not run.is_worker and (run.writer is None or not run.writer.count):
        _end_with_the_sentence(environment, run.info.get("error") or "the run failed")
    if run is not None and run.shipper is not None:
        run.shipper.spool()  # what the master never acknowledged (it went away, say)
    if run is not None and run.uploads is not None and run.uploads.created:
        run.remove_voices()  # a run stopped before it closed: what it registered goes all the same
        run.save()
    if run is not None and run.probe is not None and run.writer is not None:
        # a probe's texts are meant to fail (a 400 for an empty text is the right answer): Locust's
        # exit status on failed requests speaks of the sweep's alone
        probed = {probe_step.step for probe_step in run.state.steps if probe_step.phase == runformat.PROBE_PHASE}
        sweep_failed = sum(failed for step, failed in run.writer.failed.items() if step not in probed)
        from locust import log as locust_log

        if (
            environment.process_exit_code is None
            and not sweep_failed
            and not environment.runner.exceptions
            and not locust_log.unhandled_greenlet_exception
        ):
            environment.process_exit_code = 0
