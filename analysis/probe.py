"""What the server did with each class of hostile text (``--probe-texts``; the classes are
:data:`runformat.probe.CLASSES`): the probe steps' requests, each by its final attempt, as one of
the outcomes (:class:`runformat.summary.Outcome`):

- ``audio``: it answered with audio; ``wrong_length`` counts those of 20 characters or more
  whose audio per character is a runaway or truncated one against the sweep's own pace
  (:data:`audio.signal.RUNAWAY_X`, :data:`audio.signal.TRUNCATED_X`);
- ``refused``: a 4xx (a gRPC code that reads as one), what a server that guards its input does;
- ``server_error``: a 5xx other than a gateway timeout;
- ``timeout``: no answer within ``--request-timeout`` (or a 504: a proxy's timeout);
- ``silent``: audio with no sound in it;
- ``error``: anything else the attempt failed on (a reset connection, a body that is not audio).

A class *needs guarding* when any of its requests was a server error, a timeout, silent, an
error, or audio of the wrong length: the server did not answer it as a service should.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from tts_knee.audio import signal
from tts_knee.runformat.probe import CLASSES, class_of
from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import Outcome, Probe, ProbeClass, ProbeLevel, ProbeOutcomes

OUTCOMES = tuple(Outcome)
#: What is not answered as a service should answer it.
UNGUARDED = (Outcome.SERVER_ERROR, Outcome.TIMEOUT, Outcome.SILENT, Outcome.ERROR)
#: Texts shorter than this are not judged by their audio's length: a word's audio is mostly its
#: start and end, whatever the pace.
PACE_MIN_CHARS = 20
_NAMES = {
    Outcome.AUDIO: "audio",
    Outcome.REFUSED: "refused",
    Outcome.SERVER_ERROR: "server error",
    Outcome.TIMEOUT: "timed out",
    Outcome.SILENT: "silent audio",
    Outcome.ERROR: "failed",
}


class _Row(TypedDict):
    """One probed request, by its final attempt."""

    concurrency: int
    outcome: Outcome
    status: str | int | None
    ms: float | None
    audio_s: float | None
    error: str | None
    wrong_length: bool


def _outcomes(counts: Counter[Outcome]) -> ProbeOutcomes:
    """Requests per outcome, each outcome named (0 where none)."""
    return {
        "audio": counts.get(Outcome.AUDIO, 0),
        "refused": counts.get(Outcome.REFUSED, 0),
        "server_error": counts.get(Outcome.SERVER_ERROR, 0),
        "timeout": counts.get(Outcome.TIMEOUT, 0),
        "silent": counts.get(Outcome.SILENT, 0),
        "error": counts.get(Outcome.ERROR, 0),
    }


def outcome(status: int, ok: bool, error: str | None) -> Outcome:
    """One final attempt's outcome; ``status`` -1 when there was none."""
    if ok:
        return Outcome.AUDIO
    if error == signal.SILENT:
        return Outcome.SILENT
    if status == 504 or (error or "").startswith("timed out"):
        return Outcome.TIMEOUT
    if 400 <= status < 500:
        return Outcome.REFUSED
    if status >= 500:
        return Outcome.SERVER_ERROR
    return Outcome.ERROR


def probe(
    attempts: Attempts, steps: Sequence[Mapping[str, Any]], sweep: Attempts, timeout_s: float | None = None
) -> Probe | None:
    """summary.json's ``probe`` from the ``attempts`` of the probe's ``steps`` (run.json
    entries of phase ``probe``), judged against the pace of the sweep's attempts ``sweep``
    (``timeout_s``: the run's --request-timeout, what a timeout waited); None when the run had
    no probe."""
    if not steps:
        return None
    levels = {int(step["step"]): int(step["concurrency"]) for step in steps}
    pace = _median_pace(sweep)
    rows: dict[str, list[_Row]] = {}
    final = np.flatnonzero(attempts["final"] & np.isin(attempts["step"], list(levels)))
    for row in final:
        code = int(attempts["text"][row])
        name = class_of(attempts.texts[code]) if code >= 0 else None
        if name is None:
            continue
        err = int(attempts["error"][row])
        error = attempts.errors[err] if err >= 0 else None
        status, ok = int(attempts["status"][row]), bool(attempts["ok"][row])
        named = int(attempts["status_name"][row]) if "status_name" in attempts.cols else -1
        chars, audio_s = float(attempts["text_len"][row]), float(attempts["audio_s"][row])
        wrong = bool(
            ok
            and pace
            and chars >= PACE_MIN_CHARS
            and np.isfinite(audio_s)
            and not signal.TRUNCATED_X * pace <= audio_s / chars <= signal.RUNAWAY_X * pace
        )
        rows.setdefault(name, []).append(
            {
                "concurrency": levels[int(attempts["step"][row])],
                "outcome": outcome(status, ok, error),
                "status": attempts.statuses[named] if named >= 0 else (status if status >= 0 else None),
                "ms": _finite(attempts["e2e_ms"][row])
                if "e2e_ms" in attempts.cols
                else _finite(attempts["wait_ms"][row]),
                "audio_s": _finite(audio_s) if ok else None,
                "error": error,
                "wrong_length": wrong,
            }
        )
    classes = [_class(name, rows[name], timeout_s) for name in CLASSES if name in rows]
    guard = [probe_class["class"] for probe_class in classes if probe_class["needs_guarding"]]
    return {
        "levels": sorted(set(levels.values())),
        "classes": classes,
        "needs_guarding": guard,
        "note": _note(classes) if guard else None,
    }


