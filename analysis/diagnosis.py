"""Name the bottleneck behind the knee.

Exactly one kind is chosen, checking in this order (the first that holds wins):

1. ``memory_bound`` - out-of-memory errors at any step, GPU memory creeping (on some server
   host, the least GPU memory used after the last step ended is at least ``CREEP_FRACTION`` of
   total above the least before the first step started: both idle times, so it did not come
   back), or GPU memory at least ``MEM_FULL`` of total at the knee.  The level right after each
   step is shown but never judged alone: steps follow each other, so it is the next step's.
   Creep is judged only where samples exist both before and after the run.  First because an
   OOM string is a fact from the server, and a leak spoils every later step.
2. ``client_bound`` - the load generator saturated (on any client host: a Locust process's
   CPU; or the host's CPU or busiest core, when the server does not share that host and the
   host's own Locust process is not measured under half a core with no worker of that host
   reporting: then another process took the CPU, which the evidence says) at or before the
   knee, or Little's law off by more than 25% there: the measurement itself is the limit, so
   nothing the server did can be read from those steps.
3. ``rate_limited`` - at the knee step, 429/503 are at least 5% of attempts.
4. ``server_errors`` - at the knee step, other failures are at least 5% of attempts.
5. ``no_knee`` - latency never rose notably: test higher.
6. ``client_io`` - the knee is in write/concat time while wait stayed flat: it rose more than
   ``LATENCY_RISE`` times, and by at least ``CLIENT_IO_SHARE`` of the knee step's p50 wait.
7. ``queueing`` - requests queue, but there are no server samples at the knee step (no
   collector, or none of its samples fell in that step's window): a saturated GPU/CPU cannot be
   told from a server concurrency limit, so the verdict names neither and the evidence asks
   for ``--collector``.
8. ``compute_bound`` - queueing with a server host's GPU (util >= ``GPU_BUSY``) or CPU
   (total >= ``CPU_BUSY`` or busiest core >= ``CORE_BUSY``) saturated at the knee.  A busy host
   CPU counts only when that host's watched TTS process (if any) uses at least
   ``PROC_SHARE``% of a core: otherwise something else on the host is using it.  Each host is
   judged on its own figures, so an idle host does not average a saturated one away.
9. ``concurrency_limit`` - queueing while those resources were measured and not saturated.

Where the server publishes its own queue depth (``server.server_roles``, from ``--scrape`` or
``--server-metrics``; see :mod:`analysis.server_metrics`), the evidence cites it (summed over its
stages, for a server of several: then :mod:`analysis.stages` names the one that broke, in
``diagnosis.stage``): a queue that reached ``QUEUE_WAITING`` at the knee step while the hardware
idled is the server's concurrency limit, said in those words; with the hardware saturated, the
running requests are quoted. Without GPU/CPU samples the kind stays ``queueing``, but the queue
still tells requests waiting inside the server from a wait before it (the queue stayed empty).

In a streamed run (``knee["streamed"]``) the kinds are the same, but "queueing" means streams
falling behind playback or TTFA rising, and the evidence quotes underrun and TTFA figures
rather than whole-body wait (see :mod:`analysis.knee`).  Audio-integrity mismatches (the
same text giving audio of a different length under load, see :mod:`analysis.steps`) are added
to the evidence whenever there are any, whatever the kind.
"""

from __future__ import annotations

import re
from typing import Literal

from tts_knee.runformat.summary import (
    Diagnosis,
    DiagnosisKind as Kind,
    Dist,
    HostAggregate,
    Knee,
    MemoryCreep,
    ServerRole,
    StepSummary,
    Tail,
)

from . import stages
from .knee import (
    FAILURE_RATE,
    LATENCY_RISE,
    LITTLE_TOLERANCE,
    SIGNAL_RISE,
    SIGNAL_SHARES,
    SILENCE_RISE_MS,
    UNDERRUN_RATE,
    signal_rise,
    signal_share,
)
from .steps import INTEGRITY_ABS_S, INTEGRITY_REL

GPU_BUSY = 80.0  # mean GPU util % over the knee step
CPU_BUSY = 85.0  # mean server CPU %
CORE_BUSY = 95.0  # mean busiest-core %
PROC_SHARE = 50.0  # % of one core the watched TTS process must use for a busy host CPU to count
CLIENT_CPU_BUSY = 90.0
CLIENT_CORE_BUSY = 97.0
CLIENT_PROC_BUSY = 90.0  # % of one core: Locust runs each process's users on a single core
CLIENT_PROC_SHARE = 50.0  # % of one core: a Locust process under it is not what fills its host
CLIENT_IO_SHARE = 0.25  # client_io: the write/concat rise is at least this share of the knee step's wait
MEM_FULL = 0.95
QUEUE_WAITING = 1.0  # the server's own queue reaching this at the knee step: requests waited in it
CREEP_FRACTION = 0.10  # of total GPU memory: more left after the run than before it is a leak
OOM = re.compile(
    r"out of memory|\bOOM\b|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
    r"MemoryError|failed to allocate",
    re.I,
)
GIB = 1024**3


