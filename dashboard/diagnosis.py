"""Name the bottleneck behind the knee.

Exactly one kind is chosen, checking in this order (the first that holds wins):

1. ``memory_bound`` - out-of-memory errors at any step, GPU memory creeping (the level it
   falls back to after each step keeps rising, or it ends the run well above where it
   started), or GPU memory at least ``MEM_FULL`` of total at the knee.  First because an OOM
   string is a fact from the server, and a leak spoils every later step.
2. ``client_bound`` - the load generator saturated (its Locust process's CPU; or the client
   host's CPU or busiest core, when the server does not share that host) at or
   before the knee, or Little's law off by more than 25% there: the measurement itself is the
   limit, so nothing the server did can be read from those steps.
3. ``rate_limited`` - from the knee on, 429/503 are at least 5% of attempts.
4. ``server_errors`` - from the knee on, other failures are at least 5% of attempts.
5. ``no_knee`` - latency never rose notably: test higher.
6. ``client_io`` - the knee is in write/concat time while wait stayed flat.
7. ``compute_bound`` - queueing with the server's GPU (util >= ``GPU_BUSY``) or CPU
   (total >= ``CPU_BUSY`` or busiest core >= ``CORE_BUSY``) saturated at the knee.  A busy host
   CPU counts only when the watched TTS process (if any) uses at least ``PROC_SHARE``% of a
   core: otherwise something else on the host is using it.
8. ``concurrency_limit`` - queueing while those resources were measured and not saturated.

Without server resource samples, saturation cannot be proven either way; the default is
``compute_bound`` and the evidence says that a collector is needed to tell it apart from
``concurrency_limit``.
"""
from __future__ import annotations

import re

from .knee import FAILURE_RATE, LATENCY_RISE, LITTLE_TOLERANCE

GPU_BUSY = 80.0  # mean GPU util % over the knee step
CPU_BUSY = 85.0  # mean server CPU %
CORE_BUSY = 95.0  # mean busiest-core %
PROC_SHARE = 50.0  # % of one core the watched TTS process must use for a busy host CPU to count
CLIENT_CPU_BUSY = 90.0
CLIENT_CORE_BUSY = 97.0
CLIENT_PROC_BUSY = 90.0  # % of one core: Locust runs each process's users on a single core
MEM_FULL = 0.95
CREEP_FRACTION = 0.05  # of total GPU memory
OOM = re.compile(r"out of memory|\bOOM\b|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
                 r"MemoryError|failed to allocate", re.I)
GIB = 1024 ** 3


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.0f} ms"


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def _gib(v) -> str:
    return "n/a" if v is None else f"{v / GIB:.1f} GiB"


def _get(s: dict, *path):
    for p in path:
        if s is None:
            return None
        s = s.get(p)
    return s


def _lat_sentence(lo: dict, hi: dict) -> str:
    return (f"p95 wait rose from {_ms(_get(lo, 'latency_ms', 'p95'))} at {lo['concurrency']} to "
            f"{_ms(_get(hi, 'latency_ms', 'p95'))} at {hi['concurrency']} (p50 "
            f"{_ms(_get(lo, 'latency_ms', 'p50'))} -> {_ms(_get(hi, 'latency_ms', 'p50'))}, max "
            f"{_ms(_get(hi, 'latency_ms', 'max'))})")


def _memory(steps, knee_i, baseline) -> list[str]:
    ev = []
    for s in steps:
        for e in s.get("errors", []):
            if OOM.search(e["error"]):
                ev.append(f"{e['count']} attempts at concurrency {s['concurrency']} failed with an "
                          f"out-of-memory error (\"{e['error'][:120]}\").")
                break
    total = next((_get(s, "server", "gpu_mem_total_bytes") for s in steps
                  if _get(s, "server", "gpu_mem_total_bytes")), None)
    fb = [(s["concurrency"], _get(s, "server", "gpu_mem_fallback_bytes")) for s in steps]
    fb = [(c, v) for c, v in fb if v is not None]
    if total and len(fb) >= 3:
        vals = [v for _, v in fb]
        rising = all(b > a for a, b in zip(vals, vals[1:]))
        start = baseline if baseline is not None else vals[0]
        if (rising and vals[-1] - vals[0] > CREEP_FRACTION * total) or \
                vals[-1] - start > 2 * CREEP_FRACTION * total and rising:
            ev.append(f"GPU memory did not fall back after the steps: the level after each step crept "
                      f"from {_gib(vals[0])} (after {fb[0][0]}) to {_gib(vals[-1])} (after {fb[-1][0]}), "
                      f"baseline before load {_gib(baseline)} of {_gib(total)}, which looks like a leak.")
    if knee_i is not None:
        s = steps[knee_i]
        peak, tot = _get(s, "server", "gpu_mem_peak_bytes"), _get(s, "server", "gpu_mem_total_bytes")
        if peak and tot and peak / tot >= MEM_FULL:
            ev.append(f"GPU memory peaked at {_gib(peak)} of {_gib(tot)} ({peak / tot:.0%}) at "
                      f"concurrency {s['concurrency']}.")
    return ev


