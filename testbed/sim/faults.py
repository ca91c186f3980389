"""The faults the simulator injects for drills (``--fault``), and the pick of one per request.

What each does to an answer is the protocol's to carry out (see :mod:`testbed.sim.http`); the
names and their groups are shared, so a server on another protocol picks from the same list.
"""

from __future__ import annotations

import random

RETRY_FAULTS = ("bad-retry-after", "huge-retry-after")  # a 429 whose Retry-After is wrong
BODY_FAULTS = ("reset", "truncate", "html", "json", "empty", "garbage")  # 200s, not audio
MID_STREAM_FAULTS = ("reset", "truncate", "garbage", "sse-error")  # hit after half the audio
# exhausted: refused with a well-formed wait (--pushback-ms); wrong-encoding: gRPC's audio as a WAV
FAULTS = ("stall", "close") + RETRY_FAULTS + BODY_FAULTS + ("sse-error", "exhausted", "wrong-encoding")


class Faults:
    """``names`` (from :data:`FAULTS`), one of them given to a request with probability
    ``rate``."""

    def __init__(self, names: list[str], rate: float, rng: random.Random):
        self.names = names
        self.rate = rate
        self.rng = rng

    def pick(self) -> str | None:
        if self.names and self.rng.random() < self.rate:
            return self.rng.choice(self.names)
        return None
