"""What the testbed's command-line programs share: one-line argument errors and value types."""

from __future__ import annotations

import argparse
import errno
import math
import socket
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage block
        self.exit(2, f"{self.prog}: {message}\n")


def port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {text!r}")
    return int(text)


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def number(kind, low=None, high=None, high_open=False):
    """An argparse type: ``kind`` (int or float) within [low, high] (or [low, high)), finite,
    with a plain message such as ``expected an integer >= 1, got 'x'``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        ok = value is not None and math.isfinite(value)
        ok = ok and (low is None or value >= low)
        ok = ok and (high is None or (value < high if high_open else value <= high))
        if not ok:
            name = "an integer" if kind is int else "a number"
            bounds = []
            if low is not None:
                bounds.append(f">= {low}")
            if high is not None:
                bounds.append(f"{'<' if high_open else '<='} {high}")
            raise argparse.ArgumentTypeError(f"expected {name} {' and '.join(bounds)}, got {text!r}")
        return value

    return parse


class Failure(Exception):
    """A sentence for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def bindable_port(host: str, port: int, flag: str = "--port") -> int:
    """``port`` if it can be bound on ``host`` now (any free one for 0), else a Failure naming
    ``flag``. Checked up front so a taken port is one sentence, not a hang or a traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise Failure(
                    f"port {port} on {host} is already in use; pick another with {flag} (0 picks a free one).", 2
                ) from None
            raise Failure(f"cannot bind {host}:{port} for {flag}: {err.strerror or err}.", 2) from None
        return sock.getsockname()[1]
