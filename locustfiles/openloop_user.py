"""The open-loop user: arrivals at an offered rate, each sent on its schedule whether or not
earlier requests have finished (no coordinated omission).

One :class:`OpenLoopUser` runs per worker process (the step shape asks for as many users as
there are workers) and schedules that worker's share of the step's rate: ``rate / workers``,
Poisson (exponential gaps from a seeded generator, so a run can be repeated; the superposition
of the workers' streams is Poisson at the whole rate) or constant (equal gaps, each worker's
phase shifted by its index so the workers' arrivals interleave evenly).

Arrival times are laid out on the monotonic clock from the step's start up to its
``--step-time``, never from when the
previous send happened, so a late event loop shows as send lag (``t0 - scheduled``) and never
thins the load. Each arrival gets a greenlet of its own with its own connection (idle ones are
reused) and the shared attempt path (:class:`~locustfiles.attempt.Caller`). An arrival that finds
``--max-inflight`` requests in flight is not sent: it is counted as dropped for its step. Each
request in flight is known to the run (``Run.calls``, with when it was sent), so the step's
judgment can wait for those sent before its end. When the run stops no arrival is sent any more;
what is in flight has had the run's drain (``Run.drain``) by the time the user stops, and the
requests still running then are cut (recorded as ``cut_by_run_end``).

With ``--trace`` the schedule is the trace's own (:meth:`OpenLoopUser._replay`): each row at its
offset over the step's speed, a conversation's turns in order on one caller.
"""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING

import gevent
from gevent.pool import Group
from locust import task

from tts_knee.runformat.schema import BEHIND_SCHEDULE, RUN_STOPPED, TURN_UNANSWERED

from .arrivals import StepArrivals, arrival_span_s
from .attempt import Caller
from .clock import mono, wall
from .user import RunUser

if TYPE_CHECKING:
    from .inputs.trace import Trace
    from .step import Step

#: Arrivals due within this much of now are sent now rather than after another sleep.
EARLY_S = 0.0002
#: Arrivals a step still held when it ended are counted one by one up to this many (a long soak
#: stopped early: the rest from its rate).
MAX_LEFT_COUNTED = 100_000
#: How often a scheduler looks for a new step: while idle (between steps, a rate share of zero)
#: and while waiting for a distant arrival. A new step's first arrivals are late by up to this.
IDLE_POLL_S = 0.05


def gaps(arrival: str, rate: float, rng: random.Random):
    """Endless gaps (seconds) between arrivals at ``rate`` per second."""
    if arrival == "constant":
        while True:
            yield 1.0 / rate
    while True:
        yield rng.expovariate(rate)


