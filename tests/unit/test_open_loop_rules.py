"""The open-loop knee rules and the growth test, on hand-made step figures."""

import numpy as np

from tts_knee.analysis import openloop


def step(rate, thr, p95, growing=False, error_rate=0.0, mean=250.0):
    return {
        "rate": rate,
        "requests": 100,
        "failed": int(error_rate * 100),
        "throughput_rps": thr,
        "error_rate": error_rate,
        "dropped": 0,
        "growth": {"growing": growing},
        "sched_wait_ms": {"p95": p95, "mean": mean},
    }


def test_throughput_short_of_offered_is_the_knee():
    steps = [step(4, 4.0, 270), step(8, 7.9, 270), step(12, 11.5, 280), step(24, 16.0, 300)]
    knee = openloop.find_knee(steps)
    assert knee["rate"] == 24 and knee["methods"]["throughput_shortfall"] == 24
    assert knee["methods"]["latency_vs_lowest"] is None
    rate, conc, text = openloop.recommend(steps, knee)
    assert rate == 12 and conc == 3 and "Offer at most 12 req/s" in text


def test_growing_latency_and_failures_break_a_rate_too():
    steps = [step(4, 4.0, 270), step(8, 8.0, 280, growing=True), step(12, 12.0, 900)]
    knee = openloop.find_knee(steps)
    assert knee["rate"] == 8 and knee["methods"]["latency_growing"] == 8
    assert knee["methods"]["latency_vs_lowest"] == 12
    steps = [step(4, 4.0, 270), step(8, 8.0, 270, error_rate=0.2)]
    assert openloop.find_knee(steps)["methods"]["failures"] == 8


def test_no_knee_recommends_the_highest_rate_and_a_knee_at_the_lowest_none():
    steps = [step(4, 4.0, 270), step(8, 8.0, 270)]
    knee = openloop.find_knee(steps)
    assert knee["rate"] is None and openloop.recommend(steps, knee)[0] == 8
    steps = [step(4, 2.0, 270), step(8, 2.0, 270)]
    knee = openloop.find_knee(steps)
    assert knee["rate"] == 4 and openloop.recommend(steps, knee)[:2] == (None, None)


def test_growth_needs_each_third_above_the_one_before():
    t = np.linspace(0, 9, 30)
    assert openloop._growth(t, 250 + 100 * t)["growing"]
    assert not openloop._growth(t, np.full(30, 250.0))["growing"]
    noisy = np.where(np.arange(30) % 2, 250.0, 900.0)  # bursts, but no queue that builds
    assert not openloop._growth(t, noisy)["growing"]
    assert openloop._growth(t[:5], t[:5])["growing"] is None  # too few to judge
