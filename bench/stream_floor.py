"""The floor for bench/stream_cost.py: chunk arrivals of WAV streams stamped by the leanest
client this stack allows — geventhttpclient in a bare gevent loop reading each socket's worth
as it comes, no Locust, no parsing, records or files — so the arrival error that the host and
the simulator cause is told apart from tts-knee's own.

    .venv/bin/python bench/stream_floor.py http://127.0.0.1:8300 256 TEXTS_FILE --seconds 8

Users start 10 ms apart, each names its requests with ``X-Request-Id`` (for the simulator's
``--chunk-log``) and sends the texts in order, back to back. It prints one JSON object per
attempt sent after the first third of the run: ``{"id", "at": [unix s], "audio_ms": [...]}``
for the arrivals that carried audio (the WAV header's 44 bytes are not audio), then one
``{"cpu_s", "chunks", "wall_s"}``: this process's CPU time over the last two thirds of the run
and the arrivals in them.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402  (after patching, as gevent requires)
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from tts_knee.locustfiles.transports.http import read_some  # noqa: E402

SPAWN_INTERVAL_S = 0.01
WAV_HEADER_BYTES = 44


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _meter(count_from: float, box: dict) -> None:
    gevent.sleep(max(0.0, count_from - time.perf_counter()))
    box["cpu0"], box["t0"] = _cpu_s(), time.perf_counter()


def _user(url, texts, rate: int, stop_at: float, count_from: float, out: list, box: dict) -> None:
    parts = urlsplit(url)
    client = HTTPClient(
        parts.hostname, parts.port, concurrency=1, block_size=64 * 1024, headers={"Content-Type": "application/json"}
    )
    n = 0
    while time.perf_counter() < stop_at:
        body = json.dumps(
            {"model": "tts-1", "input": texts[n % len(texts)], "response_format": "wav", "stream": True}
        ).encode()
        n += 1
        rid = uuid.uuid4().hex
        t0 = time.perf_counter()
        resp = client.request("POST", "/v1/audio/speech", body=body, headers={"X-Request-Id": rid})
        at, audio_ms, got = [], [], 0
        while block := read_some(resp):
            now = time.time()
            audio = len(block) - max(0, WAV_HEADER_BYTES - got)
            got += len(block)
            if audio > 0:
                box["chunks"] += time.perf_counter() >= count_from
                at.append(now)
                audio_ms.append(audio / 2 / rate * 1000.0)
        if t0 >= count_from:
            out.append({"id": rid, "at": at, "audio_ms": audio_ms})
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("users", type=int)
    parser.add_argument("texts", help="one text per line")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--sample-rate", type=int, default=24000)
    args = parser.parse_args()
    texts = [t for t in Path(args.texts).read_text().splitlines() if t.strip()]
    out: list[dict] = []
    start = time.perf_counter()
    stop_at, count_from = start + args.seconds, start + args.seconds / 3
    box = {"chunks": 0}
    meter = gevent.spawn(_meter, count_from, box)
    users = []
    for _ in range(args.users):
        users.append(gevent.spawn(_user, args.url, texts, args.sample_rate, stop_at, count_from, out, box))
        gevent.sleep(SPAWN_INTERVAL_S)
    gevent.joinall(users)
    meter.join()
    for attempt in out:
        print(json.dumps(attempt))
    print(
        json.dumps(
            {"cpu_s": _cpu_s() - box["cpu0"], "chunks": box["chunks"], "wall_s": time.perf_counter() - box["t0"]}
        )
    )


if __name__ == "__main__":
    main()
