"""Parse tts-knee command lines with the programs' own parsers, for the files that hold them
(deploy/kubernetes/, docker-compose.yml). A script, not a module for pytest's process: Locust
monkey-patches whatever process imports it with gevent.

    python tests/cmdline.py < commands.json

reads ``[{"argv": [...], "cwd": DIR, "env": {...}}, ...]`` (``--config`` files and corpora are
found from ``cwd``, environment options from ``env``) and prints one JSON list, an object per
command: ``{"options": {dest: value}}`` and, for a Locust master, ``"settings"`` (the sweep
tts-knee makes of those options) or ``"settings_error"``; ``{"error": "..."}`` when the command
line would not start.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


class CommandLineError(Exception):
    """The command line would not start; the message is its program's own."""


def parser_for(argv: list[str]):
    """The parser that ``argv``'s program builds, and the arguments it is given."""
    if argv[:1] == ["locust"]:
        from locust.argument_parser import get_parser

        from tts_knee.locustfiles import settings

        p = get_parser()
        p.prog = "locust"
        settings.add_arguments(p)  # what locustfiles/tts.py's init_command_line_parser listener does
        return p, argv[1:]
    if argv[:2] == ["python", "-m"] and len(argv) > 2:
        module = argv[2]
        if module == "tts_knee.dashboard":
            from tts_knee.dashboard.__main__ import parser

            return parser(), argv[3:]
        if module == "tts_knee.collectors":
            from tts_knee.collectors.__main__ import parser

            return parser(), argv[3:]
        if module == "tts_knee.testbed.sim":
            from tts_knee.testbed.sim.cli import build_parser

            return build_parser(), argv[3:]
    raise CommandLineError(f"{' '.join(argv[:3])!r} is not a tts-knee command")


def parse(argv: list[str]):
    """``argv`` parsed as its program would parse it, or :class:`CommandLineError`.

    Options must be spelt in full, on the command line and in ``--config`` files: argparse
    takes any unambiguous prefix (``--step-tim``), so a flag renamed to a longer name would
    still pass."""
    p, args = parser_for(argv)
    p.allow_abbrev = False
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return p.parse_args(args)
    except SystemExit:
        raise CommandLineError(" ".join(said.getvalue().split()) or "exited while parsing") from None
    except Exception as e:  # noqa: BLE001 - the collector's parser raises its own usage error
        raise CommandLineError(str(e)) from None


def sweep(options) -> dict:
    """What a master's run would be made of: tts-knee's validated settings."""
    from tts_knee.locustfiles import settings

    s = settings.from_options(options, options.host)
    return {
        "host": s.host,
        "steps": list(s.steps),
        "step_time_s": s.step_time,
        "settle_s": s.settle_time,
        "texts": len(s.texts),
        "texts_source": s.texts_source,
        "run_dir": str(s.run_dir),
        "collectors": list(s.collectors),
        "server_metrics": list(s.server_metrics),
        "collector_token": s.collector_token,
    }


def check(command: dict) -> dict:
    here, environ = os.getcwd(), dict(os.environ)
    os.chdir(command["cwd"])
    os.environ.update(command.get("env") or {})
    try:
        options = parse(command["argv"])
        out = {"options": vars(options)}
        if command["argv"][0] == "locust" and options.master:
            try:
                out["settings"] = sweep(options)
            except ValueError as e:  # settings.SettingsError: one sentence naming the option
                out["settings_error"] = str(e)
        return out
    except CommandLineError as e:
        return {"error": str(e)}
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)


if __name__ == "__main__":
    results = [check(c) for c in json.load(sys.stdin)]
    print(json.dumps(results, default=str))
