"""An option is its declaration (:class:`runformat.options.RunOptions`): the run's settings are a
RunOptions, each value checked by its declaration (kind, bounds, choices) and the setting of its
name, and ``run.json`` records every setting named as its key as its declaration says, without a
list of keys to keep (``docs/adding.md``)."""

from __future__ import annotations

import dataclasses
import typing
from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.locustfiles import settings as settings_mod
from tts_knee.runformat.options import OPTIONS, RECORDED, RUN_OPTIONS, Parsed, RunOptions

HOST = "http://127.0.0.1:8300"
BOUNDED = [o for o in OPTIONS if o.at_least is not None or o.above is not None]
CHOSEN = [o for o in OPTIONS if o.choices]
HINTS = typing.get_type_hints(settings_mod.Settings)
DECLARED = typing.get_type_hints(RunOptions)


def settings(**changes) -> settings_mod.Settings:
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), HOST)


@pytest.mark.parametrize("option", BOUNDED, ids=lambda o: o.flag)
def test_a_bounded_option_is_a_setting_of_its_kind_and_name(option):
    assert option.kind in (int, float) and option.flag
    assert HINTS[option.name] is option.kind
    assert option.checked(option.default) == option.default  # the default is within its bounds


@pytest.mark.parametrize("option", BOUNDED, ids=lambda o: o.flag)
def test_a_value_out_of_bounds_ends_in_one_sentence_naming_the_option(option):
    low = option.above if option.above is not None else option.at_least - 1
    not_finite = "must be a finite number" if option.kind is float else "must be a number"  # int("nan") fails
    for bad, said in ((low, "must be"), ("many", "must be a number"), ("nan", not_finite)):
        with pytest.raises(settings_mod.SettingsError, match=f"^{option.flag} {said}"):
            settings(**{option.name: bad})


def test_a_bounded_option_is_taken_as_given_and_recorded_under_its_key():
    s = settings(asr_threads="3", playback_buffer_ms=250, repeat=2, split_max_chars="0")
    assert (s.asr_threads, s.playback_buffer_ms, s.repeat, s.split_max_chars) == (3, 250.0, 2, 0)
    recorded = s.public()
    assert (recorded["playback_buffer_ms"], recorded["repeat"], recorded["split_max_chars"]) == (250.0, 2, 0)
    assert recorded["asr_threads"] is None  # its declaration says: recorded only with --asr-model
    assert settings(asr_model="base", asr_threads=3).public()["asr_threads"] == 3


@pytest.mark.parametrize("option", CHOSEN, ids=lambda o: o.flag)
def test_a_value_not_among_the_choices_ends_in_one_sentence_naming_them(option):
    named = ", ".join(c for c in option.choices if c)
    with pytest.raises(settings_mod.SettingsError, match=f"^{option.flag} must be one of {named}, got 'nope'$"):
        settings(**{option.name: "nope"})


def test_an_option_parsed_into_a_value_of_its_own_is_typed_by_the_settings():
    parsed = [name for name, hint in DECLARED.items() if hint is Parsed]
    assert {"steps", "texts", "voices", "trace"} <= set(parsed)
    for name in parsed:  # the settings declare what it is parsed into
        assert HINTS[name] is not Parsed, name
    for name, hint in DECLARED.items():  # the others are the setting as declared
        assert hint is Parsed or HINTS[name] == hint, name


def test_what_run_json_records_only_with_another_setting_names_a_setting():
    fields = {f.name for f in dataclasses.fields(settings_mod.Settings)}
    conditional = {key: declared.only_with for key, declared in RECORDED.items() if declared.only_with}
    assert conditional and all(set(names) <= fields for names in conditional.values())
    closed = settings(arrival="constant", arrival_seed=4).public()
    opened = settings(rates="2", arrival="constant", arrival_seed=4).public()
    assert (closed["arrival"], closed["arrival_seed"]) == (None, None)
    assert (opened["arrival"], opened["arrival_seed"]) == ("constant", 4)


def test_run_json_records_every_setting_named_as_its_key_and_only_declared_keys():
    fields = {f.name for f in dataclasses.fields(settings_mod.Settings)}
    recorded = settings().public()
    assert list(recorded) == [f.name for f in RUN_OPTIONS]
    assert {f.name for f in RUN_OPTIONS} & fields <= set(recorded)
