"""The trace format (``--trace FILE``): a log of what a service was asked, replayed by
``--trace-speed`` (``locustfiles.inputs.trace``).

A trace is a JSONL file (one object per line; blank lines and ``#`` comments ignored) or a CSV
file with a header row (``.csv``), one arrival per row, in the order they arrived:

- ``offset_s`` (required): seconds from the trace's start, 0 or more, never below the row above's;
- the text, exactly one of: ``text`` (the words sent), ``text_len`` (a number of characters: the
  corpus text nearest that length is sent) or ``text_id`` (the ``id`` of a corpus entry);
- optional: ``voice`` and ``language`` (what the request asks for, as in a corpus entry),
  ``conversation`` (a name: the rows of one conversation are its turns, sent in order on one
  connection or session, each no earlier than the log has it and not before the turn above has
  finished) and ``turn`` (a whole number ordering a conversation's turns; default: the order of
  the rows).

Any other column is an error, so that a misspelt one is not silently ignored. A CSV cell left
empty is a column not given for that row.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

COLUMNS = ("offset_s", "text", "text_len", "text_id", "voice", "language", "conversation", "turn")
TEXT_COLUMNS = ("text", "text_len", "text_id")


class TraceError(ValueError):
    """The trace file is unusable; the message names the file and the row."""


@dataclass(frozen=True)
class Row:
    """One arrival of a trace, as the file has it."""

    line: int  # where it is in the file (1-based; a CSV's header is line 1)
    offset_s: float
    text: str | None = None
    text_len: int | None = None
    text_id: str | None = None
    voice: str | None = None
    language: str | None = None
    conversation: str | None = None
    turn: int | None = None


def read(path: Path) -> list[Row]:
    """The rows of the trace at ``path``, checked; raises :class:`TraceError` naming the file and
    the row for an unreadable file, a malformed row, an unknown column, offsets that are
    negative or out of order, a conversation whose turns repeat or go back in time, or no rows."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path} is not UTF-8 text") from None
    except ValueError:  # no file can have the name
        raise TraceError(f"{str(path)!r} cannot be a file's name (it holds a NUL byte)") from None
    except OSError as error:
        raise TraceError(f"{path} cannot be read ({error.strerror})") from None
    items = _csv(path, raw) if path.suffix.lower() == ".csv" else _jsonl(path, raw)
    rows = [_row(path, line, item) for line, item in items]
    if not rows:
        raise TraceError(f"{path} has no rows: a trace lists one arrival per row (offset_s and a text)")
    for above, row in zip(rows, rows[1:]):
        if row.offset_s < above.offset_s:
            raise TraceError(
                f"{path} line {row.line}: offset_s {row.offset_s:g} is before line {above.line}'s "
                f"{above.offset_s:g}: a trace lists its arrivals in the order they came"
            )
    _check_turns(path, rows)
    return rows


