"""``tts-knee judge RUN_DIR``: judge a finished run's kept clips, or judge them again (another
model, the voice and the sound added), then analyse the run as ``tts-knee report`` does.

The clips are those a run kept in ``speech/`` (``--asr-model`` judged them during the run,
``--asr-keep`` kept them for later), each with its line in ``speech.jsonl``. The judge is the
process a run starts (:mod:`audio.judge`), told what it was told during the run: each clip's
language, and the clips that shared a Whisper window heard together again (the line's
``window``), so that the same model gives the same figures during the run and after it
(:mod:`audio.hearing`). The new ``speech.jsonl`` is written beside the old one and replaces it
whole, then ``run.json``'s ``speech`` says who judged; killed half way, the run stays as it was.
Bad input (no run there, no clips kept, a model that is missing) is one sentence and exit
status 2, with nothing in the run directory changed. Manual: docs/listening.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tts_knee import runformat
from tts_knee.analysis import speech as speech_mod
from tts_knee.audio import asr, hearing as hearing_mod, judge as judge_proc
from tts_knee.runformat.options import OPTIONS, Option
from tts_knee.runformat.reader import RunDir, RunDirError

PROG = "tts-knee judge"
#: The run options this command takes (declared once, in runformat.options), and what each
#: defaults to here where that differs from a run's default.
FLAGS = {
    "asr_model": "the model that judged the run",
    "asr_listen": None,
    "asr_words_only": None,
    "reference_voice": "the reference each clip was compared with during the run",
    "asr_sample": "every clip kept",
    "asr_language": "each clip's, as the judge was told during the run",
    "asr_metric": "the run's",
    "asr_device": None,
    "asr_threads": None,
}


class JudgeError(Exception):
    """Why the run cannot be judged, one sentence: exit status 2, the run directory untouched."""


def _checked(option: Option):
    """An argparse type for a number ``option`` declares bounds for: its own sentence when out of them."""

    def check(value: str) -> object:
        try:
            return option.checked(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return check


def _help(option: Option) -> str:
    """The option's help, its default said as it is here (:data:`FLAGS`)."""
    text = option.help_text()
    default = FLAGS[option.key or ""]
    if default is None or "(default" not in text:
        return text
    return text[: text.rindex("(default")] + f"(default: {default})."


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    arg_parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    arg_parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory whose clips were kept")
    arg_parser.add_argument(
        "--no-report", action="store_true", help="skip report.html, write summary.json only (default off)"
    )
    for option in OPTIONS:
        if option.key not in FLAGS or option.flag is None:
            continue
        if option.kind is bool:
            arg_parser.add_argument(option.flag, action="store_true", help=_help(option))
        elif option.at_least is not None or option.above is not None:
            arg_parser.add_argument(option.flag, type=_checked(option), default=None, help=_help(option))
        else:
            arg_parser.add_argument(option.flag, default=None, choices=option.choices or None, help=_help(option))
    return arg_parser


@dataclass
class Plan:
    """What the judge will do, worked out (and checked) before anything is started or written."""

    path: Path
    run: dict[str, Any]
    lines: list[dict[str, Any]]  # speech.jsonl as it is
    picked: list[dict[str, Any]]  # the lines whose clips are judged, in their order
    model: str
    metric: str
    hearing: hearing_mod.Hearing
    args: argparse.Namespace
    said: dict[str, dict[str, Any]] = field(default_factory=dict)  # req_id -> the judge's line

    def told(self, line: dict[str, Any]) -> dict[str, Any]:
        """The clip as the judge is given it: what the run told it, unless a flag says otherwise."""
        told = line["told_language"] if "told_language" in line else line.get("language")  # older runs: the latter
        return {
            "req_id": line["req_id"],
            "step": line.get("step"),
            "concurrency": line.get("concurrency"),
            "text_id": line.get("text_id"),
            "text": line.get("text"),
            "language": self.args.asr_language or told or None,
            "reference": self.args.reference_voice or line.get("reference") or None,
            "clip": line.get("clip"),
        }