#: A role's resource figures: the server's and the load generator's.
Role = Literal["server", "client"]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.1f} GiB"


def _stat(found: Tail | None, key: Literal["mean", "p95", "max"]) -> float | None:
    """A figure of a distribution (or of its tail), None where there is none."""
    return None if found is None else found.get(key)


def _p50(found: Dist | None) -> float | None:
    return None if found is None else found.get("p50")


def _by_host(step: StepSummary, role: Role) -> dict[str, HostAggregate]:
    """Each host's figures of ``role`` at ``step`` ({} where none were sampled)."""
    aggregate = step.get(role)
    return (aggregate.get("by_host") if aggregate else None) or {}


def _server_figure(step: StepSummary, key: Literal["gpu_mem_total_bytes", "gpu_mem_fallback_bytes"]) -> float | None:
    server = step.get("server")
    return server.get(key) if server else None


def _server_role(step: StepSummary, role: str) -> ServerRole | None:
    """What the server's series say of ``role`` (queue depth, running …) at ``step``, or None."""
    server = step.get("server")
    roles = server.get("server_roles") if server else None
    return roles.get(role) if roles else None


def _lat_sentence(low: StepSummary, high: StepSummary) -> str:
    return (
        f"p95 wait rose from {_ms(_stat(low.get('latency_ms'), 'p95'))} at {low['concurrency']} to "
        f"{_ms(_stat(high.get('latency_ms'), 'p95'))} at {high['concurrency']} (p50 "
        f"{_ms(_p50(low.get('latency_ms')))} -> {_ms(_p50(high.get('latency_ms')))}, max "
        f"{_ms(_stat(high.get('latency_ms'), 'max'))})"
    )


def share(rate: float) -> str:
    """A share as a whole percentage, "<1%" for a few in many (never "0%" when some did)."""
    return "<1%" if 0 < rate < 0.005 else f"{rate:.0%}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _stream_state(step: StepSummary) -> str:
    """ "64% of streams stalled (p95 stall 850 ms)" for one step."""
    rate = step.get("underrun_rate")
    if rate is None:
        return "underruns not measured"
    stall = _stat(step.get("underrun_ms"), "p95")
    return f"{share(rate)} of streams stalled" + (f" (p95 stall {_ms(stall)})" if rate and stall is not None else "")


def stream_sentence(low: StepSummary, high: StepSummary, base: StepSummary) -> str:
    """Underruns and TTFA at ``high`` against ``low`` (the step before) and ``base`` (the lowest)."""
    return (
        f"at {high['concurrency']} streams {_stream_state(high)}; TTFA p95 "
        f"{_ms(_stat(high.get('ttfa_ms'), 'p95'))} vs {_ms(_stat(base.get('ttfa_ms'), 'p95'))} at "
        f"{base['concurrency']}"
        + (
            ""
            if low is base
            else f" (at {low['concurrency']}: {_stream_state(low)}, TTFA p95 {_ms(_stat(low.get('ttfa_ms'), 'p95'))})"
        )
    )


def _quoted(text_id: str | None) -> str:
    """A text's id as the evidence quotes it: its first 60 characters."""
    return (text_id or "")[:60]


def _integrity(steps: list[StepSummary]) -> list[str]:
    evidence = []
    for step in steps:
        checked = step.get("integrity")
        if checked and checked.get("mismatched"):
            rate = checked["rate"]
            assert rate is not None  # the mismatched ones were checked
            examples = "; ".join(
                f'"{_quoted(example["text_id"])}" {example["expected_s"]:.2f} s expected, '
                f"{example['got_s']:.2f} s received"
                for example in checked["examples"][:2]
            )
            evidence.append(
                f"Audio length was off at concurrency {step['concurrency']}: {checked['mismatched']} of "
                f"{checked['checked']} attempts ({'<0.1%' if rate < 0.0005 else format(rate, '.1%')}) "
                "differ from the same text's median at the "
                f"lowest step by more than {INTEGRITY_REL:.0%} (at least {INTEGRITY_ABS_S} s), e.g. {examples}."
            )
    return evidence


