"""Where attempt records go: one writer of ``requests.jsonl`` on the master (or the local
runner), and on each worker a shipper that batches records to it over Locust's custom messages.

A worker keeps every batch until the master acknowledges it — the master acknowledges only
after the batch is written (by the node's :class:`~locustfiles.disk.DiskWriter`, off the event
loop) — and writes whatever is unacknowledged to a spool file if the master goes away, so an
acknowledged record is never lost. Records waiting for a slow disk are held in memory; past
``MAX_PENDING_BYTES`` the writer says so and asks the run to stop, and they are all written
before the node exits.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from pathlib import Path

import gevent

from tts_knee import runformat
from tts_knee.runformat import wire
from tts_knee.runformat.options import CUT_BY_RUN_END

from .arrivals import StepArrivals
from .clock import wall
from .disk import DiskWriter

log = logging.getLogger("tts_knee.records")

#: Local/master writer: buffered records reach the file at least this often.
FLUSH_INTERVAL_S = 0.5
#: Worker shipper: a batch goes out this often, or sooner when it reaches BATCH_MAX records.
BATCH_INTERVAL_S = 1.0
BATCH_MAX = 1000
SPOOL_DIR = Path("runs") / "spool"
#: Latest successful waits kept per step, for the step shape's drain.
TALLY_WAITS = 2000
#: While the disk still holds what is left to write at the end, this often it is said.
DRAIN_NOTE_S = 10.0
#: Most bytes of the run directory's writes held in memory for a disk that has not kept up;
#: past it the run is stopped (the records and samples held are still written).
MAX_PENDING_BYTES = 256 << 20


class RecordWriter:
    """The one writer of requests.jsonl: buffers records, hands them to the node's disk writer
    every FLUSH_INTERVAL_S (or when asked), and keeps a small per-step tally for the step
    shape, and for each user (worker, user number) when its latest recorded
    attempt ended. ``count`` is the records written so far; ``on_full`` is called once (with
    the bytes waiting) when the disk has fallen MAX_PENDING_BYTES behind; ``on_records`` (the
    live metrics) with every list of records taken."""

    def __init__(self, path: Path, disk: DiskWriter | None = None, on_full=None, on_records=None):
        self.path = Path(path)
        self._on_records = on_records  # --metrics-port: the live metrics take every batch too
        self._disk = disk or DiskWriter()
        self._disk.append(self.path, b"")  # the file exists from the start, as readers expect
        self._on_full = on_full
        self._full = False
        self._closed = False
        self._buf: list[bytes] = []  # encoded lines
        self.count = 0
        self.finished: Counter[int] = Counter()  # step -> logical requests finished (final attempts)
        self.finished_settled: Counter[int] = Counter()  # the same, past the step's settle window
        self.failed: Counter[int] = Counter()  # step -> failed attempts (retried or not), as Locust counts its errors
        self.audio_missing: Counter[str] = Counter()  # audio_file ('late', 'dropped') -> attempts
        self._waits: dict[int, deque] = {}  # step -> its latest successful waits, ms
        self._user_done: dict[tuple, float] = {}  # (worker, user) -> latest end of an attempt, unix s
        self.cut = 0  # attempts recorded as cut by the run's end
        self.last_answer: float | None = None  # when the server last answered anything (unix s)
        self.unanswered = 0  # attempts since then that got no answer at all (refused, reset, timed out)
        self._loop = gevent.spawn(self._run)

    def add(self, records: list[dict]) -> None:
        # Encoded as they come rather than all at once at the flush, which would stall the
        # event loop (and every user's timing) for milliseconds at thousands of records a second.
        self._buf.extend(runformat.jsonl_bytes(record) for record in records)
        if self._on_records is not None:
            self._on_records(records)
        for record in records:
            ends = [record[field] for field in ("t0", "t2", "t3") if record.get(field) is not None]
            if ends:
                user = (record.get("worker"), record.get("user"))
                self._user_done[user] = max(self._user_done.get(user, ends[0]), *ends)
            if record.get("audio_file") is not None:
                self.audio_missing[record["audio_file"]] += 1
            if record["error"] == CUT_BY_RUN_END:
                self.cut += 1
            elif record.get("status") is not None or record["ok"]:
                self.last_answer = max(self.last_answer or 0.0, *ends) if ends else self.last_answer
                self.unanswered = 0
            else:
                self.unanswered += 1
            if not record["ok"]:
                self.failed[record["step"]] += 1
            if record["final"]:
                self.finished[record["step"]] += 1
                if record.get("settled", True):
                    self.finished_settled[record["step"]] += 1
                if record["ok"] and record["wait_ms"] is not None:
                    self._waits.setdefault(record["step"], deque(maxlen=TALLY_WAITS)).append(record["wait_ms"])

    def max_wait_s(self, step: int) -> float | None:
        """The slowest of the step's latest successful waits, in seconds (None: none yet)."""
        waits = self._waits.get(step)
        return max(waits) / 1000.0 if waits else None

    def users_done_since(self, since: float) -> int:
        """Users whose latest recorded attempt ended at or after ``since``: a user runs one attempt
        at a time, so each of them has nothing sent before ``since`` still running."""
        return sum(1 for done in self._user_done.values() if done >= since)

    def flush(self):
        """Hand what is buffered to the disk writer; returns the disk's latest job, which is
        done once everything handed so far is written."""
        buf, self._buf = self._buf, []
        if buf:
            job = self._disk.append(self.path, b"".join(buf))
            handed = len(buf)
            job.on_done = lambda: self._written(handed)
            if self._disk.pending_bytes > MAX_PENDING_BYTES and not self._full:
                self._full = True
                if self._on_full is not None:
                    self._on_full(self._disk.pending_bytes)
        return self._disk.last

    def _written(self, written: int) -> None:
        self.count += written

    def _run(self) -> None:
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            self.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Write everything (waiting as long as the disk takes, saying so now and then), then
        close the file."""
        self._loop.kill()
        self._closed = True
        self.flush()
        self._disk.close(self.path)
        waited = 0.0
        while not self._disk.drain(DRAIN_NOTE_S):
            waited += DRAIN_NOTE_S
            log.warning(
                "still writing %s: %.1f MB wait for the disk after %.0f s",
                self.path,
                self._disk.pending_bytes / 1e6,
                waited,
            )


class RecordReceiver:
    """Master side: writes workers' batches, acknowledges them, tracks each worker."""

    def __init__(self, runner):
        self.runner = runner
        self.writer: RecordWriter | None = None
        self.run_id: str | None = None
        self.workers: dict[str, dict] = {}
        self.errors: dict[str, str] = {}  # worker id -> why it could not run
        self.arrivals: dict[str, dict[int, StepArrivals]] = {}  # open loop: worker id -> step -> its tally
        self.in_flight: dict[str, tuple[float, list]] = {}  # open loop: worker id -> (said at, sent times)
        runner.register_message(wire.RECORDS.name, self._on_records)
        runner.register_message(wire.WORKER_ERROR.name, self._on_error)

    def reset(self, writer: RecordWriter, run_id: str) -> None:
        """Point at a new run's writer (a web-UI session can hold several runs)."""
        self.writer, self.run_id, self.workers, self.errors, self.arrivals = writer, run_id, {}, {}, {}
        self.in_flight = {}

    def _on_error(self, environment, msg, **_kw) -> None:
        self.errors[msg.node_id] = msg.data["message"]
        log.error("worker %s cannot run: %s", msg.node_id, msg.data["message"])

    def worker(self, worker_id: str) -> dict:
        entry = self.workers.get(worker_id)
        if entry is None:
            entry = self.workers[worker_id] = runformat.worker_entry(
                id=worker_id,
                records=0,
                batches=0,
                final=False,
                first_seen=wall(),
                last_seen=None,
                lost_at=None,
                host=None,
            )
        return entry

    def _on_records(self, environment, msg, **_kw) -> None:
        data = msg.data
        if self.writer is None or self.writer.closed or data.get("run") != self.run_id:
            # Not acknowledged: the worker keeps the batch and spools it.
            log.error(
                "a batch of %d records from worker %s for run %s came after that run closed; "
                "the worker keeps it in its spool",
                len(data["records"]),
                msg.node_id,
                data.get("run"),
            )
            return
        entry = self.worker(msg.node_id)
        self.writer.add(data["records"])
        # acknowledged once written, by a greenlet of its own: this handler must not wait for the disk
        gevent.spawn(self._ack, self.writer.flush(), data["seq"], self.run_id, msg.node_id)
        entry.update(
            records=entry["records"] + len(data["records"]),
            batches=entry["batches"] + 1,
            last_seen=wall(),
            offset_s=data.get("offset_s"),
            rtt_s=data.get("rtt_s"),
            host=data.get("host"),
        )
        if data.get("arrivals"):  # running totals: a batch sent twice cannot count them twice
            self.arrivals[msg.node_id] = {
                int(step): StepArrivals.from_wire(tally) for step, tally in data["arrivals"].items()
            }
        if data.get("in_flight") is not None:
            self.in_flight[msg.node_id] = (data["at"], data["in_flight"])
        if data.get("final"):
            entry["final"] = True

    def in_flight_before(self, cutoff: float) -> int | None:
        """Open loop: requests sent before ``cutoff`` that live workers still had in flight when
        they last said, or None while one of them has not said since ``cutoff``."""
        self.note_lost()
        still_in_flight = 0
        for wid, entry in self.workers.items():
            if entry["lost_at"] is not None:
                continue
            said_at, sent = self.in_flight.get(wid, (None, ()))
            if said_at is None or said_at < cutoff:
                return None
            still_in_flight += sum(1 for sent_at in sent if sent_at < cutoff)
        return still_in_flight

    def arrivals_settled(self, step: int, worker_ids) -> bool:
        """Open loop: whether each of ``worker_ids`` still answering has said its arrivals for
        ``step`` are settled (all sent, dropped or given up)."""
        self.note_lost()
        alive = {client.id for client in self.runner.clients.all if client.state != "missing"}
        for wid in worker_ids:
            entry = self.workers.get(wid)
            if wid not in alive or (entry is not None and entry["lost_at"] is not None):
                continue
            tally = self.arrivals.get(wid, {}).get(step)
            if tally is None or not tally.done:
                return False
        return True

    def _ack(self, job, seq: int, run_id: str | None, worker_id: str) -> None:
        job.wait()
        self.runner.send_message(wire.ACK.name, wire.ACK(seq=seq, run=run_id), client_id=worker_id)

    def note_lost(self) -> list[str]:
        """Mark workers Locust no longer hears from; returns the ids newly marked."""
        alive = {client.id for client in self.runner.clients.all if client.state != "missing"}
        lost = []
        for wid, entry in self.workers.items():
            if wid not in alive and entry["lost_at"] is None and not entry["final"]:
                entry["lost_at"] = wall()
                lost.append(wid)
        return lost

    def wait_final(self, timeout: float) -> list[str]:
        """Wait (bounded) until every live worker has sent its final batch; returns the stragglers."""
        deadline = wall() + timeout
        while True:
            self.note_lost()
            waiting = [wid for wid, entry in self.workers.items() if not entry["final"] and entry["lost_at"] is None]
            if not waiting or wall() >= deadline:
                return waiting
            gevent.sleep(0.05)


