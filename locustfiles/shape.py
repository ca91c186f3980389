"""The step shape: concurrency 1 → 2 → 4 … with the same batch of texts at each step (or, with
``--voice-steps``, the one concurrency or rate at every step and the number of distinct voices
going 1 → 4 → 8 …: the plan's levels are then numbers of voices).

The shape runs where the runner runs (the master in distributed mode); it announces each step
to the workers so every record carries the step it was sent in. A step ends after
``--step-time`` seconds, or after ``--step-requests`` finished requests when that is set (an
open-loop step: once it has sent that many arrivals, see ``arrivals.arrival_span_s``). Which
step comes next is the step plan's to say (``plan.py``). When the plan judges steps, a step's
load goes on past its cut-off until every user has finished what it sent before it and those
records have reached the master (at most ``RECORDS_WAIT_S``); the step is then judged on the
requests it sent before the cut-off, so a slow request still running is never left out of the
judgment, and the next step begins. In open loop that wait is for every request the step sent
before its cut-off (the nodes say which are still in flight), and as its arrivals stop at the
cut-off, the next rate begins on a server without the queue an overloaded rate left behind.
Once the plan is done, a ``--soak`` holds one level for its
own length (``soak.py``): its step is not judged, and ``--step-requests`` does not end it. Then
a ``--spike`` runs its three steps (``spike.py``), and ``--probe-texts`` its own (``probe.py``),
each ending once its requests have finished. A run
cut short (``Run.cut_short``: its disk did not keep up) ends at the next tick, as if the plan
were done.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import gevent
from locust import LoadTestShape
from locust.runners import MasterRunner, Runner

from tts_knee import runformat

from .arrivals import arrival_span_s
from .clock import wall
from .shipping import BATCH_INTERVAL_S
from .step import Step

log = logging.getLogger("tts_knee.shape")
#: Users started per second at a step change: fast enough that a step is all at its level.
SPAWN_RATE = 100
#: A step whose new users take this long to start, or longer, is settled once they all run.
RAMP_NOTABLE_S = 1.0
TICK_SLACK_S = 0.1
#: How often Locust calls the shape's tick.
TICK_S = 1.0
#: Longest wait past a step's cut-off for the requests it sent before it; those still
#: unanswered then are judged without (and counted in the verdict's ``unanswered``).
RECORDS_WAIT_S = 30.0
#: Longest wait past an open-loop step's time for arrivals its nodes have yet to send, counted
#: from the last one sent (the request timeout, if shorter).
ARRIVALS_WAIT_S = 30.0
RECORDS_POLL_S = 0.05


@dataclass
class StepState:
    """Which step is running on this node, and the text counter that restarts at each step."""

    settle_s: float = 0.0
    current: Step | None = None
    steps: list = field(default_factory=list)  # every step begun, in order (master/local)
    _texts: itertools.count = field(default_factory=itertools.count)

    def begin(self, step: Step) -> None:
        if self.current is not None and self.current.end is None:
            self.current.end = step.start
        self.current = step
        self.steps.append(step)
        self._texts = itertools.count()

    def finish(self, ended_at: float) -> None:
        if self.current is not None and self.current.end is None:
            self.current.end = ended_at

    def next_text_index(self) -> int:
        return next(self._texts)

    def settle_of(self, step: Step) -> float:
        return self.settle_s if step.settle_s is None else step.settle_s

    def settled(self, step: Step | None, sent_at: float) -> bool:
        """Whether an attempt sent at ``sent_at`` during ``step`` is past the step's settle window."""
        return step is None or sent_at >= step.start + self.settle_of(step)


def _open_loop(user_class: type) -> bool:
    """Whether Locust's ``user_class`` schedules open-loop arrivals (``RunUser.open_loop``)."""
    return bool(getattr(user_class, "open_loop", False))


def _next_level(run):
    """The next level to run: the plan's, then the soak's, the spike's, the probe's (none once
    the run is cut short)."""
    if run.cut_short is not None:
        return None
    nxt = run.plan.next()
    for then in (run.soak, run.spike, run.probe):
        if nxt is None and then is not None:
            nxt = then.next(run)
    return nxt