def _memory(steps: list[StepSummary], knee_i: int | None, creep: MemoryCreep | None) -> list[str]:
    evidence = []
    for step in steps:
        for error in step.get("errors", []):
            if OOM.search(error["error"]):
                evidence.append(
                    f"{error['count']} attempts at concurrency {step['concurrency']} failed with an "
                    f'out-of-memory error ("{error["error"][:120]}").'
                )
                break
    total = (creep.get("total_bytes") if creep else None) or next(
        (_server_figure(step, "gpu_mem_total_bytes") for step in steps if _server_figure(step, "gpu_mem_total_bytes")),
        None,
    )
    if creep and total and creep["rise_bytes"] > CREEP_FRACTION * total:
        fallbacks = [
            f"{_gib(level)} after {step['concurrency']}"
            for step in steps
            if (level := _server_figure(step, "gpu_mem_fallback_bytes")) is not None
        ]
        host = (
            f" on {creep['host']}"
            if len({server_host for step in steps for server_host in _hosts(step, "server")}) > 1
            else ""
        )
        evidence.append(
            f"GPU memory did not come back after the run{host}: {_gib(creep['baseline_bytes'])} "
            f"before the first step, still {_gib(creep['after_run_bytes'])} after the last one "
            f"ended (+{_gib(creep['rise_bytes'])} of {_gib(total)}), which looks like a leak"
            + (f"; level right after each step: {', '.join(fallbacks)}." if fallbacks else ".")
        )
    if knee_i is not None:
        step = steps[knee_i]
        by_host = _by_host(step, "server")
        for host, aggregate in sorted(by_host.items()):
            peak, tot = aggregate.get("gpu_mem_peak_bytes"), aggregate.get("gpu_mem_total_bytes")
            if peak and tot and peak / tot >= MEM_FULL:
                on_host = f" on {host}" if len(by_host) > 1 else ""
                evidence.append(
                    f"GPU memory peaked at {_gib(peak)} of {_gib(tot)} ({peak / tot:.0%}){on_host} at "
                    f"concurrency {step['concurrency']}."
                )
                break
    return evidence


def _hosts(step: StepSummary, role: Role) -> list[str]:
    aggregate = step.get(role)
    return list((aggregate.get("hosts") if aggregate else None) or ())


def _busiest(
    by_host: dict[str, HostAggregate],
    key: Literal["proc_cpu_mean", "cpu_mean", "busiest_core_mean"],
    hosts: list[str] | None = None,
) -> tuple[str, float] | None:
    """(host, value) of the host with the highest ``key`` among ``hosts`` (all when None); None
    where no host has it."""
    best: tuple[str, float] | None = None
    for host, figures in by_host.items():
        value = figures.get(key)
        if value is not None and (hosts is None or host in hosts) and (best is None or value > best[1]):
            best = (host, value)
    return best


def _locust_idle_on(by_host: dict[str, HostAggregate], host: str) -> bool:
    """Whether ``host``'s own Locust process is measured and used under ``CLIENT_PROC_SHARE`` of
    one core, with no Locust worker of that host reporting (a worker's id is its hostname, '_',
    and a hex id): then the load generator is not what keeps that host's CPU busy."""
    proc = by_host[host].get("proc_cpu_mean")
    return (
        proc is not None
        and proc < CLIENT_PROC_SHARE
        and not any(name.startswith(f"{host}_") for name in by_host if name != host)
    )


def _other_load(steps: list[StepSummary], knee_i: int | None) -> list[str]:
    """A sentence when a load generator's host was busy while its Locust process was not: the
    CPU went to another process there (often the server, run on the same machine)."""
    upto = steps[: knee_i + 1] if knee_i is not None else steps
    for step in upto:
        by_host = _by_host(step, "client")
        servers = set(_hosts(step, "server"))
        for host, aggregate in by_host.items():
            cpu, core = aggregate.get("cpu_mean"), aggregate.get("busiest_core_mean")
            busy = (cpu is not None and cpu >= CLIENT_CPU_BUSY) or (core is not None and core >= CLIENT_CORE_BUSY)
            if host not in servers and busy and _locust_idle_on(by_host, host):
                return [
                    f"The load generator's host{f' {host}' if len(by_host) > 1 else ''} was busy at concurrency "
                    f"{step['concurrency']} (CPU {_pct(cpu)} on average, busiest core {_pct(core)}) while "
                    f"its Locust process used {_pct(aggregate['proc_cpu_mean'])} of one core: another process "
                    f"there took the CPU (the server, if it runs on that machine; a collector watching "
                    f"it, --collector, would show it as the server's)."
                ]
    return []


