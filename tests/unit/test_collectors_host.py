"""Host readings: a CPU figure over no elapsed CPU time is unknown (None), never 0."""

from __future__ import annotations

from collections import namedtuple

import psutil

from tts_knee.collectors import host
from tts_knee.collectors.host import HostSampler, ratio_percent

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def _times(user: float, idle: float) -> Times:
    return Times(user, 0.0, 0.0, idle, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_ratio_over_no_time_is_unknown():
    assert ratio_percent(0.0, 0.0) is None
    assert ratio_percent(1.0, 0.0) is None
    assert ratio_percent(1.0, 4.0) == 25.0
    assert ratio_percent(0.0, 4.0) == 0.0  # idle is a real 0


def test_no_cpu_time_passed_reads_none(monkeypatch):
    readings = iter([[_times(5, 10), _times(7, 10)], [_times(5, 10), _times(7, 10)]])
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=True: next(readings))
    s = HostSampler().read()
    assert s["cpu_percent"] is None and s["cpu_max_core_percent"] is None
    assert s["iowait_percent"] is None and s["steal_percent"] is None


def test_only_the_cores_whose_time_moved_count(monkeypatch):
    # core 0 did not move (a counter that stood still), core 1 was busy half the time
    readings = iter([[_times(5, 10), _times(7, 10)], [_times(5, 10), _times(8, 11)]])
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=True: next(readings))
    s = HostSampler().read()
    assert s["cpu_max_core_percent"] == 50.0 and s["cpu_percent"] == 50.0
    assert host.ratio_percent(0.0, 2.0) == 0.0
