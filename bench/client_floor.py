"""The floor for bench/client_overhead.py: the same gap (client time minus the server's own
``total``) measured by the leanest client this stack allows — geventhttpclient in a bare gevent
loop, no Locust, no records, no audio check or file — so the two figures tell the client's
own cost apart from what the simulator and the host add.

    .venv/bin/python bench/client_floor.py http://127.0.0.1:8300 256 --seconds 6

Users start 10 ms apart (as tts-knee's step shape spawns them, at 100 a second), send the
default corpus in order, back to back, and only attempts sent after the first third of the run
count. It prints one JSON object: ``{"users", "attempts", "gap_p50_ms", "gap_p95_ms", "gap_max_ms"}``.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402  (after patching, as gevent requires)
import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from harness import percentile  # noqa: E402
from tts_knee.locustfiles.inputs import corpus  # noqa: E402

SPAWN_INTERVAL_S = 0.01
_TOTAL = re.compile(r"total;dur=([\d.]+)")


def _user(host: str, port: int | None, texts: list[str], stop_at: float, count_from: float, gaps: list[float]) -> None:
    client = HTTPClient(host, port, concurrency=1, block_size=64 * 1024, headers={"Content-Type": "application/json"})
    n = 0
    while time.perf_counter() < stop_at:
        body = json.dumps(
            {"model": "tts-1", "input": texts[n % len(texts)], "response_format": "wav"}, ensure_ascii=False
        ).encode()
        n += 1
        t0 = time.perf_counter()
        resp = client.request("POST", "/v1/audio/speech", body=body)
        resp.read()
        t2 = time.perf_counter()
        timing = resp.get("server-timing") or ""  # a header sent more than once: a list of its values
        m = _TOTAL.search(timing if isinstance(timing, str) else ", ".join(timing))
        if m and t0 >= count_from:
            gaps.append((t2 - t0) * 1000.0 - float(m.group(1)))
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("users", type=int)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    target = urlsplit(args.url)
    if not target.hostname:
        parser.error(f"{args.url!r} names no host: give http://HOST:PORT")
    texts = [t.text for t in corpus.load()]
    gaps: list[float] = []
    start = time.perf_counter()
    stop_at, count_from = start + args.seconds, start + args.seconds / 3
    users = []
    for _ in range(args.users):
        users.append(gevent.spawn(_user, target.hostname, target.port, texts, stop_at, count_from, gaps))
        gevent.sleep(SPAWN_INTERVAL_S)
    gevent.joinall(users)
    print(
        json.dumps(
            {
                "users": args.users,
                "attempts": len(gaps),
                "gap_p50_ms": percentile(gaps, 0.5),
                "gap_p95_ms": percentile(gaps, 0.95),
                "gap_max_ms": max(gaps, default=None),
            }
        )
    )


if __name__ == "__main__":
    main()
