"""tts-knee's user for bench/grpc_cost.py: the real TTSUser over --tts-protocol grpc, whose
records also carry the id each request sent the simulator (``sim_request_id``: Riva's
``RequestId``, which the simulator's ``--chunk-log`` writes), so the log can be joined to them.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/grpc_locustfile.py --headless -H grpc://127.0.0.1:50051 \\
        --tts-protocol grpc --tts-preset riva --tts-stream --steps 1 --step-time 8 --run-dir /tmp/run
"""
import meter  # noqa: F401  (attaches the CPU meter)
from tts_knee.locustfiles import (  # noqa: F401  (node attaches tts-knee's listeners)
    attempt,
    node,
    user as user_mod,  # the module: Locust runs every User class it sees
)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401


class NamedCaller(attempt.Caller):
    def _attempt(self, words: str, sent: dict | None):
        out = super()._attempt(words, sent)
        out[0]["sim_request_id"] = self.transport.request_id
        return out


class NamedAttemptUser(user_mod.TTSUser):
    def on_start(self) -> None:
        super().on_start()
        self.caller.close()
        self.caller = NamedCaller(self, self.no)
