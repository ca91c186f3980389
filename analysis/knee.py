"""Find the knee, check Little's law, fit the Universal Scalability Law.

**The knee** of a run whose responses were read whole is the lowest tested concurrency at which
either

- latency rises notably: the step's p50 or p95 of wait or of end-to-end latency is more than
  ``LATENCY_RISE`` (1.5x) the lowest step's, and stays so at every higher step (a one-step
  spike is noise, not a knee); or
- the server starts failing: at least ``FAILURE_RATE`` (5%) of the step's attempts fail
  (429/503 throttling included) and at least that much more than at the lowest step.

A 10% wiggle never crosses 1.5x.  These two rules are the ``latency_vs_lowest`` and
``failures`` methods; the knee is the lower of their answers.  Cross-checks, reported in
``methods`` and listed in ``agree`` when they name the same step:

- ``latency_vs_previous``: the first step whose latency grew by more than 1.5x per doubling of
  concurrency (``1.5 ** log2(N_i / N_{i-1})``) over the previous step;
- ``throughput_efficiency``: the first step whose relative throughput gain is less than
  ``EFFICIENCY_MIN`` (0.5) of its relative concurrency gain;
- ``kneedle``: Kneedle on the latency inflation curve over log2(concurrency); Kneedle names the
  elbow (the last flat point), so the step after it is reported;
- ``piecewise``: the best two-segment linear fit of the inflation curve; the first step on the
  steeper segment.

**In a streamed run** the knee follows what a listener hears, not whole-body time: it is the
lowest tested concurrency at which

- ``underruns``: at least ``UNDERRUN_RATE`` (5%) of the step's successful streams ran dry
  (``underrun_rate``); or
- ``failures``: as above; or
- ``ttfa_vs_lowest``: the step's TTFA p95 is more than ``LATENCY_RISE`` (1.5x) the lowest step's
  *and* above the absolute floor (``ttfa_floor_ms``, ``--ttfa-floor-ms``, default 300 ms), and
  both stay so at every higher step: 140 -> 260 ms is still instant to a listener, 400 -> 700 ms
  is not.

Wait and end-to-end time rising while every stream stays ahead of playback is no knee.  The
cross-checks then run on TTFA: the inflation curve (``inflation_basis`` "ttfa") is the larger
of the TTFA p50 and p95 ratios to the lowest step's, ``latency_vs_previous`` compares TTFA p50 and
p95 with the previous step's; ``latency_vs_lowest`` is still reported on whole-body time, to show
what the rule for whole responses would have said, but does not set the knee.  A streamed run
in which no step has a TTFA or underrun figure (a client that did not time the stream) cannot
be judged that way: it is judged on whole-body time as above, with ``untimed_stream`` set so
the verdict can say so.

**What the listener gets** (method ``signal``, a rule in every run, judge or no judge): the
lowest level at which answers whose audio went wrong rose with load, and stayed so at every
higher level: runaways (``runaway_rate``) or truncated answers (``truncated_rate``), each judged
against its own text's length (:func:`analysis.steps.length_flags`), at least ``SIGNAL_RISE``
(5 points) above the lowest level's share and at least ``SIGNAL_MIN_ANSWERS`` (2) answers; or
length mismatches (``integrity.rate``, more than 15 % off the same text's length) at least
``MISMATCH_RISE`` (25 points) above the lowest level's. A runaway or cut-short answer is a
failed request the server counted as a success, so it breaks a level by the failure rule's
margin; two answers at least, so that one odd answer in a short step is no trend. The mismatch
share's margin is wider: at the lowest level every text is measured against its own median
there, so that level's share is low by construction, and an engine whose lengths vary from call
to call by about the 15 % tolerance can read 10 to 20 points more at the next level with no load
effect at all. ``signal_first``: the signal knee came before every latency and failure knee
(the diagnosis is then ``speech_degraded``, naming the share that rose).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from tts_knee.runformat.reader import TTFA_FLOOR_MS
from tts_knee.runformat.summary import Knee, KneeMethods, LittleLaw, StepSummary, Usl

LATENCY_RISE = 1.5
STEP_RISE = 1.5
EFFICIENCY_MIN = 0.5
FAILURE_RATE = 0.05
UNDERRUN_RATE = 0.05
LITTLE_TOLERANCE = 0.25
_METRICS = (("latency_ms", "p50"), ("latency_ms", "p95"), ("e2e_ms", "p50"), ("e2e_ms", "p95"))
_TTFA = (("ttfa_ms", "p50"), ("ttfa_ms", "p95"))
#: A runaway or truncated share this much above the lowest level's breaks a level (``signal``) ...
SIGNAL_RISE = FAILURE_RATE
#: ... a length-mismatch share this much above it (see the module doc) ...
MISMATCH_RISE = 0.25
#: ... with at least this many such answers at that level.
SIGNAL_MIN_ANSWERS = 2
#: The shares the ``signal`` method watches: (key, what they are, the rise that breaks a level).
SIGNAL_SHARES: tuple[tuple[str, str, float], ...] = (
    ("runaway_rate", "runaways", SIGNAL_RISE),
    ("truncated_rate", "truncated answers", SIGNAL_RISE),
    ("integrity", "length mismatches", MISMATCH_RISE),
)
#: Leading silence (p95) this much longer than at the lowest step is the server answering early
#: with silence (ms), not a voice's own pause before its first word.
SILENCE_RISE_MS = 200.0


def _value(step: Mapping[str, Any], key: str, stat: str) -> float | None:
    dist: Mapping[str, float | None] | None = step.get(key)
    return dist.get(stat) if dist else None


def inflation(steps: list[StepSummary], metrics: tuple[tuple[str, str], ...] = _METRICS) -> list[float | None]:
    """Per step, the largest ratio of its latency metrics to the lowest step's (None if unknown)."""
    base = steps[0]
    out: list[float | None] = []
    for step in steps:
        worst: float | None = None
        for key, stat in metrics:
            value, base_value = _value(step, key, stat), _value(base, key, stat)
            if value is not None and base_value:
                worst = max(worst or 0.0, value / base_value)
        if worst is None and not step.get("ok") and step.get("requests"):
            worst = math.inf  # nothing succeeded: as bad as latency gets
        out.append(worst)
    return out


