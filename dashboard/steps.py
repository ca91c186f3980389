"""Per-step aggregates from the raw attempt records and resource samples.

Definitions used throughout the dashboard:

- Only settled attempts count (``settled`` false = inside the step's warm-up window).
- A *request* is a logical request: its final attempt.  ``ok`` and ``failed`` count requests,
  ``attempts`` counts every attempt (retries included).
- **Latency** (``latency_ms``) is ``wait_ms`` (``t2 - t0``: sending the request until the body
  is fully read, i.e. server plus network, without the client's write) of the successful final
  attempts.  ``e2e_ms`` is the logical end-to-end latency of successful requests: the first
  attempt's ``t0`` to the final attempt's ``t3`` (or ``t2``), so it includes failed attempts,
  backoff sleeps and the client's write.
- A step's **measured window** is the time its settled attempts actually cover: the earliest
  ``t0`` to the latest completion.  Rates (``throughput_rps``, ``audio_s_per_s``) divide by it,
  never by the intended step length, and resources are aggregated over it.
- Percentiles are exact, over the raw values (numpy's linear interpolation).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .rundir import Attempts

FALLBACK_S = 5.0  # GPU memory "fall-back" level: the minimum in this many seconds after a step
THROTTLE_STATUSES = (429, 503)
PCTS = (50, 90, 95, 99)


def dist(values: np.ndarray) -> dict | None:
    """{count, mean, p50, p90, p95, p99, max} of the finite values, or None if there are none."""
    v = values[np.isfinite(values)]
    if not len(v):
        return None
    p = np.percentile(v, PCTS)
    out = {"count": int(len(v)), "mean": float(v.mean())}
    out.update({f"p{q}": float(x) for q, x in zip(PCTS, p)})
    out["max"] = float(v.max())
    return out


def _mean_max(s: pd.Series) -> tuple[float | None, float | None]:
    s = s.dropna()
    if not len(s):
        return None, None
    return float(s.mean()), float(s.max())


def resource_aggregate(res: pd.DataFrame, role: str, start: float, end: float) -> dict | None:
    """Mean/max of one role's samples over [start, end]; None when there are no samples."""
    if not len(res) or start is None or end is None:
        return None
    w = res[(res["role"] == role) & (res["ts"] >= start) & (res["ts"] <= end)]
    if not len(w):
        return None
    out = {"samples": int(len(w)), "hosts": sorted(w["host"].unique().tolist())}
    out["cpu_mean"], out["cpu_max"] = _mean_max(w["cpu_percent"])
    out["busiest_core_mean"], out["busiest_core_max"] = _mean_max(w["cpu_max_core_percent"])
    out["proc_cpu_mean"], out["proc_cpu_max"] = _mean_max(w["proc_cpu_percent"])
    out["gpu_util_mean"], out["gpu_util_max"] = _mean_max(w["gpu_util_percent"])
    mem = w["gpu_mem_used_bytes"].dropna()
    out["gpu_mem_peak_bytes"] = float(mem.max()) if len(mem) else None
    tot = w["gpu_mem_total_bytes"].dropna()
    out["gpu_mem_total_bytes"] = float(tot.max()) if len(tot) else None
    out["gpu_power_mean_w"] = _mean_max(w["gpu_power_w"])[0]
    if role == "server":
        after = res[(res["role"] == role) & (res["ts"] > end) & (res["ts"] <= end + FALLBACK_S)]
        fb = after["gpu_mem_used_bytes"].dropna()
        out["gpu_mem_fallback_bytes"] = float(fb.min()) if len(fb) else None
    return out


