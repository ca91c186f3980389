"""``tts-knee report RUN_DIR [RUN_DIR ...]``: summary, report, step table, live view.

For each run directory: writes ``summary.json`` and ``report.html`` into it (unless
``--no-report``) and prints the step table and the verdict.  With several run directories it
also writes a comparison report to ``--out`` (default ``compare-<UTC timestamp>/`` beside the
first run directory).  ``--json`` prints the summary JSON (a list for several runs) instead of
the table.  ``--serve`` then serves the live view on ``--host``/``--port`` (port 0 picks one)
and prints ``listening on http://HOST:PORT``.  Exit status 2, with one sentence on stderr, for
a run directory that cannot be read, a summary or report that cannot be written, or an
address that cannot be listened on.

Judging one run:

- ``--slo SPEC`` judges each tested concurrency against an SLO (``analysis.slo``; default: the
  run's own ``options.slo``); the recommendation is then the largest concurrency that meets it.
- ``--require N`` (needs an SLO) is a CI gate: prints the claim at N and exits 0 when the SLO
  holds at N and every lower tested concurrency, 1 when it does not (a failed or inconclusive
  term, or N not tested; one sentence on stderr says which), see ``analysis.gate``; for an
  open-loop run it takes a rate, ``--require 12/s``; for a voice sweep a number of voices.
- ``--baseline OLD_RUN`` compares this run with an earlier one (``--tolerance``, default 0.10)
  and exits 1 on a significant regression beyond the tolerance, see ``analysis.regression``;
  open-loop runs are compared at each offered rate. It first names each difference in what
  made the two runs (``warning:`` lines, the corpus first), and refuses (exit 2) a run whose
  audio failed its checks unless ``--baseline-anyway`` is given.
- ``--server-role ROLE=SERIES`` (repeatable) says what a scraped series of the server means,
  on top of what the run itself was told (``runformat.metric_roles``); ``--server-stage-label
  NAME`` the label its stages' series are told apart by, in place of the run's.

- ``--junit FILE`` writes those verdicts, and the SLO's per term and level, as JUnit XML; where
  ``GITHUB_STEP_SUMMARY`` is set the verdict and the tables are appended to it in Markdown
  (:mod:`dashboard.ci`).

With both, the exit status is 1 when either fails.  A malformed spec, a bad number, these flags
with several run directories or with ``--serve``, or runs with no concurrency in common exit 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
from pathlib import Path

from tts_knee.analysis import capacity, gate, regression
from tts_knee.analysis.axis import of_summary
from tts_knee.analysis.slo import SLOError, parse
from tts_knee.analysis.summary import analyze, load, write_summary
from tts_knee.runformat.metric_roles import ROLES, parse_roles
from tts_knee.runformat.reader import RunDirError, heap_gives_back
from tts_knee.runformat.summary import Summary

from .ci import append_step_summary, write_junit
from .compare import default_out, write_compare
from .report import write_report
from .table import format_table

PROG = "tts-knee report"


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--out",
        type=Path,
        help="where the comparison report of several runs goes (default compare-<UTC timestamp>/ beside the first run)",
    )
    p.add_argument("--serve", action="store_true", help="serve a live view that follows the run (default off)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=8090,
        help="port to serve on (default 8090; Locust's web UI has 8089); 0 picks a free one",
    )
    p.add_argument("--no-report", action="store_true", help="skip report.html, write summary.json only (default off)")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of the table (default off)")
    p.add_argument(
        "--slo",
        metavar="SPEC",
        help="judge each concurrency against an SLO, e.g. "
        "'p95_ms<=1200,error_rate<=0.01' (default: the run's own --slo)",
    )
    p.add_argument(
        "--require",
        metavar="N|R/s|Sx",
        type=gate.requirement,
        help="exit 0 only if the SLO holds at concurrency N (an open-loop run: rate R, e.g. 12/s; a "
        "trace replay: speed S, e.g. 2x) and every lower one tested (default: no gate)",
    )
    p.add_argument(
        "--baseline",
        metavar="OLD_RUN",
        type=Path,
        help="compare with an earlier run; exit 1 on a significant regression (default: no comparison)",
    )
    p.add_argument(
        "--baseline-anyway",
        action="store_true",
        help=f"compare with --baseline even when either run's audio failed its checks (over "
        f"{regression.AUDIO_FAILED_SHARE * 100:.0f}%% of its requests silent, runaway or off in length; "
        "default: refuse)",
    )
    p.add_argument(
        "--junit",
        metavar="FILE",
        type=Path,
        help="write the verdicts as JUnit XML: a test case per SLO term and level, per --require, per level "
        "compared with --baseline (default: none)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=regression.TOLERANCE,
        help=f"relative change --baseline lets pass (default {regression.TOLERANCE:.2f})",
    )
    p.add_argument(
        "--cost-per-hour",
        metavar="AMOUNT",
        help="a replica's price per hour: the cost per million characters and per hour of audio at "
        "the recommendation (default: the run's own --cost-per-hour)",
    )
    p.add_argument(
        "--plan-for",
        metavar="N|N/s",
        help="the replicas N concurrent requests (or N requests per second) need at the "
        "recommendation (default: the run's own --plan-for)",
    )
    p.add_argument(
        "--headroom",
        metavar="SHARE",
        help=f"with --plan-for, the share of a replica's capacity left unplanned, e.g. 0.2 or 20%% "
        f"(default: the run's own, else {capacity.HEADROOM * 100:.0f}%%)",
    )
    p.add_argument(
        "--server-role",
        action="append",
        default=[],
        metavar="ROLE=SERIES",
        help=f"read a scraped series as the server's ROLE, one of {', '.join(ROLES)} (repeatable; "
        f"default: what the run was told, and the names tts-knee knows)",
    )
    p.add_argument(
        "--server-stage-label",
        metavar="NAME",
        help="the label that tells the server's stages apart in its series (default: what the run was told, "
        "else Triton's model and vLLM-Omni's stage)",
    )
    return p


def _gate_args(args) -> str | None:
    """Why these flags cannot be used together, or None."""
    if args.tolerance is not None and not (0 <= args.tolerance < 1e6):
        return f"--tolerance must be a number >= 0 such as 0.10, got {args.tolerance}."
    if args.junit is not None and (len(args.run_dirs) != 1 or args.serve):
        return "--junit reports on one run's verdicts: give exactly one RUN_DIR, without --serve."
    if args.require is None and args.baseline is None:
        return None
    if len(args.run_dirs) != 1:
        return "--require and --baseline judge one run: give exactly one RUN_DIR."
    if args.serve:
        return "--require and --baseline end with an exit status, so they cannot be combined with --serve."
    return None


def _write_error(error: OSError) -> str:
    """One sentence for a file that could not be written."""
    where = error.filename2 or error.filename
    reason = error.strerror or (os.strerror(error.errno) if error.errno else None) or str(error) or type(error).__name__
    if error.errno == errno.EISDIR and where:
        reason = "a directory is in the way"
    return f"cannot write {where or 'the output'}: {reason}."


def _judge(args, rd, summary: Summary) -> int:
    """Adds ``regression`` and ``require`` to the summary; returns the exit status they call
    for (0 or 1); raises :class:`RunDirError` for input that cannot be judged."""
    status = 0
    if args.baseline is not None:
        old_rd = load(args.baseline)
        old_summary = analyze(old_rd, None, parse_roles(args.server_role))
        reg = regression.compare(rd, summary, old_rd, old_summary, args.tolerance)
        for difference in reg["warnings"]:  # what made the runs, before the comparison is read
            print(f"warning: {difference}", file=sys.stderr, flush=True)
        refused = not args.baseline_anyway and (
            regression.audio_refusal(old_summary, f"the baseline {args.baseline}")
            or regression.audio_refusal(summary, f"this run {rd.path}")
        )
        if refused:
            raise RunDirError(refused)
        if not reg["compared"]:
            raise RunDirError(reg["verdict"])
        summary["regression"] = reg
        status = 1 if reg["regressed"] else 0
    if args.require is not None:
        if not summary.get("slo"):
            raise RunDirError(f"--require needs an SLO: {rd.path} was run without --slo, so pass --slo SPEC.")
        if isinstance(args.require, gate.Speed):
            if not summary.get("trace"):
                raise RunDirError(
                    f"--require {args.require.factor:g}x is a speed of a replayed trace, but {rd.path} "
                    f"was not run with --trace: give a concurrency (8) or a rate (12/s)."
                )
            required = summary["require"] = gate.require_speed(summary, args.require.factor)
            return max(status, required["exit"])
        rate, axis = isinstance(args.require, gate.Rate), of_summary(summary)
        if axis.key == "voices":
            if rate:
                raise RunDirError(
                    f"--require {args.require.per_s:g}/s is a rate, but {rd.path} swept the number of "
                    f"voices (--voice-steps): give a number of voices, such as --require 8."
                )
            required = summary["require"] = gate.require(summary, args.require, "voices")
            return max(status, required["exit"])
        if rate and not axis.open_loop:
            raise RunDirError(
                f"--require {args.require.per_s:g}/s is a rate, but {rd.path} ran closed loop "
                f"(--steps): give a concurrency, such as --require 8."
            )
        if not rate and axis.open_loop:
            raise RunDirError(
                f"--require {args.require} is a concurrency, but {rd.path} ran open loop (--rates): "
                f"give a rate, such as --require {args.require}/s."
            )
        required = summary["require"] = (
            gate.require_rate(summary, args.require.per_s) if rate else gate.require(summary, args.require)
        )
        status = max(status, required["exit"])
    return status


def _print_verdicts(summary: Summary, as_json: bool) -> None:
    """Regression and gate verdicts: warnings and failures on stderr, the claim on stdout."""
    reg, req = summary.get("regression"), summary.get("require")
    if reg:
        print(reg["verdict"], file=sys.stderr if reg["regressed"] or as_json else sys.stdout, flush=True)
    if req:
        if req["claim"] and not as_json:
            print(req["claim"], flush=True)
        print(req["reason"], file=sys.stdout if req["holds"] and not as_json else sys.stderr, flush=True)


class _Failed(Exception):
    """A run directory, a flag or a write that ends the command: exit 2 with this sentence."""


def _flags(args: argparse.Namespace) -> tuple:
    """``(slo, roles, capacity options)`` the flags ask for; raises :class:`_Failed` naming the
    first flag that does not parse."""
    bad = _gate_args(args)
    slo = None
    if bad is None and args.slo is not None:
        try:
            slo = parse(args.slo)
        except SLOError as error:
            bad = f"--slo: {error}"
    roles: dict[str, str] = {}
    asked = capacity.Options()
    try:
        roles = parse_roles(args.server_role)
    except ValueError as error:
        bad = bad or f"{error}."
    try:
        asked = capacity.Options(
            None if args.cost_per_hour is None else capacity.parse_cost(args.cost_per_hour),
            None if args.plan_for is None else capacity.parse_demand(args.plan_for),
            None if args.headroom is None else capacity.parse_headroom(args.headroom),
        )
    except capacity.CapacityError as error:
        bad = bad or str(error)
    if bad:
        raise _Failed(bad)
    return slo, roles, asked


def _report_one(args: argparse.Namespace, path: Path, slo, roles, asked) -> tuple[Summary | None, int]:
    """Analyse, write and print one run directory: ``(its summary, the status its verdicts
    give)``; the summary is None for a live view's run that has not written yet."""
    try:
        rd = load(path)
        summary = analyze(rd, slo, roles, asked, args.server_stage_label)
        status = _judge(args, rd, summary)
    except RunDirError as error:
        if args.serve and Path(path).is_dir():  # a run that has not written yet can be watched
            print(f"note: {error}", file=sys.stderr)
            return None, 0
        raise _Failed(str(error)) from None
    try:
        write_summary(rd, summary)
        report = None if args.no_report else write_report(rd, summary)
        if args.junit is not None:
            write_junit(summary, args.junit)
        if not args.serve:
            append_step_summary(summary)
    except OSError as error:
        raise _Failed(_write_error(error)) from None
    if not args.json:
        print(format_table(summary, report), flush=True)
        print(flush=True)
    _print_verdicts(summary, args.json)
    return summary, status


