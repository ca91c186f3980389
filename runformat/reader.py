"""Read a run directory: ``run.json``, ``requests.jsonl`` and ``resources.jsonl``.

Attempt records become numpy columns (only the fields the dashboard uses), block by block, and
no per-record objects are kept. A column costs its dtype's bytes an attempt (float64 figures,
int32 step, concurrency, attempt and status, int16 label codes, one byte a flag) once a record has
written its field; a field no record has written costs nothing (:data:`_ROW_COLUMNS`). A run that
does not stream (no stream, signal, barge-in or open-loop fields) holds about 115 bytes an
attempt, one that writes every field about 265, each Server-Timing stage 8 more;
``tts-knee report`` of 3 million attempts peaked
at 766 MiB (``bench/dashboard_scale.py``). Everything read stays in memory: a run directory
larger than that allows is not read in parts (a columnar copy beside ``requests.jsonl``, the
JSON lines staying the record, would be the way; there is none yet).  A block of
well-formed records is read by pyarrow's JSON reader straight into columns; a block it would
read differently from ``json.loads`` (a bad line, a value of an unexpected type) is read line by
line with orjson instead.  Both give the same columns (``tests/unit/test_dashboard_reader.py``);
resource samples alike (:func:`_arrow_sample_frame`, else :func:`_sample_frame`).
Readers are incremental: :meth:`RequestLog.update` and :meth:`ResourceLog.update` parse only
what was appended since the last call, which is what the live view and the web UI's step plan
need while a run is being written.

Streaming fields (``ttfa_ms``, ``chunks``, ``gap_max_ms``, ``underruns``, ``underrun_ms``,
``preroll_ms``, ``stall_max_ms``, ``tail_ms``) are float columns like the others; a value that is
not a finite number >= 0 (or, for the counts, not a whole number) is NaN.  The per-chunk lists
``chunk_at_ms`` / ``chunk_audio_ms`` are not kept: each row remembers how many chunk entries it
carried (``chunk_n``, -1 when the lists are missing or do not match) and, where it carried them,
its line's byte offset in ``requests.jsonl`` (``offset``, -1 elsewhere), and
:meth:`RequestLog.chunk_series` re-reads the few lines a figure draws.  What is kept of them is
the gaps between consecutive arrivals (:attr:`Attempts.gaps`, ``gap_n`` per row), which the
step's pooled chunk latencies need.

``status`` is an HTTP status or, for a gRPC attempt, the code's name: the ``status`` column is
then the HTTP status that code amounts to (:data:`runformat.grpc_codes.AS_HTTP`), so throttling
counts alike, and ``status_name`` codes the name into :attr:`Attempts.statuses` (-1 for a
number or none).

Field names and the format come from :mod:`runformat`. It reads run directories of format
versions 1 and 2 (``run.json``'s ``format_version``; none means 1); one of a later version is
refused with one sentence (:attr:`RunDir.format_error`), since its fields may mean other things.

A line that is not a JSON object is skipped and counted in ``bad_lines``.  A last line without
its newline is being written (or was cut by a crash): it is left unparsed and reported as
``incomplete_last_line``; the next update picks it up once it is complete.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from tts_knee import runformat
from tts_knee.runformat.grpc_codes import AS_HTTP as GRPC_AS_HTTP
from tts_knee.runformat.options import DEFAULTS as OPTION_DEFAULTS

READ_BYTES = 8 << 20  # read requests.jsonl in blocks of this size
CHUNK_LINES = 16384  # lines held as parsed records at once before they become numpy arrays
MAX_LABELS = 2000  # distinct error strings / text ids kept; the rest share one label
MAX_STAGES = 32  # distinct Server-Timing stage names kept
MAX_LANGUAGES = 64  # distinct languages kept (voices: MAX_LABELS)
OTHER_LABEL = "(other)"


def _default_ms(key: str) -> float:
    """The option ``key``'s default, a float of milliseconds."""
    value = OPTION_DEFAULTS[key]
    assert isinstance(value, float), (key, value)
    return value


TTFA_FLOOR_MS = _default_ms("ttfa_floor_ms")  # for runs whose run.json does not say

# How each numeric attempt field becomes a column (named as the field):
NUM = "num"  # a finite number, else NaN
AMOUNT = "amount"  # a finite number >= 0, else NaN
COUNT = "count"  # a whole finite number >= 0, else NaN
INT = "int"  # int32, truncated toward zero; -1 where missing, not a finite number or out of range
_COLUMNS = {
    "t0": NUM,
    "ttfb_ms": NUM,
    "wait_ms": NUM,
    "write_ms": NUM,
    "concat_ms": NUM,
    "audio_s": NUM,
    "rtf": NUM,
    "retry_after_s": NUM,
    "backoff_ms": NUM,
    "text_len": NUM,
    "scheduled": NUM,
    "sched_wait_ms": NUM,
    "ttfa_ms": AMOUNT,
    "gap_max_ms": AMOUNT,
    "underrun_ms": AMOUNT,
    "preroll_ms": AMOUNT,
    "stall_max_ms": AMOUNT,
    "chunks": COUNT,
    "underruns": COUNT,
    "tail_ms": AMOUNT,
    "leading_silence_ms": AMOUNT,
    "trailing_silence_ms": AMOUNT,
    "ttfa_audible_ms": AMOUNT,
    "clipped_share": AMOUNT,
    "cancel_ms": NUM,
    "cancel_to_quiet_ms": AMOUNT,
    "audio_after_cancel_ms": AMOUNT,
    "step": INT,
    "concurrency": INT,
    "attempt": INT,
    "status": INT,
}
_END_TIMES = ("t3", "t2")  # an attempt's end: the first of these present, else t0 + wait_ms
_CHUNK_LISTS = ("chunk_at_ms", "chunk_audio_ms")  # not kept: their length, and the line's offset
_UNKNOWN = (set(_COLUMNS) | set(_END_TIMES) | set(_CHUNK_LISTS)) - {f.name for f in runformat.ATTEMPT}
if _UNKNOWN:  # the reader's names come from the one definition of the format
    raise ImportError(f"runformat.reader reads fields runformat does not define: {sorted(_UNKNOWN)}")