def _client_saturated(step: StepSummary) -> str | None:
    """The sentence saying the load generator was saturated at ``step`` (its Locust process,
    or its host's CPU or busiest core), or None."""
    by_host = _by_host(step, "client")
    many = len(by_host) > 1

    def on(host: str) -> str:
        return f" on {host}" if many and host else ""

    proc = _busiest(by_host, "proc_cpu_mean")
    # Where the server shares a load generator's host, the host's CPU is the server's too:
    # only the Locust process's own CPU then says whether that client host was saturated.
    # So does a host whose Locust process is measured and nearly idle: what fills its CPU
    # is something else (see _other_load).
    servers = set(_hosts(step, "server"))
    own = [
        client_host
        for client_host in by_host
        if client_host not in servers and not _locust_idle_on(by_host, client_host)
    ]
    cpu = _busiest(by_host, "cpu_mean", own)
    core = _busiest(by_host, "busiest_core_mean", own)
    if proc is not None and proc[1] >= CLIENT_PROC_BUSY:
        proc_host, proc_cpu = proc
        host_cpu = by_host[proc_host].get("cpu_mean")
        notes = ([f"host CPU {_pct(host_cpu)}"] if host_cpu is not None else []) + (
            [f"the busiest of {len(by_host)} client hosts"] if many else []
        )
        return (
            f"The load generator was saturated at concurrency {step['concurrency']}: its Locust "
            f"process{on(proc_host)} used {_pct(proc_cpu)} of one core on average"
            + (f" ({'; '.join(notes)})." if notes else ".")
        )
    busy = (
        cpu
        if cpu is not None and cpu[1] >= CLIENT_CPU_BUSY
        else core
        if core is not None and core[1] >= CLIENT_CORE_BUSY
        else None
    )
    if busy is None:
        return None
    host = busy[0]
    return (
        f"The load generator was saturated at concurrency {step['concurrency']}: client CPU"
        f"{on(host)} {_pct(by_host[host].get('cpu_mean'))} on average, busiest core "
        f"{_pct(by_host[host].get('busiest_core_mean'))}."
    )


def _client(steps: list[StepSummary], knee_i: int | None) -> list[str]:
    evidence = []
    upto = steps[: knee_i + 1] if knee_i is not None else steps
    for step in upto:
        saturated = _client_saturated(step)
        if saturated is not None:
            evidence.append(saturated)
            break
    for step in upto:
        lit = step.get("little")
        if lit and abs(lit["ratio"] - 1) > LITTLE_TOLERANCE:
            evidence.append(
                f"Little's law does not hold at concurrency {step['concurrency']}: over the step's "
                f"{lit.get('window_s') or 0:.0f} s window, requests kept "
                f"{lit['effective_concurrency']:.1f} users busy on average, not "
                f"{round(lit['expected_concurrency'], 1):g} "
                f"({lit['ratio']:.0%}; {step['completed_rps'] or 0:.2f} req/s completed), so users "
                f"were idle between requests."
            )
            break
    return evidence


def _throttling(steps: list[StepSummary], knee_i: int | None) -> list[str]:
    if knee_i is None:
        return []
    step = steps[knee_i]
    if not (step["attempts"] and step["throttled"] / step["attempts"] >= FAILURE_RATE):
        return []
    low_step = steps[max(0, knee_i - 1)] if knee_i else steps[0]
    evidence = [
        f"{step['throttled']} of {step['attempts']} attempts ({step['throttled'] / step['attempts']:.0%}) were "
        f"throttled (429/503) at concurrency {step['concurrency']}, against {low_step['throttled']} at "
        f"{low_step['concurrency']}; {step['retries']} retries."
    ]
    ras = [
        (each_step["concurrency"], mean)
        for each_step in steps
        if (mean := _stat(each_step.get("retry_after_s"), "mean")) is not None
    ]
    if ras:
        evidence.append(
            "Retry-After averaged "
            + ", ".join(f"{seconds:.2f} s at {concurrency}" for concurrency, seconds in ras)
            + (" and rose with concurrency." if len(ras) > 1 and ras[-1][1] > ras[0][1] else ".")
        )
    e_lo, e_hi = _stat(low_step.get("e2e_ms"), "p95"), _stat(step.get("e2e_ms"), "p95")
    evidence.append(
        f"End-to-end p95 (attempts plus backoff) went from {_ms(e_lo)} at {low_step['concurrency']} "
        f"to {_ms(e_hi)} at {step['concurrency']} while p95 wait of successful attempts was "
        f"{_ms(_stat(low_step.get('latency_ms'), 'p95'))} -> {_ms(_stat(step.get('latency_ms'), 'p95'))}."
    )
    return evidence


def _errors(steps: list[StepSummary], knee_i: int | None) -> list[str]:
    if knee_i is None:
        return []
    step = steps[knee_i]
    if not (step["attempts"] and step["non_throttle_failures"] / step["attempts"] >= FAILURE_RATE):
        return []
    top = step["errors"][0]["error"][:120] if step["errors"] else "no error text"
    codes = ", ".join(f"{status}: {count}" for status, count in sorted(step["status_counts"].items()))
    return [
        f"{step['non_throttle_failures']} of {step['attempts']} attempts "
        f"({step['non_throttle_failures'] / step['attempts']:.0%}) failed without throttling at "
        f'concurrency {step["concurrency"]} (statuses {codes}); most common error: "{top}".',
        f"{step['failed']} of {step['requests']} requests still failed after retries "
        f"({(step['error_rate'] or 0):.1%}).",
    ]


