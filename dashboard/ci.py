"""What a CI job reads besides the exit status: a JUnit XML report of the run's verdicts
(``--junit FILE``: one test case per SLO term and level, per ``--require``, per level compared
with ``--baseline``, a failure's sentence as its message) and, where ``GITHUB_STEP_SUMMARY`` is
set, the verdict, the step table and the SLO verdicts in Markdown. See the manual's "In CI"."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tts_knee.analysis.regression import level_sentence
from tts_knee.analysis.slo import parse
from tts_knee.runformat.summary import Summary

from .kit import fmt
from .table import RATE_COLUMNS, rate_table_rows, table_columns, table_rows
from .view import RunView

#: The environment variable GitHub Actions names its step summary file with.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class Case:
    """One JUnit test case: its name, and why it failed (None: it passed)."""

    name: str
    failure: str | None = None
    kind: str = "failure"  # the failure's type: "failure" or "inconclusive"


def _level_name(key: str, value: float | None) -> str:
    return f"{value:g} req/s" if key == "rate" else f"{value:g} voices" if key == "voices" else f"{value:g}"


def slo_cases(view: RunView) -> list[Case]:
    """One case per SLO term and tested level (repeats pooled), as the summary judged them."""
    slo = view.summary.get("slo")
    if not slo:
        return []
    terms = parse(slo["spec"]).terms
    cases = []
    for verdict in slo["steps"]:
        level = _level_name(view.key, verdict.get(view.key))
        for term in terms:
            name = f"{term.text} at {level}"
            failed = [said for said in verdict["failed"] if said.startswith(f"{term.metric} ")]
            unsure = [said for said in verdict["inconclusive"] if said.startswith(f"{term.metric} ")]
            if failed:
                cases.append(Case(name, f"The SLO term {term.text} fails at {level}: {'; '.join(failed)}."))
            elif unsure:
                why = "; ".join(unsure)
                cases.append(Case(name, f"The SLO term {term.text} is inconclusive at {level}: {why}.", "inconclusive"))
            else:
                cases.append(Case(name))
    return cases


def require_cases(view: RunView) -> list[Case]:
    """The gate (``--require``), one case."""
    required = view.summary.get("require")
    if not required:
        return []
    if required.get("speed") is not None:
        level = f"{required['speed']:g}x"
    elif required.get("rate") is not None:
        level = f"{required['rate']:g}/s"
    elif view.voice_sweep:
        level = f"{required['voices']} voices"
    else:
        level = str(required["concurrency"])
    return [Case(f"--require {level}", None if required["holds"] else required["reason"])]


def baseline_cases(view: RunView) -> list[Case]:
    """One case per level both runs tested (``--baseline``)."""
    regression = view.summary.get("regression")
    if not regression:
        return []
    key: Literal["rate", "concurrency"] = "rate" if view.open_loop else "concurrency"
    base = regression["baseline"]["run_id"]
    cases = []
    for row in regression["steps"]:
        level = _level_name(key, row[key])
        failure = None
        if row["regression"]:
            failure = (
                f"Regression against {base} beyond the {regression['tolerance']:.0%} tolerance "
                f"{level_sentence(level, row)}."
            )
        cases.append(Case(f"against {base} at {level}", failure))
    return cases


def junit_xml(summary: Summary) -> str:
    """The run's verdicts as JUnit XML: a ``<testsuite>`` each for ``slo``, ``require`` and
    ``baseline`` (those the summary has), in a ``<testsuites>`` named for the run."""
    view = RunView.of(summary)
    run_id = summary["run"]["run_id"]
    root = ET.Element("testsuites", name=f"tts-knee {run_id}")
    totals = {"tests": 0, "failures": 0}
    for suite_name, cases in (
        ("slo", slo_cases(view)),
        ("require", require_cases(view)),
        ("baseline", baseline_cases(view)),
    ):
        if not cases:
            continue
        failures = sum(case.failure is not None for case in cases)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(cases)),
            failures=str(failures),
            errors="0",
            skipped="0",
        )
        for case in cases:
            element = ET.SubElement(suite, "testcase", name=case.name, classname=f"tts_knee.{suite_name}")
            if case.failure is not None:
                ET.SubElement(element, "failure", message=case.failure, type=case.kind).text = case.failure
        totals["tests"] += len(cases)
        totals["failures"] += failures
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(summary: Summary, path: Path) -> None:
    """``--junit FILE``: the verdicts' JUnit XML (raises OSError where it cannot be written)."""
    Path(path).write_text(junit_xml(summary), encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(map(_cell, columns)) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]


def _verdict_lines(view: RunView) -> list[str]:
    summary = view.summary
    knee, diagnosis = summary["knee"], summary["diagnosis"]
    if view.open_loop:
        limit = f"recommended rate: **{fmt(summary.get('recommended_rate'), '{:g}')} req/s**"
    else:
        limit = f"recommended concurrency: **{fmt(summary['recommended_concurrency'])}**"
    lines = [
        f"- knee: {'none found' if knee['concurrency'] is None else knee['concurrency']}",
        f"- {limit}: {summary['recommendation']}",
        f"- diagnosis: `{diagnosis['kind']}`" + "".join(f"\n  - {sentence}" for sentence in diagnosis["evidence"]),
    ]
    required, regression = summary.get("require"), summary.get("regression")
    if required:
        lines.append(f"- gate: **{'holds' if required['holds'] else 'FAILS'}**: {required['reason']}")
    if regression:
        regressed = "REGRESSED" if regression["regressed"] else "no regression"
        lines.append(f"- baseline: **{regressed}**: {regression['verdict']}")
    health = summary.get("health")
    if health and not health.get("ok"):
        lines.append(f"- health after the run: **FAILED**: {health['message']}")
    return lines


def _slo_table(view: RunView) -> list[str]:
    slo = view.summary.get("slo")
    if not slo:
        return []
    word = {True: "pass", False: "**FAIL**", None: "inconclusive"}
    rows = [
        [
            _level_name(view.key, verdict.get(view.key)),
            word[verdict["pass"]],
            ", ".join(verdict["failed"]) or "; ".join(verdict["inconclusive"]),
        ]
        for verdict in slo["steps"]
    ]
    return ["", f"### SLO `{slo['spec']}`", "", *_md_table([view.key, "verdict", "why"], rows)]


def step_summary(summary: Summary) -> str:
    """The run's verdict, its step table and its SLO verdicts, in GitHub-flavoured Markdown."""
    view = RunView.of(summary)
    lines = [f"## tts-knee: {summary['run']['run_id']}", "", *_verdict_lines(view)]
    if view.open_loop:
        table = _md_table(list(RATE_COLUMNS), rate_table_rows(view))
    else:
        table = _md_table(list(table_columns(view)), table_rows(view))
    lines += ["", "### Steps", "", *table]
    lines += _slo_table(view)
    return "\n".join(lines) + "\n\n"


def append_step_summary(summary: Summary) -> Path | None:
    """Append :func:`step_summary` to ``$GITHUB_STEP_SUMMARY`` where it is set; the file, or None."""
    where = os.environ.get(STEP_SUMMARY_ENV)
    if not where:
        return None
    with open(where, "a", encoding="utf-8") as out:
        out.write(step_summary(summary))
    return Path(where)
