"""tts-knee's user for bench/stream_cost.py: the real TTSUser, whose attempts also name
themselves to the simulator with an ``X-Request-Id`` header and write that id into the
attempt's record (``sim_request_id``), so the simulator's ``--chunk-log`` can be joined to the
records.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/stream_locustfile.py --headless \\
        -H http://127.0.0.1:8300 --tts-stream --steps 1 --step-time 8 --run-dir /tmp/run
"""
import uuid

import meter  # noqa: F401  (attaches the CPU meter)
from tts_knee.locustfiles import (  # noqa: F401  (node attaches tts-knee's listeners)
    attempt,
    node,
    user as user_mod,  # the module: Locust runs every User class it sees
)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.transports.http import HttpTransport


class NamedTransport(HttpTransport):
    rid = None

    def request(self, text: str):
        self.rid = uuid.uuid4().hex
        return self.http.request("POST", self.s.path, body=self.payload(text), headers={"X-Request-Id": self.rid})


class NamedCaller(attempt.Caller):
    def __init__(self, user, no: int):
        super().__init__(user, no)
        self.transport.close()
        self.transport = NamedTransport(self.s, self.run.payload)

    def _attempt(self, words: str, sent: dict | None):
        out = super()._attempt(words, sent)
        out[0]["sim_request_id"] = self.transport.rid
        return out


class NamedAttemptUser(user_mod.TTSUser):
    def on_start(self) -> None:
        super().on_start()
        self.caller.close()
        self.caller = NamedCaller(self, self.no)
