"""``summary.json``, written by the dashboard: every field, nested all the way down.

The definitions of the figures (what a window, a request or a stream counts) are in
``analysis.steps``; the tables here say what each key holds and in which unit, so that a
figure added to the analysis is declared here too or the strict check of the tests
(:func:`runformat.check.undeclared_keys`) fails.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: a member is its value as a string, as 3.11's StrEnum makes it
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__


from .fields import Field, Keyed
from .options import RUN_OPTIONS
from .schema import COLLECTOR, PREFLIGHT, PROVENANCE, TRACE as RUN_TRACE, VERSIONS, WORKER

_F = Field

#: A distribution of finite values: ``latency_ms``, ``ttfb_ms``, ``ttfa_ms`` … (null: none).
DIST: tuple[Field, ...] = (
    _F("count", "count", False, "values"),
    _F("mean", "", False, "in the unit of the figure"),
    _F("p50", "", False, "exact percentiles, numpy's linear interpolation"),
    _F("p90", "", False, ""),
    _F("p95", "", False, ""),
    _F("p99", "", False, ""),
    _F("max", "", False, ""),
    _F("p50_ci", "", False, "[lo, hi] of the median (an end too few values can bound is null)", optional=True),
    _F("p95_ci", "", False, "[lo, hi] of the p95", optional=True),
    _F("ci_method", "", True, "how the intervals were found", optional=True),
    _F("ci_n", "count", False, "values the intervals rest on", optional=True),
)
#: The tail of a distribution: ``underrun_ms``, ``gap_max_ms``, ``chunks``.
TAIL: tuple[Field, ...] = tuple(f for f in DIST if f.name in ("count", "mean", "p95", "max"))
#: A figure as NVIDIA's riva_tts_perf_client prints it (see ``analysis.steps``).
RIVA_STATS: tuple[Field, ...] = (
    _F("count", "count", False, "values pooled"),
    _F("avg", "ms", False, "the mean"),
    _F("p90", "ms", False, "sorted[int(0.90 n)], no interpolation"),
    _F("p95", "ms", False, "sorted[int(0.95 n)]"),
    _F("p99", "ms", False, "sorted[int(0.99 n)]"),
)
#: ``riva``: the perf client's latency figures over a step's streams.
RIVA: tuple[Field, ...] = (
    _F("first_audio_ms", "ms", True, "to the first audio (ttfa_ms), pooled over the streams", of=RIVA_STATS),
    _F(
        "chunk_ms",
        "ms",
        True,
        "between consecutive audio arrivals of a stream, the first excluded, pooled over the streams",
        of=RIVA_STATS,
    ),
)

#: A step's window: the span its figures are over.
WINDOW: tuple[Field, ...] = (
    _F("start", "unix s", True, "the step's start plus its settle time"),
    _F("end", "unix s", True, ""),
    _F("duration_s", "s", True, ""),
    _F("source", "", False, "'run.json', 'records' (steps inferred) or 'pooled'"),
    _F("settle_s", "s", True, ""),
    _F("open", "", False, "the step had no end yet"),
    _F("completions", "count", True, "final attempts that finished inside it"),
    _F("ok_completions", "count", True, "successful ones"),
    _F("spans", "unix s", False, "pooled level: its steps' [start, end] spans", optional=True),
)

#: A step still running (the live view): what its elapsed window gives so far.
OPEN_STEP: tuple[Field, ...] = (
    _F("elapsed_s", "s", True, "since the step's start, to the latest record"),
    _F("settle_s", "s", True, "where its window opens"),
    _F("settling", "", False, "its window has not opened yet: nothing is measured"),
    _F("completions", "count", False, "final attempts finished in its window so far"),
    _F("withheld", "", False, "the figures set to null: too few values for them yet (analysis.steps.OPEN_MIN_COUNT)"),
    _F("note", "", False, "why, in one sentence"),
)

#: The open step as the verdict names it.
IN_PROGRESS: tuple[Field, ...] = (
    _F("step", "", False, ""),
    _F("concurrency", "users", False, ""),
    _F("rate", "req/s", True, "open loop"),
    _F("voices", "count", True, "voice sweep"),
    _F("closed_steps", "", False, "the steps the verdict is from"),
    _F("note", "", False, "one sentence for the verdict box"),
)

#: One host's resource figures over a step's window.
HOST_AGGREGATE: tuple[Field, ...] = (
    _F("samples", "count", False, ""),
    _F("cpu_mean", "percent", True, ""),
    _F("cpu_max", "percent", True, ""),
    _F("busiest_core_mean", "percent", True, ""),
    _F("busiest_core_max", "percent", True, ""),
    _F("proc_cpu_mean", "percent", True, "the watched process tree, of one core"),
    _F("proc_cpu_max", "percent", True, ""),
    _F("gpu_util_mean", "percent", True, ""),
    _F("gpu_util_max", "percent", True, ""),
    _F("gpu_mem_peak_bytes", "bytes", True, ""),
    _F("gpu_mem_total_bytes", "bytes", True, ""),
    _F("gpu_power_mean_w", "W", True, ""),
)
#: A scraped series over a step's window.
SERIES_STATS: tuple[Field, ...] = (
    _F("mean", "", True, ""),
    _F("max", "", True, ""),
    _F("samples", "count", False, "samples that carried it"),
)
#: A server role (queue depth, running, batch size, KV cache) and the series that told it.
SERVER_ROLE: tuple[Field, ...] = (
    _F("series", "", False, "the series the role was read from"),
    _F("why", "", False, "how it got the role: a known server's name, an obvious ending, --server-role", optional=True),
) + SERIES_STATS
#: ``server`` and ``client``: a role's samples over the window, the highest of its hosts' figures.
RESOURCE_AGGREGATE: tuple[Field, ...] = HOST_AGGREGATE + (
    _F("hosts", "", False, "the hosts sampled"),
    _F("gpu_mem_fallback_bytes", "bytes", True, "server: GPU memory just after the step", optional=True),
    _F("metrics", "", True, "server: the scraped series", optional=True, of=Keyed("series", SERIES_STATS)),
    _F("metrics_left_out", "count", False, "server: series past the cap", optional=True),
    _F("server_roles", "", True, "server: the roles its series tell", optional=True, of=Keyed("role", SERVER_ROLE)),
    _F("by_host", "", False, "each host's own figures", of=Keyed("host", HOST_AGGREGATE)),
)

INTEGRITY_EXAMPLE: tuple[Field, ...] = (
    _F("text_id", "", True, ""),
    _F("expected_s", "s", False, "the text's reference audio"),
    _F("got_s", "s", False, ""),
)
INTEGRITY: tuple[Field, ...] = (
    _F("checked", "count", False, "successful attempts with audio and a reference"),
    _F("mismatched", "count", False, ""),
    _F("rate", "", True, "their share"),
    _F("examples", "", False, "a few mismatches", of=INTEGRITY_EXAMPLE),
)
LITTLE: tuple[Field, ...] = (
    _F("effective_concurrency", "users", False, "mean busy users over the window"),
    _F(
        "expected_concurrency",
        "users",
        False,
        "what the users should keep busy: concurrency x --contexts, less --think-time's share",
    ),
    _F("ratio", "", False, "effective / expected"),
    _F("window_s", "s", False, ""),
)
STAGE: tuple[Field, ...] = (
    _F("mean", "ms", False, ""),
    _F("p50", "ms", False, ""),
    _F("p95", "ms", False, ""),
)
TIER: tuple[Field, ...] = (
    _F("count", "count", False, ""),
    _F("p50", "ms", False, ""),
    _F("p95", "ms", False, ""),
)
ERROR: tuple[Field, ...] = (
    _F("error", "", False, "the error, one line"),
    _F("count", "count", False, ""),
)
STREAMS: tuple[Field, ...] = (
    _F("counted", "count", False, "streams that ended before the step did"),
    _F("cut_by_step_end", "count", False, "left out: they heard the next step's load"),
)
REPEAT: tuple[Field, ...] = (
    _F("step", "", False, ""),
    _F("phase", "", True, ""),
    _F("repeat", "count", True, ""),
    _F("p50_ms", "ms", True, ""),
    _F("p95_ms", "ms", True, ""),
    _F("throughput_rps", "req/s", True, ""),
    _F("ttfa_p95_ms", "ms", True, ""),
    _F("requests", "count", True, ""),
)
SPREAD: tuple[Field, ...] = (
    _F("by_repeat", "", False, "each repeat's own figures", of=REPEAT),
    _F("p50_ms", "ms", False, "[min, max] over the repeats", optional=True),
    _F("p95_ms", "ms", False, "", optional=True),
    _F("throughput_rps", "req/s", False, "", optional=True),
    _F("ttfa_p95_ms", "ms", False, "", optional=True),
)
GROWTH: tuple[Field, ...] = (
    _F("p50_thirds", "ms", True, "median sched_wait_ms in each third of the step"),
    _F("growing", "", True, "the queue kept growing through the step"),
    _F("slope_ms_per_s", "ms/s", True, ""),
)
INFLIGHT: tuple[Field, ...] = (
    _F("mean", "count", True, "requests in flight over the window"),
    _F("max", "count", True, ""),
)

ATTEMPTS_BY_NUMBER: tuple[Field, ...] = (
    _F("1", "count", False, "first attempts"),
    _F("2", "count", False, "second attempts"),
    _F("3+", "count", False, "the third and later"),
)

#: One level's paired rise in error rate (``knee.speech_rise``).
SPEECH_RISE: tuple[Field, ...] = (
    _F("pairs", "count", False, "texts judged at both levels"),
    _F("mean", "", False, "mean rise in error rate"),
    _F("ci", "", False, "[lo, hi]: its 95 % bootstrap interval"),
)
#: A judged clip quoted as an example (``speech.worst``).
SPEECH_EXAMPLE: tuple[Field, ...] = (
    _F("req_id", "", False, ""),
    _F("text_id", "", True, ""),
    _F("text", "", True, "the text sent"),
    _F("transcript", "", True, "what the judge heard"),
    _F("error", "", False, "its word (or character) error rate"),
    _F("clip", "", True, "the clip, relative to the run directory"),
)
#: A judged clip quoted for its voice (``speech.worst_similarity``).
SIMILARITY_EXAMPLE: tuple[Field, ...] = (
    _F("req_id", "", False, ""),
    _F("text_id", "", True, ""),
    _F("text", "", True, "the text sent"),
    _F("similarity", "", False, "its speaker similarity to the same text at the lowest level"),
    _F("similarity_ref", "", True, "to the voice's reference audio, where there is one"),
    _F("mos", "", True, "its predicted naturalness (DNSMOS OVRL)"),
    _F("clip", "", True, "the clip, relative to the run directory"),
)
#: One level's paired drop in similarity or naturalness (``knee.similarity_drop``, ``knee.mos_drop``).
LISTEN_DROP: tuple[Field, ...] = (
    _F("pairs", "count", False, "texts heard at both levels"),
    _F("mean", "", False, "mean drop from the lowest level (similarity: 1 - similarity; mos: in MOS points)"),
    _F("ci", "", False, "[lo, hi]: its 95 % bootstrap interval"),
)
#: What the ASR judge heard in one step (``speech``).
SPEECH_STEP: tuple[Field, ...] = (
    _F("metric", "", False, "'wer' or 'cer'"),
    _F("judged", "count", False, "clips judged"),
    _F(
        "not_judged",
        "count",
        False,
        "clips sent to the judge that it could not judge (undecodable, the judge behind or gone)",
    ),
    _F("wer_mean", "", True, "mean word error rate (null when the metric is cer)"),
    _F("wer_p95", "", True, ""),
    _F("cer_mean", "", True, "mean character error rate, where cer is the metric"),
    _F("cer_p95", "", True, ""),
    _F("unintelligible", "count", False, "clips judged with an error rate over 0.5"),
    _F("worst", "", False, "the worst clips, worst first", of=SPEECH_EXAMPLE),
    _F(
        "similarity_mean",
        "",
        True,
        "--asr-listen: mean speaker similarity (cosine, audio.speaker) of the step's clips to the same "
        "texts' clips at the lowest level (1 at the lowest level itself)",
        optional=True,
    ),
    _F("similarity_p5", "", True, "--asr-listen: its 5th percentile (the least alike)", optional=True),
    _F(
        "similarity_ref_mean",
        "",
        True,
        "--asr-listen: mean similarity to the voice's reference audio; null without one",
        optional=True,
    ),
    _F("mos_mean", "", True, "--asr-listen: mean predicted naturalness, DNSMOS P.835 OVRL (1-5)", optional=True),
    _F("mos_p5", "", True, "--asr-listen: its 5th percentile", optional=True),
    _F("mos_sig_mean", "", True, "--asr-listen: mean DNSMOS SIG (the speech itself)", optional=True),
    _F("mos_bak_mean", "", True, "--asr-listen: mean DNSMOS BAK (the background: noise, clicks)", optional=True),
    _F(
        "not_listened",
        "count",
        True,
        "--asr-listen: judged clips whose similarity or mos is null (too short to embed or score)",
        optional=True,
    ),
    _F(
        "worst_similarity",
        "",
        False,
        "--asr-listen: the least alike clips, least first",
        optional=True,
        of=SIMILARITY_EXAMPLE,
    ),
)

#: One step (``steps``) or one tested level, repeats pooled (``levels``).
STEP_SUMMARY: tuple[Field, ...] = (
    _F("step", "", True, "null for a pooled level"),
    _F("concurrency", "users", False, "open loop: 0"),
    _F("planned_start", "unix s", True, "run.json's start"),
    _F("planned_end", "unix s", True, ""),
    _F("phase", "", True, "'grid', 'refine' or 'soak'"),
    _F("repeat", "count", True, ""),
    _F("window", "", False, "the span the figures are over", of=WINDOW),
    _F(
        "open",
        "",
        False,
        "a step still running: what its window gives so far (absent once closed)",
        of=OPEN_STEP,
        optional=True,
    ),
    _F("requests", "count", False, "logical requests (final attempts), settled"),
    _F("attempts", "count", False, ""),
    _F("ok", "count", False, ""),
    _F("failed", "count", False, ""),
    _F("cut_by_run_end", "count", False, "attempts the run's end cut (left out of every other figure)", optional=True),
    _F("error_rate", "", True, "failed / requests"),
    _F("attempt_failures", "count", False, ""),
    _F("attempt_failure_rate", "", True, ""),
    _F("throughput_rps", "req/s", True, "successful completions inside the window per second"),
    _F("completed_rps", "req/s", True, "every completion the same way"),
    _F("latency_ms", "ms", True, "wait_ms of the successful requests", of=DIST),
    _F("ttfb_ms", "ms", True, "", of=DIST),
    _F("write_ms", "ms", True, "", of=DIST),
    _F("concat_ms", "ms", True, "", of=DIST),
    _F("e2e_ms", "ms", True, "first attempt's t0 to the final attempt's end", of=DIST),
    _F("rtf", "", True, "", of=DIST),
    _F("audio_s_per_s", "", True, "audio seconds of the completions per second"),
    _F("retries", "count", False, "attempts past the first"),
    _F("attempts_by_number", "count", False, "attempts by their number", of=ATTEMPTS_BY_NUMBER),
    _F("throttled", "count", False, "429 and 503 attempts (and WebSocket closes 1013, try again later)"),
    _F("non_throttle_failures", "count", False, ""),
    _F(
        "status_counts",
        "count",
        False,
        "attempts by status: the HTTP status, or the gRPC code name ('conn_error': no answer)",
        of=Keyed("status"),
    ),
    _F("retry_after_s", "s", True, "", of=DIST),
    _F("backoff_ms", "ms", True, "", of=DIST),
    _F("streamed", "", False, "the run read its responses as streams"),
    _F("streams", "", False, "", of=STREAMS),
    _F("ttfa_ms", "ms", True, "time to first audio", of=DIST),
    _F("underrun_rate", "", True, "share of the streams that ran dry at least once"),
    _F("underrun_streams", "count", False, ""),
    _F("underrun_ms", "ms", True, "", of=TAIL),
    _F("gap_max_ms", "ms", True, "", of=TAIL),
    _F("chunks", "count", True, "", of=TAIL),
    _F("tail_ms", "ms", True, "text sent in pieces: the end of the text to the last audio", of=DIST),
    # Riva's figures, for a team comparing with NVIDIA's riva_tts_perf_client
    _F("riva", "", True, "streamed: first audio and chunk latency as the perf client prints them", of=RIVA),
    _F("rtfx", "", True, "audio seconds delivered per wall second (audio_s_per_s, by the perf client's name)"),
    _F("chars_per_s", "chars/s", True, "characters of the successful completions per second"),
    _F("utterances_per_hour", "count", True, "throughput_rps times 3600"),
    _F(
        "cancelled",
        "count",
        False,
        "requests the listener interrupted (--barge-in): ok, and left out of the latency, throughput and tail figures",
    ),
    _F("cancel_to_quiet_ms", "ms", True, "cancelled requests: the cancel to quiet", of=DIST),
    _F("integrity", "", False, "the same text gives about the same audio at every step", of=INTEGRITY),
    # the signal (audio.signal) and the ASR judge (audio.asr, --asr-model)
    _F("leading_silence_ms", "ms", True, "audio before the first sound", of=DIST),
    _F("trailing_silence_ms", "ms", True, "audio after the last sound", of=DIST),
    _F("ttfa_audible_ms", "ms", True, "when the listener hears the first sound (the playback model)", of=DIST),
    _F("silent_rate", "", True, "share of the requests that failed with silent audio"),
    _F(
        "runaway_rate",
        "",
        True,
        "share that ran away: at least twice the same text's length at the lowest step (a text heard "
        "once: audio per character over 5x the language's median)",
    ),
    _F("truncated_rate", "", True, "share cut short: half the same text's length or less (heard once: under a fifth)"),
    _F("clipped_rate", "", True, "share of the checked answers with over 0.1 % of samples at full scale"),
    _F("speech", "", True, "what the ASR judge heard (--asr-model); null when not judged", of=SPEECH_STEP),
    _F("little", "", True, "Little's law over the window", of=LITTLE),
    _F("server_timing_ms", "ms", False, "per Server-Timing stage", of=Keyed("stage name", STAGE)),
    _F("latency_by_tier_ms", "ms", False, "per text tier", of=Keyed("tier", TIER)),
    _F("latency_by_voice_ms", "ms", False, "per voice the requests named", of=Keyed("voice", TIER)),
    _F("latency_by_language_ms", "ms", False, "per language the requests named", of=Keyed("language", TIER)),
    _F("errors", "", False, "the commonest errors", of=ERROR),
    _F("server", "", True, "the server's resources", of=RESOURCE_AGGREGATE),
    _F("client", "", True, "the load generator's resources", of=RESOURCE_AGGREGATE),
    _F("steps", "", False, "level: the steps pooled", optional=True),
    _F("repeats", "count", False, "level: how many", optional=True),
    _F("spread", "", True, "level tested more than once: the spread between repeats", optional=True, of=SPREAD),
    # open loop
    _F("rate", "req/s", False, "open loop: the offered rate", optional=True),
    _F("speed", "x", True, "trace replay: the rate as a speed of the trace", optional=True),
    _F(
        "offered_rps",
        "req/s",
        False,
        "trace replay: what the settled window replayed, per second (throughput_ratio is over it)",
        optional=True,
    ),
    _F("dropped", "count", False, "open loop: arrivals not sent", optional=True),
    _F("offered", "count", False, "open loop: arrivals scheduled", optional=True),
    _F("throughput_ratio", "", True, "open loop: throughput / rate", optional=True),
    _F("inflight", "", False, "open loop", optional=True, of=INFLIGHT),
    _F("sched_wait_ms", "ms", True, "open loop: what a caller who arrived on time waited", optional=True, of=DIST),
    _F("send_lag_ms", "ms", True, "open loop: the generator's lateness in sending", optional=True, of=DIST),
    _F("growth", "", False, "open loop: whether the queue kept growing", optional=True, of=GROWTH),
    _F("voices", "count", False, "voice sweep: the distinct voices the step drew from", optional=True),
)

#: ``knee.methods``: the step each method names (concurrency, or the rate in an open-loop run).
#: Each is there where its method applies (a streamed run judges underruns and TTFA, an open-loop
#: run its own methods, --asr-model the speech), null where it names no step.
KNEE_METHODS: tuple[Field, ...] = tuple(
    _F(name, "", True, "", optional=True)
    for name in (
        "latency_vs_lowest",
        "failures",
        "latency_vs_previous",
        "throughput_efficiency",
        "kneedle",
        "piecewise",
        "underruns",
        "ttfa_vs_lowest",
        "throughput_shortfall",
        "latency_growing",
        "speech",
        "signal",
        "similarity",
        "mos",
    )
)
KNEE: tuple[Field, ...] = (
    _F("concurrency", "users", True, "the knee, or null; open loop: null"),
    _F("index", "", True, "into the levels"),
    _F("methods", "", False, "", of=KNEE_METHODS),
    _F("agree", "", False, "the methods naming the knee"),
    _F("rules", "", False, "the methods that set it"),
    _F("streamed", "", False, "judged on playback (underruns, TTFA)"),
    _F("inflation", "", False, "each level's latency over the lowest's", optional=True),
    _F("inflation_basis", "", False, "'latency' or 'ttfa'", optional=True),
    _F("efficiency", "", False, "throughput per user over the lowest's", optional=True),
    _F("ttfa_floor_ms", "ms", True, "", optional=True),
    _F(
        "ttfa_basis",
        "",
        False,
        "streamed: what the TTFA rule judged, ttfa_audible_ms (the first sound heard) "
        "where every step has it, else ttfa_ms",
        optional=True,
    ),
    _F(
        "silence_first",
        "",
        False,
        "streamed: the knee is the first sound heard coming later (leading silence) "
        "while the first audio came as early",
        optional=True,
    ),
    _F("untimed_stream", "", False, "streamed, but no stream could be timed", optional=True),
    _F(
        "speech_rise",
        "",
        False,
        "--asr-model: each level's rise in error rate over the lowest's, paired by text (null where too few pairs)",
        optional=True,
        of=SPEECH_RISE,
    ),
    _F("speech_first", "", False, "--asr-model: the speech knee came before any latency knee", optional=True),
    _F(
        "signal_first",
        "",
        False,
        "the signal knee (runaways, truncated answers or length mismatches rising with load) came "
        "before any latency or failure knee",
        optional=True,
    ),
    _F(
        "similarity_drop",
        "",
        False,
        "--asr-listen: each level's drop in speaker similarity from the lowest's, paired by text (null where "
        "too few pairs)",
        optional=True,
        of=LISTEN_DROP,
    ),
    _F(
        "mos_drop",
        "",
        False,
        "--asr-listen: each level's drop in naturalness (DNSMOS OVRL) from the lowest's, paired by text",
        optional=True,
        of=LISTEN_DROP,
    ),
    _F(
        "speech_changed",
        "",
        False,
        "--asr-model: what the speech knee heard change: wer, similarity, mos",
        optional=True,
    ),
    _F("rate", "req/s", True, "open loop: the knee's rate", optional=True),
    _F(
        "voices",
        "count",
        True,
        "voice sweep: the knee's number of distinct voices (concurrency: the one it ran at)",
        optional=True,
    ),
    _F("axis", "", False, "open loop: 'rate'; voice sweep: 'voices'", optional=True),
)

SLO_VERDICT: tuple[Field, ...] = (
    _F("concurrency", "users", False, "open loop: 0"),
    _F("rate", "req/s", True, "open loop: the offered rate judged", optional=True),
    _F("step", "", True, "null for a pooled level"),
    _F("steps", "", False, "level: the steps judged together", optional=True),
    _F("phase", "", True, "by_step", optional=True),
    _F("repeat", "count", True, "by_step", optional=True),
    _F("pass", "", True, "true, false, or null when inconclusive"),
    _F("failed", "", False, ""),
    _F("inconclusive", "", False, ""),
    _F("values", "", False, "each term's figure", of=Keyed("SLO term")),
    _F(
        "intervals",
        "",
        False,
        "the 95% interval [lo, hi] of each term's figure that has one",
        optional=True,
        of=Keyed("SLO term"),
    ),
    _F("more_requests", "count", True, "requests still needed to decide"),
    _F("voices", "count", False, "voice sweep: the level's number of voices", optional=True),
)
SLO: tuple[Field, ...] = (
    _F("spec", "", False, ""),
    _F("steps", "", False, "one verdict per level", of=SLO_VERDICT),
    _F("by_step", "", False, "one verdict per executed step", of=SLO_VERDICT),
    _F("max_concurrency", "users", True, "largest level meeting it with every lower one; open loop: null"),
    _F("max_rate", "req/s", True, "open loop: the highest offered rate meeting it with every lower one", optional=True),
    _F(
        "max_voices",
        "count",
        True,
        "voice sweep: the most voices meeting it with every fewer tested one",
        optional=True,
    ),
    _F("max_speed", "x", True, "trace replay: max_rate as a speed of the trace", optional=True),
)


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


DIAGNOSIS: tuple[Field, ...] = (
    _F("kind", "", False, ", ".join(DiagnosisKind)),
    _F("evidence", "", False, "sentences with the numbers"),
    _F("resource_data", "", False, "resource samples were there to judge by"),
)
LITTLE_LAW: tuple[Field, ...] = (
    _F("concurrency", "users", False, ""),
    _F("effective_concurrency", "users", False, ""),
    _F("expected_concurrency", "users", False, ""),
    _F("ratio", "", False, ""),
    _F("ok", "", False, "within the tolerance of 1"),
)
USL: tuple[Field, ...] = (
    _F("lambda_rps", "req/s", False, ""),
    _F("sigma", "", False, "contention"),
    _F("kappa", "", False, "coherency"),
    _F("r2", "", False, ""),
    _F("peak_concurrency", "users", True, ""),
    _F("peak_throughput_rps", "req/s", True, ""),
)
MEMORY_CREEP: tuple[Field, ...] = (
    _F("host", "", False, "the host with the largest rise"),
    _F("baseline_bytes", "bytes", False, "before the run"),
    _F("after_run_bytes", "bytes", False, ""),
    _F("rise_bytes", "bytes", False, ""),
    _F("total_bytes", "bytes", True, ""),
    _F("after_samples", "count", False, ""),
)

#: A figure compared with the baseline run.
COMPARISON: tuple[Field, ...] = (
    _F("old", "", True, ""),
    _F("new", "", True, ""),
    _F("ratio", "", True, "", optional=True),
    _F("ratio_ci", "", False, "", optional=True),
    _F("change", "", True, "", optional=True),
    _F("p_value", "", True, ""),
    _F("method", "", False, "", optional=True),
    _F("significant", "", False, ""),
    _F("regression", "", False, ""),
    _F("improvement", "", False, ""),
)
REGRESSION_STEP: tuple[Field, ...] = (
    _F("concurrency", "users", False, "open loop: 0"),
    _F("rate", "req/s", False, "open loop: the offered rate compared", optional=True),
    _F("requests", "count", False, "[baseline, this run]"),
    _F("p50_ms", "ms", True, "", of=COMPARISON),
    _F("p95_ms", "ms", True, "", of=COMPARISON),
    _F("ttfa_p95_ms", "ms", True, "", of=COMPARISON),
    _F("throughput_rps", "req/s", True, "", of=COMPARISON),
    _F("error_rate", "", True, "", of=COMPARISON),
    _F(
        "mos_mean",
        "",
        True,
        "--asr-listen in both runs: naturalness (DNSMOS OVRL), paired by text",
        optional=True,
        of=COMPARISON,
    ),
    _F(
        "similarity_ref_mean",
        "",
        True,
        "--asr-listen in both runs: similarity to the reference voice, paired by text",
        optional=True,
        of=COMPARISON,
    ),
    _F("regression", "", False, ""),
    _F("improvement", "", False, ""),
)
BASELINE_LEVEL: tuple[Field, ...] = (
    _F("concurrency", "users", False, "open loop: 0"),
    _F("rate", "req/s", False, "open loop", optional=True),
    _F("p50_ms", "ms", True, ""),
    _F("p95_ms", "ms", True, ""),
    _F("p95_ci", "ms", True, ""),
    _F("throughput_rps", "req/s", True, ""),
    _F("error_rate", "", True, ""),
)
BASELINE: tuple[Field, ...] = (
    _F("run_id", "", False, ""),
    _F("path", "", False, ""),
    _F("levels", "", False, "the baseline's curve", of=BASELINE_LEVEL),
)
REGRESSION: tuple[Field, ...] = (
    _F("baseline", "", False, "", of=BASELINE),
    _F("tolerance", "", False, "relative change let pass"),
    _F("alpha", "", False, "significance level"),
    _F("steps", "", False, "one per concurrency both runs tested", of=REGRESSION_STEP),
    _F("regressed", "users", False, "concurrencies that regressed (open loop: offered rates)"),
    _F("compared", "users", False, "(open loop: offered rates)"),
    _F(
        "warnings",
        "",
        False,
        "each difference in what made the runs (corpus, options, tts-knee, host, server), the corpus first",
    ),
    _F("verdict", "", False, "in words"),
)
REQUIRE: tuple[Field, ...] = (
    _F("concurrency", "users", False, "N of --require; open loop: 0"),
    _F("rate", "req/s", False, "open loop: R of --require R/s", optional=True),
    _F("speed", "x", False, "trace replay: S of --require Sx (rate is what it offers)", optional=True),
    _F("voices", "count", False, "voice sweep: N of --require, a number of voices", optional=True),
    _F("holds", "", False, ""),
    _F("exit", "", False, "the exit status it calls for"),
    _F("claim", "", True, "the claim at N, in words"),
    _F("reason", "", False, ""),
)

# ---- soak (--soak): drift over one level held for long (analysis.soak)
SOAK_WINDOW: tuple[Field, ...] = (
    _F("start", "unix s", False, ""),
    _F("end", "unix s", False, ""),
    _F("requests", "count", False, "settled requests sent in it"),
    _F("ok", "count", False, ""),
    _F("failed", "count", False, ""),
    _F("error_rate", "", True, "failed / requests"),
    _F("throughput_rps", "req/s", False, "successful completions inside it per second"),
    _F("p50_ms", "ms", True, "latency of the successful ones (open loop: from the schedule)"),
    _F("p95_ms", "ms", True, ""),
    _F("ttfa_p95_ms", "ms", True, "streamed runs", optional=True),
    _F("server_rss_bytes", "bytes", False, "the watched server process, median of the samples", of=Keyed("host")),
    _F("gpu_mem_bytes", "bytes", False, "the server's fullest GPU, median", of=Keyed("host")),
    _F(
        "client_rss_bytes", "bytes", False, "the load generator's processes (master, workers), median", of=Keyed("host")
    ),
)
SOAK_TREND: tuple[Field, ...] = (
    _F("figure", "", False, "a window figure: p50_ms, p95_ms, throughput_rps, server_rss_bytes …"),
    _F("host", "", True, "for a figure per host"),
    _F("unit", "", False, ""),
    _F("windows", "count", False, "windows with the figure"),
    _F("first", "", False, "its value in the first window"),
    _F("last", "", False, "in the last"),
    _F("steady_after_s", "s", False, "where the warm-up ends: the trend is judged from there on"),
    _F("slope_per_min", "", False, "Theil-Sen slope, in the figure's unit per minute"),
    _F("slope_ci", "", False, "its 95% interval [lo, hi]"),
    _F("p_value", "", True, "Mann-Kendall test"),
    _F("drift", "", False, "it drifts the bad way, significantly and materially"),
    _F("verdict", "", True, "the drift in one sentence"),
)
SOAK: tuple[Field, ...] = (
    _F("step", "", False, "the soak's step"),
    _F("concurrency", "users", False, "the level held (open loop: 0)"),
    _F("rate", "req/s", True, "open loop: the rate held"),
    _F("start", "unix s", True, "its settled span"),
    _F("end", "unix s", True, ""),
    _F("duration_s", "s", True, ""),
    _F("window_s", "s", True, "each window's length"),
    _F("windows", "", False, "", of=SOAK_WINDOW),
    _F("trends", "", False, "one per figure (and host)", of=SOAK_TREND),
    _F("drift", "", False, "the verdict lines, one per drifting figure"),
    _F("method", "", False, "how a trend is judged"),
)

#: ``run``: run.json's description of the run, and its path.
SUMMARY_RUN: tuple[Field, ...] = (
    _F("run_id", "", False, ""),
    _F("path", "", False, "the run directory read"),
    _F("start", "unix s", True, ""),
    _F("end", "unix s", True, ""),
    _F("in_progress", "", False, "run.json has no end yet"),
    _F("target", "", True, ""),
    _F("mode", "", False, "how load was offered (runformat.MODES), as RunDir.mode reads it"),
    _F("options", "", True, "", of=RUN_OPTIONS),
    _F("workers", "", True, "", of=WORKER),
    _F("collectors", "", True, "", of=COLLECTOR),
    _F("versions", "", True, "", of=VERSIONS),
    _F("provenance", "", True, "run.json's: what made the run; null before tts-knee recorded it", of=PROVENANCE),
    _F("settle_s", "s", True, ""),
    _F("run_json_error", "", True, "why run.json could not be read"),
    _F("audio_missing", "count", True, "run.json's: audio files not written in time, by why", of=Keyed("audio_file")),
)
RECORDS: tuple[Field, ...] = (
    _F("lines", "count", False, "lines of requests.jsonl read"),
    _F("attempts", "count", False, "attempt records among them"),
)
PER_FILE: tuple[Field, ...] = (
    _F("requests", "", False, "requests.jsonl"),
    _F("resources", "", False, "resources.jsonl"),
)

#: ``barge_in``: the listener's interruptions (``--barge-in``) and what they cost the server.
ORPHANED: tuple[Field, ...] = (
    _F("per_cancel_s", "s", True, "server work after each cancel that no heard utterance explains"),
    _F("total_s", "s", False, "the same, over the run"),
    _F("method", "", False, "how it was estimated"),
    _F("series", "", False, "the server's series it was read from"),
    _F("samples", "count", False, "server samples read"),
    _F("uncertainty_s", "s", False, "from the process's CPU: the 95 % interval of per_cancel_s (±)", optional=True),
    _F(
        "busy_scale",
        "",
        False,
        "from the process's CPU: the fitted time the server went on with an abandoned "
        "request, as a share of a heard one's of its text",
        optional=True,
    ),
)
#: ``hangups``: requests the client gave up on at --request-timeout, and the work they left the server.
HANGUP_WORK: tuple[Field, ...] = (
    _F("per_hangup_s", "s", False, "CPU-seconds the server spent on each hang-up beyond the part heard"),
    _F("uncertainty_s", "s", False, "the 95 % interval of per_hangup_s (±)"),
    _F("total_s", "s", False, "the same, over the run"),
    _F("method", "", False, "how it was estimated"),
    _F("series", "", False, "the series it was read from"),
    _F("samples", "count", False, "server samples read"),
    _F(
        "busy_scale",
        "",
        False,
        "the fitted time the server went on with a hang-up, as a share of a heard request's of its text",
    ),
)
HANGUPS: tuple[Field, ...] = (
    _F("timed_out", "count", False, "attempts the client abandoned at --request-timeout, every phase"),
    _F("orphaned_work_s", "s", True, "null: too few, or not measurable (note says why)", of=HANGUP_WORK),
    _F("note", "", True, "why orphaned_work_s is null"),
)
BARGE_IN: tuple[Field, ...] = (
    _F("fraction", "", False, "--barge-in: the share of utterances the listener interrupts"),
    _F("cancel_by", "", True, "--cancel-by"),
    _F("cancelled", "count", False, "cancelled requests, settled, every step"),
    _F("unacknowledged", "count", False, "cancels whose acknowledgement never came within the bounded wait"),
    _F("cancel_to_quiet_ms", "ms", True, "the cancel to the last audio, or to its acknowledgement", of=DIST),
    _F("audio_after_cancel_ms", "ms", True, "audio that still arrived after each cancel", of=DIST),
    _F(
        "orphaned_work_s",
        "s",
        True,
        "from the server's running-requests series, else from a collector's watch "
        "on its process's CPU; null without either",
        of=ORPHANED,
    ),
    _F("orphaned_note", "", True, "why orphaned_work_s is null, where the CPU could not tell", optional=True),
)

CAPACITY_AT: tuple[Field, ...] = (
    _F("concurrency", "users", True, "the recommended concurrency (open loop: the one the rate implies)"),
    _F("rate", "req/s", True, "open loop: the recommended rate", optional=True),
    _F("voices", "count", True, "voice sweep: the recommended number of voices", optional=True),
)
CAPACITY_PLAN: tuple[Field, ...] = (
    _F("demand", "", False, "--plan-for as given: N concurrent requests, or N/s"),
    _F("per_s", "", False, "the demand is a rate"),
    _F("headroom", "", False, "--headroom: the share of a replica's capacity left unplanned"),
    _F(
        "per_replica",
        "",
        True,
        "what one replica carried at the recommendation: its concurrency, or its req/s for a rate",
    ),
    _F("replicas", "count", True, "ceil(demand / (per_replica * (1 - headroom))); null: nothing carried"),
)
CAPACITY: tuple[Field, ...] = (
    _F("at", "", True, "the recommended level read (null: none recommended)", of=CAPACITY_AT),
    _F("throughput_rps", "req/s", True, "one replica at the recommendation"),
    _F("chars_per_s", "chars/s", True, ""),
    _F("audio_s_per_s", "", True, "audio seconds per wall second (rtfx)"),
    _F("utterances_per_hour", "count", True, ""),
    _F("mchars_per_hour", "", True, "millions of characters an hour"),
    _F("cost_per_hour", "per h", True, "--cost-per-hour: a replica's price"),
    _F("cost_per_million_chars", "", True, "the price over the characters carried an hour, in millions"),
    _F("cost_per_audio_hour", "", True, "the price over the hours of audio made an hour"),
    _F("plan", "", True, "with --plan-for", of=CAPACITY_PLAN),
    _F("text", "", True, "the whole in one or two sentences"),
)

TEXT_REUSE: tuple[Field, ...] = (
    _F("pairs", "count", False, "texts repeated within the step they were first sent in"),
    _F("first_ms", "ms", True, "median of their first times (TTFA for streams, else the wait)"),
    _F("repeat_ms", "ms", True, "median of their repeats' median times"),
    _F("ratio", "", True, "median of repeat over first"),
    _F("faster_share", "", True, "share of the texts faster the second time"),
    _F("caches", "", True, "the server caches its answers; null: too few repeats to tell"),
    _F("note", "", False, "the verdict in one sentence"),
)


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
PROBE_LEVEL: tuple[Field, ...] = (
    _F("concurrency", "users", False, "a probe level: 1, then the recommended concurrency"),
    _F("audio", "count", False, "requests answered with audio"),
    _F("refused", "count", False, "a 4xx (or a gRPC code that reads as one)"),
    _F("server_error", "count", False, "a 5xx other than 504"),
    _F("timeout", "count", False, "no answer within --request-timeout, or a 504"),
    _F("silent", "count", False, "audio with no sound in it"),
    _F("error", "count", False, "failed otherwise: a reset connection, a body that is not audio"),
)
PROBE_CLASS: tuple[Field, ...] = (
    _F("class", "", False, "one of runformat.probe.CLASSES"),
    _F("what", "", False, "the class in words"),
    _F("requests", "count", False, "its requests at every probe level, each by its final attempt"),
    _F("outcomes", "", False, "requests per outcome, at every level", of=PROBE_LEVEL[1:]),
    _F("by_concurrency", "", False, "the same per probe level", of=PROBE_LEVEL),
    _F("statuses", "", False, "status -> requests, of those not answered with audio", of=Keyed("status")),
    _F("ms_p50", "ms", True, "send to done, retries included"),
    _F("ms_max", "ms", True, ""),
    _F("audio_s_p50", "s", True, "of those answered with audio"),
    _F(
        "wrong_length",
        "count",
        False,
        "audio of texts of 20 characters or more whose length per character is a "
        "runaway or truncated one against the sweep's own pace",
    ),
    _F("error", "", True, "the first error message"),
    _F("needs_guarding", "", False, "a server error, a timeout, silence, another failure or a wrong length"),
    _F("verdict", "", False, "what the server did, in words"),
)
PROBE: tuple[Field, ...] = (
    _F("levels", "users", False, "the concurrencies probed"),
    _F("classes", "", False, "one per class probed", of=PROBE_CLASS),
    _F("needs_guarding", "", False, "the classes the server did not answer as a service should"),
    _F("note", "", True, "the diagnosis's sentence on them; null: every class answered well"),
)

# ---- the spike (--spike): how the server took it and how long it took to recover (analysis.spike)
SPIKE_PART: tuple[Field, ...] = (
    _F("attempts", "count", False, ""),
    _F("ok", "count", False, ""),
    _F("shed", "count", False, "refused with 429 or 503"),
    _F("failed", "count", False, "failed otherwise (5xx, resets, timeouts)"),
    _F("shed_share", "", False, "shed / attempts"),
    _F("failed_share", "", False, "failed / attempts"),
    _F("shed_ms_p50", "ms", True, "how fast the refusals came"),
    _F("p95_ms", "ms", True, "of the successful final attempts (TTFA in a streamed run)"),
    _F("p95_x", "", True, "p95_ms over the p95 before the spike"),
)


class SpikeBehaviour(StrEnum):
    """``spike.behaviour``: how the server took the spike, the first that holds (see :mod:`analysis.spike`)."""

    CRASHED = "crashed"  # it stopped answering: the health probe failed, no answers came, or its process went
    SHEDS = "sheds"  # it refused fast (429/503) a share of the spike
    FAILS = "fails"  # other failures: 5xx, resets, timeouts
    QUEUES = "queues"  # nothing refused, latency grew
    ABSORBS = "absorbs"  # latency stayed within 1.2x of before


SPIKE: tuple[Field, ...] = (
    _F("factor", "", True, "FACTOR of --spike"),
    _F("seconds", "s", True, "SECONDS of --spike"),
    _F("level", "users", False, "the level before and after"),
    _F("spike_level", "users", False, "ceil(level x factor)"),
    _F("behaviour", "", False, "one of " + ", ".join(SpikeBehaviour)),
    _F(
        "recovery_s",
        "s",
        True,
        "from the recovery's start until the p95 stays within 1.2x of before; null: did "
        "not recover within the run (or crashed)",
    ),
    _F("basis", "", False, "the latency judged: wait_ms, or ttfa_ms in a streamed run"),
    _F("before_p95_ms", "ms", True, "p95 of the settled step before the spike"),
    _F("during", "", False, "the spike step", of=SPIKE_PART),
    _F("after", "", True, "the recovery step", of=SPIKE_PART),
    _F(
        "process_gone_at",
        "unix s",
        True,
        "when the server process a collector watched exited during it; null: it did not, or none was watched",
    ),
    _F("text", "", False, "the verdict in one sentence (also the diagnosis's last evidence)"),
)

# ---- trace replay (--trace): the trace, its bursts per step, the answers as speeds (analysis.trace)
TRACE_STEP_BURST: tuple[Field, ...] = (
    _F("start_s", "s", False, "the burst's place in the trace"),
    _F("end_s", "s", False, ""),
    _F("requests", "count", False, "the step's requests scheduled inside it"),
    _F("failed", "count", False, "of them"),
    _F("p95_ms", "ms", True, "their p95 latency from the schedule"),
)
TRACE_STEP: tuple[Field, ...] = (
    _F("step", "", False, ""),
    _F("speed", "x", False, "the step's rate over the trace's"),
    _F("rate", "req/s", False, "the speed times the trace's mean rate"),
    _F("offered_rps", "req/s", True, "what the step's settled window replayed, per second"),
    _F("bursts", "", False, "the trace's bursts this step replayed", of=TRACE_STEP_BURST),
    _F("p95_outside_ms", "ms", True, "p95 latency from the schedule of the step's other requests"),
)
TRACE_PART: tuple[Field, ...] = (
    *RUN_TRACE,
    _F("steps", "", False, "one per replay step", of=TRACE_STEP),
    _F("knee_speed", "x", True, "knee.rate as a speed"),
    _F("recommended_speed", "x", True, "recommended_rate as a speed"),
    _F("max_speed", "x", True, "with an SLO: slo.max_speed", optional=True),
)

SUMMARY: tuple[Field, ...] = (
    _F("run", "", False, "run.json's description of the run, and its path", of=SUMMARY_RUN),
    _F("records", "count", False, "lines and attempts read", of=RECORDS),
    _F("bad_lines", "count", False, "unparseable lines per file", of=PER_FILE),
    _F("incomplete_last_line", "", False, "per file", of=PER_FILE),
    _F("steps", "", False, "one step summary per executed step, in run order", of=STEP_SUMMARY),
    _F(
        "in_progress_step",
        "",
        True,
        "the live view's open step, which the verdict waits for (null: none)",
        of=IN_PROGRESS,
    ),
    _F("levels", "", False, "one per tested concurrency, repeats pooled, closed steps only", of=STEP_SUMMARY),
    _F("knee", "", False, "concurrency (or null) and methods; open loop: rate (or null) instead", of=KNEE),
    _F("slo", "", True, "spec, steps, by_step, max_concurrency", of=SLO),
    _F("recommended_concurrency", "users", True, ""),
    _F("recommendation", "", False, "the recommendation in words"),
    _F("capacity", "", False, "the recommendation in replicas and money (analysis.capacity)", of=CAPACITY),
    _F("health", "", True, "run.json's health probe after the run (null: none was made)", of=PREFLIGHT),
    _F(
        "text_reuse",
        "",
        False,
        "first and later sends of a text compared: an answer cache (analysis.reuse)",
        of=TEXT_REUSE,
    ),
    _F("diagnosis", "", False, "kind and evidence", of=DIAGNOSIS),
    _F("little_law", "", True, "", of=LITTLE_LAW),
    _F("usl", "", True, "Universal Scalability Law fit", of=USL),
    _F("gpu_memory_baseline_bytes", "bytes", True, ""),
    _F("gpu_memory_after_run_bytes", "bytes", True, ""),
    _F("gpu_memory_creep", "", True, "", of=MEMORY_CREEP),
    _F("server_timing_stages", "", False, "Server-Timing stage names seen"),
    _F(
        "recommended_rate",
        "req/s",
        True,
        "open loop: the offered rate before the knee (recommended_concurrency is then what it implies)",
        optional=True,
    ),
    _F("dropped", "count", False, "open loop: arrivals not sent, all steps", optional=True),
    _F(
        "cut_by_run_end",
        "count",
        False,
        "attempts still in flight when the run's drain ended, all steps",
        optional=True,
    ),
    _F(
        "recommended_voices",
        "count",
        True,
        "voice sweep: the number of distinct voices before the knee (with an SLO: slo.max_voices)",
        optional=True,
    ),
    _F("barge_in", "", True, "with --barge-in", optional=True, of=BARGE_IN),
    _F(
        "hangups",
        "",
        False,
        "where the client gave up on requests and a collector watched the server process",
        optional=True,
        of=HANGUPS,
    ),
    _F("regression", "", True, "with --baseline", optional=True, of=REGRESSION),
    _F("require", "", True, "with --require", optional=True, of=REQUIRE),
    _F("soak", "", False, "with --soak: drift over the level held", optional=True, of=SOAK),
    _F(
        "probe", "", False, "with --probe-texts: what the server did per class of hostile text", optional=True, of=PROBE
    ),
    _F("spike", "", False, "with --spike: how the server took it, and its recovery", optional=True, of=SPIKE),
    _F(
        "trace",
        "",
        False,
        "with --trace: the log replayed, its bursts per step, the answers as speeds",
        optional=True,
        of=TRACE_PART,
    ),
)
