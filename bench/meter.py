"""A CPU meter for a benchmark's Locust process; importing it attaches the listener.

It waits ``BENCH_WARM_S`` after the test starts (connections open, imports done), or until
the unix time ``BENCH_START_AT`` when that is set (so that processes run side by side measure
the same window), then takes this process's CPU time and Locust's request count, again
``BENCH_MEASURE_S`` later, and writes both to the JSON file named by ``BENCH_METER_OUT``::

    {"cpu_s": 1.93, "user_s": 1.52, "sys_s": 0.41, "requests": 5210, "wall_s": 4.0,
     "fds": 1041, "rss_bytes": 412000000, "rss_at_start_bytes": 160000000, "users": 1000}

(``fds``, ``rss_bytes`` and ``users`` at the window's end; ``rss_at_start_bytes`` when the test
started, before its users; ``start_unix`` the window's start.) With ``BENCH_AFTER_SPAWN_S`` the
window starts no sooner than that many seconds after Locust said every user was spawned, and
ends where it would have: a host slow to start the users leaves a shorter window, not one
that measures the start.

Nothing is measured when ``BENCH_METER_OUT`` is unset.
"""

from __future__ import annotations

import json
import os
import resource
import time

import gevent
import gevent.event
from locust import events


def _cpu() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def _measure(environment, out: str, warm_s: float, measure_s: float) -> None:
    start_at = os.environ.get("BENCH_START_AT")
    end = time.perf_counter() + (max(0.0, float(start_at) - time.time()) if start_at else warm_s) + measure_s
    gevent.sleep(max(0.0, float(start_at) - time.time()) if start_at else warm_s)
    after_spawn = os.environ.get("BENCH_AFTER_SPAWN_S")
    if after_spawn:
        _SPAWNED.wait()
        gevent.sleep(max(0.0, float(after_spawn) - (time.perf_counter() - _SPAWNED_AT[0])))
        measure_s = max(0.5, end - time.perf_counter())
    start_unix = time.time()
    stats = environment.stats.total
    (u0, s0), n0, t0 = _cpu(), stats.num_requests, time.perf_counter()
    gevent.sleep(measure_s)
    (u1, s1), n1, t1 = _cpu(), stats.num_requests, time.perf_counter()
    with open(out, "w") as f:
        json.dump(
            {
                "cpu_s": u1 - u0 + s1 - s0,
                "user_s": u1 - u0,
                "sys_s": s1 - s0,
                "requests": n1 - n0,
                "wall_s": t1 - t0,
                "fds": _fds(),
                "rss_bytes": _rss(),
                "rss_at_start_bytes": _AT_START.get("rss"),
                "users": environment.runner.user_count if environment.runner else None,
                "start_unix": start_unix,
            },
            f,
        )


def _fds() -> int | None:
    """File descriptors this process holds (Linux), or None."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def _rss() -> int | None:
    """This process's resident memory now (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_AT_START: dict[str, int | None] = {}
_SPAWNED = gevent.event.Event()
_SPAWNED_AT: list[float] = []


@events.spawning_complete.add_listener
def _on_spawned(**_kw: object) -> None:
    _SPAWNED_AT[:] = [time.perf_counter()]
    _SPAWNED.set()


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    out = os.environ.get("BENCH_METER_OUT")
    _AT_START["rss"] = _rss()  # before the users start: what each one adds is measured from here
    if out:
        gevent.spawn(
            _measure,
            environment,
            out,
            float(os.environ.get("BENCH_WARM_S", "1.5")),
            float(os.environ.get("BENCH_MEASURE_S", "4")),
        )
