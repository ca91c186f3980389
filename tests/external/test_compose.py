"""The compose file: valid for docker-compose, and its commands are ones our CLIs accept."""

import re
import shutil
import subprocess

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from manifests import VERSION, image_contents
from procs import ROOT, spawn


@pytest.fixture(scope="module")
def config():
    if not shutil.which("docker-compose"):
        pytest.skip("docker-compose is not installed (Debian package docker-compose; .ci/run installs it)")
    proc = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def service(config: str, name: str) -> str:
    m = re.search(rf"^  {name}:\n((?:    .*\n|\s*-.*\n)*)", config, re.M)
    assert m, f"no service {name}"
    return m.group(1)


PYPROJECT = (ROOT / "pyproject.toml").read_text()


def test_the_image_holds_every_package():
    """One image for every part: the Dockerfile builds from every folder pyproject.toml installs
    (tts_knee/ and the parts its package-dir maps), in /src; the working directory the commands
    run in holds no tts_knee/ to stand in front of the installed package."""
    folders = {"tts_knee", *tomllib.loads(PYPROJECT)["tool"]["setuptools"]["package-dir"].values()}
    dockerfile = (ROOT / "Dockerfile").read_text()
    built = re.findall(r"^COPY (\S+) /src/\1$", dockerfile, re.M)
    assert "analysis" in folders and folders <= set(built)
    assert re.search(r"^RUN pip install .*'/src\[", dockerfile, re.M)
    assert not [name for name in image_contents() if name.split("/")[0] == "tts_knee"]


def test_services_and_their_deployment(config):
    for name in ("master", "worker", "collector", "dashboard", "tts"):
        assert f"image: tts-knee:{VERSION}" in service(config, name)
    assert "container_name" not in service(config, "worker")  # --scale worker=N needs this
    collector = service(config, "collector")
    assert "pid: host" in collector and "driver: nvidia" in collector and "- gpu" in collector
    for name in ("master", "dashboard"):
        ports = re.findall(r"- (\S+):(\d+):(\d+)/tcp", service(config, name))
        assert ports and all(host == "127.0.0.1" for host, _, _ in ports)
    assert "/app/runs" in service(config, "master")


def command(config: str, name: str) -> list[str]:
    block = service(config, name).split("command:\n", 1)[1]
    args = []
    for line in block.splitlines():
        if not line.startswith("    - "):
            break
        args.append(line.strip()[2:].strip("'"))
    return args


@pytest.mark.parametrize("name", ["tts", "collector", "dashboard"])
def test_server_commands_start(config, name, tmp_path):
    args = command(config, name)
    assert args[:2] == ["python", "-m"]
    args = args[2:]
    # Same flags, but loopback and a free port here.
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = "0"
    if name == "dashboard":
        (tmp_path / "runs" / "compose").mkdir(parents=True)
    with spawn(args, cwd=tmp_path if name == "dashboard" else ROOT) as proc:
        assert proc.url.startswith("http://127.0.0.1:")
