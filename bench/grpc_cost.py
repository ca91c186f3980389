"""What timing gRPC streams costs the client: CPU per chunk, and how late it stamps chunk
arrivals against the simulator's own send times, at 1 and 256 streams on one Locust process;
tts-knee's client (h2 on gevent sockets) and, beside it on the same simulator, grpcio under
gevent as the gRPC project supports it.

Run from the repository root (about a minute)::

    .venv/bin/python bench/grpc_cost.py
    .venv/bin/python bench/grpc_cost.py --streams 1,64,256 --clients tts-knee --step-time 10
    .venv/bin/python bench/grpc_cost.py --json      # one JSON object instead of the table
    .venv/bin/python bench/grpc_cost.py --streams 1000 --clients tts-knee --kernel-lag   # the client's own share

For each client and each number of streams S, the simulator serves Riva's ``SynthesizeOnline``
(``--grpc-port``) sharing S x real time among its streams, at most 1x each (``--capacity S
--max-speed 1 --chunk-ms 200 --prefill-ms 100``), so every stream gets a 200 ms chunk every
200 ms: 5 S messages a second. One headless ``locust`` process runs S users on short texts:
``tts-knee`` is tts-knee's own user (bench/grpc_locustfile.py: ``--tts-protocol grpc
--tts-preset riva --tts-stream``), ``grpcio`` a bare user on grpcio with ``init_gevent()`` and
one shared channel (bench/grpcio_locustfile.py). The simulator's ``--chunk-log`` gives the time
each audio message had been handed to its socket, matched to the client's arrival by the
request's id and the audio so far::

      client  streams  chunks/s  CPU_us/chunk  err_p50_ms  err_p95_ms  err_max_ms  streams_matched
    tts-knee        1       4.7        1110.9        0.08        0.61        1.59                2
    tts-knee      256    1247.0         168.2        0.42        4.94       57.82              667
      grpcio        1       4.7        1354.9        0.43        1.05        3.93                3
      grpcio      256    1235.6         300.1        1.59       39.10       84.91              768
    arrival error p95 at 256 streams: 4.94 ms (tts-knee), 39.10 ms (grpcio)   (goal < 5 ms)

``err`` is client arrival minus server send (positive: stamped late), of the chunks sent within
the window the CPU is measured over: from a second after Locust has started every stream
(tts-knee's shape starts 100 users a second) to before the run's end stops them. CPU per chunk is the
Locust process's CPU time (user + system, grpcio's own threads included) over the measured
window divided by the chunks that arrived in it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from harness import PROCESS_HEAD, LocustRun, locust, percentile, process_columns, process_figures, simulator
from stream_cost import CHUNK_MS, GOAL_P95_MS, GOAL_STREAMS, RATE, TEXTS, matched

CLIENTS = ("tts-knee", "grpcio")
#: Users tts-knee's step shape starts a second (locustfiles/shape.py's SPAWN_RATE; grpcio's
#: bare user starts them all at once).
SPAWN_RATE = 100.0


def default_step_time(streams: int) -> float:
    """10 s, or as long as it takes tts-knee's shape to start the streams and 9 s more."""
    return max(10.0, streams / SPAWN_RATE + 9.0)


def settle_s(streams: int, step_time: float) -> float:
    """Seconds from the first attempt to the measured window: a second more per 200 streams,
    which connect in turn, at most a third of the run, and never before every stream has started
    (a second after the shape spawned the last: at 1,000 streams that takes 10 s)."""
    return max(min(3.0 + streams / 200.0, step_time / 3), streams / SPAWN_RATE + 1.0)


