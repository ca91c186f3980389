"""tts-knee's user for bench/stream_cost.py: the real TTSUser, whose attempts (its Caller's) also name themselves
to the simulator with an ``X-Request-Id`` header and writes that id into the attempt's
record (``sim_request_id``), so the simulator's ``--chunk-log`` can be joined to the records.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/stream_locustfile.py --headless \\
        -H http://127.0.0.1:8300 --tts-stream --steps 1 --step-time 8 --run-dir /tmp/run
"""
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import meter  # noqa: E402,F401  (attaches the CPU meter)
from locustfiles import node  # noqa: E402,F401  (attaches tts-knee's listeners)
from locustfiles import user as user_mod  # noqa: E402  (the module: Locust runs every User class it sees)
from locustfiles.shape import StepShape  # noqa: E402,F401


class NamedCaller(user_mod.Caller):
    def _attempt(self, payload: bytes, attempt: int, sent: dict | None = None):
        rid = uuid.uuid4().hex
        http = self.http
        send = http.request
        http.request = lambda method, path, body=b"": send(method, path, body=body, headers={"X-Request-Id": rid})
        try:
            out = super()._attempt(payload, attempt, sent)
        finally:
            del http.request   # the class's method again
        out[0]["sim_request_id"] = rid
        return out


class NamedAttemptUser(user_mod.TTSUser):
    def on_start(self) -> None:
        super().on_start()
        self.caller.close()
        self.caller = NamedCaller(self, self.no)
