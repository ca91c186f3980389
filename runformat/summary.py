"""``summary.json``, written by the dashboard: every field, nested all the way down, declared once.

Each object is a TypedDict whose fields carry their unit and meaning: a step is a
:class:`StepSummary`, the knee a :class:`Knee`, the diagnosis a :class:`Diagnosis`, the whole
file a :class:`Summary`. The analysis builds them (plain dicts at run time, so the file is
written as it always was); the tables (``STEP_SUMMARY``, ``SUMMARY`` …), the strict check of the
tests (:func:`runformat.check.undeclared_keys`) and the manual's reference (``docs/fields.md``)
are derived from them. The definitions of the figures (what a window, a request or a stream
counts) are in ``analysis.steps``; a figure added there is declared here too or that check
fails (``docs/adding.md``).
"""

import sys
from typing import Annotated

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: a member is its value as a string, as 3.11's StrEnum makes it
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__


from .fields import Doc, NotRequired, TypedDict, table
from .options import RUN_OPTIONS
from .schema import CollectorEntry, Preflight, Provenance, Trace, Versions, WorkerEntry


class Tail(TypedDict):
    """The tail of a distribution: ``underrun_ms``, ``gap_max_ms``, ``chunks`` (null: none)."""

    count: Annotated[int, Doc("count", "values")]
    mean: Annotated[float, Doc("", "in the unit of the figure")]
    p95: Annotated[float, Doc("", "exact percentiles, numpy's linear interpolation")]
    max: Annotated[float, Doc("", "")]


class Dist(Tail):
    """A distribution of finite values: ``latency_ms``, ``ttfb_ms``, ``ttfa_ms`` … (null: none); its tail and more."""

    p50: Annotated[float, Doc("", "")]
    p90: Annotated[float, Doc("", "")]
    p99: Annotated[float, Doc("", "")]
    p50_ci: NotRequired[
        Annotated[list[float | None], Doc("", "[lo, hi] of the median (an end too few values can bound is null)")]
    ]
    p95_ci: NotRequired[Annotated[list[float | None], Doc("", "[lo, hi] of the p95")]]
    ci_method: NotRequired[Annotated[str | None, Doc("", "how the intervals were found")]]
    ci_n: NotRequired[Annotated[int, Doc("count", "values the intervals rest on")]]


class RivaStats(TypedDict):
    """A figure as NVIDIA's riva_tts_perf_client prints it (see ``analysis.steps``)."""

    count: Annotated[int, Doc("count", "values pooled")]
    avg: Annotated[float, Doc("ms", "the mean")]
    p90: Annotated[float, Doc("ms", "sorted[int(0.90 n)], no interpolation")]
    p95: Annotated[float, Doc("ms", "sorted[int(0.95 n)]")]
    p99: Annotated[float, Doc("ms", "sorted[int(0.99 n)]")]


class Riva(TypedDict):
    """``riva``: the perf client's latency figures over a step's streams."""

    first_audio_ms: Annotated[RivaStats | None, Doc("ms", "to the first audio (ttfa_ms), pooled over the streams")]
    chunk_ms: Annotated[
        RivaStats | None,
        Doc("ms", "between consecutive audio arrivals of a stream, the first excluded, pooled over the streams"),
    ]


class Window(TypedDict):
    """A step's window: the span its figures are over."""

    start: Annotated[float | None, Doc("unix s", "the step's start plus its settle time")]
    end: Annotated[float | None, Doc("unix s", "")]
    duration_s: Annotated[float | None, Doc("s", "")]
    source: Annotated[str, Doc("", "'run.json', 'records' (steps inferred) or 'pooled'")]
    settle_s: Annotated[float | None, Doc("s", "")]
    open: Annotated[bool, Doc("", "the step had no end yet")]
    completions: Annotated[int | None, Doc("count", "final attempts that finished inside it")]
    ok_completions: Annotated[int | None, Doc("count", "successful ones")]
    spans: NotRequired[Annotated[list[list[float]], Doc("unix s", "pooled level: its steps' [start, end] spans")]]


class OpenStep(TypedDict):
    """A step still running (the live view): what its elapsed window gives so far."""

    elapsed_s: Annotated[float | None, Doc("s", "since the step's start, to the latest record")]
    settle_s: Annotated[float | None, Doc("s", "where its window opens")]
    settling: Annotated[bool, Doc("", "its window has not opened yet: nothing is measured")]
    completions: Annotated[int, Doc("count", "final attempts finished in its window so far")]
    withheld: Annotated[
        list[str], Doc("", "the figures set to null: too few values for them yet (analysis.steps.OPEN_MIN_COUNT)")
    ]
    note: Annotated[str, Doc("", "why, in one sentence")]


class InProgress(TypedDict):
    """The open step as the verdict names it."""

    step: Annotated[int, Doc("", "")]
    concurrency: Annotated[int, Doc("users", "")]
    rate: Annotated[float | None, Doc("req/s", "open loop")]
    voices: Annotated[int | None, Doc("count", "voice sweep")]
    closed_steps: Annotated[list[int], Doc("", "the steps the verdict is from")]
    note: Annotated[str, Doc("", "one sentence for the verdict box")]


class HostAggregate(TypedDict):
    """One host's resource figures over a step's window."""

    samples: Annotated[int, Doc("count", "")]
    cpu_mean: Annotated[float | None, Doc("percent", "")]
    cpu_max: Annotated[float | None, Doc("percent", "")]
    busiest_core_mean: Annotated[float | None, Doc("percent", "")]
    busiest_core_max: Annotated[float | None, Doc("percent", "")]
    proc_cpu_mean: Annotated[float | None, Doc("percent", "the watched process tree, of one core")]
    proc_cpu_max: Annotated[float | None, Doc("percent", "")]
    gpu_util_mean: Annotated[float | None, Doc("percent", "")]
    gpu_util_max: Annotated[float | None, Doc("percent", "")]
    gpu_mem_peak_bytes: Annotated[float | None, Doc("bytes", "")]
    gpu_mem_total_bytes: Annotated[float | None, Doc("bytes", "")]
    gpu_power_mean_w: Annotated[float | None, Doc("W", "")]


class SeriesStats(TypedDict):
    """A scraped series over a step's window."""

    mean: Annotated[float | None, Doc("", "")]
    max: Annotated[float | None, Doc("", "")]
    samples: Annotated[int, Doc("count", "samples that carried it")]


class ServerRole(SeriesStats):
    """A server role (queue depth, running, batch size, KV cache) and the series that told it."""

    series: Annotated[str, Doc("", "the series the role was read from")]
    why: NotRequired[
        Annotated[str, Doc("", "how it got the role: a known server's name, an obvious ending, --server-role")]
    ]


class StageRoles(TypedDict):
    """One stage of the server (a Triton model, a vLLM-Omni stage) over a step's window: what its
    own series tell, each role the stage publishes (``runformat.metric_roles``)."""

    queue_depth: NotRequired[Annotated[ServerRole, Doc("requests", "waiting in the stage's queue")]]
    running: NotRequired[Annotated[ServerRole, Doc("requests", "running in the stage (a gauge the server keeps)")]]
    batch_size: NotRequired[Annotated[ServerRole, Doc("requests", "inferences per execution")]]
    queue_ms: NotRequired[Annotated[ServerRole, Doc("ms", "time a request waited in the stage's queue")]]
    compute_ms: NotRequired[Annotated[ServerRole, Doc("ms", "the stage's compute time per request")]]
    busy: NotRequired[
        Annotated[ServerRole, Doc("requests", "in the stage's compute on average: its compute time per second")]
    ]
    kv_cache_usage: NotRequired[Annotated[ServerRole, Doc("ratio", "the stage's KV-cache use")]]
    gpu_mem_bytes: NotRequired[Annotated[ServerRole, Doc("bytes", "GPU memory the stage says it holds")]]


class ResourceAggregate(HostAggregate):
    """``server`` and ``client``: a role's samples over the window, the highest of its hosts' figures."""

    hosts: Annotated[list[str], Doc("", "the hosts sampled")]
    gpu_mem_fallback_bytes: NotRequired[Annotated[float | None, Doc("bytes", "server: GPU memory just after the step")]]
    metrics: NotRequired[Annotated[dict[str, SeriesStats] | None, Doc("", "server: the scraped series", key="series")]]
    metrics_left_out: NotRequired[Annotated[int, Doc("count", "server: series past the cap")]]
    server_roles: NotRequired[
        Annotated[dict[str, ServerRole] | None, Doc("", "server: the roles its series tell", key="role")]
    ]
    stage_label: NotRequired[
        Annotated[str, Doc("", "server with stages: the label telling them apart (model, stage, --server-stage-label)")]
    ]
    stages: NotRequired[
        Annotated[
            dict[str, StageRoles],
            Doc("", "server with two stages or more: each stage's roles, by the stage label's value", key="stage"),
        ]
    ]
    stages_left_out: NotRequired[
        Annotated[int, Doc("count", "stages past the cap (the busiest are kept: analysis.server_metrics.MAX_STAGES)")]
    ]
    by_host: Annotated[dict[str, HostAggregate], Doc("", "each host's own figures", key="host")]


