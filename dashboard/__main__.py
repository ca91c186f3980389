"""``python -m dashboard RUN_DIR [RUN_DIR ...]``: summary, report, step table, live view.

For each run directory: writes ``summary.json`` and ``report.html`` into it (unless
``--no-report``) and prints the step table and the verdict.  With several run directories it
also writes a comparison report to ``--out`` (default ``compare-<UTC timestamp>/`` beside the
first run directory).  ``--json`` prints the summary JSON (a list for several runs) instead of
the table.  ``--serve`` then serves the live view on ``--host``/``--port`` (port 0 picks one)
and prints ``listening on http://HOST:PORT``.  Exit status 2, with one sentence on stderr, for
a run directory that cannot be read, a summary or report that cannot be written, or an
address that cannot be listened on.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
from pathlib import Path

from .compare import default_out, write_compare
from .report import write_report
from .rundir import RunDirError
from .summary import analyze, format_table, load, write_summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dashboard", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--out", type=Path, help="where the comparison report of several runs goes")
    p.add_argument("--serve", action="store_true", help="serve a live view that follows the run")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8090,
                   help="port to serve on (8090; Locust's web UI has 8089); 0 picks a free one")
    p.add_argument("--no-report", action="store_true", help="skip report.html (summary.json only)")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of the table")
    return p


def _write_error(e: OSError) -> str:
    """One sentence for a file that could not be written."""
    where = e.filename2 or e.filename
    reason = e.strerror or (os.strerror(e.errno) if e.errno else None) or str(e) or type(e).__name__
    if e.errno == errno.EISDIR and where:
        reason = "a directory is in the way"
    return f"cannot write {where or 'the output'}: {reason}."


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    summaries = []
    for path in args.run_dirs:
        try:
            rd = load(path)
            s = analyze(rd)
        except RunDirError as e:
            if args.serve and Path(path).is_dir():  # a run that has not written yet can be watched
                print(f"note: {e}", file=sys.stderr)
                continue
            print(f"error: {e}", file=sys.stderr)
            return 2
        try:
            write_summary(rd, s)
            report = None if args.no_report else write_report(rd, s)
        except OSError as e:
            print(f"error: {_write_error(e)}", file=sys.stderr)
            return 2
        summaries.append(s)
        if not args.json:
            print(format_table(s, report), flush=True)
            print(flush=True)
    if len(summaries) > 1 and not args.no_report:
        try:
            out = write_compare(summaries, args.out or default_out(args.run_dirs[0]))
        except OSError as e:
            print(f"error: {_write_error(e)}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"comparison report: {out}", flush=True)
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=1), flush=True)
    if args.serve:
        from .serve import ServeError, serve
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            serve(args.run_dirs, args.host, args.port)
        except ServeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
