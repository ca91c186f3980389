"""The TTS user: one user is one in-flight request, sent back to back with no wait time, through
the attempt path it shares with the open-loop user (locustfiles/openloop_user.py):
:class:`~locustfiles.attempt.Caller`.
"""
from __future__ import annotations

import gevent
from locust import User, constant, task
from locust.exception import StopUser

from .attempt import Caller

#: How often a user whose run is stopping looks again (it sends nothing more meanwhile).
STOPPING_POLL_S = 0.05


class RunUser(User):
    """What the closed-loop and the open-loop user share: no wait time, and on start this node's
    run, a user number of its own and a request count from zero. Not spawned itself."""

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        node = self.environment.tts_knee
        self.run = node.run
        if self.run is None:   # this node's options were unusable; ensure_run said why
            raise StopUser()
        self.no = node.next_user_number()
        self.seq = 0


class TTSUser(RunUser):
    """Sends the corpus, text by text, to the TTS endpoint the options describe: one request
    in flight at a time (closed loop)."""

    caller: Caller | None = None   # none while on_start stopped the user before making it

    def on_start(self) -> None:
        super().on_start()
        self.caller = Caller(self, self.no)

    def on_stop(self) -> None:
        if self.caller is not None:
            self.caller.close()

    @task
    def synthesize(self) -> None:
        if self.run.stopping:   # draining: what is in flight finishes, nothing new is sent
            gevent.sleep(STOPPING_POLL_S)
            return
        self.seq += 1
        self.caller.send(self.run.next_text(), self.seq)
