"""tts-knee's exit statuses, one per way a command ends; the manual's table (docs/ci.md, "Exit
statuses") lists each, and a test holds the two together. A run that tts-knee itself stopped
(bad input, a disk that did not keep up, a server that crashed, a failed health probe) exits
with its own status whatever Locust's ``--exit-code-on-error`` says: that option speaks of failed
requests only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExitStatus:
    """One exit status: its number, its name and when a command ends with it."""

    code: int
    name: str
    meaning: str


OK = 0
#: Locust's --exit-code-on-error (default 1) for a run with failed requests; report's failed gate.
FAILED = 1
BAD_INPUT = 2
DISK = 3
SERVER_CRASHED = 4
HEALTH_FAILED = 5

STATUSES = (
    ExitStatus(OK, "ok", "the run (or the report) finished, and nothing below applies"),
    ExitStatus(
        FAILED,
        "failed",
        "run: some requests failed, or a replayed trace did not send every row it planned (Locust's "
        "--exit-code-on-error, default 1, sets this number); report: "
        "--require does not hold, or --baseline found a significant regression",
    ),
    ExitStatus(
        BAD_INPUT,
        "bad_input",
        "an option, an input file or the target is wrong (unreachable, no TTS endpoint, refused the warm-up "
        "request); one sentence says which. Locust uses 2 too, after a traceback, for an error of its own",
    ),
    ExitStatus(
        DISK,
        "disk",
        "the run directory's disk did not keep up (or audio could not be written with --on-audio-error stop): "
        "the run stopped early, every record received written",
    ),
    ExitStatus(
        SERVER_CRASHED,
        "server_crashed",
        "the server stopped answering during --spike and the health probe failed too: the run stopped there",
    ),
    ExitStatus(
        HEALTH_FAILED,
        "health_failed",
        "the health probe after the run failed: the server did not answer (or not with audio, or not 2xx for "
        "--health-path); one still refusing with 429 (RESOURCE_EXHAUSTED) is up and exits as the run would",
    ),
)
