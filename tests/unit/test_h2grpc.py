"""The gRPC client's reader (locustfiles/transports/h2grpc.py) against a real HTTP/2 server: h2's
server side on a loopback socket, in-process. The DATA frames of the open call are read past h2;
what the call gets must be what the server sent, however the bytes are cut into reads, and the
windows must open again, or the server could not send more than a window's worth."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator

import h2.config
import h2.connection
import pytest

from tts_knee.locustfiles.transports import h2grpc

#: DATA payload per frame: the most a frame carries, less room for padding.
FRAME = 16_384 - 8
PATH = "/nvidia.riva.tts.RivaSpeechSynthesis/SynthesizeOnline"


class Server:
    """h2's server side of one connection, its bytes sent to the client in pieces of random size."""

    def __init__(self, sock: socket.socket, rng: random.Random):
        self.sock, self.rng = sock, rng
        self.sock.setblocking(False)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.h2.initiate_connection()
        self.pending = bytearray()

    def hear(self) -> None:
        """Take what the client sent (its preface, requests, WINDOW_UPDATEs)."""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                return
            if not data:
                return
            self.h2.receive_data(data)

    def queue(self) -> None:
        self.pending += self.h2.data_to_send()

    def pieces(self) -> Iterator[None]:
        """Send what is queued a random piece at a time, yielding after each."""
        while self.pending:
            n = self.rng.choice([1, 5, 9, 10, 700, 16_393, 40_000])
            self.sock.sendall(self.pending[:n])
            del self.pending[:n]
            yield


def _message(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


@pytest.fixture
def pair(monkeypatch):
    monkeypatch.setattr(h2grpc, "WINDOW_BYTES", 256 << 10)  # windows of 256 KiB, opened again each 64 KiB
    monkeypatch.setattr(h2grpc, "WINDOW_BATCH", 64 << 10)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    conn = h2grpc.Connection("127.0.0.1", listener.getsockname()[1], 5.0)
    server_sock, _ = listener.accept()
    yield conn, server_sock
    conn.close()
    server_sock.close()
    listener.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_message_arrives_whole_and_in_order_past_more_than_a_window(pair, seed: int) -> None:
    conn, server_sock = pair
    rng = random.Random(seed)
    server = Server(server_sock, rng)
    server.queue()
    for _ in range(2):  # two calls on the connection, each more than a stream's window
        call = conn.start(PATH)
        assert call.send(b"text", end=True)
        server.hear()
        server.h2.send_headers(call.sid, [(":status", "200"), ("content-type", "application/grpc")])
        server.queue()
        want, got = [], []
        call_bytes = 0
        while call_bytes < h2grpc.WINDOW_BYTES + h2grpc.WINDOW_BATCH:
            payload = rng.randbytes(rng.choice([0, 3, 8_000, 16_000, 40_000]))
            want.append(payload)
            data = _message(payload)
            for i in range(0, len(data), FRAME):  # a message across frames, some padded (those go to h2)
                server.h2.send_data(call.sid, data[i : i + FRAME], pad_length=rng.choice([None, None, None, 7]))
                server.queue()
                for _ in server.pieces():
                    conn.read()
                    got += [msg for _, msg in _drain(call)]
                server.hear()  # the client's WINDOW_UPDATEs: without them send_data runs out of window
            call_bytes += len(data)
        server.h2.send_headers(call.sid, [("grpc-status", "0")], end_stream=True)
        server.queue()
        for _ in server.pieces():
            conn.read()
            got += [msg for _, msg in _drain(call)]
        assert got == want
        assert call.status is not None and call.status.code == "OK"


def test_a_message_cut_off_by_the_trailers_fails_the_call(pair) -> None:
    conn, server_sock = pair
    server = Server(server_sock, random.Random(0))
    server.queue()
    call = conn.start(PATH)
    call.send(b"text", end=True)
    server.hear()
    server.h2.send_headers(call.sid, [(":status", "200"), ("content-type", "application/grpc")])
    server.h2.send_data(call.sid, _message(b"x" * 100)[:50])
    server.h2.send_headers(call.sid, [("grpc-status", "0")], end_stream=True)
    server.queue()
    for _ in server.pieces():
        conn.read()
    assert call.status is not None and call.status.code == "INTERNAL"
    assert "ended inside a message" in call.status.details


def _drain(call: h2grpc.Call) -> list:
    out = list(call._messages)
    call._messages.clear()
    return out