def _client(steps, knee_i) -> list[str]:
    ev = []
    upto = steps[: knee_i + 1] if knee_i is not None else steps
    for s in upto:
        cpu, core = _get(s, "client", "cpu_mean"), _get(s, "client", "busiest_core_mean")
        proc = _get(s, "client", "proc_cpu_mean")
        # Where the server shares the load generator's host, the host's CPU is the server's too:
        # only the Locust process's own CPU then says whether the client was saturated.
        shared = set((s.get("client") or {}).get("hosts") or ()) & set((s.get("server") or {}).get("hosts") or ())
        if proc is not None and proc >= CLIENT_PROC_BUSY:
            ev.append(f"The load generator was saturated at concurrency {s['concurrency']}: its Locust "
                      f"process used {_pct(proc)} of one core on average (host CPU {_pct(cpu)}).")
            break
        if not shared and ((cpu is not None and cpu >= CLIENT_CPU_BUSY)
                           or (core is not None and core >= CLIENT_CORE_BUSY)):
            ev.append(f"The load generator was saturated at concurrency {s['concurrency']}: client CPU "
                      f"{_pct(cpu)} on average, busiest core {_pct(core)}.")
            break
    for s in upto:
        lit = s.get("little")
        if lit and abs(lit["ratio"] - 1) > LITTLE_TOLERANCE:
            ev.append(f"Little's law does not hold at concurrency {s['concurrency']}: throughput "
                      f"{s['completed_rps']:.2f} req/s x mean end-to-end latency gives "
                      f"{lit['effective_concurrency']:.1f} users busy, not {s['concurrency']} "
                      f"({lit['ratio']:.0%}), so users were idle between requests.")
            break
    return ev


def _throttling(steps, knee_i) -> list[str]:
    after = [steps[knee_i]] if knee_i is not None else []
    hit = [s for s in after if s["attempts"] and s["throttled"] / s["attempts"] >= FAILURE_RATE]
    if not hit:
        return []
    s = hit[0]
    lo = steps[max(0, knee_i - 1)] if knee_i else steps[0]
    ev = [f"{s['throttled']} of {s['attempts']} attempts ({s['throttled'] / s['attempts']:.0%}) were "
          f"throttled (429/503) at concurrency {s['concurrency']}, against {lo['throttled']} at "
          f"{lo['concurrency']}; {s['retries']} retries."]
    ras = [(x["concurrency"], _get(x, "retry_after_s", "mean")) for x in steps]
    ras = [(c, v) for c, v in ras if v is not None]
    if ras:
        ev.append("Retry-After averaged " + ", ".join(f"{v:.2f} s at {c}" for c, v in ras)
                  + (" and rose with concurrency." if len(ras) > 1 and ras[-1][1] > ras[0][1] else "."))
    e_lo, e_hi = _get(lo, "e2e_ms", "p95"), _get(s, "e2e_ms", "p95")
    ev.append(f"End-to-end p95 (attempts plus backoff) went from {_ms(e_lo)} at {lo['concurrency']} "
              f"to {_ms(e_hi)} at {s['concurrency']} while p95 wait of successful attempts was "
              f"{_ms(_get(lo, 'latency_ms', 'p95'))} -> {_ms(_get(s, 'latency_ms', 'p95'))}.")
    return ev


def _errors(steps, knee_i) -> list[str]:
    after = [steps[knee_i]] if knee_i is not None else []
    for s in after:
        if s["attempts"] and s["non_throttle_failures"] / s["attempts"] >= FAILURE_RATE:
            top = s["errors"][0]["error"][:120] if s["errors"] else "no error text"
            codes = ", ".join(f"{k}: {v}" for k, v in sorted(s["status_counts"].items()))
            return [f"{s['non_throttle_failures']} of {s['attempts']} attempts "
                    f"({s['non_throttle_failures'] / s['attempts']:.0%}) failed without throttling at "
                    f"concurrency {s['concurrency']} (statuses {codes}); most common error: \"{top}\".",
                    f"{s['failed']} of {s['requests']} requests still failed after retries "
                    f"({(s['error_rate'] or 0):.1%})."]
    return []


