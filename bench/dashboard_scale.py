"""How long the dashboard takes, and how much memory, against a plain ``json.loads`` of every
line of the same requests.jsonl.

Run it from the repository root::

    .venv/bin/python bench/dashboard_scale.py              # 300k (against json.loads) and 1M attempts
    .venv/bin/python bench/dashboard_scale.py 200000       # just this size
    .venv/bin/python bench/dashboard_scale.py --pairs 3 300000
    .venv/bin/python bench/dashboard_scale.py --pairs 3 3000000  # a 12-hour soak at 70 req/s (1.4 GB)

It writes a synthetic run directory per size (8 steps, 1..128 users, a server with 4 slots,
resources every second, some 429s and retries), then, ``--pairs`` times in turn, (A) a fresh
process that only ``json.loads`` every line of requests.jsonl and (B) a fresh process that runs
``load`` + ``analyze`` + ``summary.json`` + ``report.html``; the figures are medians. The
ratios pair each dashboard run with the json.loads run just before it: ``load_ratio`` is the
wall-clock time of reading the run directory (run.json, requests.jsonl, resources.jsonl into
columns) over A's, ``load_cpu_ratio`` the same in CPU time (the process's, all threads: pyarrow
parses on several, so this one is higher, and it moves less on a busy shared host),
``total_ratio`` the wall-clock time of the whole dashboard, its imports (numpy, pandas, pyarrow,
plotly: ``import_s``) included. The ``_s`` columns are wall-clock seconds. A size
given with ``--no-baseline`` (the 1M run by default) is measured once, for its time and peak
memory. One line per size::

    attempts jsonl_MiB json_s import_s load_s analyze_s report_s total_s load_ratio load_cpu_ratio total_ratio
    peak_rss_MiB peak_B_per_attempt report_MiB

``peak_rss_MiB`` is the dashboard process's maximum resident set (``ru_maxrss``, what
``/usr/bin/time -v`` prints), ``peak_B_per_attempt`` the same in bytes over the attempts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = (1, 2, 4, 8, 16, 32, 64, 128)
SLOTS = 4
BASE_MS = 200.0

_JSON_LOADS = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as f:
    for line in f:
        json.loads(line)
print(json.dumps({"json_s": time.perf_counter() - t0, "json_cpu_s": time.process_time() - c0}))
"""

_CHILD = r"""
import json, resource, sys, time
ti, ci = time.perf_counter(), time.process_time()
from tts_knee.analysis.summary import load, analyze, write_summary
from tts_knee.runformat.reader import heap_gives_back
heap_gives_back()  # as the report command does
from tts_knee.dashboard.report import write_report
t0, c0 = time.perf_counter(), time.process_time()
rd = load(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
s = analyze(rd)
write_summary(rd, s)
t2 = time.perf_counter()
out = write_report(rd, s)
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps({"load_cpu_s": c1 - c0, "total_cpu_s": c3 - ci, "import_s": t0 - ti, "load_s": t1 - t0,
                  "analyze_s": t2 - t1, "report_s": t3 - t2, "total_s": t3 - ti,
                  "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "report_MiB": out.stat().st_size / 2**20, "knee": s["knee"]["concurrency"],
                  "kind": s["diagnosis"]["kind"]}))
"""


def write_run(path: Path, attempts: int) -> None:
    """A run directory with ``attempts`` lines in requests.jsonl, spread evenly over the steps."""
    path.mkdir(parents=True, exist_ok=True)
    per_step = attempts // len(STEPS)
    start, t, steps = 1_700_000_000.0, 1_700_000_000.0, []
    rows = []
    with open(path / "requests.jsonl", "w") as f:
        for si, n in enumerate(STEPS, start=1):
            wait = BASE_MS * max(1.0, n / SLOTS)
            rate = n / (wait / 1000)  # closed loop: users / latency
            dur = per_step / rate
            steps.append({"step": si, "concurrency": n, "start": t, "end": t + dur})
            err_throttled, ra_raw = json.dumps("429 Too Many Requests"), json.dumps("1")
            for i in range(per_step):
                t0 = t + i / rate
                w = wait * (0.9 + 0.2 * ((i * 7919) % 100) / 100)
                throttled = n >= 64 and i % 10 == 0
                status, ok = (429, "false") if throttled else (200, "true")
                attempt = 2 if i % 10 == 1 and n >= 64 else 1
                f.write(
                    f'{{"req_id":"w{i % 4}-{si}-{i}","attempt":{attempt},"final":{"false" if throttled else "true"},'
                    f'"step":{si},"concurrency":{n},"worker":"w{i % 4}","user":{i % n},"text_id":"t{i % 40}",'
                    f'"text_len":{40 + i % 400},"tier":"{("short", "medium", "long")[i % 3]}","t0":{t0:.6f},'
                    f'"t1":{t0 + w * 0.0004:.6f},"t2":{t0 + w / 1000:.6f},"t3":{t0 + w / 1000 + 0.003:.6f},'
                    f'"ttfb_ms":{w * 0.4:.3f},"wait_ms":{w:.3f},"write_ms":3.0,"concat_ms":null,'
                    f'"status":{status},"ok":{ok},"error":{err_throttled if throttled else "null"},'
                    f'"bytes":88200,"audio_s":2.0,"rtf":{w / 2000:.4f},'
                    f'"retry_after_s":{"1.0" if throttled else "null"},'
                    f'"retry_after_raw":{ra_raw if throttled else "null"},'
                    f'"backoff_ms":{1000.0 if attempt > 1 else 0.0},'
                    f'"server_timing":{{"queue":{max(0, w - BASE_MS):.2f},'
                    f'"infer":{BASE_MS * 0.8:.2f}}},"settled":{"true" if i > per_step // 10 else "false"}}}'
                    "\n"
                )
            t += dur + 1
    ts = start - 3
    while ts < t + 5:
        users = next((s["concurrency"] for s in steps if s["start"] <= ts < s["end"]), 0)
        busy = min(users, SLOTS) / SLOTS
        rows.append(
            json.dumps(
                {
                    "ts": ts,
                    "host": "tts",
                    "role": "server",
                    "cpu_percent": 5 + 20 * busy,
                    "cpu_max_core_percent": 10 + 40 * busy,
                    "mem_used_bytes": 8e9,
                    "mem_total_bytes": 64e9,
                    "proc": {"pid": 1, "cpu_percent": 50 * busy, "rss_bytes": 2e9},
                    "gpus": [
                        {
                            "index": 0,
                            "uuid": "GPU-0",
                            "name": "bench",
                            "util_percent": 95 * busy,
                            "mem_used_bytes": 6e9 + 4e9 * busy,
                            "mem_total_bytes": 24e9,
                            "power_w": 100,
                            "temp_c": 50,
                            "sm_clock_mhz": 1800,
                            "clock_event_reasons": [],
                            "proc_mem_bytes": None,
                        }
                    ],
                }
            )
        )
        ts += 1.0
    (path / "resources.jsonl").write_text("\n".join(rows) + "\n")
    (path / "run.json").write_text(
        json.dumps(
            {
                "run_id": path.name,
                "start": start,
                "end": t,
                "target": "bench",
                "options": {},
                "steps": steps,
                "settle_s": 1,
                "workers": 4,
                "collectors": [],
                "versions": {},
            }
        )
    )


