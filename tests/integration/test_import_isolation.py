"""The layers' imports.

One installed name: the parts are tts_knee's (``tts_knee.analysis`` is ``analysis/``), imported
by that name and no other. The dashboard, the analysis, the collector and the run-directory
format must not import locust or gevent: importing locust monkey-patches the whole process with
gevent, which would change how the collector samples and how the dashboard's threads behave. The
collector's client (``collectors.puller``) runs in the Locust master on gevent, and imports no
locust.
Over the static import graph of the whole project (imports inside functions included): no import
cycle, no module taking another's private (underscore) names, each layer importing only the
layers below it, and the analysis importing no presentation (dashboard, plotly) or
load-generator module."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from procs import ROOT

CODE = """
import importlib, json, pkgutil, sys
pkg = importlib.import_module(sys.argv[1])
names = [pkg.__name__] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
                          if m.name not in sys.argv[2:]]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted({"locust", "gevent"} & set(sys.modules))}))
"""


#: tts_knee's parts: each a folder at the top of the clone, as pyproject.toml's package-dir maps them.
PARTS = ("analysis", "audio", "collectors", "configs", "dashboard", "locustfiles", "runformat", "testbed")


def test_the_parts_are_imported_as_tts_knee_s_only(tmp_path):
    """From outside the clone each part is ``tts_knee.<part>``, from its folder here; the folder's
    own name is no package."""
    code = (
        "import importlib, importlib.util, json, sys; "
        "print(json.dumps({p: [list(importlib.import_module('tts_knee.' + p).__path__)[0], "
        "importlib.util.find_spec(p) is not None] for p in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *PARTS], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {p: [str(ROOT / p), False] for p in PARTS}


#: The collector's client runs in the Locust master, on gevent; the sidecar beside it imports neither.
COLLECTORS_CLIENT = "tts_knee.collectors.puller"


@pytest.mark.parametrize(
    "package",
    ["tts_knee.analysis", "tts_knee.audio", "tts_knee.dashboard", "tts_knee.collectors", "tts_knee.runformat"],
)
def test_package_imports_neither_locust_nor_gevent(package):
    out = subprocess.run(
        [sys.executable, "-c", CODE, package, COLLECTORS_CLIENT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["modules"]) > 1 and COLLECTORS_CLIENT not in result["modules"]
    assert result["loaded"] == [], f"importing {package} loaded {result['loaded']}"


def test_the_collectors_client_imports_gevent_but_not_locust():
    code = f"import sys, {COLLECTORS_CLIENT}; print(sorted({{'locust', 'gevent'}} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['gevent']"


def test_the_check_sees_an_import_of_gevent():
    out = subprocess.run(
        [sys.executable, "-c", CODE, "tts_knee.locustfiles"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "gevent" in out.stdout.strip().splitlines()[-1]


def test_the_step_shape_does_not_import_the_node():
    """The shape reaches the run through the node on the environment, not by importing node
    (which imports the shape): no import cycle."""
    code = (
        "import sys, tts_knee.locustfiles.shape, tts_knee.locustfiles.user; "
        "print('tts_knee.locustfiles.node' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert "node import" not in (ROOT / "locustfiles" / "shape.py").read_text()


# ---- the static import graph: every import statement of the project's code, those inside
# functions included (a cycle hidden behind a function-level import is still a cycle)

#: Each folder of the project's code and the name its modules are imported by.
FOLDERS = {"tts_knee": "tts_knee", **{p: f"tts_knee.{p}" for p in PARTS if p != "configs"}, "bench": "bench"}
#: What each layer may import of the project, besides itself: each only what lies below it.
LAYERS = {
    "runformat": set(),
    "audio": set(),
    "analysis": {"audio", "runformat"},
    "collectors": {"runformat"},
    "dashboard": {"analysis", "audio", "runformat"},
    "locustfiles": {"analysis", "audio", "collectors", "dashboard", "runformat"},
    "testbed": {"audio"},
    "tts_knee": {"collectors", "dashboard", "locustfiles", "testbed"},  # the command: on top of all
}
PRESENTATION_OR_LOAD = {"dashboard", "plotly", "locustfiles", "locust", "gevent", "geventhttpclient", "flask"}


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module in the project's folders and in tests/ (whose
    modules import each other as top-level names; tests/unit/'s as unit.NAME)."""
    out = {}
    places = [(ROOT / folder, name.split(".")) for folder, name in FOLDERS.items()] + [(ROOT / "tests", [])]
    for top, prefix in places:
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(top).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join([*prefix, *parts])] = path
    return out


