"""Orphaned work from the server process's CPU time, for servers that publish no running-requests
series (piper's HTTP server, wyoming-piper, Triton): the CPU-seconds each abandoned request (a
barge-in's cancel, a client's hang-up at ``--request-timeout``) cost beyond what a heard
utterance of the part heard costs. See docs/barge-in.md.

**The fit.** A collector watching the server process (``--pid``/``--match``) gives the CPU-seconds
of each sample interval. They are fitted by least squares as idle CPU per second, plus a cost per
character heard, plus one cost per cancel and one per hang-up:

- a heard request's characters are spread over its time on the wire (sent to done);
- an abandoned one's heard part (its characters times the share of its text's audio that
  arrived) over the time up to its abandonment, and its orphan cost from then over the time a
  heard request of the same text took (the median; for a text never heard, its characters at
  the heard requests' pace) less the time it had already run.

Each per-abandonment cost is the CPU the server spent on it after nobody listened. Its
uncertainty is the fit's 95 % interval (1.96 standard errors), given with it: where the
abandonments are few, or move in step with the heard load, it is wide. A server that stops on
a cancel gives about 0; one that synthesises the whole text anyway gives the text's cost less the
part heard.
"""

from __future__ import annotations

from typing import Literal, TypedDict

import numpy as np
import pandas as pd

from tts_knee.runformat.reader import Attempts

METHOD = (
    "the server process's CPU-seconds per sample fitted as idle + per character heard + per abandoned "
    "request (its cost beyond the part heard), least squares; uncertainty: the 95 % interval"
)
SERIES = "the watched server process's CPU (collector)"
Abandonment = Literal["cancel", "hangup"]


class AbandonedFit(TypedDict):
    """The fit's figures for one kind of abandoned request (a cancel, a hang-up)."""

    per_s: float
    uncertainty_s: float
    total_s: float
    count: int
    method: str
    series: str
    samples: int
    per_char_s: float
    idle_cpu: float
    busy_scale: float


class CpuFit(TypedDict):
    """:func:`fit`'s answer: each kind's figures (None where too few), and why neither was fitted."""

    cancel: AbandonedFit | None
    hangup: AbandonedFit | None
    note: str | None


#: Fewer sample intervals than this, or fewer abandonments, and the fit is not tried.
MIN_INTERVALS = 8
MIN_ABANDONED = 5
#: The host's CPU (median over the fit's samples, all cores) at which the fit is not tried.
SATURATED_PERCENT = 95.0
#: The server's time on an abandoned request, as a share of a heard one's of its text: tried in
#: turn, the one that fits best kept (and said).
SCALES = tuple(round(0.1 * 1.25**i, 3) for i in range(19))  # 0.1 ... 5.5
MAX_SCALE = SCALES[-1]
#: A hang-up: the client stopped waiting at --request-timeout (the attempt's error says so).
TIMED_OUT = "timed out"


def _ramp_sum(start: np.ndarray, end: np.ndarray, weight: np.ndarray, times: np.ndarray) -> np.ndarray:
    """At each time of ``at``, the sum over items of ``weight`` spread evenly over [start, end]
    that has accrued by then (O((items + times) log items), however many of each)."""
    width = np.maximum(end - start, 1e-6)
    rate = weight / width
    out = np.zeros(len(times))
    for edge, sign in ((start, 1.0), (end, -1.0)):
        order = np.argsort(edge)
        sorted_edges, sorted_rates = edge[order], rate[order]
        passed = np.searchsorted(sorted_edges, times, side="right")
        rate_sums, weighted_sums = (
            np.concatenate(([0.0], np.cumsum(sorted_rates))),
            np.concatenate(([0.0], np.cumsum(sorted_rates * sorted_edges))),
        )
        out += sign * (rate_sums[passed] * times - weighted_sums[passed])
    return out


def _cpu_intervals(res: pd.DataFrame, first: float, last: float) -> tuple[np.ndarray, ...] | None:
    """(edges, cpu_s, host_percent): the watched server process's sample times over [first, last]
    (one sample before), the CPU-seconds of each interval between them and the host's CPU (all
    cores) then, or None without a single server process series."""
    if not len(res) or "proc_cpu_percent" not in res.columns:
        return None
    srv = res[(res["role"] == "server") & res["proc_cpu_percent"].notna()]
    if srv.empty or srv["host"].nunique() != 1:
        return None  # no process watched, or replicas: their CPU is not one server's
    sample_ts, pct = srv["ts"].to_numpy(float), srv["proc_cpu_percent"].to_numpy(float)
    order = np.argsort(sample_ts)
    sample_ts, pct = sample_ts[order], pct[order]
    first_index = max(int(np.searchsorted(sample_ts, first, side="right")) - 1, 0)
    end_index = int(np.searchsorted(sample_ts, last, side="left")) + 1
    sample_ts, pct = sample_ts[first_index:end_index], pct[first_index:end_index]
    if len(sample_ts) < MIN_INTERVALS + 1:
        return None
    host = (
        srv["cpu_percent"].to_numpy(float)[order][first_index:end_index]
        if "cpu_percent" in srv.columns
        else np.full(len(sample_ts), np.nan)
    )
    # a sample's percent is of the interval since the one before
    return sample_ts, pct[1:] / 100.0 * np.diff(sample_ts), host[1:]


