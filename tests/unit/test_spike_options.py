"""--spike and --spike-at as the options take them: the spike's phases and lengths, and each
mistake one sentence naming the option."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.locustfiles import settings as settings_mod, spike


def _settings(**changes):
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), "http://127.0.0.1:8300")


def test_a_spike_is_three_steps_its_recovery_twice_its_length():
    s = _settings(spike="3x30", spike_at=4, step_time="20")
    assert s.spike == (3.0, 30.0) and s.spike_at == 4
    assert s.public()["spike"] == "3x30" and s.public()["spike_at"] == 4
    sp = spike.Spike.of(s)
    plan = [sp.next(None) for _ in range(4)]
    assert [(p.level, p.phase, p.hold_s) for p in plan[:3]] == [
        (4, "before_spike", None),
        (12, "spike", 30.0),
        (4, "recovery", 60.0),
    ]
    assert plan[3] is None
    assert spike.Spike(2.5, 5, 3, 20).recovery_s == 20  # at least --step-time
    assert _settings().spike is None and _settings().public()["spike"] is None


@pytest.mark.parametrize(
    "changes, says",
    [
        (
            {"spike": "3"},
            "--spike takes FACTORxSECONDS, a factor above 1 and a length in seconds, such as 3x30, got '3'",
        ),
        ({"spike": "1x30"}, "--spike takes FACTORxSECONDS"),
        ({"spike": "3x0"}, "--spike takes FACTORxSECONDS"),
        ({"spike_at": 4}, "--spike-at is the level of --spike: give --spike FACTORxSECONDS too"),
        ({"spike": "3x30", "rates": "2,4"}, "--spike multiplies a concurrency: use it with --steps, not --rates"),
    ],
)
def test_a_spike_given_wrong_is_one_sentence(changes, says):
    with pytest.raises(settings_mod.SettingsError) as e:
        _settings(**changes)
    assert says in str(e.value)
