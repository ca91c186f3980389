import os

import pytest

# The tests import their helpers as top-level modules (from procs import spawn): pytest's
# default import mode (prepend) puts tests/, a folder without __init__.py, first on the import
# path for them.

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