def measure_one(client: str, streams: int, step_time: float | None, kernel_lag: bool = False) -> dict:
    step_time = step_time or default_step_time(streams)
    settle = settle_s(streams, step_time)
    if step_time - settle < 3.0:
        raise SystemExit(
            f"--step-time {step_time:g} leaves no window at {streams} streams: they take {settle:g} s to start "
            f"and settle; give --step-time {settle + 5:g} or more"
        )
    with tempfile.TemporaryDirectory(prefix="tts-knee-grpc-") as tmp:
        log, texts, out = Path(tmp) / "chunks.jsonl", Path(tmp) / "texts.txt", Path(tmp) / "grpcio.jsonl"
        lag_out = Path(tmp) / "lag.json"
        os.environ["BENCH_AFTER_SPAWN_S"] = "1"  # read by bench/meter.py: the window starts once every user runs
        if kernel_lag and client == "tts-knee":
            os.environ["BENCH_KERNEL_LAG_OUT"] = str(lag_out)  # read by bench/kernel_lag.py
        texts.write_text("\n".join(TEXTS) + "\n")
        knobs = [
            "--grpc-port",
            "0",
            "--capacity",
            str(streams),
            "--max-speed",
            "1",
            "--chunk-ms",
            f"{CHUNK_MS:g}",
            "--prefill-ms",
            "100",
            "--chunk-log",
            str(log),
            "--sample-rate",
            str(RATE),
        ]
        with simulator(*knobs, scheme="grpc") as (host, _sim):
            if client == "tts-knee":
                args = [
                    "-H",
                    host,
                    "--tts-protocol",
                    "grpc",
                    "--tts-preset",
                    "riva",
                    "--tts-stream",
                    "--steps",
                    str(streams),
                    "--step-time",
                    f"{step_time:g}",
                    "--settle-time",
                    f"{settle:g}",
                    "--run-dir",
                    "{tmp}/run",
                    "--texts",
                    str(texts),
                    "--skip-preflight",
                    "--tts-sample-rate",
                    str(RATE),
                ]
                r = locust(
                    "bench/grpc_locustfile.py",
                    args,
                    warm_s=settle + 0.3,
                    measure_s=step_time - settle - 0.8,
                    timeout=90 + step_time,
                )
            else:
                args = ["-H", host, "-u", str(streams), "-r", str(streams), "-t", f"{step_time + 1:g}s"]
                os.environ["BENCH_GRPCIO_OUT"] = str(out)  # read by the locustfile
                r = locust(
                    "bench/grpcio_locustfile.py",
                    args,
                    warm_s=settle + 0.3,
                    measure_s=step_time - settle - 0.8,
                    timeout=90 + step_time,
                )
        sent = {}
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            sent[entry["request_id"]] = entry
        streams_seen = _streams(client, r, out)
        lags = json.loads(lag_out.read_text()) if lag_out.exists() else None
        os.environ.pop("BENCH_KERNEL_LAG_OUT", None)
    if not streams_seen:
        raise RuntimeError(f"the {client} run left no streams (exit {r['returncode']}):\n{r['output'][-2000:]}")
    t_first = min(s["t0"] for s in streams_seen)
    start = r.get("start_unix") or t_first + settle + 0.3  # the meter's window
    window = (start, start + (r.get("wall_s") or 0.0))
    errors, joined = [], 0
    for s in streams_seen:  # each chunk the simulator sent within the meter's window
        entry = sent.get(s["id"])
        if entry and s["at"] and entry["sent"] and window[0] <= entry["sent"][-1] and entry["sent"][0] < window[1]:
            joined += 1
            late = matched(s["at"], s["audio_ms"], entry)
            errors += [ms for ms, when in zip(late, entry["sent"]) if window[0] <= when < window[1]]
    chunks = sum(1 for s in streams_seen for t in s["at"] if window[0] <= t < window[1])
    chunks_per_s = chunks / (window[1] - window[0]) if window[1] > window[0] else 0.0
    cpu_us = 1e6 * r["cpu_s"] / r["wall_s"] / chunks_per_s if r.get("wall_s") and chunks_per_s else None
    lag = [ms for at, ms in zip(lags["at"], lags["lag_ms"]) if window[0] <= at < window[1]] if lags else []
    return {
        "client": client,
        "streams": streams,
        "chunks_per_s": chunks_per_s,
        "cpu_us_per_chunk": cpu_us,
        "streams_matched": joined,
        "matched_chunks": len(errors),
        "err_p50_ms": percentile(errors, 0.5),
        "err_p95_ms": percentile(errors, 0.95),
        "err_max_ms": max(errors, default=float("nan")),
        "window_unix": window,
        "read_lag_p50_ms": percentile(lag, 0.5) if lag else None,
        "read_lag_p95_ms": percentile(lag, 0.95) if lag else None,
        **process_figures(r),
    }


