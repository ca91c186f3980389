"""A small streaming TTS server for the streaming tests: every POST gets ``--audio-ms`` of
PCM16 silence in ``--chunk-ms`` chunks, the first after ``--prefill-ms``, then one chunk per
``chunk-ms / --speed`` — as WAV with placeholder sizes (header with the first chunk, or alone
first with ``--header-alone``), raw PCM (``"response_format": "pcm"``) or OpenAI server-sent
events (``--sse`` or ``"stream_format": "sse"``). ``--fault`` breaks every Nth response.

    PYTHONPATH=tests python -m stream_server --port 0 --chunk-ms 100 --speed 4

prints ``listening on http://127.0.0.1:PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import socket
import struct

import gevent
from gevent.server import StreamServer

from tts_knee.audio.containers import wav_header

FAULTS = ("none", "reset", "error-event", "garbage-after", "short", "bad-base64")


def sse_event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Server:
    def __init__(self, args):
        self.args = args
        self.count = itertools.count(1)

    def handle(self, sock, _addr):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(buf) < length:
                    buf += sock.recv(65536)
                body, buf = buf[:length], buf[length:]
                if not self.respond(sock, json.loads(body or b"{}")):
                    return
        except OSError:
            return
        finally:
            sock.close()

    def respond(self, sock, req: dict) -> bool:
        a = self.args
        n = next(self.count)
        fault = a.fault if a.fault != "none" and n % a.fault_every == 0 else None
        sse = a.sse or req.get("stream_format") == "sse"
        pcm_fmt = req.get("response_format") == "pcm"
        ctype = "text/event-stream" if sse else "audio/pcm" if pcm_fmt else "audio/wav"
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % ctype.encode())

        def send(data: bytes) -> None:
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

        chunk_bytes = int(a.rate * a.chunk_ms / 1000) * 2
        chunks = max(1, round(a.audio_ms / a.chunk_ms))
        gevent.sleep(a.prefill_ms / 1000)
        if not sse and not pcm_fmt and a.header_alone:
            send(wav_header(0, a.rate, placeholder=True))
            gevent.sleep(a.chunk_ms / a.speed / 1000 / 2)
        for i in range(chunks):
            pcm = (
                bytes(chunk_bytes) if a.quiet else (b"\x00\x10\x00\xf0" * (chunk_bytes // 4 + 1))[:chunk_bytes]
            )  # a square wave at -18 dBFS: sound
            if sse:
                b64 = base64.b64encode(pcm).decode()
                data = sse_event(
                    {"type": "speech.audio.delta", "audio": b64[:-1] + "*" if fault == "bad-base64" and i == 1 else b64}
                )
            else:
                data = (
                    wav_header(0, a.rate, placeholder=True) if i == 0 and not pcm_fmt and not a.header_alone else b""
                ) + pcm
            send(data)
            if i == 1 and fault == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False
            if i == 1 and fault == "short":
                return False  # closes without the last chunk of the chunked encoding
            if i == 1 and fault == "error-event":
                send(sse_event({"type": "error", "error": {"message": "synthesis crashed"}}))
                break
            if i == 1 and fault == "garbage-after":
                send(b"<html>502 Bad Gateway</html>\n\n")
                break
            if i < chunks - 1:
                gevent.sleep(a.chunk_ms / a.speed / 1000)
        if sse and fault != "error-event":
            send(sse_event({"type": "speech.audio.done", "usage": {"input_tokens": 3, "output_tokens": 7}}))
        sock.sendall(b"0\r\n\r\n")
        return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--rate", type=int, default=24000)
    p.add_argument("--audio-ms", type=float, default=1000)
    p.add_argument("--chunk-ms", type=float, default=100)
    p.add_argument("--prefill-ms", type=float, default=50)
    p.add_argument("--speed", type=float, default=4.0, help="x real time")
    p.add_argument("--header-alone", action="store_true")
    p.add_argument("--quiet", action="store_true", help="digital silence instead of the square wave")
    p.add_argument("--sse", action="store_true")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-every", type=int, default=2)
    args = p.parse_args()
    server = StreamServer(("127.0.0.1", args.port), Server(args).handle)
    server.start()
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