class IntegrityExample(TypedDict):
    """A mismatch quoted as an example (``integrity.examples``)."""

    text_id: Annotated[str | None, Doc("", "")]
    expected_s: Annotated[float, Doc("s", "the text's reference audio")]
    got_s: Annotated[float, Doc("s", "")]


class Integrity(TypedDict):
    """``integrity``: the same text gives about the same audio at every step."""

    checked: Annotated[int, Doc("count", "successful attempts with audio and a reference")]
    mismatched: Annotated[int, Doc("count", "")]
    rate: Annotated[float | None, Doc("", "their share")]
    examples: Annotated[list[IntegrityExample], Doc("", "a few mismatches")]


class Little(TypedDict):
    """``little``: Little's law over a step's window (busy users against expected)."""

    effective_concurrency: Annotated[float, Doc("users", "mean busy users over the window")]
    expected_concurrency: Annotated[
        float, Doc("users", "what the users should keep busy: concurrency x --contexts, less --think-time's share")
    ]
    ratio: Annotated[float, Doc("", "effective / expected")]
    window_s: Annotated[float, Doc("s", "")]


class Stage(TypedDict):
    """A Server-Timing stage over a step (``server_timing_ms``)."""

    mean: Annotated[float, Doc("ms", "")]
    p50: Annotated[float, Doc("ms", "")]
    p95: Annotated[float, Doc("ms", "")]


class Tier(TypedDict):
    """A text tier's, voice's or language's latency over a step (``latency_by_tier_ms`` …)."""

    count: Annotated[int, Doc("count", "")]
    p50: Annotated[float, Doc("ms", "")]
    p95: Annotated[float, Doc("ms", "")]


class AudioRtf(TypedDict):
    """``audio_rtf``: vLLM-Omni's real-time factor over a step's requests (docs/streaming.md)."""

    count: Annotated[int, Doc("count", "requests")]
    p50: Annotated[float, Doc("", "its median (np.median)")]
    p95: Annotated[float, Doc("", "its np.percentile(..., 95): numpy's linear interpolation")]


class Error(TypedDict):
    """One of a step's commonest errors (``errors``)."""

    error: Annotated[str, Doc("", "the error, one line")]
    count: Annotated[int, Doc("count", "")]


ERROR = table(Error)


class Streams(TypedDict):
    """``streams``: the streams a step's stream figures count."""

    counted: Annotated[int, Doc("count", "streams that ended before the step did")]
    cut_by_step_end: Annotated[int, Doc("count", "left out: they heard the next step's load")]


STREAMS = table(Streams)


class Repeat(TypedDict):
    """One repeat's own figures at a level tested more than once (``spread.by_repeat``)."""

    step: Annotated[int, Doc("", "")]
    phase: Annotated[str | None, Doc("", "")]
    repeat: Annotated[int | None, Doc("count", "")]
    p50_ms: Annotated[float | None, Doc("ms", "")]
    p95_ms: Annotated[float | None, Doc("ms", "")]
    throughput_rps: Annotated[float | None, Doc("req/s", "")]
    ttfa_p95_ms: Annotated[float | None, Doc("ms", "")]
    requests: Annotated[int | None, Doc("count", "")]


class Spread(TypedDict):
    """``spread``: a level tested more than once, the spread between its repeats."""

    by_repeat: Annotated[list[Repeat], Doc("", "each repeat's own figures")]
    p50_ms: NotRequired[Annotated[list[float], Doc("ms", "[min, max] over the repeats")]]
    p95_ms: NotRequired[Annotated[list[float], Doc("ms", "")]]
    throughput_rps: NotRequired[Annotated[list[float], Doc("req/s", "")]]
    ttfa_p95_ms: NotRequired[Annotated[list[float], Doc("ms", "")]]


class Growth(TypedDict):
    """``growth`` (open loop): whether the queue kept growing through the step."""

    p50_thirds: Annotated[list[float] | None, Doc("ms", "median sched_wait_ms in each third of the step")]
    growing: Annotated[bool | None, Doc("", "the queue kept growing through the step")]
    slope_ms_per_s: Annotated[float | None, Doc("ms/s", "")]


GROWTH = table(Growth)


class Inflight(TypedDict):
    """``inflight`` (open loop): requests in flight over the window."""

    mean: Annotated[float | None, Doc("count", "requests in flight over the window")]
    max: Annotated[int | None, Doc("count", "")]


AttemptsByNumber = TypedDict(
    "AttemptsByNumber",
    {
        "1": Annotated[int, Doc("count", "first attempts")],
        "2": Annotated[int, Doc("count", "second attempts")],
        "3+": Annotated[int, Doc("count", "the third and later")],
    },
)
AttemptsByNumber.__doc__ = (
    """``attempts_by_number``: a step's attempts by their number (its keys are no Python names)."""
)


class SpeechRise(TypedDict):
    """One level's paired rise in error rate (``knee.speech_rise``)."""

    pairs: Annotated[int, Doc("count", "texts judged at both levels")]
    mean: Annotated[float, Doc("", "mean rise in error rate")]
    ci: Annotated[list[float], Doc("", "[lo, hi]: its 95 % bootstrap interval")]


class SpeechExample(TypedDict):
    """A judged clip quoted as an example (``speech.worst``)."""

    req_id: Annotated[str, Doc("", "")]
    text_id: Annotated[str | None, Doc("", "")]
    text: Annotated[str | None, Doc("", "the text sent")]
    transcript: Annotated[str | None, Doc("", "what the judge heard")]
    error: Annotated[float, Doc("", "its word (or character) error rate")]
    clip: Annotated[str | None, Doc("", "the clip, relative to the run directory")]


class SimilarityExample(TypedDict):
    """A judged clip quoted for its voice (``speech.worst_similarity``)."""

    req_id: Annotated[str, Doc("", "")]
    text_id: Annotated[str | None, Doc("", "")]
    text: Annotated[str | None, Doc("", "the text sent")]
    similarity: Annotated[float, Doc("", "its speaker similarity to the same text at the lowest level")]
    similarity_ref: Annotated[float | None, Doc("", "to the voice's reference audio, where there is one")]
    mos: Annotated[float | None, Doc("", "its predicted naturalness (DNSMOS OVRL)")]
    clip: Annotated[str | None, Doc("", "the clip, relative to the run directory")]


class ListenDrop(TypedDict):
    """One level's paired drop in similarity or naturalness (``knee.similarity_drop``,
    ``knee.mos_drop``)."""

    pairs: Annotated[int, Doc("count", "texts heard at both levels")]
    mean: Annotated[float, Doc("", "mean drop from the lowest level (similarity: 1 - similarity; mos: in MOS points)")]
    ci: Annotated[list[float], Doc("", "[lo, hi]: its 95 % bootstrap interval")]


class SpeechStep(TypedDict):
    """What the ASR judge heard in one step (``speech``)."""

    metric: Annotated[str, Doc("", "'wer' or 'cer'")]
    judged: Annotated[int, Doc("count", "clips judged")]
    not_judged: Annotated[
        int, Doc("count", "clips sent to the judge that it could not judge (undecodable, the judge behind or gone)")
    ]
    behind: Annotated[
        int, Doc("count", "of not_judged: left for want of the judge's time (its queue full, the run's end)")
    ]
    judge_cpu_s: Annotated[float, Doc("s", "the judge's CPU seconds on the clips it judged")]
    wer_mean: Annotated[float | None, Doc("", "mean word error rate (null when the metric is cer)")]
    wer_p95: Annotated[float | None, Doc("", "")]
    cer_mean: Annotated[float | None, Doc("", "mean character error rate, where cer is the metric")]
    cer_p95: Annotated[float | None, Doc("", "")]
    unintelligible: Annotated[int, Doc("count", "clips judged with an error rate over 0.5")]
    worst: Annotated[list[SpeechExample], Doc("", "the worst clips, worst first")]
    similarity_mean: NotRequired[
        Annotated[
            float | None,
            Doc(
                "",
                "listening: mean speaker similarity (cosine, audio.speaker) of the step's clips to the same "
                "texts' clips at the lowest level (1 at the lowest level itself)",
            ),
        ]
    ]
    similarity_p5: NotRequired[Annotated[float | None, Doc("", "listening: its 5th percentile (the least alike)")]]
    similarity_ref_mean: NotRequired[
        Annotated[float | None, Doc("", "listening: mean similarity to the voice's reference audio; null without one")]
    ]
    mos_mean: NotRequired[
        Annotated[float | None, Doc("", "listening: mean predicted naturalness, DNSMOS P.835 OVRL (1-5)")]
    ]
    mos_p5: NotRequired[Annotated[float | None, Doc("", "listening: its 5th percentile")]]
    mos_sig_mean: NotRequired[Annotated[float | None, Doc("", "listening: mean DNSMOS SIG (the speech itself)")]]
    mos_bak_mean: NotRequired[
        Annotated[float | None, Doc("", "listening: mean DNSMOS BAK (the background: noise, clicks)")]
    ]
    not_listened: NotRequired[
        Annotated[
            int | None,
            Doc("count", "listening: judged clips whose similarity or mos is null (too short to embed or score)"),
        ]
    ]
    worst_similarity: NotRequired[
        Annotated[list[SimilarityExample], Doc("", "listening: the least alike clips, least first")]
    ]


