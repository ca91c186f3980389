"""Parsers for the response headers a TTS server uses to talk about time.

Both parsers are total: they return a value or ``None``, never raise, whatever the server sent.
"""

from __future__ import annotations

import email.utils
import math


def header(resp, name: str) -> str | None:
    """A response header's value; repeated headers joined with ", " as HTTP allows."""
    value = resp.get(name)
    return ", ".join(value) if isinstance(value, list) else value


#: Longest Server-Timing header we parse; the rest of a longer one is ignored.
SERVER_TIMING_MAX_CHARS = 4096


def parse_retry_after(raw: str | None, now: float) -> float | None:
    """Seconds to wait, from a ``Retry-After`` value: delta-seconds or an HTTP-date.

    ``now`` is the current unix time, used to turn a date into a delay (a date in the past is
    a delay of 0). Returns ``None`` for a missing or unparsable value.
    """
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():  # str.isdigit alone also takes "²" and "٣"
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError, OSError):
        return None


def parse_server_timing(raw: str | None) -> dict[str, float] | None:
    """``Server-Timing: queue;dur=12.5, infer;dur=80`` → ``{"queue": 12.5, "infer": 80.0}``.

    Metrics without a numeric ``dur`` are skipped; ``None`` when nothing usable was sent.
    """
    if not raw:
        return None
    stages: dict[str, float] = {}
    for metric in raw[:SERVER_TIMING_MAX_CHARS].split(","):
        name, *params = metric.split(";")
        name = name.strip()
        if not name:
            continue
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() != "dur":
                continue
            try:
                dur = float(value.strip().strip('"'))
            except ValueError:
                break
            if math.isfinite(dur):
                stages[name] = dur
            break
    return stages or None
