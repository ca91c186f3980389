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
    a: Attempts, steps: Sequence[Mapping[str, Any]], sweep: Attempts, timeout_s: float | None = None
) -> Probe | None:
    """summary.json's ``probe`` from the attempts ``a`` of the probe's ``steps`` (run.json
    entries of phase ``probe``), judged against the pace of the sweep's attempts ``sweep``
    (``timeout_s``: the run's --request-timeout, what a timeout waited); None when the run had
    no probe."""
    if not steps:
        return None
    levels = {int(s["step"]): int(s["concurrency"]) for s in steps}
    pace = _median_pace(sweep)
    rows: dict[str, list[_Row]] = {}
    final = np.flatnonzero(a["final"] & np.isin(a["step"], list(levels)))
    for i in final:
        code = int(a["text"][i])
        name = class_of(a.texts[code]) if code >= 0 else None
        if name is None:
            continue
        err = int(a["error"][i])
        error = a.errors[err] if err >= 0 else None
        status, ok = int(a["status"][i]), bool(a["ok"][i])
        named = int(a["status_name"][i]) if "status_name" in a.cols else -1
        chars, audio_s = float(a["text_len"][i]), float(a["audio_s"][i])
        wrong = bool(
            ok
            and pace
            and chars >= PACE_MIN_CHARS
            and np.isfinite(audio_s)
            and not signal.TRUNCATED_X * pace <= audio_s / chars <= signal.RUNAWAY_X * pace
        )
        rows.setdefault(name, []).append(
            {
                "concurrency": levels[int(a["step"][i])],
                "outcome": outcome(status, ok, error),
                "status": a.statuses[named] if named >= 0 else (status if status >= 0 else None),
                "ms": _finite(a["e2e_ms"][i]) if "e2e_ms" in a.cols else _finite(a["wait_ms"][i]),
                "audio_s": _finite(audio_s) if ok else None,
                "error": error,
                "wrong_length": wrong,
            }
        )
    classes = [_class(name, rows[name], timeout_s) for name in CLASSES if name in rows]
    guard = [c["class"] for c in classes if c["needs_guarding"]]
    return {
        "levels": sorted(set(levels.values())),
        "classes": classes,
        "needs_guarding": guard,
        "note": _note(classes) if guard else None,
    }


def _class(name: str, rows: list[_Row], timeout_s: float | None) -> ProbeClass:
    counts = Counter(r["outcome"] for r in rows)
    by_level: dict[int, Counter[Outcome]] = {}
    for r in rows:
        by_level.setdefault(r["concurrency"], Counter())[r["outcome"]] += 1
    times = [r["ms"] for r in rows if r["ms"] is not None]
    audio = [r["audio_s"] for r in rows if r["audio_s"] is not None]
    statuses = Counter(str(r["status"]) for r in rows if r["status"] is not None and r["outcome"] != Outcome.AUDIO)
    errors = [r["error"] for r in rows if r["error"]]
    wrong = sum(r["wrong_length"] for r in rows)
    out: ProbeClass = {
        "class": name,
        "what": CLASSES[name][0],
        "requests": len(rows),
        "outcomes": _outcomes(counts),
        "by_concurrency": [_level(c, n) for c, n in sorted(by_level.items())],
        "statuses": dict(sorted(statuses.items())),
        "ms_p50": round(float(np.median(times)), 1) if times else None,
        "ms_max": round(max(times), 1) if times else None,
        "audio_s_p50": round(float(np.median(audio)), 3) if audio else None,
        "wrong_length": wrong,
        "error": errors[0] if errors else None,
        "needs_guarding": wrong > 0 or any(counts.get(k) for k in UNGUARDED),
        "verdict": "",
    }
    ms = {
        k: float(np.median(v))
        for k in OUTCOMES
        if (v := [r["ms"] for r in rows if r["outcome"] == k and r["ms"] is not None])
    }
    if Outcome.TIMEOUT not in ms and counts.get(Outcome.TIMEOUT) and isinstance(timeout_s, (int, float)):
        ms[Outcome.TIMEOUT] = 1000.0 * timeout_s  # a timed-out attempt records no end of its own
    out["verdict"] = _verdict(out, counts, ms)
    return out


def _level(concurrency: int, counts: Counter[Outcome]) -> ProbeLevel:
    """A probed class's requests per outcome at one probe level."""
    return {"concurrency": concurrency, **_outcomes(counts)}


def _verdict(c: ProbeClass, counts: Counter[Outcome], ms: dict[Outcome, float]) -> str:
    """What the server did with the class, in a few words: its outcomes (``counts``), most common
    first, each with its median time (``ms``: outcome -> ms)."""
    parts = []
    for k, n in sorted(((k, counts[k]) for k in OUTCOMES if counts[k]), key=lambda kn: -kn[1]):
        what = _NAMES[k]
        if k == Outcome.AUDIO and c["audio_s_p50"] is not None:
            what += f" of {c['audio_s_p50']:g} s"
        elif k in (Outcome.REFUSED, Outcome.SERVER_ERROR) and c["statuses"]:
            what += f" ({', '.join(c['statuses'])})"
        if k in ms:
            what += f" after {_ms(ms[k])}" if k == Outcome.TIMEOUT else f" in {_ms(ms[k])}"
        if k == Outcome.AUDIO and c["wrong_length"]:
            what += f", {c['wrong_length']} of the wrong length"
        parts.append(what if n == c["requests"] else f"{n} {what}")
    return "; ".join(parts)


def _note(classes: list[ProbeClass]) -> str:
    bad = [f"{c['class']} ({c['verdict']})" for c in classes if c["needs_guarding"]]
    return (
        "Hostile texts the server does not answer as a service should: "
        + "; ".join(bad)
        + ". Guard these inputs (refuse them with a 4xx) before they reach the model."
    )


def _median_pace(sweep: Attempts) -> float | None:
    """The sweep's median audio seconds per character over its successful texts of
    :data:`PACE_MIN_CHARS` or more; None with fewer than :data:`audio.signal.PACE_MIN`."""
    m = sweep["ok"] & sweep["final"] & (sweep["text_len"] >= PACE_MIN_CHARS) & np.isfinite(sweep["audio_s"])
    if m.sum() < signal.PACE_MIN:
        return None
    return float(np.median(sweep["audio_s"][m] / sweep["text_len"][m]))


def _finite(value: object) -> float | None:
    v = float(value)  # type: ignore[arg-type]  # a number from the records, or NaN
    return round(v, 3) if np.isfinite(v) else None


def _ms(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"
