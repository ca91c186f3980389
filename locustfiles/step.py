"""One step of a run as the nodes hold it: its level (a concurrency, an offered rate, a number of
voices), when it began and ended, and how it is judged. The step shape (:mod:`.shape`) makes
them; the users, the node and the live metrics read them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Step:
    step: int  # 1-based index
    concurrency: int
    start: float  # unix seconds on the master's clock
    end: float | None = None
    phase: str = "grid"  # one of runformat.PHASES
    repeat: int = 1  # 1-based pass over the grid
    cutoff: float | None = None  # judged on the requests sent before this (when judged)
    settle_s: float | None = None  # this step's own settle window; None: the run's
    rate: float | None = None  # open loop: offered requests per second, whole run
    workers: dict | None = None  # open loop: worker id -> index among those sharing the rate
    hold_s: float | None = None  # the soak: how long it lasts (a probe step: at most); None: --step-time
    voices: int | None = None  # --voice-steps: requests draw from the first this many voices
    offered_rps: float | None = None  # --trace: the arrivals its settled window replays, per second
