"""What the simulated server can do at once, whatever protocol a request arrives by.

A protocol's server (the HTTP app in :mod:`testbed.sim.http`; a WebSocket, Wyoming or gRPC one
alike) parses its request, asks :meth:`Capacity.admit` (which raises :class:`Refused` when a
limit says no), waits for a :class:`Turn` with :meth:`Capacity.take`, sends the audio pieces
the turn yields as they are made, and finishes the turn. With ``--slow-above K`` a request
for ``--slow-language`` (or ``--slow-voice``) taken while more than K are in flight takes
``--slow-x`` times its service time (one language or voice breaking first). With ``--recovery-s`` the slots model
is slow to come back from overload: a request whose turn begins while others queue, or within
that long after one last had to, takes ``RECOVERY_SLOWDOWN`` (2x) its time. Everything that sets the timing lives
here: the token bucket, the out-of-memory threshold, the queue limit, the FIFO slots and a timing
model:

- slots: a planned service time (``base_ms`` + ``per_char_ms`` x characters, +/- ``jitter``);
  a stream's first piece after ``first_chunk_ms``, the rest evenly until that time is over;
- shared capacity (:class:`Engine`): ``capacity`` audio-seconds per second shared equally by
  the turns generating at once (processor sharing), each at most ``max_speed`` x real time,
  after a ``prefill_ms`` that uses none, in chunks of ``chunk_ms``;
- stages (``--stages``, :mod:`testbed.sim.stages`): a pipeline, each stage its own slots and
  cost per request, the audio once the last is done.

A request's voice goes through the speaker-embedding cache (:mod:`testbed.sim.voices`): a miss
adds ``--voice-miss-ms`` to its time in the slot, before any audio is made. With
``--cache-hit-ms`` the server caches its answers: a text (with its voice) it has begun to serve
before takes that long in its slot instead (``text_cache_hits``).

A client that cancels (barge-in) or goes away stops its turn (:meth:`Turn.stop`: the making
ends within the current sleep, not after the next piece) and leaves it with :meth:`Turn.abandon`,
which with ``--orphan-ms`` keeps holding its slot, and its share of the engine, that long first:
a server that goes on generating audio nobody hears.

The counters (served, rejected, queue time) are what ``/health`` and ``/metrics`` report
(:mod:`testbed.sim.metrics`), so every protocol's requests count in the same figures.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import logging
import os
import random
import time
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event

from tts_knee.testbed.sim.slots import Slots
from tts_knee.testbed.sim.voices import VoiceCache

if TYPE_CHECKING:
    from tts_knee.testbed.sim.stages import Stage

DEFAULT_SLOTS = 4  # without --capacity; with it, slots are unlimited unless given
SLOTS_MODEL = {"base_ms": 50.0, "per_char_ms": 1.0, "jitter": 0.1, "first_chunk_ms": 20.0}
CAPACITY_MODEL = {"max_speed": None, "chunk_ms": 200.0, "prefill_ms": 100.0}  # defaults
STREAM_CHUNK_MS = 40.0  # the slots model's spacing of streamed pieces after the first
ENGINE_EPS_S = 1e-9  # audio-seconds: a chunk this close to complete counts as complete
#: --cache-hit-ms: answers kept (text and voice) before the cache starts over.
ANSWERS_KEPT = 100_000
#: --recovery-s: how much slower each request is while the server recovers from a queue.
RECOVERY_SLOWDOWN = 2.0
#: --slow-above: how many times its service time a slowed request takes, unless --slow-x says.
DEFAULT_SLOW_X = 3.0
#: The simulator's exit status when --crash-above ends it.
CRASH_EXIT_CODE = 70
log = logging.getLogger("testbed.sim")
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.65 GiB total "
    "capacity; 22.91 GiB already allocated; 118.06 MiB free)"
)


class Refused(Exception):
    """The server will not take this request. ``reason``: ``rate_limited``, ``out_of_memory``
    or ``queue_full``; ``retry_after_s``: when to come back, where the server can say."""

    def __init__(self, reason: str, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class Job:
    """One request's audio, made in chunks of ``sizes`` audio-seconds by an :class:`Engine`;
    ``made`` counts the chunks complete, ``ready`` is set each time one completes."""

    def __init__(self, sizes: list[float]):
        self.sizes = sizes
        self.made = 0
        self.ready = Event()
        self.stopped = False

    def wait(self, chunks: int) -> bool:
        """Until at least ``chunks`` chunks are made (True), or the job is stopped (False)."""
        while self.made < chunks:
            if self.stopped:
                return False
            self.ready.wait()
            self.ready.clear()
        return True

    def stop(self) -> None:
        self.stopped = True
        self.ready.set()


class Engine:
    """``capacity`` audio-seconds per second shared equally by the jobs generating now, each
    at most ``max_speed`` x real time (processor sharing).

    Exact and event-driven: all generating jobs advance alike, so one "virtual" clock (audio
    made by any generating job since the engine started) places every chunk; the rate changes
    only when a job joins or leaves, and the loop sleeps until the next chunk completes or the
    set of jobs changes, whichever comes first.
    """

    def __init__(self, capacity: float, max_speed: float):
        self.capacity = capacity
        self.max_speed = max_speed
        self._virtual = 0.0  # audio-seconds made per generating job since the start
        self._at = time.monotonic()
        self._heap: list[tuple[float, int, Job]] = []  # (virtual time its chunk is done, seq, job)
        self._seq = itertools.count()
        self._changed = Event()
        self._loop: gevent.Greenlet | None = None

    @property
    def generating(self) -> int:
        return len(self._heap)

    def rate(self) -> float:
        """Audio-seconds per second each generating job makes now."""
        n = len(self._heap)
        return min(self.max_speed, self.capacity / n) if n else 0.0

    def _advance(self) -> None:
        now = time.monotonic()
        self._virtual += self.rate() * (now - self._at)
        self._at = now

    def join(self, job: Job) -> None:
        if not job.sizes:
            return
        self._advance()
        heapq.heappush(self._heap, (self._virtual + job.sizes[0], next(self._seq), job))
        self._kick()

    def leave(self, job: Job) -> None:
        """Stop making ``job``'s audio (its client left, or a fault cut it)."""
        if any(entry[2] is job for entry in self._heap):
            self._advance()
            self._heap = [entry for entry in self._heap if entry[2] is not job]
            heapq.heapify(self._heap)
            self._kick()

    def _kick(self) -> None:
        if self._loop is None:
            self._loop = gevent.spawn(self._run)
        else:
            self._changed.set()

    def _run(self) -> None:
        try:
            while self._heap:
                self._advance()
                while self._heap and self._heap[0][0] <= self._virtual + ENGINE_EPS_S:
                    due, _, job = heapq.heappop(self._heap)
                    job.made += 1
                    job.ready.set()
                    if job.made < len(job.sizes):
                        nxt = due + job.sizes[job.made]
                        heapq.heappush(self._heap, (nxt, next(self._seq), job))
                if self._heap:
                    self._changed.clear()
                    self._changed.wait((self._heap[0][0] - self._virtual) / self.rate())
        finally:
            self._loop = None


