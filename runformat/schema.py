"""Every field of the run directory: its name, its type, its unit and what it means, declared once.

Each record kind is a TypedDict (an attempt is an :class:`Attempt`, run.json a :class:`RunInfo`)
whose fields carry their unit and meaning (:class:`runformat.fields.Doc`); its table (a tuple
of :class:`Field`: ``ATTEMPT``, ``RUN`` …) is derived from it, so that writers, readers, tests
and the manual (``docs/fields.md``) share one spelling. Each record kind has a builder that
takes only the names its table knows and fills every field it was not given with null, in table
order: a writer cannot forget or misspell a field, and the key order (and so the bytes) of a
record does not depend on who built it.

A field declared ``NotRequired`` (``optional`` in its table) is left out of a record unless
given: fields that only some runs carry (streaming lists, open-loop scheduling, server metrics).
Readers must treat a missing field and a null one alike. A field whose value is an object names that object's table in
``of`` (see :mod:`runformat.fields`), all the way down, so every key a file holds is declared:
:func:`runformat.check.undeclared_keys` holds a run directory to it.

``summary.json`` is declared in :mod:`runformat.summary`, the run's options in
:mod:`runformat.options`, the messages between nodes in :mod:`runformat.wire`.
"""

from typing import Annotated, Any

from .fields import Builder, Doc, Field, NotRequired, TypedDict, names as _names, table
from .options import RUN_OPTIONS

#: The run directory format this version of tts-knee writes (``run.json``'s ``format_version``).
#: 1: runs from before the field existed (no ``format_version``); 2: the same records, with it.
FORMAT_VERSION = 2
#: Format versions this version reads.
READABLE_VERSIONS = (1, 2)


# ---- requests.jsonl: one attempt per line -----------------------------------------------


