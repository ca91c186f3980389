"""tts-knee's locustfile: stepped concurrency against a TTS endpoint, every attempt recorded.

    locust -f locustfiles/tts.py --headless -H http://127.0.0.1:8300 \\
           --steps 1,2,4,8,16 --step-time 30 --run-dir runs/demo \\
           --collector http://127.0.0.1:9300

Open loop (offered requests per second instead of concurrency): ``--rates 1,2,4,8
--arrival poisson|constant --max-inflight N`` in place of ``--steps``.

``tts-knee run`` is this locustfile run by Locust; ``tts-knee run --help`` lists the tts-knee
options among Locust's own (``locust -f locustfiles/tts.py --help`` cannot: Locust prints its
help before it loads a locustfile).

It imports the installed package, ``tts_knee`` (a clone's ``make install`` installs it
editable), wherever it is run from.
"""

from locust import events

from tts_knee.locustfiles import node, webui  # noqa: F401  (node attaches the event listeners)
from tts_knee.locustfiles.openloop_user import OpenLoopUser  # noqa: F401
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.user import TTSUser  # noqa: F401


@events.init.add_listener
def _web_ui(environment, **_kw) -> None:
    """The composition root: Locust's web UI gets tts-knee's tab and the dashboard's live view
    (after node's own init listener has made this node's tts-knee state)."""
    if environment.web_ui is not None:
        from tts_knee.dashboard.table import TAB_COLUMNS

        webui.mount(environment, environment.tts_knee, _live_view, TAB_COLUMNS)


def _live_view(run_dirs):
    """The dashboard's live view in a process of its own (its CPU is not the load generator's)."""
    from tts_knee.collectors import puller
    from tts_knee.dashboard.serve import LiveProcess

    view = LiveProcess(run_dirs)
    puller.SIDECARS.add(view.pid)
    return view
