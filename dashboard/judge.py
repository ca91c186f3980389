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
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return check


def _help(option: Option) -> str:
    """The option's help, its default said as it is here (:data:`FLAGS`)."""
    text = option.help_text()
    default = FLAGS[option.key or ""]
    if default is None or "(default" not in text:
        return text
    return text[: text.rindex("(default")] + f"(default: {default})."


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory whose clips were kept")
    p.add_argument("--no-report", action="store_true", help="skip report.html, write summary.json only (default off)")
    for o in OPTIONS:
        if o.key not in FLAGS or o.flag is None:
            continue
        if o.kind is bool:
            p.add_argument(o.flag, action="store_true", help=_help(o))
        elif o.at_least is not None or o.above is not None:
            p.add_argument(o.flag, type=_checked(o), default=None, help=_help(o))
        else:
            p.add_argument(o.flag, default=None, choices=o.choices or None, help=_help(o))
    return p


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
    kept = [e for e in lines if _kept(path, e)]
    if sample is None:
        return kept
    ids = speech_mod.judged_texts([str(e.get("text_id")) for e in kept], sample)
    taken: dict[object, set[str]] = {}
    out = []
    for e in kept:
        step_taken = taken.setdefault(e.get("step"), set())
        if str(e.get("text_id")) in ids and str(e.get("text_id")) not in step_taken:
            step_taken.add(str(e.get("text_id")))
            out.append(e)
    return out


def plan(args: argparse.Namespace) -> Plan:
    """Check the run, its clips and the judge's options; raises :class:`JudgeError`."""
    path = Path(args.run_dir)
    try:
        RunDir(path).check()
    except RunDirError as e:
        raise JudgeError(str(e)) from None
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
    except asr.AsrError as e:
        raise JudgeError(str(e)) from None
    return Plan(path, run, lines, picked, model, metric, heard, args)


def batches(picked: list[dict[str, Any]], lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The clips judged together, in order: those that shared a Whisper window during the run
    (the lines' ``window``) together again where all of them are judged now; the rest a step's
    at a time, :data:`audio.judge.BATCH_MAX` at most (the window packing then depends on the clips
    alone, not on when they came)."""
    chosen = {e["req_id"] for e in picked}
    members: dict[str, list[dict[str, Any]]] = {}
    for e in lines:
        if e.get("window"):
            members.setdefault(e["window"], []).append(e)
    out: list[list[dict[str, Any]]] = []
    pending: list[dict[str, Any]] = []
    done: set[str] = set()
    for e in picked:
        window = e.get("window")
        if window and all(m["req_id"] in chosen for m in members[window]):
            if window not in done:
                done.add(window)
                out += [pending, members[window]]
                pending = []
            continue
        if pending and (pending[-1].get("step") != e.get("step") or len(pending) >= judge_proc.BATCH_MAX):
            out.append(pending)
            pending = []
        pending.append(e)
    return [b for b in [*out, pending] if b]


def _feed(p: Plan, groups: list[list[dict[str, Any]]], to_judge: IO[bytes]) -> None:
    """Write every clip to the judge, each batch's first header saying how many are judged together."""
    try:
        for group in groups:
            for k, line in enumerate(group):
                clip = p.told(line)
                header = {
                    "id": clip["req_id"],
                    "text": clip["text"],
                    "language": clip["language"],
                    "metric": p.metric,
                    "reference": clip["reference"],
                    **({"batch": len(group)} if k == 0 else {}),
                }
                to_judge.write(judge_proc.frame(header, (p.path / clip["clip"]).read_bytes()))
            to_judge.flush()
    except (OSError, ValueError):  # the judge went away: the reader says so
        pass
    finally:
        with contextlib.suppress(OSError):
            to_judge.close()


def _start(p: Plan) -> subprocess.Popen[bytes]:
    """The judge process, its model loaded; raises :class:`JudgeError` where it will not load."""
    threads = p.args.asr_threads or 1
    command = hearing_mod.judge_command(
        p.model, threads, p.args.asr_language or "", p.args.asr_device or "cpu", p.hearing.listen
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
        raise JudgeError(ready.get("fatal") or f"the judge process ended before its model loaded ({p.model})")
    return proc


def judge(p: Plan) -> None:
    """Judge the picked clips (``p.said``); raises :class:`JudgeError` where the judge stopped."""
    groups = batches(p.picked, p.lines)
    proc = _start(p)
    assert proc.stdin is not None and proc.stdout is not None
    what = ", ".join(p.hearing.heard)
    print(f"judging {len(p.picked)} clips of {p.path} with {p.model} ({what})", file=sys.stderr, flush=True)
    feeder = threading.Thread(target=_feed, args=(p, groups, proc.stdin), daemon=True)
    feeder.start()
    began, total = time.monotonic(), len(p.picked)
    try:
        for line in proc.stdout:
            said = json.loads(line)
            p.said[said["id"]] = said
            if len(p.said) % 24 == 0 or len(p.said) == total:
                print(f"judged {len(p.said)} of {total} clips ({time.monotonic() - began:.0f} s)", file=sys.stderr)
            if len(p.said) == total:
                break
    finally:
        feeder.join(timeout=5)
        proc.stdout.close()
        code = proc.wait()
    if len(p.said) < total:
        raise JudgeError(
            f"the judge process ended (exit status {code}) after {len(p.said)} of {total} clips; {p.path} is as it was"
        )


def entries(p: Plan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The new ``speech.jsonl`` lines, in the old one's order (the similarity of each clip to its
    text's clip at the lowest concurrency heard so far, as during the run), and run.json's ``speech``."""
    first = hearing_mod.FirstHeard()
    out = []
    counts = {"offered": len(p.lines), "judged": 0, "not_judged": 0}
    for line in p.lines:
        clip = p.told(line)
        said = p.said.get(line["req_id"])
        if said is not None:
            fields = hearing_mod.judged(clip, said, p.hearing, first)
            counts["not_judged" if fields["reason"] else "judged"] += 1
        elif _kept(p.path, line):
            fields = hearing_mod.unjudged(clip, speech_mod.KEPT)
        else:
            fields = hearing_mod.unjudged(clip, f"not judged: its clip {clip['clip']} is not in the run directory")
            counts["not_judged"] += 1
        keys = ("req_id", "step", "concurrency", "text_id", "text", "clip")
        out.append(runformat.speech_entry(**{k: clip[k] for k in keys}, **fields))
    speech = {
        **counts,
        "heard": p.hearing.heard,
        "not_heard": p.hearing.not_heard,
        "model": p.model,
        "afterwards": True,
    }
    return out, speech


def write(p: Plan) -> None:
    """``speech.jsonl`` written beside the old one and put in its place, then run.json's ``speech``."""
    lines, speech = entries(p)
    runformat.write_text(p.path / runformat.SPEECH_FILE, "".join(runformat.jsonl_line(e) for e in lines))
    if p.run:
        runformat.write_json(p.path / runformat.RUN_JSON, {**p.run, "speech": speech})


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    try:
        p = plan(args)
        judge(p)
        try:
            write(p)
        except OSError as e:
            raise JudgeError(f"{p.path}: the verdicts could not be written ({e.strerror or e})") from None
    except JudgeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from .__main__ import main as report_main

    return report_main([str(p.path), *(["--no-report"] if args.no_report else [])], prog=prog)