class StepSummary(TypedDict):
    """One step (``steps``) or one tested level, repeats pooled (``levels``)."""

    step: Annotated[int | None, Doc("", "null for a pooled level")]
    concurrency: Annotated[int, Doc("users", "open loop: 0")]
    planned_start: Annotated[float | None, Doc("unix s", "run.json's start")]
    planned_end: Annotated[float | None, Doc("unix s", "")]
    phase: Annotated[str | None, Doc("", "'grid', 'refine' or 'soak'")]
    repeat: Annotated[int | None, Doc("count", "")]
    window: Annotated[Window, Doc("", "the span the figures are over")]
    open: NotRequired[
        Annotated[OpenStep, Doc("", "a step still running: what its window gives so far (absent once closed)")]
    ]
    requests: Annotated[int, Doc("count", "logical requests (final attempts), settled")]
    attempts: Annotated[int, Doc("count", "")]
    ok: Annotated[int, Doc("count", "")]
    failed: Annotated[int, Doc("count", "")]
    cut_by_run_end: NotRequired[
        Annotated[int, Doc("count", "attempts the run's end cut (left out of every other figure)")]
    ]
    error_rate: Annotated[float | None, Doc("", "failed / requests")]
    attempt_failures: Annotated[int, Doc("count", "")]
    attempt_failure_rate: Annotated[float | None, Doc("", "")]
    throughput_rps: Annotated[float | None, Doc("req/s", "successful completions inside the window per second")]
    completed_rps: Annotated[float | None, Doc("req/s", "every completion the same way")]
    latency_ms: Annotated[Dist | None, Doc("ms", "wait_ms of the successful requests")]
    ttfb_ms: Annotated[Dist | None, Doc("ms", "")]
    write_ms: Annotated[Dist | None, Doc("ms", "")]
    concat_ms: Annotated[Dist | None, Doc("ms", "")]
    e2e_ms: Annotated[Dist | None, Doc("ms", "first attempt's t0 to the final attempt's end")]
    rtf: Annotated[Dist | None, Doc("", "")]
    audio_s_per_s: Annotated[float | None, Doc("", "audio seconds of the completions per second")]
    retries: Annotated[int, Doc("count", "attempts past the first")]
    attempts_by_number: Annotated[AttemptsByNumber, Doc("count", "attempts by their number")]
    throttled: Annotated[int, Doc("count", "429 and 503 attempts (and WebSocket closes 1013, try again later)")]
    non_throttle_failures: Annotated[int, Doc("count", "")]
    status_counts: Annotated[
        dict[str, int],
        Doc(
            "count",
            "attempts by status: the HTTP status, or the gRPC code name ('conn_error': no answer)",
            key="status",
        ),
    ]
    retry_after_s: Annotated[Dist | None, Doc("s", "")]
    backoff_ms: Annotated[Dist | None, Doc("ms", "")]
    streamed: Annotated[bool, Doc("", "the run read its responses as streams")]
    streams: Annotated[Streams, Doc("", "")]
    ttfa_ms: Annotated[Dist | None, Doc("ms", "time to first audio")]
    underrun_rate: Annotated[float | None, Doc("", "share of the streams that ran dry at least once")]
    underrun_streams: Annotated[int, Doc("count", "")]
    underrun_ms: Annotated[Tail | None, Doc("ms", "")]
    gap_max_ms: Annotated[Tail | None, Doc("ms", "")]
    chunks: Annotated[Tail | None, Doc("count", "")]
    preroll_ms: Annotated[
        Dist | None, Doc("ms", "the start-up buffer each stream needed to play from its first audio without a gap")
    ]
    smooth_start_ms: Annotated[
        Dist | None, Doc("ms", "ttfa_ms + preroll_ms of each stream: the wait until audio that plays without a gap")
    ]
    # the peers' figures, each as the peer defines it (docs/streaming.md)
    audio_rtf: Annotated[
        AudioRtf | None, Doc("", "vLLM-Omni's audio_rtf: wait_ms over the audio's length (rtf, by its name)")
    ]
    continuity_ok_rate: Annotated[
        float | None, Doc("", "vLLM-Omni's continuity OK rate: share of the streams whose preroll_ms is <= 100")
    ]
    c50: Annotated[
        float | None,
        Doc("", "sglang-omni's C50: share of the streams of two or more audio arrivals whose stall_max_ms is <= 50"),
    ]
    c100: Annotated[float | None, Doc("", "sglang-omni's C100: the same, <= 100 ms")]
    c200: Annotated[float | None, Doc("", "sglang-omni's C200: the same, <= 200 ms")]
    tail_ms: Annotated[Dist | None, Doc("ms", "text sent in pieces: the end of the text to the last audio")]
    # Riva's figures, for a team comparing with NVIDIA's riva_tts_perf_client
    riva: Annotated[Riva | None, Doc("", "streamed: first audio and chunk latency as the perf client prints them")]
    rtfx: Annotated[
        float | None, Doc("", "audio seconds delivered per wall second (audio_s_per_s, by the perf client's name)")
    ]
    chars_per_s: Annotated[float | None, Doc("chars/s", "characters of the successful completions per second")]
    utterances_per_hour: Annotated[float | None, Doc("count", "throughput_rps times 3600")]
    cancelled: Annotated[
        int,
        Doc(
            "count",
            (
                "requests the listener interrupted (--barge-in): ok, and left out of the latency, throughput "
                "and tail figures"
            ),
        ),
    ]
    cancel_to_quiet_ms: Annotated[Dist | None, Doc("ms", "cancelled requests: the cancel to quiet")]
    integrity: Annotated[Integrity, Doc("", "the same text gives about the same audio at every step")]
    # the signal (audio.signal) and the ASR judge (audio.asr, --asr-model)
    leading_silence_ms: Annotated[Dist | None, Doc("ms", "audio before the first sound")]
    trailing_silence_ms: Annotated[Dist | None, Doc("ms", "audio after the last sound")]
    ttfa_audible_ms: Annotated[Dist | None, Doc("ms", "when the listener hears the first sound (the playback model)")]
    silent_rate: Annotated[float | None, Doc("", "share of the requests that failed with silent audio")]
    runaway_rate: Annotated[
        float | None,
        Doc(
            "",
            "share that ran away: at least twice the same text's length at the lowest step (a text heard "
            "once: audio per character over 5x the language's median)",
        ),
    ]
    truncated_rate: Annotated[
        float | None, Doc("", "share cut short: half the same text's length or less (heard once: under a fifth)")
    ]
    clipped_rate: Annotated[
        float | None, Doc("", "share of the checked answers with over 0.1 % of samples at full scale")
    ]
    speech: Annotated[SpeechStep | None, Doc("", "what the ASR judge heard (--asr-model); null when not judged")]
    little: Annotated[Little | None, Doc("", "Little's law over the window")]
    server_timing_ms: Annotated[dict[str, Stage], Doc("ms", "per Server-Timing stage", key="stage name")]
    latency_by_tier_ms: Annotated[dict[str, Tier], Doc("ms", "per text tier", key="tier")]
    latency_by_voice_ms: Annotated[dict[str, Tier], Doc("ms", "per voice the requests named", key="voice")]
    latency_by_language_ms: Annotated[dict[str, Tier], Doc("ms", "per language the requests named", key="language")]
    errors: Annotated[list[Error], Doc("", "the commonest errors")]
    server: Annotated[ResourceAggregate | None, Doc("", "the server's resources")]
    client: Annotated[ResourceAggregate | None, Doc("", "the load generator's resources")]
    steps: NotRequired[Annotated[list[int], Doc("", "level: the steps pooled")]]
    repeats: NotRequired[Annotated[int, Doc("count", "level: how many")]]
    spread: NotRequired[Annotated[Spread | None, Doc("", "level tested more than once: the spread between repeats")]]
    # open loop
    rate: NotRequired[Annotated[float, Doc("req/s", "open loop: the offered rate")]]
    speed: NotRequired[Annotated[float | None, Doc("x", "trace replay: the rate as a speed of the trace")]]
    offered_rps: NotRequired[
        Annotated[
            float,
            Doc("req/s", "trace replay: what the settled window replayed, per second (throughput_ratio is over it)"),
        ]
    ]
    dropped: NotRequired[Annotated[int, Doc("count", "open loop: arrivals not sent")]]
    offered: NotRequired[Annotated[int, Doc("count", "open loop: arrivals scheduled")]]
    throughput_ratio: NotRequired[Annotated[float | None, Doc("", "open loop: throughput / rate")]]
    inflight: NotRequired[Annotated[Inflight, Doc("", "open loop")]]
    sched_wait_ms: NotRequired[Annotated[Dist | None, Doc("ms", "open loop: what a caller who arrived on time waited")]]
    send_lag_ms: NotRequired[Annotated[Dist | None, Doc("ms", "open loop: the generator's lateness in sending")]]
    growth: NotRequired[Annotated[Growth, Doc("", "open loop: whether the queue kept growing")]]
    voices: NotRequired[Annotated[int, Doc("count", "voice sweep: the distinct voices the step drew from")]]


