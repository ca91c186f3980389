"""tts-knee's user for bench/stream_cost.py: the real TTSUser, whose attempts also name
themselves to the simulator with an ``X-Request-Id`` header and write that id into the
attempt's record (``sim_request_id``), so the simulator's ``--chunk-log`` can be joined to the
records.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/stream_locustfile.py --headless \\
        -H http://127.0.0.1:8300 --tts-stream --steps 1 --step-time 8 --run-dir /tmp/run
"""

import uuid

import meter  # noqa: F401  (attaches the CPU meter)
from named import named_user
from tts_knee.locustfiles import node  # noqa: F401  (attaches tts-knee's listeners)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.transports import NO_ASK, Ask
from tts_knee.locustfiles.transports.http import HttpTransport


class NamedTransport(HttpTransport):
    rid = None

    def request(self, text: str, ask: Ask = NO_ASK):
        self.rid = uuid.uuid4().hex
        body, content_type = self.payload(text, ask)
        return self.http.request(
            "POST", self.s.tts_path, body=body, headers={"Content-Type": content_type, "X-Request-Id": self.rid}
        )


NamedAttemptUser = named_user(
    lambda transport: transport.rid, lambda caller: NamedTransport(caller.s, caller.run.payload)
)
