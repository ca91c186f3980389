"""What WebSocket sessions cost tts-knee's client against its HTTP stream path: CPU per chunk,
and how late each chunk's arrival is stamped against the simulator's own send time, at 256
sessions, the two run side by side.

Run from the repository root (about a minute)::

    .venv/bin/python bench/session_cost.py
    .venv/bin/python bench/session_cost.py --sessions 64 --pairs 3 --modes session
    .venv/bin/python bench/session_cost.py --sessions 1000 --modes session   # a thousand per worker
    .venv/bin/python bench/session_cost.py --sessions 256 --modes grpc   # gRPC streams beside HTTP's
    .venv/bin/python bench/session_cost.py --json      # one JSON object instead of the table

One simulator shares 2 S x real time, at most 1x each (``--capacity 2S --max-speed 1
--chunk-ms 200 --prefill-ms 100``), so each of 2 S streams gets a 200 ms chunk every 200 ms.
Each pair starts two headless ``locust`` processes at the same time against it: S users over
HTTP (a WAV stream per request, bench/stream_locustfile.py) and S sessions over WebSocket in
vLLM-Omni's dialect (bench/session_locustfile.py), each session on one connection (mode
``session``, as vLLM-Omni since its PR #5517, Deepgram and Cartesia keep it) or opening one per utterance
(mode ``utterance``, as the shipped preset does for older servers); mode ``grpc`` runs S gRPC
streams in Riva's dialect (bench/grpc_locustfile.py, the simulator's ``--grpc-port``) in the
sessions' place, for gRPC's CPU per chunk against HTTP's (its arrivals are timed alone by
bench/grpc_cost.py). bench/meter.py reads each
process's CPU time over the same window, so the host's other load falls on both alike. Then
the S sessions run alone against a simulator of their own, for their timing (two processes
at 256 streams each on two cores time each other's load). The simulator's ``--chunk-log``
gives the time each audio write had been handed to its socket, matched to the client arrival
that completed its audio::

    pair                 kind  sessions  chunks/s  CPU_us/chunk  err_p50_ms  err_p95_ms  err_max_ms  attempts
       1                 http       256    1302.3          95.2        0.07        0.72       74.85       857
       1           ws session       256    1299.1         113.4        0.12        0.83        3.87       850
       -     ws session alone       256    1308.2         108.0        0.19        0.79        4.21       851
       1                 http       256    1304.0         101.0        0.06        0.91        5.43       854
       1         ws utterance       256    1301.6         166.4        0.10        0.88       68.41       852
       -   ws utterance alone       256    1304.4         166.7        0.14        0.78       86.00       850
    CPU per chunk, ws session / http (median of 1 pairs): 1.19x, pairs 1.19-1.19   (goal <= 1.2x)
    WebSocket arrival error p95 at 256 sessions, session, alone: 0.79 ms (goal < 5 ms)
    CPU per chunk, ws utterance / http (median of 1 pairs): 1.65x, pairs 1.65-1.65   (no goal: a connection per turn)
    WebSocket arrival error p95 at 256 sessions, utterance, alone: 0.78 ms (goal < 5 ms)

(The table has four more columns, the Locust process's file descriptors, the resident memory each
user added, its CPU in % of one core and whether tts-knee would call it client_bound; at 1,000
sessions see docs/benchmarks-and-tests.md.) ``err`` is client arrival minus server send, in ms. CPU per chunk is the
Locust process's CPU
time (user + system) over the window divided by the chunks that arrived in it: everything the
client does per chunk, its share of each utterance's connection and text included.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from harness import (
    PROCESS_HEAD,
    ROOT,
    LocustRun,
    locust,
    median,
    percentile,
    process_columns,
    process_figures,
    simulator,
)
from stream_cost import RATE, TEXTS, arrivals_in, chunk_errors

GOAL_RATIO = 1.2
GOAL_P95_MS = 5.0
#: Seconds from launching a pair until both processes measure: both have started their users
#: (and a second more per 200 sessions, which connect one after another).
START_S = 6.0
CHUNK_MS = 200.0


def start_s(sessions: int) -> float:
    return START_S + sessions / 200.0


def one_pair(host: str, sessions: int, measure_s: float, texts: Path, preset: str, grpc_host: str = "") -> dict:
    """Both kinds at once over one window: ``{"http": reading, "ws": reading}`` (with
    ``grpc_host``, gRPC streams in Riva's dialect instead of the WebSocket sessions)."""
    start_at = time.time() + start_s(sessions)
    run_s = start_s(sessions) + measure_s + 2.0
    common = [
        "-H",
        host,
        "--steps",
        str(sessions),
        "--step-time",
        f"{run_s:g}",
        "--settle-time",
        "0",
        "--run-dir",
        "{tmp}/run",
        "--texts",
        str(texts),
        "--skip-preflight",
        "--tts-sample-rate",
        str(RATE),
    ]
    kinds = {
        "http": ("bench/stream_locustfile.py", [*common, "--tts-stream"]),
        "ws": ("bench/session_locustfile.py", [*common, "--tts-protocol", "ws", "--tts-preset", preset]),
    }
    if grpc_host:
        grpc = ["-H", grpc_host, *common[2:], "--tts-protocol", "grpc", "--tts-preset", "riva", "--tts-stream"]
        kinds["ws"] = ("bench/grpc_locustfile.py", grpc)
    with ThreadPoolExecutor(2) as pool:
        runs = {
            kind: pool.submit(locust, f, args, 0.0, measure_s, timeout=60 + run_s, start_at=start_at)
            for kind, (f, args) in kinds.items()
        }
        return {kind: run.result() for kind, run in runs.items()} | {"start_at": start_at}


def _sent(log: Path) -> dict:
    """The simulator's chunk log by the id the records carry: HTTP's request id, and a WebSocket
    utterance's "connection id/utterance number"."""
    out = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        key = entry.get("request_id")
        out[key if entry.get("protocol") != "ws" else f"{key}/{entry['utterance']}"] = entry
    return out


def figures(reading: LocustRun, sent: dict[str, dict[str, Any]], start_at: float) -> dict:
    every = reading.get("records") or []
    measured = [x for x in every if x["ok"] and x.get("chunk_at_ms") and x["t0"] >= start_at]
    if not measured:
        raise RuntimeError(
            f"a run left no streamed attempts (exit {reading['returncode']}):\n{reading['output'][-2000:]}"
        )
    errors = []
    for rec in measured:
        request_id = rec.get("sim_request_id")
        entry = sent.get(request_id) if request_id else None
        if entry:
            errors += chunk_errors(rec, entry)
    chunks_per_s = arrivals_in(every, start_at, reading.get("wall_s") or 0.0)
    cpu_us = (
        1e6 * reading["cpu_s"] / reading["wall_s"] / chunks_per_s if reading.get("wall_s") and chunks_per_s else None
    )
    return {
        "attempts": len(measured),
        "chunks_per_s": chunks_per_s,
        "cpu_us_per_chunk": cpu_us,
        "matched_chunks": len(errors),
        "err_p50_ms": percentile(errors, 0.5),
        "err_p95_ms": percentile(errors, 0.95),
        "err_max_ms": max(errors, default=float("nan")),
        **process_figures(reading),
    }


def timing(sessions: int, measure_s: float, texts: Path, preset: str, log: Path) -> dict:
    """The WebSocket sessions alone (as bench/stream_cost.py times the HTTP streams): their
    arrivals against the simulator's sends, without a second process on the host's cores."""
    knobs = [
        "--capacity",
        str(sessions),
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
    with simulator(*knobs) as (host, _sim):
        start_at = time.time() + start_s(sessions)
        args = [
            "-H",
            host,
            "--steps",
            str(sessions),
            "--step-time",
            f"{start_s(sessions) + measure_s + 2:g}",
            "--settle-time",
            "0",
            "--run-dir",
            "{tmp}/run",
            "--texts",
            str(texts),
            "--skip-preflight",
            "--tts-sample-rate",
            str(RATE),
            "--tts-protocol",
            "ws",
            "--tts-preset",
            preset,
        ]
        reading = locust(
            "bench/session_locustfile.py",
            args,
            0.0,
            measure_s,
            timeout=60 + start_s(sessions) + measure_s,
            start_at=start_at,
        )
    return figures(reading, _sent(log), start_at)


def _row(show, pair, kind: str, sessions: int, row: dict) -> None:
    cpu = "-" if row["cpu_us_per_chunk"] is None else f"{row['cpu_us_per_chunk']:.1f}"
    show(
        f"{pair:>4} {kind:>20} {sessions:>9} {row['chunks_per_s']:>9.1f} {cpu:>13} {row['err_p50_ms']:>11.2f} "
        f"{row['err_p95_ms']:>11.2f} {row['err_max_ms']:>11.2f} {row['attempts']:>9} {process_columns(row)}"
    )


#: --modes: the WebSocket session kept across utterances (as Deepgram, Cartesia and vLLM-Omni since #5517
#: keep it), or one connection per utterance (as vLLM-Omni's preset, sglang-omni and ElevenLabs); or
#: (asked for by name) gRPC streams, Riva's SynthesizeOnline, in the WebSocket sessions' place.
MODES = ("session", "utterance")
GRPC = "grpc"


class ModeFigures(TypedDict):
    """One mode's figures in :func:`measure`'s result."""

    ratio: float  # CPU per chunk against HTTP streams, median of the pairs
    ratios: list[float]  # each pair's
    err_p95_ms: float  # the sessions alone (NaN for gRPC, timed by bench/grpc_cost.py)


def measure(sessions: int = 256, pairs: int = 2, measure_s: float = 8.0, modes=MODES, show=print) -> dict:
    show(
        f"{'pair':>4} {'kind':>20} {'sessions':>9} {'chunks/s':>9} {'CPU_us/chunk':>13} {'err_p50_ms':>11} "
        f"{'err_p95_ms':>11} {'err_max_ms':>11} {'attempts':>9} {PROCESS_HEAD}"
    )
    rows: list[dict[str, Any]] = []
    out: dict[str, ModeFigures] = {}
    with tempfile.TemporaryDirectory(prefix="tts-knee-sessions-") as tmp:
        texts, log = Path(tmp) / "texts.txt", Path(tmp) / "chunks.jsonl"
        texts.write_text("\n".join(TEXTS) + "\n")
        reusing = Path(tmp) / "vllm-omni-session.toml"
        reusing.write_text(
            (ROOT / "configs" / "presets" / "vllm-omni.toml").read_text().replace("reuse = false", "reuse = true")
        )
        presets = {"session": str(reusing), "utterance": "vllm-omni"}
        knobs = [
            "--capacity",
            str(2 * sessions),
            "--max-speed",
            "1",
            "--chunk-ms",
            f"{CHUNK_MS:g}",
            "--prefill-ms",
            "100",
            "--stream",
            "--chunk-log",
            str(log),
            "--sample-rate",
            str(RATE),
        ]
        for mode in modes:
            ratios: list[float] = []
            urls: dict[str, str] = {}
            grpc_knobs = ("--grpc-port", "0") if mode == GRPC else ()
            with simulator(*knobs, *grpc_knobs, scheme="grpc" if grpc_knobs else "http", urls=urls) as (_, _sim):
                for pair in range(1, pairs + 1):
                    readings = one_pair(
                        urls["http"], sessions, measure_s, texts, presets.get(mode, ""), urls.get("grpc", "")
                    )
                    sent = _sent(log)
                    figs = {kind: figures(readings[kind], sent, readings["start_at"]) for kind in ("http", "ws")}
                    for kind, row in figs.items():
                        label = "http" if kind == "http" else (GRPC if mode == GRPC else f"ws {mode}")
                        rows.append({"pair": pair, "kind": label, "sessions": sessions, **row})
                        _row(show, pair, label, sessions, row)
                    if figs["ws"]["cpu_us_per_chunk"] and figs["http"]["cpu_us_per_chunk"]:
                        ratios.append(figs["ws"]["cpu_us_per_chunk"] / figs["http"]["cpu_us_per_chunk"])
            if mode == GRPC:  # timed alone by bench/grpc_cost.py
                out[mode] = {"ratio": median(ratios), "ratios": ratios, "err_p95_ms": float("nan")}
                continue
            alone = timing(sessions, measure_s, texts, presets[mode], Path(tmp) / f"alone-{mode}.jsonl")
            rows.append({"pair": None, "kind": f"ws {mode} alone", "sessions": sessions, **alone})
            _row(show, "-", f"ws {mode} alone", sessions, alone)
            out[mode] = {"ratio": median(ratios), "ratios": ratios, "err_p95_ms": alone["err_p95_ms"]}
    for mode, m in out.items():
        goal = f"goal <= {GOAL_RATIO:g}x" if mode != "utterance" else "no goal: a connection per turn"
        name = GRPC if mode == GRPC else f"ws {mode}"
        show(
            f"CPU per chunk, {name} / http (median of {len(m['ratios'])} pairs): {m['ratio']:.2f}x"
            + (f", pairs {min(m['ratios']):.2f}-{max(m['ratios']):.2f}" if m["ratios"] else "")
            + f"   ({goal})"
        )
        if mode == GRPC:
            continue
        show(
            f"WebSocket arrival error p95 at {sessions} sessions, {mode}, alone: {m['err_p95_ms']:.2f} ms "
            f"(goal < {GOAL_P95_MS:g} ms)"
        )
    return {"rows": rows, "modes": out, "goal_ratio": GOAL_RATIO, "goal_p95_ms": GOAL_P95_MS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256, help="sessions (and HTTP streams) per kind (256)")
    parser.add_argument("--pairs", type=int, default=2, help="pairs run side by side (2)")
    parser.add_argument("--measure", type=float, default=8.0, help="seconds measured per pair (8)")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="session (one connection per session), utterance (one per utterance) and/or grpc (gRPC streams, "
        "Riva's, beside the HTTP streams) (session,utterance)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    quiet = (lambda *_: None) if args.json else print
    m = measure(args.sessions, args.pairs, args.measure, tuple(args.modes.split(",")), show=quiet)
    if args.json:
        print(json.dumps(m))


if __name__ == "__main__":
    main()
