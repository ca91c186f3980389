"""tts-knee's locustfile: stepped concurrency against a TTS endpoint, every attempt recorded.

    locust -f locustfiles/tts.py --headless -H http://127.0.0.1:8300 \\
           --steps 1,2,4,8,16 --step-time 30 --run-dir runs/demo \\
           --collector http://127.0.0.1:9300

Open loop (offered requests per second instead of concurrency): ``--rates 1,2,4,8
--arrival poisson|constant --max-inflight N`` in place of ``--steps``.

``tts-knee run`` is this locustfile run by Locust; ``tts-knee run --help`` lists the tts-knee
options among Locust's own (``locust -f locustfiles/tts.py --help`` cannot: Locust prints its
help before it loads a locustfile).
"""
import sys
from pathlib import Path

# Locust puts this file's folder first on sys.path, not the project's, which the package needs;
# once this file is loaded Locust removes the first entry again, so the project goes second
# (at the front, it would be the one removed, and what is imported later would be missing).
ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)

from tts_knee.locustfiles import node  # noqa: E402,F401  (attaches the event listeners)
from tts_knee.locustfiles.openloop_user import OpenLoopUser  # noqa: E402,F401
from tts_knee.locustfiles.shape import StepShape  # noqa: E402,F401
from tts_knee.locustfiles.user import TTSUser  # noqa: E402,F401