class Attempt(TypedDict):
    """Attempt record fields, in the order a record carries them."""

    step: Annotated[int | None, Doc("", "1-based step the attempt was sent in (null before the first step)")]
    concurrency: Annotated[
        int | None, Doc("users", "the step's concurrency; open loop: requests in flight at sending, this one included")
    ]
    worker: Annotated[str, Doc("", "Locust worker id, or 'local'")]
    user: Annotated[int, Doc("", "user number on its worker")]
    t0: Annotated[float, Doc("unix s", "before the request was sent, master's clock")]
    t1: Annotated[float | None, Doc("unix s", "first body byte")]
    t2: Annotated[float | None, Doc("unix s", "body fully read")]
    t3: Annotated[float | None, Doc("unix s", "audio written to disk and closed")]
    ttfb_ms: Annotated[float | None, Doc("ms", "t1 - t0")]
    wait_ms: Annotated[float | None, Doc("ms", "t2 - t0: server and network")]
    write_ms: Annotated[float | None, Doc("ms", "t3 - t2: the client's write")]
    concat_ms: Annotated[float | None, Doc("ms", "joining a split text's segments on the client")]
    status: Annotated[
        int | str | None,
        Doc(
            "",
            (
                "HTTP status, or a gRPC attempt's code name (OK, RESOURCE_EXHAUSTED …: runformat.grpc_codes); "
                "null on a connection error"
            ),
        ),
    ]
    ok: Annotated[bool, Doc("", "a 2xx answer carrying valid audio")]
    error: Annotated[str | None, Doc("", "why the attempt failed, one line")]
    bytes: Annotated[int, Doc("bytes", "body bytes read")]
    audio_s: Annotated[float | None, Doc("s", "audio duration from the PCM byte count and format")]
    rtf: Annotated[float | None, Doc("", "synthesis seconds / audio seconds")]
    retry_after_s: Annotated[float | None, Doc("s", "Retry-After (gRPC: the pushback), parsed")]
    retry_after_raw: Annotated[
        str | None,
        Doc(
            "",
            (
                "Retry-After as sent; gRPC: the trailer that said it, as 'grpc-retry-pushback-ms: 1000' or "
                "'retry-after: 1'"
            ),
        ),
    ]
    server_timing: Annotated[dict[str, float] | None, Doc("ms", "Server-Timing: stage name -> ms", key="stage name")]
    settled: Annotated[bool, Doc("", "false inside the step's settle (warm-up) window")]
    ttfa_ms: Annotated[
        float | None,
        Doc(
            "ms",
            (
                "to the first audio sample, past any header or SSE framing; from the first text sent where the "
                "text went in pieces (text_first_ms), else from t0"
            ),
        ),
    ]
    chunks: Annotated[int | None, Doc("count", "body blocks that carried audio")]
    gap_max_ms: Annotated[float | None, Doc("ms", "longest wait between two audio arrivals")]
    underruns: Annotated[int | None, Doc("count", "times a 1x player fed by these arrivals ran dry")]
    underrun_ms: Annotated[float | None, Doc("ms", "silence those underruns add up to")]
    # the arrivals judged without a buffer (analysis.playback): where the audio of each was known
    preroll_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                (
                    "the smallest start-up buffer, after the first audio, with which a 1x player never runs dry: "
                    "the most an arrival came after the audio before it would have played out"
                ),
            ),
        ]
    ]
    stall_max_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                "the longest silence of a player that starts with the first audio, no buffer; null: one arrival",
            ),
        ]
    ]
    chunk_at_ms: Annotated[list[float] | None, Doc("ms", "arrival of each chunk after t0 (streamed runs only)")]
    chunk_audio_ms: Annotated[list[float] | None, Doc("ms", "audio each chunk carried")]
    req_id: Annotated[str, Doc("", "one logical request, unique across workers")]
    attempt: Annotated[int, Doc("count", "1-based attempt number")]
    final: Annotated[bool, Doc("", "the last attempt of its request")]
    text_id: Annotated[str | None, Doc("", "corpus id of the text")]
    text_len: Annotated[int, Doc("chars", "characters sent in this attempt")]
    tier: Annotated[str | None, Doc("", "short, medium or long")]
    segment: Annotated[str | None, Doc("", "'k/n' for a segment of a split text")]
    backoff_ms: Annotated[float | None, Doc("ms", "slept before this attempt")]
    scheduled: NotRequired[
        Annotated[float | None, Doc("unix s", "open loop: when the arrival process scheduled the request")]
    ]
    sched_wait_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                (
                    "open loop: t2 - scheduled, what a caller who arrived on time waited (t0 - scheduled is the"
                    " generator's own lateness, its send lag)"
                ),
            ),
        ]
    ]
    # text sent in pieces, as a language model writes it (sessions: WebSocket, Wyoming, gRPC streams)
    text_first_ms: NotRequired[Annotated[float | None, Doc("ms", "the first piece of text sent, after t0")]]
    text_done_ms: NotRequired[
        Annotated[float | None, Doc("ms", "the end of the text (its final flush) sent, after t0")]
    ]
    done_to_audio_ms: NotRequired[
        Annotated[
            float | None, Doc("ms", "the end of the text to the first audio after it; 0 when audio was already flowing")
        ]
    ]
    tail_ms: NotRequired[
        Annotated[
            float | None,
            Doc("ms", "the end of the text to the last audio: what the listener waits once the text is complete"),
        ]
    ]
    connect_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                (
                    "opening the session (TCP and the protocol's handshake) for this attempt; null when it went"
                    " on an open one"
                ),
            ),
        ]
    ]
    audio_file: NotRequired[
        Annotated[
            str | None,
            Doc(
                "",
                (
                    "why its audio file was not written in time: 'late' (the user did not wait longer for a "
                    "stalling disk; written when it gets to it) or 'dropped' (not written: too much audio "
                    "waited already); t3 and write_ms are then null"
                ),
            ),
        ]
    ]
    # voices: what the request asked for beside its words
    voice: NotRequired[
        Annotated[
            str | None,
            Doc("", "the voice the request named (its own, the mix's, --tts-voice), or its reference clip's file name"),
        ]
    ]
    language: NotRequired[
        Annotated[
            str | None,
            Doc("", "the language the request named, else the one its text is written in (corpus text_language)"),
        ]
    ]
    # barge-in: the listener interrupted the utterance, which was cancelled (--barge-in)
    cancelled: NotRequired[
        Annotated[
            bool | None,
            Doc(
                "",
                (
                    "the listener interrupted it: not a failure; only what came before the cancel counts in its"
                    " stream figures, and it counts in no latency figure"
                ),
            ),
        ]
    ]
    cancel_ms: NotRequired[Annotated[float | None, Doc("ms", "the cancel sent (or the connection closed), after t0")]]
    cancel_to_quiet_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                (
                    "the cancel to the last audio received, or to the server's acknowledgement where the "
                    "dialect has one; null when that never came"
                ),
            ),
        ]
    ]
    audio_after_cancel_ms: NotRequired[
        Annotated[float | None, Doc("ms", "audio that still arrived after the cancel, in playback time")]
    ]
    cancel_quiet: NotRequired[
        Annotated[
            str | None,
            Doc(
                "",
                (
                    "how it went quiet: acknowledged, closed, ended (the server ended the utterance), quiet (no"
                    " audio for a while), unacknowledged"
                ),
            ),
        ]
    ]
    cancel_note: NotRequired[
        Annotated[str | None, Doc("", "what became of the connection when the cancel went wrong, one sentence")]
    ]
    # the signal, checked on every attempt whose audio is PCM16 (WAV, raw PCM, SSE): audio.signal
    leading_silence_ms: NotRequired[
        Annotated[
            float | None, Doc("ms", "audio before the first 10 ms frame at or above the silence level (-40 dBFS RMS)")
        ]
    ]
    trailing_silence_ms: NotRequired[
        Annotated[float | None, Doc("ms", "audio after the last 10 ms frame at or above the silence level")]
    ]
    clipped_share: NotRequired[Annotated[float | None, Doc("", "share of samples at full scale (clipped)")]]
    ttfa_audible_ms: NotRequired[
        Annotated[
            float | None,
            Doc(
                "ms",
                (
                    "when the listener hears the first sound: the playback model's moment the first frame above"
                    " the silence level plays, from ttfa_ms's origin"
                ),
            ),
        ]
    ]


ATTEMPT = table(Attempt)