STEP_SUMMARY = table(StepSummary)


class KneeMethods(TypedDict):
    """``knee.methods``: the step each method names (concurrency, or the rate in an open-loop run).
    Each is there where its method applies (a streamed run judges underruns and TTFA, an open-loop
    run its own methods, --asr-model the speech), null where it names no step."""

    latency_vs_lowest: NotRequired[Annotated[float | None, Doc("", "")]]
    failures: NotRequired[Annotated[float | None, Doc("", "")]]
    latency_vs_previous: NotRequired[Annotated[float | None, Doc("", "")]]
    throughput_efficiency: NotRequired[Annotated[float | None, Doc("", "")]]
    kneedle: NotRequired[Annotated[float | None, Doc("", "")]]
    piecewise: NotRequired[Annotated[float | None, Doc("", "")]]
    underruns: NotRequired[Annotated[float | None, Doc("", "")]]
    ttfa_vs_lowest: NotRequired[Annotated[float | None, Doc("", "")]]
    throughput_shortfall: NotRequired[Annotated[float | None, Doc("", "")]]
    latency_growing: NotRequired[Annotated[float | None, Doc("", "")]]
    speech: NotRequired[Annotated[float | None, Doc("", "")]]
    signal: NotRequired[Annotated[float | None, Doc("", "")]]
    similarity: NotRequired[Annotated[float | None, Doc("", "")]]
    mos: NotRequired[Annotated[float | None, Doc("", "")]]


class Knee(TypedDict):
    """``knee``: the level where the service stops scaling, and what each method says."""

    concurrency: Annotated[int | None, Doc("users", "the knee, or null; open loop: null")]
    index: Annotated[int | None, Doc("", "into the levels")]
    methods: Annotated[KneeMethods, Doc("", "")]
    agree: Annotated[list[str], Doc("", "the methods naming the knee")]
    rules: Annotated[list[str], Doc("", "the methods that set it")]
    streamed: Annotated[bool, Doc("", "judged on playback (underruns, TTFA)")]
    inflation: NotRequired[Annotated[list[float | None], Doc("", "each level's latency over the lowest's")]]
    inflation_basis: NotRequired[Annotated[str, Doc("", "'latency' or 'ttfa'")]]
    efficiency: NotRequired[Annotated[list[float | None], Doc("", "throughput per user over the lowest's")]]
    ttfa_floor_ms: NotRequired[Annotated[float | None, Doc("ms", "")]]
    ttfa_basis: NotRequired[
        Annotated[
            str,
            Doc(
                "",
                (
                    "streamed: what the TTFA rule judged, ttfa_audible_ms (the first sound heard) where every "
                    "step has it, else ttfa_ms"
                ),
            ),
        ]
    ]
    silence_first: NotRequired[
        Annotated[
            bool,
            Doc(
                "",
                (
                    "streamed: the knee is the first sound heard coming later (leading silence) while the first"
                    " audio came as early"
                ),
            ),
        ]
    ]
    untimed_stream: NotRequired[Annotated[bool, Doc("", "streamed, but no stream could be timed")]]
    speech_rise: NotRequired[
        Annotated[
            list[SpeechRise | None],
            Doc(
                "",
                (
                    "--asr-model: each level's rise in error rate over the lowest's, paired by text (null where"
                    " too few pairs)"
                ),
            ),
        ]
    ]
    speech_first: NotRequired[Annotated[bool, Doc("", "--asr-model: the speech knee came before any latency knee")]]
    signal_first: NotRequired[
        Annotated[
            bool,
            Doc(
                "",
                "the signal knee (runaways, truncated answers or length mismatches rising with load) came "
                "before any latency or failure knee",
            ),
        ]
    ]
    similarity_drop: NotRequired[
        Annotated[
            list[ListenDrop | None],
            Doc(
                "",
                "listening: each level's drop in speaker similarity from the lowest's, paired by text (null "
                "where too few pairs)",
            ),
        ]
    ]
    mos_drop: NotRequired[
        Annotated[
            list[ListenDrop | None],
            Doc("", "listening: each level's drop in naturalness (DNSMOS OVRL) from the lowest's, paired by text"),
        ]
    ]
    speech_changed: NotRequired[
        Annotated[list[str], Doc("", "--asr-model: what the speech knee heard change: speech, similarity, mos")]
    ]
    rate: NotRequired[Annotated[float | None, Doc("req/s", "open loop: the knee's rate")]]
    voices: NotRequired[
        Annotated[
            int | None,
            Doc("count", "voice sweep: the knee's number of distinct voices (concurrency: the one it ran at)"),
        ]
    ]
    axis: NotRequired[Annotated[str, Doc("", "open loop: 'rate'; voice sweep: 'voices'")]]


KNEE = table(Knee)

SloVerdict = TypedDict(
    "SloVerdict",
    {
        "concurrency": Annotated[int, Doc("users", "open loop: 0")],
        "rate": NotRequired[Annotated[float | None, Doc("req/s", "open loop: the offered rate judged")]],
        "step": Annotated[int | None, Doc("", "null for a pooled level")],
        "steps": NotRequired[Annotated[list[int], Doc("", "level: the steps judged together")]],
        "phase": NotRequired[Annotated[str | None, Doc("", "by_step")]],
        "repeat": NotRequired[Annotated[int | None, Doc("count", "by_step")]],
        "pass": Annotated[bool | None, Doc("", "true, false, or null when inconclusive")],
        "failed": Annotated[list[str], Doc("", "")],
        "inconclusive": Annotated[list[str], Doc("", "")],
        "values": Annotated[dict[str, float | None], Doc("", "each term's figure", key="SLO term")],
        "intervals": NotRequired[
            Annotated[
                dict[str, list[float | None]],
                Doc("", "the 95% interval [lo, hi] of each term's figure that has one", key="SLO term"),
            ]
        ],
        "more_requests": Annotated[int | None, Doc("count", "requests still needed to decide")],
        "voices": NotRequired[Annotated[int, Doc("count", "voice sweep: the level's number of voices")]],
    },
)
SloVerdict.__doc__ = """One level's (or step's) SLO verdict (``slo.steps``, ``slo.by_step``)."""


class Slo(TypedDict):
    """``slo``: each level and step judged against the SLO, and the highest level meeting it."""

    spec: Annotated[str, Doc("", "")]
    steps: Annotated[list[SloVerdict], Doc("", "one verdict per level")]
    by_step: Annotated[list[SloVerdict], Doc("", "one verdict per executed step")]
    max_concurrency: Annotated[
        int | None, Doc("users", "largest level meeting it with every lower one; open loop: null")
    ]
    max_rate: NotRequired[
        Annotated[float | None, Doc("req/s", "open loop: the highest offered rate meeting it with every lower one")]
    ]
    max_voices: NotRequired[
        Annotated[int | None, Doc("count", "voice sweep: the most voices meeting it with every fewer tested one")]
    ]
    max_speed: NotRequired[Annotated[float | None, Doc("x", "trace replay: max_rate as a speed of the trace")]]


SLO = table(Slo)


class DiagnosisKind(StrEnum):
    """``diagnosis.kind``: what bends the service at the knee (:mod:`analysis.diagnosis` says in
    which order they are checked; a voice sweep and the ASR judge add theirs). A member is its
    name as a string, so it reads, compares and serialises as one."""

    NO_KNEE = "no_knee"  # no step broke
    MEMORY_BOUND = "memory_bound"  # GPU memory near full, out-of-memory errors, memory not returning
    CLIENT_BOUND = "client_bound"  # the load generator itself saturated (its CPU, or Little's law)
    RATE_LIMITED = "rate_limited"  # 429/503 and Retry-After rising
    SERVER_ERRORS = "server_errors"  # failures that are not throttling
    CLIENT_IO = "client_io"  # writing or joining the audio rising while the wait is flat
    QUEUEING = "queueing"  # requests queue, and without server samples the cause is unknown
    COMPUTE_BOUND = "compute_bound"  # queueing with the server's GPU or CPU saturated
    CONCURRENCY_LIMIT = "concurrency_limit"  # queueing while the server's resources are not saturated
    VOICE_CACHE = "voice_cache"  # a voice sweep: latency rising with the number of distinct voices
    SPEECH_DEGRADED = "speech_degraded"  # the ASR judge hears the words go wrong before latency bends


class Diagnosis(TypedDict):
    """``diagnosis``: what bends the service at the knee, with the evidence."""

    kind: Annotated[
        DiagnosisKind,
        Doc(
            "",
            (
                "no_knee, memory_bound, client_bound, rate_limited, server_errors, client_io, queueing, "
                "compute_bound, concurrency_limit, voice_cache, speech_degraded"
            ),
        ),
    ]
    evidence: Annotated[list[str], Doc("", "sentences with the numbers")]
    resource_data: Annotated[bool, Doc("", "resource samples were there to judge by")]
    stage: NotRequired[
        Annotated[
            str | None,
            Doc("", "a server with stages: the stage that broke first (its label's value), null where none stood out"),
        ]
    ]


