"""How the server took a spike (``--spike``) and how long it took to come back: the three steps
of :mod:`locustfiles.spike` (``before_spike``, ``spike``, ``recovery``), judged on the latency of
their successful final attempts (TTFA in a streamed run) and on every attempt's failures.

The **behaviour** during the spike is the first of:

- ``crashed``: the server stopped answering — the health probe after the run failed, the last
  second of the recovery was all attempts that got no answer at all (refused or reset), or the
  server process a collector watches (``--pid``) exited during the spike's steps
  (``process_gone_at``: its first sample without it after one with it);
- ``sheds``: at least :data:`SHARE` of the spike's attempts were refused with 429 or 503, and
  fast (their median wait at most the p95 before the spike);
- ``fails``: at least :data:`SHARE` failed otherwise (5xx, resets, timeouts);
- ``queues``: nothing much refused or failed, and the p95 rose above :data:`RECOVERED_X` times
  the p95 before;
- ``absorbs``: none of these: the server carried the spike.

**Recovery** is the seconds from the recovery step's start to the start of the first window of
requests sent from which on every window has no failure and its p95 within :data:`RECOVERED_X`
of the p95 before the spike (or :data:`SLACK_MS` above it, whichever is more: timer noise on a
short service time); None: it did not recover within the run. Latencies are compared text by
text (each over its own text's median before the spike), so a window that happens to hold the
corpus's longest texts is not a slow one; a window is :data:`WINDOW_S` long, or twice the median
latency before where that is longer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tts_knee.runformat.reader import Attempts

if TYPE_CHECKING:
    import pandas as pd
from tts_knee.runformat.summary import Spike, SpikeBehaviour as Behaviour, SpikePart

SHARE = 0.05
RECOVERED_X = 1.2
SLACK_MS = 10.0
WINDOW_S = 1.0
_SHED = (429, 503)


def spike(
    attempts: Attempts,
    steps: Sequence[Mapping[str, Any]],
    streamed: bool,
    health: dict[str, Any] | None,
    options: Mapping[str, float],
    res: pd.DataFrame | None = None,
) -> Spike | None:
    """summary.json's ``spike`` from the ``attempts`` and the run.json ``steps`` of the run
    (those of the spike's phases are picked out), and the resource samples ``res`` (a
    collector's watched process); None when the run had no spike."""
    by_phase = {step.get("phase"): step for step in steps}
    before, spike_step, after = (by_phase.get(phase) for phase in ("before_spike", "spike", "recovery"))
    if before is None or spike_step is None:
        return None
    key = "ttfa_ms" if streamed else "wait_ms"
    base = _p95(attempts, _in(attempts, before) & attempts["settled"], key)
    during = _figures(attempts, _in(attempts, spike_step), key, base)
    recovery_s, after_figures, gone = None, None, False
    if after is not None:
        in_recovery = _in(attempts, after)
        after_figures = _figures(attempts, in_recovery, key, base)
        recovery_s = _recovery_s(
            attempts, in_recovery, _in(attempts, before) & attempts["settled"], after["start"], key
        )
        gone = _stopped_answering(attempts, in_recovery)
    exited = _process_gone_at(res, before["start"], (after or spike_step).get("end"))
    crashed = (health is not None and health.get("ok") is False) or gone or exited is not None
    if crashed:
        behaviour = Behaviour.CRASHED
    elif during["shed_share"] >= SHARE and (base is None or (during["shed_ms_p50"] or 0) <= base):
        behaviour = Behaviour.SHEDS
    elif during["failed_share"] >= SHARE:
        behaviour = Behaviour.FAILS
    elif base is not None and during["p95_ms"] is not None and during["p95_ms"] > RECOVERED_X * base:
        behaviour = Behaviour.QUEUES
    else:
        behaviour = Behaviour.ABSORBS
    out: Spike = {
        "factor": options.get("factor"),
        "seconds": options.get("seconds"),
        "level": before["concurrency"],
        "spike_level": spike_step["concurrency"],
        "behaviour": behaviour,
        "recovery_s": None if crashed else recovery_s,
        "basis": key,
        "before_p95_ms": _round(base),
        "during": during,
        "after": after_figures,
        "process_gone_at": exited,
        "text": "",
    }
    out["text"] = _text(out, health)
    return out


def _process_gone_at(res: pd.DataFrame | None, start: float | None, end: float | None) -> float | None:
    """When a watched server process went away between ``start`` and ``end`` (the first of a
    server host's samples without it after one with it), or None."""
    if res is None or not len(res) or start is None or "proc_rss_bytes" not in res:
        return None
    rows = res[(res["role"] == "server") & (res["ts"] >= start) & (res["ts"] <= (end or np.inf) + 2.0)]
    for _, host_rows in rows.groupby("host"):
        had = np.isfinite(host_rows["proc_rss_bytes"].to_numpy(dtype=float))
        if had.any():
            first = int(np.argmax(had))
            lost = np.flatnonzero(~had[first:])
            if len(lost):
                return float(host_rows["ts"].to_numpy()[first + lost[0]])
    return None


def _in(attempts: Attempts, step: Mapping[str, Any]) -> np.ndarray:
    rows: np.ndarray = attempts["step"] == int(step["step"])
    return rows


def _p95(attempts: Attempts, selected: np.ndarray, key: str) -> float | None:
    values = attempts[key][selected & attempts["ok"] & attempts["final"]]
    values = values[np.isfinite(values)]
    return float(np.percentile(values, 95)) if len(values) else None


def _figures(attempts: Attempts, selected: np.ndarray, key: str, base: float | None) -> SpikePart:
    count = int(selected.sum())
    failed = selected & ~attempts["ok"]
    shed = failed & np.isin(attempts["status"], _SHED)
    other = failed & ~shed
    waits = attempts["wait_ms"][shed]
    waits = waits[np.isfinite(waits)]
    p95 = _p95(attempts, selected, key)
    return {
        "attempts": count,
        "ok": int((selected & attempts["ok"]).sum()),
        "shed": int(shed.sum()),
        "failed": int(other.sum()),
        "shed_share": round(int(shed.sum()) / count, 4) if count else 0.0,
        "failed_share": round(int(other.sum()) / count, 4) if count else 0.0,
        "shed_ms_p50": _round(float(np.median(waits))) if len(waits) else None,
        "p95_ms": _round(p95),
        "p95_x": round(p95 / base, 2) if p95 is not None and base else None,
    }


def _recovery_s(
    attempts: Attempts, in_recovery: np.ndarray, before: np.ndarray, start: float | None, key: str
) -> float | None:
    """The recovery (see the module doc), each request's latency taken over its own text's median
    before the spike, so a window of long texts is not a slow one; the windows :data:`WINDOW_S`
    long, or twice the median latency before where that is longer (two requests a user)."""
    ref = _medians(attempts, before, key)
    if start is None or not ref or not in_recovery.any():
        return None
    ratio_before = _ratios(attempts, before & attempts["ok"] & attempts["final"], key, ref)
    if not len(ratio_before):
        return None
    p95_before = float(np.percentile(ratio_before, 95))
    typical = float(np.median([median for median in ref.values()]))
    limit = max(RECOVERED_X * p95_before, p95_before + SLACK_MS / max(typical, 1e-9))
    window = max(WINDOW_S, 2 * typical / 1000.0)
    rows = np.flatnonzero(in_recovery)
    bins = np.floor((attempts["t0"][rows] - start) / window).astype(int)
    good: list[tuple[int, bool]] = []
    for window_index in sorted(set(bins[bins >= 0].tolist())):
        inside = rows[bins == window_index]
        sel = np.zeros(len(attempts), dtype=bool)
        sel[inside] = True
        ratios = _ratios(attempts, sel & attempts["ok"] & attempts["final"], key, ref)
        fine = bool(attempts["ok"][inside].all()) and len(ratios) > 0 and float(np.percentile(ratios, 95)) <= limit
        good.append((window_index, fine))
    for index, (window_index, fine) in enumerate(good):
        if fine and all(fine_after for _, fine_after in good[index:]):
            return round(window_index * window, 1)
    return None


def _medians(attempts: Attempts, selected: np.ndarray, key: str) -> dict[int, float]:
    """Each text's (code's) median latency over the successful final attempts ``selected`` selects."""
    sel = selected & attempts["ok"] & attempts["final"] & np.isfinite(attempts[key])
    out: dict[int, float] = {}
    for code in np.unique(attempts["text"][sel]).tolist():
        out[int(code)] = float(np.median(attempts[key][sel & (attempts["text"] == code)]))
    return out


def _ratios(attempts: Attempts, selected: np.ndarray, key: str, ref: dict[int, float]) -> np.ndarray:
    values, codes = attempts[key][selected], attempts["text"][selected]
    out = [
        value / ref[int(code)]
        for value, code in zip(values.tolist(), codes.tolist())
        if int(code) in ref and ref[int(code)] > 0 and np.isfinite(value)
    ]
    return np.asarray(out, dtype=float)


def _stopped_answering(attempts: Attempts, in_recovery: np.ndarray) -> bool:
    """Whether the recovery's last second was attempts that all got no answer at all."""
    if not in_recovery.any():
        return False
    sent = attempts["t0"][in_recovery]
    last = in_recovery.copy()
    last[in_recovery] = sent >= np.nanmax(sent) - 1.0
    return bool(last.any() and (~attempts["ok"][last] & (attempts["status"][last] < 0)).all())


def _text(spike_part: Spike, health: dict[str, Any] | None) -> str:
    during = spike_part["during"]
    head = (
        f"A spike from {spike_part['level']} to {spike_part['spike_level']} users "
        f"({spike_part['factor']:g}x) for {spike_part['seconds']:g} s: "
        f"the server {spike_part['behaviour']}"
    )
    if spike_part["behaviour"] == Behaviour.CRASHED:
        why = (
            "; ".join(
                reason
                for reason in (
                    (health or {}).get("message") if health and health.get("ok") is False else None,
                    "the server process the collector watched exited"
                    if spike_part["process_gone_at"] is not None
                    else None,
                )
                if reason
            )
            or "the last second of the recovery got no answer at all"
        )
        return f"{head} — it stopped answering ({why}); nothing after it measures the server."
    if spike_part["behaviour"] == Behaviour.SHEDS:
        head += f" ({during['shed_share']:.0%} of its attempts refused with 429/503 in {during['shed_ms_p50']:g} ms)"
    elif spike_part["behaviour"] == Behaviour.FAILS:
        head += f" ({during['failed_share']:.0%} of its attempts failed)"
    elif during["p95_x"] is not None:
        head += f" (p95 {during['p95_x']:g}x the {spike_part['before_p95_ms']:g} ms before)"
    tail = (
        f"; back within {RECOVERED_X:g}x of the p95 before {spike_part['recovery_s']:g} s into the recovery"
        if spike_part["recovery_s"] is not None
        else "; it did not recover within the run"
    )
    return head + tail + "."


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)
