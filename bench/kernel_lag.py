"""How long the gRPC client's reads leave bytes waiting in the kernel: each read's own stamp
against the kernel's receive time of the last bytes it took (``SO_TIMESTAMPNS``), written as
JSON to ``BENCH_KERNEL_LAG_OUT`` when the process exits: ``{"at": [unix s], "lag_ms": [...]}``.

On loopback the kernel stamps a segment as the sender's ``send`` hands it over, so the lag is
the client's own share of an arrival's error: the wait for its process to be scheduled and for
its event loop to reach the reading greenlet. Importing this module does nothing unless
``BENCH_KERNEL_LAG_OUT`` is set; then every :class:`~locustfiles.transports.h2grpc.Connection`
reads with ``recvmsg`` (a little dearer than ``recv``: measure CPU per chunk without it).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import struct
import time
from array import array
from typing import Any, cast

from tts_knee.locustfiles.transports import h2grpc

_TIMESPEC = struct.Struct("@ll")
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux (asm-generic), not named by Python
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)


class _Stamped:
    """A socket whose ``recv`` notes each read's lag behind the kernel's receive stamp."""

    def __init__(self, sock: socket.socket, at: array[float], lag_ms: array[float]) -> None:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._sock, self._at, self._lag_ms = sock, at, lag_ms

    def recv(self, n: int) -> bytes:
        data, ancillary, _flags, _addr = self._sock.recvmsg(n, _CMSG_SPACE)
        now = time.time()
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                sec, nsec = _TIMESPEC.unpack(raw[: _TIMESPEC.size])
                self._at.append(now)
                self._lag_ms.append((now - sec - nsec / 1e9) * 1000.0)
        return data

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def install(out: str) -> None:
    at, lag_ms = array("d"), array("d")
    opened = h2grpc.Connection.__init__

    def __init__(self: h2grpc.Connection, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        assert self.sock is not None  # just opened
        self.sock = cast(socket.socket, _Stamped(self.sock, at, lag_ms))  # the reader calls recv, the rest passes

    h2grpc.Connection.__init__ = __init__  # type: ignore[method-assign]  # the bench's patch, this process only

    @atexit.register
    def _write() -> None:
        with open(out, "w") as f:
            json.dump({"at": at.tolist(), "lag_ms": lag_ms.tolist()}, f)


if os.environ.get("BENCH_KERNEL_LAG_OUT"):
    install(os.environ["BENCH_KERNEL_LAG_OUT"])
