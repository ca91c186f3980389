"""NTP-style clock offset between a worker and the master over Locust's custom messages.

The worker sends pings stamped with its clock; the master answers with its own; the probe
with the smallest round trip bounds the error best, so its offset is kept:
``offset = (t_send + t_recv) / 2 - t_master`` (worker clock minus master clock).
"""

from __future__ import annotations

import socket

import gevent

from tts_knee.runformat.wire import PING, PONG

from .clock import wall

PROBES = 8
PROBE_GAP_S = 0.02
PROBE_WAIT_S = 2.0


def serve(runner) -> None:
    """Master side: answer every ping with the master's clock."""

    def on_ping(environment, msg, **_kw):
        runner.send_message(PONG.name, PONG(n=msg.data["n"], t=msg.data["t"], tm=wall()), client_id=msg.node_id)

    runner.register_message(PING.name, on_ping)


class WorkerClock:
    """Worker side: keeps the best offset estimate seen so far."""

    def __init__(self, runner):
        self.runner = runner
        self.host = socket.gethostname()
        self.offset_s: float | None = None
        self.rtt_s: float | None = None
        self._n = 0
        runner.register_message(PONG.name, self._on_pong)

    def _on_pong(self, environment, msg, **_kw) -> None:
        now = wall()
        rtt = now - msg.data["t"]
        if self.rtt_s is None or rtt <= self.rtt_s:
            self.rtt_s = rtt
            self.offset_s = (msg.data["t"] + now) / 2 - msg.data["tm"]

    def probe(self) -> None:
        """Send a burst of pings; answers arrive through the runner's message loop."""
        for _ in range(PROBES):
            self._n += 1
            self.runner.send_message(PING.name, PING(n=self._n, t=wall()))
            gevent.sleep(PROBE_GAP_S)

    def wait(self, timeout: float = PROBE_WAIT_S) -> bool:
        deadline = wall() + timeout
        while self.offset_s is None and wall() < deadline:
            gevent.sleep(0.01)
        return self.offset_s is not None
