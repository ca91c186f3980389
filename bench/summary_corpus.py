"""Re-analyse a corpus of run directories and compare the summaries byte for byte.

A refactor of the analysis must leave ``summary.json`` and the terminal verdict unchanged. This
tool keeps that checkable::

    python bench/summary_corpus.py synth CORPUS          # add synthetic runs (tests/rundirs.py)
    python bench/summary_corpus.py analyse CORPUS OUT    # summary.json + verdict.txt per run
    python bench/summary_corpus.py compare OUT_A OUT_B   # byte-for-byte, one line per difference

``analyse`` finds every run directory under ``CORPUS`` (a folder holding ``requests.jsonl``),
runs ``tts-knee report --no-report`` on it in this process (the code this interpreter imports:
point ``PYTHONPATH`` at another tree's ``tts_knee`` to analyse with that) and keeps, under
``OUT`` at the run's relative path, its ``summary.json``, what the report printed
(``verdict.txt``) and its exit status (``status``). ``compare`` exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_dirs(corpus: Path) -> list[Path]:
    """Every run directory under ``corpus``, sorted."""
    return sorted(p.parent for p in corpus.rglob("requests.jsonl") if "analysed" not in p.parts)


def analyse(corpus: Path, out: Path) -> int:
    from tts_knee.dashboard.__main__ import main

    n = 0
    status: int | str | None  # the command's exit status, or what ended it
    for rd in run_dirs(corpus):
        dest = out / rd.relative_to(corpus)
        dest.mkdir(parents=True, exist_ok=True)
        (rd / "summary.json").unlink(missing_ok=True)
        printed, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                status = main([str(rd), "--no-report"])
            except SystemExit as e:  # a bad run directory ends the command
                status = e.code
            except Exception as e:  # noqa: BLE001 - a crash is a result to compare too
                status = f"crash {type(e).__name__}: {e}"
        (dest / "verdict.txt").write_text(printed.getvalue() + errors.getvalue())
        (dest / "status").write_text(f"{status}\n")
        if (rd / "summary.json").exists():
            shutil.copyfile(rd / "summary.json", dest / "summary.json")
        n += 1
    print(f"analysed {n} run directories into {out}")
    return 0


def compare(a: Path, b: Path) -> int:
    names = sorted(
        {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
        | {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    )
    runs = {n.parent for n in names}
    differ = []
    for n in names:
        fa, fb = a / n, b / n
        if not fa.exists() or not fb.exists() or fa.read_bytes() != fb.read_bytes():
            differ.append(n)
            print(f"differs: {n}")
    summaries = sum(1 for n in names if n.name == "summary.json")
    print(f"{len(runs)} run directories, {summaries} summaries, {len(names)} files compared: {len(differ)} differ")
    return 1 if differ else 0


def synth(corpus: Path) -> int:
    """Synthetic runs of many shapes: each diagnosis, streamed, in progress, with an SLO, refined."""
    # the tests' run-directory builder, loaded from its file (tests/ is not a package)
    spec = importlib.util.spec_from_file_location("rundirs", HERE.parent / "tests" / "rundirs.py")
    assert spec is not None and spec.loader is not None
    rundirs = importlib.util.module_from_spec(spec)
    sys.modules["rundirs"] = rundirs  # its dataclasses look their module up by name
    spec.loader.exec_module(rundirs)
    Model, build_run = rundirs.Model, rundirs.build_run

    shapes = {
        "flat": Model(slots=None),
        "slots4": Model(slots=4, gpu_busy_util=97),
        "slots2-cpu": Model(slots=2, gpu=False, server_cpu_busy=95),
        "leak": Model(gpu_mem_leak_per_step=2 * 1024**3),
        "errors": Model(error_from=8),
        "ratelimit": Model(rate_limit_from=4),
        "client-io": Model(write_ms_per_user=4.0),
        "client-bound": Model(user_gap_ms=300.0, user_gap_from=8, client_cpu_per_user=12.0),
        "no-resources": Model(resources=False),
        "continuous": Model(continuous=True),
        "workers": Model(continuous=True, client_workers=2),
        "in-progress": Model(in_progress=True),
        "bad-lines": Model(bad_lines=3),
        "timing": Model(server_timing=True),
        "stream": Model(stream_capacity=8.0, stream_max_speed=4.0),
        "stream-buffer": Model(stream_capacity=6.0, playback_buffer_ms=300.0, prefill_ms_per_stream=40.0),
        "stream-truncate": Model(stream_capacity=8.0, truncate_from=8),
        "stream-floor": Model(stream_capacity=8.0, ttfa_floor_ms=150.0),
        "slo": Model(slo="p95_ms<=600"),
        "slo-fail": Model(slo="p95_ms<=100,error_rate<=0.01"),
        "refine": Model(steps=(1, 2, 4, 8, 16, 5, 6, 7), refine_from=5),
        "short": Model(steps=(1, 2), step_s=4.0),
        "one-step": Model(steps=(4,)),
        "noisy": Model(noise=0.4, seed=7),
    }
    for seed in range(1, 9):
        shapes[f"seed{seed}"] = Model(seed=seed, slots=1 + seed % 5, noise=0.1)
    for name, model in shapes.items():
        build_run(corpus / "synthetic" / name, model)
    swept = 0
    for sweep in ("rate", "voices", "concurrency"):
        for heard in (False, True):
            path = corpus / "synthetic" / f"{sweep}{'-speech' if heard else ''}"
            build_run(path, Model(steps=(2, 2, 2, 2) if sweep == "voices" else (1, 2, 4, 8), slots=2))
            _sweep_along(path, sweep, heard)
            swept += 1
    print(f"wrote {len(shapes) + swept} synthetic run directories under {corpus / 'synthetic'}")
    return 0


def _sweep_along(path: Path, sweep: str, heard: bool) -> None:
    """Make a synthetic closed loop an open loop (``rate``) or a voice sweep (``voices``), and,
    where ``heard``, give it a judge's ``speech.jsonl`` whose words break at the fourth step."""
    import json

    run = json.loads((path / "run.json").read_text())
    for i, st in enumerate(run["steps"]):
        if sweep == "voices":
            st["voices"] = 2**i
        elif sweep == "rate":
            st.update(rate=float(2**i), concurrency=0)
    if sweep == "rate":
        run["mode"] = "open"
        records = [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]
        (path / "requests.jsonl").write_text("".join(json.dumps(dict(r, scheduled=r["t0"])) + "\n" for r in records))
    (path / "run.json").write_text(json.dumps(run))
    if heard:
        lines = [
            {
                "req_id": f"{st['step']}-{t}",
                "step": st["step"],
                "text_id": f"t{t}",
                "metric": "wer",
                "error": 0.05 * (t % 3) + (0.5 if i == 3 else 0.0),
                "text": f"text {t}",
                "transcript": "x",
            }
            for i, st in enumerate(run["steps"])
            for t in range(8)
        ]
        (path / "speech.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("synth").add_argument("corpus", type=Path)
    an = sub.add_parser("analyse")
    an.add_argument("corpus", type=Path)
    an.add_argument("out", type=Path)
    co = sub.add_parser("compare")
    co.add_argument("a", type=Path)
    co.add_argument("b", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "synth":
        return synth(args.corpus)
    if args.cmd == "analyse":
        return analyse(args.corpus, args.out)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