class SpeechLine(TypedDict):
    """What the ASR judge says of one attempt it judged (``speech.jsonl``, :mod:`audio.asr`)."""

    req_id: Annotated[str, Doc("", "the attempt's request (its final, successful attempt)")]
    step: Annotated[int | None, Doc("", "the step the attempt ran in")]
    concurrency: Annotated[int | None, Doc("count", "the step's concurrency")]
    text_id: Annotated[str | None, Doc("", "corpus id of the text")]
    text: Annotated[str | None, Doc("", "the text sent, which the transcript is scored against")]
    language: Annotated[str | None, Doc("", "the language the judge was told, or the one it detected")]
    told_language: NotRequired[
        Annotated[
            str | None,
            Doc(
                "",
                "the language the judge was told (--asr-language, the corpus entry's, --tts-language); null: it "
                "detected one",
            ),
        ]
    ]
    metric: Annotated[str | None, Doc("", "'wer' (words) or 'cer' (characters: languages written without spaces)")]
    error: Annotated[
        float | None,
        Doc(
            "",
            (
                "word (or character) error rate against the text sent, after normalisation "
                "(audio.asr.normalize); null where the clip could not be judged"
            ),
        ),
    ]
    transcript: Annotated[str | None, Doc("", "what the recogniser heard")]
    reason: Annotated[
        str | None,
        Doc(
            "",
            "why the clip was not judged (undecodable audio, the judge behind or gone), one sentence; null when judged",
        ),
    ]
    window: NotRequired[
        Annotated[
            str | None,
            Doc(
                "",
                "the req_id of the first clip of the Whisper window the clip was heard in (its own when heard "
                "alone): tts-knee judge hears it beside the same clips again; null where not judged",
            ),
        ]
    ]
    audio_s: Annotated[float | None, Doc("s", "the clip's length")]
    judge_s: Annotated[float | None, Doc("s", "CPU seconds the judge spent on the clip")]
    clip: Annotated[str | None, Doc("", "the clip, relative to the run directory (speech/<req_id>.wav)")]
    similarity: NotRequired[
        Annotated[
            float | None,
            Doc(
                "",
                "speaker similarity (cosine of speaker embeddings, audio.speaker) to the same text's clip at the "
                "lowest concurrency heard so far (unless --asr-words-only); null where the clip was too short to embed",
            ),
        ]
    ]
    similarity_ref: NotRequired[
        Annotated[
            float | None,
            Doc("", "speaker similarity to the voice's reference audio (its ref_audio, else --reference-voice)"),
        ]
    ]
    reference: NotRequired[Annotated[str | None, Doc("", "the reference audio similarity_ref compares with")]]
    mos: NotRequired[
        Annotated[
            float | None,
            Doc("", "predicted naturalness, DNSMOS P.835 OVRL (1-5, audio.quality); null where too short to score"),
        ]
    ]
    mos_sig: NotRequired[Annotated[float | None, Doc("", "DNSMOS P.835 SIG: the speech itself (1-5)")]]
    mos_bak: NotRequired[Annotated[float | None, Doc("", "DNSMOS P.835 BAK: the background, noise and clicks (1-5)")]]
    listen_reason: NotRequired[
        Annotated[str | None, Doc("", "why similarity or mos is null, one sentence; null when both are there")]
    ]
    embedding: NotRequired[
        Annotated[list[float] | None, Doc("", "the clip's speaker embedding (256 values, unit length)")]
    ]


SPEECH = table(SpeechLine)
#: The timestamps of an attempt: shifted onto the master's clock by a worker.
ATTEMPT_TIMES = ("t0", "t1", "t2", "t3", "scheduled")
#: The streaming fields of an attempt whose body was not parsed as audio.
ATTEMPT_STREAM = ("ttfa_ms", "chunks", "gap_max_ms", "underruns", "underrun_ms", "chunk_at_ms", "chunk_audio_ms")


# ---- resources.jsonl: one sample per line ------------------------------------------------


class Proc(TypedDict):
    """``proc``: the watched process and its children."""

    pid: Annotated[int | None, Doc("", "the watched root process; null for a heartbeat")]
    cpu_percent: Annotated[float | None, Doc("percent", "of one core, summed over the tree")]
    rss_bytes: Annotated[float | None, Doc("bytes", "")]
    num_children: NotRequired[Annotated[int | None, Doc("count", "")]]


PROC = table(Proc)


class GpuIdentity(TypedDict):
    """GPU identity fields (what enumeration gives) before the readings."""

    index: Annotated[int, Doc("", "NVML device index")]
    mig_index: Annotated[int | None, Doc("", "MIG instance index, null for a whole GPU")]
    uuid: Annotated[str | None, Doc("", "")]
    name: Annotated[str | None, Doc("", "")]
    lost: Annotated[bool, Doc("", "the device (or driver) went away: its readings are null")]


GPU_IDENTITY = table(GpuIdentity)


class GpuReading(TypedDict):
    """GPU readings: null for what the device does not support (never 0 for unknown)."""

    util_percent: Annotated[float | None, Doc("percent", "NVML utilization.gpu: time a kernel ran, not SM occupancy")]
    mem_used_bytes: Annotated[float | None, Doc("bytes", "")]
    mem_total_bytes: Annotated[float | None, Doc("bytes", "")]
    power_w: Annotated[float | None, Doc("W", "")]
    temp_c: Annotated[float | None, Doc("°C", "")]
    sm_clock_mhz: Annotated[float | None, Doc("MHz", "")]
    clock_event_reasons: Annotated[list[str] | None, Doc("", "decoded clock event (throttle) reasons")]
    proc_mem_bytes: Annotated[float | None, Doc("bytes", "GPU memory the watched processes hold")]


GPU_READING = table(GpuReading)


class Gpu(GpuIdentity, GpuReading):
    """One GPU of a resource sample (``gpus``): what enumeration gives, then the readings."""


