"""The dashboard, the collectors and the run-directory format must not import locust or gevent:
importing locust monkey-patches the whole process with gevent, which would change how the
collector samples and how the dashboard's threads behave."""
import json
import subprocess
import sys

import pytest

from procs import ROOT

CODE = """
import importlib, json, pkgutil, sys
pkg = importlib.import_module(sys.argv[1])
names = [pkg.__name__] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted({"locust", "gevent"} & set(sys.modules))}))
"""


@pytest.mark.parametrize("package", ["analysis", "dashboard", "collectors", "runformat"])
def test_package_imports_neither_locust_nor_gevent(package):
    out = subprocess.run([sys.executable, "-c", CODE, package], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["modules"]) > 1
    assert result["loaded"] == [], f"importing {package} loaded {result['loaded']}"


def test_the_check_sees_an_import_of_gevent():
    out = subprocess.run([sys.executable, "-c", CODE, "locustfiles"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "gevent" in out.stdout.strip().splitlines()[-1]


def test_the_step_shape_does_not_import_the_node():
    """The shape reaches the run through the node on the environment, not by importing node
    (which imports the shape): no import cycle."""
    code = "import sys, locustfiles.shape, locustfiles.user; print('locustfiles.node' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert "node import" not in (ROOT / "locustfiles" / "shape.py").read_text()