def _jsonl(path: Path, raw: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for line_number, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise TraceError(f"{path} line {line_number} is not JSON ({error.msg})") from None
        if not isinstance(item, dict):
            raise TraceError(f"{path} line {line_number} is not a JSON object with offset_s and a text")
        out.append((line_number, item))
    return out


def _csv(path: Path, raw: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(raw, newline=""))  # a quoted cell may hold a newline
    try:
        return _csv_rows(path, reader)
    except csv.Error as error:
        raise TraceError(f"{path} line {reader.line_num} is not CSV ({error})") from None


def _csv_rows(path: Path, reader: CsvReader) -> list[tuple[int, dict[str, Any]]]:
    header = next(reader, None)
    if header is None:
        return []
    header = [column.strip() for column in header]
    unknown = [column for column in header if column not in COLUMNS]
    if unknown:
        raise TraceError(f"{path} line 1: unknown column {unknown[0]!r}; a trace's columns are {', '.join(COLUMNS)}")
    out = []
    for cells in reader:
        line_number = reader.line_num  # the row's last line in the file
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise TraceError(f"{path} line {line_number} has {len(cells)} cells for the header's {len(header)} columns")
        out.append((line_number, {column: cell for column, cell in zip(header, cells) if cell != ""}))
    return out


def _row(path: Path, line: int, item: dict[str, Any]) -> Row:
    where = f"{path} line {line}"
    unknown = [column for column in item if column not in COLUMNS]
    if unknown:
        raise TraceError(f"{where}: unknown column {unknown[0]!r}; a trace's columns are {', '.join(COLUMNS)}")
    offset = _number(where, "offset_s", item.get("offset_s"))
    if offset is None:
        raise TraceError(f"{where} has no offset_s (seconds from the trace's start)")
    if offset < 0:
        raise TraceError(f"{where}: offset_s {offset:g} is negative; offsets count seconds from the trace's start")
    given = [column for column in TEXT_COLUMNS if item.get(column) is not None]
    if len(given) != 1:
        raise TraceError(
            f"{where} has {' and '.join(given) if given else 'no text'}: a row gives exactly one of "
            f"text, text_len (characters) or text_id (a corpus entry)"
        )
    text_len = _number(where, "text_len", item.get("text_len"), whole=True)
    if text_len is not None and text_len < 1:
        raise TraceError(f"{where}: text_len {text_len} is not a number of characters of 1 or more")
    turn = _number(where, "turn", item.get("turn"), whole=True)
    strings = {column: item.get(column) for column in ("text", "text_id", "voice", "language", "conversation")}
    for column, value in strings.items():
        if value is not None and not isinstance(value, str):
            if column == "conversation" and isinstance(value, int) and not isinstance(value, bool):
                strings[column] = str(value)
                continue
            raise TraceError(f"{where}: {column} {value!r} is not a string")
    if strings["conversation"] is None and turn is not None:
        raise TraceError(f"{where} has a turn but no conversation: turns order a conversation's rows")
    return Row(
        line,
        offset,
        strings["text"],
        text_len,
        strings["text_id"],
        strings["voice"] or None,
        strings["language"] or None,
        strings["conversation"] or None,
        turn,
    )


@overload
def _number(where: str, key: str, value: object, whole: Literal[True]) -> int | None: ...
@overload
def _number(where: str, key: str, value: object, whole: Literal[False] = False) -> float | None: ...
def _number(where: str, key: str, value: object, whole: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise TraceError(f"{where}: {key} {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: {key} {value!r} is not a number")
    if whole:
        if value != int(value):
            raise TraceError(f"{where}: {key} {value!r} is not a whole number")
        return int(value)
    return float(value)


def _check_turns(path: Path, rows: list[Row]) -> None:
    seen: dict[str, list[Row]] = {}
    for row in rows:
        if row.conversation is not None:
            seen.setdefault(row.conversation, []).append(row)
    for name, turns in seen.items():
        numbered = [row for row in turns if row.turn is not None]
        if numbered and len(numbered) != len(turns):
            row = next(row for row in turns if row.turn is None)
            raise TraceError(f"{path} line {row.line}: conversation {name!r} numbers some turns but not this one")
        ordered = sorted(turns, key=lambda row: row.turn or 0) if numbered else turns  # numbered: every turn
        for above, row in zip(ordered, ordered[1:]):
            if row.turn is not None and row.turn == above.turn:
                raise TraceError(
                    f"{path} line {row.line}: conversation {name!r} has turn {row.turn} twice (line {above.line} too)"
                )
            if row.offset_s < above.offset_s:
                raise TraceError(
                    f"{path} line {row.line}: turn {row.turn} of conversation {name!r} comes at "
                    f"{row.offset_s:g} s, before turn {above.turn} at {above.offset_s:g} s"
                )


def conversation_turns(rows: list[Row]) -> dict[str, list[int]]:
    """Conversation name -> the indexes into ``rows`` of its turns, in turn order."""
    out: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row.conversation is not None:
            out.setdefault(row.conversation, []).append(index)
    for _name, idx in out.items():
        if rows[idx[0]].turn is not None:
            idx.sort(key=lambda index: rows[index].turn or 0)  # numbered: every turn (_check_turns)
    return out


def duration_s(offsets: Iterable[float]) -> float:
    """How long a trace lasts: its last arrival's offset and one mean gap after it (so that
    ``len(offsets) / duration_s`` is its mean rate and a replay of the whole of it ends a gap
    after its last arrival); a trace of one arrival, or whose arrivals all come at once, lasts 1 s."""
    offsets = list(offsets)
    last = offsets[-1] if offsets else 0.0
    if len(offsets) < 2 or last <= 0:
        return max(last, 0.0) + 1.0
    return last + last / (len(offsets) - 1)