def _latency_vs_lowest(steps: list[StepSummary], infl: list[float | None]) -> int | None:
    for i in range(1, len(steps)):
        rise = infl[i]
        if (
            rise is not None
            and rise > LATENCY_RISE
            and all(later is None or later > LATENCY_RISE for later in infl[i + 1 :])
        ):
            return i
    return None


def _failures(steps: list[StepSummary]) -> int | None:
    base = steps[0].get("attempt_failure_rate") or 0.0
    for i, step in enumerate(steps):
        rate = step.get("attempt_failure_rate")
        if rate is not None and rate >= FAILURE_RATE and (i == 0 or rate - base >= FAILURE_RATE):
            return i
    return None


def _underruns(steps: list[StepSummary]) -> int | None:
    for i, step in enumerate(steps):
        rate = step.get("underrun_rate")
        if rate is not None and rate >= UNDERRUN_RATE:
            return i
    return None


def ttfa_basis(steps: list[StepSummary]) -> str:
    """What the TTFA rule judges: ``ttfa_audible_ms`` (when the listener hears the first sound,
    leading silence played out) where every step with successful requests has it, else
    ``ttfa_ms`` (the first audio sample): a server that answers early with silence is no faster
    for its listener."""
    done = [step for step in steps if step.get("ok")]
    return (
        "ttfa_audible_ms"
        if done and all(_value(step, "ttfa_audible_ms", "p95") is not None for step in done)
        else "ttfa_ms"
    )


def _ttfa_vs_lowest(steps: list[StepSummary], floor_ms: float, key: str = "ttfa_ms") -> int | None:
    base = _value(steps[0], key, "p95")
    if not base:
        return None

    def high(step: StepSummary) -> bool | None:
        p95 = _value(step, key, "p95")
        if p95 is None:
            return None if step.get("ok") or not step.get("requests") else True  # nothing succeeded
        return p95 > LATENCY_RISE * base and p95 > floor_ms

    for i in range(1, len(steps)):
        if high(steps[i]) and all(is_high is None or is_high for is_high in map(high, steps[i + 1 :])):
            return i
    return None


def _latency_vs_previous(steps: list[StepSummary], metrics: tuple[tuple[str, str], ...] = _METRICS) -> int | None:
    for i in range(1, len(steps)):
        prev, cur = steps[i - 1], steps[i]
        allowed = STEP_RISE ** math.log2(cur["concurrency"] / prev["concurrency"])
        for key, stat in metrics:
            value, prev_value = _value(cur, key, stat), _value(prev, key, stat)
            if value is not None and prev_value and value / prev_value > allowed:
                return i
    return None