GPU = table(Gpu)


class ResourceSample(TypedDict):
    """A resource sample's fields. Collectors send the same fields on their own clock with a
    ``seq``; the puller writes them on the master's clock with ``collector`` and ``clock_offset_s``."""

    seq: NotRequired[Annotated[int | None, Doc("count", "the collector's sample number (0, 1, 2 … for its lifetime)")]]
    ts: Annotated[float, Doc("unix s", "when it was taken; the master's clock in resources.jsonl")]
    host: Annotated[str, Doc("", "hostname, or a Locust worker id for heartbeat samples")]
    role: Annotated[str, Doc("", "'server' or 'client' (the load generator)")]
    source: NotRequired[
        Annotated[
            str | None, Doc("", "what took it when not a collector: 'locust-heartbeat', or the --server-metrics URL")
        ]
    ]
    interval_s: NotRequired[Annotated[float | None, Doc("s", "time since the previous sample")]]
    cpu_percent: Annotated[float | None, Doc("percent", "all cores together")]
    cpu_max_core_percent: Annotated[float | None, Doc("percent", "the busiest core")]
    iowait_percent: NotRequired[Annotated[float | None, Doc("percent", "")]]
    steal_percent: NotRequired[Annotated[float | None, Doc("percent", "")]]
    cpu_count: NotRequired[Annotated[int | None, Doc("count", "")]]
    mem_used_bytes: Annotated[float | None, Doc("bytes", "what applications hold; not cache")]
    mem_total_bytes: Annotated[float | None, Doc("bytes", "")]
    disk_read_bytes: NotRequired[Annotated[int | None, Doc("bytes", "cumulative")]]
    disk_write_bytes: NotRequired[Annotated[int | None, Doc("bytes", "cumulative")]]
    net_sent_bytes: NotRequired[Annotated[int | None, Doc("bytes", "cumulative")]]
    net_recv_bytes: NotRequired[Annotated[int | None, Doc("bytes", "cumulative")]]
    proc: Annotated[Proc | None, Doc("", "the watched server process tree, or null")]
    gpus: Annotated[list[Gpu] | None, Doc("", "one GPU reading each; [] without NVML; null in a heartbeat sample")]
    metrics: NotRequired[
        Annotated[
            dict[str, float] | None,
            Doc("", "scraped server metrics: series -> value (counters as per-second rates)", key="series"),
        ]
    ]
    collector: NotRequired[Annotated[str | None, Doc("", "the collector's URL; null for the master's own host")]]
    clock_offset_s: NotRequired[Annotated[float | None, Doc("s", "subtracted from the collector's ts")]]


RESOURCE_SAMPLE = table(ResourceSample)


# ---- run.json ------------------------------------------------------------------------------


#: Why an open-loop arrival (a replayed trace's row) was not sent: run.json's
#: ``steps[].arrivals.not_sent`` keys, each with what it means.
BEHIND_SCHEDULE = "behind_schedule"
TURN_UNANSWERED = "turn_above_unanswered"
RUN_STOPPED = "run_stopped"
WORKER_LOST = "worker_lost"
NOT_SENT_REASONS = {
    BEHIND_SCHEDULE: "the next step began before its node had sent it (the node fell behind the schedule)",
    TURN_UNANSWERED: "a conversation's turn still waiting for the turn above to be answered when the step ended",
    RUN_STOPPED: "the run stopped before it was sent (stopped by hand, cut short, or the wait for it ran out)",
    WORKER_LOST: "the worker that was to send it stopped answering",
}


class Arrivals(TypedDict):
    """What an open-loop step's arrivals became, all nodes together (``run.json``'s
    ``steps[].arrivals``): every one planned was sent, dropped, or is counted as not sent."""

    planned: Annotated[int, Doc("count", "what the step's schedule held (a trace: its rows due within the step)")]
    sent: Annotated[int, Doc("count", "sent: each has its records")]
    dropped: Annotated[int, Doc("count", "not sent: --max-inflight requests were in flight")]
    not_sent: Annotated[
        dict[str, int],
        Doc("count", "not sent for another reason: reason -> arrivals (NOT_SENT_REASONS)", key="reason"),
    ]


class StepEntry(TypedDict):
    """One step of the run as it ran (``run.json``'s ``steps``)."""

    step: Annotated[int, Doc("", "1-based")]
    concurrency: Annotated[int, Doc("users", "")]
    start: Annotated[float, Doc("unix s", "")]
    end: Annotated[float | None, Doc("unix s", "null while it runs")]
    phase: Annotated[
        str, Doc("", "one of PHASES: 'grid', 'refine', 'soak', 'probe', 'before_spike', 'spike' or 'recovery'")
    ]
    repeat: Annotated[int, Doc("count", "1-based pass over the grid")]
    settle_s: Annotated[float, Doc("s", "this step's settle window")]
    cutoff: Annotated[float | None, Doc("unix s", "judged on the requests sent before this; null when not judged")]
    rate: NotRequired[
        Annotated[
            float | None,
            Doc(
                "req/s", "open loop: the step's offered arrival rate, all workers together (its concurrency is then 0)"
            ),
        ]
    ]
    voices: NotRequired[Annotated[int, Doc("count", "--voice-steps: the distinct voices the step drew from")]]
    dropped: NotRequired[Annotated[int, Doc("count", "open loop: arrivals not sent, finding --max-inflight in flight")]]
    workers: NotRequired[Annotated[int, Doc("count", "open loop: workers sharing the rate")]]
    arrivals: NotRequired[Annotated[Arrivals, Doc("", "open loop: what its arrivals became, all nodes together")]]
    offered_rps: NotRequired[
        Annotated[
            float,
            Doc(
                "req/s",
                (
                    "--trace: the arrivals the step's settled window replays, per second (its rate is the speed"
                    " times the trace's mean)"
                ),
            ),
        ]
    ]


