"""``tts-knee export RUN_DIR --format parquet|csv [--table attempts|speech|resources] [--out FILE]``:
one of a run directory's record files as a table with typed columns, for pandas, DuckDB or Spark.

``attempts`` is ``requests.jsonl``, ``speech`` the ASR judge's ``speech.jsonl``, ``resources``
``resources.jsonl``; one row per line, one column per field, in the order the run format declares
them (:mod:`runformat.schema`), then any field it does not declare. Each declared field has its
type (:data:`TYPES`: whole numbers int64, flags bool, text string, the rest float64 in the
field's unit); a required field no record carries is all null, an optional one left out. A field
whose values are objects
(``server_timing``, ``proc``, ``gpus``, ``metrics``) is a struct (a list of them) in Parquet and
flattened into ``field.key`` columns in CSV; lists CSV cannot hold are JSON text there. A field
whose values are not all of its type (a gRPC run's ``status`` names codes) is a string column:
strings as they are, other values as JSON text. The file goes to ``--out`` (default
``RUN_DIR/<table>.<format>``). Lines that are not JSON objects are skipped, and counted on stderr.
See docs/results.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from tts_knee import runformat
from tts_knee.runformat.fields import Field

PROG = "tts-knee export"
FORMATS = ("parquet", "csv")
#: Each table: the file it is read from, and the fields it declares.
TABLES: dict[str, tuple[str, tuple[Field, ...]]] = {
    "attempts": (runformat.REQUESTS, runformat.ATTEMPT),
    "speech": (runformat.SPEECH_FILE, runformat.SPEECH),
    "resources": (runformat.RESOURCES, runformat.RESOURCE_SAMPLE),
}
_INT = ("step", "concurrency", "user", "attempt", "text_len", "bytes", "chunks", "underruns", "status", "seq")
_BOOL = ("ok", "final", "settled", "cancelled")
_STRING = (
    *("worker", "error", "retry_after_raw", "req_id", "text_id", "tier", "segment", "audio_file", "voice"),
    *("language", "cancel_quiet", "cancel_note", "text", "metric", "transcript", "reason", "clip"),
    *("host", "role", "source", "collector"),
)
_FLOAT_LISTS = ("chunk_at_ms", "chunk_audio_ms")
#: The Arrow type of each declared field whose values are not objects; every other such field
#: is a float64 (ms, s, unix s, bytes, percent: resource samples' byte counts may be written
#: as 8e9). Fields whose values are objects are typed as pyarrow reads them.
TYPES: dict[str, pa.DataType] = {
    **{name: pa.int64() for name in _INT},
    **{name: pa.bool_() for name in _BOOL},
    **{name: pa.string() for name in _STRING},
    **{name: pa.list_(pa.float64()) for name in _FLOAT_LISTS},
}


class ExportError(Exception):
    """The run directory's file cannot be exported; the message is one sentence."""


def _scalar_type(f: Field) -> pa.DataType | None:
    """The declared field's Arrow type; None for a field whose values are objects."""
    if f.of is not None and f.name not in TYPES:
        return None
    return TYPES.get(f.name, pa.float64())


