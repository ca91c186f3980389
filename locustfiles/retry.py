"""The retry policy: which attempts to retry and how long to wait before the next one."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tts_knee.runformat.options import CONNECTION_ERROR  # the --retry-on token for connection errors


@dataclass(frozen=True)
class RetryPolicy:
    """From ``--retry-max-attempts``, ``--retry-base-ms``, ``--retry-max-ms``, ``--retry-on`` and
    ``--retry-after-cap`` (their defaults: :mod:`runformat.options`)."""

    max_attempts: int
    base_ms: float
    max_ms: float
    retry_on: frozenset  # HTTP statuses, and CONNECTION_ERROR for connection errors
    #: Longest Retry-After honoured, in seconds; a longer one is capped to this.
    retry_after_cap_s: float

    def should_retry(self, attempt: int, status: int | None) -> bool:
        if attempt >= self.max_attempts:
            return False
        if status is None:
            return CONNECTION_ERROR in self.retry_on
        return status in self.retry_on

    def delay_s(self, attempt: int, retry_after_s: float | None, rng: random.Random | None = None) -> float:
        """Seconds to sleep after failed ``attempt`` (1-based) before the next one.

        A parsed Retry-After wins (capped); otherwise exponential backoff from ``base_ms``
        doubling per attempt up to ``max_ms``, with "equal jitter": half fixed, half random.
        """
        if retry_after_s is not None:
            return min(retry_after_s, self.retry_after_cap_s)
        ceiling = min(self.max_ms, self.base_ms * 2 ** (attempt - 1)) / 1000.0
        jitter = (rng or random).uniform(0, ceiling / 2)  # the module's own generator by default
        return ceiling / 2 + jitter
