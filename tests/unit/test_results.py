"""Results with names (:mod:`runformat.results`): each TypedDict is its field table's keys with
Python types, and what the analysis makes of a run holds to them.

The first tests hold the classes to the tables (the same keys, the same required ones, null where
the table allows it, a nested table as its class); the last analyses a synthetic run directory
and checks every step, level, the knee and the diagnosis value by value against the classes, and
the run's attempt records against :class:`~runformat.results.Attempt`."""

from __future__ import annotations

import json
import types
import typing

import pytest

from rundirs import Model, build_run
from tts_knee.runformat import results, summary
from tts_knee.runformat.fields import Keyed

HINTS = {cls: typing.get_type_hints(cls) for cls in results.TABLES}
CLASS_OF = {id(table): cls for cls, table in results.TABLES.items()}


def _alternatives(hint) -> tuple:
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


@pytest.mark.parametrize("cls", list(results.TABLES), ids=lambda c: c.__name__)
def test_each_class_is_its_tables_keys_with_the_required_ones_required(cls):
    table = results.TABLES[cls]
    assert set(HINTS[cls]) == {f.name for f in table}
    assert set(cls.__required_keys__) == {f.name for f in table if not f.optional}


@pytest.mark.parametrize("cls", list(results.TABLES), ids=lambda c: c.__name__)
def test_null_where_the_table_allows_it_and_nested_tables_as_their_classes(cls):
    for f in results.TABLES[cls]:
        hint = HINTS[cls][f.name]
        alts = _alternatives(hint)
        assert (type(None) in alts) == f.nullable, (cls.__name__, f.name, hint)
        values = [a for a in alts if a is not type(None)]
        assert values and object not in values, (cls.__name__, f.name)
        value = values[0]
        if isinstance(f.of, Keyed):
            assert typing.get_origin(value) is dict and typing.get_args(value)[0] is str, (cls.__name__, f.name)
            if f.of.of is not None:
                assert typing.get_args(value)[1] is CLASS_OF[id(f.of.of)], (cls.__name__, f.name)
        elif f.of is not None:
            inner = typing.get_args(value)[0] if typing.get_origin(value) is list else value
            inner = [a for a in _alternatives(inner) if a is not type(None)][0]  # a list's null entries
            assert inner is CLASS_OF.get(id(f.of)), (cls.__name__, f.name, value)


def test_every_table_a_step_the_knee_or_the_diagnosis_nests_has_its_class():
    seen, todo = set(), [summary.STEP_SUMMARY, summary.KNEE, summary.DIAGNOSIS]
    while todo:
        table = todo.pop()
        if id(table) in seen:
            continue
        seen.add(id(table))
        assert id(table) in CLASS_OF
        for f in table:
            nested = f.of.of if isinstance(f.of, Keyed) else f.of
            if nested is not None:
                todo.append(nested)


def test_the_outcomes_are_the_probes_counts():
    assert [o.value for o in summary.Outcome] == [f.name for f in summary.PROBE_LEVEL[1:]]
    assert typing.get_type_hints(results.Diagnosis)["kind"] is summary.DiagnosisKind


def _wrong(value, hint, path: str) -> list[str]:
    """Where ``value`` is not what ``hint`` says (float takes an int; a bool is neither)."""
    alts = _alternatives(hint)
    if len(alts) > 1:
        found = [_wrong(value, a, path) for a in alts if a is not type(None) or value is None]
        return [] if any(not w for w in found) else min(found, key=len)
    origin = typing.get_origin(hint)
    if hint is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__} is not a list"]
        return [w for i, v in enumerate(value) for w in _wrong(v, typing.get_args(hint)[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__} is not an object"]
        return [w for k, v in value.items() for w in _wrong(v, typing.get_args(hint)[1], f"{path}.{k}")]
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__} is not a {hint.__name__}"]
        hints = HINTS.get(hint) or typing.get_type_hints(hint)
        missing = [f"{path}.{k}: missing" for k in hint.__required_keys__ if k not in value]
        return missing + [
            f"{path}.{k}: not a {hint.__name__} key" if k not in hints else w
            for k, v in value.items()
            for w in (_wrong(v, hints[k], f"{path}.{k}") if k in hints else [None])
        ]
    if hint is summary.DiagnosisKind:
        return [] if value in set(summary.DiagnosisKind) else [f"{path}: {value!r} is no kind"]
    kinds = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}[hint]
    if isinstance(value, bool) and hint is not bool or not isinstance(value, kinds):
        return [f"{path}: {value!r} is not {hint.__name__}"]
    return []


@pytest.mark.parametrize(
    "model",
    [
        Model(rate_limit_from=8, error_from=16, server_timing=True, slo="p95_ms<=2000"),
        Model(stream_capacity=6.0, truncate_from=8, gpu_mem_leak_per_step=2 * 2**30, continuous=True, refine_from=4),
    ],
    ids=["whole-bodies", "streamed"],
)
def test_what_the_analysis_makes_of_a_run_holds_to_the_classes(tmp_path, model):
    from tts_knee.analysis.summary import analyze, load

    run = build_run(tmp_path / "run", model)
    s = json.loads(json.dumps(analyze(load(run))))  # as summary.json holds it
    wrong = [w for i, step in enumerate(s["steps"]) for w in _wrong(step, results.StepSummary, f"steps[{i}]")]
    wrong += [w for i, lv in enumerate(s["levels"]) for w in _wrong(lv, results.StepSummary, f"levels[{i}]")]
    wrong += _wrong(s["knee"], results.Knee, "knee") + _wrong(s["diagnosis"], results.Diagnosis, "diagnosis")
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]
    wrong += [w for i, r in enumerate(records) for w in _wrong(r, results.Attempt, f"requests.jsonl:{i + 1}")]
    assert not wrong, "\n".join(wrong[:20])
    assert s["steps"][0]["latency_ms"] and s["steps"][-1]["status_counts"] and s["knee"]["methods"]


def test_the_check_sees_a_figure_of_the_wrong_type():
    step = {"count": 3, "mean": "12 ms", "p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": 1.0, "max": True}
    assert _wrong(step, results.Dist, "d") == ["d.mean: '12 ms' is not float", "d.max: True is not float"]
