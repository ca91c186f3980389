"""tts-knee: find the concurrency at which a text-to-speech service stops scaling, and say why.

    tts-knee sim --port 8300 --slots 4                       # a TTS server with a known capacity
    tts-knee collect --port 9300 --pid 4242                  # beside the TTS server
    tts-knee run --headless -H http://127.0.0.1:8300 --steps 1,2,4,8,16 --step-time 30 \\
                 --run-dir runs/demo --collector http://127.0.0.1:9300
    tts-knee report runs/demo                                # summary.json, report.html
    tts-knee judge runs/demo --asr-model small               # its kept clips judged (again), then reported
    tts-knee export runs/demo --format parquet               # runs/demo/attempts.parquet

``tts-knee COMMAND --help`` lists the command's options with their defaults. ``run`` is Locust
with tts-knee's locustfile (``locust -f locustfiles/tts.py`` in a clone is the same): every
Locust option passes through, the web UI included when ``--headless`` is not given. ``report``
is :mod:`tts_knee.dashboard`'s command line, ``judge`` :mod:`tts_knee.dashboard.judge`'s,
``export`` :mod:`tts_knee.dashboard.export`'s,
``collect`` :mod:`tts_knee.collectors`' and ``sim``
:mod:`tts_knee.testbed.sim`'s.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

PROG = "tts-knee"


def _run(argv: list[str]) -> int:
    # Importing the node attaches tts-knee's options to Locust's parser before Locust builds
    # it, so that Locust's own --help (printed before it loads a locustfile) lists them too.
    from locust.main import main as locust_main

    from tts_knee.locustfiles import node

    locustfile = Path(node.__file__).with_name("tts.py")
    sys.argv = [f"{PROG} run", "-f", str(locustfile), *argv]
    locust_main()
    return 0


def _report(argv: list[str]) -> int:
    from tts_knee.dashboard.__main__ import main as dashboard_main

    return dashboard_main(argv, prog=f"{PROG} report")


def _judge(argv: list[str]) -> int:
    from tts_knee.dashboard.judge import main as judge_main

    return judge_main(argv, prog=f"{PROG} judge")


def _export(argv: list[str]) -> int:
    from tts_knee.dashboard.export import main as export_main

    return export_main(argv, prog=f"{PROG} export")


def _collect(argv: list[str]) -> int:
    from tts_knee.collectors.__main__ import main as collector_main

    return collector_main(argv, prog=f"{PROG} collect")


def _sim(argv: list[str]) -> int:
    from tts_knee.testbed.sim import main as sim_main

    return sim_main(argv, prog=f"{PROG} sim")


#: Each subcommand: what it does, in one line, and how it runs.
COMMANDS = {
    "run": (
        "a load run: Locust with tts-knee's locustfile (steps, retries, the run directory); every Locust option too",
        _run,
    ),
    "report": (
        "a run directory's summary.json, report.html and step table; comparisons, the CI gate, the live view",
        _report,
    ),
    "judge": (
        "a finished run's kept clips judged, or judged again (another model, the voice and the sound), then reported",
        _judge,
    ),
    "export": (
        "a run directory's attempts, judged clips or resource samples as Parquet or CSV, typed columns",
        _export,
    ),
    "collect": ("the collector beside the TTS server: GPU, CPU and the server process, over HTTP", _collect),
    "sim": ("a TTS server with a known capacity to aim a run at", _sim),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [OPTIONS ...]", "", __doc__.split("\n\n")[0], "", "commands:"]
    lines += [f"  {name.ljust(width)}  {what}" for name, (what, _) in COMMANDS.items()]
    lines += ["", f"{PROG} COMMAND --help lists a command's options with their defaults."]
    return "\n".join(lines)


def version() -> str:
    try:
        return metadata.version("tts-knee")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"{PROG} {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"{PROG}: {name!r} is not a command; use one of {', '.join(COMMANDS)} ({PROG} --help says what each does).",
            file=sys.stderr,
        )
        return 2
    return COMMANDS[name][1](rest)
