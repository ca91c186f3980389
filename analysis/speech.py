"""What the ASR judge heard (``speech.jsonl``, written by the load generator's judge:
:mod:`locustfiles.listening`), per step and per level, and the speech knee.

**Per step** (``speech``): the clips judged at the step, their mean and p95 error rate (``wer_*``
or ``cer_*`` by the run's metric), ``unintelligible`` (judged above
:data:`audio.asr.UNINTELLIGIBLE`), ``not_judged``, of them ``behind`` (left unjudged because the
judge fell behind: its queue full, or the run's end done waiting), ``judge_cpu_s`` (the judge's
CPU seconds on the judged clips), and the :data:`WORST` worst as text to read.

**The speech knee** (knee method ``speech``): the first level whose speech is *significantly*
worse than the lowest level's. Its clips are paired with the lowest level's by text (every step
judges the same texts); the mean of the paired differences in error rate gets a 95 % bootstrap
interval (:data:`BOOTSTRAP` resamples, a fixed seed: the same records give the same verdict), and
the level is a knee when the interval's lower end is above :data:`MIN_RISE` (two points of error
rate: below it, a recogniser's own noise on a voice that varies from call to call). At least
:data:`MIN_PAIRS` pairs are needed to judge a level at all. A level is one of the run's axis
(:mod:`analysis.axis`): a concurrency, an offered rate or a number of voices.

**Voice and sound** (unless ``--asr-words-only``): per step ``similarity_mean``/``_p5`` (each clip's
speaker embedding against the same text's at the lowest level: 1 there by definition) and ``mos_mean``/
``_p5`` (DNSMOS OVRL). Knee methods ``similarity`` and ``mos`` pair the clips by text the same way
and ask the same of the drop's interval: its lower end above :data:`MIN_SIMILARITY_DROP` (0.2 of
cosine: the same voice re-rendered, even under noise at 20 dB SNR, stays within about 0.1 of
itself with this encoder; another speaker falls 0.35-0.6) or :data:`MIN_MOS_DROP` (0.3 MOS: about
the smallest difference a listening test tells apart, and above DNSMOS's own spread on one voice,
a few hundredths).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tts_knee import runformat
from tts_knee.audio import hearing
from tts_knee.audio.asr import UNINTELLIGIBLE
from tts_knee.runformat.summary import Judged

WORST = 3
MIN_RISE = 0.02
MIN_PAIRS = 4
BOOTSTRAP = 2000
SEED = 20261201
MIN_SIMILARITY_DROP = 0.2
MIN_MOS_DROP = 0.3


def judged_texts(ids: list[str], count: int) -> frozenset[str]:
    """``count`` of the texts ``ids`` (in corpus order) spread evenly over them, every k-th (all
    of them when there are no more): the texts the judge hears at every step (``--asr-sample``)."""
    ids = list(dict.fromkeys(ids))
    if count >= len(ids):
        return frozenset(ids)
    return frozenset(ids[int(index * len(ids) / count)] for index in range(count))


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
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("req_id"), str):
            out.append(entry)
    return out


def _rate(entry: dict[str, Any]) -> float | None:
    value = entry.get("error")
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


#: The start of the reasons :mod:`locustfiles.listening` gives for a clip the judge had no time for.
BEHIND = ("not judged: the judge was behind", "not judged: the run's end waited")
#: The reason of a clip kept for ``tts-knee judge`` (--asr-keep) and not judged yet: no step's
#: figure counts it.
KEPT = "kept, not judged yet (--asr-keep): tts-knee judge RUN_DIR judges it"


def is_kept(entry: dict[str, Any]) -> bool:
    """Whether a judge line is a clip kept for later (:data:`KEPT`), not a verdict."""
    return entry.get("reason") == KEPT


def json_object(value: object) -> dict[str, Any]:
    """``value`` where it is a JSON object, else {}."""
    return value if isinstance(value, dict) else {}


def judged(lines: list[dict[str, Any]], run: dict[str, Any]) -> Judged:
    """The summary's ``judge``: what the judge heard of the clips (read off their lines: their
    error rates, their similarity, their MOS), and from ``run`` (run.json) why the voice and the
    sound went unheard, the model and whether it judged afterwards."""
    kept = sum(1 for entry in lines if is_kept(entry))
    lines = [entry for entry in lines if not is_kept(entry)]
    count = sum(1 for entry in lines if _rate(entry) is not None)
    heard = [
        what
        for what, there in (
            (hearing.WORDS, count > 0),
            (hearing.VOICE, any("similarity" in entry for entry in lines)),
            (hearing.SOUND, any("mos" in entry for entry in lines)),
        )
        if there
    ]
    said, options = json_object(run.get("speech")), json_object(run.get("options"))
    model: str | None = said.get("model") or options.get("asr_model") or None
    afterwards = bool(said.get("afterwards"))
    not_heard = None if hearing.VOICE in heard or not count else said.get("not_heard")
    text = _judged_text(heard, count, not_heard, model, afterwards)
    if kept:
        text = f"{_clips(kept)} kept, not judged yet: tts-knee judge RUN_DIR judges them" + (
            f"; {text}" if count else ""
        )
    return {
        "heard": heard,
        "not_heard": not_heard,
        "kept": kept,
        "model": model,
        "afterwards": afterwards,
        "text": text,
    }


def _clips(count: int) -> str:
    return f"{count} clip" if count == 1 else f"{count} clips"


def _judged_text(heard: list[str], count: int, not_heard: str | None, model: str | None, afterwards: bool) -> str:
    """What the judge heard, in one sentence (see :func:`judged`)."""
    if not count:
        return "the judge heard no clip"
    named = {hearing.WORDS: "the words", hearing.VOICE: "the voice", hearing.SOUND: "the sound"}
    parts = [named[what] for what in heard]
    what = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    when = "after the run, by tts-knee judge" if afterwards else "during the run"
    said = f"the judge heard {what} of {_clips(count)}" + (f" (model {Path(model).name}, {when})" if model else "")
    if hearing.VOICE in heard:
        return said
    return f"{said}, not the voice and the sound: {not_heard or 'the run did not listen for them'}"


def _cpu(entry: dict[str, Any]) -> float:
    value = entry.get("judge_s")
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else 0.0
    )


def summarise(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One step's (or level's) ``speech`` from its judge lines; None when it had none."""
    if not entries:
        return None
    judged = [entry for entry in entries if _rate(entry) is not None]
    metrics = [entry.get("metric") for entry in judged if entry.get("metric") in ("wer", "cer")]
    metric = max(set(metrics), key=metrics.count) if metrics else "wer"
    rates = np.array([_rate(entry) for entry in judged], dtype=float)
    mean = float(rates.mean()) if len(rates) else None
    p95 = float(np.percentile(rates, 95)) if len(rates) else None
    worst = sorted(judged, key=lambda entry: -(_rate(entry) or 0.0))[:WORST]
    return {
        **listened(entries),
        "metric": metric,
        "judged": len(judged),
        "not_judged": len(entries) - len(judged),
        "behind": sum(1 for entry in entries if str(entry.get("reason") or "").startswith(BEHIND)),
        "judge_cpu_s": round(sum(_cpu(entry) for entry in judged), 3),
        "wer_mean": mean if metric == "wer" else None,
        "wer_p95": p95 if metric == "wer" else None,
        "cer_mean": mean if metric == "cer" else None,
        "cer_p95": p95 if metric == "cer" else None,
        "unintelligible": int((rates > UNINTELLIGIBLE).sum()),
        "worst": [
            {
                "req_id": entry["req_id"],
                "text_id": entry.get("text_id"),
                "text": entry.get("text"),
                "transcript": entry.get("transcript"),
                "error": _rate(entry),
                "clip": entry.get("clip"),
            }
            for entry in worst
        ],
    }