def _compare(args: argparse.Namespace, summaries: list[Summary]) -> None:
    """The comparison report of several runs (none where one ran open loop: it says so)."""
    if len(summaries) < 2 or args.no_report:
        return
    open_loop = [summary["run"]["run_id"] for summary in summaries if of_summary(summary).open_loop]
    if open_loop:
        print(
            f"note: no comparison report: {', '.join(open_loop)} ran open loop (--rates), which the comparison "
            f"does not draw yet; each run's own report is written",
            file=sys.stderr,
        )
        return
    try:
        out = write_compare(summaries, args.out or default_out(args.run_dirs[0]))
    except OSError as error:
        raise _Failed(_write_error(error)) from None
    if not args.json:
        print(f"comparison report: {out}", flush=True)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    heap_gives_back()  # whole runs are read and analysed here: their temporaries go back to the system
    summaries: list[Summary] = []
    status = 0
    try:
        slo, roles, asked = _flags(args)
        for path in args.run_dirs:
            summary, judged = _report_one(args, path, slo, roles, asked)
            status = max(status, judged)
            if summary is not None:
                summaries.append(summary)
        _compare(args, summaries)
    except _Failed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=1), flush=True)
    if status:
        return status
    if args.serve:
        from .serve import ServeError, serve

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            serve(args.run_dirs, args.host, args.port)
        except ServeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