def efficiencies(steps: list[StepSummary]) -> list[float | None]:
    """Relative throughput gain / relative concurrency gain against the previous step."""
    out: list[float | None] = [None]
    for prev, cur in zip(steps, steps[1:]):
        prev_rps, cur_rps = prev.get("throughput_rps"), cur.get("throughput_rps")
        gain_n = cur["concurrency"] / prev["concurrency"] - 1
        out.append((cur_rps / prev_rps - 1) / gain_n if prev_rps and cur_rps is not None and gain_n > 0 else None)
    return out


def _throughput_efficiency(steps: list[StepSummary]) -> int | None:
    for i, efficiency in enumerate(efficiencies(steps)):
        if efficiency is not None and efficiency < EFFICIENCY_MIN:
            return i
    return None


def _curve(steps: list[StepSummary], infl: list[float | None]) -> tuple[list[int], list[float]]:
    pts = [
        (step["concurrency"], ratio) for step, ratio in zip(steps, infl) if ratio is not None and math.isfinite(ratio)
    ]
    return [point[0] for point in pts], [point[1] for point in pts]


def _kneedle(steps: list[StepSummary], infl: list[float | None]) -> int | None:
    concurrencies, ratios = _curve(steps, infl)
    if len(concurrencies) < 3 or max(ratios) <= LATENCY_RISE:
        return None
    log_n = np.log2(concurrencies)
    log_n_scaled = (log_n - log_n[0]) / (log_n[-1] - log_n[0])
    ratio_array = np.asarray(ratios)
    ratio_scaled = (ratio_array - ratio_array.min()) / (ratio_array.max() - ratio_array.min())
    diff = log_n_scaled - ratio_scaled
    bend = int(np.argmax(diff))
    if diff[bend] <= 0 or bend + 1 >= len(concurrencies):
        return None
    return [step["concurrency"] for step in steps].index(concurrencies[bend + 1])