def _number(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def _p5(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 5)), 4) if values else None


def listened(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The voice and sound figures of a step's judge lines ({} when none was listened to)."""
    heard = [entry for entry in entries if "mos" in entry or "similarity" in entry]
    if not heard:
        return {}
    sims = [value for entry in heard if (value := _number(entry, "similarity")) is not None]
    moses = [value for entry in heard if (value := _number(entry, "mos")) is not None]
    alike = sorted(
        (entry for entry in heard if _number(entry, "similarity") is not None), key=lambda entry: entry["similarity"]
    )
    return {
        "similarity_mean": _mean(sims),
        "similarity_p5": _p5(sims),
        "similarity_ref_mean": _mean(
            [value for entry in heard if (value := _number(entry, "similarity_ref")) is not None]
        ),
        "mos_mean": _mean(moses),
        "mos_p5": _p5(moses),
        "mos_sig_mean": _mean([value for entry in heard if (value := _number(entry, "mos_sig")) is not None]),
        "mos_bak_mean": _mean([value for entry in heard if (value := _number(entry, "mos_bak")) is not None]),
        "not_listened": sum(
            1 for entry in heard if _number(entry, "similarity") is None or _number(entry, "mos") is None
        ),
        "worst_similarity": [
            {
                "req_id": entry["req_id"],
                "text_id": entry.get("text_id"),
                "text": entry.get("text"),
                "similarity": entry["similarity"],
                "similarity_ref": _number(entry, "similarity_ref"),
                "mos": _number(entry, "mos"),
                "clip": entry.get("clip"),
            }
            for entry in alike[:WORST]
        ],
    }


def resimilar(entries: list[dict[str, Any]], lowest: set[int] | None = None) -> list[dict[str, Any]]:
    """The judge lines with ``similarity`` recomputed against each text's clip at the lowest level
    of the run's axis (``lowest``: its steps; without them, the lowest concurrency). The judge
    wrote it against the lowest concurrency heard so far, the same in a closed loop whose steps
    ascend."""
    base: dict[str, tuple[tuple[bool, float], np.ndarray]] = {}
    for entry in entries:
        emb, concurrency = entry.get("embedding"), entry.get("concurrency")
        if isinstance(emb, list) and emb and isinstance(concurrency, (int, float)) and entry.get("text_id") is not None:
            rank = (lowest is not None and entry.get("step") not in lowest, float(concurrency))
            if entry["text_id"] not in base or rank < base[entry["text_id"]][0]:
                base[entry["text_id"]] = (rank, np.asarray(emb, dtype=float))
    out = []
    for entry in entries:
        emb = entry.get("embedding")
        ref = base.get(entry["text_id"]) if entry.get("text_id") is not None else None
        if isinstance(emb, list) and emb and ref is not None:
            vector = np.asarray(emb, dtype=float)
            entry = {
                **entry,
                "similarity": round(
                    float(vector @ ref[1] / (np.linalg.norm(vector) * np.linalg.norm(ref[1]) + 1e-12)), 4
                ),
            }
        out.append(entry)
    return out


def by_step(entries: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        if isinstance(entry.get("step"), int):
            out.setdefault(entry["step"], []).append(entry)
    return out


def _steps_of(level: dict[str, Any]) -> list[int]:
    return list(level.get("steps") or ([level["step"]] if level.get("step") is not None else []))


def attach(steps: list[dict[str, Any]], levels: list[dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    """Set ``speech`` on every step and level (levels pool their steps' clips; ``levels`` run
    along the axis, the first with requests the one ``similarity`` compares with)."""
    first = next((level for level in levels if level.get("requests")), None)
    grouped = by_step(resimilar(entries, None if first is None else set(_steps_of(first))))
    for step in steps:
        step["speech"] = summarise(grouped.get(step["step"], []))
    for level in levels:
        nums = _steps_of(level)
        level["speech"] = summarise([entry for number in nums for entry in grouped.get(number, [])])
        level["_speech_entries"] = [entry for number in nums for entry in grouped.get(number, [])]


def _by_text(entries: list[dict[str, Any]]) -> dict[str, float]:
    """Each text's mean error rate over its judged clips."""
    sums: dict[str, list[float]] = {}
    for entry in entries:
        rate = _rate(entry)
        if rate is not None and entry.get("text_id") is not None:
            sums.setdefault(entry["text_id"], []).append(rate)
    return {text_id: sum(rates) / len(rates) for text_id, rates in sums.items()}


def _by_text_of(entries: list[dict[str, Any]], key: str) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for entry in entries:
        value = _number(entry, key)
        if value is not None and entry.get("text_id") is not None:
            sums.setdefault(entry["text_id"], []).append(value)
    return {text_id: sum(values) / len(values) for text_id, values in sums.items()}


def paired_rise(low: list[dict[str, Any]], high: list[dict[str, Any]], key: str = "error") -> dict[str, Any] | None:
    """The rise in error rate (or another figure, ``key``) from ``low``'s clips to ``high``'s,
    paired by text: ``{pairs, mean, ci: [lo, hi]}``; None with fewer than MIN_PAIRS pairs."""
    low_means, high_means = (
        (_by_text(low), _by_text(high)) if key == "error" else (_by_text_of(low, key), _by_text_of(high, key))
    )
    common = sorted(low_means.keys() & high_means.keys())
    if len(common) < MIN_PAIRS:
        return None
    differences = np.array([high_means[text_id] - low_means[text_id] for text_id in common])
    rng = np.random.default_rng(SEED)
    means = differences[rng.integers(0, len(differences), size=(BOOTSTRAP, len(differences)))].mean(axis=1)
    ci_low, ci_high = np.percentile(means, [2.5, 97.5])
    return {"pairs": len(common), "mean": float(differences.mean()), "ci": [float(ci_low), float(ci_high)]}


def knee_index(levels: list[dict[str, Any]]) -> tuple[int | None, list[dict[str, Any] | None]]:
    """The first level whose speech is significantly worse than the lowest's (see the module
    doc), and each level's paired rise (None where it could not be judged)."""
    done = [level for level in levels if level.get("requests")]
    if not done:
        return None, []
    base = done[0].get("_speech_entries") or []
    rises = [None] + [paired_rise(base, level.get("_speech_entries") or []) for level in done[1:]]
    knee_at = next(
        (level_index for level_index, rise in enumerate(rises) if rise is not None and rise["ci"][0] > MIN_RISE), None
    )
    return knee_at, rises


def drop_index(levels: list[dict[str, Any]], key: str) -> tuple[int | None, list[dict[str, Any] | None]]:
    """Knee methods ``similarity`` and ``mos``: the first level whose ``key`` (``similarity`` or
    ``mos``) dropped from the lowest level's by more than its margin (see the module doc), paired by
    text, and each level's drop (None where it could not be judged; [] when nothing was heard)."""
    done = [level for level in levels if level.get("requests")]
    if not done or not any(
        _number(entry, key) is not None for level in done for entry in level.get("_speech_entries") or []
    ):
        return None, []
    base = done[0].get("_speech_entries") or []
    drops: list[dict[str, Any] | None] = [None]
    for level in done[1:]:
        rise = paired_rise(level.get("_speech_entries") or [], base, key)  # base - level: a drop
        drops.append(rise)
    margin = MIN_SIMILARITY_DROP if key == "similarity" else MIN_MOS_DROP
    knee_at = next(
        (level_index for level_index, drop in enumerate(drops) if drop is not None and drop["ci"][0] > margin), None
    )
    return knee_at, drops


def strip(levels: list[dict[str, Any]]) -> None:
    for level in levels:
        level.pop("_speech_entries", None)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"
