"""tts-knee's user for bench/session_cost.py over WebSocket: the real TTSUser, whose sessions
also name themselves to the simulator with an ``X-Request-Id`` header on the upgrade, and
whose attempts write that id and their utterance's number on the connection into the record
(``sim_request_id``: "ID/N"), so the simulator's ``--chunk-log`` can be joined to the records.

    BENCH_METER_OUT=/tmp/m.json locust -f bench/session_locustfile.py --headless \\
        -H http://127.0.0.1:8300 --tts-protocol ws --tts-preset vllm-omni --steps 1 --step-time 8 --run-dir /tmp/run
"""

import uuid

import meter  # noqa: F401  (attaches the CPU meter)
from named import named_user
from tts_knee.locustfiles import node  # noqa: F401  (attaches tts-knee's listeners)
from tts_knee.locustfiles.shape import StepShape  # noqa: F401
from tts_knee.locustfiles.transports.ws import WsTransport


class NamedTransport(WsTransport):
    rid = None

    def handshake_headers(self) -> list[str]:
        self.connection_id = uuid.uuid4().hex
        return [*super().handshake_headers(), f"X-Request-Id: {self.connection_id}"]

    def begin(self, conn, key, text) -> None:
        self.rid = f"{self.connection_id}/{conn.utterances - 1}"  # the simulator counts from 0
        super().begin(conn, key, text)


NamedAttemptUser = named_user(lambda transport: transport.rid, lambda caller: NamedTransport(caller.s))
