"""gRPC's own client (grpcio's C-core) against a Riva-protocol server: a script, run as its own
process, because grpcio's threads hang in a test process that Locust's import has patched for
gevent. It prints one JSON object of what it got.

    python tests/grpc_reference_client.py 127.0.0.1:PORT calls      # the calls the simulator serves
    python tests/grpc_reference_client.py 127.0.0.1:PORT refused    # one call a drill refuses
"""

from __future__ import annotations

import json
import sys

import grpc
from riva.client.proto import riva_audio_pb2, riva_tts_pb2, riva_tts_pb2_grpc


def _request(text: str, **kw):
    kw = {"language_code": "en-US", "sample_rate_hz": 24000, "encoding": riva_audio_pb2.AudioEncoding.LINEAR_PCM, **kw}
    return riva_tts_pb2.SynthesizeSpeechRequest(text=text, **kw)


def _error(call) -> dict:
    try:
        call()
    except grpc.RpcError as e:
        return {
            "code": e.code().name,
            "details": e.details(),
            "trailers": [list(t) for t in e.trailing_metadata() or ()],
        }
    return {"code": "OK"}


def calls(stub, channel) -> dict:
    req = _request("Hello there, how are you today?")  # 31 characters: 1.86 s of audio
    req.id.value = "ref-1"
    chunks = list(stub.SynthesizeOnline(iter([req]), timeout=10))
    whole = stub.Synthesize(_request("Hello there."), timeout=10)
    nope = channel.unary_unary("/nvidia.riva.tts.RivaSpeechSynthesis/Nope")
    return {
        "chunks": [len(c.audio) for c in chunks],
        "id": chunks[0].id.value if chunks else None,
        "whole": len(whole.audio),
        "wrong_rate": _error(lambda: stub.Synthesize(_request("Hello.", sample_rate_hz=16000), timeout=10)),
        "unknown_method": _error(lambda: nope(b"", timeout=10)),
    }


def refused(stub, channel) -> dict:
    return _error(lambda: list(stub.SynthesizeOnline(iter([_request("Hello.")]), timeout=10)))


def main() -> None:
    address, what = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(address) as channel:
        stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel)
        print(json.dumps({"calls": calls, "refused": refused}[what](stub, channel)))


if __name__ == "__main__":
    main()