def _run_json(path: Path) -> dict[str, Any]:
    try:
        run = json.loads((path / runformat.RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return run if isinstance(run, dict) else {}


def _kept(path: Path, line: dict[str, Any]) -> bool:
    clip = line.get("clip")
    return isinstance(clip, str) and (path / clip).is_file()


def _picked(path: Path, lines: list[dict[str, Any]], sample: int | None) -> list[dict[str, Any]]:
    """The lines whose clips are judged: every kept clip, or ``sample`` texts a step spread over
    the texts kept (as the run's judge picks them), the first clip of each."""
    kept = [line for line in lines if _kept(path, line)]
    if sample is None:
        return kept
    ids = speech_mod.judged_texts([str(line.get("text_id")) for line in kept], sample)
    taken: dict[object, set[str]] = {}
    out = []
    for line in kept:
        step_taken = taken.setdefault(line.get("step"), set())
        if str(line.get("text_id")) in ids and str(line.get("text_id")) not in step_taken:
            step_taken.add(str(line.get("text_id")))
            out.append(line)
    return out


def plan(args: argparse.Namespace) -> Plan:
    """Check the run, its clips and the judge's options; raises :class:`JudgeError`."""
    path = Path(args.run_dir)
    try:
        RunDir(path).check()
    except RunDirError as error:
        raise JudgeError(str(error)) from None
    run = _run_json(path)
    lines = speech_mod.read(path)
    if not lines:
        raise JudgeError(
            f"{path} kept no clips for the judge (no speech.jsonl): a run keeps them with --asr-keep, or with "
            f"--asr-model, which judges them during the run"
        )
    picked = _picked(path, lines, args.asr_sample)
    if not picked:
        raise JudgeError(
            f"{path}: none of the {len(lines)} clips speech.jsonl names is in {path / runformat.SPEECH_DIR} "
            f"(was the run directory copied without it?)"
        )
    options, said = speech_mod.json_object(run.get("options")), speech_mod.json_object(run.get("speech"))
    model = args.asr_model or said.get("model") or options.get("asr_model")
    if not model:
        raise JudgeError(
            f"{path} was not judged during the run: name the recogniser with --asr-model (a model directory, or "
            f"a name such as base)"
        )
    metric = args.asr_metric or options.get("asr_metric") or ""
    if args.asr_words_only and (args.asr_listen or args.reference_voice):
        raise JudgeError(hearing_mod.CONTRARY)
    try:
        asr.check_model(model, args.asr_language or "", metric)
        heard = hearing_mod.decide(args.asr_listen, args.asr_words_only, args.reference_voice or "")
    except asr.AsrError as error:
        raise JudgeError(str(error)) from None
    return Plan(path, run, lines, picked, model, metric, heard, args)


def batches(picked: list[dict[str, Any]], lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The clips judged together, in order: those that shared a Whisper window during the run
    (the lines' ``window``) together again where all of them are judged now; the rest a step's
    at a time, :data:`audio.judge.BATCH_MAX` at most (the window packing then depends on the clips
    alone, not on when they came)."""
    chosen = {line["req_id"] for line in picked}
    members: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line.get("window"):
            members.setdefault(line["window"], []).append(line)
    out: list[list[dict[str, Any]]] = []
    pending: list[dict[str, Any]] = []
    done: set[str] = set()
    for line in picked:
        window = line.get("window")
        if window and all(member["req_id"] in chosen for member in members[window]):
            if window not in done:
                done.add(window)
                out += [pending, members[window]]
                pending = []
            continue
        if pending and (pending[-1].get("step") != line.get("step") or len(pending) >= judge_proc.BATCH_MAX):
            out.append(pending)
            pending = []
        pending.append(line)
    return [batch for batch in [*out, pending] if batch]


def _feed(job: Plan, groups: list[list[dict[str, Any]]], to_judge: IO[bytes]) -> None:
    """Write every clip to the judge, each batch's first header saying how many are judged together."""
    try:
        for group in groups:
            for position, line in enumerate(group):
                clip = job.told(line)
                header = {
                    "id": clip["req_id"],
                    "text": clip["text"],
                    "language": clip["language"],
                    "metric": job.metric,
                    "reference": clip["reference"],
                    **({"batch": len(group)} if position == 0 else {}),
                }
                to_judge.write(judge_proc.frame(header, (job.path / clip["clip"]).read_bytes()))
            to_judge.flush()
    except (OSError, ValueError):  # the judge went away: the reader says so
        pass
    finally:
        with contextlib.suppress(OSError):
            to_judge.close()


def _start(job: Plan) -> subprocess.Popen[bytes]:
    """The judge process, its model loaded; raises :class:`JudgeError` where it will not load."""
    threads = job.args.asr_threads or 1
    command = hearing_mod.judge_command(
        job.model,
        threads,
        job.args.asr_language or "",
        job.args.asr_device or "cpu",
        job.hearing.listen,
    )
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=hearing_mod.judge_environment(threads),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    try:
        ready = json.loads(first) if first else {}
    except ValueError:
        ready = {}
    if not ready.get("ready"):
        proc.kill()
        proc.wait()
        raise JudgeError(ready.get("fatal") or f"the judge process ended before its model loaded ({job.model})")
    return proc


def judge(job: Plan) -> None:
    """Judge the picked clips (``job.said``); raises :class:`JudgeError` where the judge stopped."""
    groups = batches(job.picked, job.lines)
    proc = _start(job)
    assert proc.stdin is not None and proc.stdout is not None
    what = ", ".join(job.hearing.heard)
    print(
        f"judging {len(job.picked)} clips of {job.path} with {job.model} ({what})",
        file=sys.stderr,
        flush=True,
    )
    feeder = threading.Thread(target=_feed, args=(job, groups, proc.stdin), daemon=True)
    feeder.start()
    began, total = time.monotonic(), len(job.picked)
    try:
        for line in proc.stdout:
            said = json.loads(line)
            job.said[said["id"]] = said
            if len(job.said) % 24 == 0 or len(job.said) == total:
                print(f"judged {len(job.said)} of {total} clips ({time.monotonic() - began:.0f} s)", file=sys.stderr)
            if len(job.said) == total:
                break
    finally:
        feeder.join(timeout=5)
        proc.stdout.close()
        code = proc.wait()
    if len(job.said) < total:
        raise JudgeError(
            f"the judge process ended (exit status {code}) after {len(job.said)} of {total} clips; "
            f"{job.path} is as it was"
        )


def entries(job: Plan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The new ``speech.jsonl`` lines, in the old one's order (the similarity of each clip to its
    text's clip at the lowest concurrency heard so far, as during the run), and run.json's ``speech``."""
    first = hearing_mod.FirstHeard()
    out = []
    counts = {"offered": len(job.lines), "judged": 0, "not_judged": 0}
    for line in job.lines:
        clip = job.told(line)
        said = job.said.get(line["req_id"])
        if said is not None:
            fields = hearing_mod.judged(clip, said, job.hearing, first)
            counts["not_judged" if fields["reason"] else "judged"] += 1
        elif _kept(job.path, line):
            fields = hearing_mod.unjudged(clip, speech_mod.KEPT)
        else:
            fields = hearing_mod.unjudged(clip, f"not judged: its clip {clip['clip']} is not in the run directory")
            counts["not_judged"] += 1
        keys = ("req_id", "step", "concurrency", "text_id", "text", "clip")
        out.append(runformat.speech_entry(**{key: clip[key] for key in keys}, **fields))
    speech = {
        **counts,
        "heard": job.hearing.heard,
        "not_heard": job.hearing.not_heard,
        "model": job.model,
        "afterwards": True,
    }
    return out, speech


def write(job: Plan) -> None:
    """``speech.jsonl`` written beside the old one and put in its place, then run.json's ``speech``."""
    lines, speech = entries(job)
    runformat.write_text(job.path / runformat.SPEECH_FILE, "".join(runformat.jsonl_line(line) for line in lines))
    if job.run:
        runformat.write_json(job.path / runformat.RUN_JSON, {**job.run, "speech": speech})


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    try:
        job = plan(args)
        judge(job)
        try:
            write(job)
        except OSError as error:
            raise JudgeError(f"{job.path}: the verdicts could not be written ({error.strerror or error})") from None
    except JudgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from .__main__ import main as report_main

    return report_main([str(job.path), *(["--no-report"] if args.no_report else [])], prog=prog)
