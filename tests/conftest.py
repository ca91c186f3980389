import os
import socket
from collections.abc import Iterator

import pytest

# The tests import their helpers as top-level modules (from procs import spawn): pytest's
# default import mode (prepend) puts tests/, a folder without __init__.py, first on the import
# path for them.

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A pytest-xdist worker waits for its next test on a thread of its own; once a test imports
    # Locust, whose import monkey-patches threading for gevent, that wait ends in gevent's
    # LoopExit and the worker dies. In a worker the patch is left out: what a test runs in this
    # process speaks gevent's own sockets (geventhttpclient, gevent.socket) and needs none, and
    # every Locust run is a process of its own, patched as usual.
    from gevent import monkey

    monkey.patch_all = lambda *args, **kwargs: None

#: In CI (CI=true, as .ci/run is run) every test must run: .ci/run installs what the browser,
#: compose, netns and tmpfs tests need, so a skip there means a check silently did not happen.
NO_SKIPS = os.environ.get("CI", "").lower() == "true" or os.environ.get("TTS_KNEE_NO_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses every connection for the test's length: bound, never
    listening, so no other test's server can take it (a port merely freed for a test's "down"
    endpoint was taken by a parallel test's server, which answered)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
