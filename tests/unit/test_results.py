"""Results declared once (:mod:`runformat.summary`, :mod:`runformat.schema`): each record and
table is a TypedDict whose fields carry their unit and meaning, and its field table is derived
from it (:func:`runformat.fields.table`).

The first tests hold the derivation to what a declaration says (nullable, optional, nested,
keyed by data, a field without its unit and meaning refused); the last analyse synthetic run
directories and check every value of ``summary.json``, ``run.json`` and each attempt record
against the declared types."""

import json
import re
import types
import typing
from typing import Annotated

import pytest

from rundirs import Model, build_run
from tts_knee.runformat import schema, summary
from tts_knee.runformat.fields import Doc, Field, Keyed, NotRequired, TypedDict, table

HINTS: dict[type, dict] = {}


def _alternatives(hint) -> tuple:
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


class _Inner(TypedDict):
    mean: Annotated[float, Doc("ms", "the mean")]


class _Outer(TypedDict):
    one: Annotated[_Inner | None, Doc("", "an object, or null")]
    many: Annotated[list[_Inner], Doc("", "a list of them")]
    by_stage: Annotated[dict[str, _Inner], Doc("ms", "per stage", key="stage name")]
    counts: NotRequired[Annotated[dict[str, int], Doc("count", "by status", key="status")]]
    plain: Annotated[list[float], Doc("s", "a list of numbers")]


def test_a_table_is_derived_from_its_class():
    inner = (Field("mean", "ms", False, "the mean"),)
    assert table(_Outer) == (
        Field("one", "", True, "an object, or null", False, inner),
        Field("many", "", False, "a list of them", False, inner),
        Field("by_stage", "ms", False, "per stage", False, Keyed("stage name", inner)),
        Field("counts", "count", False, "by status", True, Keyed("status")),
        Field("plain", "s", False, "a list of numbers"),
    )


def test_a_field_without_its_unit_and_meaning_or_keyed_without_its_key_is_refused():
    class Bare(TypedDict):
        mean: float

    class Unkeyed(TypedDict):
        by: Annotated[dict[str, int], Doc("count", "keyed by what?")]

    with pytest.raises(TypeError, match="Bare.mean has no Doc"):
        table(Bare)
    with pytest.raises(TypeError, match="Unkeyed.by"):
        table(Unkeyed)


def test_the_manuals_field_reference_is_made_from_the_declarations():
    from pathlib import Path

    from tts_knee.runformat.check import DECLARED, reference

    page = (Path(__file__).resolve().parents[2] / "docs" / "fields.md").read_text()
    assert page == reference(), "docs/fields.md is out of date: make docs writes it"
    sections = re.findall(r"^#+ `?([\w.]+)", page, flags=re.M)
    assert list(DECLARED) == sections[1 : len(DECLARED) + 1]  # each file, then what it nests
    assert {"StepSummary", "Knee", "Diagnosis", "SloVerdict", "StepEntry", "Dist"} <= set(sections)
    assert "| `ttfb_ms` | ms | null | t1 - t0 |" in page


def test_the_outcomes_are_the_probes_counts():
    assert [o.value for o in summary.Outcome] == [f.name for f in table(summary.ProbeOutcomes)]
    assert typing.get_type_hints(summary.Diagnosis)["kind"] is summary.DiagnosisKind


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
        hints = HINTS.get(hint) or HINTS.setdefault(hint, typing.get_type_hints(hint))
        missing = [f"{path}.{k}: missing" for k in hint.__required_keys__ if k not in value]
        return missing + [
            f"{path}.{k}: not a {hint.__name__} key" if k not in hints else w
            for k, v in value.items()
            for w in (_wrong(v, hints[k], f"{path}.{k}") if k in hints else [None])
        ]
    if hint is summary.DiagnosisKind:
        return [] if value in set(summary.DiagnosisKind) else [f"{path}: {value!r} is no kind"]
    if hint is object:  # run.json's options: declared by runformat.options, any JSON value
        return []
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
    wrong = _wrong(s, summary.Summary, "summary")
    wrong += _wrong(json.loads((run / "run.json").read_text()), schema.RunInfo, "run.json")
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]
    wrong += [w for i, r in enumerate(records) for w in _wrong(r, schema.Attempt, f"requests.jsonl:{i + 1}")]
    assert not wrong, "\n".join(wrong[:20])
    assert s["steps"][0]["latency_ms"] and s["steps"][-1]["status_counts"] and s["knee"]["methods"]


def test_the_check_sees_a_figure_of_the_wrong_type():
    step = {"count": 3, "mean": "12 ms", "p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": 1.0, "max": True}
    assert _wrong(step, summary.Dist, "d") == ["d.mean: '12 ms' is not float", "d.max: True is not float"]