STEP = table(StepEntry)

#: A step's ``phase``: a level of the grid (--steps or --rates), a refine probe (--refine), the
#: one level a soak holds (--soak), a level of the hostile-text probe (--probe-texts), or one of
#: the spike's three (--spike: the steady level before it, the spike, the level again after it).
PHASES = ("grid", "refine", "soak", "probe", "before_spike", "spike", "recovery")
SOAK_PHASE = "soak"
PROBE_PHASE = "probe"
SPIKE_PHASES = ("before_spike", "spike", "recovery")


class WorkerEntry(TypedDict):
    """One Locust worker (``run.json``'s ``workers``), with its clock offset."""

    id: Annotated[str, Doc("", "Locust client id, or 'local'")]
    offset_s: Annotated[float | None, Doc("s", "worker clock minus master clock")]
    rtt_s: Annotated[float | None, Doc("s", "round trip of the probe the offset came from")]
    records: NotRequired[Annotated[int, Doc("count", "attempt records received")]]
    batches: NotRequired[Annotated[int, Doc("count", "")]]
    final: NotRequired[Annotated[bool, Doc("", "its final batch came")]]
    first_seen: NotRequired[Annotated[float, Doc("unix s", "")]]
    last_seen: NotRequired[Annotated[float | None, Doc("unix s", "")]]
    lost_at: NotRequired[Annotated[float | None, Doc("unix s", "when Locust stopped hearing from it")]]
    host: NotRequired[Annotated[str | None, Doc("", "")]]


WORKER = table(WorkerEntry)


class CollectorEntry(TypedDict):
    """One collector (``run.json``'s ``collectors``), with its clock offset and what it sent."""

    url: Annotated[str, Doc("", "")]
    host: Annotated[str | None, Doc("", "")]
    offset_s: Annotated[float | None, Doc("s", "collector clock minus master clock, at the start")]
    rtt_s: Annotated[float | None, Doc("s", "")]
    offset_end_s: Annotated[float | None, Doc("s", "the same at the end")]
    rtt_end_s: Annotated[float | None, Doc("s", "")]
    reachable: Annotated[bool, Doc("", "")]
    gaps: Annotated[list[list[float | None]], Doc("unix s", "[from, to] spans without samples")]
    outages: Annotated[
        list[list[float | None]], Doc("unix s", "[from, to] spans it did not answer (to: null if never again)")
    ]
    samples: Annotated[int, Doc("count", "samples written")]
    dropped: Annotated[int, Doc("count", "samples that left its ring before they were read")]
    restarts: Annotated[int, Doc("count", "")]
    server_roles: NotRequired[
        Annotated[list[str], Doc("", "its --server-role, ROLE=SERIES each: what its scraped series mean")]
    ]
    server_stage_label: NotRequired[
        Annotated[str, Doc("", "its --server-stage-label: the label its scraped series' stages are told apart by")]
    ]


COLLECTOR = table(CollectorEntry)

#: run.json's ``mode``: users sending back to back at each step's concurrency (--steps), or
#: arrivals on a schedule at each step's offered rate (--rates). A later mode (sessions) adds a
#: name here; the reader refuses one it does not know.
MODES = ("closed", "open")


class ServerMetricsEntry(TypedDict):
    """``server_metrics``: one per ``--server-metrics`` endpoint the master scraped (and per
    ``--server-stats`` JSON endpoint it polled)."""

    url: Annotated[str, Doc("", "")]
    samples: Annotated[int, Doc("count", "samples written (a failed scrape writes one with metrics null)")]
    failures: Annotated[int, Doc("count", "scrapes that failed")]
    series_left_out: Annotated[int, Doc("count", "series the cap left out at the last scrape")]


SERVER_METRICS = table(ServerMetricsEntry)

Versions = TypedDict(
    "Versions",
    {
        "python": Annotated[str, Doc("", "")],
        "tts-knee": Annotated[str | None, Doc("", "null when not installed as a distribution")],
        "locust": Annotated[str | None, Doc("", "")],
        "gevent": Annotated[str | None, Doc("", "")],
        "geventhttpclient": Annotated[str | None, Doc("", "")],
        "argv": Annotated[list[str], Doc("", "the command line, the collector token hidden")],
    },
)
Versions.__doc__ = """``versions``: what measured, and how it was started."""
VERSIONS = table(Versions)


class LoadHost(TypedDict):
    """``provenance.host``: the machine the master (or the local runner) ran on."""

    cpu_model: Annotated[str | None, Doc("", "the CPU's model name; null where the system does not say")]
    cpu_cores: Annotated[int | None, Doc("count", "logical cores")]
    cpu_physical_cores: Annotated[int | None, Doc("count", "physical cores; null where the system does not say")]
    memory_bytes: Annotated[int | None, Doc("bytes", "physical memory")]
    os: Annotated[str | None, Doc("", "the operating system and its release (Python's platform.platform())")]


