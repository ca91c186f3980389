"""Synthetic run directories with a known shape, for tests and benchmarks.

``build_run(path, Model(...))`` writes ``run.json``, ``requests.jsonl`` and (unless
``resources=False``) ``resources.jsonl`` as the Locust side would, following a simple closed
loop: at each step ``N`` users send requests back to back; the server has ``slots`` parallel
slots, so an attempt's wait is ``base_ms * max(1, N / slots)`` (times a little noise).  The
other knobs add what each diagnosis looks for: GPU/CPU levels, memory creeping, OOM or 500
errors, 429 with Retry-After, client write time rising, a saturated load generator.

With ``continuous=True`` the users behave as Locust's do: steps follow each other without a
gap, the users of one step go on into the next (new ones join at its start), each record
carries the step it was sent in, and attempts still in flight when the run stops are lost.
``client_workers`` adds Locust workers' heartbeat samples (a host each, only the worker
process's CPU); ``post_run_gap_s`` leaves the collector silent that long after the run before
its idle samples.

With ``stream_capacity`` set the responses are streamed, as the simulator's streaming model
makes them: the server produces ``stream_capacity`` audio-seconds per second shared by the
step's ``N`` streams (each at most ``stream_max_speed`` x real time), sends ``chunk_ms`` of audio
per chunk after a ``prefill_ms`` (+ ``prefill_ms_per_stream`` per extra stream) delay, and the
records carry ``ttfa_ms``, the chunk lists and the underruns of the client's own player
(:func:`analysis.playback.listen`, with ``playback_buffer_ms``).  ``truncate_from`` cuts the audio of
``truncate_fraction`` of successful attempts to half from that concurrency on (an integrity
failure).

Every key it writes is declared in :mod:`runformat`: it passes :func:`assert_declared`, the
check every run directory a test makes goes through (``procs`` holds Locust's and the
dashboard's to it).

Example::

    from tests.rundirs import Model, build_run
    build_run(tmp_path / "run", Model(slots=4, gpu_busy_util=97))
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from tts_knee import runformat
from tts_knee.analysis.playback import listen
from tts_knee.runformat.check import undeclared_keys

START = 1_700_000_000.0
GIB = 1024**3

TEXTS = [  # (text_id, tier, text_len)
    ("greeting", "short", 12),
    ("weather", "short", 40),
    ("numbers-zh", "medium", 90),
    ("mixed-emoji", "medium", 140),
    ("story", "long", 600),
    ("news-zh", "long", 420),
]


@dataclass
class Model:
    steps: tuple[int, ...] = (1, 2, 4, 8, 16)
    step_s: float = 12.0
    gap_s: float = 2.0  # idle time between steps (memory falls back in it)
    settle_s: float = 2.0
    slots: int | None = 4  # None: unlimited, latency stays flat
    base_ms: float = 200.0
    noise: float = 0.05  # relative, uniform +-
    tier_factor: dict = field(default_factory=lambda: {"short": 0.6, "medium": 1.0, "long": 1.8})
    ttfb_fraction: float = 0.4
    write_ms: float = 3.0
    write_ms_per_user: float = 0.0  # client_io: write time grows with concurrency
    user_gap_ms: float = 0.0  # client_bound: time users lose between requests
    user_gap_from: int = 0  # ... from this concurrency on
    continuous: bool = False  # users carry on across steps (no gap), as Locust's do
    # resources
    resources: bool = True
    gpu: bool = True
    gpu_busy_util: float = 95.0  # GPU util with all slots busy
    gpu_mem_total: float = 24 * GIB
    gpu_mem_base: float = 6 * GIB
    gpu_mem_per_slot: float = 1 * GIB
    gpu_mem_leak_per_step: float = 0.0
    server_cpu_busy: float = 30.0
    client_cpu_per_user: float = 2.0
    client_cpu_max: float = 100.0
    client_workers: int = 0  # Locust workers sending heartbeat samples (their process's CPU only)
    worker_cpu_per_user: float = 2.0  # % of one core per user on a worker
    post_run_gap_s: float = 0.0  # no collector samples this long after the run ends
    post_run_s: float = 6.0  # collector samples after the last step
    # failures
    rate_limit_from: int | None = None  # 429 + Retry-After from this concurrency on
    error_from: int | None = None  # 500s from this concurrency on
    error_text: str = "500 Internal Server Error: worker crashed"
    error_fraction: float = 0.3
    server_timing: bool = False
    text_ids: list | None = None  # override text ids (e.g. with markup in them)
    in_progress: bool = False  # run.json end null, last step open, last line cut
    bad_lines: int = 0
    seed: int = 1
    # streaming
    stream_capacity: float | None = None  # audio-seconds per second shared by all streams
    stream_max_speed: float | None = None  # one stream's cap, x real time (default: capacity)
    chunk_ms: float = 200.0
    prefill_ms: float = 100.0
    prefill_ms_per_stream: float = 0.0
    playback_buffer_ms: float = 0.0
    ttfa_floor_ms: float | None = None  # run.json option (None: not written, the default applies)
    stream_options: bool = True  # False: run.json from before the streaming options
    truncate_from: int | None = None
    truncate_fraction: float = 0.2
    audio_s_per_char: float = 0.06
    slo: str | None = None  # options.slo, as a run made with --slo records it
    refine_from: int | None = None  # steps from this index on are phase "refine" (else "grid")


def _latency_ms(m: Model, n: int, tier: str, rng: random.Random) -> float:
    load = max(1.0, n / m.slots) if m.slots else 1.0
    return m.base_ms * m.tier_factor.get(tier, 1.0) * load * (1 + rng.uniform(-m.noise, m.noise))


def _stream(m: Model, n: int, audio_s: float, rng: random.Random) -> dict:
    """The streaming fields of one successful attempt (see the module doc)."""
    speed = min(m.stream_max_speed or m.stream_capacity, m.stream_capacity / n) * (1 + rng.uniform(-m.noise, m.noise))
    prefill = m.prefill_ms + m.prefill_ms_per_stream * (n - 1)
    at, audio, done, total = [], [], 0.0, audio_s * 1000
    while done < total - 1e-6:
        c = min(m.chunk_ms, total - done)
        done += c
        at.append(round(prefill + done / speed, 1))
        audio.append(round(c, 3))
    _, stalls = listen(at, audio, m.playback_buffer_ms)  # the client's own player
    under, silence = len(stalls), sum((resumed - dry for dry, resumed in stalls), 0.0)
    gaps = [b - a for a, b in zip(at, at[1:])]
    return {
        "ttfa_ms": at[0],
        "chunks": len(at),
        "gap_max_ms": max(gaps) if gaps else None,
        "underruns": under,
        "underrun_ms": round(silence, 1),
        "chunk_at_ms": at,
        "chunk_audio_ms": audio,
        "wait_ms": at[-1] + 0.5,
    }


def _request(
    m: Model, rng: random.Random, texts, k: int, si: int, n: int, user: int, req: int, now: float, s_start: float
) -> tuple[list[dict], float]:
    """All attempts of one logical request sent at ``now`` in step ``si``: (records, user free at)."""
    out = []
    tid, tier, tlen = texts[k % len(texts)]
    attempt, backoff_ms = 1, 0.0
    while True:
        wait = _latency_ms(m, n, tier, rng)
        status, ok, err, ra = 200, True, None, None
        if m.rate_limit_from and n >= m.rate_limit_from and rng.random() < 1 - m.rate_limit_from / (2 * n):
            status, ok, err = 429, False, "429 Too Many Requests"
            ra = round(0.5 * n / m.rate_limit_from, 2)
            wait = 5.0
        elif m.error_from and n >= m.error_from and rng.random() < m.error_fraction:
            status, ok, err = 500, False, m.error_text
            wait = wait * 0.3
        final = ok or attempt >= 3 or status not in (429, 500, 503)
        write = (m.write_ms + m.write_ms_per_user * n) * (1 + rng.uniform(-m.noise, m.noise)) if ok else None
        audio_s = round(tlen * m.audio_s_per_char, 3) if ok else None
        if ok and m.truncate_from and n >= m.truncate_from and rng.random() < m.truncate_fraction:
            audio_s = round(audio_s / 2, 3)
        stream = _stream(m, n, audio_s, rng) if ok and m.stream_capacity else None
        if stream:
            wait = stream.pop("wait_ms")
        t0 = now
        t2 = t0 + wait / 1000
        t3 = t2 + write / 1000 if write is not None else None
        rec = runformat.attempt(
            req_id=f"w0-{req}",
            attempt=attempt,
            final=final,
            step=si,
            concurrency=n,
            worker="w0",
            user=user,
            text_id=tid,
            text_len=tlen,
            tier=tier,
            t0=t0,
            t1=t0 + (stream["ttfa_ms"] if stream else wait * m.ttfb_fraction) / 1000,
            t2=t2,
            t3=t3,
            ttfb_ms=stream["ttfa_ms"] if stream else wait * m.ttfb_fraction,
            wait_ms=wait,
            write_ms=write,
            status=status,
            ok=ok,
            error=err,
            bytes=int(audio_s * 44100) if ok else 0,
            audio_s=audio_s,
            rtf=(wait / 1000 / audio_s) if ok else None,
            retry_after_s=ra,
            retry_after_raw=None if ra is None else str(ra),
            backoff_ms=backoff_ms,
            settled=t0 >= s_start + m.settle_s,
        )
        if m.stream_capacity:  # every attempt of a streamed run carries the fields, null if unmeasured
            runformat.attempt.update(rec, **(stream or {"chunks": 0, "chunk_at_ms": [], "chunk_audio_ms": []}))
        if m.server_timing and ok:
            infer = m.base_ms * m.tier_factor.get(tier, 1.0) * 0.8
            runformat.attempt.update(
                rec, server_timing={"queue": max(0.0, wait - infer / 0.8), "infer": infer, "postprocess": infer * 0.25}
            )
        out.append(rec)
        now = t3 or t2
        if final:
            break
        backoff_ms = (ra * 1000) if ra else 200.0 * 2 ** (attempt - 1)
        now += backoff_ms / 1000
        attempt += 1
    if m.user_gap_ms and n >= m.user_gap_from:
        now += m.user_gap_ms / 1000
    return out, now


def _continuous(m: Model, rng: random.Random, texts, steps: list[dict]) -> list[dict]:
    """Users that carry on across steps; attempts in flight when the run stops are lost."""
    run_end = steps[-1]["end"]
    records, req = [], 0
    for user in range(max(s["concurrency"] for s in steps)):
        joins = next(s for s in steps if s["concurrency"] > user)
        now, k = joins["start"] + rng.uniform(0, 0.05), user
        while True:
            s = next((x for x in steps if x["start"] <= now < x["end"]), None)
            if s is None:
                break
            req += 1
            recs, now = _request(m, rng, texts, k, s["step"], s["concurrency"], user, req, now, s["start"])
            k += 1
            records += [r for r in recs if (r["t3"] or r["t2"]) <= run_end]  # the rest was killed
    return records


def build_run(path: Path, m: Model | None = None) -> Path:
    """Write a synthetic run directory at ``path``; returns ``path``."""
    m = m or Model()
    rng = random.Random(m.seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    texts = (
        TEXTS
        if m.text_ids is None
        else [(tid, TEXTS[i % len(TEXTS)][1], TEXTS[i % len(TEXTS)][2]) for i, tid in enumerate(m.text_ids)]
    )
    steps, records = [], []
    t = START
    req = 0
    for si, n in enumerate(m.steps, start=1):
        s_start, s_end = t, t + m.step_s
        steps.append(
            runformat.step_entry(
                step=si,
                concurrency=n,
                start=s_start,
                end=s_end,
                phase="refine" if m.refine_from is not None and si > m.refine_from else "grid",
                repeat=m.steps[:si].count(n),
                settle_s=m.settle_s,
            )
        )
        t = s_end + (0.0 if m.continuous else m.gap_s)
        if m.continuous:
            continue
        for user in range(n):
            now = s_start + rng.uniform(0, 0.05)
            k = user
            while True:
                req += 1
                recs, now = _request(m, rng, texts, k, si, n, user, req, now, s_start)
                records += recs
                k += 1
                if now >= s_end:
                    break
    if m.continuous:
        records = _continuous(m, rng, texts, steps)
    run_end = steps[-1]["end"]
    records.sort(key=lambda r: r["t0"])
    if m.in_progress:
        cut = run_end - m.step_s / 2
        records = [r for r in records if (r["t3"] or r["t2"]) <= cut]
        steps[-1]["end"] = None
        run_end = None
    run = runformat.run_info(
        format_version=runformat.FORMAT_VERSION,
        run_id=path.name,
        start=START,
        end=run_end,
        target="http://127.0.0.1:8300",
        options={
            "steps": ",".join(map(str, m.steps)),
            "step_time": m.step_s,
            "slo": m.slo,
            **(
                {
                    "tts_stream": bool(m.stream_capacity),
                    "tts_stream_format": "",
                    "playback_buffer_ms": m.playback_buffer_ms,
                }
                if m.stream_options
                else {}
            ),
            **({"ttfa_floor_ms": m.ttfa_floor_ms} if m.ttfa_floor_ms is not None else {}),
        },
        steps=steps,
        settle_s=m.settle_s,
        workers=[runformat.worker_entry(id="local", offset_s=0.0, rtt_s=0.0)],
        collectors=[
            runformat.collector_entry(
                url="http://127.0.0.1:9300",
                offset_s=0.001,
                rtt_s=0.0004,
                reachable=True,
                gaps=[],
                outages=[],
                samples=0,
                dropped=0,
                restarts=0,
            )
        ]
        if m.resources
        else [],
        versions=runformat.versions(),
    )
    (path / runformat.RUN_JSON).write_text(json.dumps(run, indent=1))
    lines = [json.dumps(r) for r in records]
    for i in range(m.bad_lines):
        lines.insert(1 + i * 7 % max(1, len(lines)), '{"req_id": "broken", "t0": ' if i % 2 else "not json at all")
    text = "\n".join(lines) + "\n"
    if m.in_progress:
        text += json.dumps(records[-1])[:40]  # the writer is half-way through a line
    (path / runformat.REQUESTS).write_text(text)
    if m.resources:
        _write_resources(path, m, steps, run_end or (START + 1e9))
    assert_declared(path)
    return path


def _active(m: Model, steps: list, ts: float) -> int:
    for s in steps:
        end = s["end"] if s["end"] is not None else math.inf
        if s["start"] <= ts < end:
            return s["concurrency"]
    return 0


def _write_resources(path: Path, m: Model, steps: list, run_end: float) -> None:
    last = (
        min(run_end + m.post_run_s, steps[-1]["start"] + m.step_s / 2)
        if steps[-1]["end"] is None
        else run_end + m.post_run_s
    )
    out = []
    ts = START - 3
    while ts <= last:
        if run_end < ts <= run_end + m.post_run_gap_s:
            ts += 1.0
            continue
        n = _active(m, steps, ts)
        done = sum(1 for s in steps if s["end"] is not None and s["end"] <= ts)
        busy = min(n, m.slots) / m.slots if m.slots else min(1.0, n / 16)
        gpus = None
        if m.gpu:
            mem = m.gpu_mem_base + m.gpu_mem_leak_per_step * done + m.gpu_mem_per_slot * (min(n, m.slots or n))
            gpus = [
                runformat.gpu_reading(
                    index=0,
                    uuid="GPU-synthetic",
                    name="Synthetic GPU",
                    lost=False,
                    util_percent=round(m.gpu_busy_util * busy, 1),
                    mem_used_bytes=min(mem, m.gpu_mem_total),
                    mem_total_bytes=m.gpu_mem_total,
                    power_w=80 + 200 * busy,
                    temp_c=50,
                    sm_clock_mhz=1800,
                    clock_event_reasons=[],
                )
            ]
        server_cpu = 3 + m.server_cpu_busy * busy
        out.append(
            runformat.resource_sample(
                ts=ts,
                host="tts-server",
                role="server",
                cpu_percent=server_cpu,
                cpu_max_core_percent=min(100, server_cpu * 2),
                mem_used_bytes=8 * GIB,
                mem_total_bytes=64 * GIB,
                proc=runformat.proc_reading(pid=4242, cpu_percent=server_cpu * 4, rss_bytes=2 * GIB),
                gpus=gpus,
            )
        )
        client_cpu = min(m.client_cpu_max, 2 + m.client_cpu_per_user * n)
        out.append(
            runformat.resource_sample(
                ts=ts + 0.1,
                host="loadgen",
                role="client",
                cpu_percent=client_cpu,
                cpu_max_core_percent=min(100, client_cpu * 1.1),
                mem_used_bytes=2 * GIB,
                mem_total_bytes=16 * GIB,
                gpus=None,
                proc=runformat.proc_reading(pid=999, cpu_percent=client_cpu, rss_bytes=GIB),
            )
        )
        for w in range(m.client_workers):  # the Locust workers' heartbeats, as the master writes them
            users = n // m.client_workers + (1 if w < n % m.client_workers else 0)
            out.append(
                runformat.resource_sample(
                    ts=ts + 0.2,
                    host=f"worker-{w}",
                    role="client",
                    source="locust-heartbeat",
                    gpus=[],
                    proc=runformat.proc_reading(
                        cpu_percent=min(99.0, 1 + m.worker_cpu_per_user * users), rss_bytes=GIB
                    ),
                )
            )
        ts += 1.0
    (path / runformat.RESOURCES).write_text("".join(json.dumps(s) + "\n" for s in out))


# One model per diagnosis kind, with the knee and recommendation each should produce.
SCENARIOS = {
    "no_knee": (Model(slots=None, gpu_busy_util=40), None, 16),
    "compute_bound": (Model(slots=4, gpu_busy_util=97), 8, 4),
    "concurrency_limit": (Model(slots=4, gpu_busy_util=30), 8, 4),
    "rate_limited": (Model(slots=None, gpu_busy_util=40, rate_limit_from=8), 8, 4),
    "memory_bound": (
        Model(
            slots=None,
            gpu_busy_util=60,
            error_from=8,
            error_fraction=0.4,
            error_text="CUDA out of memory. Tried to allocate 2.00 GiB",
            gpu_mem_base=20 * GIB,
            gpu_mem_per_slot=0.25 * GIB,
        ),
        8,
        4,
    ),
    "client_io": (Model(slots=None, gpu_busy_util=40, write_ms_per_user=80), 4, 2),
    "client_bound": (Model(slots=4, gpu_busy_util=40, client_cpu_per_user=20, user_gap_ms=400, user_gap_from=8), 8, 4),
    "server_errors": (Model(slots=None, gpu_busy_util=40, error_from=8, error_fraction=0.3), 8, 4),
}


def assert_declared(run_dir: Path) -> None:
    """Every key in the run directory's files is declared in :mod:`runformat`
    (:func:`runformat.check.undeclared_keys`); the failure lists the first ones that are not."""
    bad = undeclared_keys(run_dir)
    assert not bad, (
        f"{run_dir} holds {len(bad)} keys runformat does not declare: "
        + ", ".join(bad[:20])
        + (" …" if len(bad) > 20 else "")
    )
