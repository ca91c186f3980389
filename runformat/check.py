"""Hold a run directory to the format: every key of ``run.json`` (the plan and the options
among it), ``summary.json`` and every line of ``requests.jsonl`` and ``resources.jsonl`` must be
declared in :mod:`runformat`. A key written without a declaration is how the format drifts; the
tests pass every run directory they make through :func:`undeclared_keys`.

Lines that are not JSON objects (a torn last line, a line a test spoilt on purpose) are the
reader's to count, not this check's: they are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from .fields import undeclared
from .files import REQUESTS, RESOURCES, RUN_JSON, SUMMARY_JSON
from .schema import ATTEMPT, RESOURCE_SAMPLE, RUN
from .summary import SUMMARY

#: Each file of a run directory and the table of what it holds (JSONL: of each line).
FILES = {RUN_JSON: RUN, SUMMARY_JSON: SUMMARY, REQUESTS: ATTEMPT, RESOURCES: RESOURCE_SAMPLE}


def undeclared_keys(run_dir: Path) -> list[str]:
    """Every undeclared key in the run directory's files, as ``file: key.path`` (a JSONL file's
    line number after its name); [] when everything is declared. Files not there are skipped."""
    out = []
    for name, table in FILES.items():
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        if name.endswith(".jsonl"):
            with open(path, "rb") as lines:
                for number, line in enumerate(lines, start=1):
                    out += undeclared(table, _object(line), f"{name}:{number}")
        else:
            out += undeclared(table, _object(path.read_bytes()), name)
    return out


def _object(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None
