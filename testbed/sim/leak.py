"""A server that leaks memory at a known rate (``--leak-mb-per-min``), so that a soak has a
real leak to find: the process keeps a block of written memory every ``TICK_S``, and its
resident set grows by the rate from the moment it starts serving, whatever the load."""

from __future__ import annotations

import time

import gevent

#: How often the leak takes more memory.
TICK_S = 1.0
MB = 1_000_000


class Leak:
    """Keeps ``mb_per_min`` MB (10^6 bytes) more of written memory each minute."""

    def __init__(self, mb_per_min: float):
        self.bytes_per_s = mb_per_min * MB / 60.0
        self.kept: list[bytes] = []
        self.held_bytes = 0

    def run(self) -> None:
        start = time.monotonic()
        while True:
            due = int(self.bytes_per_s * (time.monotonic() - start))
            if due > self.held_bytes:
                # bytes(n) could stay untouched zero pages; a written block is resident
                self.kept.append(b"\xa5" * (due - self.held_bytes))
                self.held_bytes = due
            gevent.sleep(TICK_S)

    def start(self) -> gevent.Greenlet:
        return gevent.spawn(self.run)