def _line_sse(positions: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    if len(positions) < 2:
        return 0.0, 0.0
    slope, icpt = np.polyfit(positions, values, 1)
    return float(slope), float(((np.polyval([slope, icpt], positions) - values) ** 2).sum())


def _piecewise(steps: list[StepSummary], infl: list[float | None]) -> int | None:
    concurrencies, ratios = _curve(steps, infl)
    if len(concurrencies) < 4 or max(ratios) <= LATENCY_RISE:
        return None
    positions, values = np.asarray(concurrencies, float), np.asarray(ratios, float)
    best = None
    for split in range(1, len(positions) - 2 + 1):
        left_slope, left_sse = _line_sse(positions[: split + 1], values[: split + 1])
        right_slope, right_sse = _line_sse(positions[split:], values[split:])
        if right_slope > max(left_slope, 0) * 1.5 + 1e-9 and (best is None or left_sse + right_sse < best[0] - 1e-12):
            best = (left_sse + right_sse, split)
    if best is None or best[1] + 1 >= len(concurrencies):
        return None
    return [step["concurrency"] for step in steps].index(concurrencies[best[1] + 1])


def signal_share(step: Mapping[str, Any], key: str) -> tuple[float | None, int]:
    """One of :data:`SIGNAL_SHARES` at a level: (its share or None, how many answers it counts)."""
    if key == "integrity":
        integrity = step.get("integrity") or {}
        return integrity.get("rate"), int(integrity.get("mismatched") or 0)
    rate, requests = step.get(key), step.get("requests") or 0
    return rate, (round(rate * requests) if rate is not None else 0)


def signal_rise(steps: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    """``(index, key)``: the first level at which one of :data:`SIGNAL_SHARES` rose (see the
    module doc) and that share's key; the earliest over the shares (the first listed on a tie);
    None where none rose."""
    best: tuple[int, str] | None = None
    for key, _, margin in SIGNAL_SHARES:
        base = signal_share(steps[0], key)[0] or 0.0 if steps else 0.0

        def high(level: Mapping[str, Any]) -> bool | None:  # called in this iteration only
            rate = signal_share(level, key)[0]  # noqa: B023
            return None if rate is None else rate >= base + margin  # noqa: B023

        for i in range(1, len(steps)):
            if (
                high(steps[i])
                and signal_share(steps[i], key)[1] >= SIGNAL_MIN_ANSWERS
                and all(is_high is None or is_high for is_high in map(high, steps[i + 1 :]))
            ):
                if best is None or i < best[0]:
                    best = (i, key)
                break
    return best


def _signal(steps: list[StepSummary]) -> int | None:
    rise = signal_rise(steps)
    return None if rise is None else rise[0]


def signal_first(idx: dict[str, int | None], rules: tuple[str, ...] | list[str]) -> bool:
    """Whether the ``signal`` method set the knee before every other rule did."""
    signal_index = idx.get("signal")
    return signal_index is not None and all(
        (rule_index := idx.get(rule)) is None or rule_index > signal_index
        for rule in rules
        if rule not in ("signal", "speech")
    )


_STREAM_METHODS = (
    "underruns",
    "failures",
    "ttfa_vs_lowest",
    "signal",
    "latency_vs_lowest",
    "latency_vs_previous",
    "throughput_efficiency",
    "kneedle",
    "piecewise",
)
_WHOLE_METHODS = (
    "latency_vs_lowest",
    "failures",
    "signal",
    "latency_vs_previous",
    "throughput_efficiency",
    "kneedle",
    "piecewise",
)


def find_knee(steps: list[StepSummary], streamed: bool = False, ttfa_floor_ms: float = TTFA_FLOOR_MS) -> Knee:
    """``{"concurrency", "index", "methods", "agree", "inflation", "inflation_basis",
    "efficiency", "streamed", "ttfa_floor_ms", "rules", "untimed_stream"}`` (see module doc);
    ``streamed`` says whether the knee was judged on playback, ``rules`` names the methods that
    set the knee, ``signal_first`` whether the ``signal`` method set it before the others."""
    steps = [step for step in steps if step.get("requests")]
    untimed = (
        streamed
        and bool(steps)
        and not any(
            _value(step, "ttfa_ms", "p95") is not None or step.get("underrun_rate") is not None for step in steps
        )
    )
    streamed = streamed and not untimed
    names = _STREAM_METHODS if streamed else _WHOLE_METHODS
    rules = (
        ("underruns", "failures", "ttfa_vs_lowest", "signal")
        if streamed
        else ("latency_vs_lowest", "failures", "signal")
    )
    basis = "ttfa" if streamed else "latency"
    empty: Knee = {
        "concurrency": None,
        "index": None,
        "methods": cast(KneeMethods, dict.fromkeys(names)),
        "agree": [],
        "inflation": [],
        "inflation_basis": basis,
        "efficiency": [],
        "streamed": streamed,
        "ttfa_floor_ms": ttfa_floor_ms if streamed else None,
        "rules": list(rules),
        "untimed_stream": untimed,
        "signal_first": False,
    }
    if not steps:
        return empty
    whole = inflation(steps)
    infl = inflation(steps, _TTFA) if streamed else whole
    idx: dict[str, int | None] = {
        "latency_vs_lowest": _latency_vs_lowest(steps, whole),
        "failures": _failures(steps),
        "latency_vs_previous": _latency_vs_previous(steps, _TTFA if streamed else _METRICS),
        "throughput_efficiency": _throughput_efficiency(steps),
        "kneedle": _kneedle(steps, infl),
        "piecewise": _piecewise(steps, infl),
        "signal": _signal(steps),
    }
    if streamed:
        idx["underruns"] = _underruns(steps)
        idx["ttfa_vs_lowest"] = _ttfa_vs_lowest(steps, ttfa_floor_ms, ttfa_basis(steps))
    primary = [found_index for found_index in (idx[rule] for rule in rules) if found_index is not None]
    knee_index = min(primary) if primary else None
    # the knee only the first sound heard sets: the audio came as early, but began with silence
    # (leading silence grown by SILENCE_RISE_MS over the lowest step's, not a voice's own pause)
    lead = [_value(step, "leading_silence_ms", "p95") for step in steps]
    silence_first = (
        streamed
        and knee_index is not None
        and ttfa_basis(steps) == "ttfa_audible_ms"
        and idx["ttfa_vs_lowest"] == knee_index
        and all(
            (rule_index := idx[rule]) is None or rule_index > knee_index for rule in rules if rule != "ttfa_vs_lowest"
        )
        and (lambda ttfa_index: ttfa_index is None or ttfa_index > knee_index)(
            _ttfa_vs_lowest(steps, ttfa_floor_ms, "ttfa_ms")
        )
        and (lead_base := lead[0]) is not None
        and (lead_k := lead[knee_index]) is not None
        and lead_k >= lead_base + SILENCE_RISE_MS
    )
    methods = {
        name: (steps[found_index]["concurrency"] if (found_index := idx[name]) is not None else None) for name in names
    }
    knee_c = steps[knee_index]["concurrency"] if knee_index is not None else None
    knee: Knee = {
        **empty,
        "concurrency": knee_c,
        "index": knee_index,
        "methods": cast(KneeMethods, methods),
        "agree": [name for name, named in methods.items() if named is not None and named == knee_c],
        "inflation": [None if rule is None or not math.isfinite(rule) else round(rule, 3) for rule in infl],
        "efficiency": [None if efficiency is None else round(efficiency, 3) for efficiency in efficiencies(steps)],
        "signal_first": signal_first(idx, rules),
    }
    if streamed:
        knee["ttfa_basis"] = ttfa_basis(steps)
        knee["silence_first"] = bool(silence_first)
    return knee


def little_check(steps: list[StepSummary]) -> list[LittleLaw]:
    """Per step: concurrency vs throughput x mean end-to-end latency; ``ok`` false if >25% off."""
    out: list[LittleLaw] = []
    for step in steps:
        lit = step.get("little")
        if not lit:
            continue
        out.append(
            {
                "concurrency": step["concurrency"],
                "effective_concurrency": round(lit["effective_concurrency"], 3),
                "expected_concurrency": round(lit["expected_concurrency"], 3),
                "ratio": round(lit["ratio"], 3),
                "ok": abs(lit["ratio"] - 1) <= LITTLE_TOLERANCE,
            }
        )
    return out


def _nnls2(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares for two non-negative coefficients."""
    best: tuple[float, np.ndarray] | None = None
    for cols in ((0, 1), (0,), (1,)):
        coef = np.zeros(2)
        sol, *_ = np.linalg.lstsq(design[:, cols], target, rcond=None)
        if (sol < 0).any():
            continue
        coef[list(cols)] = sol
        err = float(((design @ coef - target) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, coef)
    return best[1] if best else np.zeros(2)


def usl_fit(steps: list[StepSummary]) -> Usl | None:
    """Universal Scalability Law X(N) = lambda N / (1 + sigma (N-1) + kappa N (N-1)).

    Least squares on throughput vs concurrency (needs >= 4 steps with throughput): for each
    candidate lambda the model is linear in sigma and kappa (both kept >= 0); the lambda with the
    smallest squared throughput error wins.  ``peak_concurrency`` = sqrt((1 - sigma) / kappa).
    """
    pts = [
        (step["concurrency"], step["throughput_rps"])
        for step in steps
        if step.get("throughput_rps") and step.get("concurrency")
    ]
    if len(pts) < 4:
        return None
    n = np.array([point[0] for point in pts], float)
    throughput = np.array([point[1] for point in pts], float)
    design = np.column_stack([n - 1, n * (n - 1)])
    lam0 = float(np.max(throughput / n))
    best: tuple[float, Any, Any, Any, np.ndarray] | None = None
    for lam in lam0 * np.linspace(0.7, 1.5, 81):
        sigma, kappa = _nnls2(design, lam * n / throughput - 1)
        pred = lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))
        err = float(((pred - throughput) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, lam, sigma, kappa, pred)
    assert best is not None  # the first of the candidates always sets it
    err, lam, sigma, kappa, pred = best
    ss_tot = float(((throughput - throughput.mean()) ** 2).sum())
    peak = math.sqrt((1 - sigma) / kappa) if kappa > 0 and sigma < 1 else None
    return {
        "lambda_rps": lam,
        "sigma": float(sigma),
        "kappa": float(kappa),
        "r2": 1 - err / ss_tot if ss_tot > 0 else None,
        "peak_concurrency": peak,
        "peak_throughput_rps": float(lam * peak / (1 + sigma * (peak - 1) + kappa * peak * (peak - 1)))
        if peak
        else None,
    }


def usl_curve(usl: Usl, n: np.ndarray) -> np.ndarray:
    curve: np.ndarray = usl["lambda_rps"] * n / (1 + usl["sigma"] * (n - 1) + usl["kappa"] * n * (n - 1))
    return curve
