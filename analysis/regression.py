"""Regression against a baseline run: ``tts-knee report RUN --baseline OLD_RUN [--tolerance 0.10]``.

The concurrencies both runs tested are compared level by level (repeats pooled, see
``analysis.levels``); two open-loop runs, the offered rates both tested, each row with its
``rate``, latency read from the schedule (``sched_wait_ms``, what a caller arriving on time
waited). For each level (``summary.json`` ``regression.steps``):

- ``p50_ms`` and ``p95_ms`` of wait (successful final attempts), and ``ttfa_p95_ms`` when both
  runs recorded TTFA (else null): the ratio new / old with a 95% interval and a two-sided
  p-value (``analysis.confidence.compare_percentile``: bootstrap of both samples, or the
  order-statistic normal approximation for large ones);
- ``throughput_rps``: successful completions per second of the steps' windows, the ratio and a
  two-sample Poisson test (conservative for a closed loop, whose completions are more regular
  than Poisson);
- ``error_rate``: failed / requests, the change in percentage points and a two-proportion test;
- where both runs listened (``--asr-model``, not ``--asr-words-only``), ``mos_mean`` and
  ``similarity_ref_mean``: the judged clips paired by text, a regression when the 95 % bootstrap
  interval of the drop stays above the knee's margin (0.3 MOS, 0.2 of similarity).

A figure is ``significant`` when p < ``ALPHA`` (0.05).  It is a ``regression`` when it is
significant *and* worse than the tolerance allows: latency ratio above 1 + tolerance, throughput
ratio below 1 - tolerance, error rate up by more than max(``ERROR_RATE_STEP`` (1 percentage
point), tolerance x the baseline's rate).  A significant change the other way beyond the
tolerance is an ``improvement``.  A level regresses when any of its figures does, and the
command exits 1 when any level regresses (0 otherwise; 2 when the runs share no tested level, or
one ran open loop and the other did not).  No correction for the several tests is applied: a
change must be both significant and beyond the tolerance, and the tolerance is the guard against
noise flagged by chance.

``warnings`` names each difference in what made the two runs (:func:`differences`), the corpus
first: the corpus (its SHA-256 in run.json's ``provenance``, else its file name and size, and the
text ids in the records), the options that change what is measured, tts-knee, Python and Locust,
the load host, and what the server said of itself (its Server header, HTTP version and model).

A run whose audio failed its checks is no baseline, nor a candidate: :func:`audio_refusal` says
why in one sentence when more than ``AUDIO_FAILED_SHARE`` (2%) of its requests came back silent,
or ran away, or with audio whose length is off the same text's at the lowest step (integrity);
the steps of ``--probe-texts``, whose texts are meant to be refused, are not counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np

from tts_knee.runformat.files import UNDIGESTED_OPTIONS
from tts_knee.runformat.reader import RunDir, RunDirError
from tts_knee.runformat.schema import PROBE_PHASE
from tts_knee.runformat.summary import (
    BaselineLevel,
    Comparison,
    Regression,
    RegressionStep,
    StepSummary,
    Summary,
    SummaryRun,
)

from . import speech as speech_mod
from .confidence import compare_percentile, compare_proportions, compare_rates

ALPHA = 0.05
TOLERANCE = 0.10
ERROR_RATE_STEP = 0.01
#: The share of a run's requests whose audio failed one check (silent, runaway, integrity) above
#: which it is refused as a baseline or a candidate.
AUDIO_FAILED_SHARE = 0.02
Listened = Literal["mos_mean", "similarity_ref_mean"]
#: listening figures compared by text (the per-clip key, the margin a drop must pass to regress)
_LISTENED: dict[Listened, tuple[str, float]] = {
    "mos_mean": ("mos", speech_mod.MIN_MOS_DROP),
    "similarity_ref_mean": ("similarity_ref", speech_mod.MIN_SIMILARITY_DROP),
}
# run.json options that change what a step measures (not where files go or which steps ran)
COMPARED_OPTIONS = (
    "tts_api",
    "tts_path",
    "tts_model",
    "tts_voice",
    "tts_format",
    "tts_stream",
    "tts_stream_format",
    "playback_buffer_ms",
    "step_time",
    "step_requests",
    "settle_time",
    "split_max_chars",
    "retry_max_attempts",
    "retry_base_ms",
    "retry_max_ms",
    "retry_on",
    "retry_after_cap",
    "request_timeout",
    "arrival",
    "max_inflight",
)


class _Offered(TypedDict, total=False):
    """An open-loop level's offered rate, as a compared level names it."""

    rate: float