# Every row column: its dtype, and what a row holds where its record gives nothing. A column that
# holds that in every row read so far (a field the run never wrote: stream figures in a run that
# did not stream, barge-in's, open loop's) takes no memory: it reads as a read-only view of the
# one value (:func:`_constant`) until a row gives it another.
_ROW_COLUMNS: dict[str, tuple[type, object]] = {
    **{k: (np.int32, -1) if kind == INT else (np.float64, np.nan) for k, kind in _COLUMNS.items()},
    "status_name": (np.int16, -1),
    "tend": (np.float64, np.nan),
    "e2e_ms": (np.float64, np.nan),
    "final": (np.bool_, True),
    "ok": (np.bool_, False),
    "settled": (np.bool_, True),
    "error": (np.int16, -1),
    "text": (np.int16, -1),
    "tier": (np.int16, -1),
    "voice": (np.int16, -1),
    "language": (np.int16, -1),
    "offset": (np.int64, -1),
    "chunk_n": (np.int32, -1),
    "gap_n": (np.int32, 0),
}
_STORED = ("t0", "e2e_ms")  # always held: e2e_ms is written into later
_NUMBER_TYPES = frozenset((int, float, type(None)))
_INT32 = np.iinfo(np.int32)


def _num(value: Any) -> float | None:  # a JSON value
    """A finite float, or None for anything else (null, booleans, NaN, non-numeric strings)."""
    if type(value) is float:  # the common case first: resource samples call this per field
        return value if value - value == 0 else None
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _amount(value: Any, whole: bool = False) -> float | None:
    """A finite float >= 0 (a whole one when ``whole``), else None."""
    number = _num(value)
    if number is None or number < 0 or (whole and number != int(number)):
        return None
    return number


def _column(values: list[Any], kind: str = NUM) -> np.ndarray:
    """One numeric column from the records' raw values, as :func:`_num` / :func:`_amount` take
    each value.  Plain JSON numbers and nulls (nearly every value) convert in one numpy call;
    a block holding anything else (a boolean, a string) goes value by value."""
    try:
        if not set(map(type, values)) <= _NUMBER_TYPES:
            raise TypeError
        column = np.array(values, dtype=float)  # None -> NaN
    except (TypeError, OverflowError):
        column = np.array([_num(value) for value in values], dtype=float)
    return _as_column(column, kind)


def _as_column(column: np.ndarray, kind: str = NUM) -> np.ndarray:
    """A float array (NaN where missing) as a column of ``kind``."""
    column[~np.isfinite(column)] = np.nan
    if kind in (AMOUNT, COUNT):
        with np.errstate(invalid="ignore"):
            column[column < 0] = np.nan
            if kind == COUNT:
                column[column != np.trunc(column)] = np.nan
    elif kind == INT:
        with np.errstate(invalid="ignore"):
            out = ~((column >= _INT32.min) & (column <= _INT32.max))
        column[out] = -1
        return column.astype(np.int32)
    return column


# pyarrow's JSON reader, for blocks of well-formed records: it infers every field's type (faster
# than an explicit schema with the others inferred), then the columns above must be of these
# types or null (integers become floats); a block where one is not goes line by line instead
_ARROW_SCHEMA = pa.schema(
    [(k, pa.float64()) for k in (*_COLUMNS, *_END_TIMES)]
    + [(k, pa.bool_()) for k in ("final", "ok", "settled")]
    + [(k, pa.string()) for k in ("error", "text_id", "tier", "voice", "language")]
    + [(k, pa.list_(pa.float64())) for k in _CHUNK_LISTS]
)
_ARROW_PARSE = pa_json.ParseOptions()


def _is_number(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_null(data_type))


def _arrow_columns(table: pa.Table) -> dict[str, Any] | None:
    """The :data:`_ARROW_SCHEMA` columns of a block as read, cast to their types (a field absent
    from the block is all null); None if one holds values of another JSON type."""
    out = {}
    for schema_field in _ARROW_SCHEMA:
        if schema_field.name not in table.column_names:
            out[schema_field.name] = pa.chunked_array([pa.nulls(table.num_rows, schema_field.type)])
            continue
        col = table.column(schema_field.name)
        have = col.type
        if pa.types.is_list(schema_field.type):
            fits = pa.types.is_null(have) or (pa.types.is_list(have) and _is_number(have.value_type))
        elif pa.types.is_floating(schema_field.type):
            fits = _is_number(have)
        else:
            fits = have == schema_field.type or pa.types.is_null(have)
        if not fits:
            return None
        out[schema_field.name] = col if have == schema_field.type else col.cast(schema_field.type, safe=False)
    return out


_ARROW_READ = pa_json.ReadOptions(block_size=1 << 20)  # 1 MiB blocks, parsed on pyarrow's threads
# the parsed blocks in the C library's heap, which gives them back (pyarrow's default pool keeps
# what its threads used: some 35 MB more at the end of reading 3 million attempts)
_POOL = pa.system_memory_pool()


