"""--header, --grpc-metadata and --tls-*: each mistake is one sentence naming the option (never the
secret), a credential's ${VAR} is read from the environment, and run.json records names only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.locustfiles import settings as settings_mod

SECRET = "s3cret-aa11"


def _settings(host="http://127.0.0.1:8300", **changes):
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), host)


def test_a_credential_reads_the_environment_and_run_json_keeps_only_its_name(monkeypatch):
    monkeypatch.setenv("TTS_KEY", SECRET)
    s = _settings("https://tts.example", header=["Authorization: Bearer ${TTS_KEY}", "X-Org: acme"])
    assert s.headers == (("Authorization", f"Bearer {SECRET}"), ("X-Org", "acme"))
    assert s.tls is not None and s.tls.check_hostname  # https: verified, against the system's CAs
    public = s.public()
    assert public["headers"] == ["Authorization", "X-Org"] and SECRET not in repr(public)
    g = _settings(
        "grpcs://riva.example:443",
        tts_protocol="grpc",
        tts_preset="riva",
        grpc_metadata=["Authorization=Bearer ${TTS_KEY}"],
    )
    assert g.grpc_metadata == (("authorization", f"Bearer {SECRET}"),) and g.public()["grpc_metadata"] == [
        "authorization"
    ]
    assert g.tls is not None and g.tls.check_hostname
    assert _settings().tls is None  # a plaintext target needs no context


@pytest.mark.parametrize(
    "changes, host, says",
    [
        (
            {"header": ["Authorization: Bearer ${TTS_UNSET_VAR}"]},
            "http://h:1",
            "--header Authorization reads ${TTS_UNSET_VAR}, which is not set in the environment",
        ),
        ({"header": ["no colon here"]}, "http://h:1", "--header takes 'NAME: VALUE'"),
        ({"header": [": value"]}, "http://h:1", "--header takes 'NAME: VALUE'"),
        ({"grpc_metadata": ["k=v"]}, "http://h:1", "--grpc-metadata is for --tts-protocol grpc"),
        ({"tls_ca": "/nonexistent/ca.pem"}, "https://h:1", "--tls-ca /nonexistent/ca.pem: no such file"),
        ({"tls_ca": __file__}, "https://h:1", "not a PEM file of CA certificates"),
        ({"tts_protocol": "grpc", "tts_preset": "riva", "header": ["a: b"]}, "grpc://h:1", "takes --grpc-metadata"),
        ({"tts_protocol": "grpc", "tts_preset": "riva"}, "grpcs://h", "grpc://HOST:PORT (grpcs:// for TLS)"),
    ],
)
def test_each_mistake_is_one_sentence_naming_the_option(monkeypatch, changes, host, says):
    monkeypatch.delenv("TTS_UNSET_VAR", raising=False)
    with pytest.raises(settings_mod.SettingsError) as e:
        _settings(host, **changes)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_insecure_turns_verification_off_and_is_recorded():
    s = _settings("https://tts.example", tls_insecure=True)
    assert s.tls is not None and not s.tls.check_hostname and s.public()["tls_insecure"] is True
