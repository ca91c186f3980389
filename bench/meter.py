"""A CPU meter for a benchmark's Locust process; importing it attaches the listener.

It waits ``BENCH_WARM_S`` after the test starts (connections open, imports done), or until
the unix time ``BENCH_START_AT`` when that is set (so that processes run side by side measure
the same window), then takes this process's CPU time and Locust's request count, again
``BENCH_MEASURE_S`` later, and writes both to the JSON file named by ``BENCH_METER_OUT``::

    {"cpu_s": 1.93, "user_s": 1.52, "sys_s": 0.41, "requests": 5210, "wall_s": 4.0}

Nothing is measured when ``BENCH_METER_OUT`` is unset.
"""
from __future__ import annotations

import json
import os
import resource
import time

import gevent
from locust import events


def _cpu() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def _measure(environment, out: str, warm_s: float, measure_s: float) -> None:
    start_at = os.environ.get("BENCH_START_AT")
    gevent.sleep(max(0.0, float(start_at) - time.time()) if start_at else warm_s)
    stats = environment.stats.total
    (u0, s0), n0, t0 = _cpu(), stats.num_requests, time.perf_counter()
    gevent.sleep(measure_s)
    (u1, s1), n1, t1 = _cpu(), stats.num_requests, time.perf_counter()
    with open(out, "w") as f:
        json.dump({"cpu_s": u1 - u0 + s1 - s0, "user_s": u1 - u0, "sys_s": s1 - s0, "requests": n1 - n0,
                   "wall_s": t1 - t0}, f)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    out = os.environ.get("BENCH_METER_OUT")
    if out:
        gevent.spawn(_measure, environment, out, float(os.environ.get("BENCH_WARM_S", "1.5")),
                     float(os.environ.get("BENCH_MEASURE_S", "4")))