def _child(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def measure(attempts: int, pairs: int = 2, baseline: bool = True) -> dict:
    """Medians over ``pairs`` runs of the dashboard (after a json.loads run each, when ``baseline``)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / f"bench-{attempts}"
        t = time.perf_counter()
        write_run(run, attempts)
        gen_s = time.perf_counter() - t
        size = (run / "requests.jsonl").stat().st_size
        runs, bases = [], []
        for _ in range(pairs if baseline else 1):
            if baseline:
                bases.append(_child(_JSON_LOADS, str(run / "requests.jsonl")))
            runs.append(_child(_CHILD, str(run)))
    out = {
        k: statistics.median(r[k] for r in runs)
        for k in (
            "load_cpu_s",
            "total_cpu_s",
            "import_s",
            "load_s",
            "analyze_s",
            "report_s",
            "total_s",
            "peak_rss_MiB",
            "report_MiB",
        )
    }
    out.update(
        knee=runs[0]["knee"],
        kind=runs[0]["kind"],
        attempts=attempts,
        jsonl_MiB=size / 2**20,
        generate_s=gen_s,
        json_s=None,
        load_ratio=None,
        load_cpu_ratio=None,
        total_ratio=None,
    )
    if bases:
        out["json_s"] = statistics.median(b["json_s"] for b in bases)
        paired = list(zip(runs, bases))
        out["load_ratio"] = statistics.median(r["load_s"] / b["json_s"] for r, b in paired)
        out["load_cpu_ratio"] = statistics.median(r["load_cpu_s"] / b["json_cpu_s"] for r, b in paired)
        out["total_ratio"] = statistics.median(r["total_s"] / b["json_s"] for r, b in paired)
    return out


def _cell(v, width: int) -> str:
    return "-".rjust(width) if v is None else f"{v:>{width}.2f}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help="attempts per run (default 300000 1000000)")
    parser.add_argument("--pairs", type=int, default=2, help="json.loads / dashboard pairs per size (default 2)")
    parser.add_argument(
        "--no-baseline",
        type=int,
        action="append",
        default=None,
        metavar="SIZE",
        help="measure this size once, without json.loads (default: 1000000)",
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or [300_000, 1_000_000]
    alone = set(args.no_baseline if args.no_baseline is not None else [1_000_000])
    print(
        f"{'attempts':>9} {'jsonl_MiB':>9} {'json_s':>7} {'import_s':>8} {'load_s':>7} {'analyze_s':>9} "
        f"{'report_s':>8} {'total_s':>7} {'load_ratio':>10} {'load_cpu_ratio':>14} {'total_ratio':>11} "
        f"{'peak_rss_MiB':>12} {'peak_B_per_attempt':>18} {'report_MiB':>10}  verdict",
        flush=True,
    )
    for n in sizes:
        m = measure(n, args.pairs, baseline=n not in alone)
        print(
            f"{m['attempts']:>9} {m['jsonl_MiB']:>9.0f} {_cell(m['json_s'], 7)} {m['import_s']:>8.2f} "
            f"{m['load_s']:>7.2f} {m['analyze_s']:>9.2f} {m['report_s']:>8.2f} {m['total_s']:>7.2f} "
            f"{_cell(m['load_ratio'], 10)} {_cell(m['load_cpu_ratio'], 14)} "
            f"{_cell(m['total_ratio'], 11)} {m['peak_rss_MiB']:>12.0f} "
            f"{m['peak_rss_MiB'] * 2**20 / m['attempts']:>18.0f} {m['report_MiB']:>10.1f}"
            f"  knee {m['knee']}, {m['kind']}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