def _host_saturation(srv: HostAggregate) -> tuple[bool | None, str]:
    """(saturated?, sentence) for one server host's figures; None when nothing was measured."""
    gpu, cpu, core = srv.get("gpu_util_mean"), srv.get("cpu_mean"), srv.get("busiest_core_mean")
    proc = srv.get("proc_cpu_mean")
    if gpu is None and cpu is None and core is None:
        return None, ""
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
    return (gpu is not None and gpu >= GPU_BUSY) or host_busy, ", ".join(parts)


def _saturation(step: StepSummary) -> tuple[bool | None, str]:
    """(saturated?, sentence) for the server at one step: saturated when any host is; None
    when nothing was measured."""
    srv = step.get("server")
    if not srv:
        return None, ""
    by_host: dict[str, HostAggregate] = srv.get("by_host") or {"": srv}
    judged = [(host, *_host_saturation(aggregate)) for host, aggregate in sorted(by_host.items())]
    judged = [entry for entry in judged if entry[1] is not None]
    if not judged:
        return None, ""
    hit = [entry for entry in judged if entry[1]]
    if len(judged) == 1:
        return judged[0][1], judged[0][2]
    shown = hit or judged
    return bool(hit), "; ".join(f"on {host}: {text}" for host, _, text in shown)


#: What each share the ``signal`` knee watches counts (:data:`analysis.knee.SIGNAL_SHARES`).
SIGNAL_WHAT = {
    "runaway_rate": "answers at least twice as long as the same text's at the lowest step, or for a text heard "
    "once over 5x its language's audio per character: speech running on past the text",
    "truncated_rate": "answers half the same text's length at the lowest step or less",
    "integrity": f"answers more than {INTEGRITY_REL:.0%} off the same text's length at the lowest step",
}


def latency_while(low: StepSummary, high: StepSummary, streamed: bool) -> str:
    """What latency (TTFA in a streamed run) did from level ``low`` to ``high``, in words."""
    key: Literal["ttfa_ms", "latency_ms"] = "ttfa_ms" if streamed else "latency_ms"
    what = "TTFA p95" if streamed else "p95"
    p_lo, p_hi = _stat(low.get(key), "p95"), _stat(high.get(key), "p95")
    if p_lo is None or p_hi is None:
        return f"{what} n/a"
    if abs(p_hi - p_lo) < 0.25 * p_lo:
        return f"{what} stayed at {p_lo:.0f} ms"
    return f"{what} went from {p_lo:.0f} to {p_hi:.0f} ms"


def signal_evidence(levels: list[StepSummary], knee: Knee) -> list[str]:
    """The ``signal`` knee in words: which share rose, from what at the level before to what at
    the knee, and what latency did meanwhile; [] where no share rose."""
    rise = signal_rise(levels)
    if rise is None:
        return []
    rise_index, key = rise
    low, high, base = levels[rise_index - 1], levels[rise_index], levels[0]
    name = next(what for share_key, what, _ in SIGNAL_SHARES if share_key == key)
    r_lo, r_hi, r_base = (signal_share(level, key)[0] or 0.0 for level in (low, high, base))
    since = "" if low is base else f"{share(r_base)} at {base['concurrency']}; "
    evidence = [
        f"{_cap(name)} rose from {share(r_lo)} at {low['concurrency']} to {share(r_hi)} at {high['concurrency']}"
        f" ({since}{SIGNAL_WHAT[key]}) while {latency_while(low, high, bool(knee.get('streamed')))}: the server's "
        f"audio goes wrong before its latency does."
    ]
    if key == "integrity":
        checked = high.get("integrity")
        examples = (checked.get("examples") if checked else None) or []
        if examples:
            example = examples[0]
            evidence.append(
                f'E.g. "{_quoted(example["text_id"])}" at {high["concurrency"]}: {example["got_s"]:.2f} s '
                f"against {example['expected_s']:.2f} s."
            )
    return evidence


