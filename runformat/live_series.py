"""The live metrics a run serves with ``--metrics-port``: each series' name, kind, labels, help
and buckets, declared once.

The master (or the local runner) serves them as Prometheus text (``locustfiles.metrics``); the
manual's table (docs/live-metrics.md) and the Grafana board's check read these declarations.
Names follow Prometheus' guide: ``tts_knee_`` first, base units (seconds, ratios), ``_total``
on counters. See docs/live-metrics.md.
"""

from __future__ import annotations

from typing import NamedTuple

PREFIX = "tts_knee_"

#: Wait and TTFA buckets: 16 per doubling from 2^-10 s (about 1 ms) to 64 s, the edges of
#: Prometheus' native histograms at schema 4. histogram_quantile interpolates inside the bucket
#: a quantile falls in, so its answer and the exact percentile share a bucket and differ by less
#: than the bucket's width, 2^(1/16) - 1 = 4.4 % of its lower edge.
LATENCY_BUCKETS_S: tuple[float, ...] = tuple(float(f"{2 ** (k / 16):.6g}") for k in range(-160, 97))
#: Retry-After values servers send, in seconds.
RETRY_AFTER_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
#: How long a stream ran dry; the 0 bucket holds the streams that never did.
UNDERRUN_BUCKETS_S: tuple[float, ...] = (0.0, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Word or character error rates; the 0 bucket holds the clips heard without a mistake.
ERROR_RATE_BUCKETS: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)

#: ``outcome`` of an attempt or a request: success, throttled (429, 503, a WebSocket's 1013),
#: another failure, or cut by the run's end (runformat.options.CUT_BY_RUN_END).
OUTCOMES = ("ok", "throttled", "failed", "cut_by_run_end")


