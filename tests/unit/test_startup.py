"""Where the web UI listens: loopback unless --web-host says otherwise, and one warning line for
an address beyond loopback without --web-login (locustfiles/startup.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tts_knee.locustfiles import startup


def _options(**given) -> SimpleNamespace:
    return SimpleNamespace(
        **{"headless": False, "worker": False, "web_login": False, "web_host": "127.0.0.1", "web_port": 8089, **given}
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_needs_no_warning(host):
    assert startup.is_loopback(host)
    assert startup.web_ui_warning(_options(web_host=host)) is None


@pytest.mark.parametrize("host,where", [("", "every interface"), ("*", "every interface"), ("0.0.0.0", "0.0.0.0")])
def test_beyond_loopback_without_a_login_is_one_warning_line(host, where):
    warning = startup.web_ui_warning(_options(web_host=host))
    assert warning is not None and "\n" not in warning
    assert warning.startswith(f"the web UI listens on {where} (port 8089) without --web-login")
    # asked for with a login page, or no web UI at all: nothing to warn of
    assert startup.web_ui_warning(_options(web_host=host, web_login=True)) is None
    assert startup.web_ui_warning(_options(web_host=host, headless=True)) is None
    assert startup.web_ui_warning(_options(web_host=host, worker=True)) is None