class LittleLaw(TypedDict):
    """``little_law``: Little's law at the knee (or the highest step)."""

    concurrency: Annotated[int, Doc("users", "")]
    effective_concurrency: Annotated[float, Doc("users", "")]
    expected_concurrency: Annotated[float, Doc("users", "")]
    ratio: Annotated[float, Doc("", "")]
    ok: Annotated[bool, Doc("", "within the tolerance of 1")]


class Usl(TypedDict):
    """``usl``: the Universal Scalability Law fitted to throughput over concurrency."""

    lambda_rps: Annotated[float, Doc("req/s", "")]
    sigma: Annotated[float, Doc("", "contention")]
    kappa: Annotated[float, Doc("", "coherency")]
    r2: Annotated[float | None, Doc("", "null where the throughputs do not vary")]
    peak_concurrency: Annotated[float | None, Doc("users", "")]
    peak_throughput_rps: Annotated[float | None, Doc("req/s", "")]


USL = table(Usl)


class MemoryCreep(TypedDict):
    """``gpu_memory_creep``: GPU memory left above its pre-run level after the run."""

    host: Annotated[str, Doc("", "the host with the largest rise")]
    baseline_bytes: Annotated[float, Doc("bytes", "before the run")]
    after_run_bytes: Annotated[float, Doc("bytes", "")]
    rise_bytes: Annotated[float, Doc("bytes", "")]
    total_bytes: Annotated[float | None, Doc("bytes", "")]
    after_samples: Annotated[int, Doc("count", "")]


class Comparison(TypedDict):
    """A figure compared with the baseline run."""

    old: Annotated[float, Doc("", "")]
    new: Annotated[float, Doc("", "")]
    ratio: NotRequired[Annotated[float, Doc("", "")]]
    ratio_ci: NotRequired[Annotated[list[float | None], Doc("", "null: an end too few values bound")]]
    change: Annotated[float, Doc("", "")]
    p_value: Annotated[float | None, Doc("", "")]
    method: NotRequired[Annotated[str, Doc("", "")]]
    significant: Annotated[bool, Doc("", "")]
    regression: Annotated[bool, Doc("", "")]
    improvement: Annotated[bool, Doc("", "")]


class RegressionStep(TypedDict):
    """One level both runs tested, compared (``regression.steps``)."""

    concurrency: Annotated[int, Doc("users", "open loop: 0")]
    rate: NotRequired[Annotated[float, Doc("req/s", "open loop: the offered rate compared")]]
    requests: Annotated[list[int], Doc("count", "[baseline, this run]")]
    p50_ms: Annotated[Comparison | None, Doc("ms", "")]
    p95_ms: Annotated[Comparison | None, Doc("ms", "")]
    ttfa_p95_ms: Annotated[Comparison | None, Doc("ms", "")]
    throughput_rps: Annotated[Comparison | None, Doc("req/s", "")]
    error_rate: Annotated[Comparison | None, Doc("", "")]
    mos_mean: NotRequired[
        Annotated[Comparison | None, Doc("", "listened to in both runs: naturalness (DNSMOS OVRL), paired by text")]
    ]
    similarity_ref_mean: NotRequired[
        Annotated[
            Comparison | None, Doc("", "listened to in both runs: similarity to the reference voice, paired by text")
        ]
    ]
    regression: Annotated[bool, Doc("", "")]
    improvement: Annotated[bool, Doc("", "")]


class BaselineLevel(TypedDict):
    """One level of the baseline's curve (``regression.baseline.levels``)."""

    concurrency: Annotated[int, Doc("users", "open loop: 0")]
    rate: NotRequired[Annotated[float, Doc("req/s", "open loop")]]
    p50_ms: Annotated[float | None, Doc("ms", "")]
    p95_ms: Annotated[float | None, Doc("ms", "")]
    p95_ci: Annotated[list[float | None] | None, Doc("ms", "the p95's 95 % interval [lo, hi]")]
    throughput_rps: Annotated[float | None, Doc("req/s", "")]
    error_rate: Annotated[float | None, Doc("", "")]


class Baseline(TypedDict):
    """The baseline run compared against (``regression.baseline``)."""

    run_id: Annotated[str, Doc("", "")]
    path: Annotated[str, Doc("", "")]
    levels: Annotated[list[BaselineLevel], Doc("", "the baseline's curve")]


class Regression(TypedDict):
    """``regression`` (--baseline): this run against a baseline, level by level."""

    baseline: Annotated[Baseline, Doc("", "")]
    tolerance: Annotated[float, Doc("", "relative change let pass")]
    alpha: Annotated[float, Doc("", "significance level")]
    steps: Annotated[list[RegressionStep], Doc("", "one per concurrency both runs tested")]
    regressed: Annotated[list[float], Doc("users", "concurrencies that regressed (open loop: offered rates)")]
    compared: Annotated[list[float], Doc("users", "(open loop: offered rates)")]
    warnings: Annotated[
        list[str],
        Doc("", "each difference in what made the runs (corpus, options, tts-knee, host, server), the corpus first"),
    ]
    verdict: Annotated[str, Doc("", "in words")]


class Require(TypedDict):
    """``require`` (--require): whether the claim at N holds, and the exit status it calls for."""

    concurrency: Annotated[int, Doc("users", "N of --require; open loop: 0")]
    rate: NotRequired[Annotated[float, Doc("req/s", "open loop: R of --require R/s")]]
    speed: NotRequired[Annotated[float, Doc("x", "trace replay: S of --require Sx (rate is what it offers)")]]
    voices: NotRequired[Annotated[int, Doc("count", "voice sweep: N of --require, a number of voices")]]
    holds: Annotated[bool, Doc("", "")]
    exit: Annotated[int, Doc("", "the exit status it calls for")]
    claim: Annotated[str | None, Doc("", "the claim at N, in words")]
    reason: Annotated[str, Doc("", "")]


# ---- soak (--soak): drift over one level held for long (analysis.soak)
class SoakWindow(TypedDict):
    """One window of a soak (``soak.windows``)."""

    start: Annotated[float, Doc("unix s", "")]
    end: Annotated[float, Doc("unix s", "")]
    requests: Annotated[int, Doc("count", "settled requests sent in it")]
    ok: Annotated[int, Doc("count", "")]
    failed: Annotated[int, Doc("count", "")]
    error_rate: Annotated[float | None, Doc("", "failed / requests")]
    throughput_rps: Annotated[float, Doc("req/s", "successful completions inside it per second")]
    p50_ms: Annotated[float | None, Doc("ms", "latency of the successful ones (open loop: from the schedule)")]
    p95_ms: Annotated[float | None, Doc("ms", "")]
    ttfa_p95_ms: NotRequired[Annotated[float | None, Doc("ms", "streamed runs")]]
    server_rss_bytes: Annotated[
        dict[str, float], Doc("bytes", "the watched server process, median of the samples", key="host")
    ]
    gpu_mem_bytes: Annotated[dict[str, float], Doc("bytes", "the server's fullest GPU, median", key="host")]
    client_rss_bytes: Annotated[
        dict[str, float], Doc("bytes", "the load generator's processes (master, workers), median", key="host")
    ]


class SoakTrend(TypedDict):
    """One figure's trend over a soak's windows (``soak.trends``)."""

    figure: Annotated[str, Doc("", "a window figure: p50_ms, p95_ms, throughput_rps, server_rss_bytes …")]
    host: Annotated[str | None, Doc("", "for a figure per host")]
    unit: Annotated[str, Doc("", "")]
    windows: Annotated[int, Doc("count", "windows with the figure")]
    first: Annotated[float, Doc("", "its value in the first window")]
    last: Annotated[float, Doc("", "in the last")]
    steady_after_s: Annotated[float, Doc("s", "where the warm-up ends: the trend is judged from there on")]
    slope_per_min: Annotated[float, Doc("", "Theil-Sen slope, in the figure's unit per minute")]
    slope_ci: Annotated[list[float], Doc("", "its 95% interval [lo, hi]")]
    p_value: Annotated[float | None, Doc("", "Mann-Kendall test")]
    drift: Annotated[bool, Doc("", "it drifts the bad way, significantly and materially")]
    verdict: Annotated[str | None, Doc("", "the drift in one sentence")]


class Soak(TypedDict):
    """``soak`` (--soak): drift over the one level held for long (analysis.soak)."""

    step: Annotated[int, Doc("", "the soak's step")]
    concurrency: Annotated[int, Doc("users", "the level held (open loop: 0)")]
    rate: Annotated[float | None, Doc("req/s", "open loop: the rate held")]
    start: Annotated[float | None, Doc("unix s", "its settled span")]
    end: Annotated[float | None, Doc("unix s", "")]
    duration_s: Annotated[float | None, Doc("s", "")]
    window_s: Annotated[float | None, Doc("s", "each window's length")]
    windows: Annotated[list[SoakWindow], Doc("", "")]
    trends: Annotated[list[SoakTrend], Doc("", "one per figure (and host)")]
    drift: Annotated[list[str], Doc("", "the verdict lines, one per drifting figure")]
    method: Annotated[str, Doc("", "how a trend is judged")]


