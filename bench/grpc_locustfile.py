"""tts-knee's user for bench/grpc_cost.py: the real TTSUser over --tts-protocol grpc, whose
records also carry the id each request sent the simulator (``sim_request_id``: Riva's
``RequestId``, which the simulator's ``--chunk-log`` writes), so the log can be joined to them.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/grpc_locustfile.py --headless -H grpc://127.0.0.1:50051 \\
        --tts-protocol grpc --tts-preset riva --tts-stream --steps 1 --step-time 8 --run-dir /tmp/run
"""

import kernel_lag  # noqa: F401  (with BENCH_KERNEL_LAG_OUT: each read's lag behind the kernel's stamp)
import meter  # noqa: F401  (attaches the CPU meter)
from named import named_user
from tts_knee.locustfiles import node  # noqa: F401  (attaches tts-knee's listeners)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401

NamedAttemptUser = named_user(lambda transport: transport.request_id)