class TokenBucket:
    """``rate`` tokens/s, at most ``burst`` saved up; refilled from the time that passed."""

    def __init__(self, rate: float, burst: int):
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self._last = time.monotonic()

    def take(self) -> float:
        """Take a token; 0 when granted, else the seconds until one is there."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        self._last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class Capacity:
    """One simulated server's limits, slots and timing model, shared by every protocol it
    serves. ``args`` holds the knobs (see :mod:`testbed.sim.cli`), ``rng`` the seeded source
    of the slots model's jitter."""

    def __init__(self, args: argparse.Namespace, rng: random.Random):
        self.args = args
        self.rng = rng
        self.slots = Slots(args.slots)
        self.bucket = TokenBucket(args.rate, args.burst) if args.rate else None
        self.engine = Engine(args.capacity, args.max_speed) if args.capacity else None
        self.voices = VoiceCache(args.voice_cache, args.voice_miss_ms)
        self.stages: list[Stage] = getattr(args, "stages", None) or []  # --stages, parsed
        self.answers: set | None = set() if getattr(args, "cache_hit_ms", None) is not None else None
        self.text_cache_hits = 0
        self.admitted = 0  # queued + holding a slot
        self.served = 0
        self.rejected = 0  # refused by a limit, or by a fault that answers as one
        self.queue_s_total = 0.0  # time admitted requests waited for a slot, summed
        self.queue_waits = 0
        first_guess_ms = args.base_ms if args.capacity is None else args.prefill_ms
        self.mean_service_s = first_guess_ms / 1000  # moving average, for queue Retry-After
        self.congested_at: float | None = None  # --recovery-s: when a request last had to queue (monotonic)

    def admit(self) -> None:
        """Admit the request, or raise :class:`Refused` when the rate limit, the out-of-memory
        threshold or the queue limit says no. An admitted request then takes a turn."""
        if self.bucket is not None:
            wait_s = self.bucket.take()
            if wait_s:
                self.rejected += 1
                raise Refused("rate_limited", "rate limit exceeded", wait_s)
        crash = getattr(self.args, "crash_above", None)
        if crash is not None and self.admitted + 1 > crash:
            # as an engine that dies past its limit: the process ends, connections reset, nothing answers
            log.error("crash: %d requests in flight, above --crash-above %d; exiting", self.admitted + 1, crash)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)
        if self.args.oom_above is not None and self.admitted + 1 > self.args.oom_above:
            self.rejected += 1
            raise Refused("out_of_memory", OOM_MESSAGE)
        limit = self.args.queue_limit
        slots_n = self.slots.n  # not None where none is free
        if limit is not None and slots_n is not None and self.slots.free == 0 and self.slots.queued >= limit:
            self.rejected += 1
            drain_s = (self.slots.queued + 1) / slots_n * self.mean_service_s
            raise Refused("queue_full", "the queue is full", drain_s)
        self.admitted += 1

    def withdraw(self) -> None:
        """An admitted request that will take no turn (its client left before it was ready)."""
        self.admitted -= 1

    def take(self, text: str, voice: str | None = None, slowed: bool = False) -> Turn:
        """Wait for a slot (first come, first served) and start the admitted request's turn;
        ``voice`` (the key of its voice, None for the default one) goes through the voice
        cache once it holds the slot; ``slowed``: the request is of the language (voice)
        ``--slow-above`` slows, which it does past its K in flight."""
        above = getattr(self.args, "slow_above", None)
        slow_x = self.args.slow_x if slowed and above is not None and self.admitted > above else 1.0
        started = time.monotonic()
        if self.slots.free == 0:
            self.congested_at = started
        try:
            self.slots.acquire()
        except BaseException:
            self.admitted -= 1
            raise
        queue_s = time.monotonic() - started
        if self.slots.queued:
            self.congested_at = time.monotonic()
        self.queue_s_total += queue_s
        self.queue_waits += 1
        return Turn(self, text, queue_s, self.voices.use(voice), self._cached(text, voice), slow_x)

    def _cached(self, text: str, voice: str | None) -> bool:
        """Whether ``--cache-hit-ms`` serves this text from the answer cache (then kept for next time)."""
        if self.answers is None:
            return False
        key = (text, voice)
        if key in self.answers:
            self.text_cache_hits += 1
            return True
        if len(self.answers) >= ANSWERS_KEPT:  # bounded: a run of new texts forgets the oldest all at once
            self.answers.clear()
        self.answers.add(key)
        return False

    def service_seconds(self, text: str) -> float:
        planned_ms = self.args.base_ms + self.args.per_char_ms * len(text)
        jitter = self.args.jitter
        return planned_ms * (1 + self.rng.uniform(-jitter, jitter)) / 1000 * self.slowdown()

    def slowdown(self) -> float:
        """``RECOVERY_SLOWDOWN`` while requests queue and for ``--recovery-s`` after one last had
        to (a server slow to come back from overload), else 1."""
        lag = getattr(self.args, "recovery_s", None)
        if not lag or self.congested_at is None or time.monotonic() - self.congested_at >= lag:
            return 1.0
        return RECOVERY_SLOWDOWN

    def finish(self, service_s: float) -> None:
        self.slots.release()
        self.admitted -= 1
        self.served += 1
        self.mean_service_s += 0.1 * (service_s - self.mean_service_s)