LOAD_HOST = table(LoadHost)


class ServerInfo(TypedDict):
    """``provenance.server``: what the TTS server says of itself, from one bounded request before the
    run (``GET /v1/models``, locustfiles.provenance); null where it did not say."""

    url: Annotated[str | None, Doc("", "the request sent; null where the protocol has no HTTP (Wyoming)")]
    status: Annotated[int | None, Doc("", "its HTTP status; null without an answer")]
    http_version: Annotated[
        str | None, Doc("", "the HTTP version the server answered in: 'HTTP/1.1', 'HTTP/1.0', or 'HTTP/2' (gRPC)")
    ]
    server: Annotated[str | None, Doc("", "its Server header")]
    model: Annotated[
        str | None, Doc("", "the model it names: a model header of the answer, else the ids /v1/models lists")
    ]
    model_from: Annotated[str | None, Doc("", "where model came from: 'header NAME' or '/v1/models'")]
    error: Annotated[str | None, Doc("", "why there is no answer, one line")]


SERVER_INFO = table(ServerInfo)


class Provenance(TypedDict):
    """``provenance``: what two runs must share to compare like for like (``--baseline`` names each
    difference, analysis.regression)."""

    tts_knee: Annotated[str | None, Doc("", "tts-knee's version; null when not installed as a distribution")]
    commit: Annotated[
        str | None, Doc("", "the git commit of the clone tts-knee ran from; null when not run from a clone")
    ]
    modified: Annotated[
        bool | None, Doc("", "the clone had uncommitted changes to tracked files; null when not a clone")
    ]
    python: Annotated[str, Doc("", "Python's version")]
    locust: Annotated[str | None, Doc("", "Locust's version")]
    corpus: Annotated[str | None, Doc("", "the corpus file read (--texts, its default, or --trace)")]
    corpus_sha256: Annotated[str | None, Doc("", "SHA-256 of the corpus file's bytes; null where it could not be read")]
    trace_sha256: NotRequired[Annotated[str | None, Doc("", "--trace: SHA-256 of the trace file's bytes")]]
    options_sha256: Annotated[
        str,
        Doc(
            "",
            "SHA-256 of run.json's options as canonical JSON (keys sorted, no spaces, UTF-8), audio_dir "
            "and texts left out (where the audio went and the corpus was read from: runformat.files."
            "UNDIGESTED_OPTIONS): equal options, equal digest",
        ),
    ]
    host: Annotated[LoadHost, Doc("", "the load host: the master's, or the local runner's")]
    server: Annotated[ServerInfo, Doc("", "what the TTS server says of itself")]


PROVENANCE = table(Provenance)


class Preflight(TypedDict):
    """``preflight``: the warm-up request sent before the run."""

    ok: Annotated[bool, Doc("", "the target answered like a TTS server (or busy, but a server)")]
    status: Annotated[int | str | None, Doc("", "HTTP status (gRPC: the code name); null without an answer")]
    ms: Annotated[float | None, Doc("ms", "its round trip")]
    message: Annotated[str | None, Doc("", "why the run cannot start, one sentence")]


PREFLIGHT = table(Preflight)


class Decision(TypedDict):
    """One decision of the step plan."""

    after_step: Annotated[int | None, Doc("", "the step judged last when it was taken")]
    action: Annotated[str, Doc("", "'stop' (the rest of the grid skipped), 'refine' (a probe) or 'done'")]
    skipped: NotRequired[Annotated[list[int], Doc("users", "stop: the grid's concurrencies skipped")]]
    concurrency: NotRequired[Annotated[int, Doc("users", "refine: the probe's concurrency")]]
    rate: NotRequired[Annotated[float, Doc("req/s", "refine: the probe's offered rate (open loop)")]]
    voices: NotRequired[Annotated[int, Doc("count", "refine: the probe's number of voices (voice sweep)")]]
    answer: NotRequired[
        Annotated[float | None, Doc("users", "done: the highest level (concurrency, or rate) meeting the SLO")]
    ]
    why: Annotated[str, Doc("", "the decision in words, with the figures")]


DECISION = table(Decision)

Verdict = TypedDict(
    "Verdict",
    {
        "step": Annotated[int, Doc("", "")],
        "concurrency": NotRequired[Annotated[int, Doc("users", "closed loop")]],
        "rate": NotRequired[Annotated[float, Doc("req/s", "open loop: the offered rate")]],
        "voices": NotRequired[Annotated[int, Doc("count", "voice sweep: the step's number of voices")]],
        "phase": Annotated[str, Doc("", "")],
        "repeat": Annotated[int, Doc("count", "")],
        "pass": Annotated[bool | None, Doc("", "true, false, or null when inconclusive")],
        "failed": Annotated[list[str], Doc("", "the terms it fails, in words")],
        "inconclusive": Annotated[list[str], Doc("", "the terms the records cannot bound yet, in words")],
        "requests": Annotated[int | None, Doc("count", "requests judged")],
        "unanswered": Annotated[int, Doc("count", "requests sent before the cut-off with no record yet")],
        "steps": Annotated[list[int], Doc("", "the steps judged together")],
    },
)
Verdict.__doc__ = """One judged step's SLO verdict, as the plan took it."""
VERDICT = table(Verdict)

