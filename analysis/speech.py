"""What the ASR judge heard (``speech.jsonl``, written by the load generator's judge:
:mod:`locustfiles.listening`), per step and per level, and the speech knee.

**Per step** (``speech``): the clips judged at the step, their mean and p95 error rate (``wer_*``
or ``cer_*`` by the run's metric), ``unintelligible`` (judged above
:data:`audio.asr.UNINTELLIGIBLE`), ``not_judged``, and the :data:`WORST` worst as text to read.

**The speech knee** (knee method ``speech``): the first level whose speech is *significantly*
worse than the lowest level's. Its clips are paired with the lowest level's by text (every step
judges the same texts); the mean of the paired differences in error rate gets a 95 % bootstrap
interval (:data:`BOOTSTRAP` resamples, a fixed seed: the same records give the same verdict), and
the level is a knee when the interval's lower end is above :data:`MIN_RISE` (two points of error
rate: below it, a recogniser's own noise on a voice that varies from call to call). At least
:data:`MIN_PAIRS` pairs are needed to judge a level at all. A level is one of the run's axis
(:mod:`analysis.axis`): a concurrency, an offered rate or a number of voices.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tts_knee import runformat
from tts_knee.audio.asr import UNINTELLIGIBLE

WORST = 3
MIN_RISE = 0.02
MIN_PAIRS = 4
BOOTSTRAP = 2000
SEED = 20261201


def read(path: Path) -> list[dict[str, Any]]:
    """The judge's lines of a run directory (``speech.jsonl``); lines that do not parse (one
    cut by a crash) are skipped. [] when there is no such file."""
    try:
        raw = (Path(path) / runformat.SPEECH_FILE).read_bytes()
    except OSError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("req_id"), str):
            out.append(e)
    return out


def _rate(e: dict[str, Any]) -> float | None:
    v = e.get("error")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def summarise(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One step's (or level's) ``speech`` from its judge lines; None when it had none."""
    if not entries:
        return None
    judged = [e for e in entries if _rate(e) is not None]
    metrics = [e.get("metric") for e in judged if e.get("metric") in ("wer", "cer")]
    metric = max(set(metrics), key=metrics.count) if metrics else "wer"
    rates = np.array([_rate(e) for e in judged], dtype=float)
    mean = float(rates.mean()) if len(rates) else None
    p95 = float(np.percentile(rates, 95)) if len(rates) else None
    worst = sorted(judged, key=lambda e: -(_rate(e) or 0.0))[:WORST]
    return {
        "metric": metric,
        "judged": len(judged),
        "not_judged": len(entries) - len(judged),
        "wer_mean": mean if metric == "wer" else None,
        "wer_p95": p95 if metric == "wer" else None,
        "cer_mean": mean if metric == "cer" else None,
        "cer_p95": p95 if metric == "cer" else None,
        "unintelligible": int((rates > UNINTELLIGIBLE).sum()),
        "worst": [
            {
                "req_id": e["req_id"],
                "text_id": e.get("text_id"),
                "text": e.get("text"),
                "transcript": e.get("transcript"),
                "error": _rate(e),
                "clip": e.get("clip"),
            }
            for e in worst
        ],
    }


def by_step(entries: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        if isinstance(e.get("step"), int):
            out.setdefault(e["step"], []).append(e)
    return out


def attach(steps: list[dict[str, Any]], levels: list[dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    """Set ``speech`` on every step and level (levels pool their steps' clips)."""
    grouped = by_step(entries)
    for st in steps:
        st["speech"] = summarise(grouped.get(st["step"], []))
    for lv in levels:
        nums = lv.get("steps") or ([lv["step"]] if lv.get("step") is not None else [])
        lv["speech"] = summarise([e for n in nums for e in grouped.get(n, [])])
        lv["_speech_entries"] = [e for n in nums for e in grouped.get(n, [])]


def _by_text(entries: list[dict[str, Any]]) -> dict[str, float]:
    """Each text's mean error rate over its judged clips."""
    sums: dict[str, list[float]] = {}
    for e in entries:
        r = _rate(e)
        if r is not None and e.get("text_id") is not None:
            sums.setdefault(e["text_id"], []).append(r)
    return {t: sum(v) / len(v) for t, v in sums.items()}


def paired_rise(low: list[dict[str, Any]], high: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rise in error rate from ``low``'s clips to ``high``'s, paired by text: ``{pairs, mean,
    ci: [lo, hi]}``; None with fewer than MIN_PAIRS pairs."""
    a, b = _by_text(low), _by_text(high)
    common = sorted(a.keys() & b.keys())
    if len(common) < MIN_PAIRS:
        return None
    d = np.array([b[t] - a[t] for t in common])
    rng = np.random.default_rng(SEED)
    means = d[rng.integers(0, len(d), size=(BOOTSTRAP, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"pairs": len(common), "mean": float(d.mean()), "ci": [float(lo), float(hi)]}


def knee_index(levels: list[dict[str, Any]]) -> tuple[int | None, list[dict[str, Any] | None]]:
    """The first level whose speech is significantly worse than the lowest's (see the module
    doc), and each level's paired rise (None where it could not be judged)."""
    done = [lv for lv in levels if lv.get("requests")]
    if not done:
        return None, []
    base = done[0].get("_speech_entries") or []
    rises = [None] + [paired_rise(base, lv.get("_speech_entries") or []) for lv in done[1:]]
    k = next((i for i, r in enumerate(rises) if r is not None and r["ci"][0] > MIN_RISE), None)
    return k, rises


def strip(levels: list[dict[str, Any]]) -> None:
    for lv in levels:
        lv.pop("_speech_entries", None)


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f} %"
