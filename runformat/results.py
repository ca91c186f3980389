"""Results with names: what a step's figures, the knee, the diagnosis and an attempt record
hold, as TypedDicts.

The field tables (:mod:`runformat.summary`, :mod:`runformat.schema`) declare each key with its
unit and meaning; ``summary.json`` and ``requests.jsonl`` are written as they say and checked
against them. The classes here give the same keys their Python types, so that code building or
reading them (``analysis/``, ``dashboard/``) says what it handles: a step is a
:class:`StepSummary`, the knee a :class:`Knee`, the diagnosis a :class:`Diagnosis` (its kind a
:class:`~runformat.summary.DiagnosisKind`), an attempt a :class:`Attempt` and what became of a
request an :class:`~runformat.summary.Outcome`. They are dicts at run time: the files stay as
they are. ``tests/unit/test_results.py`` holds each class to its table (:data:`TABLES`): the
same keys, the same required ones, null where the table allows it, nested tables as their
classes. A key a table keeps optional is in the ``total=False`` class; the required ones in its
base.
"""

from __future__ import annotations

from typing import Any, TypedDict

from . import schema, summary
from .summary import DiagnosisKind


class _Window(TypedDict):
    start: float | None
    end: float | None
    duration_s: float | None
    source: str
    settle_s: float | None
    open: bool
    completions: int | None
    ok_completions: int | None


class Window(_Window, total=False):
    """As :data:`runformat.summary.WINDOW` declares it."""

    spans: list[list[float]]


class OpenStep(TypedDict):
    """As :data:`runformat.summary.OPEN_STEP` declares it."""

    elapsed_s: float | None
    settle_s: float | None
    settling: bool
    completions: int
    withheld: list[str]
    note: str


class _Dist(TypedDict):
    count: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float


class Dist(_Dist, total=False):
    """As :data:`runformat.summary.DIST` declares it."""

    p50_ci: list[float | None]
    p95_ci: list[float | None]
    ci_method: str | None
    ci_n: int


#: ATTEMPTS_BY_NUMBER (its keys are no Python names).
AttemptsByNumber = TypedDict("AttemptsByNumber", {"1": int, "2": int, "3+": int})


class Streams(TypedDict):
    """As :data:`runformat.summary.STREAMS` declares it."""

    counted: int
    cut_by_step_end: int


class Tail(TypedDict):
    """As :data:`runformat.summary.TAIL` declares it."""

    count: int
    mean: float
    p95: float
    max: float


class RivaStats(TypedDict):
    """As :data:`runformat.summary.RIVA_STATS` declares it."""

    count: int
    avg: float
    p90: float
    p95: float
    p99: float


class Riva(TypedDict):
    """As :data:`runformat.summary.RIVA` declares it."""

    first_audio_ms: RivaStats | None
    chunk_ms: RivaStats | None


class IntegrityExample(TypedDict):
    """As :data:`runformat.summary.INTEGRITY_EXAMPLE` declares it."""

    text_id: str | None
    expected_s: float
    got_s: float


class Integrity(TypedDict):
    """As :data:`runformat.summary.INTEGRITY` declares it."""

    checked: int
    mismatched: int
    rate: float | None
    examples: list[IntegrityExample]


class SpeechExample(TypedDict):
    """As :data:`runformat.summary.SPEECH_EXAMPLE` declares it."""

    req_id: str
    text_id: str | None
    text: str | None
    transcript: str | None
    error: float
    clip: str | None


class SimilarityExample(TypedDict):
    """As :data:`runformat.summary.SIMILARITY_EXAMPLE` declares it."""

    req_id: str
    text_id: str | None
    text: str | None
    similarity: float
    similarity_ref: float | None
    mos: float | None
    clip: str | None


class _SpeechStep(TypedDict):
    metric: str
    judged: int
    not_judged: int
    wer_mean: float | None
    wer_p95: float | None
    cer_mean: float | None
    cer_p95: float | None
    unintelligible: int
    worst: list[SpeechExample]


class SpeechStep(_SpeechStep, total=False):
    """As :data:`runformat.summary.SPEECH_STEP` declares it."""

    similarity_mean: float | None
    similarity_p5: float | None
    similarity_ref_mean: float | None
    mos_mean: float | None
    mos_p5: float | None
    mos_sig_mean: float | None
    mos_bak_mean: float | None
    not_listened: int | None
    worst_similarity: list[SimilarityExample]


class Little(TypedDict):
    """As :data:`runformat.summary.LITTLE` declares it."""

    effective_concurrency: float
    expected_concurrency: float
    ratio: float
    window_s: float


class Stage(TypedDict):
    """As :data:`runformat.summary.STAGE` declares it."""

    mean: float
    p50: float
    p95: float


class Tier(TypedDict):
    """As :data:`runformat.summary.TIER` declares it."""

    count: int
    p50: float
    p95: float


class Error(TypedDict):
    """As :data:`runformat.summary.ERROR` declares it."""

    error: str
    count: int