def _layer(name: str) -> str | None:
    """The layer of the project a dotted name is in: a part, "tts_knee" (the command), "bench";
    None for what is not the project's (the standard library, Locust, tests/)."""
    head, _, rest = name.partition(".")
    if head == "tts_knee":
        part = rest.split(".")[0]
        return part if part in PARTS else "tts_knee"
    return "bench" if head == "bench" else None


def _imports(name: str, path: Path, modules) -> list[tuple[str, str, int]]:
    """(module imported, name taken from it or "", line) for each import in the file."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub, "", node.lineno) if sub in modules else (target, a.name, node.lineno))
    return out


@pytest.fixture(scope="module")
def graph():
    modules = _modules()
    return modules, {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle(graph):
    """No cycle among the imports, those a type checker alone reads (under ``if TYPE_CHECKING:``)
    and those inside functions included: a cycle hidden behind either is still a cycle."""
    modules, imports = graph
    edges = {m: {t for t, _, _ in imps if t in modules and t != m} for m, imps in imports.items()}
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_one_behind_a_function_level_import(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    edges = {m: {t for t, _, _ in _imports(m, p, modules) if t in modules} for m, p in modules.items()}
    assert _cycle(edges) in (["a", "b", "a"], ["b", "a", "b"])


def test_no_module_takes_another_modules_private_names(graph):
    modules, imports = graph
    taken = [
        f"{modules[m].relative_to(ROOT)}:{line}: from {t} import {n}"
        for m, imps in imports.items()
        for t, n, line in imps
        if n.startswith("_") and not n.startswith("__") and t != m
    ]
    assert not taken, "\n".join(taken)


def test_each_layer_imports_only_what_lies_below_it(graph):
    modules, imports = graph
    wrong = [
        f"{modules[m].relative_to(ROOT)}:{line}: {m} imports {t}"
        for m, imps in imports.items()
        if _layer(m) in LAYERS
        for t, _, line in imps
        if _layer(t) is not None and _layer(t) != _layer(m) and _layer(t) not in LAYERS[_layer(m)]
    ]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_a_part_by_its_folders_name(graph):
    """A module imported as ``analysis.steps`` (not ``tts_knee.analysis.steps``) would be found
    only from the clone's root, and then as a second copy of ``tts_knee.analysis.steps``."""
    modules, imports = graph
    wrong = [
        f"{modules[m].relative_to(ROOT)}:{line}: imports {t}"
        for m, imps in imports.items()
        for t, _, line in imps
        if t.split(".")[0] in PARTS
    ]
    assert not wrong, "\n".join(wrong)


def test_analysis_imports_no_presentation_or_load_generator_module(graph):
    modules, imports = graph
    wrong = [
        f"{modules[m].relative_to(ROOT)}:{line}: imports {t}"
        for m, imps in imports.items()
        if _layer(m) == "analysis"
        for t, _, line in imps
        if (_layer(t) or t.split(".")[0]) in PRESENTATION_OR_LOAD
    ]
    assert not wrong, "\n".join(wrong)
    names = sorted(f"tts_knee.{n}" if n in PARTS else n for n in PRESENTATION_OR_LOAD)
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tts_knee.analysis.summary, tts_knee.analysis.gate, "
            "tts_knee.analysis.regression; print(sorted(n for n in sys.argv[1:] "
            "if any(m == n or m.startswith(n + '.') for m in sys.modules)))",
            *names,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def test_the_cycle_check_sees_one_behind_an_import_only_a_type_checker_reads(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import x\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    edges = {m: {t for t, _, _ in _imports(m, p, modules) if t in modules} for m, p in modules.items()}
    assert _cycle(edges) in (["a", "b", "a"], ["b", "a", "b"])
