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


def _values(rd: RunDir, level: StepSummary, col: str) -> np.ndarray:
    """``col`` of the level's successful settled final attempts (empty when not recorded): the
    attempts the level's own figures count, so TTFA, and in a streamed run every latency, leave
    out the streams cut by their step's end (``analysis.steps``; the summary marks them)."""
    a = rd.requests.attempts()
    if col not in a.cols:
        return np.empty(0)
    m = np.isin(a["step"], level["steps"]) & a["settled"] & a["final"] & a["ok"]
    cut = a.cols.get("cut_by_step_end")
    if cut is not None and (col == "ttfa_ms" or rd.streamed()):
        m &= ~cut
    values: np.ndarray = a[col][m]
    return values


def _latency(old: np.ndarray, new: np.ndarray, q: int, tol: float) -> Comparison | None:
    c = compare_percentile(old, new, q)
    if c is None:
        return None
    sig = c["p_value"] < ALPHA
    return {
        **c,
        "change": c["ratio"] - 1,
        "significant": sig,
        "regression": sig and c["ratio"] > 1 + tol,
        "improvement": sig and c["ratio"] < 1 - tol,
    }


def _heard(entries: list[dict[str, Any]], level: StepSummary) -> list[dict[str, Any]]:
    step = level.get("step")
    steps = set(level.get("steps") or ([step] if step is not None else []))
    return [e for e in entries if e.get("step") in steps]


def _listened(old: list[dict[str, Any]], new: list[dict[str, Any]], figure: Listened) -> Comparison | None:
    """The listened ``mos_mean`` or ``similarity_ref_mean`` of a level against the baseline's,
    paired by text (the same corpus): significant when the 95 % bootstrap interval of the paired
    change leaves out 0, a regression when its low end drops past the knee's margin for it (0.3
    MOS, 0.2 of similarity: what a listener hears), not a tolerance share."""
    key, margin = _LISTENED[figure]
    drop = speech_mod.paired_rise(new, old, key)  # baseline - this run: a drop
    if drop is None:
        return None
    lo, hi = drop["ci"]
    old_mean = float(np.mean([v for e in old if isinstance(v := e.get(key), (int, float))]))
    new_mean = float(np.mean([v for e in new if isinstance(v := e.get(key), (int, float))]))
    return {
        "old": round(old_mean, 4),
        "new": round(new_mean, 4),
        "change": round(-drop["mean"], 4),
        "p_value": None,
        "method": f"paired by text over {drop['pairs']} texts, 95 % bootstrap interval of the drop "
        f"[{lo:.3f}, {hi:.3f}]",
        "significant": lo > 0 or hi < 0,
        "regression": lo > margin,
        "improvement": hi < -margin,
    }


def _throughput(old: StepSummary, new: StepSummary, tol: float) -> Comparison | None:
    wo, wn = old.get("window"), new.get("window")
    c = compare_rates(
        (wo.get("ok_completions") if wo else None) or 0,
        (wo.get("duration_s") if wo else None) or 0,
        (wn.get("ok_completions") if wn else None) or 0,
        (wn.get("duration_s") if wn else None) or 0,
    )
    if c is None:
        return None
    sig = c["p_value"] < ALPHA
    return {
        **c,
        "change": c["ratio"] - 1,
        "significant": sig,
        "regression": sig and c["ratio"] < 1 - tol,
        "improvement": sig and c["ratio"] > 1 + tol,
    }


def _errors(old: StepSummary, new: StepSummary, tol: float) -> Comparison | None:
    c = compare_proportions(
        old.get("failed") or 0, old.get("requests") or 0, new.get("failed") or 0, new.get("requests") or 0
    )
    if c is None:
        return None
    sig = c["p_value"] < ALPHA
    allowed = max(ERROR_RATE_STEP, tol * c["old"])
    return {
        **c,
        "significant": sig,
        "regression": sig and c["change"] > allowed,
        "improvement": sig and -c["change"] > allowed,
    }


def _options_sentence(on: dict[str, Any], oo: dict[str, Any]) -> str | None:
    diff = [
        f"{k} {oo.get(k)!r} -> {on.get(k)!r}"
        for k in COMPARED_OPTIONS
        if (k in on or k in oo) and on.get(k) != oo.get(k)
    ]
    if not diff:
        return None
    return f"The runs' options differ ({'; '.join(diff)}), so the figures may not be like for like."