class _Heard(TypedDict, total=False):
    """The listening figures of a compared level, where both runs listened."""

    mos_mean: Comparison | None
    similarity_ref_mean: Comparison | None


def _values(run: RunDir, level: StepSummary, col: str) -> np.ndarray:
    """``col`` of the level's successful settled final attempts (empty when not recorded): the
    attempts the level's own figures count, so TTFA, and in a streamed run every latency, leave
    out the streams cut by their step's end (``analysis.steps``; the summary marks them)."""
    attempts = run.requests.attempts()
    if col not in attempts.cols:
        return np.empty(0)
    in_level = np.isin(attempts["step"], level["steps"]) & attempts["settled"] & attempts["final"] & attempts["ok"]
    cut = attempts.cols.get("cut_by_step_end")
    if cut is not None and (col == "ttfa_ms" or run.streamed()):
        in_level &= ~cut
    values: np.ndarray = attempts[col][in_level]
    return values


def _latency(old: np.ndarray, new: np.ndarray, percentile: int, tol: float) -> Comparison | None:
    change = compare_percentile(old, new, percentile)
    if change is None:
        return None
    sig = change["p_value"] < ALPHA
    return {
        **change,
        "change": change["ratio"] - 1,
        "significant": sig,
        "regression": sig and change["ratio"] > 1 + tol,
        "improvement": sig and change["ratio"] < 1 - tol,
    }


def _heard(entries: list[dict[str, Any]], level: StepSummary) -> list[dict[str, Any]]:
    step = level.get("step")
    steps = set(level.get("steps") or ([step] if step is not None else []))
    return [entry for entry in entries if entry.get("step") in steps]


def _listened(old: list[dict[str, Any]], new: list[dict[str, Any]], figure: Listened) -> Comparison | None:
    """The listened ``mos_mean`` or ``similarity_ref_mean`` of a level against the baseline's,
    paired by text (the same corpus): significant when the 95 % bootstrap interval of the paired
    change leaves out 0, a regression when its low end drops past the knee's margin for it (0.3
    MOS, 0.2 of similarity: what a listener hears), not a tolerance share."""
    key, margin = _LISTENED[figure]
    drop = speech_mod.paired_rise(new, old, key)  # baseline - this run: a drop
    if drop is None:
        return None
    lower, upper = drop["ci"]
    old_mean = float(np.mean([score for entry in old if isinstance(score := entry.get(key), (int, float))]))
    new_mean = float(np.mean([score for entry in new if isinstance(score := entry.get(key), (int, float))]))
    return {
        "old": round(old_mean, 4),
        "new": round(new_mean, 4),
        "change": round(-drop["mean"], 4),
        "p_value": None,
        "method": f"paired by text over {drop['pairs']} texts, 95 % bootstrap interval of the drop "
        f"[{lower:.3f}, {upper:.3f}]",
        "significant": lower > 0 or upper < 0,
        "regression": lower > margin,
        "improvement": upper < -margin,
    }


def _throughput(old: StepSummary, new: StepSummary, tol: float) -> Comparison | None:
    old_window, new_window = old.get("window"), new.get("window")
    change = compare_rates(
        (old_window.get("ok_completions") if old_window else None) or 0,
        (old_window.get("duration_s") if old_window else None) or 0,
        (new_window.get("ok_completions") if new_window else None) or 0,
        (new_window.get("duration_s") if new_window else None) or 0,
    )
    if change is None:
        return None
    sig = change["p_value"] < ALPHA
    return {
        **change,
        "change": change["ratio"] - 1,
        "significant": sig,
        "regression": sig and change["ratio"] < 1 - tol,
        "improvement": sig and change["ratio"] > 1 + tol,
    }


def _errors(old: StepSummary, new: StepSummary, tol: float) -> Comparison | None:
    change = compare_proportions(
        old.get("failed") or 0, old.get("requests") or 0, new.get("failed") or 0, new.get("requests") or 0
    )
    if change is None:
        return None
    sig = change["p_value"] < ALPHA
    allowed = max(ERROR_RATE_STEP, tol * change["old"])
    return {
        **change,
        "significant": sig,
        "regression": sig and change["change"] > allowed,
        "improvement": sig and -change["change"] > allowed,
    }