class OpenLoopUser(RunUser):
    """Schedules this worker's share of each step's offered rate."""

    open_loop = True

    def on_start(self) -> None:
        # Set before the run is looked up: on_stop runs even when on_start stops the user.
        self.inflight = 0
        self.idle: list[Caller] = []
        self.lanes = itertools.count()  # numbers the callers
        self.inflight_requests = Group()
        super().on_start()

    def on_stop(self) -> None:
        # The run's drain is over (or this user was stopped some other way): what is still in
        # flight is cut, each attempt recorded with what had arrived.
        self.inflight_requests.kill(block=True, timeout=5)
        for caller in self.idle:
            caller.close()
        self.idle = []

    @task
    def schedule(self) -> None:
        """Send one step's arrivals until the step changes or the run stops."""
        run = self.tts_run
        state = run.state
        step = state.current
        share = run.rate_share(step)
        if step is None or share is None or share[0] <= 0 or run.stopping:
            gevent.sleep(IDLE_POLL_S)
            return
        rate, phase = share
        settings = run.settings
        tally = run.arrivals_of(step.step)
        if tally.open or tally.done:  # this step's schedule is laid out already (or given up)
            self._hold(step)
            return
        if settings.trace is not None:
            self._replay(step, settings.trace, tally)
            return
        rng = random.Random(f"{settings.arrival_seed}-{run.worker_index}-{step.step}")
        # The step began at step.start on this node's wall clock; lay the schedule on the
        # monotonic clock from there.
        m_start = mono() - (wall() - step.start)
        w_start = step.start
        gen = gaps(settings.arrival, rate, rng)
        due = phase / rate if settings.arrival == "constant" else next(gen)
        # A worker hears of a step's start but not of its end (the next step, or the stop, comes a
        # moment later): no arrival is scheduled past the step's time (a soak's own length).
        # an open-loop step has its rate (and its workers), None only in closed loop
        last = arrival_span_s(settings, step.rate, state.settle_of(step), step.hold_s)  # type: ignore[arg-type]
        tally.enter()
        try:
            while state.current is step and due < last and not run.stopping:
                wait = m_start + due - mono()
                if wait > EARLY_S:
                    # Wake at the arrival or soon after the step changes, whichever comes first.
                    gevent.sleep(min(wait, IDLE_POLL_S))
                    continue
                tally.planned += 1
                if self.inflight >= settings.max_inflight:
                    tally.dropped += 1
                else:
                    tally.sent += 1
                    self.seq += 1
                    self.inflight += 1
                    self.inflight_requests.spawn(self._send, step, w_start + due, self.seq)
                    gevent.sleep(0)  # behind schedule, the arrivals still go out one by one, each at once
                due += next(gen)
        finally:  # the step ended (or the user was stopped) with arrivals left: each counted, with why
            left = 0
            while due < last and left < MAX_LEFT_COUNTED:
                tally.not_sent[_why_not_sent(run.stopping)] += 1
                left += 1
                due += next(gen)
            if due < last:  # a long soak stopped early: the rest, as many as its rate gives it
                rest = int((last - due) * rate)
                tally.not_sent[RUN_STOPPED] += rest
                left += rest
            tally.planned += left
            if tally.leave():
                run.arrivals_settled_here()
        self._hold(step)

    def _hold(self, step: Step) -> None:
        """The step's arrivals are laid out: wait for its end (the shape's), or the run's."""
        run = self.tts_run
        while run.state.current is step and not run.stopping:
            gevent.sleep(IDLE_POLL_S)

    def _send(self, step: Step, scheduled: float, seq: int, row: int | None = None) -> None:
        caller = self.idle.pop() if self.idle else Caller(self, self.no, next(self.lanes))
        try:
            self._call(caller, step, scheduled, seq, row)
        except BaseException:
            caller.close()
            raise
        self.idle.append(caller)

    def _call(self, caller: Caller, step: Step, scheduled: float, seq: int, row: int | None) -> None:
        """One request on ``caller``: the next corpus text, or trace row ``row``'s."""
        calls = self.tts_run.calls
        calls[(self.no, seq)] = wall()
        try:
            request = self.tts_run.next_request() if row is None else self.tts_run.trace_request(row)
            text, ask = request
            caller.send(text, ask, seq, {"step": step, "scheduled": scheduled, "concurrency": self.inflight})
        finally:
            self.inflight -= 1
            calls.pop((self.no, seq), None)

    def _replay(self, step: Step, trace: Trace, tally: StepArrivals) -> None:
        """Send this worker's lanes of the trace (``locustfiles.inputs.trace``) for one step: a lone row
        at its offset over the step's speed, as an arrival of ``--rates`` is; a conversation on
        one caller of its own, turn after turn. Every row due within the step's span is planned,
        and ends sent, dropped (``--max-inflight``) or counted as not sent with why."""
        run, state, settings = self.tts_run, self.tts_run.state, self.tts_run.settings
        # an open-loop step has its rate and its workers, None only in closed loop
        speed = step.rate / trace.base_rps  # type: ignore[operator]
        last = trace.span_s(speed, settings.step_time)
        # the rows of each lane due within the span (a lane's rows come in offset order)
        lanes = [
            due_rows
            for lane in trace.lanes(step.workers[run.worker_id], len(step.workers))  # type: ignore[index, arg-type]
            if (due_rows := tuple(row for row in lane if trace.due_in_span(row, speed, last)))
        ]
        tally.planned = sum(len(lane) for lane in lanes)
        m_start = mono() - (wall() - step.start)
        tally.enter()
        lane_index = 0
        try:
            while state.current is step and lane_index < len(lanes) and not run.stopping:
                lane = lanes[lane_index]
                wait = m_start + trace.offsets[lane[0]] / speed - mono()
                if wait > EARLY_S:
                    gevent.sleep(min(wait, IDLE_POLL_S))
                    continue
                lane_index += 1
                if len(lane) > 1:
                    tally.enter()
                    self.inflight_requests.spawn(self._conversation, step, trace, lane, speed, m_start, tally)
                elif self.inflight >= settings.max_inflight:
                    tally.dropped += 1
                else:
                    tally.sent += 1
                    self.seq += 1
                    self.inflight += 1
                    due = trace.offsets[lane[0]] / speed
                    self.inflight_requests.spawn(self._send, step, step.start + due, self.seq, lane[0])
                gevent.sleep(0)
        finally:  # lanes the step ended before: each row counted, with why
            left = sum(len(lane) for lane in lanes[lane_index:])
            if left:
                tally.not_sent[_why_not_sent(run.stopping)] += left
            if tally.leave():
                run.arrivals_settled_here()
        self._hold(step)

    def _conversation(
        self, step: Step, trace: Trace, lane: tuple[int, ...], speed: float, m_start: float, tally: StepArrivals
    ) -> None:
        """A conversation's turns in order on one caller: each when the trace has it, and not
        before the turn above has been answered (a listener asks again once heard); that later
        moment is its ``scheduled``, so its latency from the schedule is the server's, not the
        wait for the turn above. Turns the step ends before are counted as not sent, with why."""
        run, state, settings = self.tts_run, self.tts_run.state, self.tts_run.settings
        caller = Caller(self, self.no, next(self.lanes))
        turn = 0  # the next turn to send
        answered_at: float | None = None  # when the turn above was answered (monotonic)
        try:
            while turn < len(lane):
                row = lane[turn]
                due = trace.offsets[row] / speed
                while (wait := m_start + due - mono()) > EARLY_S and state.current is step and not run.stopping:
                    gevent.sleep(min(wait, IDLE_POLL_S))
                if state.current is not step or run.stopping:
                    break
                turn += 1
                if self.inflight >= settings.max_inflight:
                    tally.dropped += 1
                    continue
                scheduled = step.start + max(due, mono() - m_start)
                tally.sent += 1
                self.seq += 1
                self.inflight += 1
                answered_at = None  # until it is: the turns below wait for it
                self._call(caller, step, scheduled, self.seq, row)
                answered_at = mono()
        finally:
            caller.close()
            for row in lane[turn:]:
                due_m = m_start + trace.offsets[row] / speed
                # a turn due before the turn above was answered (or while it still ran) waited for it
                waited = turn > 0 and due_m <= mono() and (answered_at is None or answered_at > due_m)
                tally.not_sent[TURN_UNANSWERED if waited else _why_not_sent(run.stopping)] += 1
            if tally.leave():
                run.arrivals_settled_here()


def _why_not_sent(stopping: bool) -> str:
    """Why an arrival was not sent when its step ended: the run stopped, or the next step began
    before this node had sent it (it fell behind the schedule)."""
    return RUN_STOPPED if stopping else BEHIND_SCHEDULE
