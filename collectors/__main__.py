"""The collector sidecar: sample this host's GPUs, CPU and one server process, serve them.

Run it beside the TTS server::

    tts-knee collect --host 127.0.0.1 --port 9300 --interval 1 --pid 4242
    tts-knee collect --match "tts-knee sim" --spool /var/tmp/resources.jsonl
    tts-knee collect --scrape http://127.0.0.1:8000/metrics --dcgm http://127.0.0.1:9400/metrics

``--scrape URL`` (repeatable) adds the server's own Prometheus series to every sample as
``metrics`` (counters as per-second rates; see :mod:`collectors.exposition`); ``--dcgm URL``
reads the GPUs from dcgm-exporter instead of NVML, which is then never touched. The scraped
series are not exported again on this collector's ``/metrics``: they already are on the
server's, and repeating them there would only double their number.

Once it accepts connections it prints one line, ``listening on http://HOST:PORT`` (the real
port when ``--port 0``). Notes (no NVML, a lost GPU, the watched process gone) go to stderr.
A bad flag ends with one sentence on stderr and exit status 2. SIGTERM or Ctrl-C stop it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from typing import NoReturn

import psutil

from tts_knee.collectors.dcgm import DcgmGpus
from tts_knee.collectors.exposition import DEFAULT_MAX_SERIES
from tts_knee.collectors.host import HostSampler, ProcessWatcher
from tts_knee.collectors.http import CollectorServer
from tts_knee.collectors.nvml import Nvml
from tts_knee.collectors.sampler import DEFAULT_BUFFER, DEFAULT_INTERVAL_S, Sampler
from tts_knee.collectors.scrape import DEFAULT_TIMEOUT_S, Scrapes
from tts_knee.runformat.metric_roles import LABEL_NAME, ROLES, parse_roles
from tts_knee.runformat.options import COLLECTOR_TOKEN_ENV as TOKEN_ENV  # the master's --collector-token reads it too


class _Usage(Exception):
    """A mistake the user can fix; the message is one sentence."""


PROG = "tts-knee collect"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one sentence instead of usage + traceback
        raise _Usage(f"{message} (see {self.prog} --help).")


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    arg_parser = _Parser(
        prog=prog,
        description="Sample GPU (NVML), CPU and one server process; serve the samples "
        "over HTTP for the tts-knee puller and Prometheus.",
    )
    arg_parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 to be reached from other hosts — then set --token)",
    )
    arg_parser.add_argument("--port", type=int, default=9300, help="port (default 9300; 0 picks a free one)")
    arg_parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between samples (default 1)"
    )
    watch = arg_parser.add_mutually_exclusive_group()
    watch.add_argument("--pid", type=int, help="watch this process and its children (default: no process)")
    watch.add_argument(
        "--match",
        metavar="NAME",
        help="watch the process whose name or command line contains NAME, "
        "found again if it restarts (default: no process)",
    )
    arg_parser.add_argument("--spool", metavar="FILE", help="also append every sample to FILE, JSONL (default: none)")
    arg_parser.add_argument(
        "--token", default=None, help=f"require 'Authorization: Bearer TOKEN' on every endpoint (default: ${TOKEN_ENV})"
    )
    arg_parser.add_argument(
        "--buffer", type=int, default=DEFAULT_BUFFER, help=f"samples kept in memory (default {DEFAULT_BUFFER})"
    )
    arg_parser.add_argument("--hostname", help="host name reported in samples (default: this host's)")
    srv = arg_parser.add_argument_group("the server's own metrics")
    srv.add_argument(
        "--scrape",
        action="append",
        default=[],
        metavar="URL",
        help="a Prometheus endpoint of the TTS server (vLLM, Triton, SGLang, TGI "
        "or any other), read each interval into the samples' metrics "
        "(repeatable; default none)",
    )
    srv.add_argument(
        "--scrape-match",
        metavar="REGEX",
        help="keep only series whose name (with labels) matches REGEX (default: every series)",
    )
    srv.add_argument(
        "--scrape-max-series",
        type=int,
        default=DEFAULT_MAX_SERIES,
        metavar="N",
        help=f"series kept per endpoint, known queue/running/batch/KV-cache "
        f"series first (default {DEFAULT_MAX_SERIES})",
    )
    srv.add_argument(
        "--scrape-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds one scrape may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    srv.add_argument(
        "--dcgm", metavar="URL", help="read GPUs from this dcgm-exporter /metrics instead of NVML (default: NVML)"
    )
    srv.add_argument(
        "--server-role",
        action="append",
        default=[],
        metavar="ROLE=SERIES",
        help=f"the scraped series (a metric family) is the server's ROLE, one of {', '.join(ROLES)}: "
        f"kept under the cap, and told to the master (repeatable; default: the names tts-knee knows)",
    )
    srv.add_argument(
        "--server-stage-label",
        metavar="NAME",
        help="the label that tells the server's stages apart in its series, told to the master; one no scraped "
        "series carries is refused at start (default: Triton's model, vLLM-Omni's stage)",
    )
    return arg_parser


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise _Usage(f"--port must be between 0 and 65535, not {args.port}.")
    if not 0.01 <= args.interval <= 3600:
        raise _Usage(f"--interval must be between 0.01 and 3600 seconds, not {args.interval}.")
    if args.buffer < 1:
        raise _Usage(f"--buffer must be at least 1, not {args.buffer}.")
    if args.pid is not None and (args.pid <= 0 or not psutil.pid_exists(args.pid)):
        raise _Usage(f"--pid {args.pid}: no such process; start the server first or use --match NAME.")
    if args.match is not None and not args.match.strip():
        raise _Usage("--match needs a non-empty name.")
    for flag, url in [("--scrape", scrape_url) for scrape_url in args.scrape] + [("--dcgm", args.dcgm)]:
        if url is not None and not re.match(r"https?://[^/\s]+", url):
            raise _Usage(f"{flag} must be an http:// URL like http://127.0.0.1:8000/metrics, not {url!r}.")
    if args.scrape_match is not None:
        try:
            re.compile(args.scrape_match)
        except re.error as exc:
            raise _Usage(f"--scrape-match {args.scrape_match!r} is not a regular expression ({exc}).") from None
    if args.scrape_max_series < 1:
        raise _Usage(f"--scrape-max-series must be at least 1, not {args.scrape_max_series}.")
    try:
        parse_roles(args.server_role)
    except ValueError as error:
        raise _Usage(f"{error}.") from None
    label = args.server_stage_label
    if label is not None and not LABEL_NAME.fullmatch(label):
        raise _Usage(f"--server-stage-label takes a label name (letters, digits and _), not {label!r}.")
    if args.server_stage_label is not None and not args.scrape:
        raise _Usage("--server-stage-label needs --scrape URL (the series it tells apart).")
    if not 0.05 <= args.scrape_timeout <= 60:
        raise _Usage(f"--scrape-timeout must be between 0.05 and 60 seconds, not {args.scrape_timeout}.")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    try:
        args = parser(prog).parse_args(argv)
        _check(args)
        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="collectors: %(message)s")
        scrapes = (
            Scrapes(
                args.scrape,
                args.interval,
                args.scrape_timeout,
                args.scrape_match,
                args.scrape_max_series,
                args.server_role,
                args.server_stage_label,
            )
            if args.scrape
            else None
        )
        # before anything else starts: a label no series carries is a mistake to say alone
        missing = scrapes.missing_label() if scrapes is not None else None
        if missing:
            raise _Usage(f"{missing}.")
        try:
            watcher = ProcessWatcher(pid=args.pid, match=args.match) if args.pid is not None or args.match else None
        except psutil.Error as exc:
            raise _Usage(f"--pid {args.pid}: cannot watch it ({exc}).") from None
        try:
            spool = open(args.spool, "a", encoding="utf-8") if args.spool else None  # noqa: SIM115 - the run's
        except OSError as exc:
            raise _Usage(f"--spool {args.spool}: cannot open it ({exc.strerror}).") from None
        gpus: DcgmGpus | Nvml
        if args.dcgm:
            gpus = DcgmGpus(args.dcgm, args.interval, args.scrape_timeout)
        else:
            gpus = Nvml()
            gpus.available  # noqa: B018 - start NVML now, so "no NVML" is said at start, not on first sample
        sampler = Sampler(
            HostSampler(),
            gpus,
            watcher,
            interval_s=args.interval,
            buffer=args.buffer,
            spool=spool,
            hostname=args.hostname,
            scrapes=scrapes,
        )
        try:
            server = CollectorServer((args.host, args.port), sampler, token)
        except OSError as exc:
            raise _Usage(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}).") from None
    except _Usage as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2

    if token is None and args.host not in ("127.0.0.1", "::1", "localhost"):
        logging.getLogger("collectors").warning(
            "Listening on %s without --token: anyone who can reach it can read this host's readings.", args.host
        )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if isinstance(gpus, DcgmGpus):
        gpus.start()
    if scrapes is not None:
        scrapes.start()
    sampler.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True).start()
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an address of AF_INET(6): the type also has AF_UNIX's bytes
    shown = f"[{host}]" if ":" in host else host
    # one write, newline included: a log line from another thread cannot land inside it
    print(f"listening on http://{shown}:{port}\n", end="", flush=True)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    sampler.stop()
    if scrapes is not None:
        scrapes.stop()
    gpus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
