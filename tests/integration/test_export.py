"""``tts-knee export``: a run's records as Parquet and CSV, every column equal to what a plain
``json.loads`` of each line reads (bench/export_scale.py times it against ``tts-knee report``)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from procs import ROOT

ATTEMPTS = 4000  # bench/export_scale.py: 300,000


def _generator():
    spec = importlib.util.spec_from_file_location("dashboard_scale", ROOT / "bench" / "dashboard_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "run"
    _generator()(path, ATTEMPTS)
    return path


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tts_knee", "export", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _same(got, want) -> bool:
    """An exported value against the line's: a struct holds null for keys a record lacks."""
    if isinstance(want, dict):
        known = {k: v for k, v in want.items() if v is not None}
        return (
            isinstance(got, dict)
            and {k: v for k, v in got.items() if v is not None}.keys() == known.keys()
            and all(_same(got[k], v) for k, v in known.items())
        )
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    return got == want and isinstance(got, bool) == isinstance(want, bool)


def _assert_equal(table: pa.Table, records: list[dict]) -> None:
    assert table.num_rows == len(records)
    assert {k for r in records for k in r} <= set(table.column_names)
    for name in table.column_names:
        want = [r.get(name) for r in records]
        got = table.column(name).to_pylist()
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if not _same(g, w)]
        assert not bad, f"{name} row {bad[0]}: exported {got[bad[0]]!r}, the line has {want[bad[0]]!r}"


def test_parquet_attempts_equal_the_json_lines(run, tmp_path):
    out = tmp_path / "attempts.parquet"
    done = export(run, "--format", "parquet", "--out", out)
    assert done.returncode == 0 and done.stdout.strip() == f"{out}: {ATTEMPTS} rows", done.stderr
    table = pq.read_table(out)
    _assert_equal(table, _records(run / "requests.jsonl"))
    types = table.schema
    assert types.field("status").type == pa.int64() and types.field("step").type == pa.int64()
    assert types.field("ok").type == pa.bool_() and types.field("t0").type == pa.float64()
    assert types.field("write_ms").type == pa.float64() and types.field("text_id").type == pa.string()
    assert types.field("concat_ms").type == pa.float64()  # declared, null in every line
    assert pa.types.is_struct(types.field("server_timing").type)
    assert "scheduled" not in table.column_names  # optional, and no line carries it
    assert table.column_names[:3] == ["step", "concurrency", "worker"]  # the format's order


def test_csv_flattens_objects(run, tmp_path):
    out = tmp_path / "attempts.csv"
    assert export(run, "--format", "csv", "--out", out).returncode == 0
    table = pa_csv.read_csv(out)
    records = _records(run / "requests.jsonl")
    assert table.num_rows == len(records)
    for name in ("t0", "wait_ms", "status", "text_id"):
        assert table.column(name).to_pylist() == [r[name] for r in records], name
    assert table.column("server_timing.queue").to_pylist() == [r["server_timing"]["queue"] for r in records]


def test_resources_keep_their_nested_readings(run):
    done = export(run, "--format", "parquet", "--table", "resources")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(run / "resources.parquet")
    _assert_equal(table, _records(run / "resources.jsonl"))
    assert pa.types.is_list(table.schema.field("gpus").type)
    csv_done = export(run, "--format", "csv", "--table", "resources", "--out", run / "resources.csv")
    assert csv_done.returncode == 0, csv_done.stderr
    flat = pa_csv.read_csv(run / "resources.csv")
    assert "proc.cpu_percent" in flat.column_names
    first = json.loads(flat.column("gpus").to_pylist()[0])
    assert first[0]["name"] == "bench"


def test_lines_the_fast_reader_refuses(tmp_path):
    """A gRPC run's code names, values not of their field's type, a line that is not JSON, a
    null: read line by line, the names a string column, the rest skipped and counted."""
    run = tmp_path / "grpc"
    run.mkdir()
    lines = [
        {"step": 1, "t0": 1.5, "status": "OK", "ok": True, "wait_ms": 12, "bytes": 1.5, "settled": 1},
        {"step": 1, "t0": 2.5, "status": "RESOURCE_EXHAUSTED", "ok": False, "wait_ms": 3.25, "settled": True},
        {"step": 2, "t0": 3.5, "status": None, "ok": False, "wait_ms": None, "error": "reset", "bytes": 2},
    ]
    text = "\n".join(json.dumps(r) for r in lines[:2]) + "\nnot json\nnull\n" + json.dumps(lines[2]) + "\n"
    (run / "requests.jsonl").write_text(text + '{"step": 3')  # the last line, still being written
    done = export(run, "--format", "parquet")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "note: skipped 2 lines that are not JSON objects"
    table = pq.read_table(run / "attempts.parquet")
    _assert_equal(table.drop_columns(["settled"]), [{k: v for k, v in r.items() if k != "settled"} for r in lines])
    assert table.column("settled").to_pylist() == ["1", "true", None]  # neither all flags nor all numbers
    assert table.schema.field("status").type == pa.string() and table.schema.field("step").type == pa.int64()
    assert table.schema.field("wait_ms").type == pa.float64() and math.isclose(table.column("wait_ms")[0].as_py(), 12)
    assert table.schema.field("bytes").type == pa.float64()  # 1.5 bytes stay 1.5, not the int64 1


def test_bad_input_is_one_sentence(tmp_path):
    missing = export(tmp_path / "nothing", "--format", "csv")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "is not a directory" in missing.stderr
    no_speech = export(tmp_path, "--format", "csv", "--table", "speech")
    assert no_speech.returncode == 2 and "speech.jsonl does not exist" in no_speech.stderr
    assert "Traceback" not in missing.stderr + no_speech.stderr