def _signal(steps: list[StepSummary], named: tuple[str, ...] = ()) -> list[str]:
    """The signal checks that got worse with load: leading silence that delays what the listener
    hears, and silent, runaway or truncated answers (shares :data:`SIGNAL_RISE` above the lowest
    step's), but none of the shares ``named`` (said already, by :func:`signal_evidence`)."""
    evidence, base = [], steps[0]
    lead0 = _stat(base.get("leading_silence_ms"), "p95")
    worse = [
        step
        for step in steps[1:]
        if lead0 is not None and (_stat(step.get("leading_silence_ms"), "p95") or 0) > lead0 + SILENCE_RISE_MS
    ]
    if worse:
        step = worse[0]
        evidence.append(
            f"From concurrency {step['concurrency']} the audio starts with silence: leading silence p95 "
            f"{_ms(_stat(step.get('leading_silence_ms'), 'p95'))} against {_ms(lead0)} at {base['concurrency']}, so "
            f"the listener hears the first sound at {_ms(_stat(step.get('ttfa_audible_ms'), 'p95'))} (audible TTFA "
            f"p95) though the first audio came at {_ms(_stat(step.get('ttfa_ms'), 'p95'))}: the server answers "
            f"early with silence."
        )
    shares: tuple[tuple[Literal["silent_rate", "runaway_rate", "truncated_rate"], str], ...] = (
        ("silent_rate", "were silent (failed: no sound in them)"),
        ("runaway_rate", f"ran away ({SIGNAL_WHAT['runaway_rate']})"),
        ("truncated_rate", f"were cut short ({SIGNAL_WHAT['truncated_rate']})"),
    )
    for key, what in shares:
        if key in named:
            continue
        low = base.get(key) or 0.0
        hit = next((later for later in steps[1:] if (later.get(key) or 0.0) >= low + SIGNAL_RISE), None)
        if hit is not None:
            evidence.append(
                f"At concurrency {hit['concurrency']} {share(hit[key] or 0.0)} of the answers {what}, against "
                f"{share(low)} at {base['concurrency']}."
            )
    return evidence


def common_evidence(
    steps: list[StepSummary], knee: Knee, has_resources: bool, named: tuple[str, ...] = ()
) -> list[str]:
    """What every diagnosis adds after its own evidence: audio integrity, the signal checks that
    got worse with load (but the shares ``named``, said already), an untimed stream, other load on
    the server, and what resource samples the diagnosis could not rest on."""
    evidence = _integrity(steps) + _signal(steps, named)
    if knee.get("untimed_stream"):
        evidence.append(
            "The run was streamed, but no attempt carries a TTFA or underrun figure (the "
            "client did not time the stream), so the knee follows whole-body time."
        )
    evidence += _other_load(steps, knee.get("index"))
    if not has_resources:
        evidence.append(
            "No resource samples (resources.jsonl missing or empty): the diagnosis "
            "rests on latencies and failures only."
        )
    elif not any(step.get("server") for step in steps):
        evidence.append(
            "No server samples (resources.jsonl has only the load generator's): the "
            "diagnosis rests on latencies and failures only."
        )
    return evidence


def diagnose(steps: list[StepSummary], knee: Knee, creep: MemoryCreep | None, has_resources: bool) -> Diagnosis:
    """What bends the service at the knee, and the evidence; see the module doc.

    ``creep`` is :func:`analysis.steps.memory_creep`'s answer (GPU memory before and after the
    run), or None.
    """
    steps = [step for step in steps if step.get("requests")]
    if not steps:
        return {
            "kind": Kind.NO_KNEE,
            "evidence": ["No settled requests were recorded yet."],
            "resource_data": has_resources,
        }
    knee_index = knee.get("index")
    streamed = bool(knee.get("streamed"))
    ev_common = common_evidence(steps, knee, has_resources)

    def out(kind: Kind, evidence: list[str]) -> Diagnosis:
        return {"kind": kind, "evidence": evidence + ev_common, "resource_data": has_resources}

    first = _failing(steps, knee_index, creep)
    if first is not None:
        return out(*first)
    if knee_index is None:
        return out(Kind.NO_KNEE, _stream_no_knee(steps, knee) if streamed else _no_knee(steps, knee))
    step, low_step = steps[knee_index], steps[knee_index - 1] if knee_index > 0 else steps[0]
    client_io = _client_io(steps, low_step, step)
    if client_io:
        return out(Kind.CLIENT_IO, client_io)
    found = out(*_at_knee(steps, knee_index, streamed))
    named = stages.verdict(steps, knee_index, _saturation(step)[0])
    if named is not None:  # a server of stages: which broke, after what the kind rests on
        found["evidence"][1:1] = named.evidence
        found["stage"] = named.stage
    return found


def _failing(
    steps: list[StepSummary], knee_index: int | None, creep: MemoryCreep | None
) -> tuple[Kind, list[str]] | None:
    """What fails requests or spoils the measurement, judged before what bends latency: memory,
    the load generator, throttling, server errors (the first that holds), or None."""
    mem = _memory(steps, knee_index, creep)
    if mem:
        return Kind.MEMORY_BOUND, mem
    cli = _client(steps, knee_index)
    if cli:
        return Kind.CLIENT_BOUND, cli + [
            "Results at and above that step measure the load generator, not the server: add workers or hosts."
        ]
    thr = _throttling(steps, knee_index)
    if thr:
        return Kind.RATE_LIMITED, thr
    err = _errors(steps, knee_index)
    return (Kind.SERVER_ERRORS, err) if err else None


