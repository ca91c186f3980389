"""deploy/kubernetes/ without a cluster: rendered by kustomize (the kubectl from the test extra),
checked against the Kubernetes schema strictly, and each tts-knee container's command line
taken as the kubelet would run it (``$(VAR)`` from its environment, ConfigMaps as files).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from procs import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
KUBECTL = Path(sys.executable).with_name("kubectl")
#: The oldest Kubernetes the manifests are written for; the schema check holds them to it.
KUBERNETES_VERSION = "1.30"
IMAGE = "tts-knee"
#: The image's tag everywhere (deploy/kubernetes/, docker-compose.yml): the project's version.
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
WORKDIR = "/app"  # the Dockerfile's WORKDIR: relative paths in commands start there
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class RenderError(Exception):
    """kustomize refused the kustomization; the message is its own."""


def render(directory: Path) -> list[dict]:
    """The documents ``kubectl kustomize directory`` prints."""
    proc = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def combine(where: Path, resources: list[Path], components: list[Path] = ()) -> Path:
    """A kustomization in ``where`` of these directories (kustomize takes relative paths only)."""
    where.mkdir(parents=True, exist_ok=True)
    rel = [os.path.relpath(p, where) for p in resources]
    comp = [os.path.relpath(p, where) for p in components]
    (where / "kustomization.yaml").write_text(yaml.safe_dump({"resources": rel, "components": comp}))
    return where


def schema_errors(docs: list[dict]) -> list[str]:
    """One line per document that the Kubernetes schema (strict: no unknown field) rejects."""
    import kubernetes_validate

    errors = []
    for d in docs:
        try:
            kubernetes_validate.validate(d, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            at = ".".join(str(p) for p in e.path)
            errors.append(f"{d.get('kind')}/{d.get('metadata', {}).get('name')}: {at}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(e.message)
    return errors


def find(docs: list[dict], kind: str, name: str) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def pod_spec(doc: dict) -> dict | None:
    return doc.get("spec", {}).get("template", {}).get("spec")


@dataclass
class Container:
    """One container of a rendered workload, as the kubelet would start it."""

    owner: str  # "Job/tts-knee-master"
    doc: dict
    spec: dict
    env: dict  # name -> value, from ConfigMaps and literals (Secrets as given)
    argv: list[str]  # command + args, $(VAR) expanded

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def pod(self) -> dict:
        return pod_spec(self.doc)


def containers(docs: list[dict], secrets: dict | None = None) -> list[Container]:
    """Every container running the tts-knee image; ``secrets`` {name: {key: value}} stands in
    for Secrets (absent ones leave their optional variables unset, as on a cluster)."""
    out = []
    for doc in docs:
        pod = pod_spec(doc)
        for spec in (pod or {}).get("containers", []):
            if spec["image"].rsplit("/", 1)[-1].split(":")[0] != IMAGE:
                continue
            env = environment(spec, docs, secrets or {})
            argv = [expand(a, env, spec["name"]) for a in spec.get("command", []) + spec.get("args", [])]
            out.append(Container(f"{doc['kind']}/{doc['metadata']['name']}", doc, spec, env, argv))
    return out


def environment(spec: dict, docs: list[dict], secrets: dict) -> dict:
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    env = {}
    for source in spec.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env, spec["name"])
            continue
        ref = var["valueFrom"]
        if "configMapKeyRef" in ref:
            env[var["name"]] = maps[ref["configMapKeyRef"]["name"]][ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            s = ref["secretKeyRef"]
            if s["key"] in secrets.get(s["name"], {}):
                env[var["name"]] = secrets[s["name"]][s["key"]]
    return env


def expand(value: str, env: dict, where: str) -> str:
    """Kubernetes' ``$(VAR)`` expansion; a reference to nothing would reach the program as
    text, so it is an error here."""

    def one(m):
        if m.group(0) == "$$":
            return "$"
        if m.group(1) not in env:
            raise ValueError(f"{where}: $({m.group(1)}) is not in the container's environment")
        return env[m.group(1)]

    return _REF.sub(one, value)


def image_contents() -> list[str]:
    """What the Dockerfile copies into WORKDIR (``COPY X X``; the package is built apart, in /src)."""
    return re.findall(r"^COPY (\S+) \1$", (ROOT / "Dockerfile").read_text(), re.M)


def lay_out(c: Container, docs: list[dict], where: Path, claims: dict | None = None) -> Path:
    """``where`` made to look like the container's WORKDIR: the image's files (linked from this
    checkout), each ConfigMap volume's files at its mount path, each claim named in ``claims``
    {claimName: directory} linked there (containers given the same directory share it), other
    volumes as empty directories. Returns the directory to run the container's command in."""
    where.mkdir(parents=True, exist_ok=True)
    for name in image_contents():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(ROOT / name, where / name)
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in c.pod.get("volumes", [])}
    for mount in c.spec.get("volumeMounts", []):
        rel = os.path.relpath(mount["mountPath"], WORKDIR)
        assert not rel.startswith(".."), f"{c.owner}: {mount['mountPath']} is outside {WORKDIR}"
        target, volume = where / rel, volumes[mount["name"]]
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim in (claims or {}):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(claims[claim], target)
            continue
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            for key, text in maps[volume["configMap"]["name"]].items():
                (target / key).write_text(text, encoding="utf-8")
    return where


def check_commands(commands: list[tuple[list[str], Path, dict]]) -> list[dict]:
    """Each (argv, cwd, env) parsed by tests/cmdline.py in one process of its own."""
    payload = [{"argv": argv, "cwd": str(cwd), "env": env} for argv, cwd, env in commands]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "cmdline.py")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