def _options_sentence(new_options: dict[str, Any], old_options: dict[str, Any]) -> str | None:
    diff = [
        f"{option} {old_options.get(option)!r} -> {new_options.get(option)!r}"
        for option in COMPARED_OPTIONS
        if (option in new_options or option in old_options) and new_options.get(option) != old_options.get(option)
    ]
    if not diff:
        return None
    return f"The runs' options differ ({'; '.join(diff)}), so the figures may not be like for like."


def _corpus_sentence(
    new_options: dict[str, Any],
    old_options: dict[str, Any],
    new_provenance: dict[str, Any],
    old_provenance: dict[str, Any],
    new_rd: RunDir,
    old_rd: RunDir,
) -> str | None:
    corpus = []
    hashes = new_provenance.get("corpus_sha256"), old_provenance.get("corpus_sha256")
    if all(hashes) and hashes[0] != hashes[1]:
        corpus.append(
            f"sha256 {str(hashes[1])[:12]} ({old_provenance.get('corpus')}) -> "
            f"{str(hashes[0])[:12]} ({new_provenance.get('corpus')})"
        )
    elif (
        not all(hashes)
        and new_options.get("texts")
        and old_options.get("texts")
        and Path(str(new_options["texts"])).name
        != Path(str(old_options["texts"])).name  # the same file elsewhere is fine
    ):
        corpus.append(f"texts {old_options['texts']!r} -> {new_options['texts']!r}")
    if new_options.get("texts_count") != old_options.get("texts_count") and (
        "texts_count" in new_options or "texts_count" in old_options
    ):
        corpus.append(f"texts_count {old_options.get('texts_count')!r} -> {new_options.get('texts_count')!r}")
    new_texts, old_texts = set(new_rd.requests.attempts().texts), set(old_rd.requests.attempts().texts)
    sent = (
        f"{len(new_texts - old_texts)} text ids only in this run, {len(old_texts - new_texts)} only in the baseline"
        if new_texts != old_texts
        else None
    )
    if all(hashes) and hashes[0] == hashes[1] and not corpus:
        return f"The runs sent different texts of the same corpus ({sent})." if sent else None
    corpus += [sent] if sent else []
    if not corpus:
        return None
    return f"The corpus differs from the baseline's ({'; '.join(corpus)})."