def _no_knee(steps: list[StepSummary], knee: Knee) -> list[str]:
    """No knee up to the highest step: how far latency stayed, and to test higher."""
    top = steps[-1]
    infl = max((ratio for ratio in knee.get("inflation", []) if ratio is not None), default=1.0)
    return [
        f"Latency stayed within {LATENCY_RISE}x of the lowest step up to concurrency "
        f"{top['concurrency']} (largest rise {infl:.2f}x; p95 wait "
        f"{_ms(_stat(steps[0].get('latency_ms'), 'p95'))} at {steps[0]['concurrency']}, "
        f"{_ms(_stat(top.get('latency_ms'), 'p95'))} at {top['concurrency']}), with "
        f"{sum(step['failed'] for step in steps)} failed requests.",
        f"Throughput reached {top['throughput_rps'] or 0:.2f} req/s; the knee is above the "
        f"highest tested step, so test higher concurrency.",
    ]


def _client_io(steps: list[StepSummary], low_step: StepSummary, step: StepSummary) -> list[str] | None:
    """The client's own writing or concatenation grew to the knee ``step`` while the wait
    stayed flat (``client_io``), or None."""
    w_lo, w_hi = _p50(low_step.get("latency_ms")), _p50(step.get("latency_ms"))
    p95_rise = (_stat(step.get("latency_ms"), "p95") or 0) / (_stat(steps[0].get("latency_ms"), "p95") or 1)
    if not (w_lo and w_hi and w_hi / w_lo <= LATENCY_RISE and p95_rise <= LATENCY_RISE):
        return None  # the wait did not stay flat
    client_times: tuple[tuple[Literal["write_ms", "concat_ms"], str], ...] = (
        ("write_ms", "write"),
        ("concat_ms", "concat"),
    )
    for key, label in client_times:
        base_p50, step_p50 = _p50(steps[0].get(key)), _p50(step.get(key))
        # the client's own time must have grown by enough to matter beside the wait: 2 -> 7 ms of
        # writing beside a 1.9 s wait is no bottleneck, however many times it rose
        if (
            base_p50
            and step_p50
            and step_p50 / base_p50 > LATENCY_RISE
            and step_p50 - base_p50 >= CLIENT_IO_SHARE * w_hi
        ):
            return [
                f"p50 {label} time rose from {_ms(base_p50)} at {steps[0]['concurrency']} to {_ms(step_p50)} at "
                f"{step['concurrency']} while p50 wait stayed at {_ms(w_lo)} -> {_ms(w_hi)}: the "
                f"client's disk or concatenation is the bottleneck, not the server."
            ]
    return None


def _at_knee(steps: list[StepSummary], knee_index: int, streamed: bool) -> tuple[Kind, list[str]]:
    """What bends latency at the knee step ``knee_index``: the server's compute, its concurrency limit,
    or a queue whose cause its samples (where there are none) cannot tell."""
    step, low_step = steps[knee_index], steps[knee_index - 1] if knee_index > 0 else steps[0]
    queue = stream_sentence(low_step, step, steps[0]) if streamed else _lat_sentence(low_step, step)
    thr_lo, thr_hi = low_step.get("throughput_rps"), step.get("throughput_rps")
    throughput = (
        f"throughput went from {thr_lo:.2f} to {thr_hi:.2f} req/s"
        if thr_lo is not None and thr_hi is not None
        else "throughput n/a"
    )
    sat, res = _saturation(step)
    waiting, qev = _server_queue(steps, knee_index)
    if sat is None:
        if waiting:
            return (
                Kind.QUEUEING,
                [
                    f"{_cap(queue) if streamed else queue}; {throughput}: {qev}, so requests wait inside the server.",
                    f"No GPU/CPU samples at concurrency {step['concurrency']}: whether the server's "
                    f"hardware is saturated (compute_bound) or its concurrency limit is too low "
                    f"(concurrency_limit) cannot be told; run a collector beside it (python -m "
                    f"collectors) to tell them apart.",
                ],
            )
        if waiting is False:
            return (
                Kind.QUEUEING,
                [
                    f"{_cap(queue) if streamed else queue}; {throughput}, but {qev}: requests are not waiting "
                    f"in the server's queue, so the wait is before it (the client, the network, a "
                    f"proxy) or in its processing.",
                    f"No GPU/CPU samples at concurrency {step['concurrency']}; run a collector beside "
                    f"the server (tts-knee collect) to see its hardware.",
                ],
            )
        return (
            Kind.QUEUEING,
            [
                f"{_cap(queue) if streamed else queue}; {throughput}: requests queue; without server samples "
                f"the cause cannot be told.",
                f"No server resource samples at concurrency {step['concurrency']}: a saturated GPU/CPU "
                f"(compute_bound) and a server concurrency limit set too low (concurrency_limit) look "
                f"the same from the client; run again with --collector URL (tts-knee collect "
                f"beside the TTS server) to tell them apart.",
            ],
        )
    if streamed:
        queue = _cap(queue)
    if sat:
        evidence = [f"{queue} while {res} at {step['concurrency']}; {throughput}: the server is out of compute."]
        running = _server_role(step, "running") or _server_role(step, "batch_size")
        if running is not None:
            evidence.append(
                f"Running requests ({running['series']}) capped at {_n(running['max'])} "
                f"with {res} at {step['concurrency']}" + (f"; {qev}." if qev else ".")
            )
        elif qev:
            evidence.append(f"{_cap(qev)}.")
        return Kind.COMPUTE_BOUND, evidence
    if waiting:
        return (
            Kind.CONCURRENCY_LIMIT,
            [f"{_cap(qev)} while {res}: its concurrency limit is too low.", f"{_cap(queue)}; {throughput}."],
        )
    evidence = [
        f"{queue} while {res} at {step['concurrency']}; {throughput}: requests queue with the hardware "
        f"idle, so the server's own concurrency or batch limit is too low."
    ]
    if waiting is False:
        evidence.append(
            f"Yet {qev}: the requests did not wait in that queue, so look for a limit in "
            f"front of it (a proxy, a worker pool) or in the client."
        )
    return Kind.CONCURRENCY_LIMIT, evidence


