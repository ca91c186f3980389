"""The listener's side of an attempt: the arrivals that carried audio, and the record fields
they give (TTFA, chunks, the largest gap, and the underruns of the one playback model,
:func:`analysis.playback.listen`). Reads no clock and imports neither locust nor gevent: the
container tests feed it by hand."""
from __future__ import annotations

from analysis.playback import listen

#: Most arrivals kept per attempt in ``chunk_at_ms``; later ones merge into the last entry.
MAX_CHUNKS = 4000


class Timeline:
    """Arrivals that carried audio: when (monotonic seconds) and how much (ms, or None)."""

    __slots__ = ("at", "audio_ms")

    def __init__(self):
        self.at: list[float] = []
        self.audio_ms: list[float | None] = []

    def add(self, at: float, ms: float | None) -> None:
        self.at.append(at)
        self.audio_ms.append(ms)

    def fields(self, m0: float, buffer_ms: float, keep_lists: bool) -> dict:
        """The attempt record's streaming fields, times relative to ``m0``."""
        at, n = self.at, len(self.at)
        known = n and None not in self.audio_ms
        out = {"ttfa_ms": round((at[0] - m0) * 1000.0, 3) if n else None, "chunks": n,
               "gap_max_ms": round(max(b - a for a, b in zip(at, at[1:])) * 1000.0, 3) if n > 1 else None,
               "underruns": None, "underrun_ms": None, "chunk_at_ms": None, "chunk_audio_ms": None}
        if known:
            _, stalls = listen([(t - m0) * 1000.0 for t in at], self.audio_ms, buffer_ms)
            out["underruns"] = len(stalls)
            out["underrun_ms"] = round(sum((resumed - dry for dry, resumed in stalls), 0.0), 3)
        if keep_lists:
            cut = min(n, MAX_CHUNKS)
            out["chunk_at_ms"] = [round((t - m0) * 1000.0, 1) for t in at[:cut]]
            if known:
                ms = self.audio_ms[:cut]
                if n > cut:
                    ms[-1] = sum(self.audio_ms[cut - 1:])
                out["chunk_audio_ms"] = [round(x, 3) for x in ms]
        return out
