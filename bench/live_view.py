"""How long a refresh of the live view (``tts-knee report RUN --serve``) takes on a run that has
grown to a million attempts, against one at ten thousand.

    .venv/bin/python bench/live_view.py                  # 10,000 and 1,000,000 attempts
    .venv/bin/python bench/live_view.py 10000 300000     # these sizes
    .venv/bin/python bench/live_view.py --json

Each size is a run in progress as ``--steps 64 --soak 1h`` writes it: one soak step, 300
attempts a second (so a million is about 55 minutes in), a server and a client resource
sample every second, the step and the run still open. The live view reads it once; then, for
``--refreshes`` rounds, one second more of the run is appended (300 records, two samples) and
the page is asked for (``LiveView.handle("/")``: reading what was appended, the summary,
the report), its time taken. The sizes are measured one after the other in one process; the
figures are medians. One line per size, then the ratio of the largest to the smallest::

    attempts  first_s  refresh_s  refresh_min_s  refresh_max_s  page_MiB
    ratio: 1.35x (goal <= 2x)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tts_knee.dashboard import serve

RATE = 300.0
START = 1_700_000_000.0
SOAK_S = 3600.0
USERS = 64
GOAL = 2.0


def _attempt(i: int) -> str:
    t0 = START + 1.0 + i / RATE
    w = 200.0 * (0.9 + 0.2 * ((i * 7919) % 100) / 100)
    ok = i % 500 != 7
    return (
        f'{{"step":1,"concurrency":{USERS},"worker":"local","user":{i % USERS},"t0":{t0:.6f},'
        f'"t1":{t0 + w * 0.0004:.6f},"t2":{t0 + w / 1000:.6f},"t3":{t0 + w / 1000 + 0.003:.6f},'
        f'"ttfb_ms":{w * 0.4:.3f},"wait_ms":{w:.3f},"write_ms":3.0,"concat_ms":null,'
        f'"status":{200 if ok else 503},"ok":{"true" if ok else "false"},'
        f'"error":{"null" if ok else json.dumps("503 Service Unavailable")},"bytes":88200,'
        f'"audio_s":{2.0 if ok else "null"},"rtf":{w / 2000 if ok else "null"},"retry_after_s":null,'
        f'"retry_after_raw":null,"server_timing":{{"queue":1.0,"infer":{w - 1:.2f}}},"settled":true,'
        f'"req_id":"r{i}","attempt":1,"final":true,"text_id":"t{i % 40}","text_len":{40 + i % 400},'
        f'"tier":"{("short", "medium", "long")[i % 3]}","segment":null,"backoff_ms":null}}\n'
    )


def _samples(second: int) -> str:
    ts = START + second
    server = {
        "ts": ts,
        "host": "tts",
        "role": "server",
        "cpu_percent": 50.0,
        "cpu_max_core_percent": 90.0,
        "mem_used_bytes": 8e9,
        "mem_total_bytes": 64e9,
        "proc": {"pid": 1, "cpu_percent": 150.0, "rss_bytes": 2e9 + 1e5 * (second % 7)},
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-0",
                "name": "bench",
                "util_percent": 80.0,
                "mem_used_bytes": 6e9,
                "mem_total_bytes": 24e9,
                "power_w": 100.0,
                "temp_c": 50.0,
                "sm_clock_mhz": 1800.0,
                "clock_event_reasons": [],
                "proc_mem_bytes": None,
            }
        ],
    }
    client = {
        "ts": ts,
        "host": "loadgen",
        "role": "client",
        "cpu_percent": 30.0,
        "cpu_max_core_percent": 60.0,
        "mem_used_bytes": 4e9,
        "mem_total_bytes": 24e9,
        "proc": {"pid": 2, "cpu_percent": 40.0, "rss_bytes": 3e8},
        "gpus": [],
    }
    return json.dumps(server) + "\n" + json.dumps(client) + "\n"


def write_run(path: Path, attempts: int) -> int:
    """The run directory at ``attempts`` attempts; returns the seconds it covers."""
    path.mkdir(parents=True)
    with open(path / "requests.jsonl", "w") as f:
        for lo in range(0, attempts, 100_000):
            f.write("".join(_attempt(i) for i in range(lo, min(attempts, lo + 100_000))))
    seconds = int(attempts / RATE) + 1
    (path / "resources.jsonl").write_text("".join(_samples(k) for k in range(seconds + 1)))
    step = {
        "step": 1,
        "concurrency": USERS,
        "start": START,
        "end": None,
        "phase": "soak",
        "repeat": 1,
        "settle_s": 1.0,
        "cutoff": None,
    }
    (path / "run.json").write_text(
        json.dumps(
            {
                "format_version": 2,
                "run_id": path.name,
                "start": START,
                "end": None,
                "target": "http://bench",
                "mode": "closed",
                "options": {"steps": [USERS], "soak": SOAK_S},
                "settle_s": 1.0,
                "steps": [step],
                "workers": [],
                "collectors": [],
                "versions": {},
            }
        )
    )
    return seconds


def measure(attempts: int, refreshes: int, tmp: Path) -> dict:
    run = tmp / f"run-{attempts}"
    seconds = write_run(run, attempts)
    serve.MIN_REBUILD_S = 0.0
    view = serve.LiveView([run])
    t = time.perf_counter()
    view.handle("/")
    first = time.perf_counter() - t
    times, n, body = [], attempts, b""
    for k in range(refreshes):
        with open(run / "requests.jsonl", "a") as f:
            f.write("".join(_attempt(i) for i in range(n, n + int(RATE))))
        with open(run / "resources.jsonl", "a") as f:
            f.write(_samples(seconds + 1 + k))
        n += int(RATE)
        t = time.perf_counter()
        status, _, body = view.handle("/")
        times.append(time.perf_counter() - t)
        assert status == 200
    return {
        "attempts": attempts,
        "first_s": first,
        "refresh_s": statistics.median(times),
        "refresh_min_s": min(times),
        "refresh_max_s": max(times),
        "page_MiB": len(body) / 2**20,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, help="attempts per run (default 10000 1000000)")
    ap.add_argument("--refreshes", type=int, default=7, help="refreshes timed per size (default 7)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args(argv)
    sizes = sorted(args.sizes or [10_000, 1_000_000])
    print(
        f"{'attempts':>9} {'first_s':>8} {'refresh_s':>9} {'refresh_min_s':>13} {'refresh_max_s':>13} {'page_MiB':>8}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="tts-knee-live-view-") as tmp:
        for n in sizes:
            m = measure(n, args.refreshes, Path(tmp))
            rows.append(m)
            print(
                f"{n:>9} {m['first_s']:>8.2f} {m['refresh_s']:>9.3f} {m['refresh_min_s']:>13.3f} "
                f"{m['refresh_max_s']:>13.3f} {m['page_MiB']:>8.1f}",
                flush=True,
            )
    ratio = rows[-1]["refresh_s"] / rows[0]["refresh_s"]
    print(
        f"ratio: {ratio:.2f}x, refresh at {rows[-1]['attempts']:,} over {rows[0]['attempts']:,} attempts "
        f"(goal <= {GOAL:g}x)"
    )
    if args.json:
        print(json.dumps({"sizes": rows, "ratio": ratio, "goal": GOAL}))
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