class RecordShipper:
    """Worker side: batches records to the master, converted to the master's clock."""

    def __init__(
        self,
        runner,
        worker_id: str,
        run_id: str,
        timesync,
        arrivals: dict[int, StepArrivals] | None = None,
        calls: dict | None = None,
    ):
        self.runner = runner
        self.worker_id = worker_id
        self.run_id = run_id
        self.timesync = timesync
        self._buf: list[dict] = []
        self._seq = 0
        self._warned_clock = False
        self.arrivals = {} if arrivals is None else arrivals  # open loop: step -> what its arrivals became
        self.calls = calls  # open loop: the run's requests in flight -> when sent (every batch says them)
        self.unacked: dict[int, list[dict]] = {}
        self._loop = gevent.spawn(self._run)

    def add(self, record: dict) -> None:
        self._buf.append(record)
        if len(self._buf) >= BATCH_MAX:
            self.ship()

    def on_ack(self, data: dict) -> None:
        if data.get("run") == self.run_id:
            self.unacked.pop(data["seq"], None)

    def ship(self, final: bool = False) -> None:
        if self.timesync.offset_s is None and not final and len(self._buf) < BATCH_MAX:
            return  # hold records until the clock offset to the master is known
        if self.timesync.offset_s is None and self._buf and not self._warned_clock:
            self._warned_clock = True
            log.warning("no clock-offset answer from the master yet: these records keep this worker's clock")
        batch, self._buf = self._buf, []
        if not batch and not final and not self.arrivals and self.calls is None:
            return
        offset = self.timesync.offset_s or 0.0
        for record in batch:
            for field in runformat.ATTEMPT_TIMES:
                if record.get(field) is not None:  # scheduled: open loop only
                    record[field] -= offset
        self._seq += 1
        self.unacked[self._seq] = batch
        self.runner.send_message(
            wire.RECORDS.name,
            wire.RECORDS(
                run=self.run_id,
                seq=self._seq,
                records=batch,
                final=final,
                offset_s=self.timesync.offset_s,
                rtt_s=self.timesync.rtt_s,
                host=self.timesync.host,
                arrivals={step: tally.wire() for step, tally in self.arrivals.items()},
                at=wall() - offset,
                in_flight=None if self.calls is None else [sent_at - offset for sent_at in self.calls.values()],
            ),
        )

    def _run(self) -> None:
        while True:
            gevent.sleep(BATCH_INTERVAL_S)
            self.ship()

    def finish(self) -> None:
        """Ship the rest. It must not wait for the acknowledgements here: this runs inside the
        worker's message loop, which is what delivers them. Whatever is still unacknowledged
        when the worker quits is spooled (see ``spool``)."""
        self._loop.kill()
        self.ship(final=True)

    def spool(self) -> Path | None:
        left = [record for seq in sorted(self.unacked) for record in self.unacked[seq]] + self._buf
        if not left:
            return None
        SPOOL_DIR.mkdir(parents=True, exist_ok=True)
        path = SPOOL_DIR / f"{self.worker_id.replace('/', '_')}-{int(wall())}.jsonl"
        with open(path, "ab") as out:  # appended: a second spool within the same second adds to it
            out.write(b"".join(runformat.jsonl_bytes(record) for record in left))
        self.unacked.clear()
        self._buf = []
        log.error(
            "the master did not acknowledge %d records; they were saved to %s "
            "(append them to the run's requests.jsonl)",
            len(left),
            path.resolve(),
        )
        return path