def _corpus_sentence(
    on: dict[str, Any], oo: dict[str, Any], pn: dict[str, Any], po: dict[str, Any], new_rd: RunDir, old_rd: RunDir
) -> str | None:
    corpus = []
    hashes = pn.get("corpus_sha256"), po.get("corpus_sha256")
    if all(hashes) and hashes[0] != hashes[1]:
        corpus.append(
            f"sha256 {str(hashes[1])[:12]} ({po.get('corpus')}) -> {str(hashes[0])[:12]} ({pn.get('corpus')})"
        )
    elif (
        not all(hashes)
        and on.get("texts")
        and oo.get("texts")
        and Path(str(on["texts"])).name != Path(str(oo["texts"])).name  # the same file elsewhere is fine
    ):
        corpus.append(f"texts {oo['texts']!r} -> {on['texts']!r}")
    if on.get("texts_count") != oo.get("texts_count") and ("texts_count" in on or "texts_count" in oo):
        corpus.append(f"texts_count {oo.get('texts_count')!r} -> {on.get('texts_count')!r}")
    tn, to = set(new_rd.requests.attempts().texts), set(old_rd.requests.attempts().texts)
    sent = f"{len(tn - to)} text ids only in this run, {len(to - tn)} only in the baseline" if tn != to else None
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


def _provenance_sentences(pn: dict[str, Any], po: dict[str, Any], on: dict[str, Any], oo: dict[str, Any]) -> list[str]:
    """The differences in what made the runs beside the corpus; [] unless both recorded it (a run
    from before ``provenance`` has nothing to compare)."""
    if not pn or not po:
        return []
    out = []
    tool = _changed(pn, po, _TOOL)
    if tool:
        out.append(f"The runs were made by different software ({'; '.join(tool)}).")
    host = _changed(_object(pn.get("host")), _object(po.get("host")), _HOST)
    if host:
        out.append(f"The load host differs ({'; '.join(host)}).")
    server = _changed(_object(pn.get("server")), _object(po.get("server")), _SERVER)
    if server:
        out.append(f"The server says something else of itself ({'; '.join(server)}).")
    digests = pn.get("options_sha256"), po.get("options_sha256")
    if all(digests) and digests[0] != digests[1]:
        keys = sorted(k for k in on.keys() | oo.keys() if on.get(k) != oo.get(k) and k not in UNDIGESTED_OPTIONS)
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
    on, oo = _object(new_run.get("options")), _object(old_run.get("options"))
    pn, po = _object(new_run.get("provenance")), _object(old_run.get("provenance"))
    first = [_corpus_sentence(on, oo, pn, po, new_rd, old_rd), _options_sentence(on, oo)]
    return [x for x in first if x] + _provenance_sentences(pn, po, on, oo)


def audio_refusal(summary: Summary, which: str) -> str | None:
    """Why ``summary``'s run (``which``: how to name it, "the baseline runs/old") is refused
    for comparison, one sentence: its audio failed a check for more than
    :data:`AUDIO_FAILED_SHARE` of its requests; None when it passes."""
    steps = [st for st in summary.get("steps") or [] if st.get("phase") != PROBE_PHASE]
    requests = sum(st.get("requests") or 0 for st in steps)
    checked = sum((st.get("integrity") or {}).get("checked") or 0 for st in steps)
    failed = {
        "came back silent": (sum((st.get("silent_rate") or 0) * (st.get("requests") or 0) for st in steps), requests),
        "ran away (audio per character over 3x the run's median)": (
            sum((st.get("runaway_rate") or 0) * (st.get("requests") or 0) for st in steps),
            requests,
        ),
        "had audio of another length than the same text's at the lowest step": (
            sum((st.get("integrity") or {}).get("mismatched") or 0 for st in steps),
            checked,
        ),
    }
    for what, (bad, of) in failed.items():
        if of and bad / of > AUDIO_FAILED_SHARE:
            return (
                f"--baseline refuses {which}: {bad / of:.1%} of its requests {what}, over the "
                f"{AUDIO_FAILED_SHARE:.0%} a comparison allows; --baseline-anyway compares all the same."
            )
    return None


def _baseline_curve(s: Summary, open_loop: bool) -> list[BaselineLevel]:
    out: list[BaselineLevel] = []
    for lv in s.get("levels") or []:
        lat = lv.get("sched_wait_ms") if open_loop else lv.get("latency_ms")
        offered: _Offered = {"rate": lv["rate"]} if open_loop else {}
        out.append(
            {
                "concurrency": lv["concurrency"],
                **offered,
                "p50_ms": lat.get("p50") if lat else None,
                "p95_ms": lat.get("p95") if lat else None,
                "p95_ci": lat.get("p95_ci") if lat else None,
                "throughput_rps": lv.get("throughput_rps"),
                "error_rate": lv.get("error_rate"),
            }
        )
    return out


