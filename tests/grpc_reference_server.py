"""A Riva-protocol server on grpcio (gRPC's own C-core), the reference the h2 client and the
simulator are checked against: a script, run as its own process.

    python tests/grpc_reference_server.py        # prints: listening on grpc://127.0.0.1:PORT

``SynthesizeOnline`` answers ``CHUNKS_BY_VOICE`` messages of ``CHUNK_BYTES`` of PCM (10 ms
apart), ``Synthesize`` one message of ``len(text) * 2000`` bytes. The voice name picks a drill:
``exhausted`` (RESOURCE_EXHAUSTED "busy ü 100%" with ``grpc-retry-pushback-ms: 1000``),
``crash`` (three messages, then INTERNAL), ``empty`` (OK, no message), ``many`` (450 messages:
4 MB, past every default flow-control window), ``slow`` (a message every 0.5 s).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent import futures

import grpc
from riva.client.proto import riva_tts_pb2, riva_tts_pb2_grpc

CHUNK_BYTES = 9600  # 200 ms at 24 kHz
CHUNKS_BY_VOICE = {"": 5, "many": 450, "crash": 3, "slow": 20}


class Synthesis(riva_tts_pb2_grpc.RivaSpeechSynthesisServicer):
    def Synthesize(self, request, context):
        return riva_tts_pb2.SynthesizeSpeechResponse(audio=bytes(len(request.text) * 2000), id=request.id)

    def SynthesizeOnline(self, request_iterator, context):
        requests = list(request_iterator)
        voice = requests[0].voice_name
        if voice == "exhausted":
            context.set_trailing_metadata((("grpc-retry-pushback-ms", "1000"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy ü 100%")
        for _k in range(CHUNKS_BY_VOICE.get(voice, 0)):
            time.sleep(0.5 if voice == "slow" else 0.01 if voice != "many" else 0)
            yield riva_tts_pb2.SynthesizeSpeechResponse(audio=bytes(CHUNK_BYTES), id=requests[0].id)
        if voice == "crash":
            context.abort(grpc.StatusCode.INTERNAL, "model crashed")


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    riva_tts_pb2_grpc.add_RivaSpeechSynthesisServicer_to_server(Synthesis(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on grpc://127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