class Turn:
    """One admitted request holding its slot, from :meth:`Capacity.take` to :meth:`finish`.

    ``queue_s``: its wait for the slot; ``planned_s``: the slots model's service time (None
    with the engine, where it is known once the audio is made); ``generating``: unix seconds it
    began to share the engine, after the prefill (None in the slots model); ``voice_s``: what
    computing its voice's speaker embedding took (0 on a cache hit), part of ``planned_s``."""

    def __init__(
        self,
        capacity: Capacity,
        text: str,
        queue_s: float,
        voice_s: float = 0.0,
        cached: bool = False,
        slow_x: float = 1.0,
    ):
        self.capacity = capacity
        self.queue_s = queue_s
        self.voice_s = voice_s
        self.acquired = time.monotonic()
        self.planned_s = (
            None
            if capacity.engine is not None
            else capacity.args.cache_hit_ms / 1000
            if cached
            else capacity.service_seconds(text) * slow_x + voice_s
        )
        self.generating: float | None = None
        self._done = False
        self._stop = Event()
        self._job: Job | None = None

    @property
    def service_s(self) -> float:
        """The planned service time, or (engine) the time the turn has taken so far."""
        return time.monotonic() - self.acquired if self.planned_s is None else self.planned_s

    def pieces(self, pcm: bytes, whole: bool = False):
        """``pcm`` as the timing model makes it, a piece at a time (``whole``: one piece once
        all of it is made). Closing the generator early stops the making."""
        if self.capacity.stages:
            return self._staged(pcm)
        if self.capacity.engine is None:
            return self._paced(pcm, whole)
        return self._generated(pcm, whole)

    def finish(self) -> None:
        """Release the slot (once; later calls do nothing)."""
        if not self._done:
            self._done = True
            self.capacity.finish(self.service_s)

    def stop(self) -> None:
        """End the making now: the pieces generator returns at its next wake-up, which this brings
        forward (the client cancelled, or went away)."""
        self._stop.set()
        if self._job is not None:
            self._job.stop()

    def abandon(self, orphan_s: float) -> None:
        """Leave a stopped turn: at once, or after ``orphan_s`` more seconds of holding the slot and
        (with the engine) a share of it, as work nobody will hear."""
        if self._done:
            return
        if not orphan_s:
            self.finish()
            return
        gevent.spawn(self._orphan, orphan_s)

    def _orphan(self, orphan_s: float) -> None:
        engine = self.capacity.engine
        job = Job([engine.max_speed * orphan_s * 2]) if engine is not None else None
        if engine is not None and job is not None:
            engine.join(job)
        try:
            gevent.sleep(orphan_s)
        finally:
            if engine is not None and job is not None:
                engine.leave(job)
            self.finish()

    def _staged(self, pcm: bytes):
        """``--stages``: through each stage in turn (a slot of its own, then its cost), the audio
        in one piece once the last is done (:mod:`testbed.sim.stages`)."""
        for stage in self.capacity.stages:
            if not stage.run(self.capacity.rng, self.capacity.args.jitter, self._stop):
                return
        yield pcm

    def _paced(self, pcm: bytes, whole: bool):
        """The slots model: the first piece after ``first_chunk_ms``, the rest evenly until the
        planned time."""
        if whole:
            if not self._stop.wait(self.planned_s):
                yield pcm
            return
        first_s = min(self.capacity.args.first_chunk_ms / 1000, self.planned_s)
        rest_s = self.planned_s - first_s
        chunks = 1 + max(1, round(rest_s * 1000 / STREAM_CHUNK_MS))
        frames = len(pcm) // 2
        bounds = [2 * (frames * i // chunks) for i in range(chunks + 1)]
        start = time.monotonic()
        for i in range(chunks):
            # due times from the start, so that late wake-ups do not add up
            due_s = first_s + rest_s * i / (chunks - 1)
            if self._stop.wait(max(0.0, start + due_s - time.monotonic())):
                return
            yield pcm[bounds[i] : bounds[i + 1]]

    def _generated(self, pcm: bytes, whole: bool):
        """The shared engine, after the prefill: each chunk as soon as it is made. Leaves the
        engine if closed early."""
        args, engine = self.capacity.args, self.capacity.engine
        sample_rate = args.sample_rate
        frame_s = 1 / sample_rate
        frames = len(pcm) // 2
        per_chunk = max(1, round(args.chunk_ms / 1000 * sample_rate))
        bounds = list(range(0, frames, per_chunk)) + [frames]
        sizes = [(b - a) * frame_s for a, b in zip(bounds, bounds[1:])]
        assert engine is not None  # this path is the shared engine's
        if whole:
            bounds, sizes = [0, frames], [sum(sizes)]
        if self._stop.wait(args.prefill_ms / 1000 + self.voice_s):
            return
        job = self._job = Job(sizes)
        self.generating = time.time()
        engine.join(job)
        try:
            for k in range(len(sizes)):
                if not job.wait(k + 1):
                    return
                yield pcm[2 * bounds[k] : 2 * bounds[k + 1]]
        finally:
            self._job = None
            engine.leave(job)
