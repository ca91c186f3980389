"""What the testbed's command-line programs share: one-line argument errors and value types."""
from __future__ import annotations

import argparse
import math


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
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
            raise argparse.ArgumentTypeError(
                f"expected {name} {' and '.join(bounds)}, got {text!r}")
        return value
    return parse
