"""The retry policy: which attempts to retry and how long to wait before the next one."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

#: Status token in ``--retry-on`` that stands for connection errors and timeouts.
CONNECTION_ERROR = "conn"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_ms: float = 200.0
    max_ms: float = 2000.0
    retry_on: frozenset = field(default_factory=lambda: frozenset({429, 500, 502, 503, 504}))
    #: Longest Retry-After honoured, in seconds; a longer one is capped to this.
    retry_after_cap_s: float = 60.0

    def should_retry(self, attempt: int, status: int | None) -> bool:
        if attempt >= self.max_attempts:
            return False
        if status is None:
            return CONNECTION_ERROR in self.retry_on
        return status in self.retry_on

    def delay_s(self, attempt: int, retry_after_s: float | None, rng: random.Random = random) -> float:
        """Seconds to sleep after failed ``attempt`` (1-based) before the next one.

        A parsed Retry-After wins (capped); otherwise exponential backoff from ``base_ms``
        doubling per attempt up to ``max_ms``, with "equal jitter": half fixed, half random.
        """
        if retry_after_s is not None:
            return min(retry_after_s, self.retry_after_cap_s)
        ceiling = min(self.max_ms, self.base_ms * 2 ** (attempt - 1)) / 1000.0
        return ceiling / 2 + rng.uniform(0, ceiling / 2)
