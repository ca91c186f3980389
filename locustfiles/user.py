"""The TTS user: one user is one conversation, its utterances sent back to back (one in flight;
``--contexts K`` keep K in flight on its one session), through the attempt path it shares with
the open-loop user (locustfiles/openloop_user.py): :class:`~locustfiles.attempt.Caller`.

A conversation is ``--turns`` utterances on one session (0: for as long as the user runs),
``--think-time`` seconds apart; then the user hangs up and the next utterance opens a new
session (over HTTP, a new connection).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import gevent
from gevent.pool import Group
from locust import User, constant, task
from locust.exception import StopUser

from .attempt import Caller

if TYPE_CHECKING:
    from .node import Run

#: How often a user whose run is stopping (or whose probe step is all sent) looks again.
STOPPING_POLL_S = 0.05


class RunUser(User):
    """What the closed-loop and the open-loop user share: no wait time, and on start this node's
    run, a user number of its own and a request count from zero. Not spawned itself."""

    abstract = True
    wait_time = constant(0)
    #: Whether the user schedules open-loop arrivals (``--rates``, ``--trace``); the step shape
    #: runs these in an open-loop step and the others in a closed-loop one.
    open_loop: ClassVar[bool] = False
    #: This node's run, from on_start on (not ``run``: that is Locust's User.run, which runs the tasks).
    tts_run: Run

    def on_start(self) -> None:
        node = self.environment.tts_knee
        run = node.run
        if run is None:  # this node's options were unusable; ensure_run said why
            raise StopUser()
        self.tts_run = run
        self.no = node.next_user_number()
        self.seq = 0


class TTSUser(RunUser):
    """Sends the corpus, text by text, to the TTS endpoint the options describe: one request
    in flight at a time (closed loop)."""

    # None only where on_start stopped the user before making it: then no task runs, and on_stop checks
    caller: Caller = None  # type: ignore[assignment]

    def on_start(self) -> None:
        super().on_start()
        self.caller = Caller(self, self.no)
        self.turn = 0  # utterances of the conversation so far

    def on_stop(self) -> None:
        if self.caller is not None:
            self.caller.close()

    @task
    def synthesize(self) -> None:
        if self.tts_run.stopping:  # draining: what is in flight finishes, nothing new is sent
            gevent.sleep(STOPPING_POLL_S)
            return
        settings = self.tts_run.settings
        if settings.contexts > 1:
            self._in_contexts(settings.contexts, settings.think_time)
            return
        request = self.tts_run.next_request()
        if request is None:  # a probe step whose texts are all sent: nothing more until the next step
            gevent.sleep(STOPPING_POLL_S)
            return
        self.seq += 1
        text, ask = request
        self.caller.send(text, ask, self.seq)
        self.turn += 1
        if settings.turns and self.turn >= settings.turns:
            self.turn = 0
            self.caller.transport.hang_up()
        elif settings.think_time:
            gevent.sleep(settings.think_time)

    def _in_contexts(self, contexts: int, think_s: float) -> None:
        """``contexts`` utterances in flight on the one session, each context starting its next once
        its last ended (and ``think_s`` passed); until the user stops or the run drains."""

        def context() -> None:
            while not self.tts_run.stopping:  # draining: what is in flight finishes, nothing new is sent
                request = self.tts_run.next_request()
                if request is None:  # a probe step's texts are all sent
                    gevent.sleep(STOPPING_POLL_S)
                    continue
                self.seq += 1
                text, ask = request
                self.caller.send(text, ask, self.seq)
                if think_s:
                    gevent.sleep(think_s)

        group = Group()
        try:
            for _ in range(contexts):
                group.spawn(context)
            group.join(raise_error=True)
        finally:
            group.kill()
