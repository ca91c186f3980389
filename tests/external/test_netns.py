"""A distributed run across separate network hosts: the simulator and a collector on one,
the master on another, two workers on two more, joined by a bridge. Each host is a network
namespace with its own address (198.18.0.0/24, the range set aside for network tests), so
the parts must talk over real addresses: nothing is reachable on a shared loopback."""

import json
import os
import shutil
import subprocess
import uuid

import pytest

from procs import locust_count, read_jsonl, spawn, start_locust
from rundirs import assert_declared

HOSTS = {"tts": "198.18.0.1", "master": "198.18.0.2", "w1": "198.18.0.3", "w2": "198.18.0.4"}


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@pytest.fixture
def hosts():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2 (`ip`); run as root to test separate hosts")
    tag = uuid.uuid4().hex[:5]
    names = {h: f"tk{tag}-{h}" for h in HOSTS}
    switch = f"tk{tag}-sw"
    try:
        sh("ip", "netns", "add", switch)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot create network namespaces here: {e.stderr.strip()}")
    try:
        sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", switch, "link", "set", "br0", "up")
        for i, (h, addr) in enumerate(HOSTS.items()):
            ns = names[h]
            sh("ip", "netns", "add", ns)
            sh(
                "ip",
                "link",
                "add",
                f"tk{tag}{i}a",
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                f"tk{tag}{i}b",
                "netns",
                switch,
            )
            sh("ip", "-n", ns, "link", "set", f"tk{tag}{i}a", "name", "eth0")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", switch, "link", "set", f"tk{tag}{i}b", "master", "br0")
            sh("ip", "-n", switch, "link", "set", f"tk{tag}{i}b", "up")
        yield names
    finally:
        for ns in [*names.values(), switch]:
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def netns(ns):
    return ("ip", "netns", "exec", ns)


def test_master_workers_sim_and_collector_on_separate_hosts(tmp_path, hosts):
    tts = HOSTS["tts"]
    with (
        spawn(
            [
                "tts_knee.testbed.sim",
                "--host",
                tts,
                "--port",
                "8300",
                "--slots",
                "2",
                "--base-ms",
                "40",
                "--per-char-ms",
                "0",
            ],
            prefix=netns(hosts["tts"]),
        ) as sim,
        spawn(
            ["tts_knee.collectors", "--host", tts, "--port", "9300", "--token", "drill"], prefix=netns(hosts["tts"])
        ) as collector,
    ):
        assert sim.url == f"http://{tts}:8300" and collector.url == f"http://{tts}:9300"

        def locust(ns, args, log):
            return start_locust(args, tmp_path / log, prefix=netns(ns))

        master = locust(
            hosts["master"],
            [
                "--master",
                "--master-bind-host",
                HOSTS["master"],
                "--expect-workers",
                "2",
                "--headless",
                "-H",
                sim.url,
                "--collector",
                collector.url,
                "--collector-token",
                "drill",
                "--steps",
                "1,2,4",
                "--step-time",
                "3",
                "--run-dir",
                str(tmp_path / "run"),
                "--json-file",
                str(tmp_path / "locust"),
            ],
            "master.log",
        )
        workers = [locust(hosts[w], ["--worker", "--master-host", HOSTS["master"]], f"{w}.log") for w in ("w1", "w2")]
        try:
            for p in (master, *workers):
                p.wait(90)
        finally:
            for p in (master, *workers):
                p.kill()
    log = (tmp_path / "master.log").read_text()
    assert master.returncode == 0, log
    assert_declared(tmp_path / "run")
    records = read_jsonl(tmp_path / "run" / "requests.jsonl")
    assert len(records) == locust_count(tmp_path / "locust") > 30
    assert len({r["worker"] for r in records}) == 2 and all(r["ok"] for r in records)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert all(w["final"] for w in info["workers"])
    assert info["collectors"][0]["url"] == collector.url and info["collectors"][0]["reachable"]
    server = [s for s in read_jsonl(tmp_path / "run" / "resources.jsonl") if s["role"] == "server"]
    assert server and all(s["collector"] == collector.url for s in server)