class Series(NamedTuple):
    """One exported metric family: ``name`` without the prefix, ``kind`` gauge, counter or
    histogram, its ``labels`` (a histogram's ``le`` not among them) and, for a histogram, its
    bucket edges."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def full_name(self) -> str:
        return PREFIX + self.name

    def sample_names(self) -> tuple[str, ...]:
        """The names its samples are written under."""
        if self.kind == "histogram":
            return tuple(self.full_name + suffix for suffix in ("_bucket", "_sum", "_count"))
        return (self.full_name,)


_STEP = ("step",)

RUN_INFO = Series(
    "run_info", "gauge", ("run",), "1 for the run being recorded, labelled with its run directory's name."
)
STEP = Series("step", "gauge", (), "The step running now (1-based; 0 before the first).")
STEP_CONCURRENCY = Series("step_concurrency", "gauge", (), "Users the step running now asks for (closed loop).")
STEP_RATE = Series(
    "step_offered_requests_per_second",
    "gauge",
    (),
    "Requests per second the step running now offers (open loop: --rates, --trace).",
)
STEP_START = Series("step_start_timestamp_seconds", "gauge", (), "Unix time the step running now began.")
STEP_INFO = Series(
    "step_info",
    "gauge",
    ("step", "phase", "concurrency", "rate"),
    "1 for each step begun: its phase, concurrency and offered rate (empty where it has none).",
)
USERS = Series("users", "gauge", (), "Locust users running now, over every worker.")
ATTEMPTS = Series(
    "attempts_total",
    "counter",
    ("step", "outcome", "status"),
    "Attempts recorded, by outcome (ok, throttled, failed, cut_by_run_end) and status (HTTP "
    "status, gRPC code name, conn_error for no answer).",
)
REQUESTS = Series(
    "requests_total",
    "counter",
    ("step", "outcome"),
    "Requests ended (their final attempt recorded), by the final attempt's outcome.",
)
RETRIES = Series("retries_total", "counter", _STEP, "Attempts that retried a request (attempt 2 and later).")
RETRY_AFTER = Series(
    "retry_after_seconds",
    "histogram",
    _STEP,
    "Retry-After the server asked for, per attempt that carried one.",
    RETRY_AFTER_BUCKETS_S,
)
WAIT = Series(
    "wait_seconds",
    "histogram",
    _STEP,
    "Request sent to response fully read (wait_ms), over the requests the step's latency figures "
    "describe: settled, final, successful, not cancelled (streamed: finished before the step ended).",
    LATENCY_BUCKETS_S,
)
TTFA = Series(
    "ttfa_seconds",
    "histogram",
    _STEP,
    "Time to the first audio sample (ttfa_ms), over the step's streams: settled, final, "
    "successful, finished before the step ended.",
    LATENCY_BUCKETS_S,
)
UNDERRUNS = Series("underruns_total", "counter", _STEP, "Times a stream's playback ran dry, over the same streams.")
UNDERRUN = Series(
    "underrun_seconds",
    "histogram",
    _STEP,
    "Seconds each stream's playback spent dry (0 for a stream that never ran dry), over the same streams.",
    UNDERRUN_BUCKETS_S,
)
SPEECH_WER = Series(
    "speech_wer_ratio",
    "histogram",
    _STEP,
    "Word error rate of each clip the ASR judge heard (--asr-model, --asr-metric wer).",
    ERROR_RATE_BUCKETS,
)
SPEECH_CER = Series(
    "speech_cer_ratio",
    "histogram",
    _STEP,
    "Character error rate of each clip the ASR judge heard (--asr-metric cer).",
    ERROR_RATE_BUCKETS,
)
#: A judged clip's error rate (a speech.jsonl line's ``error``) goes into one of these by the
#: line's ``metric``.
ERROR_RATES: dict[str, Series] = {"wer": SPEECH_WER, "cer": SPEECH_CER}
#: Speaker similarity (cosine of two speaker embeddings: 1 the same, another speaker 0.4-0.65).
SIMILARITY_BUCKETS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
#: DNSMOS scores, 1 (bad) to 5 (excellent).
MOS_BUCKETS: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0, 4.5, 5.0)
SPEECH_SIMILARITY = Series(
    "speech_similarity_ratio",
    "histogram",
    _STEP,
    "Speaker similarity of each clip the judge listened to (unless --asr-words-only) to its text's clip at the "
    "lowest concurrency heard so far (1 for that clip).",
    SIMILARITY_BUCKETS,
)
SPEECH_MOS = Series(
    "speech_mos",
    "histogram",
    _STEP,
    "Predicted naturalness (DNSMOS OVRL, 1 to 5) of each clip the judge listened to (unless --asr-words-only).",
    MOS_BUCKETS,
)
#: The judge's other figures of a clip (a speech.jsonl line's field -> its histogram). A figure
#: the judge adds is one Series above and one entry here.
JUDGED_FIGURES: dict[str, Series] = {"similarity": SPEECH_SIMILARITY, "mos": SPEECH_MOS}

SERIES: tuple[Series, ...] = (
    RUN_INFO,
    STEP,
    STEP_CONCURRENCY,
    STEP_RATE,
    STEP_START,
    STEP_INFO,
    USERS,
    ATTEMPTS,
    REQUESTS,
    RETRIES,
    RETRY_AFTER,
    WAIT,
    TTFA,
    UNDERRUNS,
    UNDERRUN,
    *ERROR_RATES.values(),
    *JUDGED_FIGURES.values(),
)


def sample_names() -> frozenset[str]:
    """Every sample name the live metrics write."""
    return frozenset(name for series in SERIES for name in series.sample_names())


def reference() -> str:
    """The manual's table of the series (docs/live-metrics.md holds it between its markers)."""
    out = ["| series | kind | labels | what it is |", "| --- | --- | --- | --- |"]
    for series in SERIES:
        labels = ", ".join(f"`{label}`" for label in series.labels) or "—"
        out.append(f"| `{series.full_name}` | {series.kind} | {labels} | {series.help} |")
    return "\n".join(out) + "\n"