PlanLevel = TypedDict(
    "PlanLevel",
    {
        "concurrency": NotRequired[Annotated[int, Doc("users", "closed loop")]],
        "rate": NotRequired[Annotated[float, Doc("req/s", "open loop")]],
        "voices": NotRequired[Annotated[int, Doc("count", "voice sweep")]],
        "pass": Annotated[bool | None, Doc("", "")],
        "failed": Annotated[list[str], Doc("", "")],
        "inconclusive": Annotated[list[str], Doc("", "")],
        "steps": Annotated[list[int], Doc("", "the steps pooled")],
    },
)
PlanLevel.__doc__ = """One verdict per tested level (concurrency, or offered rate), repeats pooled."""
PLAN_LEVEL = table(PlanLevel)


class Plan(TypedDict):
    """The step plan (``run.json``'s ``plan``): the grid, the SLO, and what it decided step by step."""

    grid: Annotated[
        list[float], Doc("users", "the concurrency grid (open loop: the rates; voice sweep: numbers of voices)")
    ]
    repeat: Annotated[int, Doc("count", "passes over the grid")]
    slo: Annotated[str | None, Doc("", "the SLO spec")]
    refine: Annotated[bool, Doc("", "")]
    stop_past_knee: Annotated[bool, Doc("", "")]
    decisions: Annotated[list[Decision], Doc("", "what the plan decided, step by step")]
    verdicts: Annotated[list[Verdict], Doc("", "each judged step's SLO verdict")]
    levels: NotRequired[Annotated[list[PlanLevel], Doc("", "verdict per concurrency")]]
    max_concurrency: NotRequired[Annotated[int | None, Doc("users", "highest level meeting the SLO")]]
    max_rate: NotRequired[Annotated[float | None, Doc("req/s", "open loop: highest offered rate meeting the SLO")]]
    max_voices: NotRequired[Annotated[int | None, Doc("count", "voice sweep: most voices meeting the SLO")]]


PLAN = table(Plan)


class VoiceUpload(TypedDict):
    """``voice_uploads``: each registration and deletion of a voice (--voice-upload), timed."""

    voice: Annotated[str, Doc("", "the voice's name")]
    action: Annotated[str, Doc("", "'create' (POST /v1/audio/voices) or 'delete'")]
    t0: Annotated[float, Doc("unix s", "when it was sent")]
    ms: Annotated[float, Doc("ms", "its round trip")]
    status: Annotated[int | None, Doc("", "HTTP status; null without an answer")]
    ok: Annotated[bool, Doc("", "the server took it")]
    error: Annotated[str | None, Doc("", "why not, one line")]


VOICE_UPLOAD = table(VoiceUpload)


class SpeechCounts(TypedDict):
    """``run.json``'s ``speech`` (--asr-model, --asr-keep, tts-knee judge): clips offered to the
    judge, judged, not judged, and what it heard of them."""

    offered: Annotated[int, Doc("count", "clips the judge was given (--asr-keep: kept for tts-knee judge)")]
    judged: Annotated[int, Doc("count", "")]
    not_judged: Annotated[int, Doc("count", "undecodable, or the judge behind or gone (speech.jsonl says which)")]
    heard: NotRequired[
        Annotated[
            list[str],
            Doc(
                "",
                "what the judge heard of each clip: words (the error rate), voice (speaker similarity), sound "
                "(DNSMOS); [] for clips kept, not judged",
            ),
        ]
    ]
    not_heard: NotRequired[
        Annotated[
            str | None,
            Doc("", "why the voice and the sound were not heard, one sentence (null: they were)"),
        ]
    ]
    model: NotRequired[Annotated[str | None, Doc("", "the recogniser that judged (--asr-model); null: none yet")]]
    afterwards: NotRequired[Annotated[bool, Doc("", "judged after the run, by tts-knee judge")]]


class TraceBurst(TypedDict):
    """``trace``: the log a --trace run replays (locustfiles.inputs.trace) and its bursts (analysis.trace)."""

    start_s: Annotated[float, Doc("s", "its first arrival, seconds from the trace's start")]
    end_s: Annotated[float, Doc("s", "its last arrival")]
    arrivals: Annotated[int, Doc("count", "")]
    rate_rps: Annotated[float, Doc("req/s", "its arrivals over its length, at speed 1")]
    times_mean: Annotated[float, Doc("", "rate_rps over the trace's mean rate")]


class Trace(TypedDict):
    """``trace``: the log a --trace run replays (locustfiles.inputs.trace) and its bursts (analysis.trace)."""

    path: Annotated[str, Doc("", "the file replayed")]
    rows: Annotated[int, Doc("count", "arrivals in it")]
    duration_s: Annotated[float, Doc("s", "its last offset and one mean gap after it")]
    rate_rps: Annotated[float, Doc("req/s", "rows / duration_s: a step at speed S offers S times this")]
    conversations: Annotated[int, Doc("count", "conversations whose turns go in order on one caller")]
    bursts: Annotated[list[TraceBurst], Doc("", "where arrivals come at least twice as fast as the mean")]


class _SpikeProbe(TypedDict):
    at: Annotated[float, Doc("unix s", "when it was answered (or failed)")]
    phase: Annotated[str, Doc("", "the spike's step it was sent in")]


class SpikeHealth(_SpikeProbe, Preflight):
    """A health probe sent while the spike ran (``run.json``'s ``spike_health``): when, then as the preflight."""


SPIKE_HEALTH = table(SpikeHealth)