def _n(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _server_queue(steps: list[StepSummary], knee_index: int) -> tuple[bool | None, str]:
    """(requests waited in the server's own queue at the knee step?, the words for it) from
    the server's queue-depth series; (None, "") where the server publishes none."""
    step = steps[knee_index]
    queue = _server_role(step, "queue_depth")
    if queue is None:
        return None, ""
    base = _server_role(steps[0], "queue_depth")
    at_base = f"; {_n(base['max'])} at {steps[0]['concurrency']}" if base is not None and steps[0] is not step else ""
    server = step.get("server")
    staged = len(server.get("stages") or {}) if server else 0
    summed = f", summed over {staged} stages" if staged else ""
    series = queue["series"] + (f", {queue['why']}" if queue.get("why") else "") + summed
    queue_ms = _server_role(step, "queue_ms")
    waited = f", each request waiting {queue_ms['mean']:.0f} ms in it on average" if queue_ms is not None else ""
    if queue["max"] is not None and queue["max"] >= QUEUE_WAITING:
        return True, (
            f"the server's queue ({series}) rose to {_n(queue['max'])} at concurrency "
            f"{step['concurrency']} (mean {queue['mean']:.1f}{waited}{at_base})"
        )
    return False, (f"the server's queue ({series}) stayed at {_n(queue['max'])} at concurrency {step['concurrency']}")


def _stream_no_knee(steps: list[StepSummary], knee: Knee) -> list[str]:
    """Why a streamed run has no knee: every step's streams kept ahead of playback."""
    top, base = steps[-1], steps[0]
    rates = [step.get("underrun_rate") for step in steps]
    known = [rate for rate in rates if rate is not None]
    evidence = []
    if known:
        evidence.append(
            f"Streams kept ahead of playback up to concurrency {top['concurrency']}: at most "
            f"{share(max(known))} of streams stalled at any step (a step breaks at {UNDERRUN_RATE:.0%})."
        )
    else:
        evidence.append(
            "Underruns were not measured (no step has an underrun figure, e.g. compressed "
            "audio the client cannot time), so only TTFA and failures were judged."
        )
    t_lo, t_hi = _stat(base.get("ttfa_ms"), "p95"), _stat(top.get("ttfa_ms"), "p95")
    evidence.append(
        f"TTFA p95 went from {_ms(t_lo)} at {base['concurrency']} to {_ms(t_hi)} at "
        f"{top['concurrency']}: a step breaks only above {LATENCY_RISE}x the lowest step's and "
        f"above the {_ms(knee.get('ttfa_floor_ms'))} floor."
    )
    w_lo, w_hi = _stat(base.get("latency_ms"), "p95"), _stat(top.get("latency_ms"), "p95")
    if w_lo and w_hi and w_hi / w_lo > LATENCY_RISE:
        evidence.append(
            f"Whole-body p95 wait rose from {_ms(w_lo)} to {_ms(w_hi)}, which a listener does not "
            f"hear while the stream stays ahead of playback."
        )
    evidence.append(
        f"Throughput reached {top['throughput_rps'] or 0:.2f} req/s; the knee is above the highest "
        f"tested step, so test higher concurrency."
    )
    return evidence