def step_stats(a: Attempts, step: dict, res: pd.DataFrame) -> dict:
    """All aggregates for one step (``step`` is a run.json step entry)."""
    m = (a["step"] == step["step"]) & a["settled"]
    n_att = int(m.sum())
    fin = m & a["final"]
    okf = fin & a["ok"]
    out = {"step": step["step"], "concurrency": step["concurrency"],
           "planned_start": step.get("start"), "planned_end": step.get("end")}
    requests, ok = int(fin.sum()), int(okf.sum())
    start = float(np.nanmin(a["t0"][m])) if n_att and np.isfinite(a["t0"][m]).any() else None
    end = float(np.nanmax(a["tend"][m])) if n_att and np.isfinite(a["tend"][m]).any() else None
    dur = (end - start) if start is not None and end is not None and end > start else None
    status = a["status"][m]
    att_failed = int((m & ~a["ok"]).sum())
    throttled = int(np.isin(status, THROTTLE_STATUSES).sum())
    counts = {}
    vals, cnt = np.unique(status, return_counts=True)
    for v, c in zip(vals, cnt):
        counts["conn_error" if v < 0 else str(int(v))] = int(c)
    ra = a["retry_after_s"][m]
    out.update({
        "window": {"start": start, "end": end, "duration_s": dur},
        "requests": requests, "attempts": n_att, "ok": ok, "failed": requests - ok,
        "error_rate": (requests - ok) / requests if requests else None,
        "attempt_failures": att_failed,
        "attempt_failure_rate": att_failed / n_att if n_att else None,
        "throughput_rps": ok / dur if dur else None,
        "completed_rps": requests / dur if dur else None,
        "latency_ms": dist(a["wait_ms"][okf]),
        "ttfb_ms": dist(a["ttfb_ms"][okf]),
        "write_ms": dist(a["write_ms"][okf]),
        "concat_ms": dist(a["concat_ms"][okf]),
        "e2e_ms": dist(a["e2e_ms"][okf]),
        "rtf": dist(a["rtf"][okf]),
        "audio_s_per_s": float(np.nansum(a["audio_s"][okf]) / dur) if dur else None,
        "retries": int((m & (a["attempt"] > 1)).sum()),
        "attempts_by_number": {"1": int((m & (a["attempt"] <= 1)).sum()),
                               "2": int((m & (a["attempt"] == 2)).sum()),
                               "3+": int((m & (a["attempt"] >= 3)).sum())},
        "throttled": throttled,
        "non_throttle_failures": att_failed - throttled,
        "status_counts": counts,
        "retry_after_s": dist(ra),
        "backoff_ms": dist(a["backoff_ms"][m & (a["attempt"] > 1)]),
    })
    # Little's law: users ~= completed requests per second x mean end-to-end time of all of them
    e2e_all = a["e2e_ms"][fin]
    e2e_all = e2e_all[np.isfinite(e2e_all)]
    if dur and len(e2e_all):
        n_eff = requests / dur * float(e2e_all.mean()) / 1000.0
        out["little"] = {"effective_concurrency": n_eff, "ratio": n_eff / step["concurrency"]}
    else:
        out["little"] = None
    stages = {}
    for name, col in a.stages.items():
        d = dist(col[m])
        if d:
            stages[name] = {"mean": d["mean"], "p50": d["p50"], "p95": d["p95"]}
    out["server_timing_ms"] = stages
    tiers = {}
    for code, name in enumerate(a.tiers):
        d = dist(a["wait_ms"][okf & (a["tier"] == code)])
        if d:
            tiers[name] = {"count": d["count"], "p50": d["p50"], "p95": d["p95"]}
    out["latency_by_tier_ms"] = tiers
    errs = a["error"][m & (a["error"] >= 0) & ~a["ok"]]
    top = []
    if len(errs):
        codes, c = np.unique(errs, return_counts=True)
        for i in np.argsort(-c)[:5]:
            top.append({"error": a.errors[codes[i]], "count": int(c[i])})
    out["errors"] = top
    out["server"] = resource_aggregate(res, "server", start, end)
    out["client"] = resource_aggregate(res, "client", start, end)
    return out


def infer_steps(a: Attempts) -> list[dict]:
    """Steps from the records themselves, for a run directory without a usable run.json."""
    out = []
    for s in sorted(set(a["step"][a["step"] >= 0].tolist())):
        m = a["step"] == s
        conc = a["concurrency"][m]
        out.append({"step": s, "concurrency": int(conc.max()) if len(conc) else None,
                    "start": float(np.nanmin(a["t0"][m])), "end": float(np.nanmax(a["tend"][m]))})
    return out


def memory_baseline(res: pd.DataFrame, first_start: float | None) -> float | None:
    """GPU memory before load: the minimum of server samples before the first step's window."""
    if not len(res) or first_start is None:
        return None
    w = res[(res["role"] == "server") & (res["ts"] < first_start)]["gpu_mem_used_bytes"].dropna()
    return float(w.min()) if len(w) else None