class SeriesStats(TypedDict):
    """As :data:`runformat.summary.SERIES_STATS` declares it."""

    mean: float | None
    max: float | None
    samples: int


class _ServerRole(TypedDict):
    series: str
    mean: float | None
    max: float | None
    samples: int


class ServerRole(_ServerRole, total=False):
    """As :data:`runformat.summary.SERVER_ROLE` declares it."""

    why: str


class HostAggregate(TypedDict):
    """As :data:`runformat.summary.HOST_AGGREGATE` declares it."""

    samples: int
    cpu_mean: float | None
    cpu_max: float | None
    busiest_core_mean: float | None
    busiest_core_max: float | None
    proc_cpu_mean: float | None
    proc_cpu_max: float | None
    gpu_util_mean: float | None
    gpu_util_max: float | None
    gpu_mem_peak_bytes: float | None
    gpu_mem_total_bytes: float | None
    gpu_power_mean_w: float | None


class _ResourceAggregate(HostAggregate):
    hosts: list[str]
    by_host: dict[str, HostAggregate]


class ResourceAggregate(_ResourceAggregate, total=False):
    """As :data:`runformat.summary.RESOURCE_AGGREGATE` declares it."""

    gpu_mem_fallback_bytes: float | None
    metrics: dict[str, SeriesStats] | None
    metrics_left_out: int
    server_roles: dict[str, ServerRole] | None


class Repeat(TypedDict):
    """As :data:`runformat.summary.REPEAT` declares it."""

    step: int
    phase: str | None
    repeat: int | None
    p50_ms: float | None
    p95_ms: float | None
    throughput_rps: float | None
    ttfa_p95_ms: float | None
    requests: int | None


class _Spread(TypedDict):
    by_repeat: list[Repeat]


class Spread(_Spread, total=False):
    """As :data:`runformat.summary.SPREAD` declares it."""

    p50_ms: float
    p95_ms: float
    throughput_rps: float
    ttfa_p95_ms: float


class Inflight(TypedDict):
    """As :data:`runformat.summary.INFLIGHT` declares it."""

    mean: float | None
    max: int | None


class Growth(TypedDict):
    """As :data:`runformat.summary.GROWTH` declares it."""

    p50_thirds: list[float] | None
    growing: bool | None
    slope_ms_per_s: float | None


class _StepSummary(TypedDict):
    step: int | None
    concurrency: int
    planned_start: float | None
    planned_end: float | None
    phase: str | None
    repeat: int | None
    window: Window
    requests: int
    attempts: int
    ok: int
    failed: int
    error_rate: float | None
    attempt_failures: int
    attempt_failure_rate: float | None
    throughput_rps: float | None
    completed_rps: float | None
    latency_ms: Dist | None
    ttfb_ms: Dist | None
    write_ms: Dist | None
    concat_ms: Dist | None
    e2e_ms: Dist | None
    rtf: Dist | None
    audio_s_per_s: float | None
    retries: int
    attempts_by_number: AttemptsByNumber
    throttled: int
    non_throttle_failures: int
    status_counts: dict[str, int]
    retry_after_s: Dist | None
    backoff_ms: Dist | None
    streamed: bool
    streams: Streams
    ttfa_ms: Dist | None
    underrun_rate: float | None
    underrun_streams: int
    underrun_ms: Tail | None
    gap_max_ms: Tail | None
    chunks: Tail | None
    tail_ms: Dist | None
    riva: Riva | None
    rtfx: float | None
    chars_per_s: float | None
    utterances_per_hour: float | None
    cancelled: int
    cancel_to_quiet_ms: Dist | None
    integrity: Integrity
    leading_silence_ms: Dist | None
    trailing_silence_ms: Dist | None
    ttfa_audible_ms: Dist | None
    silent_rate: float | None
    runaway_rate: float | None
    truncated_rate: float | None
    clipped_rate: float | None
    speech: SpeechStep | None
    little: Little | None
    server_timing_ms: dict[str, Stage]
    latency_by_tier_ms: dict[str, Tier]
    latency_by_voice_ms: dict[str, Tier]
    latency_by_language_ms: dict[str, Tier]
    errors: list[Error]
    server: ResourceAggregate | None
    client: ResourceAggregate | None


class StepSummary(_StepSummary, total=False):
    """As :data:`runformat.summary.STEP_SUMMARY` declares it."""

    open: OpenStep
    cut_by_run_end: int
    steps: list[int]
    repeats: int
    spread: Spread | None
    rate: float
    speed: float | None
    offered_rps: float
    dropped: int
    offered: int
    throughput_ratio: float | None
    inflight: Inflight
    sched_wait_ms: Dist | None
    send_lag_ms: Dist | None
    growth: Growth
    voices: int