def _saturation(s: dict) -> tuple[bool | None, str]:
    """(saturated?, sentence) for the server at one step; None when nothing was measured."""
    srv = s.get("server")
    if not srv:
        return None, ""
    gpu, cpu, core = srv.get("gpu_util_mean"), srv.get("cpu_mean"), srv.get("busiest_core_mean")
    proc = srv.get("proc_cpu_mean")
    parts = []
    if gpu is not None:
        parts.append(f"GPU utilisation {_pct(gpu)} (max {_pct(srv.get('gpu_util_max'))})")
    parts.append(f"server CPU {_pct(cpu)} (busiest core {_pct(core)})")
    if proc is not None:
        parts.append(f"TTS process {_pct(proc)}")
    host_busy = (cpu is not None and cpu >= CPU_BUSY) or (core is not None and core >= CORE_BUSY)
    if host_busy and proc is not None and proc < PROC_SHARE:
        # The host is busy but the watched TTS process is not what keeps it busy (another
        # tenant, or the load generator on the same host): that is not the server's compute.
        host_busy = False
        parts.append("the host's CPU is busy with other processes")
    sat = (gpu is not None and gpu >= GPU_BUSY) or host_busy
    if gpu is None and cpu is None and core is None:
        return None, ""
    return sat, ", ".join(parts)


def diagnose(steps: list[dict], knee: dict, baseline: float | None, has_resources: bool) -> dict:
    """``{"kind", "evidence": [sentences], "resource_data": bool}``; see the module doc."""
    steps = [s for s in steps if s.get("requests")]
    if not steps:
        return {"kind": "no_knee", "evidence": ["No settled requests were recorded yet."],
                "resource_data": has_resources}
    k = knee.get("index")
    ev_common = []
    if not has_resources:
        ev_common.append("No resource samples (resources.jsonl missing or empty): the diagnosis "
                         "rests on latencies and failures only.")

    def out(kind, ev):
        return {"kind": kind, "evidence": ev + ev_common, "resource_data": has_resources}

    mem = _memory(steps, k, baseline)
    if mem:
        return out("memory_bound", mem)
    cli = _client(steps, k)
    if cli:
        return out("client_bound", cli + ["Results at and above that step measure the load "
                                          "generator, not the server: add workers or hosts."])
    thr = _throttling(steps, k)
    if thr:
        return out("rate_limited", thr)
    err = _errors(steps, k)
    if err:
        return out("server_errors", err)
    top = steps[-1]
    if k is None:
        infl = max((r for r in knee.get("inflation", []) if r is not None), default=1.0)
        ev = [f"Latency stayed within {LATENCY_RISE}x of the lowest step up to concurrency "
              f"{top['concurrency']} (largest rise {infl:.2f}x; p95 wait "
              f"{_ms(_get(steps[0], 'latency_ms', 'p95'))} at {steps[0]['concurrency']}, "
              f"{_ms(_get(top, 'latency_ms', 'p95'))} at {top['concurrency']}), with "
              f"{sum(s['failed'] for s in steps)} failed requests.",
              f"Throughput reached {top['throughput_rps'] or 0:.2f} req/s; the knee is above the "
              f"highest tested step, so test higher concurrency."]
        return out("no_knee", ev)
    s, lo = steps[k], steps[k - 1] if k > 0 else steps[0]
    w_lo, w_hi = _get(lo, "latency_ms", "p50"), _get(s, "latency_ms", "p50")
    wait_flat = w_lo and w_hi and w_hi / w_lo <= LATENCY_RISE and \
        (_get(s, "latency_ms", "p95") or 0) / (_get(steps[0], "latency_ms", "p95") or 1) <= LATENCY_RISE
    for key, label in (("write_ms", "write"), ("concat_ms", "concat")):
        a, b = _get(steps[0], key, "p50"), _get(s, key, "p50")
        if wait_flat and a and b and b / a > LATENCY_RISE:
            return out("client_io", [
                f"p50 {label} time rose from {_ms(a)} at {steps[0]['concurrency']} to {_ms(b)} at "
                f"{s['concurrency']} while p50 wait stayed at {_ms(w_lo)} -> {_ms(w_hi)}: the "
                f"client's disk or concatenation is the bottleneck, not the server."])
    queue = _lat_sentence(lo, s)
    thr_lo, thr_hi = lo.get("throughput_rps"), s.get("throughput_rps")
    tp = (f"throughput went from {thr_lo:.2f} to {thr_hi:.2f} req/s"
          if thr_lo is not None and thr_hi is not None else "throughput n/a")
    sat, res = _saturation(s)
    if sat is None:
        return out("compute_bound", [
            f"{queue}; {tp}: requests are queueing.",
            "Without server resource samples, a saturated GPU/CPU (compute_bound) cannot be told "
            "apart from a server concurrency limit set too low (concurrency_limit); compute_bound "
            "is the default, run with --collector to decide."])
    if sat:
        return out("compute_bound", [f"{queue} while {res} at {s['concurrency']}; {tp}: the server "
                                     f"is out of compute."])
    return out("concurrency_limit", [f"{queue} while {res} at {s['concurrency']}; {tp}: requests "
                                     f"queue with the hardware idle, so the server's own concurrency "
                                     f"or batch limit is too low."])