class StepShape(LoadTestShape):
    """Runs the steps the plan asks for; the run stops itself when the plan is done."""

    @property
    def _runner(self) -> Runner:
        """Locust's runner, which it sets before the first tick."""
        assert self.runner is not None
        return self.runner

    def _going_on(self, run, cur: Step) -> bool:
        """Whether the step ``cur`` goes on this tick (its time or its requests not yet done, the
        run not cut short); a step that ends is judged where the plan judges it, and logged."""
        settings, state, plan = run.settings, run.state, run.plan
        # A step with a longer settle window than the run's runs that much longer.
        if cur.rate is None:
            length = settings.step_time if cur.hold_s is None else cur.hold_s
            left = length + state.settle_of(cur) - state.settle_s - (wall() - cur.start)
        else:  # open loop: the step lasts as long as it sends arrivals
            left = arrival_span_s(settings, cur.rate, state.settle_of(cur), cur.hold_s) - (wall() - cur.start)
        probing = cur.phase == runformat.PROBE_PHASE
        by_count = probing or (settings.step_requests and cur.hold_s is None and cur.rate is None)
        done = run.writer.finished[cur.step] if probing else run.finished_in_step(cur.step) if by_count else 0
        wanted = run.probe.requests_at(cur.concurrency, run.sending_nodes) if probing else settings.step_requests
        going = run.cut_short is None  # a run cut short ends now
        judged = going and plan.judging and cur.phase in ("grid", "refine")
        if going and not by_count and TICK_SLACK_S < left < TICK_S:
            # Locust ticks once a second, in the phase of the tick that began the step, which its
            # own start (opening the run, spawning) can lag: a step due before the next tick ends
            # on its time, not up to a second late (an open-loop step sends no arrival then, and
            # a longer window would read as a shortfall)
            gevent.sleep(left)
            left = 0.0
        # Locust ticks once a second: a step due within TICK_SLACK_S ends now, not a tick later.
        if going and left > TICK_SLACK_S and not (by_count and done >= wanted):
            if run.spike is not None and cur.phase in runformat.SPIKE_PHASES:
                run.spike.watch(run, cur.phase)  # a server gone ends the run: see spike.py
            if judged:  # parse as the step goes: its judgment has little left to read
                gevent.get_hub().threadpool.apply(run.reader.refresh)
            return True
        if going and cur.rate is not None:
            self._await_arrivals(run, cur)
        if judged:
            self._judge(run, cur)
        log.info(
            "step %d (%s) done",
            cur.step,
            f"concurrency {cur.concurrency}" if cur.rate is None else f"{cur.rate:g} req/s offered",
        )
        return False

    def _end(self, run, cur: Step | None) -> None:
        """No step is left (or the run is cut short): the run ends and is saved."""
        if cur is not None and cur.end is None:
            run.state.finish(wall())
            log.info(
                "the %s after step %d; stopping",
                "run is cut short" if run.cut_short else "step plan is done",
                cur.step,
            )
        run.save()
        if run.is_master:
            # A headless master would otherwise quit without telling workers to stop, and
            # their last records would never be sent: stop them first, then let Locust quit.
            self._runner.stop()

    def tick(self):
        # The first tick comes before test_start: it opens the run.
        run = self._runner.environment.tts_knee.ensure_run()  # type: ignore[attr-defined]  # the node, set at init
        if run is None or run.failed:
            return None
        settings, state, plan = run.settings, run.state, run.plan
        cur = state.current
        if run.stopping:  # the run is draining what is in flight: no judging, no next step
            return self._load(run, cur) if cur is not None else None
        if cur is not None and self._going_on(run, cur):
            return self._load(run, cur)
        nxt = _next_level(run)
        if nxt is None:
            self._end(run, cur)
            return None
        if settings.mode == "open":
            return self._begin_rate_step(run, nxt)
        hold_s = (
            nxt.hold_s
            if nxt.hold_s is not None
            else run.soak.seconds
            if nxt.phase == runformat.SOAK_PHASE
            else run.probe.longest_s(nxt.level, settings)
            if nxt.phase == runformat.PROBE_PHASE
            else None
        )
        # the probe's and the spike's levels are concurrencies, a voice sweep's own steps numbers of voices
        if settings.voice_steps and nxt.phase not in (
            runformat.PROBE_PHASE,
            *runformat.SPIKE_PHASES,
        ):  # the plan's level is the number of voices; the load stays
            step = Step(
                len(state.steps) + 1, settings.steps[0], wall(), phase=nxt.phase, repeat=nxt.repeat, voices=nxt.level
            )
        else:
            step = Step(len(state.steps) + 1, nxt.level, wall(), phase=nxt.phase, repeat=nxt.repeat, hold_s=hold_s)
        # "step 2/5" while the plan is the plain grid; repeats, refinement and the soak say which they are
        plain = nxt.phase == "grid" and plan.repeats == 1
        label = f"step {step.step}/{len(plan.grid)}" if plain else f"step {step.step}"
        notes = [] if plain else [nxt.phase if nxt.phase != "grid" else f"grid pass {nxt.repeat}/{plan.repeats}"]
        own = self._own_settle(run, cur, step)
        if own is not None:
            step.settle_s, why = own
            notes.append(f"the first {step.settle_s:.1f} s are not settled: {why}")
        voices = "" if step.voices is None else f", {step.voices} distinct voices"
        log.info("%s: concurrency %d%s%s", label, step.concurrency, voices, f" ({'; '.join(notes)})" if notes else "")
        run.begin_step(step)
        return self._load(run, step)

    def _load(self, run, step: Step):
        """What Locust should run for ``step``: its concurrency in closed-loop users, or one
        open-loop scheduler per worker sharing its rate."""
        classes = self._runner.environment.user_classes
        if run.settings.mode == "open":
            return len(step.workers), SPAWN_RATE, [user_class for user_class in classes if _open_loop(user_class)]  # type: ignore[arg-type]  # an open step has its workers
        closed = [user_class for user_class in classes if not _open_loop(user_class)]
        return (step.concurrency, SPAWN_RATE) if len(closed) == len(classes) else (step.concurrency, SPAWN_RATE, closed)

    def _begin_rate_step(self, run, nxt):
        if not any(_open_loop(user_class) for user_class in self._runner.environment.user_classes):
            run.fail(
                "--rates needs the open-loop user: run locustfiles/tts.py, or import OpenLoopUser "
                "from locustfiles.openloop_user in your locustfile"
            )
            return None
        if run.is_master:
            master = self._runner
            assert isinstance(master, MasterRunner)
            ids = sorted(
                client.id for client in master.clients.ready + master.clients.spawning + master.clients.running
            )
        else:
            ids = [run.worker_id]
        if not ids:
            run.fail("no workers are connected to share the rate")
            return None
        voices = nxt.level if run.settings.voice_steps else None
        rate = run.settings.rates[0] if voices else nxt.level
        step = Step(
            len(run.state.steps) + 1,
            0,
            wall(),
            phase=nxt.phase,
            repeat=nxt.repeat,
            rate=rate,
            workers={wid: i for i, wid in enumerate(ids)},
            voices=voices,
            hold_s=run.soak.seconds if nxt.phase == runformat.SOAK_PHASE else None,
        )
        trace = run.settings.trace
        if trace is not None:
            speed = rate / trace.base_rps
            span, settle = trace.span_s(speed, run.settings.step_time), run.state.settle_of(step)
            step.offered_rps = trace.offered_between(speed, settle, span) / (span - settle)
            log.info(
                "step %d: the trace at %gx, %d arrivals over %.1f s (%.3g req/s; %.3g in the settled part) "
                "over %d worker%s",
                step.step,
                round(speed, 6),
                trace.replayed(speed, run.settings.step_time),
                span,
                rate,
                step.offered_rps,
                len(ids),
                "s" if len(ids) > 1 else "",
            )
        else:
            log.info(
                "step %d: %g requests per second offered (%s arrivals over %d worker%s)%s",
                step.step,
                rate,
                run.settings.arrival,
                len(ids),
                "s" if len(ids) > 1 else "",
                "" if voices is None else f", {voices} distinct voices",
            )
        run.begin_step(step)
        return self._load(run, step)

    @classmethod
    def _own_settle(cls, run, cur: Step | None, step: Step) -> tuple[float, str] | None:
        """A step's own settle window, where the run's is too short for what the step change
        leaves behind (users stopped with requests in flight, or users still starting), and why;
        None: the run's settle window will do."""
        drain = cls._drain_s(run, cur, step)
        if drain is not None:
            assert cur is not None  # a drain follows a step
            gone = cur.concurrency - step.concurrency
            return drain, (
                f"the {gone} user{'s' if gone > 1 else ''} stopped here left requests the server is still working on"
            )
        ramp = cls._ramp_s(run, cur, step)
        if ramp is not None:
            added = step.concurrency - (cur.concurrency if cur is not None else 0)
            return ramp, f"Locust starts the {added} users it adds {SPAWN_RATE} a second"
        return None

    @staticmethod
    def _ramp_s(run, cur: Step | None, step: Step) -> float | None:
        """The settle window of a step that adds so many users that starting them (SPAWN_RATE a
        second) takes a second or more and longer than the run's settle window: until they all
        run, the step is below its level. None: the run's settle window will do. A spike's jump
        is its own measure, left as it is."""
        if step.phase in runformat.SPIKE_PHASES:
            return None
        added = step.concurrency - (cur.concurrency if cur is not None else 0)
        ramp = added / SPAWN_RATE
        return ramp if ramp >= RAMP_NOTABLE_S and ramp > run.state.settle_s else None

    @staticmethod
    def _drain_s(run, cur: Step | None, step: Step) -> float | None:
        """The settle window of a step that lowers the concurrency, when the run's is shorter
        than the slowest request of the step before: Locust stops the extra users at once, but
        the server goes on with what they sent, so the new step starts loaded above its level
        until that has drained. None: the run's settle window will do."""
        if cur is None or step.concurrency >= cur.concurrency:
            return None
        slowest = run.writer.max_wait_s(cur.step)
        settle = run.state.settle_s
        return min(slowest, run.settings.step_time) if slowest is not None and slowest > settle else None

    @staticmethod
    def _await_arrivals(run, cur: Step) -> None:
        """An open-loop step's time is up: wait until every node has sent what its schedule
        held for the step (a worker that heard of the step late is behind by that much; a
        conversation's turn waits for the turn above to be answered), at most ARRIVALS_WAIT_S
        past the last arrival any node sent; what is left then is counted as not sent."""
        limit = min(ARRIVALS_WAIT_S, run.settings.request_timeout + 2 * BATCH_INTERVAL_S)
        deadline = wall() + limit
        sent = run.arrivals_in(cur.step).sent
        while not run.arrivals_settled(cur) and not run.stopping and wall() < deadline:
            gevent.sleep(RECORDS_POLL_S)
            now_sent = run.arrivals_in(cur.step).sent
            if now_sent > sent:  # still sending: the wait is for what comes after
                sent, deadline = now_sent, wall() + limit
        if not run.arrivals_settled(cur) and not run.stopping:
            log.warning(
                "step %d: %d of its arrivals were still unsent %.0f s after the last one sent; it ends without "
                "them (run.json counts them as not sent)",
                cur.step,
                max(0, run.arrivals_in(cur.step).unsent),
                limit,
            )

    def _judge(self, run, cur: Step) -> None:
        """Wait (bounded) until the requests ``cur`` sent before now are all recorded, then let
        the plan judge it. The step's users keep running meanwhile: no gap in the load. In a
        closed loop each user runs one request at a time, so a user whose latest record ended
        after the cut-off has nothing of the step's left; in open loop the nodes say which of
        their requests are still in flight (:meth:`Run.in_flight_before`)."""
        cur.cutoff = cutoff = wall()
        limit = min(
            RECORDS_WAIT_S, run.settings.request_timeout + run.settings.retry.max_ms / 1000.0 + 2 * BATCH_INTERVAL_S
        )
        if cur.rate is None:
            users = self._runner.user_count
            expected = min(cur.concurrency, users) if users else cur.concurrency
            while run.writer.users_done_since(cutoff) < expected and wall() < cutoff + limit:
                gevent.sleep(RECORDS_POLL_S)
            unanswered = max(0, expected - run.writer.users_done_since(cutoff))
            if unanswered:
                log.warning(
                    "step %d: %d of %d users still had a request running %.0f s after the step's end; "
                    "it is judged without them",
                    cur.step,
                    unanswered,
                    expected,
                    limit,
                )
        else:
            while (left := run.in_flight_before(cutoff)) != 0 and wall() < cutoff + limit:
                gevent.sleep(RECORDS_POLL_S)
            unanswered = left or 0
            if left is None:
                log.warning(
                    "step %d: not every worker said within %.0f s which of its requests were still in "
                    "flight; it is judged on the records so far",
                    cur.step,
                    limit,
                )
            elif left:
                log.warning(
                    "step %d: %d requests sent before the step's end were still running %.0f s after it; "
                    "it is judged without them",
                    cur.step,
                    left,
                    limit,
                )
        if not run.writer.flush().wait(limit):
            log.error(
                "the disk of %s has not written step %d's last records in %.0f s; it is judged on what reached it",
                run.run_dir,
                cur.step,
                limit,
            )
        # Parsing and the figures run on a native thread: the event loop, and with it every
        # user's timing, keeps going meanwhile.
        pool = gevent.get_hub().threadpool
        entry = {
            "step": cur.step,
            "concurrency": cur.concurrency,
            "start": cur.start,
            **({} if cur.voices is None else {"voices": cur.voices}),
            **(
                {}
                if cur.rate is None
                else {"rate": cur.rate, "dropped": run.dropped_in(cur.step), "offered_rps": cur.offered_rps}
            ),
        }
        stats = pool.apply(run.reader.stats, (entry, cutoff, run.state.settle_of(cur)))
        levels = pool.apply(run.reader.levels, (run.state.settle_s,)) if run.reader.repeated() else None
        run.plan.finish(
            {
                "step": cur.step,
                "concurrency": cur.concurrency,
                "phase": cur.phase,
                "repeat": cur.repeat,
                **({} if cur.voices is None else {"voices": cur.voices}),
                **({} if cur.rate is None else {"rate": cur.rate}),
            },
            stats,
            unanswered,
            levels,
        )
