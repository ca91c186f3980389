"""Barge-in (``--barge-in``): how fast cancelled utterances went quiet, and the work the server
went on doing for them (``summary.barge_in``).

**Orphaned work** is read from the server's own series, where it publishes them (scraped by a
collector's ``--scrape`` or the master's ``--server-metrics``): at each server sample, the
requests the server holds (``running``, plus ``queue_depth`` where it says) above those the
load generator still had in flight then (an attempt from its ``t0`` to its end; a cancelled one
to its quiet: cancel plus ``cancel_to_quiet_ms``) are requests nobody waits for. Their count,
averaged over the samples and multiplied by the span they cover, is the orphaned request-time,
shared out over the cancels in that span: ``orphaned_work_s.per_cancel_s``. A server that stops
on a cancel gives about 0; one that goes on generating for N seconds, about N. Without the
running series, a collector's watch on the server process gives it from the process's CPU
time instead (:mod:`analysis.orphans`), with its uncertainty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tts_knee.runformat.metric_roles import roles as roles_of
from tts_knee.runformat.reader import Attempts
from tts_knee.runformat.summary import BargeIn, Hangups, HangupWork, Orphaned

from . import orphans
from .diagnosis import share
from .steps import dist, run_end_cut

METHOD = (
    "the server's running (and waiting) requests above the load generator's requests in flight, "
    "averaged over its samples, times their span, per cancel"
)
#: Orphaned work per cancel worth a line in the diagnosis.
ORPHANED_NOTABLE_S = 0.1


def summarise(
    attempts: Attempts,
    res: pd.DataFrame,
    options: dict[str, Any],
    roles: dict[str, str] | None = None,
    cpu: orphans.CpuFit | None = None,
) -> BargeIn | None:
    """``summary.barge_in``, or None for a run without interruptions. ``cpu``: the process-CPU
    fit (:func:`analysis.orphans.fit`), read where the server publishes no running series."""
    fraction = options.get("barge_in") or 0.0
    cancelled = np.isfinite(attempts["cancel_ms"])
    if not fraction and not cancelled.any():
        return None
    counted = cancelled & attempts["final"] & attempts["settled"] & ~run_end_cut(attempts)
    quiet = attempts["cancel_to_quiet_ms"][counted]
    barge: BargeIn = {
        "fraction": fraction,
        "cancel_by": options.get("cancel_by"),
        "cancelled": int(counted.sum()),
        "unacknowledged": int((~np.isfinite(quiet)).sum()),
        "cancel_to_quiet_ms": dist(quiet),
        "audio_after_cancel_ms": dist(attempts["audio_after_cancel_ms"][counted]),
        "orphaned_work_s": None,
    }
    running = orphaned(attempts, res, roles)
    if running is not None or cpu is None:
        barge["orphaned_work_s"] = running
        return barge
    fitted = cpu["cancel"]
    if fitted is None:
        barge["orphaned_note"] = cpu["note"] or "too few cancels to fit"
        return barge
    barge["orphaned_work_s"] = {
        "per_cancel_s": fitted["per_s"],
        "total_s": fitted["total_s"],
        "method": fitted["method"],
        "series": fitted["series"],
        "samples": fitted["samples"],
        "uncertainty_s": fitted["uncertainty_s"],
        "busy_scale": fitted["busy_scale"],
    }
    return barge


def hangups(cpu: orphans.CpuFit | None, attempts: Attempts) -> Hangups | None:
    """``summary.hangups``: the requests the client gave up on at --request-timeout and the CPU
    they left the server (from the process-CPU fit), or None without a hang-up or a fit."""
    if cpu is None:
        return None
    timed_out = sum(
        int((attempts["error"] == code).sum())
        for code, error in enumerate(attempts.errors)
        if error.startswith(orphans.TIMED_OUT)
    )
    if not timed_out:
        return None
    fitted = cpu["hangup"]
    work: HangupWork | None = (
        None
        if fitted is None
        else {
            "per_hangup_s": fitted["per_s"],
            "uncertainty_s": fitted["uncertainty_s"],
            "total_s": fitted["total_s"],
            "method": fitted["method"],
            "series": fitted["series"],
            "samples": fitted["samples"],
            "busy_scale": fitted["busy_scale"],
        }
    )
    return {
        "timed_out": timed_out,
        "orphaned_work_s": work,
        "note": None if work else (cpu["note"] or "too few hang-ups to fit"),
    }


def _in_flight(attempts: Attempts, times: np.ndarray) -> np.ndarray:
    """The load generator's attempts in flight at each time of ``at``."""
    sent = attempts["t0"]
    quiet = attempts["t0"] + (attempts["cancel_ms"] + np.nan_to_num(attempts["cancel_to_quiet_ms"])) / 1000.0
    end = np.where(np.isfinite(attempts["cancel_ms"]), quiet, attempts["tend"])
    timed = np.isfinite(sent) & np.isfinite(end)
    starts, ends = np.sort(sent[timed]), np.sort(end[timed])
    return np.searchsorted(starts, times, side="right") - np.searchsorted(ends, times, side="right")


