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
    a: Attempts,
    steps: Sequence[Mapping[str, Any]],
    streamed: bool,
    health: dict[str, Any] | None,
    options: Mapping[str, float],
    res: pd.DataFrame | None = None,
) -> Spike | None:
    """summary.json's ``spike`` from the attempts ``a`` and the run.json ``steps`` of the run
    (those of the spike's phases are picked out), and the resource samples ``res`` (a
    collector's watched process); None when the run had no spike."""
    by_phase = {s.get("phase"): s for s in steps}
    before, at, after = (by_phase.get(p) for p in ("before_spike", "spike", "recovery"))
    if before is None or at is None:
        return None
    key = "ttfa_ms" if streamed else "wait_ms"
    base = _p95(a, _in(a, before) & a["settled"], key)
    during = _figures(a, _in(a, at), key, base)
    recovery_s, after_figures, gone = None, None, False
    if after is not None:
        m = _in(a, after)
        after_figures = _figures(a, m, key, base)
        recovery_s = _recovery_s(a, m, _in(a, before) & a["settled"], after["start"], key)
        gone = _stopped_answering(a, m)
    exited = _process_gone_at(res, before["start"], (after or at).get("end"))
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
        "spike_level": at["concurrency"],
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
    for _, g in rows.groupby("host"):
        had = np.isfinite(g["proc_rss_bytes"].to_numpy(dtype=float))
        if had.any():
            first = int(np.argmax(had))
            lost = np.flatnonzero(~had[first:])
            if len(lost):
                return float(g["ts"].to_numpy()[first + lost[0]])
    return None


def _in(a: Attempts, step: Mapping[str, Any]) -> np.ndarray:
    rows: np.ndarray = a["step"] == int(step["step"])
    return rows


def _p95(a: Attempts, m: np.ndarray, key: str) -> float | None:
    v = a[key][m & a["ok"] & a["final"]]
    v = v[np.isfinite(v)]
    return float(np.percentile(v, 95)) if len(v) else None


def _figures(a: Attempts, m: np.ndarray, key: str, base: float | None) -> SpikePart:
    n = int(m.sum())
    failed = m & ~a["ok"]
    shed = failed & np.isin(a["status"], _SHED)
    other = failed & ~shed
    waits = a["wait_ms"][shed]
    waits = waits[np.isfinite(waits)]
    p95 = _p95(a, m, key)
    return {
        "attempts": n,
        "ok": int((m & a["ok"]).sum()),
        "shed": int(shed.sum()),
        "failed": int(other.sum()),
        "shed_share": round(int(shed.sum()) / n, 4) if n else 0.0,
        "failed_share": round(int(other.sum()) / n, 4) if n else 0.0,
        "shed_ms_p50": _round(float(np.median(waits))) if len(waits) else None,
        "p95_ms": _round(p95),
        "p95_x": round(p95 / base, 2) if p95 is not None and base else None,
    }


def _recovery_s(a: Attempts, m: np.ndarray, before: np.ndarray, start: float | None, key: str) -> float | None:
    """The recovery (see the module doc), each request's latency taken over its own text's median
    before the spike, so a window of long texts is not a slow one; the windows :data:`WINDOW_S`
    long, or twice the median latency before where that is longer (two requests a user)."""
    ref = _medians(a, before, key)
    if start is None or not ref or not m.any():
        return None
    ratio_before = _ratios(a, before & a["ok"] & a["final"], key, ref)
    if not len(ratio_before):
        return None
    q = float(np.percentile(ratio_before, 95))
    typical = float(np.median([v for v in ref.values()]))
    limit = max(RECOVERED_X * q, q + SLACK_MS / max(typical, 1e-9))
    window = max(WINDOW_S, 2 * typical / 1000.0)
    rows = np.flatnonzero(m)
    bins = np.floor((a["t0"][rows] - start) / window).astype(int)
    good: list[tuple[int, bool]] = []
    for b in sorted(set(bins[bins >= 0].tolist())):
        inside = rows[bins == b]
        sel = np.zeros(len(a), dtype=bool)
        sel[inside] = True
        r = _ratios(a, sel & a["ok"] & a["final"], key, ref)
        fine = bool(a["ok"][inside].all()) and len(r) > 0 and float(np.percentile(r, 95)) <= limit
        good.append((b, fine))
    for i, (b, fine) in enumerate(good):
        if fine and all(f for _, f in good[i:]):
            return round(b * window, 1)
    return None


def _medians(a: Attempts, m: np.ndarray, key: str) -> dict[int, float]:
    """Each text's (code's) median latency over the successful final attempts ``m`` selects."""
    sel = m & a["ok"] & a["final"] & np.isfinite(a[key])
    out: dict[int, float] = {}
    for code in np.unique(a["text"][sel]).tolist():
        out[int(code)] = float(np.median(a[key][sel & (a["text"] == code)]))
    return out


def _ratios(a: Attempts, m: np.ndarray, key: str, ref: dict[int, float]) -> np.ndarray:
    v, codes = a[key][m], a["text"][m]
    out = [
        x / ref[int(c)]
        for x, c in zip(v.tolist(), codes.tolist())
        if int(c) in ref and ref[int(c)] > 0 and np.isfinite(x)
    ]
    return np.asarray(out, dtype=float)


def _stopped_answering(a: Attempts, m: np.ndarray) -> bool:
    """Whether the recovery's last second was attempts that all got no answer at all."""
    if not m.any():
        return False
    t0 = a["t0"][m]
    last = m.copy()
    last[m] = t0 >= np.nanmax(t0) - 1.0
    return bool(last.any() and (~a["ok"][last] & (a["status"][last] < 0)).all())


def _text(s: Spike, health: dict[str, Any] | None) -> str:
    d = s["during"]
    head = (
        f"A spike from {s['level']} to {s['spike_level']} users ({s['factor']:g}x) for {s['seconds']:g} s: "
        f"the server {s['behaviour']}"
    )
    if s["behaviour"] == Behaviour.CRASHED:
        why = (
            "; ".join(
                w
                for w in (
                    (health or {}).get("message") if health and health.get("ok") is False else None,
                    "the server process the collector watched exited" if s["process_gone_at"] is not None else None,
                )
                if w
            )
            or "the last second of the recovery got no answer at all"
        )
        return f"{head} — it stopped answering ({why}); nothing after it measures the server."
    if s["behaviour"] == Behaviour.SHEDS:
        head += f" ({d['shed_share']:.0%} of its attempts refused with 429/503 in {d['shed_ms_p50']:g} ms)"
    elif s["behaviour"] == Behaviour.FAILS:
        head += f" ({d['failed_share']:.0%} of its attempts failed)"
    elif d["p95_x"] is not None:
        head += f" (p95 {d['p95_x']:g}x the {s['before_p95_ms']:g} ms before)"
    tail = (
        f"; back within {RECOVERED_X:g}x of the p95 before {s['recovery_s']:g} s into the recovery"
        if s["recovery_s"] is not None
        else "; it did not recover within the run"
    )
    return head + tail + "."


def _round(v: float | None) -> float | None:
    return None if v is None else round(float(v), 1)
