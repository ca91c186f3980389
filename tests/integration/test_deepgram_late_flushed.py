"""Deepgram's dialect names no utterance in its Flushed: a server that answers a Clear with
Cleared and then, late, still sends the Flushed of the flush it dropped must not end the next
utterance on the same socket (it would end with no audio). A small server speaking /v1/speak on
loopback: each Flush is answered by three 200 ms PCM frames 60 ms apart, then Flushed; a Clear
stops the audio, answers Cleared and 30 ms later the dropped flush's Flushed."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time

from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, TextMessage

from procs import dashboard, locust, read_jsonl

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: 200 ms of 24 kHz PCM16: a square wave (digital silence would be judged a silent answer)
TONE = b"".join((1000 if (i // 24) % 2 else -1000).to_bytes(2, "little", signed=True) for i in range(4800))


class DeepgramLike:
    """/v1/speak in Deepgram's dialect, late with the Flushed a Clear dropped."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.late_flushed = 0  # sent after a Cleared
        self.clears = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(client,), daemon=True).start()

    @staticmethod
    def _upgrade(sock: socket.socket) -> None:
        """The WebSocket handshake: read the upgrade request, accept it."""
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        sock.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + base64.b64encode(hashlib.sha1(key + GUID).digest()) + b"\r\n\r\n"
        )

    def _session(self, sock: socket.socket):
        self._upgrade(sock)
        conn, lock = Connection(ConnectionType.SERVER), threading.Lock()
        cleared = threading.Event()
        seq = 0

        def send(event):
            with lock:
                sock.sendall(conn.send(event))

        def speak(n: int):
            for _ in range(3):
                if cleared.is_set():
                    break
                send(BytesMessage(TONE))
                time.sleep(0.06)
            if not cleared.is_set():
                send(TextMessage(json.dumps({"type": "Flushed", "sequence_id": n})))
            else:  # the Clear came first: Cleared now, the dropped flush's Flushed a little late
                send(TextMessage(json.dumps({"type": "Cleared", "sequence_id": n})))
                time.sleep(0.03)
                send(TextMessage(json.dumps({"type": "Flushed", "sequence_id": n})))
                self.late_flushed += 1

        worker = None
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                conn.receive_data(data)
                for ev in conn.events():
                    if isinstance(ev, CloseConnection):
                        send(ev.response())
                        return
                    if not isinstance(ev, TextMessage):
                        continue
                    kind = json.loads(ev.data)["type"]
                    if kind == "Flush":
                        if worker is not None:
                            worker.join()
                        cleared.clear()
                        worker = threading.Thread(target=speak, args=(seq,), daemon=True)
                        worker.start()
                        seq += 1
                    elif kind == "Clear":
                        self.clears += 1
                        cleared.set()
        except OSError:
            return
        finally:
            sock.close()

    def close(self):
        self.sock.close()


def test_a_late_flushed_after_a_clear_does_not_end_the_next_utterance(tmp_path, monkeypatch):
    texts = tmp_path / "t.txt"
    texts.write_text("Hello there, how are you today.\nThe train leaves at nine.\n")
    server = DeepgramLike()
    run = tmp_path / "run"
    try:
        proc = locust(
            [
                "--headless",
                "-H",
                server.url,
                "--tts-protocol",
                "ws",
                "--tts-preset",
                "deepgram",
                "--tts-voice",
                "aura-2-thalia-en",
                "--texts",
                str(texts),
                "--steps",
                "1",
                "--step-time",
                "4",
                "--barge-in",
                "0.5",
                "--barge-in-after",
                "20",
                "--run-dir",
                str(run),
            ],
            env={"DEEPGRAM_API_KEY": "k"},
            timeout=120,
        )
    finally:
        server.close()
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    recs = [r for r in read_jsonl(run / "requests.jsonl") if r.get("phase") is None]
    cancelled = [r for r in recs if r.get("cancelled")]
    heard = [r for r in recs if not r.get("cancelled")]
    assert len(cancelled) >= 3 and server.late_flushed >= 3, (len(cancelled), server.late_flushed)
    assert all(r["cancel_quiet"] == "acknowledged" for r in cancelled)
    # every utterance heard to its end got its three frames, the one after a cancel too
    assert heard and all(r["ok"] and abs(r["audio_s"] - 0.6) < 0.01 for r in heard), [
        (r["ok"], r["audio_s"], r["error"]) for r in heard if not (r["ok"] and abs(r["audio_s"] - 0.6) < 0.01)
    ]
    assert dashboard(str(run)).returncode == 0