def orphaned(attempts: Attempts, res: pd.DataFrame, custom: dict[str, str] | None = None) -> Orphaned | None:
    """Orphaned work (see the module doc), or None without the server's running series."""
    if not len(res) or "metrics" not in res.columns or not np.isfinite(attempts["t0"]).any():
        return None
    first, last = float(np.nanmin(attempts["t0"])), float(np.nanmax(attempts["tend"]))
    srv = res[(res["role"] == "server") & (res["ts"] >= first) & (res["ts"] <= last)]
    sampled_at, held, series = [], [], None
    for sample_ts, metrics in zip(srv["ts"], srv["metrics"]):
        told = roles_of(metrics, custom) if isinstance(metrics, dict) else {}
        if "running" not in told:
            continue
        series = told["running"][0]
        sampled_at.append(float(sample_ts))
        held.append(told["running"][1] + (told["queue_depth"][1] if "queue_depth" in told else 0.0))
    if len(sampled_at) < 2:
        return None
    assert series is not None, "each sample read names its running series"
    at_a = np.asarray(sampled_at)
    excess = np.clip(np.asarray(held) - _in_flight(attempts, at_a), 0.0, None)
    span = at_a[-1] - at_a[0] + float(np.median(np.diff(at_a)))
    total = float(excess.mean() * span)
    cancel_at = attempts["t0"] + attempts["cancel_ms"] / 1000.0
    cancels = int(((cancel_at >= at_a[0]) & (cancel_at <= at_a[-1])).sum())
    return {
        "per_cancel_s": total / cancels if cancels else None,
        "total_s": total,
        "method": METHOD,
        "series": series,
        "samples": len(sampled_at),
    }


def hangup_evidence(hung: Hangups | None) -> str | None:
    """The diagnosis's line when requests the client gave up on kept the server busy, else None."""
    if hung is None:
        return None
    work = hung["orphaned_work_s"]
    if work is None or work["per_hangup_s"] - work["uncertainty_s"] < ORPHANED_NOTABLE_S:
        return None
    return (
        f"Requests the client gave up on at --request-timeout cost the server {work['per_hangup_s']:.2f} ± "
        f"{work['uncertainty_s']:.2f} CPU-s each beyond the part heard ({hung['timed_out']} hang-ups; from its "
        f"process's CPU): capacity spent on audio nobody hears."
    )


def evidence(barge: BargeIn | None) -> str | None:
    """The diagnosis's line when cancelled utterances kept the server busy, else None."""
    if barge is None:
        return None
    work = barge["orphaned_work_s"]
    per = work["per_cancel_s"] if work else None
    if work is None or per is None or per - work.get("uncertainty_s", 0.0) < ORPHANED_NOTABLE_S:
        return None
    uncertainty = work.get("uncertainty_s")
    if uncertainty is not None:  # from the process's CPU
        return (
            f"Cancelled utterances cost the server {per:.2f} ± {uncertainty:.2f} CPU-s each after "
            f"their cancel ({barge['cancelled']} cancels; from its process's CPU, beyond the part heard): at a "
            f"{share(barge['fraction'])} barge-in rate that is capacity spent on audio nobody hears, and it "
            f"lowers the knee."
        )
    return (
        f"Cancelled utterances kept generating for {per:.2f} s each after their cancel ({barge['cancelled']} "
        f"cancels; {work['series']} stayed above the requests anyone was waiting for): at a "
        f"{share(barge['fraction'])} barge-in rate that is capacity spent on audio nobody hears, and it "
        f"lowers the knee."
    )
