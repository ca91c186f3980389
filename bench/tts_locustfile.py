"""tts-knee's own locustfile with the CPU meter of bench/meter.py attached, for the benchmarks.

    BENCH_METER_OUT=/tmp/tts.json locust -f bench/tts_locustfile.py --headless \\
        -H http://127.0.0.1:8300 --steps 8 --step-time 8 --run-dir /tmp/run
"""

import meter  # noqa: F401  (attaches the CPU meter)
from tts_knee.locustfiles import node  # noqa: F401  (attaches tts-knee's listeners)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.user import TTSUser  # noqa: F401
