"""The load generator's clock: monotonic durations anchored to wall-clock epoch seconds.

Every timestamp in a record is ``wall()``: the epoch time at which this process started
measuring plus the monotonic time elapsed since, so durations between timestamps never jump
when NTP steps the wall clock. Workers convert these to the master's clock before shipping.

``TTS_KNEE_CLOCK_SKEW_S`` shifts this process's wall clock by that many seconds; it exists so
tests and drills can stand in for a host whose clock is wrong.
"""

from __future__ import annotations

import os
import time

_MONO0 = time.perf_counter()
_WALL0 = time.time() + float(os.environ.get("TTS_KNEE_CLOCK_SKEW_S") or 0.0)


def wall() -> float:
    """Unix seconds on this process's (possibly skewed) clock, monotonic within the process."""
    return _WALL0 + (time.perf_counter() - _MONO0)


mono = time.perf_counter