class KneeMethods(TypedDict, total=False):
    """As :data:`runformat.summary.KNEE_METHODS` declares it."""

    latency_vs_lowest: float | None
    failures: float | None
    latency_vs_previous: float | None
    throughput_efficiency: float | None
    kneedle: float | None
    piecewise: float | None
    underruns: float | None
    ttfa_vs_lowest: float | None
    throughput_shortfall: float | None
    latency_growing: float | None
    speech: float | None
    signal: float | None
    similarity: float | None
    mos: float | None


class SpeechRise(TypedDict):
    """As :data:`runformat.summary.SPEECH_RISE` declares it."""

    pairs: int
    mean: float
    ci: list[float]


class ListenDrop(TypedDict):
    """As :data:`runformat.summary.LISTEN_DROP` declares it."""

    pairs: int
    mean: float
    ci: list[float]


class _Knee(TypedDict):
    concurrency: int | None
    index: int | None
    methods: KneeMethods
    agree: list[str]
    rules: list[str]
    streamed: bool


class Knee(_Knee, total=False):
    """As :data:`runformat.summary.KNEE` declares it."""

    inflation: list[float | None]
    inflation_basis: str
    efficiency: list[float | None]
    ttfa_floor_ms: float | None
    ttfa_basis: str
    silence_first: bool
    untimed_stream: bool
    speech_rise: list[SpeechRise | None]
    speech_first: bool
    signal_first: bool
    similarity_drop: list[ListenDrop | None]
    mos_drop: list[ListenDrop | None]
    speech_changed: list[str]
    rate: float | None
    voices: int | None
    axis: str


class Diagnosis(TypedDict):
    """As :data:`runformat.summary.DIAGNOSIS` declares it."""

    kind: DiagnosisKind
    evidence: list[str]
    resource_data: bool


class _Attempt(TypedDict):
    step: int | None
    concurrency: int | None
    worker: str
    user: int
    t0: float
    t1: float | None
    t2: float | None
    t3: float | None
    ttfb_ms: float | None
    wait_ms: float | None
    write_ms: float | None
    concat_ms: float | None
    status: int | str | None
    ok: bool
    error: str | None
    bytes: int
    audio_s: float | None
    rtf: float | None
    retry_after_s: float | None
    retry_after_raw: str | None
    server_timing: dict[str, float] | None
    settled: bool
    ttfa_ms: float | None
    chunks: int | None
    gap_max_ms: float | None
    underruns: int | None
    underrun_ms: float | None
    chunk_at_ms: list[float] | None
    chunk_audio_ms: list[float] | None
    req_id: str
    attempt: int
    final: bool
    text_id: str | None
    text_len: int
    tier: str | None
    segment: str | None
    backoff_ms: float | None


class Attempt(_Attempt, total=False):
    """As :data:`runformat.schema.ATTEMPT` declares it."""

    scheduled: float | None
    sched_wait_ms: float | None
    text_first_ms: float | None
    text_done_ms: float | None
    done_to_audio_ms: float | None
    tail_ms: float | None
    connect_ms: float | None
    audio_file: str | None
    voice: str | None
    language: str | None
    cancelled: bool | None
    cancel_ms: float | None
    cancel_to_quiet_ms: float | None
    audio_after_cancel_ms: float | None
    cancel_quiet: str | None
    cancel_note: str | None
    leading_silence_ms: float | None
    trailing_silence_ms: float | None
    clipped_share: float | None
    ttfa_audible_ms: float | None


#: Each class and the table that declares it.
TABLES: dict[type, tuple[Any, ...]] = {
    AttemptsByNumber: summary.ATTEMPTS_BY_NUMBER,
    Window: summary.WINDOW,
    OpenStep: summary.OPEN_STEP,
    Dist: summary.DIST,
    Streams: summary.STREAMS,
    Tail: summary.TAIL,
    RivaStats: summary.RIVA_STATS,
    Riva: summary.RIVA,
    IntegrityExample: summary.INTEGRITY_EXAMPLE,
    Integrity: summary.INTEGRITY,
    SpeechExample: summary.SPEECH_EXAMPLE,
    SpeechStep: summary.SPEECH_STEP,
    SimilarityExample: summary.SIMILARITY_EXAMPLE,
    Little: summary.LITTLE,
    Stage: summary.STAGE,
    Tier: summary.TIER,
    Error: summary.ERROR,
    SeriesStats: summary.SERIES_STATS,
    ServerRole: summary.SERVER_ROLE,
    HostAggregate: summary.HOST_AGGREGATE,
    ResourceAggregate: summary.RESOURCE_AGGREGATE,
    Repeat: summary.REPEAT,
    Spread: summary.SPREAD,
    Inflight: summary.INFLIGHT,
    Growth: summary.GROWTH,
    StepSummary: summary.STEP_SUMMARY,
    KneeMethods: summary.KNEE_METHODS,
    SpeechRise: summary.SPEECH_RISE,
    ListenDrop: summary.LISTEN_DROP,
    Knee: summary.KNEE,
    Diagnosis: summary.DIAGNOSIS,
    Attempt: schema.ATTEMPT,
}