class SummaryRun(TypedDict):
    """``run``: run.json's description of the run, and its path."""

    run_id: Annotated[str, Doc("", "")]
    path: Annotated[str, Doc("", "the run directory read")]
    start: Annotated[float | None, Doc("unix s", "")]
    end: Annotated[float | None, Doc("unix s", "")]
    in_progress: Annotated[bool, Doc("", "run.json has no end yet")]
    target: Annotated[str | None, Doc("", "")]
    mode: Annotated[str, Doc("", "how load was offered (runformat.MODES), as RunDir.mode reads it")]
    options: Annotated[dict[str, object] | None, Doc("", "", of=RUN_OPTIONS)]
    workers: Annotated[list[WorkerEntry] | None, Doc("", "")]
    collectors: Annotated[list[CollectorEntry] | None, Doc("", "")]
    versions: Annotated[Versions | None, Doc("", "")]
    provenance: Annotated[Provenance | None, Doc("", "run.json's: what made the run; null before tts-knee recorded it")]
    settle_s: Annotated[float | None, Doc("s", "")]
    run_json_error: Annotated[str | None, Doc("", "why run.json could not be read")]
    audio_missing: Annotated[
        dict[str, int] | None, Doc("count", "run.json's: audio files not written in time, by why", key="audio_file")
    ]


class Records(TypedDict):
    """``records``: what was read of requests.jsonl."""

    lines: Annotated[int, Doc("count", "lines of requests.jsonl read")]
    attempts: Annotated[int, Doc("count", "attempt records among them")]


RECORDS = table(Records)


class PerFile(TypedDict):
    """A count per file of the run directory (``bad_lines``, ``incomplete_last_line``)."""

    requests: Annotated[bool | int, Doc("", "requests.jsonl")]
    resources: Annotated[bool | int, Doc("", "resources.jsonl")]


class Orphaned(TypedDict):
    """``barge_in``: the listener's interruptions (``--barge-in``) and what they cost the server."""

    per_cancel_s: Annotated[float | None, Doc("s", "server work after each cancel that no heard utterance explains")]
    total_s: Annotated[float, Doc("s", "the same, over the run")]
    method: Annotated[str, Doc("", "how it was estimated")]
    series: Annotated[str, Doc("", "the server's series it was read from")]
    samples: Annotated[int, Doc("count", "server samples read")]
    uncertainty_s: NotRequired[
        Annotated[float, Doc("s", "from the process's CPU: the 95 % interval of per_cancel_s (±)")]
    ]
    busy_scale: NotRequired[
        Annotated[
            float,
            Doc(
                "",
                (
                    "from the process's CPU: the fitted time the server went on with an abandoned request, as a"
                    " share of a heard one's of its text"
                ),
            ),
        ]
    ]


class HangupWork(TypedDict):
    """``hangups``: requests the client gave up on at --request-timeout, and the work they left the server."""

    per_hangup_s: Annotated[float, Doc("s", "CPU-seconds the server spent on each hang-up beyond the part heard")]
    uncertainty_s: Annotated[float, Doc("s", "the 95 % interval of per_hangup_s (±)")]
    total_s: Annotated[float, Doc("s", "the same, over the run")]
    method: Annotated[str, Doc("", "how it was estimated")]
    series: Annotated[str, Doc("", "the series it was read from")]
    samples: Annotated[int, Doc("count", "server samples read")]
    busy_scale: Annotated[
        float, Doc("", "the fitted time the server went on with a hang-up, as a share of a heard request's of its text")
    ]


class Hangups(TypedDict):
    """``hangups``: requests the client gave up on at --request-timeout, and the work they left the server."""

    timed_out: Annotated[int, Doc("count", "attempts the client abandoned at --request-timeout, every phase")]
    orphaned_work_s: Annotated[HangupWork | None, Doc("s", "null: too few, or not measurable (note says why)")]
    note: Annotated[str | None, Doc("", "why orphaned_work_s is null")]


class BargeIn(TypedDict):
    """``barge_in``: the listener's interruptions (--barge-in) and what they cost the server."""

    fraction: Annotated[float, Doc("", "--barge-in: the share of utterances the listener interrupts")]
    cancel_by: Annotated[str | None, Doc("", "--cancel-by")]
    cancelled: Annotated[int, Doc("count", "cancelled requests, settled, every step")]
    unacknowledged: Annotated[int, Doc("count", "cancels whose acknowledgement never came within the bounded wait")]
    cancel_to_quiet_ms: Annotated[Dist | None, Doc("ms", "the cancel to the last audio, or to its acknowledgement")]
    audio_after_cancel_ms: Annotated[Dist | None, Doc("ms", "audio that still arrived after each cancel")]
    orphaned_work_s: Annotated[
        Orphaned | None,
        Doc(
            "s",
            (
                "from the server's running-requests series, else from a collector's watch on its process's CPU;"
                " null without either"
            ),
        ),
    ]
    orphaned_note: NotRequired[
        Annotated[str | None, Doc("", "why orphaned_work_s is null, where the CPU could not tell")]
    ]


class CapacityAt(TypedDict):
    """The recommended level a capacity is read at (``capacity.at``)."""

    concurrency: Annotated[
        int | None, Doc("users", "the recommended concurrency (open loop: the one the rate implies)")
    ]
    rate: NotRequired[Annotated[float | None, Doc("req/s", "open loop: the recommended rate")]]
    voices: NotRequired[Annotated[int | None, Doc("count", "voice sweep: the recommended number of voices")]]


class CapacityPlan(TypedDict):
    """``capacity.plan`` (--plan-for): the replicas the demand needs."""

    demand: Annotated[float | str, Doc("", "--plan-for as given: N concurrent requests, or N/s")]
    per_s: Annotated[bool, Doc("", "the demand is a rate")]
    headroom: Annotated[float, Doc("", "--headroom: the share of a replica's capacity left unplanned")]
    per_replica: Annotated[
        float | None,
        Doc("", "what one replica carried at the recommendation: its concurrency, or its req/s for a rate"),
    ]
    replicas: Annotated[
        int | None, Doc("count", "ceil(demand / (per_replica * (1 - headroom))); null: nothing carried")
    ]


class CapacityMemory(TypedDict):
    """``capacity.gpu_memory``: GPU memory per added stream, fitted over the levels before the knee
    (analysis.capacity.memory_fit), and what the recommended concurrency needs."""

    levels: Annotated[list[int], Doc("users", "the concurrencies fitted: each one's peak used GPU memory")]
    per_stream_bytes: Annotated[float, Doc("bytes", "the Theil-Sen slope: memory per added stream")]
    base_bytes: Annotated[float, Doc("bytes", "the line at no stream")]
    at_recommended_bytes: Annotated[float | None, Doc("bytes", "the line at the recommended concurrency")]
    total_bytes: Annotated[float | None, Doc("bytes", "the GPU's memory (null: not reported)")]
    headroom_bytes: Annotated[float | None, Doc("bytes", "total_bytes - at_recommended_bytes")]
    fills_at: Annotated[
        float | None, Doc("users", "the concurrency at which the line reaches total_bytes (null: it does not rise)")
    ]


class Capacity(TypedDict):
    """``capacity``: the recommendation in replicas and money (analysis.capacity)."""

    at: Annotated[CapacityAt | None, Doc("", "the recommended level read (null: none recommended)")]
    throughput_rps: Annotated[float | None, Doc("req/s", "one replica at the recommendation")]
    chars_per_s: Annotated[float | None, Doc("chars/s", "")]
    audio_s_per_s: Annotated[float | None, Doc("", "audio seconds per wall second (rtfx)")]
    utterances_per_hour: Annotated[float | None, Doc("count", "")]
    mchars_per_hour: Annotated[float | None, Doc("", "millions of characters an hour")]
    cost_per_hour: Annotated[float | None, Doc("per h", "--cost-per-hour: a replica's price")]
    cost_per_million_chars: Annotated[
        float | None, Doc("", "the price over the characters carried an hour, in millions")
    ]
    cost_per_audio_hour: Annotated[float | None, Doc("", "the price over the hours of audio made an hour")]
    plan: Annotated[CapacityPlan | None, Doc("", "with --plan-for")]
    gpu_memory: Annotated[
        CapacityMemory | None,
        Doc("", "GPU memory per added stream (null: no two levels with GPU memory before the knee, or no concurrency)"),
    ]
    text: Annotated[str | None, Doc("", "the whole in a few sentences")]


CAPACITY = table(Capacity)