def heap_gives_back() -> None:
    """For a process that reads whole runs (the report command, the bench): have glibc serve
    blocks of 1 MiB and more from mappings of their own, returned to the system when freed. By
    default it raises that threshold to the largest block freed so far (up to 32 MiB), after
    which a run's whole-column temporaries (3 million float64s are 24 MB) come from the heap,
    which keeps them: a report of 3 million attempts held 110 MB more after its analysis.
    Elsewhere (another C library) nothing changes. Not done on import: in a Locust process every
    answer of a megabyte or more would then be a mapping made and unmade."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


_OPEN, _CLOSE = ord("{"), ord("}")


def _arrow_stages(col: pa.ChunkedArray) -> list[tuple[str, np.ndarray]] | None:
    """Server-Timing columns from pyarrow's inferred ``server_timing`` struct, in the order
    their first usable value appears, as :func:`_record_stages` gives them; None when a name is
    longer than 64 characters (the line-by-line reader merges those by their first 64)."""
    if not pa.types.is_struct(col.type):
        return []  # all null, or never an object
    arr = col.combine_chunks()
    out = []
    for stage_field, child in zip(col.type, arr.flatten()):
        if len(stage_field.name) > 64:
            return None
        if pa.types.is_integer(stage_field.type) or pa.types.is_floating(stage_field.type):
            column = _as_column(child.to_numpy(zero_copy_only=False).astype(float))
        else:
            column = np.array([_num(value) for value in child.to_pylist()], dtype=float)
        seen = np.flatnonzero(~np.isnan(column))
        if len(seen):
            out.append((seen[0], stage_field.name, column))
    out.sort(key=lambda entry: entry[0])  # stable: a tie keeps the struct's (first-seen) field order
    return [(name, column) for _, name, column in out]


def _record_stages(recs: list[dict[str, Any]]) -> list[tuple[str, np.ndarray]]:
    """Server-Timing columns (ms, NaN where a record lacks the stage) of parsed records, in the
    order their first usable value appears; names cut to 64 characters."""
    rows: dict[str, list[int]] = {}
    values: dict[str, list[float]] = {}
    for index, record in enumerate(recs):
        server_timing = record.get("server_timing")
        if type(server_timing) is not dict:
            continue
        for name, stage_ms in server_timing.items():
            if type(stage_ms) is not float or stage_ms - stage_ms != 0:  # not a finite float: the general rule
                stage_ms = _num(stage_ms)
                if stage_ms is None:
                    continue
            name = str(name)[:64]
            if name not in rows:
                rows[name], values[name] = [], []
            rows[name].append(index)
            values[name].append(stage_ms)
    out = []
    for name, idx in rows.items():
        column = np.full(len(recs), np.nan)
        column[idx] = values[name]
        out.append((name, column))
    return out


class RunDirError(Exception):
    """A run directory that cannot be analysed; the message is one sentence for the user."""


class _Labels:
    """Interns strings (error messages, text ids, tiers) to small integer codes (int16: a cap
    keeps them few)."""

    def __init__(self, cap: int = MAX_LABELS):
        assert cap < np.iinfo(np.int16).max
        self.cap = cap
        self.codes: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, label: object) -> int:
        if label is None:
            return -1
        label = str(label)[:300]
        code = self.codes.get(label)
        if code is None:
            if len(self.names) >= self.cap:
                label = OTHER_LABEL
                code = self.codes.get(label)
                if code is not None:
                    return code
            code = len(self.names)
            self.codes[label] = code
            self.names.append(label)
        return code

    def codes_of(self, values: list[Any], dtype: type[np.integer[Any]] = np.int16) -> np.ndarray:
        """:meth:`code` of each value; a string already seen is looked up directly."""
        known, code = self.codes.get, self.code
        out: list[int | None] = [
            -1 if value is None else (known(value) if type(value) is str else None) for value in values
        ]
        for index, found in enumerate(out):
            if found is None:
                out[index] = code(values[index])
        return np.array(out, dtype=dtype)

    def codes_of_arrow(
        self, col: pa.ChunkedArray, dtype: type[np.integer[Any]] = np.int16, empty_is_none: bool = False
    ) -> np.ndarray:
        """:meth:`code` of each value of a pyarrow string column (nulls, and with
        ``empty_is_none`` empty strings, are -1), coded in order of first appearance."""
        arr = col.combine_chunks()
        if pa.types.is_null(arr.type):
            return np.full(len(arr), -1, dtype=dtype)
        encoded = arr.dictionary_encode()
        codes = [
            -1 if value is None or (empty_is_none and value == "") else self.code(value)
            for value in encoded.dictionary.to_pylist()
        ]
        codes.append(-1)  # for nulls
        idx = encoded.indices.fill_null(len(codes) - 1).to_numpy(zero_copy_only=False)
        coded: np.ndarray = np.array(codes, dtype=dtype)[idx]
        return coded


@dataclass
class Attempts:
    """Columnar attempt records (one row per line of ``requests.jsonl``).

    Times: ``t0`` is when the attempt was sent and ``tend`` when it was done (``t3``, else
    ``t2``, else ``t0 + wait_ms``), both unix seconds on the master's clock.  ``e2e_ms`` is set
    on final attempts only: first attempt's ``t0`` to this attempt's ``tend`` (attempts plus
    backoff plus the client's write), NaN elsewhere.  ``gaps`` holds every row's gaps between
    consecutive chunk arrivals (ms), in row order, ``gap_n`` of them per row.
    """

    cols: dict[str, np.ndarray]
    stages: dict[str, np.ndarray]
    errors: list[str]
    texts: list[str]
    tiers: list[str]
    statuses: list[str] = field(default_factory=list)  # the gRPC code names ``status_name`` codes
    gaps: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    memo: dict[str, Any] = field(default_factory=dict)  # figures derived from these columns, computed once
    voices: list[str] = field(default_factory=list)  # the codes of ``voice`` (-1: none named)
    languages: list[str] = field(default_factory=list)  # the codes of ``language``
    # A live reader's (RequestLog(live=True)): what figures keep of the rows read so far, kept
    # from one refresh to the next (rows only ever come after them); None when read once.
    lasting: dict[Hashable, Any] | None = None

    def __len__(self) -> int:
        return len(self.cols["t0"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def gaps_of(self, rows: np.ndarray) -> np.ndarray:
        """The chunk gaps (ms) of the rows ``rows`` (a mask) selects, pooled."""
        gaps: np.ndarray = self.gaps[np.repeat(rows, self.cols["gap_n"])]
        return gaps

    def subset(self, keep: np.ndarray) -> Attempts:
        """The rows ``keep`` (a mask) selects, as columns of their own (a column of one value
        stays one, in no memory)."""

        count = int(np.count_nonzero(keep))

        def rows(column: np.ndarray) -> np.ndarray:
            return np.broadcast_to(column[:1], (count,)) if _is_constant(column) and len(column) else column[keep]

        return Attempts(
            {name: rows(column) for name, column in self.cols.items()},
            {name: rows(column) for name, column in self.stages.items()},
            self.errors,
            self.texts,
            self.tiers,
            voices=self.voices,
            languages=self.languages,
            statuses=self.statuses,
            gaps=self.gaps_of(keep),
        )


class _Growing:
    """Columns that grow at the end: each a buffer with room to spare (half again when full), so
    that appending rows costs what they hold and reading all of them costs nothing (views of the
    filled part). A column that first appears later, or is missing from a chunk, holds its fill
    there (``fills``, else ``fill``)."""

    GROWTH = 1.5
    MIN_ROWS = 4096

    def __init__(self, fill: float = np.nan, fills: dict[str, object] | None = None):
        self.n = 0
        self.fill = fill
        self.fills = fills or {}
        self.reserved = 0  # rows to make room for at once, when it is known how many will come
        self._bufs: dict[str, np.ndarray] = {}

    def _capacity(self) -> int:
        return len(next(iter(self._bufs.values()))) if self._bufs else 0

    def has(self, name: str) -> bool:
        return name in self._bufs

    def append(self, chunk: dict[str, np.ndarray], row_count: int) -> None:
        """Append ``row_count`` rows: ``chunk``'s columns, each of length ``row_count``."""
        need = self.n + row_count
        cap = self._capacity()
        if need > cap:
            cap = max(need, int(cap * self.GROWTH), self.MIN_ROWS, self.reserved)
            for name, old in self._bufs.items():
                buf = np.empty(cap, dtype=old.dtype)
                buf[: self.n] = old[: self.n]
                self._bufs[name] = buf
        for name, column in chunk.items():
            if name not in self._bufs:
                buf = self._bufs[name] = np.empty(max(cap, need), dtype=column.dtype)
                if self.n:
                    buf[: self.n] = self.fills.get(name, self.fill)
        for name, buf in self._bufs.items():
            buf[self.n : need] = chunk[name] if name in chunk else self.fills.get(name, self.fill)
        self.n = need

    def view(self) -> dict[str, np.ndarray]:
        return {name: buf[: self.n] for name, buf in self._bufs.items()}


def _constant(dtype: type, value: object, row_count: int) -> np.ndarray:
    """A read-only column of ``row_count`` rows all ``value``, in no memory (every row views one value)."""
    return np.broadcast_to(np.array(value, dtype=dtype), (row_count,))


def _is_constant(column: np.ndarray) -> bool:
    return column.ndim == 1 and column.strides == (0,)


def _only(column: np.ndarray, value: object) -> bool:
    """Whether every value of ``column`` is ``value`` (NaN: every one NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return bool(np.isnan(column).all())
    return bool((column == value).all())


class RequestLog:
    """Incremental reader of ``requests.jsonl``. Its columns grow in place (:class:`_Growing`),
    so reading a few new lines of a long file costs what they hold, not the file. ``live``: it
    will be read again and again as it grows (the live view), so its attempts carry a
    ``lasting`` memo for the analysis to keep figures up to date in (``analysis.incremental``)."""

    def __init__(self, path: Path, live: bool = False):
        self.path = path
        self.live = live
        self.lasting: dict[Hashable, Any] | None = {} if live else None
        self.offset = 0  # bytes consumed (complete lines only)
        self.lines = 0
        self.bad_lines = 0
        self.incomplete_last_line = False
        self._cols = _Growing(fills={name: fill for name, (_, fill) in _ROW_COLUMNS.items()})
        self._stages = _Growing()
        self._gap_values = _Growing()  # every row's gaps between chunk arrivals, laid end to end
        self._rows = 0
        self.errors = _Labels()
        self.texts = _Labels()
        self.tiers = _Labels(cap=32)
        self.voices = _Labels()
        self.languages = _Labels(cap=MAX_LANGUAGES)
        self.statuses = _Labels(cap=64)
        self.stage_names: list[str] = []
        self._first_t0: dict[str, float] = {}  # req_id -> t0 of attempt 1, for retried requests
        self._pending: dict[str, list[int]] = {}  # req_id -> rows of final attempts > 1 whose attempt 1 is unread
        self._cache: Attempts | None = None

    def update(self) -> bool:
        """Parse lines appended since the last call; True if anything new was read."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        if size < self.offset:  # file replaced: start over
            self.__init__(self.path, self.live)  # type: ignore[misc]  # this class's own, anew
        if size == self.offset:
            return False
        read_any = False
        pos, want = self.offset, READ_BYTES
        with open(self.path, "rb") as log:
            # Each block starts where the last complete line ended (a line cut by the block's end
            # is read again with the next one), and is parsed in place: no copy of the file's bytes.
            while pos < size:
                log.seek(pos)
                block = log.read(min(want, size - pos))
                end = block.rfind(b"\n") + 1
                if not end:
                    if pos + len(block) >= size:
                        break  # the last line, not yet whole
                    want *= 2  # one line longer than a block
                    continue
                want = READ_BYTES
                if not read_any:
                    self._reserve(block, end, size - pos)
                whole = memoryview(block)[:end]
                if not self._parse_block(whole, pos):
                    lines = bytes(whole).split(b"\n")
                    lines.pop()  # the empty string after the final newline
                    base = pos
                    with _gc_paused():
                        for i in range(0, len(lines), CHUNK_LINES):
                            part = lines[i : i + CHUNK_LINES]
                            self._parse(part, base)
                            base += sum(len(line) for line in part) + len(part)
                pos += end
                self.offset = pos
                read_any = True
        self.incomplete_last_line = pos < size
        if not read_any:
            return False
        self._cache = None
        return True

    def _reserve(self, block: bytes, end: int, left_bytes: int) -> None:
        """Make room for the rows still to be read, estimated from the first block's lines per
        byte: a long file's columns are then allocated about once, not grown step by step."""
        rows = block.count(b"\n", 0, end) * (left_bytes / end)
        self._cols.reserved = self._stages.reserved = self._rows + int(rows * 1.02) + 1

    def _parse_block(self, data: memoryview, base: int) -> bool:
        """Parse a block of complete lines with pyarrow's JSON reader (C++, no Python object per
        record); False, having read nothing, when the block holds anything the reader would not
        take exactly as ``json.loads`` does line by line: a line that is not one JSON object, a
        value of another type than its column's, a repeated key, a Server-Timing stage name over
        64 characters.  :meth:`_parse` then reads it."""
        buf = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10)
        lines = len(ends)
        starts = np.concatenate(([0], ends[:-1] + 1))
        keep = ends > starts  # an empty line is no attempt
        starts, ends = starts[keep], ends[keep]
        # Only lines that are one "{...}" each go to pyarrow (it crashes on a line that is
        # "null"); a line with spaces around it is looked at here, a whitespace-only one dropped.
        blank = []
        for index in np.flatnonzero((buf[starts] != _OPEN) | (buf[ends - 1] != _CLOSE)):
            line = bytes(data[starts[index] : ends[index]]).strip()
            if not line:
                blank.append(index)
            elif line[:1] != b"{" or line[-1:] != b"}":
                return False
        starts = np.delete(starts, blank)
        try:
            table = pa_json.read_json(
                pa.py_buffer(data), read_options=_ARROW_READ, parse_options=_ARROW_PARSE, memory_pool=_POOL
            )
        except (pa.ArrowException, UnicodeDecodeError, ValueError):  # ArrowNotImplementedError too
            return False
        n = table.num_rows
        if n != len(starts):  # two objects on one line
            return False
        names = None  # gRPC code names, read apart from the numeric columns
        if "status" in table.column_names and pa.types.is_string(table.column("status").type):
            names = table.column("status").to_pylist()
            table = table.drop_columns(["status"])
        cols = _arrow_columns(table)
        if cols is None:
            return False
        stages = _arrow_stages(table.column("server_timing")) if "server_timing" in table.column_names else []
        if stages is None:
            return False
        self.lines += lines
        if not n:
            return True

        def floats(name: str) -> np.ndarray:
            return cols[name].to_numpy().astype(float)  # type: ignore[no-any-return]  # a writable copy

        chunk = {name: _as_column(floats(name), kind) for name, kind in _COLUMNS.items()}
        chunk["status"], chunk["status_name"] = self._status_columns(names, chunk["status"])
        lens = [pc.list_value_length(cols[name]).fill_null(-1).to_numpy() for name in _CHUNK_LISTS]
        chunk_n = np.where(lens[0] == lens[1], lens[0], -1)
        chunk_at = cols[_CHUNK_LISTS[0]].combine_chunks()
        gap_n, gaps = _gaps(
            pc.list_flatten(chunk_at).to_numpy(zero_copy_only=False).astype(float), np.maximum(lens[0], 0), chunk_n
        )
        req_ids = table.column("req_id") if "req_id" in table.column_names else None
        self._add(
            chunk,
            [_as_column(floats(name)) for name in _END_TIMES],
            final=cols["final"].fill_null(True).to_numpy(zero_copy_only=False),
            ok=cols["ok"].fill_null(False).to_numpy(zero_copy_only=False),
            settled=cols["settled"].fill_null(True).to_numpy(zero_copy_only=False),
            error=self.errors.codes_of_arrow(cols["error"], empty_is_none=True),
            text=self.texts.codes_of_arrow(cols["text_id"]),
            tier=self.tiers.codes_of_arrow(cols["tier"]),
            voice=self.voices.codes_of_arrow(cols["voice"]),
            language=self.languages.codes_of_arrow(cols["language"]),
            offsets=base + starts,
            chunk_n=chunk_n,
            gap_n=gap_n,
            gaps=gaps,
            req_ids=lambda idx: [None] * len(idx) if req_ids is None else req_ids.take(idx).to_pylist(),
            stages=self._register_stages(stages),
        )
        return True

    def _status_columns(self, names: list[Any] | None, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(``status``, ``status_name``) of a block: ``names`` the records' raw ``status`` values
        where some are strings, else None; ``numbers`` is the column read as numbers. A string that
        is no gRPC code name reads as a number, as before (``"200"``)."""
        if names is None:
            return numbers, np.full(len(numbers), -1, dtype=np.int16)
        grpc = [value if type(value) is str and value in GRPC_AS_HTTP else None for value in names]
        as_http = [value if grpc_name is None else GRPC_AS_HTTP[grpc_name] for value, grpc_name in zip(names, grpc)]
        return _column(as_http, INT), self.statuses.codes_of(grpc)

    def _parse(self, lines: list[bytes], base: int) -> None:
        """Parse complete lines one by one; ``base`` is the byte offset of the first one.

        Lines are decoded by orjson; one it refuses goes to ``json.loads``, which also takes
        NaN / Infinity literals, lone surrogates and other encodings, so a line is read exactly
        as the standard library reads it.  Integers beyond 64 bits are the exception: orjson
        (like pyarrow) reads them as floats."""
        fast, slow = orjson.loads, json.loads
        recs, offsets = [], []
        pos = base
        for raw in lines:
            line_at, pos = pos, pos + len(raw) + 1
            try:
                record = fast(raw)
            except orjson.JSONDecodeError:
                if not raw.strip():
                    continue
                try:
                    record = slow(raw)
                except ValueError:
                    self.bad_lines += 1
                    continue
            if type(record) is dict:
                recs.append(record)
                offsets.append(line_at)
            else:
                self.bad_lines += 1
        self.lines += len(lines)
        if not recs:
            return
        chunk = {name: _column([record.get(name) for record in recs], kind) for name, kind in _COLUMNS.items()}
        chunk["status"], chunk["status_name"] = self._status_columns(
            [record.get("status") for record in recs], chunk["status"]
        )
        chunk_n = np.array(
            [
                len(chunk_at)
                if type(chunk_at) is list and type(chunk_audio) is list and len(chunk_at) == len(chunk_audio)
                else -1
                for chunk_at, chunk_audio in (
                    (record.get(_CHUNK_LISTS[0]), record.get(_CHUNK_LISTS[1])) for record in recs
                )
            ]
        )
        lists = [record[_CHUNK_LISTS[0]] if count > 0 else () for record, count in zip(recs, chunk_n)]
        gap_n, gaps = _gaps(
            _column([value for chunk_at in lists for value in chunk_at]),
            np.array([len(entries) for entries in lists]),
            chunk_n,
        )
        self._add(
            chunk,
            [_column([record.get(name) for record in recs]) for name in _END_TIMES],
            final=np.array([record.get("final") is not False for record in recs], dtype=bool),
            ok=np.array([record.get("ok") is True for record in recs], dtype=bool),
            settled=np.array([record.get("settled") is not False for record in recs], dtype=bool),
            error=self.errors.codes_of([record.get("error") or None for record in recs]),
            text=self.texts.codes_of([record.get("text_id") for record in recs]),
            tier=self.tiers.codes_of([record.get("tier") for record in recs]),
            voice=self.voices.codes_of([record.get("voice") for record in recs]),
            language=self.languages.codes_of([record.get("language") for record in recs]),
            offsets=np.array(offsets, dtype=np.int64),
            chunk_n=chunk_n,
            gap_n=gap_n,
            gaps=gaps,
            req_ids=lambda idx: [recs[i].get("req_id") for i in idx],
            stages=self._register_stages(_record_stages(recs)),
        )

    def _add(
        self,
        chunk: dict[str, Any],
        end_times: list[np.ndarray],
        *,
        final: npt.ArrayLike,
        ok: npt.ArrayLike,
        settled: npt.ArrayLike,
        error: np.ndarray,
        text: np.ndarray,
        tier: np.ndarray,
        voice: np.ndarray,
        language: np.ndarray,
        offsets: npt.ArrayLike,
        chunk_n: npt.ArrayLike,
        gap_n: np.ndarray,
        gaps: np.ndarray,
        req_ids: Callable[[np.ndarray], Iterable[object]],
        stages: dict[str, np.ndarray],
    ) -> None:
        """Append one parsed chunk of rows (``chunk`` holds the :data:`_COLUMNS` columns)."""
        row0 = self._rows
        row_count = len(chunk["t0"])
        tend = np.full(row_count, np.nan)
        for end_time in end_times:
            tend = np.where(np.isnan(tend), end_time, tend)
        chunk["tend"] = np.where(np.isnan(tend), chunk["t0"] + chunk["wait_ms"] / 1000.0, tend)
        chunk["final"] = final = np.asarray(final, dtype=bool)
        chunk["ok"] = np.asarray(ok, dtype=bool)
        chunk["settled"] = np.asarray(settled, dtype=bool)
        chunk["error"], chunk["text"], chunk["tier"] = error, text, tier
        chunk["voice"], chunk["language"] = voice, language
        chunk["chunk_n"] = np.asarray(chunk_n, dtype=np.int32)
        # a row's line is read again only for its chunk lists (chunk_series)
        chunk["offset"] = np.where(chunk["chunk_n"] >= 0, np.asarray(offsets, dtype=np.int64), -1)
        chunk["gap_n"] = gap_n
        # end to end: a request answered at its first attempt from its own t0; a retried one from its
        # first attempt's (usually read before it, else once it is)
        attempt, t0 = chunk["attempt"], chunk["t0"]
        fin1 = final & (attempt <= 1)
        chunk["e2e_ms"] = np.where(fin1, (chunk["tend"] - t0) * 1000.0, np.nan)
        idx = np.flatnonzero(((attempt > 1) & final) | ((attempt == 1) & ~final & np.isfinite(t0)))
        waiting = set()  # the req_ids whose final attempts may now find their first's t0
        for index, rid in zip(idx, req_ids(idx)):
            if rid is None:
                continue
            rid = str(rid)
            if final[index]:
                self._pending.setdefault(rid, []).append(row0 + int(index))
            else:
                self._first_t0[rid] = float(t0[index])
            waiting.add(rid)
        for name in [name for name in chunk if name not in _STORED and not self._cols.has(name)]:
            if _only(chunk[name], _ROW_COLUMNS[name][1]):  # nothing yet: no memory (see _ROW_COLUMNS)
                del chunk[name]
        self._cols.append(chunk, row_count)
        self._stages.append(stages, row_count)
        self._gap_values.append({"gap": gaps}, len(gaps))
        self._rows = row0 + row_count
        cols = self._cols.view()
        for rid in waiting:
            first = self._first_t0.get(rid)
            if first is not None and rid in self._pending:
                rows = self._pending.pop(rid)
                cols["e2e_ms"][rows] = (cols["tend"][rows] - first) * 1000.0

    def _register_stages(self, stages: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Keep the chunk's stage columns (in order of first use) up to MAX_STAGES names in all."""
        out = {}
        for name, column in stages:
            if name not in self.stage_names:
                if len(self.stage_names) >= MAX_STAGES:
                    continue
                self.stage_names.append(name)
            out[name] = column
        return out

    def attempts(self) -> Attempts:
        """All attempts read so far as one set of columns (cached until the next update)."""
        if self._cache is not None:
            return self._cache
        view, row_count = self._cols.view(), self._rows
        cols = {
            name: view[name] if name in view else _constant(dtype, fill, row_count)
            for name, (dtype, fill) in _ROW_COLUMNS.items()
        }
        view = self._stages.view()
        stages = {
            name: view[name] if name in view else _constant(np.float64, np.nan, row_count) for name in self.stage_names
        }
        gaps = self._gap_values.view().get("gap", np.empty(0, dtype=np.float32))
        self._cache = Attempts(
            cols,
            stages,
            self.errors.names,
            self.texts.names,
            self.tiers.names,
            voices=self.voices.names,
            languages=self.languages.names,
            statuses=self.statuses.names,
            gaps=gaps,
            lasting=self.lasting,
        )
        return self._cache

    def chunk_series(self, row: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(``chunk_at_ms``, ``chunk_audio_ms``) of one attempt, re-read from its line; None when
        the line is gone or its lists are not equal-length lists of finite numbers >= 0."""
        attempts = self.attempts()
        if not 0 <= row < len(attempts) or attempts["chunk_n"][row] < 0:
            return None
        try:
            with open(self.path, "rb") as log:
                log.seek(int(attempts["offset"][row]))
                record = json.loads(log.readline())
            chunk_at = np.asarray(record["chunk_at_ms"], dtype=float)
            audio = np.asarray(record["chunk_audio_ms"], dtype=float)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if (
            chunk_at.ndim != 1
            or chunk_at.shape != audio.shape
            or not (np.isfinite(chunk_at).all() and np.isfinite(audio).all())
            or (chunk_at < 0).any()
            or (audio < 0).any()
        ):
            return None
        order = np.argsort(chunk_at, kind="stable")
        return chunk_at[order], audio[order]


_RES_SCALARS = tuple(
    f.name
    for f in runformat.RESOURCE_SAMPLE
    if f.name in ("cpu_percent", "cpu_max_core_percent", "mem_used_bytes", "mem_total_bytes")
)


def _gaps(values: np.ndarray, lens: np.ndarray, chunk_n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``gap_n`` per row, the gaps in row order) from the rows' ``chunk_at_ms`` values laid end
    to end (``lens`` of them per row): the differences between consecutive arrivals of a row
    whose lists are usable (``chunk_n`` >= 2), a row with a value that is not a number giving none."""
    row = np.repeat(np.arange(len(lens)), lens)
    bad = np.zeros(len(lens), dtype=bool)
    bad[row[~np.isfinite(values)]] = True
    use = (chunk_n >= 2) & ~bad
    gap_n = np.where(use, lens - 1, 0).astype(np.int32)
    if not use.any():
        return gap_n, np.empty(0, dtype=np.float32)
    inside = (row[1:] == row[:-1]) & use[row[:-1]]
    return gap_n, np.diff(values)[inside].astype(np.float32)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while many parsed records are made at once (JSON makes no
    cycles; the collector would walk every record made so far, again and again)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _loads(raw: bytes) -> Any:  # a JSON value
    """One JSON line: orjson, or ``json.loads`` for what orjson refuses (NaN literals, ...)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _gpu_columns(
    cols: dict[str, Any],
    row_count: int,
    owner: np.ndarray,
    util: np.ndarray,
    used: np.ndarray,
    total: np.ndarray,
    power: np.ndarray,
) -> None:
    """The per-sample GPU columns of ``row_count`` samples from every GPU's figures laid end to end
    (``owner``: the sample each GPU belongs to)."""
    cols["gpu_util_percent"] = np.full(row_count, np.nan)
    np.fmax.at(cols["gpu_util_percent"], owner, util)  # the busiest GPU; fmax skips NaN
    # the GPU whose memory is fullest (used / total, 0 without a total); the first on a tie
    mem_used, mem_total = np.full(row_count, np.nan), np.full(row_count, np.nan)
    has = ~np.isnan(used)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(np.isnan(total) | (total == 0), 0.0, used / total)
    idx = np.flatnonzero(has)
    order = idx[np.lexsort((idx, -frac[idx], owner[idx]))]
    first = order[np.r_[True, owner[order][1:] != owner[order][:-1]]] if len(order) else order
    mem_used[owner[first]], mem_total[owner[first]] = used[first], total[first]
    cols["gpu_mem_used_bytes"], cols["gpu_mem_total_bytes"] = mem_used, mem_total
    watts = ~np.isnan(power)
    cols["gpu_power_w"] = np.where(
        np.bincount(owner[watts], minlength=row_count) > 0,
        np.bincount(owner[watts], weights=power[watts], minlength=row_count),
        np.nan,
    )
    cols["gpu_count"] = np.bincount(owner, minlength=row_count)


def _sample_frame(samples: list[Any]) -> pd.DataFrame:
    """Parsed resource samples as frame rows (see :class:`ResourceLog`), built column by column;
    what is not an object with a finite ``ts`` is left out."""
    samples = [sample for sample in samples if type(sample) is dict]
    ts = _column([sample.get("ts") for sample in samples])
    keep = ~np.isnan(ts)
    if not keep.all():
        samples = [sample for sample, name in zip(samples, keep) if name]
        ts = ts[keep]
    row_count = len(samples)
    cols: dict[str, object] = {
        "ts": ts,
        "host": [str(sample.get("host") or "?") for sample in samples],
        "role": [str(sample.get("role") or "server") for sample in samples],
    }
    for name in _RES_SCALARS:
        cols[name] = _column([sample.get(name) for sample in samples])
    procs = [proc if type(proc) is dict else {} for proc in (sample.get("proc") for sample in samples)]
    cols["proc_cpu_percent"] = _column([proc.get("cpu_percent") for proc in procs])
    cols["proc_rss_bytes"] = _column([proc.get("rss_bytes") for proc in procs])
    # every GPU of every sample in one list, with the row it belongs to
    owner, gpus = [], []
    for index, sample in enumerate(samples):
        gpu_list = sample.get("gpus")
        if type(gpu_list) is list:
            for gpu in gpu_list:
                if type(gpu) is dict:
                    owner.append(index)
                    gpus.append(gpu)
    owners = np.array(owner, dtype=np.int64)
    util = _column([gpu.get("util_percent") for gpu in gpus])
    used = _column([gpu.get("mem_used_bytes") for gpu in gpus])
    total = _column([gpu.get("mem_total_bytes") for gpu in gpus])
    power = _column([gpu.get("power_w") for gpu in gpus])
    _gpu_columns(cols, row_count, owners, util, used, total, power)
    cols["metrics"] = [
        metrics if type(metrics) is dict else None for metrics in (sample.get("metrics") for sample in samples)
    ]
    return pd.DataFrame(cols)


def _arrow_sample_frame(data: bytes) -> pd.DataFrame | None:
    """:func:`_sample_frame` of complete lines read by pyarrow's JSON reader (no Python object per
    sample), or None where it would not give the same rows: a line pyarrow refuses or that is no
    object, a field of another type than a number (a string ``host``, ``role``), a ``proc`` that
    is no object, ``gpus`` that is no list of objects, and any ``metrics`` (the server's series,
    kept as dicts: read the plain way)."""
    try:
        block = pa_json.read_json(
            pa.py_buffer(data), read_options=_ARROW_READ, parse_options=_ARROW_PARSE, memory_pool=_POOL
        )
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return None
    if data.count(b"\n") != block.num_rows or "ts" not in block.column_names:  # a blank line, or two objects on one
        return None
    if "metrics" in block.column_names and block.column("metrics").null_count != block.num_rows:
        return None

    def column(table: pa.Table | pa.StructArray, name: str, kinds: tuple[str, ...] = ("number",)) -> pa.Array:
        """A column of the table (or a field of a struct array, its parent's nulls applied),
        all nulls where absent; TypeError where its type is not one of ``kinds``."""
        if isinstance(table, pa.Table):
            col = table.column(name).combine_chunks() if name in table.column_names else None
        else:
            index = table.type.get_field_index(name)
            col = table.flatten()[index] if index >= 0 else None
        if col is None:
            return pa.nulls(len(table))
        typ = col.type
        if (
            pa.types.is_null(typ)
            or ("number" in kinds and _is_number(typ))
            or ("string" in kinds and pa.types.is_string(typ))
            or ("struct" in kinds and pa.types.is_struct(typ))
            or (
                "list" in kinds
                and pa.types.is_list(typ)
                and (pa.types.is_struct(typ.value_type) or pa.types.is_null(typ.value_type))
            )
        ):
            return col
        raise TypeError(name)

    def floats(col: pa.Array) -> np.ndarray:
        return _as_column(col.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(float))

    try:
        ts = floats(column(block, "ts"))
        keep = ~np.isnan(ts)
        if not keep.all():
            block, ts = block.filter(pa.array(keep)), ts[keep]
        row_count = block.num_rows
        cols: dict[str, object] = {"ts": ts}
        for name, missing in (("host", "?"), ("role", "server")):
            col = column(block, name, ("string",))
            col = col.cast(pa.string())
            cols[name] = pc.if_else(pc.fill_null(pc.equal(col, ""), True), missing, col).to_pylist()
        for scalar in _RES_SCALARS:
            cols[scalar] = floats(column(block, scalar))
        proc = column(block, "proc", ("struct",))
        for name, field_name in (("proc_cpu_percent", "cpu_percent"), ("proc_rss_bytes", "rss_bytes")):
            cols[name] = (
                floats(column(proc, field_name)) if pa.types.is_struct(proc.type) else np.full(row_count, np.nan)
            )
        gpu_lists = column(block, "gpus", ("list",))
        if pa.types.is_null(gpu_lists.type) or pa.types.is_null(gpu_lists.type.value_type):
            owner, gpus = np.zeros(0, dtype=np.int64), None
        else:
            owner = pc.list_parent_indices(gpu_lists).to_numpy(zero_copy_only=False).astype(np.int64)
            gpus = pc.list_flatten(gpu_lists)
            valid = gpus.is_valid().to_numpy(zero_copy_only=False)
            owner, gpus = owner[valid], gpus.filter(pa.array(valid))
    except (TypeError, pa.ArrowException):
        return None
    nothing = np.full(0, np.nan)
    util, used, total, power = (
        floats(column(gpus, gpu_field)) if gpus is not None else nothing
        for gpu_field in ("util_percent", "mem_used_bytes", "mem_total_bytes", "power_w")
    )
    _gpu_columns(cols, row_count, owner, util, used, total, power)
    cols["metrics"] = [None] * row_count
    return pd.DataFrame(cols)


class ResourceLog:
    """Incremental reader of ``resources.jsonl``: :meth:`update` parses only the lines appended
    since the last call (bad ones counted in ``bad_lines``, a last line without its newline left
    for later, as :class:`RequestLog` does).

    :meth:`frame` is one row per sample, sorted by ``ts``: ``ts``, ``host``, ``role``, the
    CPU/memory scalars, ``proc_cpu_percent``, ``proc_rss_bytes`` and, over the sample's GPUs,
    ``gpu_util_percent`` (the busiest GPU), ``gpu_mem_used_bytes`` and ``gpu_mem_total_bytes``
    (the GPU whose memory is fullest), ``gpu_power_w``, ``gpu_count``, and ``metrics`` (the
    server's own series, a dict, or None).
    """

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.bad_lines = 0
        self.incomplete_last_line = False
        self._chunks: list[pd.DataFrame] = []
        self._frame: pd.DataFrame | None = None

    def update(self) -> bool:
        """Parse lines appended since the last call; True if anything new was read."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            changed = bool(self._chunks) or self.offset > 0
            self.__init__(self.path)  # type: ignore[misc]  # this class's own, anew
            return changed
        if size < self.offset:  # file replaced: start over
            self.__init__(self.path)  # type: ignore[misc]  # this class's own, anew
        if size == self.offset:
            return False
        read_any = False
        with open(self.path, "rb") as log:  # block by block, as RequestLog reads: bounded memory
            while self.offset < size:
                log.seek(self.offset)
                data = log.read(min(READ_BYTES, size - self.offset))
                end = data.rfind(b"\n") + 1
                if not end and len(data) < size - self.offset:  # one line longer than a block
                    data += log.read(size - self.offset - len(data))
                    end = data.rfind(b"\n") + 1
                self.incomplete_last_line = end < len(data)
                if not end:
                    break
                self.offset += end
                self._add(data[:end] if end < len(data) else data)
                read_any = True
        if read_any:
            self._frame = None
        return read_any

    def _add(self, data: bytes) -> None:
        """Parse complete lines into a chunk of rows."""
        chunk = _arrow_sample_frame(data)
        if chunk is not None:
            self.bad_lines += data.count(b"\n") - len(chunk)  # no finite ts
        else:
            samples = []
            with _gc_paused():
                for raw in data.split(b"\n"):
                    if not raw.strip():
                        continue
                    try:
                        samples.append(_loads(raw))
                    except ValueError:
                        self.bad_lines += 1
            chunk = _sample_frame(samples)
            self.bad_lines += len(samples) - len(chunk)  # not an object, or no finite ts
        if len(chunk):
            self._chunks.append(chunk)

    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            df = pd.concat(self._chunks, ignore_index=True) if self._chunks else pd.DataFrame()
            if len(df):
                df = df.sort_values("ts", kind="stable").reset_index(drop=True)
            # one copy: the rows sorted stand for the chunks (a stable sort of them and the rows
            # read later orders them as one of every row in the file's order would)
            self._chunks = [df] if len(df) else []
            self._frame = df
        return self._frame


@dataclass
class RunDir:
    """One run directory, re-read incrementally by :meth:`refresh`; ``live``: again and again
    as it grows (see :class:`RequestLog`)."""

    path: Path
    run: dict[str, Any] = field(default_factory=dict)
    resources: pd.DataFrame = field(default_factory=pd.DataFrame)
    resource_bad_lines: int = 0
    resource_incomplete: bool = False
    run_json_error: str | None = None
    format_error: str | None = None  # why this version cannot read it (runformat.unreadable)
    live: bool = False

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.requests = RequestLog(self.path / runformat.REQUESTS, self.live)
        self._resources = ResourceLog(self.path / runformat.RESOURCES)

    def check(self) -> None:
        """Raise :class:`RunDirError` if this is not something that can be a run directory."""
        if not self.path.exists():
            raise RunDirError(f"{self.path} does not exist; pass a run directory written by a tts-knee run.")
        if not self.path.is_dir():
            raise RunDirError(f"{self.path} is not a directory; pass a run directory (runs/<run-id>/).")
        if not (self.path / runformat.RUN_JSON).exists() and not (self.path / runformat.REQUESTS).exists():
            raise RunDirError(f"{self.path} has neither run.json nor requests.jsonl; is it a run directory?")

    def refresh(self) -> bool:
        """Re-read whatever changed on disk; True if anything did."""
        changed = False
        run_json = self.path / runformat.RUN_JSON
        try:
            run = json.loads(run_json.read_text(encoding="utf-8"))
            if not isinstance(run, dict):
                raise ValueError("not an object")
            self.run_json_error = None
            self.format_error = runformat.unreadable(run)
            changed |= run != self.run
            self.run = run
        except FileNotFoundError:
            self.run_json_error = "run.json is missing"
        except (ValueError, UnicodeDecodeError) as error:
            # keep the last good copy: the writer may be rewriting it right now
            self.run_json_error = f"run.json is not valid JSON ({error})"
        changed |= self.requests.update()
        if self._resources.update():
            self.resources = self._resources.frame()
            self.resource_bad_lines = self._resources.bad_lines
            changed = True
        self.resource_incomplete = self._resources.incomplete_last_line
        return changed

    def has_resources(self) -> bool:
        return (self.path / runformat.RESOURCES).exists() and len(self.resources) > 0

    def options(self) -> dict[str, Any]:
        opts = self.run.get("options")
        return opts if isinstance(opts, dict) else {}

    def mode(self) -> str:
        """How the run offered load, one of :data:`runformat.MODES`: run.json's ``mode``; for a
        run from before it was written, ``open`` when its options carry ``rates`` or a step an
        offered ``rate``, else ``closed``. Raises :class:`RunDirError` for a mode this version
        does not know."""
        mode = self.run.get("mode")
        if mode is None:
            steps = self.run.get("steps")
            rated = isinstance(steps, list) and any(
                isinstance(step, dict) and step.get("rate") is not None for step in steps
            )
            return "open" if self.options().get("rates") or rated else "closed"
        if mode not in runformat.MODES:
            raise RunDirError(
                f"{self.path / runformat.RUN_JSON} has mode {mode!r}, which this tts-knee does not "
                f"read (it reads {' and '.join(runformat.MODES)} runs); upgrade to read it."
            )
        return str(mode)

    def streamed(self) -> bool:
        """Whether the run read its responses as streams: ``options.tts_stream`` (or a stream
        format) when run.json says; for runs from before that option, whether any record
        carries chunk arrival times."""
        opts = self.options()
        if "tts_stream" in opts or "tts_stream_format" in opts:
            return opts.get("tts_stream") is True or bool(opts.get("tts_stream_format"))
        return bool((self.requests.attempts()["chunk_n"] >= 0).any())

    def users(self) -> dict[str, Any]:
        """What each user kept in flight and waited between utterances: ``{"contexts",
        "think_s"}`` from ``options.contexts`` and ``options.think_time`` (1 and 0 when unset)."""
        opts = self.options()
        contexts, think = opts.get("contexts"), _amount(opts.get("think_time"))
        return {"contexts": contexts if type(contexts) is int and contexts >= 1 else 1, "think_s": think or 0.0}

    def ttfa_floor_ms(self) -> float:
        """``options.ttfa_floor_ms`` (default :data:`TTFA_FLOOR_MS`)."""
        floor_ms = _amount(self.options().get("ttfa_floor_ms"))
        return TTFA_FLOOR_MS if floor_ms is None else floor_ms

    def playback_buffer_ms(self) -> float:
        """``options.playback_buffer_ms`` (default: the option's)."""
        buffer_ms = _amount(self.options().get("playback_buffer_ms"))
        return _default_ms("playback_buffer_ms") if buffer_ms is None else buffer_ms