def _streams(client: str, r: LocustRun, out: Path) -> list[dict]:
    """Each stream's id, t0 and arrivals (unix s) with their audio."""
    if client == "grpcio":
        return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return [
        {
            "id": x["sim_request_id"],
            "t0": x["t0"],
            "at": [x["t0"] + ms / 1000 for ms in x.get("chunk_at_ms") or ()],
            "audio_ms": x["chunk_audio_ms"],
        }
        for x in r.get("records") or ()
        if x["ok"] and x.get("chunk_at_ms")
    ]


def measure(
    levels: list[int], clients: list[str], step_time: float | None, show=print, kernel_lag: bool = False
) -> dict:
    show(
        f"{'client':>8} {'streams':>8} {'chunks/s':>9} {'CPU_us/chunk':>13} {'err_p50_ms':>11} {'err_p95_ms':>11} "
        f"{'err_max_ms':>11} {'streams_matched':>16} {PROCESS_HEAD}"
    )
    rows = []
    for client in clients:
        for streams in levels:
            row = measure_one(client, streams, step_time, kernel_lag)
            rows.append(row)
            cpu = "-" if row["cpu_us_per_chunk"] is None else f"{row['cpu_us_per_chunk']:.1f}"
            show(
                f"{client:>8} {streams:>8} {row['chunks_per_s']:>9.1f} {cpu:>13} {row['err_p50_ms']:>11.2f} "
                f"{row['err_p95_ms']:>11.2f} {row['err_max_ms']:>11.2f} {row['streams_matched']:>16} "
                f"{process_columns(row)}"
            )
            if row["read_lag_p95_ms"] is not None:
                show(
                    f"{'':>8} {'':>8} reads behind the kernel's stamp: p50 {row['read_lag_p50_ms']:.2f} ms, "
                    f"p95 {row['read_lag_p95_ms']:.2f} ms"
                )
    at_goal = {r["client"]: r["err_p95_ms"] for r in rows if r["streams"] == GOAL_STREAMS}
    if at_goal:
        show(
            f"arrival error p95 at {GOAL_STREAMS} streams: "
            + ", ".join(f"{v:.2f} ms ({k})" for k, v in at_goal.items())
            + f"   (goal < {GOAL_P95_MS:g} ms)"
        )
    return {
        "rows": rows,
        "goal_p95_ms": GOAL_P95_MS,
        "goal_streams": GOAL_STREAMS,
        "p95_at_goal_ms": at_goal.get("tts-knee"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,256", help="concurrent streams per run (default 1,256)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="tts-knee and/or grpcio (default both)")
    parser.add_argument(
        "--step-time",
        type=float,
        help="seconds per run (default 10, or the streams' start at 100 a second and 9 s more: 19 s at 1,000)",
    )
    parser.add_argument(
        "--kernel-lag",
        action="store_true",
        help="tts-knee's reads also note the kernel's receive stamp (bench/kernel_lag.py): the client's own share",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    quiet = (lambda *_: None) if args.json else print
    m = measure(
        [int(s) for s in args.streams.split(",")],
        args.clients.split(","),
        args.step_time,
        show=quiet,
        kernel_lag=args.kernel_lag,
    )
    if args.json:
        print(json.dumps(m))


if __name__ == "__main__":
    main()