class TextReuse(TypedDict):
    """``text_reuse``: first and later sends of a text compared, an answer cache (analysis.reuse)."""

    pairs: Annotated[int, Doc("count", "texts repeated within the step they were first sent in")]
    first_ms: Annotated[float | None, Doc("ms", "median of their first times (TTFA for streams, else the wait)")]
    repeat_ms: Annotated[float | None, Doc("ms", "median of their repeats' median times")]
    ratio: Annotated[float | None, Doc("", "median of repeat over first")]
    faster_share: Annotated[float | None, Doc("", "share of the texts faster the second time")]
    caches: Annotated[bool | None, Doc("", "the server caches its answers; null: too few repeats to tell")]
    note: Annotated[str, Doc("", "the verdict in one sentence")]


TEXT_REUSE = table(TextReuse)


class Outcome(StrEnum):
    """What became of a request, judged by its final attempt (:func:`analysis.probe.outcome`): the
    probe counts its requests by these (``PROBE_LEVEL``)."""

    AUDIO = "audio"  # answered with audio
    REFUSED = "refused"  # a 4xx (or a gRPC code that reads as one)
    SERVER_ERROR = "server_error"  # a 5xx other than 504
    TIMEOUT = "timeout"  # no answer within --request-timeout, or a 504
    SILENT = "silent"  # audio with no sound in it
    ERROR = "error"  # failed otherwise: a reset connection, a body that is not audio


# ---- the hostile-text probe (--probe-texts): what the server did per class (analysis.probe)
class ProbeOutcomes(TypedDict):
    """A probed class's requests per :class:`Outcome` (``probe.classes[].outcomes``)."""

    audio: Annotated[int, Doc("count", "requests answered with audio")]
    refused: Annotated[int, Doc("count", "a 4xx (or a gRPC code that reads as one)")]
    server_error: Annotated[int, Doc("count", "a 5xx other than 504")]
    timeout: Annotated[int, Doc("count", "no answer within --request-timeout, or a 504")]
    silent: Annotated[int, Doc("count", "audio with no sound in it")]
    error: Annotated[int, Doc("count", "failed otherwise: a reset connection, a body that is not audio")]


class ProbeLevel(ProbeOutcomes):
    """The same at one probe level (``probe.classes[].by_concurrency``)."""

    concurrency: Annotated[int, Doc("users", "a probe level: 1, then the recommended concurrency")]


PROBE_LEVEL = table(ProbeLevel)
ProbeClass = TypedDict(
    "ProbeClass",
    {
        "class": Annotated[str, Doc("", "one of runformat.probe.CLASSES")],
        "what": Annotated[str, Doc("", "the class in words")],
        "requests": Annotated[int, Doc("count", "its requests at every probe level, each by its final attempt")],
        "outcomes": Annotated[ProbeOutcomes, Doc("", "requests per outcome, at every level")],
        "by_concurrency": Annotated[list[ProbeLevel], Doc("", "the same per probe level")],
        "statuses": Annotated[
            dict[str, float], Doc("", "status -> requests, of those not answered with audio", key="status")
        ],
        "ms_p50": Annotated[float | None, Doc("ms", "send to done, retries included")],
        "ms_max": Annotated[float | None, Doc("ms", "")],
        "audio_s_p50": Annotated[float | None, Doc("s", "of those answered with audio")],
        "wrong_length": Annotated[
            int,
            Doc(
                "count",
                (
                    "audio of texts of 20 characters or more whose length per character is a runaway or "
                    "truncated one against the sweep's own pace"
                ),
            ),
        ],
        "error": Annotated[str | None, Doc("", "the first error message")],
        "needs_guarding": Annotated[
            bool, Doc("", "a server error, a timeout, silence, another failure or a wrong length")
        ],
        "verdict": Annotated[str, Doc("", "what the server did, in words")],
    },
)
ProbeClass.__doc__ = """One class of hostile text probed (``probe.classes``)."""


class Probe(TypedDict):
    """``probe`` (--probe-texts): what the server did per class of hostile text (analysis.probe)."""

    levels: Annotated[list[int], Doc("users", "the concurrencies probed")]
    classes: Annotated[list[ProbeClass], Doc("", "one per class probed")]
    needs_guarding: Annotated[list[str], Doc("", "the classes the server did not answer as a service should")]
    note: Annotated[str | None, Doc("", "the diagnosis's sentence on them; null: every class answered well")]


# ---- the spike (--spike): how the server took it and how long it took to recover (analysis.spike)
class SpikePart(TypedDict):
    """The spike step or the recovery step (``spike.during``, ``spike.after``)."""

    attempts: Annotated[int, Doc("count", "")]
    ok: Annotated[int, Doc("count", "")]
    shed: Annotated[int, Doc("count", "refused with 429 or 503")]
    failed: Annotated[int, Doc("count", "failed otherwise (5xx, resets, timeouts)")]
    shed_share: Annotated[float, Doc("", "shed / attempts")]
    failed_share: Annotated[float, Doc("", "failed / attempts")]
    shed_ms_p50: Annotated[float | None, Doc("ms", "how fast the refusals came")]
    p95_ms: Annotated[float | None, Doc("ms", "of the successful final attempts (TTFA in a streamed run)")]
    p95_x: Annotated[float | None, Doc("", "p95_ms over the p95 before the spike")]


class SpikeBehaviour(StrEnum):
    """``spike.behaviour``: how the server took the spike, the first that holds (see :mod:`analysis.spike`)."""

    CRASHED = "crashed"  # it stopped answering: the health probe failed, no answers came, or its process went
    SHEDS = "sheds"  # it refused fast (429/503) a share of the spike
    FAILS = "fails"  # other failures: 5xx, resets, timeouts
    QUEUES = "queues"  # nothing refused, latency grew
    ABSORBS = "absorbs"  # latency stayed within 1.2x of before


class Spike(TypedDict):
    """``spike`` (--spike): how the server took it and how long it took to recover (analysis.spike)."""

    factor: Annotated[float | None, Doc("", "FACTOR of --spike")]
    seconds: Annotated[float | None, Doc("s", "SECONDS of --spike")]
    level: Annotated[int, Doc("users", "the level before and after")]
    spike_level: Annotated[int, Doc("users", "ceil(level x factor)")]
    behaviour: Annotated[str, Doc("", "one of crashed, sheds, fails, queues, absorbs")]
    recovery_s: Annotated[
        float | None,
        Doc(
            "s",
            (
                "from the recovery's start until the p95 stays within 1.2x of before; null: did not recover "
                "within the run (or crashed)"
            ),
        ),
    ]
    basis: Annotated[str, Doc("", "the latency judged: wait_ms, or ttfa_ms in a streamed run")]
    before_p95_ms: Annotated[float | None, Doc("ms", "p95 of the settled step before the spike")]
    during: Annotated[SpikePart, Doc("", "the spike step")]
    after: Annotated[SpikePart | None, Doc("", "the recovery step")]
    process_gone_at: Annotated[
        float | None,
        Doc(
            "unix s",
            "when the server process a collector watched exited during it; null: it did not, or none was watched",
        ),
    ]
    text: Annotated[str, Doc("", "the verdict in one sentence (also the diagnosis's last evidence)")]


# ---- trace replay (--trace): the trace, its bursts per step, the answers as speeds (analysis.trace)
class TraceStepBurst(TypedDict):
    """A burst of the trace as one step replayed it (``trace.steps[].bursts``)."""

    start_s: Annotated[float, Doc("s", "the burst's place in the trace")]
    end_s: Annotated[float, Doc("s", "")]
    requests: Annotated[int, Doc("count", "the step's requests scheduled inside it")]
    failed: Annotated[int, Doc("count", "of them")]
    p95_ms: Annotated[float | None, Doc("ms", "their p95 latency from the schedule")]


class TraceRows(TypedDict):
    """What the rows a replay planned became (``trace.rows``, ``trace.steps[].rows``): each one
    due within its step was sent (and recorded), dropped, or is counted as not sent with why."""

    planned: Annotated[int, Doc("count", "rows due within the step's span")]
    sent: Annotated[int, Doc("count", "")]
    recorded: Annotated[int, Doc("count", "rows with a final record (sent ones the run kept)")]
    cut_by_run_end: Annotated[int, Doc("count", "of the recorded, those the run's end cut")]
    dropped: Annotated[int, Doc("count", "not sent: --max-inflight requests were in flight")]
    not_sent: Annotated[
        dict[str, int],
        Doc("count", "not sent for another reason: reason -> rows (runformat.schema.NOT_SENT_REASONS)", key="reason"),
    ]


class TraceStep(TypedDict):
    """One replay step of a trace (``trace.steps``)."""

    step: Annotated[int, Doc("", "")]
    speed: Annotated[float, Doc("x", "the step's rate over the trace's")]
    rate: Annotated[float, Doc("req/s", "the speed times the trace's mean rate")]
    offered_rps: Annotated[float | None, Doc("req/s", "what the step's settled window replayed, per second")]
    bursts: Annotated[list[TraceStepBurst], Doc("", "the trace's bursts this step replayed")]
    p95_outside_ms: Annotated[float | None, Doc("ms", "p95 latency from the schedule of the step's other requests")]
    replayed_rows: NotRequired[Annotated[TraceRows, Doc("", "what the step's rows became (runs that count them)")]]