def _whole_lines(path: Path) -> bytes:
    """The file's complete lines (a last line without its newline is still being written)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExportError(f"{path} does not exist: is {path.parent} a run directory with that table?") from None
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror or e}.") from None
    return data[: data.rfind(b"\n") + 1]


def _fast(data: bytes) -> pa.Table | None:
    """pyarrow's JSON reader, every type inferred (an explicit schema takes it twice as long);
    None where it would not take the lines as ``json.loads`` does: a blank line or two objects on
    one line (rows and lines differ), a line that is not an object (an error, or for ``null`` a
    row with nothing in it), a field whose values change type."""
    lines = data.count(b"\n")
    if not lines:
        return None
    try:
        table = pa_json.read_json(pa.py_buffer(data))
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != lines or not table.num_columns:
        return None
    empty = functools.reduce(pc.and_, (pc.is_null(column) for column in table.columns))
    return None if pc.any(empty).as_py() else table


def _kind(value: Any) -> type:
    return type(value) if type(value) in _KINDS else object


#: The Python types of parsed JSON values, and those each declared type takes without changing
#: one (pyarrow would make 1.5 the int64 1, and True the float64 1.0).
_KINDS = (type(None), bool, int, float, str, list, dict)
_TAKES: dict[pa.DataType, frozenset[type]] = {
    pa.int64(): frozenset((type(None), int)),
    pa.float64(): frozenset((type(None), int, float)),
    pa.bool_(): frozenset((type(None), bool)),
    pa.string(): frozenset((type(None), str)),
}


def _fits(values: list[Any], declared: pa.DataType) -> bool:
    if declared in _TAKES:
        return {_kind(v) for v in values} <= _TAKES[declared]
    numbers = _TAKES[pa.float64()]  # a list of float64
    return all(v is None or (type(v) is list and {_kind(x) for x in v} <= numbers) for v in values)


def _column(values: list[Any], declared: pa.DataType | None) -> pa.Array:
    """One column of the values read line by line: of its declared type where every value is
    one, else as pyarrow infers values of one kind (numbers, objects), else strings (other
    values as JSON text)."""
    kinds = {_kind(v) for v in values} - {type(None)}
    try:
        if declared is not None and _fits(values, declared):
            return pa.array(values, type=declared, from_pandas=False)
        if kinds <= {int, float} or len(kinds) == 1:
            return pa.array(values, from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    return pa.array(
        [v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values], pa.string()
    )


def _slow(data: bytes, fields: tuple[Field, ...]) -> tuple[pa.Table, int]:
    """The lines read one by one with ``json.loads``; the table and how many lines were skipped."""
    records, skipped = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    declared = {f.name: _scalar_type(f) for f in fields}
    columns = {name: _column([r.get(name) for r in records], declared.get(name)) for name in names}
    return pa.table(columns), skipped


def _typed(column: pa.ChunkedArray, declared: pa.DataType | None) -> pa.ChunkedArray:
    """``column`` as its declared type where every value is one (a float field written as whole
    numbers, a field all null), else as it was read."""
    if declared is None or column.type == declared:
        return column
    have, want = column.type, declared
    if pa.types.is_list(have) and pa.types.is_list(want):  # a list of numbers: its numbers
        have, want = have.value_type, want.value_type
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if not pa.types.is_null(have) and not (any(test(have) for test in numeric) and any(test(want) for test in numeric)):
        return column  # a flag or a string is not a number, whatever it would parse as
    try:
        return column.cast(declared, safe=True)
    except (pa.ArrowException, ValueError):
        return column


def _arranged(table: pa.Table, fields: tuple[Field, ...]) -> pa.Table:
    """Declared fields first, in their order and of their types (a required one no record
    carries: all null), then the rest as read."""
    columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    for f in fields:
        declared = _scalar_type(f)
        if f.name in table.column_names:
            columns[f.name] = _typed(table.column(f.name), declared)
        elif not f.optional:
            columns[f.name] = pa.nulls(table.num_rows, declared or pa.null())
    declared_names = {f.name for f in fields}
    columns.update({name: table.column(name) for name in table.column_names if name not in declared_names})
    return pa.table(columns)


def read_table(run_dir: Path, table: str = "attempts") -> tuple[pa.Table, int]:
    """``table`` of the run directory with typed columns, and the lines skipped (not objects)."""
    file_name, fields = TABLES[table]
    data = _whole_lines(Path(run_dir) / file_name)
    fast = _fast(data)
    read, skipped = (fast, 0) if fast is not None else _slow(data, fields)
    return _arranged(read, fields), skipped


def _as_text(column: pa.ChunkedArray) -> pa.Array:
    return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()], pa.string())


def flat(table: pa.Table) -> pa.Table:
    """``table`` as CSV holds it: structs flattened into ``field.key`` columns, lists (and any
    other nested type) as JSON text."""
    while any(pa.types.is_struct(t) for t in table.schema.types):
        table = table.flatten()
    nested = [i for i, t in enumerate(table.schema.types) if pa.types.is_nested(t)]
    for i in nested:
        table = table.set_column(i, table.column_names[i], _as_text(table.column(i)))
    return table


def export(run_dir: Path, fmt: str, table: str = "attempts", out: Path | None = None) -> tuple[Path, int, int]:
    """Write ``table`` of ``run_dir`` as ``fmt`` to ``out`` (default ``RUN_DIR/<table>.<fmt>``);
    returns the file, its rows and the lines skipped. Raises :class:`ExportError`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir} is not a directory: pass a run directory written by a tts-knee run.")
    data, skipped = read_table(run_dir, table)
    out = Path(out) if out is not None else run_dir / f"{table}.{fmt}"
    try:
        if fmt == "parquet":
            pq.write_table(data, out)
        else:
            pa_csv.write_csv(flat(data), out)
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or e}.") from None
    return out, data.num_rows, skipped


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--format", choices=FORMATS, required=True, help="the file's format (required: no default)")
    p.add_argument(
        "--table",
        choices=tuple(TABLES),
        default="attempts",
        help="attempts (requests.jsonl), speech (the judged clips, speech.jsonl) or resources "
        "(resources.jsonl) (default attempts)",
    )
    p.add_argument("--out", type=Path, metavar="FILE", help="where it goes (default RUN_DIR/<table>.<format>)")
    return p


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    try:
        out, rows, skipped = export(args.run_dir, args.format, args.table, args.out)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if skipped:
        print(f"note: skipped {skipped} lines that are not JSON objects", file=sys.stderr)
    print(f"{out}: {rows} rows", flush=True)
    return 0
