"""The ``tts-knee`` command: its subcommands' help, each option with its default, and the
command installed from a wheel into a fresh environment, run from outside the clone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from procs import ROOT, spawn
from rundirs import assert_declared

#: What the installed-package test copies to build from: the tree, without what runs leave.
BUILD_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "runs", "build", "dist", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis"
)


def tts_knee(*args, cwd=ROOT, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tts_knee", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))


def _declared(help_text: str) -> set[str]:
    """The options ``help_text`` declares (each at the start of its line, as argparse lists them),
    not those its help sentences mention."""
    return set(re.findall(r"^ {2}(--[a-z][a-z0-9-]*)", help_text, flags=re.M))


def test_the_command_names_its_subcommands():
    done = tts_knee("--help")
    assert done.returncode == 0, done.stderr
    for name in ("run", "report", "judge", "export", "collect", "sim"):
        assert re.search(rf"^  {name} ", done.stdout, re.M), done.stdout
    bad = tts_knee("swarm")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == (
        "tts-knee: 'swarm' is not a command; use one of run, report, judge, export, collect, sim "
        "(tts-knee --help says what each does)."
    )
    assert tts_knee().returncode == 2


def test_run_help_lists_every_tts_knee_option_and_locusts_own():
    from tts_knee.runformat.options import OPTIONS

    done = tts_knee("run", "--help")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    listed = _options(done.stdout)
    assert {"--steps", "--tts-api", "--headless", "--web-port", "--master"} <= listed
    assert {o.flag for o in OPTIONS if o.flag} <= listed
    # each tts-knee option says its default (a stand-in value says what it becomes)
    text = " ".join(done.stdout.split())
    assert "(closed loop; default 1,2,4,8,16)" in text and "(default 10% of the step" in text


def test_run_help_shows_tts_knees_options_in_their_groups_after_locusts():
    from tts_knee.runformat.options import GROUPS, OPTIONS

    out = tts_knee("run", "--help").stdout
    heads = [line[:-1] for line in out.splitlines() if line.startswith("tts-knee: ") and line.endswith(":")]
    assert heads == [f"tts-knee: {g.title}" for g in GROUPS]
    assert out.index("Common options:") < out.index(heads[0])
    for g in GROUPS:  # each group lists exactly its own options
        nxt = [out.index(h + ":") for h in heads if out.index(h + ":") > out.index(f"tts-knee: {g.title}:")]
        part = out[out.index(f"tts-knee: {g.title}:") : min(nxt) if nxt else out.index("Examples:")]
        assert _declared(part) == {o.flag for o in OPTIONS if o.group is g}, g.title


def test_the_manuals_option_reference_is_made_from_the_declarations_and_lists_every_option():
    from tts_knee.runformat.options import OPTIONS, reference

    page = (ROOT / "docs" / "options.md").read_text()
    assert page == reference(), "docs/options.md is out of date: make docs writes it"
    listed = set(re.findall(r"^\| `(--[a-z0-9-]+)`", page, flags=re.M))
    help_text = tts_knee("run", "--help").stdout
    ours = _declared(help_text[help_text.index("tts-knee: ") : help_text.index("Examples:")])
    assert listed == ours == {o.flag for o in OPTIONS if o.flag}


def test_the_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize(
    "command, module, build",
    [
        ("report", "tts_knee.dashboard.__main__", "parser"),
        ("judge", "tts_knee.dashboard.judge", "parser"),
        ("export", "tts_knee.dashboard.export", "parser"),
        ("collect", "tts_knee.collectors.__main__", "parser"),
        ("sim", "tts_knee.testbed.sim.cli", "build_parser"),
    ],
)
def test_each_subcommand_lists_every_option_with_its_default(command, module, build):
    import importlib

    parser = getattr(importlib.import_module(module), build)(f"tts-knee {command}")
    done = tts_knee(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: tts-knee {command}"), done.stdout
    for action in parser._actions:
        flags = [f for f in action.option_strings if f.startswith("--")]
        if not flags or flags[0] == "--help":
            continue
        assert flags[0] in done.stdout, flags[0]
        assert "default" in (action.help or ""), f"tts-knee {command} {flags[0]} does not say its default"


def test_the_parts_keep_their_own_commands():
    for module, prog in (
        ("tts_knee.dashboard", "tts-knee report"),
        ("tts_knee.collectors", "tts-knee collect"),
        ("tts_knee.testbed.sim", "tts-knee sim"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and done.stdout.startswith(f"usage: {prog}"), done.stderr


def test_the_installed_command_runs_outside_the_clone(tmp_path):
    """A wheel of the project installed (without its dependencies, which the environment these
    tests run in already holds) into a fresh environment: it holds one name, tts_knee, and the
    command runs from elsewhere: its help, then the simulator, a short run and its report, all
    from the installed package."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=BUILD_IGNORE)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert "Package would be ignored" not in built.stdout + built.stderr, built.stderr  # its data declared
    [wheel] = (tmp_path / "dist").glob("tts_knee-*.whl")
    # one installed name: the wheel puts tts_knee and its .dist-info into site-packages, nothing else
    with zipfile.ZipFile(wheel) as whl:
        [record] = [n for n in whl.namelist() if n.endswith(".dist-info/RECORD")]
        files = [row.split(",")[0] for row in whl.read(record).decode().splitlines() if row]
        assert set(files) == set(whl.namelist())
    assert {f.split("/")[0] for f in files} == {"tts_knee", record.split("/")[0]}, sorted(files)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=60)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the dependencies: this environment's packages, after the fresh one's own (a plain path:
    # the .pth files there, this project's editable install among them, are not read)
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    command = str(env_dir / "bin" / "tts-knee")

    def run(*args, timeout=60):
        return subprocess.run([command, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)

    where = subprocess.run(
        [
            python,
            "-c",
            "import tts_knee, tts_knee.locustfiles as l, tts_knee.runformat as r, "
            "tts_knee.configs.texts as t; "
            "print(l.__file__, r.__file__, list(t.__path__)[0])",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert all(p.startswith(str(site)) for p in where.stdout.split()), where.stdout
    parts = ("analysis", "collectors", "configs", "dashboard", "locustfiles", "runformat", "testbed")
    old_names = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util, sys; print([n for n in sys.argv[1:] if importlib.util.find_spec(n)])",
            *parts,
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert old_names.returncode == 0 and old_names.stdout.strip() == "[]", old_names.stdout + old_names.stderr
    helped = run("run", "--help")
    assert helped.returncode == 0, helped.stderr
    assert {"--steps", "--tts-api", "--headless"} <= _options(helped.stdout)
    with spawn(
        ["sim", "--port", "0", "--slots", "2", "--base-ms", "20", "--per-char-ms", "0"],
        program=(command,),
        env={"PATH": env["PATH"]},
        cwd=elsewhere,
    ) as sim:
        swept = run(
            "run", "--headless", "-H", sim.url, "--steps", "1,2", "--step-time", "2", "--run-dir", "r", timeout=90
        )
    assert swept.returncode == 0, swept.stdout + swept.stderr
    reported = run("report", "r", "--no-report")
    assert reported.returncode == 0, reported.stderr
    assert re.search(r"^recommended concurrency: ", reported.stdout, re.M), reported.stdout
    assert_declared(elsewhere / "r")


def test_the_locustfile_run_from_elsewhere_imports_the_installed_package(tmp_path):
    """``locust -f locustfiles/tts.py`` from another directory: what the run imports later (the
    web UI's live report imports the dashboard when first asked) comes from the installed
    package, this clone's in its editable install, once Locust has tidied its own entry off the
    path."""
    code = (
        "import sys; from locust.util.load_locustfile import load_locustfile; "
        f"load_locustfile({str(ROOT / 'locustfiles' / 'tts.py')!r}); "
        "import tts_knee.dashboard.serve; print(tts_knee.dashboard.serve.__file__)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(ROOT / "dashboard" / "serve.py")
