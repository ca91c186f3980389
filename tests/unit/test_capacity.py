"""Capacity and cost (analysis.capacity): what a replica carries at the recommendation, its price
per character and per hour of audio, the replicas a demand needs; each bad option one sentence."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.analysis import capacity
from tts_knee.locustfiles import settings as settings_mod

LEVELS = [
    {"concurrency": 2, "throughput_rps": 4.0, "chars_per_s": 200.0, "audio_s_per_s": 12.0},
    {"concurrency": 4, "throughput_rps": 6.0, "chars_per_s": 300.0, "audio_s_per_s": 18.0},
]


def test_the_recommended_level_in_replicas_and_money():
    opts = capacity.Options(cost_per_hour=3.0, plan_for=capacity.parse_demand("100"))
    cap = capacity.capacity(LEVELS, "concurrency", 4, 4, opts)
    assert cap["at"] == {"concurrency": 4}
    assert cap["throughput_rps"] == 6.0 and cap["utterances_per_hour"] == 21_600
    assert cap["mchars_per_hour"] == pytest.approx(1.08)
    # 3 an hour over 1.08 million characters an hour; over 18 hours of audio made an hour
    assert cap["cost_per_million_chars"] == pytest.approx(3.0 / 1.08)
    assert cap["cost_per_audio_hour"] == pytest.approx(3.0 / 18.0)
    # 100 in flight at 4 each, each planned at 80 % of it: 100 / 3.2 = 31.25
    assert cap["plan"] == {"demand": "100", "per_s": False, "headroom": 0.2, "per_replica": 4, "replicas": 32}
    assert "100 concurrent requests need 32 replicas at 4 in flight each" in cap["text"]
    assert "2.78 per million characters" in cap["text"]


def test_a_rate_is_planned_against_the_throughput_and_exact_fits_are_not_rounded_up():
    opts = capacity.Options(plan_for=capacity.parse_demand("24/s"), headroom=0.5)
    cap = capacity.capacity(LEVELS, "concurrency", 4, 4, opts)
    assert cap["plan"]["per_replica"] == 6.0 and cap["plan"]["replicas"] == 8  # 24 / (6 * 0.5), exactly
    assert cap["cost_per_million_chars"] is None and "per million" not in cap["text"]
    open_loop = capacity.capacity(
        [dict(LEVELS[0], rate=5.0)], "rate", 5.0, 3, capacity.Options(plan_for=capacity.parse_demand("7"))
    )
    assert open_loop["at"] == {"concurrency": 3, "rate": 5.0}
    assert open_loop["plan"]["per_replica"] == 3 and open_loop["plan"]["replicas"] == math.ceil(7 / 2.4)


def test_nothing_recommended_is_said_and_plans_nothing():
    cap = capacity.capacity(LEVELS, "concurrency", None, None, capacity.Options(plan_for=capacity.parse_demand("9")))
    assert cap["at"] is None and cap["plan"] is None and cap["throughput_rps"] is None
    assert cap["text"] == "No level is recommended, so there is no capacity to plan with."


def test_the_run_s_own_options_hold_unless_the_report_sets_them():
    recorded = {"cost_per_hour": 2.0, "plan_for": "40/s", "headroom": 0.25}
    own = capacity.options(recorded)
    assert own == capacity.Options(2.0, capacity.Demand(40.0, True), 0.25)
    given = capacity.options(recorded, capacity.Options(cost_per_hour=5.0))
    assert given == capacity.Options(5.0, capacity.Demand(40.0, True), 0.25)
    assert capacity.options({}) == capacity.Options()


@pytest.mark.parametrize(
    "parse,value,message",
    [
        (capacity.parse_demand, "lots", "--plan-for 'lots' is neither a number of concurrent requests"),
        (capacity.parse_demand, "0/s", "--plan-for '0/s' is neither"),
        (capacity.parse_demand, "2.5", "concurrent requests are a whole number (or give a rate, 2.5/s)"),
        (capacity.parse_cost, "-1", "--cost-per-hour '-1' is not a price per hour > 0"),
        (capacity.parse_cost, "inf", "--cost-per-hour 'inf' is not a price"),
        (capacity.parse_headroom, "100%", "--headroom '100%' is not a share of capacity from 0 to below 1"),
        (capacity.parse_headroom, "x", "--headroom 'x' is not a share"),
    ],
)
def test_each_bad_value_is_one_sentence_naming_the_option(parse, value, message):
    with pytest.raises(capacity.CapacityError) as e:
        parse(value)
    assert message in str(e.value) and str(e.value).count(". ") == 0


def test_the_run_checks_and_records_them():
    def settings(**changes):
        return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), "http://127.0.0.1:8300")

    public = settings(cost_per_hour="2.5", plan_for="20/s", headroom="10%").public()
    assert (public["cost_per_hour"], public["plan_for"], public["headroom"]) == (2.5, "20/s", 0.1)
    public = settings().public()
    assert (public["cost_per_hour"], public["plan_for"], public["headroom"]) == (None, None, capacity.HEADROOM)
    with pytest.raises(settings_mod.SettingsError, match="--plan-for '1.5'"):
        settings(plan_for="1.5")


MIB, GIB = 1 << 20, 1 << 30


def _memory_levels(peaks: dict[int, float], total: float | None = 80 * GIB) -> list[dict]:
    return [
        dict(LEVELS[0], concurrency=c, server={"gpu_mem_peak_bytes": peak, "gpu_mem_total_bytes": total})
        for c, peak in peaks.items()
    ]


def test_gpu_memory_per_added_stream_is_the_line_through_the_levels_before_the_knee():
    # 2 GiB of weights, 1.5 GiB a stream; a passing spike at 4 and the queue past the knee (16, 32)
    # are off the line, and the knee's own level is left out
    peaks = {c: 2 * GIB + 1.5 * GIB * c for c in (1, 2, 4, 8, 16, 32)}
    peaks[4] += 6 * GIB
    peaks[16], peaks[32] = 30 * GIB, 31 * GIB
    cap = capacity.capacity(_memory_levels(peaks), "concurrency", 8, 8, capacity.Options(), knee=16)
    mem = cap["gpu_memory"]
    assert mem["levels"] == [1, 2, 4, 8]
    assert mem["per_stream_bytes"] == pytest.approx(1.5 * GIB) and mem["base_bytes"] == pytest.approx(2 * GIB)
    assert mem["at_recommended_bytes"] == pytest.approx(14 * GIB) and mem["headroom_bytes"] == pytest.approx(66 * GIB)
    assert mem["fills_at"] == pytest.approx(52)  # (80 - 2) / 1.5
    assert (
        "GPU memory rose 1,536 MiB per added stream (the peaks at concurrency 1, 2, 4 and 8); 8 streams would "
        "need 14 GiB of 80, leaving 66 GiB. It would be full at about 52 streams." in cap["text"]
    )


def test_gpu_memory_that_does_not_rise_or_is_not_sampled_says_so():
    flat = capacity.capacity(_memory_levels({1: 20 * GIB, 2: 20 * GIB}, None), "concurrency", 2, 2, capacity.Options())
    assert flat["gpu_memory"]["per_stream_bytes"] == 0 and flat["gpu_memory"]["fills_at"] is None
    said = "GPU memory did not rise with the streams (the peaks at concurrency 1 and 2); 2 streams would need 20 GiB."
    assert said in flat["text"]
    one = capacity.capacity(_memory_levels({1: GIB, 2: 2 * GIB}), "concurrency", 1, 1, capacity.Options(), knee=2)
    assert one["gpu_memory"] is None and "GPU memory" not in one["text"]  # one level before the knee: no line
    assert capacity.capacity(LEVELS, "concurrency", 4, 4, capacity.Options())["gpu_memory"] is None
    assert capacity.memory_fit([4, 4], [GIB, 2 * GIB]) is None  # one concurrency: no slope
