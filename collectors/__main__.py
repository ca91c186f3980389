"""The collector sidecar: sample this host's GPUs, CPU and one server process, serve them.

Run it beside the TTS server::

    python -m collectors --host 127.0.0.1 --port 9300 --interval 1 --pid 4242
    python -m collectors --match testbed.sim --spool /var/tmp/resources.jsonl

Once it accepts connections it prints one line, ``listening on http://HOST:PORT`` (the real
port when ``--port 0``). Notes (no NVML, a lost GPU, the watched process gone) go to stderr.
A bad flag ends with one sentence on stderr and exit status 2. SIGTERM or Ctrl-C stop it.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

import psutil

from collectors.host import HostSampler, ProcessWatcher
from collectors.http import CollectorServer
from collectors.nvml import Nvml
from collectors.sampler import DEFAULT_BUFFER, DEFAULT_INTERVAL_S, Sampler

TOKEN_ENV = "TTS_KNEE_COLLECTOR_TOKEN"


class _Usage(Exception):
    """A mistake the user can fix; the message is one sentence."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one sentence instead of usage + traceback
        raise _Usage(f"{message} (see python -m collectors --help).")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m collectors",
                description="Sample GPU (NVML), CPU and one server process; serve the samples "
                            "over HTTP for the tts-knee puller and Prometheus.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 to be reached from "
                        "other hosts — then set --token)")
    p.add_argument("--port", type=int, default=9300, help="port (0 picks a free one)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S,
                   help="seconds between samples (default 1)")
    watch = p.add_mutually_exclusive_group()
    watch.add_argument("--pid", type=int, help="watch this process and its children")
    watch.add_argument("--match", metavar="NAME",
                       help="watch the process whose name or command line contains NAME "
                            "(found again if it restarts)")
    p.add_argument("--spool", metavar="FILE", help="also append every sample to FILE (JSONL)")
    p.add_argument("--token", default=None,
                   help=f"require 'Authorization: Bearer TOKEN' on every endpoint "
                        f"(default: ${TOKEN_ENV})")
    p.add_argument("--buffer", type=int, default=DEFAULT_BUFFER,
                   help=f"samples kept in memory (default {DEFAULT_BUFFER})")
    p.add_argument("--hostname", help="host name reported in samples (default: this host's)")
    return p


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise _Usage(f"--port must be between 0 and 65535, not {args.port}.")
    if not 0.01 <= args.interval <= 3600:
        raise _Usage(f"--interval must be between 0.01 and 3600 seconds, not {args.interval}.")
    if args.buffer < 1:
        raise _Usage(f"--buffer must be at least 1, not {args.buffer}.")
    if args.pid is not None and (args.pid <= 0 or not psutil.pid_exists(args.pid)):
        raise _Usage(f"--pid {args.pid}: no such process; start the server first or use "
                     f"--match NAME.")
    if args.match is not None and not args.match.strip():
        raise _Usage("--match needs a non-empty name.")


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        _check(args)
        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                            format="collectors: %(message)s")
        try:
            watcher = (ProcessWatcher(pid=args.pid, match=args.match)
                       if args.pid is not None or args.match else None)
        except psutil.Error as exc:
            raise _Usage(f"--pid {args.pid}: cannot watch it ({exc}).") from None
        try:
            spool = open(args.spool, "a", encoding="utf-8") if args.spool else None
        except OSError as exc:
            raise _Usage(f"--spool {args.spool}: cannot open it ({exc.strerror}).") from None
        nvml = Nvml()
        nvml.available  # start NVML now, so "no NVML" is said at start, not on first sample
        sampler = Sampler(HostSampler(), nvml, watcher, interval_s=args.interval,
                          buffer=args.buffer, spool=spool, hostname=args.hostname)
        try:
            server = CollectorServer((args.host, args.port), sampler, token)
        except OSError as exc:
            raise _Usage(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}).") \
                from None
    except _Usage as exc:
        print(f"collectors: {exc}", file=sys.stderr)
        return 2

    if token is None and args.host not in ("127.0.0.1", "::1", "localhost"):
        logging.getLogger("collectors").warning(
            "Listening on %s without --token: anyone who can reach it can read this host's "
            "readings.", args.host)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sampler.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     name="http", daemon=True).start()
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"listening on http://{shown}:{port}", flush=True)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    sampler.stop()
    nvml.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