class TracePart(Trace):
    """``trace``: the log replayed (run.json's ``trace``), its bursts per step, the answers as speeds."""

    steps: Annotated[list[TraceStep], Doc("", "one per replay step")]
    knee_speed: Annotated[float | None, Doc("x", "knee.rate as a speed")]
    recommended_speed: Annotated[float | None, Doc("x", "recommended_rate as a speed")]
    max_speed: NotRequired[Annotated[float | None, Doc("x", "with an SLO: slo.max_speed")]]
    replayed_rows: NotRequired[Annotated[TraceRows, Doc("", "what every step's rows became (runs that count them)")]]


class SliceSpeech(TypedDict):
    """What the judge heard of one slice at one level (``slices.by_language[].levels[].speech``)."""

    judged: Annotated[int, Doc("count", "the slice's clips judged at the level")]
    metric: Annotated[str, Doc("", "'wer' or 'cer'")]
    wer_mean: Annotated[float | None, Doc("", "mean word error rate (null when the metric is cer)")]
    cer_mean: Annotated[float | None, Doc("", "mean character error rate, where cer is the metric")]
    similarity_mean: Annotated[float | None, Doc("", "listening: mean speaker similarity (null: not listened)")]
    mos_mean: Annotated[float | None, Doc("", "listening: mean DNSMOS OVRL (null: not listened)")]


class SliceLevel(TypedDict):
    """One slice's figures at one level along the run's axis (``slices.by_language[].levels``)."""

    concurrency: Annotated[int, Doc("users", "the level's concurrency (open loop: 0)")]
    rate: NotRequired[Annotated[float | None, Doc("req/s", "open loop: the level's offered rate (all slices)")]]
    voices: NotRequired[Annotated[int | None, Doc("count", "voice sweep: the level's number of voices")]]
    requests: Annotated[int, Doc("count", "the slice's requests at the level")]
    failed: Annotated[int, Doc("count", "of them, failed")]
    error_rate: Annotated[float | None, Doc("", "failed / requests")]
    p50_ms: Annotated[float | None, Doc("ms", "the wait's p50 (latency_ms) of the slice's successful requests")]
    p95_ms: Annotated[float | None, Doc("ms", "the wait's p95")]
    ttfa_p95_ms: Annotated[float | None, Doc("ms", "streamed: time to first audio, p95 (null: not streamed)")]
    underrun_rate: Annotated[float | None, Doc("", "streamed: the share of the slice's streams that ran dry")]
    speech: Annotated[SliceSpeech | None, Doc("", "--asr-model: what the judge heard (null: nothing judged)")]


class Slice(TypedDict):
    """One language's (or voice's) requests, judged as a run of their own (analysis.slices)."""

    by: Annotated[str, Doc("", "'language' or 'voice'")]
    name: Annotated[str, Doc("", "the language (voice) the records name")]
    requests: Annotated[int, Doc("count", "the slice's requests over the judged levels")]
    judged: Annotated[
        bool, Doc("", "its knee was judged: every level has analysis.slices.MIN_REQUESTS requests at least")
    ]
    knee: Annotated[
        float | None,
        Doc("", "the level it breaks at, by the pooled knee's rules on the same axis (null: none, or not judged)"),
    ]
    rules: Annotated[list[str], Doc("", "the knee's methods that name that level")]
    held_to: Annotated[float | None, Doc("", "the highest level below its knee (the highest tested where none)")]
    broke: Annotated[str | None, Doc("", "what broke at its knee, in words")]
    levels: Annotated[list[SliceLevel], Doc("", "its figures per level, ascending")]


class Slices(TypedDict):
    """``slices``: a run whose requests name several languages (voices), per language (voice)."""

    axis: Annotated[str, Doc("", "the levels' axis: 'concurrency', 'rate' or 'voices' (knee.axis)")]
    knee: Annotated[float | None, Doc("", "the pooled knee along that axis, to compare with (null: none)")]
    held_to: Annotated[float | None, Doc("", "the highest pooled level below it (the highest tested where none)")]
    by_language: NotRequired[Annotated[list[Slice], Doc("", "one per language the records name, where 2 to 8")]]
    by_voice: NotRequired[
        Annotated[list[Slice], Doc("", "one per voice the records name, where 2 to 8 (not in a voice sweep)")]
    ]
    note: Annotated[
        str | None,
        Doc("", "where a slice breaks before the pooled knee: the sentence the diagnosis adds (null: none does)"),
    ]


class Judged(TypedDict):
    """``judge``: what the ASR judge heard of the run's clips, and how (analysis.speech.judged)."""

    heard: Annotated[
        list[str],
        Doc("", "what it heard of the clips: words (the error rate), voice (speaker similarity), sound (DNSMOS)"),
    ]
    not_heard: Annotated[
        str | None, Doc("", "why the voice and the sound were not heard, one sentence (null: they were)")
    ]
    kept: Annotated[int, Doc("count", "clips kept for tts-knee judge and not judged yet (--asr-keep)")]
    model: Annotated[str | None, Doc("", "the recogniser that judged (null: none yet, or not recorded)")]
    afterwards: Annotated[bool, Doc("", "judged after the run, by tts-knee judge")]
    text: Annotated[str, Doc("", "all of it in one sentence, as the verdict says it")]


class Summary(TypedDict):
    """``summary.json``: the analysis of a run, written by the dashboard."""

    run: Annotated[SummaryRun, Doc("", "run.json's description of the run, and its path")]
    records: Annotated[Records, Doc("count", "lines and attempts read")]
    bad_lines: Annotated[PerFile, Doc("count", "unparseable lines per file")]
    incomplete_last_line: Annotated[PerFile, Doc("", "per file")]
    steps: Annotated[list[StepSummary], Doc("", "one step summary per executed step, in run order")]
    in_progress_step: Annotated[
        InProgress | None, Doc("", "the live view's open step, which the verdict waits for (null: none)")
    ]
    levels: Annotated[list[StepSummary], Doc("", "one per tested concurrency, repeats pooled, closed steps only")]
    knee: Annotated[Knee, Doc("", "concurrency (or null) and methods; open loop: rate (or null) instead")]
    slo: Annotated[Slo | None, Doc("", "spec, steps, by_step, max_concurrency")]
    recommended_concurrency: Annotated[int | None, Doc("users", "")]
    recommendation: Annotated[str, Doc("", "the recommendation in words")]
    capacity: Annotated[Capacity, Doc("", "the recommendation in replicas and money (analysis.capacity)")]
    health: Annotated[Preflight | None, Doc("", "run.json's health probe after the run (null: none was made)")]
    text_reuse: Annotated[
        TextReuse, Doc("", "first and later sends of a text compared: an answer cache (analysis.reuse)")
    ]
    diagnosis: Annotated[Diagnosis, Doc("", "kind and evidence")]
    little_law: Annotated[list[LittleLaw] | None, Doc("", "")]
    usl: Annotated[Usl | None, Doc("", "Universal Scalability Law fit")]
    gpu_memory_baseline_bytes: Annotated[float | None, Doc("bytes", "")]
    gpu_memory_after_run_bytes: Annotated[float | None, Doc("bytes", "")]
    gpu_memory_creep: Annotated[MemoryCreep | None, Doc("", "")]
    server_timing_stages: Annotated[list[str], Doc("", "Server-Timing stage names seen")]
    recommended_rate: NotRequired[
        Annotated[
            float | None,
            Doc(
                "req/s", "open loop: the offered rate before the knee (recommended_concurrency is then what it implies)"
            ),
        ]
    ]
    dropped: NotRequired[Annotated[int, Doc("count", "open loop: arrivals not sent, all steps")]]
    cut_by_run_end: NotRequired[
        Annotated[int, Doc("count", "attempts still in flight when the run's drain ended, all steps")]
    ]
    recommended_voices: NotRequired[
        Annotated[
            int | None,
            Doc("count", "voice sweep: the number of distinct voices before the knee (with an SLO: slo.max_voices)"),
        ]
    ]
    barge_in: NotRequired[Annotated[BargeIn | None, Doc("", "with --barge-in")]]
    hangups: NotRequired[
        Annotated[Hangups, Doc("", "where the client gave up on requests and a collector watched the server process")]
    ]
    regression: NotRequired[Annotated[Regression | None, Doc("", "with --baseline")]]
    require: NotRequired[Annotated[Require | None, Doc("", "with --require")]]
    soak: NotRequired[Annotated[Soak, Doc("", "with --soak: drift over the level held")]]
    probe: NotRequired[Annotated[Probe, Doc("", "with --probe-texts: what the server did per class of hostile text")]]
    spike: NotRequired[Annotated[Spike, Doc("", "with --spike: how the server took it, and its recovery")]]
    trace: NotRequired[
        Annotated[TracePart, Doc("", "with --trace: the log replayed, its bursts per step, the answers as speeds")]
    ]
    slices: NotRequired[
        Annotated[Slices, Doc("", "where the requests name several languages (voices): each one's figures and knee")]
    ]
    judge: NotRequired[
        Annotated[Judged, Doc("", "--asr-model, --asr-keep: what the ASR judge heard of the clips, and how")]
    ]


SUMMARY = table(Summary)
