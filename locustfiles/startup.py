"""What is settled before Locust starts a run: where the web UI listens (127.0.0.1 unless
``--web-host`` says otherwise, with one warning line for an address beyond loopback without
``--web-login``), and, for a headless run, its options and its target: a mistake there ends
the process with its one sentence and exit status 2, before Locust prints a statistics table.
The exit statuses: :mod:`tts_knee.runformat.exits`; the manual's "Exit statuses"."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import NoReturn

from tts_knee.runformat import exits

from . import settings as settings_mod
from .preflight import preflight

log = logging.getLogger("tts_knee")
#: Where the web UI listens when ``--web-host`` is not given.
WEB_HOST = "127.0.0.1"


def default_web_host(parser) -> None:
    """Locust's web UI binds every interface by default; tts-knee's binds loopback."""
    parser.set_defaults(web_host=WEB_HOST)
    # argparse has no public way to reword an option's help: the action is Locust's own
    action = parser._option_string_actions.get("--web-host")
    if action is not None:
        action.help = (
            f"Host to bind the web interface to (tts-knee's default {WEB_HOST}; '*' or 0.0.0.0: every interface)"
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # "", "*" (every interface) or a name
        return False


def web_ui_warning(options) -> str | None:
    """One line when the web UI listens beyond loopback without a login page, else None."""
    if options.headless or options.worker or options.web_login or is_loopback(options.web_host):
        return None
    where = "every interface" if options.web_host in ("", "*") else options.web_host
    return (
        f"the web UI listens on {where} (port {options.web_port}) without --web-login: anyone who reaches "
        f"this machine can start load with the credentials given here; see the manual's 'Exposing the web UI'"
    )


def _stop(environment, message: str | None) -> NoReturn:
    """End the process with exit status 2, ``message`` (when not already logged) its last line."""
    if message:
        log.error("%s", message)
    disk = getattr(getattr(environment, "tts_knee", None), "disk", None)
    if disk is not None:
        disk.drain()  # run.json, written from its own thread
    sys.exit(exits.BAD_INPUT)


def check_before_start(environment) -> None:
    """A headless master or local runner: its options, and (a local runner, unless --voice-upload
    must register a voice first) the target's answer to the warm-up request; a mistake ends the
    process here with its sentence (the target's, after run.json records it)."""
    options = environment.parsed_options
    if not options.headless or options.worker:
        return  # the web UI's form may still change them; a worker says why to its master
    try:
        settings = settings_mod.from_options(options, environment.host)
    except settings_mod.SettingsError as error:
        _stop(environment, str(error))
    if settings.skip_preflight or settings.voice_upload or options.master:
        # a master sends it at the first step, as its workers start: the time it takes is theirs
        # to settle their clocks in (a trace's arrivals are scheduled on them)
        return
    node = environment.tts_knee
    node.preflight = preflight(settings)
    if not node.preflight["ok"]:
        node.ensure_run()  # run.json records the refusal, and Run.fail logs its sentence
        _stop(environment, None)