def _expected(attempts: Attempts, heard: np.ndarray, chars: np.ndarray, column: np.ndarray) -> np.ndarray:
    """Per attempt, the median of ``column`` over the heard attempts of its text; for a text never
    heard, its characters at the heard attempts' median ``column`` per character."""
    codes = attempts["text"]
    out = np.full(len(attempts), np.nan)
    for code in np.unique(codes[heard]):
        mine = codes == code
        out[mine] = np.nanmedian(column[heard & mine])
    pace = np.nanmedian(column[heard] / chars[heard]) if heard.any() else np.nan
    missing = ~np.isfinite(out)
    out[missing] = chars[missing] * pace
    return out


def _solve(design: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Least squares: (coefficients, standard errors, residual sum of squares), or None where the
    columns do not determine them."""
    if len(target) <= design.shape[1] or np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    resid = target - design @ coef
    rss = float(resid @ resid)
    std_errors = np.sqrt(
        np.clip(np.diag(np.linalg.inv(design.T @ design)) * rss / (len(target) - design.shape[1]), 0.0, None)
    )
    return coef, std_errors, rss


def fit(attempts: Attempts, res: pd.DataFrame, timeout_s: float | None) -> CpuFit | None:
    """``{"cancel", "hangup", "note"}``: the CPU estimate of the work orphaned per cancel and per
    hang-up (see the module doc), each None where there were too few of them, and ``note`` the
    sentence saying why neither could be estimated; None for a run with no abandoned request or
    no watched server process. ``timeout_s``: --request-timeout, when a hang-up was."""
    if not len(attempts):
        return None
    sent, chars = attempts["t0"], attempts["text_len"]
    timed_out = np.zeros(len(attempts), bool)
    for code, error in enumerate(attempts.errors):
        if error.startswith(TIMED_OUT):
            timed_out |= attempts["error"] == code
    # a hang-up records no end of its own: the client left at its timeout
    end = np.where(timed_out & ~np.isfinite(attempts["tend"]), sent + (timeout_s or np.nan), attempts["tend"])
    cancelled = np.isfinite(attempts["cancel_ms"])
    timed = np.isfinite(sent) & np.isfinite(end) & np.isfinite(chars) & (chars > 0)
    heard = timed & attempts["ok"] & ~cancelled
    kinds: dict[Abandonment, np.ndarray] = {"cancel": timed & cancelled, "hangup": timed & timed_out & ~cancelled}
    abandoned = kinds["cancel"] | kinds["hangup"]
    if not abandoned.any():
        return None
    gone = np.where(cancelled, sent + attempts["cancel_ms"] / 1000.0, end)
    took = _expected(attempts, heard, chars, end - sent) if heard.any() else np.full(len(attempts), np.nan)
    horizon = float(np.nanmax(np.where(abandoned, sent + np.fmax(MAX_SCALE * took, gone - sent), end)[timed]))
    cpu = _cpu_intervals(res, float(np.nanmin(sent[timed])), horizon)
    if cpu is None:
        return None
    edges, cpu_s, host_cpu = cpu
    if not heard.any() or not any(mask.sum() >= MIN_ABANDONED for mask in kinds.values()):
        return {
            "cancel": None,
            "hangup": None,
            "note": f"too few abandoned requests (fewer than {MIN_ABANDONED} "
            "cancels or hang-ups) or none heard to compare them with",
        }
    if np.nanmedian(host_cpu) >= SATURATED_PERCENT:
        return {
            "cancel": None,
            "hangup": None,
            "note": (
                f"the server host's CPU was saturated (median {np.nanmedian(host_cpu):.0f} % of its cores): its "
                "process's CPU time then follows the cores, not the work; measure at a load that leaves CPU idle"
            ),
        }
    audio = attempts["audio_s"]
    expected_audio = _expected(attempts, heard, chars, audio)
    # the part heard: the share of the text's audio that arrived before the listener left
    share = np.where(np.isfinite(audio) & (expected_audio > 0), np.clip(audio / expected_audio, 0, 1), 0.0)
    part = np.where(heard, chars, chars * share)
    fitted = [k for k, mask in kinds.items() if mask.sum() >= MIN_ABANDONED]
    ones = np.ones(len(attempts))
    best = None
    for scale in SCALES:
        # the server's time on an abandoned request: at least to its abandonment, else a share of
        # the time a heard one of its text took
        busy_end = np.where(abandoned, sent + np.fmax(scale * np.nan_to_num(took), gone - sent), end)
        rows = heard | abandoned
        x = [np.diff(edges), np.diff(_ramp_sum(sent[rows], busy_end[rows], part[rows], edges))]
        x += [np.diff(_ramp_sum(sent[kinds[k]], busy_end[kinds[k]], ones[kinds[k]], edges)) for k in fitted]
        got = _solve(np.column_stack(x), cpu_s)
        if got is not None and (best is None or got[2] < best[3]):
            best = (scale, *got)
    if best is None:
        return {
            "cancel": None,
            "hangup": None,
            "note": "the samples do not tell the abandoned requests' CPU "
            "from the heard ones' (they rose and fell together)",
        }
    scale, coef, std_errors, _ = best
    out: CpuFit = {"cancel": None, "hangup": None, "note": None}
    for column, kind in enumerate(fitted, start=2):
        count = int(kinds[kind].sum())
        out[kind] = {
            "per_s": float(coef[column]),
            "uncertainty_s": float(1.96 * std_errors[column]),
            "total_s": float(coef[column] * count),
            "count": count,
            "method": METHOD,
            "series": SERIES,
            "samples": len(cpu_s),
            "per_char_s": float(coef[1]),
            "idle_cpu": float(coef[0]),
            "busy_scale": scale,
        }
    return out
