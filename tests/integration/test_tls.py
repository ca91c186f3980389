"""Reaching a service over TLS with credentials: a CA and a server certificate made here (openssl),
the simulator serving HTTPS, WSS and gRPC over TLS and refusing a request without the credential.
Each protocol's sweep verifies the server against --tls-ca, sends the secret (the server checks it:
a request without it is answered 401 or UNAUTHENTICATED), and the secret is nowhere in the run
directory; without --tls-ca the run stops in one sentence before its first step."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from procs import locust, read_jsonl, spawn

pytest.importorskip("riva.client")
OPENSSL = shutil.which("openssl")
SECRET = "s3cret-7f1d9c"
ENV = {"TTS_TEST_KEY": SECRET}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, and a certificate for 127.0.0.1 it signed."""
    if not OPENSSL:
        pytest.skip("openssl is not installed: no certificates to serve TLS with")
    d = tmp_path_factory.mktemp("certs")

    def ssl(*args):
        subprocess.run([OPENSSL, *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=tts-knee test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    ssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return d


@pytest.fixture(scope="module")
def sim(certs):
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--grpc-port",
            "0",
            "--capacity",
            "1000",
            "--max-speed",
            "20",
            "--slots",
            "4",
            "--prefill-ms",
            "20",
            "--chunk-ms",
            "200",
            "--tls-cert",
            str(certs / "server.pem"),
            "--tls-key",
            str(certs / "server.key"),
            "--require-header",
            f"Authorization: Bearer {SECRET}",
        ]
    ) as p:
        yield p


def _secret_free(run_dir) -> None:
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f"the secret was written to {f}"


@pytest.mark.parametrize("protocol", ["https", "wss", "grpcs"])
def test_a_sweep_over_tls_verifies_the_server_and_sends_the_credential(tmp_path, sim, certs, protocol):
    host, shape = {
        "https": (sim.url, ["--header", "Authorization: Bearer ${TTS_TEST_KEY}"]),
        "wss": (
            sim.url,
            ["--tts-protocol", "ws", "--tts-preset", "vllm-omni", "--header", "Authorization: Bearer ${TTS_TEST_KEY}"],
        ),
        "grpcs": (
            sim.listening("grpcs"),
            [
                "--tts-protocol",
                "grpc",
                "--tts-preset",
                "riva",
                "--grpc-metadata",
                "authorization=Bearer ${TTS_TEST_KEY}",
            ],
        ),
    }[protocol]
    assert host.startswith("https://" if protocol != "grpcs" else "grpcs://")
    run_dir = tmp_path / "run"
    common = ["--headless", "-H", host, *shape, "--steps", "1,2", "--step-time", "2", "--settle-time", "0"]
    proc = locust([*common, "--tls-ca", str(certs / "ca.pem"), "--run-dir", str(run_dir)], env=ENV)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    records = read_jsonl(run_dir / "requests.jsonl")
    # the server answers 401 (UNAUTHENTICATED) to a request without the secret: every one was let in
    assert records and all(r["ok"] for r in records), {r["error"] for r in records}
    options = json.loads((run_dir / "run.json").read_text())["options"]
    names = options["grpc_metadata"] if protocol == "grpcs" else options["headers"]
    assert names == (["authorization"] if protocol == "grpcs" else ["Authorization"])
    assert options["tls_ca"] == str(certs / "ca.pem") and options["tls_insecure"] is False
    _secret_free(run_dir)
    assert SECRET not in proc.stdout
    # the same run without --tls-ca: the certificate does not verify against the system's CAs
    refused = locust([*common, "--run-dir", str(tmp_path / "unverified")], env=ENV)
    assert refused.returncode != 0 and "Traceback" not in refused.stdout, refused.stdout[-3000:]
    assert "does not verify" in refused.stdout and "--tls-ca" in refused.stdout, refused.stdout[-3000:]
    assert not json.loads((tmp_path / "unverified" / "run.json").read_text())["steps"]
    _secret_free(tmp_path / "unverified")


def test_without_the_credential_the_server_refuses_before_any_step(tmp_path, sim, certs):
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url,
            "--steps",
            "1",
            "--step-time",
            "2",
            "--tls-ca",
            str(certs / "ca.pem"),
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "refused the request with 401" in proc.stdout, proc.stdout[-3000:]


def test_plaintext_against_a_tls_server_says_so(tmp_path, sim):
    proc = locust(
        [
            "--headless",
            "-H",
            sim.url.replace("https://", "http://"),
            "--steps",
            "1",
            "--step-time",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "if it serves TLS, give -H https://" in proc.stdout, proc.stdout[-3000:]


def test_a_server_that_asks_for_a_client_certificate_gets_it_or_says_which_is_wrong(tmp_path, certs):
    """Mutual TLS: the simulator asks for a client certificate its CA signed (--tls-client-ca). One
    shown with --tls-client-cert is taken; none, an expired one or a key that is not the
    certificate's stop the run in one sentence naming the option, before any step."""

    def ssl(*args):
        subprocess.run([OPENSSL, *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "client.cnf").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
    )
    ssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=tts-knee test client",
    )
    for name, days in (("client.pem", "2"), ("expired.pem", "-1")):
        ssl(
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            str(certs / "ca.pem"),
            "-CAkey",
            str(certs / "ca.key"),
            "-CAcreateserial",
            "-out",
            name,
            "-days",
            days,
            "-extfile",
            "client.cnf",
        )
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "20",
            "--per-char-ms",
            "0",
            "--tls-cert",
            str(certs / "server.pem"),
            "--tls-key",
            str(certs / "server.key"),
            "--tls-client-ca",
            str(certs / "ca.pem"),
        ]
    ) as sim:

        def run(name, *extra):
            return locust(
                [
                    "--headless",
                    "-H",
                    sim.url,
                    "--steps",
                    "1",
                    "--step-time",
                    "1",
                    "--settle-time",
                    "0",
                    "--tls-ca",
                    str(certs / "ca.pem"),
                    "--run-dir",
                    str(tmp_path / name),
                    *extra,
                ]
            )

        ok = run(
            "ok", "--tls-client-cert", str(tmp_path / "client.pem"), "--tls-client-key", str(tmp_path / "client.key")
        )
        assert ok.returncode == 0 and "Traceback" not in ok.stdout, ok.stdout[-3000:]
        records = read_jsonl(tmp_path / "ok" / "requests.jsonl")
        assert records and all(r["ok"] for r in records), {r["error"] for r in records}
        options = json.loads((tmp_path / "ok" / "run.json").read_text())["options"]
        assert options["tls_client_cert"] == str(tmp_path / "client.pem")
        for name, extra, says in (
            # the server's alert (certificate required), or its hang-up where the alert is lost: both say it
            ("none", (), "client certificate"),
            (
                "expired",
                ("--tls-client-cert", str(tmp_path / "expired.pem"), "--tls-client-key", str(tmp_path / "client.key")),
                "expired on",
            ),
            (
                "mismatch",
                ("--tls-client-cert", str(tmp_path / "client.pem"), "--tls-client-key", str(certs / "server.key")),
                "the key does not belong to the certificate",
            ),
            ("keyless", ("--tls-client-cert", str(tmp_path / "client.pem")), "give --tls-client-key"),
        ):
            proc = run(name, *extra)
            assert proc.returncode != 0 and "Traceback" not in proc.stdout, (name, proc.stdout[-3000:])
            assert says in proc.stdout and "--tls-client-" in proc.stdout, (name, proc.stdout[-3000:])