def _changed(new: dict[str, Any], old: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> list[str]:
    """``name old -> new`` for each of ``keys`` (key, name) whose values differ."""
    return [f"{name} {old.get(key)!r} -> {new.get(key)!r}" for key, name in keys if old.get(key) != new.get(key)]


_TOOL = (("tts_knee", "tts-knee"), ("commit", "commit"), ("python", "Python"), ("locust", "Locust"))
_HOST = (("cpu_model", "CPU"), ("cpu_cores", "cores"), ("memory_bytes", "memory bytes"), ("os", "OS"))
_SERVER = (("server", "Server header"), ("http_version", "HTTP version"), ("model", "model"))


def _provenance_sentences(
    new_provenance: dict[str, Any],
    old_provenance: dict[str, Any],
    new_options: dict[str, Any],
    old_options: dict[str, Any],
) -> list[str]:
    """The differences in what made the runs beside the corpus; [] unless both recorded it (a run
    from before ``provenance`` has nothing to compare)."""
    if not new_provenance or not old_provenance:
        return []
    out = []
    tool = _changed(new_provenance, old_provenance, _TOOL)
    if tool:
        out.append(f"The runs were made by different software ({'; '.join(tool)}).")
    host = _changed(_object(new_provenance.get("host")), _object(old_provenance.get("host")), _HOST)
    if host:
        out.append(f"The load host differs ({'; '.join(host)}).")
    server = _changed(_object(new_provenance.get("server")), _object(old_provenance.get("server")), _SERVER)
    if server:
        out.append(f"The server says something else of itself ({'; '.join(server)}).")
    digests = new_provenance.get("options_sha256"), old_provenance.get("options_sha256")
    if all(digests) and digests[0] != digests[1]:
        keys = sorted(
            option
            for option in new_options.keys() | old_options.keys()
            if new_options.get(option) != old_options.get(option) and option not in UNDIGESTED_OPTIONS
        )
        out.append(
            f"The options' digests differ ({str(digests[1])[:12]} -> {str(digests[0])[:12]}: "
            f"{', '.join(keys) or 'options not recorded alike'})."
        )
    return out


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def differences(new_run: SummaryRun, old_run: SummaryRun, new_rd: RunDir, old_rd: RunDir) -> list[str]:
    """Each difference in what made the two runs (their summaries' ``run``: run.json's options
    and provenance), one sentence each, the corpus first; [] when they were made alike."""
    new_options, old_options = _object(new_run.get("options")), _object(old_run.get("options"))
    new_provenance, old_provenance = _object(new_run.get("provenance")), _object(old_run.get("provenance"))
    first = [
        _corpus_sentence(new_options, old_options, new_provenance, old_provenance, new_rd, old_rd),
        _options_sentence(new_options, old_options),
    ]
    return [sentence for sentence in first if sentence] + _provenance_sentences(
        new_provenance, old_provenance, new_options, old_options
    )


def audio_refusal(summary: Summary, which: str) -> str | None:
    """Why ``summary``'s run (``which``: how to name it, "the baseline runs/old") is refused
    for comparison, one sentence: its audio failed a check for more than
    :data:`AUDIO_FAILED_SHARE` of its requests; None when it passes."""
    steps = [step for step in summary.get("steps") or [] if step.get("phase") != PROBE_PHASE]
    requests = sum(step.get("requests") or 0 for step in steps)
    checked = sum((step.get("integrity") or {}).get("checked") or 0 for step in steps)
    failed = {
        "came back silent": (
            sum((step.get("silent_rate") or 0) * (step.get("requests") or 0) for step in steps),
            requests,
        ),
        "ran away (audio per character over 3x the run's median)": (
            sum((step.get("runaway_rate") or 0) * (step.get("requests") or 0) for step in steps),
            requests,
        ),
        "had audio of another length than the same text's at the lowest step": (
            sum((step.get("integrity") or {}).get("mismatched") or 0 for step in steps),
            checked,
        ),
    }
    for what, (bad, out_of) in failed.items():
        if out_of and bad / out_of > AUDIO_FAILED_SHARE:
            return (
                f"--baseline refuses {which}: {bad / out_of:.1%} of its requests {what}, over the "
                f"{AUDIO_FAILED_SHARE:.0%} a comparison allows; --baseline-anyway compares all the same."
            )
    return None


def _baseline_curve(summary: Summary, open_loop: bool) -> list[BaselineLevel]:
    out: list[BaselineLevel] = []
    for level in summary.get("levels") or []:
        lat = level.get("sched_wait_ms") if open_loop else level.get("latency_ms")
        offered: _Offered = {"rate": level["rate"]} if open_loop else {}
        out.append(
            {
                "concurrency": level["concurrency"],
                **offered,
                "p50_ms": lat.get("p50") if lat else None,
                "p95_ms": lat.get("p95") if lat else None,
                "p95_ci": lat.get("p95_ci") if lat else None,
                "throughput_rps": level.get("throughput_rps"),
                "error_rate": level.get("error_rate"),
            }
        )
    return out


def _pct(share: float | None) -> str:
    assert share is not None, "a regressed latency or throughput has its change"
    return f"{share:+.0%}"


def level_sentence(label: str, row: RegressionStep) -> str:
    """What regressed at level ``label`` (a row of ``regression.steps``), its figures and p-values."""
    parts = []
    for change, name in ((row["p50_ms"], "p50"), (row["p95_ms"], "p95"), (row["ttfa_p95_ms"], "TTFA p95")):
        if change and change["regression"]:
            parts.append(
                f"{name} {change['old']:.0f} -> {change['new']:.0f} ms "
                f"({_pct(change['change'])}, p={change['p_value']:.3g})"
            )
    change = row["throughput_rps"]
    if change and change["regression"]:
        parts.append(
            f"throughput {change['old']:.2f} -> {change['new']:.2f} req/s "
            f"({_pct(change['change'])}, p={change['p_value']:.3g})"
        )
    change = row["error_rate"]
    if change and change["regression"]:
        parts.append(f"errors {change['old']:.1%} -> {change['new']:.1%} (p={change['p_value']:.3g})")
    for change, name in (
        (row.get("mos_mean"), "naturalness (DNSMOS OVRL)"),
        (row.get("similarity_ref_mean"), "similarity to the reference"),
    ):
        if change and change["regression"]:
            parts.append(f"{name} {change['old']:.2f} -> {change['new']:.2f} ({change.get('method')})")
    return f"at {label}: " + ", ".join(parts)


def compare(
    new_rd: RunDir, new_sum: Summary, old_rd: RunDir, old_sum: Summary, tolerance: float = TOLERANCE
) -> Regression:
    """``summary.json`` ``regression`` of this run against the baseline (see the module doc);
    raises :class:`RunDirError` when one ran open loop and the other did not."""
    modes = new_sum["run"]["mode"], old_sum["run"]["mode"]
    if modes[0] != modes[1]:
        raise RunDirError(
            f"--baseline compares runs that offered load the same way: this run ran {modes[0]} loop, "
            f"the baseline {modes[1]} loop."
        )
    open_loop = modes[0] == "open"
    key: Literal["rate", "concurrency"] = "rate" if open_loop else "concurrency"
    wait = "sched_wait_ms" if open_loop else "wait_ms"
    name = (lambda rate: f"{rate:g} req/s") if open_loop else str
    old_levels = {level[key]: level for level in old_sum.get("levels") or []}
    old_heard, new_heard = speech_mod.read(old_rd.path), speech_mod.read(new_rd.path)
    rows: list[RegressionStep] = []
    for level in new_sum.get("levels") or []:
        level_value = level[key]
        if level_value not in old_levels:
            continue
        old_level = old_levels[level_value]
        old_waits, new_waits = _values(old_rd, old_level, wait), _values(new_rd, level, wait)
        old_ttfa, new_ttfa = _values(old_rd, old_level, "ttfa_ms"), _values(new_rd, level, "ttfa_ms")
        offered: _Offered = {"rate": level_value} if open_loop else {}
        measured = (
            _latency(old_waits, new_waits, 50, tolerance),
            _latency(old_waits, new_waits, 95, tolerance),
            _latency(old_ttfa, new_ttfa, 95, tolerance),
            _throughput(old_level, level, tolerance),
            _errors(old_level, level, tolerance),
        )
        heard: _Heard = {}
        for figure in _LISTENED:
            change = _listened(_heard(old_heard, old_level), _heard(new_heard, level), figure)
            if change is not None:
                heard[figure] = change
        figs = [
            compared for compared in (*measured, heard.get("mos_mean"), heard.get("similarity_ref_mean")) if compared
        ]
        regression = any(compared["regression"] for compared in figs)
        rows.append(
            {
                "concurrency": level["concurrency"],
                **offered,
                "requests": [old_level.get("requests"), level.get("requests")],
                "p50_ms": measured[0],
                "p95_ms": measured[1],
                "ttfa_p95_ms": measured[2],
                "throughput_rps": measured[3],
                "error_rate": measured[4],
                **heard,
                "regression": regression,
                "improvement": any(compared["improvement"] for compared in figs) and not regression,
            }
        )
    regressed = [row[key] for row in rows if row["regression"]]
    base = old_sum["run"]["run_id"]
    noun = "offered rate" if open_loop else "concurrency"
    if not rows:
        verdict = (
            f"This run and the baseline {base} share no tested {noun} (this run: "
            f"{', '.join(name(new_level[key]) for new_level in new_sum.get('levels') or []) or 'none'}; "
            f"baseline: {', '.join(map(name, old_levels)) or 'none'}), so nothing can be compared."
        )
    elif regressed:
        verdict = (
            f"Regression against {base} beyond the {tolerance:.0%} tolerance "
            + "; ".join(level_sentence(name(row[key]), row) for row in rows if row["regression"])
            + "."
        )
    else:
        better = [name(row[key]) for row in rows if row["improvement"]]
        verdict = (
            f"No significant regression beyond the {tolerance:.0%} tolerance against {base} at "
            f"{', '.join(name(row[key]) for row in rows)}"
            + (f"; significantly better at {', '.join(better)}." if better else ".")
        )
    return {
        "baseline": {"run_id": base, "path": old_sum["run"]["path"], "levels": _baseline_curve(old_sum, open_loop)},
        "tolerance": tolerance,
        "alpha": ALPHA,
        "steps": rows,
        "regressed": regressed,
        "compared": [row[key] for row in rows],
        "warnings": differences(new_sum["run"], old_sum["run"], new_rd, old_rd),
        "verdict": verdict,
    }