def _class(name: str, rows: list[_Row], timeout_s: float | None) -> ProbeClass:
    counts = Counter(row["outcome"] for row in rows)
    by_level: dict[int, Counter[Outcome]] = {}
    for row in rows:
        by_level.setdefault(row["concurrency"], Counter())[row["outcome"]] += 1
    times = [row["ms"] for row in rows if row["ms"] is not None]
    audio = [row["audio_s"] for row in rows if row["audio_s"] is not None]
    statuses = Counter(
        str(row["status"]) for row in rows if row["status"] is not None and row["outcome"] != Outcome.AUDIO
    )
    errors = [row["error"] for row in rows if row["error"]]
    wrong = sum(row["wrong_length"] for row in rows)
    out: ProbeClass = {
        "class": name,
        "what": CLASSES[name][0],
        "requests": len(rows),
        "outcomes": _outcomes(counts),
        "by_concurrency": [_level(concurrency, rows_at) for concurrency, rows_at in sorted(by_level.items())],
        "statuses": dict(sorted(statuses.items())),
        "ms_p50": round(float(np.median(times)), 1) if times else None,
        "ms_max": round(max(times), 1) if times else None,
        "audio_s_p50": round(float(np.median(audio)), 3) if audio else None,
        "wrong_length": wrong,
        "error": errors[0] if errors else None,
        "needs_guarding": wrong > 0 or any(counts.get(kind) for kind in UNGUARDED),
        "verdict": "",
    }
    median_ms = {
        kind: float(np.median(kind_ms))
        for kind in OUTCOMES
        if (kind_ms := [row["ms"] for row in rows if row["outcome"] == kind and row["ms"] is not None])
    }
    if Outcome.TIMEOUT not in median_ms and counts.get(Outcome.TIMEOUT) and isinstance(timeout_s, (int, float)):
        median_ms[Outcome.TIMEOUT] = 1000.0 * timeout_s  # a timed-out attempt records no end of its own
    out["verdict"] = _verdict(out, counts, median_ms)
    return out


def _level(concurrency: int, counts: Counter[Outcome]) -> ProbeLevel:
    """A probed class's requests per outcome at one probe level."""
    return {"concurrency": concurrency, **_outcomes(counts)}


def _verdict(probe_class: ProbeClass, counts: Counter[Outcome], median_ms: dict[Outcome, float]) -> str:
    """What the server did with the class, in a few words: its outcomes (``counts``), most common
    first, each with its median time (``ms``: outcome -> ms)."""
    parts = []
    for kind, count in sorted(
        ((kind, counts[kind]) for kind in OUTCOMES if counts[kind]), key=lambda kind_count: -kind_count[1]
    ):
        what = _NAMES[kind]
        if kind == Outcome.AUDIO and probe_class["audio_s_p50"] is not None:
            what += f" of {probe_class['audio_s_p50']:g} s"
        elif kind in (Outcome.REFUSED, Outcome.SERVER_ERROR) and probe_class["statuses"]:
            what += f" ({', '.join(probe_class['statuses'])})"
        if kind in median_ms:
            what += f" after {_ms(median_ms[kind])}" if kind == Outcome.TIMEOUT else f" in {_ms(median_ms[kind])}"
        if kind == Outcome.AUDIO and probe_class["wrong_length"]:
            what += f", {probe_class['wrong_length']} of the wrong length"
        parts.append(what if count == probe_class["requests"] else f"{count} {what}")
    return "; ".join(parts)


def _note(classes: list[ProbeClass]) -> str:
    bad = [
        f"{probe_class['class']} ({probe_class['verdict']})" for probe_class in classes if probe_class["needs_guarding"]
    ]
    return (
        "Hostile texts the server does not answer as a service should: "
        + "; ".join(bad)
        + ". Guard these inputs (refuse them with a 4xx) before they reach the model."
    )


def _median_pace(sweep: Attempts) -> float | None:
    """The sweep's median audio seconds per character over its successful texts of
    :data:`PACE_MIN_CHARS` or more; None with fewer than :data:`audio.signal.PACE_MIN`."""
    paced = sweep["ok"] & sweep["final"] & (sweep["text_len"] >= PACE_MIN_CHARS) & np.isfinite(sweep["audio_s"])
    if paced.sum() < signal.PACE_MIN:
        return None
    return float(np.median(sweep["audio_s"][paced] / sweep["text_len"][paced]))


def _finite(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]  # a number from the records, or NaN
    return round(number, 3) if np.isfinite(number) else None


def _ms(millis: float) -> str:
    return f"{millis / 1000:.1f} s" if millis >= 1000 else f"{millis:.0f} ms"