def _pct(x: float | None) -> str:
    assert x is not None, "a regressed latency or throughput has its change"
    return f"{x:+.0%}"


def level_sentence(c: str, row: RegressionStep) -> str:
    """What regressed at level ``c`` (a row of ``regression.steps``), its figures and p-values."""
    parts = []
    for r, name in ((row["p50_ms"], "p50"), (row["p95_ms"], "p95"), (row["ttfa_p95_ms"], "TTFA p95")):
        if r and r["regression"]:
            parts.append(f"{name} {r['old']:.0f} -> {r['new']:.0f} ms ({_pct(r['change'])}, p={r['p_value']:.3g})")
    r = row["throughput_rps"]
    if r and r["regression"]:
        parts.append(f"throughput {r['old']:.2f} -> {r['new']:.2f} req/s ({_pct(r['change'])}, p={r['p_value']:.3g})")
    r = row["error_rate"]
    if r and r["regression"]:
        parts.append(f"errors {r['old']:.1%} -> {r['new']:.1%} (p={r['p_value']:.3g})")
    for r, name in (
        (row.get("mos_mean"), "naturalness (DNSMOS OVRL)"),
        (row.get("similarity_ref_mean"), "similarity to the reference"),
    ):
        if r and r["regression"]:
            parts.append(f"{name} {r['old']:.2f} -> {r['new']:.2f} ({r.get('method')})")
    return f"at {c}: " + ", ".join(parts)


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
    name = (lambda v: f"{v:g} req/s") if open_loop else str
    old_levels = {lv[key]: lv for lv in old_sum.get("levels") or []}
    old_heard, new_heard = speech_mod.read(old_rd.path), speech_mod.read(new_rd.path)
    rows: list[RegressionStep] = []
    for lv in new_sum.get("levels") or []:
        c = lv[key]
        if c not in old_levels:
            continue
        ol = old_levels[c]
        wo, wn = _values(old_rd, ol, wait), _values(new_rd, lv, wait)
        to, tn = _values(old_rd, ol, "ttfa_ms"), _values(new_rd, lv, "ttfa_ms")
        offered: _Offered = {"rate": c} if open_loop else {}
        measured = (
            _latency(wo, wn, 50, tolerance),
            _latency(wo, wn, 95, tolerance),
            _latency(to, tn, 95, tolerance),
            _throughput(ol, lv, tolerance),
            _errors(ol, lv, tolerance),
        )
        heard: _Heard = {}
        for figure in _LISTENED:
            change = _listened(_heard(old_heard, ol), _heard(new_heard, lv), figure)
            if change is not None:
                heard[figure] = change
        figs = [f for f in (*measured, heard.get("mos_mean"), heard.get("similarity_ref_mean")) if f]
        regression = any(f["regression"] for f in figs)
        rows.append(
            {
                "concurrency": lv["concurrency"],
                **offered,
                "requests": [ol.get("requests"), lv.get("requests")],
                "p50_ms": measured[0],
                "p95_ms": measured[1],
                "ttfa_p95_ms": measured[2],
                "throughput_rps": measured[3],
                "error_rate": measured[4],
                **heard,
                "regression": regression,
                "improvement": any(f["improvement"] for f in figs) and not regression,
            }
        )
    regressed = [r[key] for r in rows if r["regression"]]
    base = old_sum["run"]["run_id"]
    noun = "offered rate" if open_loop else "concurrency"
    if not rows:
        verdict = (
            f"This run and the baseline {base} share no tested {noun} (this run: "
            f"{', '.join(name(x[key]) for x in new_sum.get('levels') or []) or 'none'}; "
            f"baseline: {', '.join(map(name, old_levels)) or 'none'}), so nothing can be compared."
        )
    elif regressed:
        verdict = (
            f"Regression against {base} beyond the {tolerance:.0%} tolerance "
            + "; ".join(level_sentence(name(r[key]), r) for r in rows if r["regression"])
            + "."
        )
    else:
        better = [name(r[key]) for r in rows if r["improvement"]]
        verdict = (
            f"No significant regression beyond the {tolerance:.0%} tolerance against {base} at "
            f"{', '.join(name(r[key]) for r in rows)}"
            + (f"; significantly better at {', '.join(better)}." if better else ".")
        )
    return {
        "baseline": {"run_id": base, "path": old_sum["run"]["path"], "levels": _baseline_curve(old_sum, open_loop)},
        "tolerance": tolerance,
        "alpha": ALPHA,
        "steps": rows,
        "regressed": regressed,
        "compared": [r[key] for r in rows],
        "warnings": differences(new_sum["run"], old_sum["run"], new_rd, old_rd),
        "verdict": verdict,
    }
