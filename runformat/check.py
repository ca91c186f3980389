"""Hold a run directory to the format: every key of ``run.json`` (the plan and the options
among it), ``summary.json`` and every line of ``requests.jsonl`` and ``resources.jsonl`` must be
declared in :mod:`runformat`. A key written without a declaration is how the format drifts; the
tests pass every run directory they make through :func:`undeclared_keys`.

Lines that are not JSON objects (a torn last line, a line a test spoilt on purpose) are the
reader's to count, not this check's: they are skipped.

:func:`reference` writes the manual's reference of every field (``docs/fields.md``) from the
same declarations.
"""

from __future__ import annotations

import json
from pathlib import Path

from .fields import Field, Keyed, class_of, table, undeclared
from .files import REQUESTS, RESOURCES, RUN_JSON, SPEECH_FILE, SUMMARY_JSON
from .schema import Attempt, ResourceSample, RunInfo, SpeechLine
from .summary import Summary

#: Each file of a run directory and the class that declares what it holds (JSONL: each line).
DECLARED: dict[str, type] = {
    REQUESTS: Attempt,
    RESOURCES: ResourceSample,
    RUN_JSON: RunInfo,
    SUMMARY_JSON: Summary,
    SPEECH_FILE: SpeechLine,
}
#: The files :func:`undeclared_keys` holds to their tables (JSONL: of each line).
FILES = {name: table(DECLARED[name]) for name in (RUN_JSON, SUMMARY_JSON, REQUESTS, RESOURCES)}


def undeclared_keys(run_dir: Path) -> list[str]:
    """Every undeclared key in the run directory's files, as ``file: key.path`` (a JSONL file's
    line number after its name); [] when everything is declared. Files not there are skipped."""
    out = []
    for name, declared in FILES.items():
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        if name.endswith(".jsonl"):
            with open(path, "rb") as lines:
                for number, line in enumerate(lines, start=1):
                    out += undeclared(declared, _object(line), f"{name}:{number}")
        else:
            out += undeclared(declared, _object(path.read_bytes()), name)
    return out


def _object(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


def reference() -> str:
    """The manual's reference of every field (``docs/fields.md``, which ``make docs`` writes): each
    file's declared class, then each class it nests, once, with every field's unit and meaning."""
    out = [
        "# Every field",
        "",
        "Generated from the declarations in `runformat/schema.py` (the records, `run.json`) and "
        "`runformat/summary.py` (`summary.json`): each object is declared once, with each field's "
        "type, unit and meaning, and this page, the writers' checks and the types the code "
        "checks come from it ([adding a figure or an option](adding.md)). *null*: the field may be "
        "null; *optional*: left out unless the run has it (read a missing field as null). "
        "`run.json`'s `options` are the [options](options.md)' run.json keys.",
        "",
    ]
    todo, done = [(name, cls) for name, cls in DECLARED.items()], set()
    while todo:
        title, cls = todo.pop(0)
        if cls in done:
            continue
        done.add(cls)
        rows, nested = _rows(table(cls))
        about = " ".join((cls.__doc__ or "").split())
        out += [f"## {title}" if title != cls.__name__ else f"### {title}", ""]
        out += [f"`{cls.__name__}`: {about}" if title != cls.__name__ else about, ""] if about else []
        out += ["| field | unit | | what it holds |", "| --- | --- | --- | --- |", *rows, ""]
        todo += [(nested_class.__name__, nested_class) for nested_class in nested if nested_class not in done]
    return "\n".join(out)


def _rows(fields: tuple[Field, ...]) -> tuple[list[str], list[type]]:
    rows, nested = [], []
    for field in fields:
        declared_of = field.of.of if isinstance(field.of, Keyed) else field.of
        cls = class_of(declared_of) if declared_of is not None else None
        what = field.doc.replace("|", "\\|")
        if isinstance(field.of, Keyed):
            what = f"{what}{'; ' if what else ''}an object keyed by {field.of.key}" + (
                f", each a [{cls.__name__}](#{cls.__name__.lower()})" if cls else ""
            )
        elif cls is not None:
            what = f"{what}{' → ' if what else ''}[{cls.__name__}](#{cls.__name__.lower()})"
        flags = ", ".join(flag for flag, applies in (("null", field.nullable), ("optional", field.optional)) if applies)
        rows.append(f"| `{field.name}` | {field.unit} | {flags} | {what} |")
        if cls is not None and cls not in nested:
            nested.append(cls)
    return rows, nested
