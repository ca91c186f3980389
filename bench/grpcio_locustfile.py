"""The gRPC client tts-knee does not use, for bench/grpc_cost.py to measure beside its own:
grpcio under gevent as the gRPC project supports it (``grpc.experimental.gevent.init_gevent()``
before any gRPC object), one channel shared by every user as Riva's perf client shares one, each
user streaming ``SynthesizeOnline`` back to back. Each answer's arrival times go, one JSON line
per stream, to the file named by ``BENCH_GRPCIO_OUT``: ``{"id", "t0", "at": [unix s], "audio_ms"}``.

    BENCH_GRPCIO_OUT=/tmp/a.jsonl locust -f bench/grpcio_locustfile.py --headless -H grpc://127.0.0.1:50051 -u 8
"""

import json
import os
import time
import uuid
from typing import Any, TextIO

import grpc
from grpc.experimental import gevent as grpc_gevent

grpc_gevent.init_gevent()  # after Locust's monkey-patching, before any gRPC object

from locust import User, constant, events, task  # noqa: E402
from riva.client.proto import riva_audio_pb2, riva_tts_pb2, riva_tts_pb2_grpc  # noqa: E402

import meter  # noqa: E402,F401  (attaches the CPU meter)

TEXTS = [
    "The quick brown fox jumps over it.",
    "Streaming speech starts at once here.",
    "Please hold, your call matters to us.",
    "Turn left after the second light.",
]
RATE = 24000
#: The stub every user shares (a riva_tts_pb2_grpc.RivaSpeechSynthesisStub: riva ships no types) and
#: the log each stream's line goes to, both made by the first user to start.
_stub: Any = None
_out: TextIO | None = None


class GrpcioUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        global _stub, _out
        if _stub is None:
            if not self.host:
                raise ValueError("no server to stream from: give -H grpc://HOST:PORT")
            channel = grpc.insecure_channel(self.host.removeprefix("grpc://"))
            grpc.channel_ready_future(channel).result(timeout=10)  # grpcio connects lazily
            _stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel)
            _out = open(os.environ["BENCH_GRPCIO_OUT"], "a", buffering=1)  # noqa: SIM115 - the run's log
        self.n = 0

    @task
    def speak(self) -> None:
        self.n += 1
        req = riva_tts_pb2.SynthesizeSpeechRequest(
            text=TEXTS[self.n % len(TEXTS)],
            language_code="en-US",
            encoding=riva_audio_pb2.AudioEncoding.LINEAR_PCM,
            sample_rate_hz=RATE,
        )
        req.id.value = uuid.uuid4().hex
        t0, at, audio_ms, error = time.time(), [], [], None
        call = _stub.SynthesizeOnline(iter([req]), timeout=30)
        try:
            for msg in call:
                at.append(time.time())
                audio_ms.append(len(msg.audio) / 2 / RATE * 1000)
        except grpc.RpcError as e:
            error = e
        finally:
            call.cancel()  # a user stopped mid-stream would leave the call running to its deadline
        events.request.fire(
            request_type="gRPC",
            name="SynthesizeOnline",
            response_time=(time.time() - t0) * 1000,
            response_length=0,
            response=None,
            context={},
            exception=error,
        )
        assert _out is not None  # opened with the stub
        _out.write(json.dumps({"id": req.id.value, "t0": t0, "at": at, "audio_ms": audio_ms}) + "\n")