class RunInfo(TypedDict):
    """``run.json``: the run's plan, options, clocks and versions, written by the master."""

    format_version: Annotated[int, Doc("", "this format's version; missing means 1")]
    run_id: Annotated[str, Doc("", "the run directory's name")]
    start: Annotated[float, Doc("unix s", "")]
    end: Annotated[float | None, Doc("unix s", "null while the run goes on")]
    target: Annotated[str | None, Doc("", "the TTS server's base URL")]
    mode: Annotated[str | None, Doc("", "how load was offered, one of MODES; null or missing: read from the steps")]
    options: Annotated[
        dict[str, object], Doc("", "the run's options, secrets left out (runformat.options)", of=RUN_OPTIONS)
    ]
    settle_s: Annotated[float, Doc("s", "the run's settle window at the start of each step")]
    steps: Annotated[list[StepEntry], Doc("", "one entry each, in the order run")]
    workers: Annotated[list[WorkerEntry], Doc("", "one entry each")]
    collectors: Annotated[list[CollectorEntry], Doc("", "one entry each")]
    versions: Annotated[Versions, Doc("", "python, tts-knee, locust, gevent … and the command line")]
    provenance: NotRequired[
        Annotated[Provenance, Doc("", "what made the run: tool, corpus, options, load host and server")]
    ]
    plan: NotRequired[Annotated[Plan | None, Doc("", "the step plan and its decisions")]]
    preflight: NotRequired[Annotated[Preflight | None, Doc("", "the warm-up request")]]
    health: NotRequired[
        Annotated[
            Preflight,
            Doc("", "after the run: the warm-up request once more, or a GET of --health-path (ok: audio, or a 2xx)"),
        ]
    ]
    server_metrics: NotRequired[
        Annotated[list[ServerMetricsEntry], Doc("", "one entry per --server-metrics (or --server-stats) endpoint")]
    ]
    voice_uploads: NotRequired[Annotated[list[VoiceUpload], Doc("", "--voice-upload: each registration and deletion")]]
    trace: NotRequired[Annotated[Trace, Doc("", "--trace: the log replayed")]]
    spike_health: NotRequired[
        Annotated[list[SpikeHealth], Doc("", "--spike: health probes sent while it ran, once the server seemed gone")]
    ]
    error: NotRequired[Annotated[str | None, Doc("", "why the run could not go on, one sentence")]]
    speech: NotRequired[
        Annotated[
            SpeechCounts,
            Doc("", "--asr-model: clips offered to the judge, judged, not judged, and what it heard of them"),
        ]
    ]
    records: NotRequired[Annotated[int | None, Doc("count", "attempt records written, once the run ended")]]
    cut_by_run_end: NotRequired[
        Annotated[
            int, Doc("count", "of them, attempts still in flight when the run's drain ended (error cut_by_run_end)")
        ]
    ]
    audio_missing: NotRequired[
        Annotated[
            dict[str, int],
            Doc(
                "count",
                "attempts whose audio file was not written in time, by their audio_file ('late', 'dropped')",
                key="audio_file",
            ),
        ]
    ]


RUN = table(RunInfo)

# ---- builders -------------------------------------------------------------------------------

attempt = Builder("an attempt record", ATTEMPT)
resource_sample = Builder("a resource sample", RESOURCE_SAMPLE)
proc_reading = Builder("a proc entry", PROC)
gpu_reading = Builder("a GPU reading", GPU)
step_entry = Builder("a run.json step", STEP)
worker_entry = Builder("a run.json worker", WORKER)
collector_entry = Builder("a run.json collector", COLLECTOR)
server_metrics_entry = Builder("a run.json server_metrics entry", SERVER_METRICS)
voice_upload_entry = Builder("a run.json voice_uploads entry", VOICE_UPLOAD)
run_info = Builder("run.json", RUN)
spike_health_entry = Builder("a run.json spike_health entry", SPIKE_HEALTH)
speech_entry = Builder("a speech.jsonl line", SPEECH)
provenance_entry = Builder("run.json provenance", PROVENANCE)
load_host_entry = Builder("run.json provenance.host", LOAD_HOST)
server_info_entry = Builder("run.json provenance.server", SERVER_INFO)


def unknown_fields(table: tuple[Field, ...], record: dict[str, Any]) -> list[str]:
    """Names in ``record`` that ``table`` does not define (a misspelt or undeclared field)."""
    names = set(_names(table))
    return sorted(k for k in record if k not in names)


def missing_fields(table: tuple[Field, ...], record: dict[str, Any]) -> list[str]:
    """Names ``table`` requires (not optional) that ``record`` lacks."""
    return [f.name for f in table if not f.optional and f.name not in record]


def format_version(run: dict[str, Any]) -> int | None:
    """``run.json``'s format version: 1 when it has none, None when it is not a whole number."""
    v = run.get("format_version", 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def unreadable(run: dict[str, Any]) -> str | None:
    """Why this version cannot read a run directory with this ``run.json``, in one sentence;
    None when it can."""
    v = format_version(run)
    if v in READABLE_VERSIONS:
        return None
    readable = f"this tts-knee reads formats {READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]}"
    if v is None:
        return f"run.json has format_version {run.get('format_version')!r}, not a whole number; {readable}."
    return f"run.json has format_version {v}, written by a newer tts-knee; {readable}: upgrade to read it."
