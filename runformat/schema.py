"""Every field of the run directory: its name, its unit, and whether it may be null.

The tables are data (tuples of :class:`Field`) so that writers, readers and tests share one
spelling. Each record kind has a builder that takes only the names its table knows and fills
every field it was not given with null, in table order: a writer cannot forget or misspell a
field, and the key order (and so the bytes) of a record does not depend on who built it.

A field marked ``optional`` is left out of a record unless given: fields that only some runs
carry (streaming lists, open-loop scheduling, server metrics). Readers must treat a missing
field and a null one alike. A field whose value is an object names that object's table in
``of`` (see :mod:`runformat.fields`), all the way down, so every key a file holds is declared:
:func:`runformat.check.undeclared_keys` holds a run directory to it.

``summary.json`` is declared in :mod:`runformat.summary`, the run's options in
:mod:`runformat.options`, the messages between nodes in :mod:`runformat.wire`.
"""

from __future__ import annotations

from typing import Any

from .fields import Builder, Field, Keyed, names as _names
from .options import RUN_OPTIONS

#: The run directory format this version of tts-knee writes (``run.json``'s ``format_version``).
#: 1: runs from before the field existed (no ``format_version``); 2: the same records, with it.
FORMAT_VERSION = 2
#: Format versions this version reads.
READABLE_VERSIONS = (1, 2)


# ---- requests.jsonl: one attempt per line -----------------------------------------------

#: Attempt record fields, in the order a record carries them.
ATTEMPT: tuple[Field, ...] = (
    Field("step", "", True, "1-based step the attempt was sent in (null before the first step)"),
    Field(
        "concurrency",
        "users",
        True,
        "the step's concurrency; open loop: requests in flight at sending, this one included",
    ),
    Field("worker", "", False, "Locust worker id, or 'local'"),
    Field("user", "", False, "user number on its worker"),
    Field("t0", "unix s", False, "before the request was sent, master's clock"),
    Field("t1", "unix s", True, "first body byte"),
    Field("t2", "unix s", True, "body fully read"),
    Field("t3", "unix s", True, "audio written to disk and closed"),
    Field("ttfb_ms", "ms", True, "t1 - t0"),
    Field("wait_ms", "ms", True, "t2 - t0: server and network"),
    Field("write_ms", "ms", True, "t3 - t2: the client's write"),
    Field("concat_ms", "ms", True, "joining a split text's segments on the client"),
    Field(
        "status",
        "",
        True,
        "HTTP status, or a gRPC attempt's code name (OK, RESOURCE_EXHAUSTED …: "
        "runformat.grpc_codes); null on a connection error",
    ),
    Field("ok", "", False, "a 2xx answer carrying valid audio"),
    Field("error", "", True, "why the attempt failed, one line"),
    Field("bytes", "bytes", False, "body bytes read"),
    Field("audio_s", "s", True, "audio duration from the PCM byte count and format"),
    Field("rtf", "", True, "synthesis seconds / audio seconds"),
    Field("retry_after_s", "s", True, "Retry-After (gRPC: the pushback), parsed"),
    Field(
        "retry_after_raw",
        "",
        True,
        "Retry-After as sent; gRPC: the trailer that said it, as 'grpc-retry-pushback-ms: 1000' or 'retry-after: 1'",
    ),
    Field("server_timing", "ms", True, "Server-Timing: stage name -> ms", of=Keyed("stage name")),
    Field("settled", "", False, "false inside the step's settle (warm-up) window"),
    Field(
        "ttfa_ms",
        "ms",
        True,
        "to the first audio sample, past any header or SSE framing; from the "
        "first text sent where the text went in pieces (text_first_ms), else from t0",
    ),
    Field("chunks", "count", True, "body blocks that carried audio"),
    Field("gap_max_ms", "ms", True, "longest wait between two audio arrivals"),
    Field("underruns", "count", True, "times a 1x player fed by these arrivals ran dry"),
    Field("underrun_ms", "ms", True, "silence those underruns add up to"),
    Field("chunk_at_ms", "ms", True, "arrival of each chunk after t0 (streamed runs only)"),
    Field("chunk_audio_ms", "ms", True, "audio each chunk carried"),
    Field("req_id", "", False, "one logical request, unique across workers"),
    Field("attempt", "count", False, "1-based attempt number"),
    Field("final", "", False, "the last attempt of its request"),
    Field("text_id", "", True, "corpus id of the text"),
    Field("text_len", "chars", False, "characters sent in this attempt"),
    Field("tier", "", True, "short, medium or long"),
    Field("segment", "", True, "'k/n' for a segment of a split text"),
    Field("backoff_ms", "ms", True, "slept before this attempt"),
    Field("scheduled", "unix s", True, "open loop: when the arrival process scheduled the request", optional=True),
    Field(
        "sched_wait_ms",
        "ms",
        True,
        "open loop: t2 - scheduled, what a caller who arrived on time waited "
        "(t0 - scheduled is the generator's own lateness, its send lag)",
        optional=True,
    ),
    # text sent in pieces, as a language model writes it (sessions: WebSocket, Wyoming, gRPC streams)
    Field("text_first_ms", "ms", True, "the first piece of text sent, after t0", optional=True),
    Field("text_done_ms", "ms", True, "the end of the text (its final flush) sent, after t0", optional=True),
    Field(
        "done_to_audio_ms",
        "ms",
        True,
        "the end of the text to the first audio after it; 0 when audio was already flowing",
        optional=True,
    ),
    Field(
        "tail_ms",
        "ms",
        True,
        "the end of the text to the last audio: what the listener waits once the text is complete",
        optional=True,
    ),
    Field(
        "connect_ms",
        "ms",
        True,
        "opening the session (TCP and the protocol's handshake) for this attempt; null when it went on an open one",
        optional=True,
    ),
    Field(
        "audio_file",
        "",
        True,
        "why its audio file was not written in time: 'late' (the user did not wait "
        "longer for a stalling disk; written when it gets to it) or 'dropped' (not written: "
        "too much audio waited already); t3 and write_ms are then null",
        optional=True,
    ),
    # voices: what the request asked for beside its words
    Field(
        "voice",
        "",
        True,
        "the voice the request named (its own, the mix's, --tts-voice), or its reference clip's file name",
        optional=True,
    ),
    Field("language", "", True, "the language the request named", optional=True),
    # barge-in: the listener interrupted the utterance, which was cancelled (--barge-in)
    Field(
        "cancelled",
        "",
        True,
        "the listener interrupted it: not a failure; only what came before the cancel "
        "counts in its stream figures, and it counts in no latency figure",
        optional=True,
    ),
    Field("cancel_ms", "ms", True, "the cancel sent (or the connection closed), after t0", optional=True),
    Field(
        "cancel_to_quiet_ms",
        "ms",
        True,
        "the cancel to the last audio received, or to the server's "
        "acknowledgement where the dialect has one; null when that never came",
        optional=True,
    ),
    Field(
        "audio_after_cancel_ms",
        "ms",
        True,
        "audio that still arrived after the cancel, in playback time",
        optional=True,
    ),
    Field(
        "cancel_quiet",
        "",
        True,
        "how it went quiet: acknowledged, closed, ended (the server ended the "
        "utterance), quiet (no audio for a while), unacknowledged",
        optional=True,
    ),
    Field(
        "cancel_note", "", True, "what became of the connection when the cancel went wrong, one sentence", optional=True
    ),
    # the signal, checked on every attempt whose audio is PCM16 (WAV, raw PCM, SSE): audio.signal
    Field(
        "leading_silence_ms",
        "ms",
        True,
        "audio before the first 10 ms frame at or above the silence level (-40 dBFS RMS)",
        optional=True,
    ),
    Field(
        "trailing_silence_ms",
        "ms",
        True,
        "audio after the last 10 ms frame at or above the silence level",
        optional=True,
    ),
    Field("clipped_share", "", True, "share of samples at full scale (clipped)", optional=True),
    Field(
        "ttfa_audible_ms",
        "ms",
        True,
        "when the listener hears the first sound: the playback model's moment "
        "the first frame above the silence level plays, from ttfa_ms's origin",
        optional=True,
    ),
)
#: What the ASR judge says of one attempt it judged (``speech.jsonl``, :mod:`audio.asr`).
SPEECH: tuple[Field, ...] = (
    Field("req_id", "", False, "the attempt's request (its final, successful attempt)"),
    Field("step", "", True, "the step the attempt ran in"),
    Field("concurrency", "count", True, "the step's concurrency"),
    Field("text_id", "", True, "corpus id of the text"),
    Field("text", "", True, "the text sent, which the transcript is scored against"),
    Field("language", "", True, "the language the judge was told, or the one it detected"),
    Field("metric", "", True, "'wer' (words) or 'cer' (characters: languages written without spaces)"),
    Field(
        "error",
        "",
        True,
        "word (or character) error rate against the text sent, after normalisation "
        "(audio.asr.normalize); null where the clip could not be judged",
    ),
    Field("transcript", "", True, "what the recogniser heard"),
    Field(
        "reason",
        "",
        True,
        "why the clip was not judged (undecodable audio, the judge behind or gone), one sentence; null when judged",
    ),
    Field("audio_s", "s", True, "the clip's length"),
    Field("judge_s", "s", True, "CPU seconds the judge spent on the clip"),
    Field("clip", "", True, "the clip, relative to the run directory (speech/<req_id>.wav)"),
    Field(
        "similarity",
        "",
        True,
        "speaker similarity (cosine of speaker embeddings, audio.speaker) to the same text's clip at the "
        "lowest concurrency heard so far (--asr-listen); null where the clip was too short to embed",
        optional=True,
    ),
    Field(
        "similarity_ref",
        "",
        True,
        "speaker similarity to the voice's reference audio (its ref_audio, else --reference-voice)",
        optional=True,
    ),
    Field("reference", "", True, "the reference audio similarity_ref compares with", optional=True),
    Field(
        "mos",
        "",
        True,
        "predicted naturalness, DNSMOS P.835 OVRL (1-5, audio.quality); null where too short to score",
        optional=True,
    ),
    Field("mos_sig", "", True, "DNSMOS P.835 SIG: the speech itself (1-5)", optional=True),
    Field("mos_bak", "", True, "DNSMOS P.835 BAK: the background, noise and clicks (1-5)", optional=True),
    Field(
        "listen_reason",
        "",
        True,
        "why similarity or mos is null, one sentence; null when both are there",
        optional=True,
    ),
    Field("embedding", "", True, "the clip's speaker embedding (256 values, unit length)", optional=True),
)
#: The timestamps of an attempt: shifted onto the master's clock by a worker.
ATTEMPT_TIMES = ("t0", "t1", "t2", "t3", "scheduled")
#: The streaming fields of an attempt whose body was not parsed as audio.
ATTEMPT_STREAM = ("ttfa_ms", "chunks", "gap_max_ms", "underruns", "underrun_ms", "chunk_at_ms", "chunk_audio_ms")


# ---- resources.jsonl: one sample per line ------------------------------------------------

#: ``proc``: the watched process and its children.
PROC: tuple[Field, ...] = (
    Field("pid", "", True, "the watched root process; null for a heartbeat"),
    Field("cpu_percent", "percent", True, "of one core, summed over the tree"),
    Field("rss_bytes", "bytes", True, ""),
    Field("num_children", "count", True, "", optional=True),
)

#: GPU identity fields (what enumeration gives) before the readings.
GPU_IDENTITY: tuple[Field, ...] = (
    Field("index", "", False, "NVML device index"),
    Field("mig_index", "", True, "MIG instance index, null for a whole GPU"),
    Field("uuid", "", True, ""),
    Field("name", "", True, ""),
    Field("lost", "", False, "the device (or driver) went away: its readings are null"),
)
#: GPU readings: null for what the device does not support (never 0 for unknown).
GPU_READING: tuple[Field, ...] = (
    Field("util_percent", "percent", True, "NVML utilization.gpu: time a kernel ran, not SM occupancy"),
    Field("mem_used_bytes", "bytes", True, ""),
    Field("mem_total_bytes", "bytes", True, ""),
    Field("power_w", "W", True, ""),
    Field("temp_c", "°C", True, ""),
    Field("sm_clock_mhz", "MHz", True, ""),
    Field("clock_event_reasons", "", True, "decoded clock event (throttle) reasons"),
    Field("proc_mem_bytes", "bytes", True, "GPU memory the watched processes hold"),
)
GPU: tuple[Field, ...] = GPU_IDENTITY + GPU_READING

#: A resource sample's fields. Collectors send the same fields on their own clock with a
#: ``seq``; the puller writes them on the master's clock with ``collector`` and ``clock_offset_s``.
RESOURCE_SAMPLE: tuple[Field, ...] = (
    Field("seq", "count", True, "the collector's sample number (0, 1, 2 … for its lifetime)", optional=True),
    Field("ts", "unix s", False, "when it was taken; the master's clock in resources.jsonl"),
    Field("host", "", False, "hostname, or a Locust worker id for heartbeat samples"),
    Field("role", "", False, "'server' or 'client' (the load generator)"),
    Field(
        "source",
        "",
        True,
        "what took it when not a collector: 'locust-heartbeat', or the --server-metrics URL",
        optional=True,
    ),
    Field("interval_s", "s", True, "time since the previous sample", optional=True),
    Field("cpu_percent", "percent", True, "all cores together"),
    Field("cpu_max_core_percent", "percent", True, "the busiest core"),
    Field("iowait_percent", "percent", True, "", optional=True),
    Field("steal_percent", "percent", True, "", optional=True),
    Field("cpu_count", "count", True, "", optional=True),
    Field("mem_used_bytes", "bytes", True, "what applications hold; not cache"),
    Field("mem_total_bytes", "bytes", True, ""),
    Field("disk_read_bytes", "bytes", True, "cumulative", optional=True),
    Field("disk_write_bytes", "bytes", True, "cumulative", optional=True),
    Field("net_sent_bytes", "bytes", True, "cumulative", optional=True),
    Field("net_recv_bytes", "bytes", True, "cumulative", optional=True),
    Field("proc", "", True, "the watched server process tree, or null", of=PROC),
    Field("gpus", "", False, "one GPU reading each; [] without NVML", of=GPU),
    Field(
        "metrics",
        "",
        True,
        "scraped server metrics: series -> value (counters as per-second rates)",
        optional=True,
        of=Keyed("series"),
    ),
    Field("collector", "", True, "the collector's URL; null for the master's own host", optional=True),
    Field("clock_offset_s", "s", True, "subtracted from the collector's ts", optional=True),
)


# ---- run.json ------------------------------------------------------------------------------

STEP: tuple[Field, ...] = (
    Field("step", "", False, "1-based"),
    Field("concurrency", "users", False, ""),
    Field("start", "unix s", False, ""),
    Field("end", "unix s", True, "null while it runs"),
    Field(
        "phase", "", False, "one of PHASES: 'grid', 'refine', 'soak', 'probe', 'before_spike', 'spike' or 'recovery'"
    ),
    Field("repeat", "count", False, "1-based pass over the grid"),
    Field("settle_s", "s", False, "this step's settle window"),
    Field("cutoff", "unix s", True, "judged on the requests sent before this; null when not judged"),
    Field(
        "rate",
        "req/s",
        True,
        "open loop: the step's offered arrival rate, all workers together (its concurrency is then 0)",
        optional=True,
    ),
    Field("voices", "count", False, "--voice-steps: the distinct voices the step drew from", optional=True),
    Field("dropped", "count", False, "open loop: arrivals not sent, finding --max-inflight in flight", optional=True),
    Field("workers", "count", False, "open loop: workers sharing the rate", optional=True),
    Field(
        "offered_rps",
        "req/s",
        False,
        "--trace: the arrivals the step's settled window replays, per second "
        "(its rate is the speed times the trace's mean)",
        optional=True,
    ),
)

#: A step's ``phase``: a level of the grid (--steps or --rates), a refine probe (--refine), the
#: one level a soak holds (--soak), a level of the hostile-text probe (--probe-texts), or one of
#: the spike's three (--spike: the steady level before it, the spike, the level again after it).
PHASES = ("grid", "refine", "soak", "probe", "before_spike", "spike", "recovery")
SOAK_PHASE = "soak"
PROBE_PHASE = "probe"
SPIKE_PHASES = ("before_spike", "spike", "recovery")

WORKER: tuple[Field, ...] = (
    Field("id", "", False, "Locust client id, or 'local'"),
    Field("offset_s", "s", True, "worker clock minus master clock"),
    Field("rtt_s", "s", True, "round trip of the probe the offset came from"),
    Field("records", "count", False, "attempt records received", optional=True),
    Field("batches", "count", False, "", optional=True),
    Field("final", "", False, "its final batch came", optional=True),
    Field("first_seen", "unix s", False, "", optional=True),
    Field("last_seen", "unix s", True, "", optional=True),
    Field("lost_at", "unix s", True, "when Locust stopped hearing from it", optional=True),
    Field("host", "", True, "", optional=True),
)

COLLECTOR: tuple[Field, ...] = (
    Field("url", "", False, ""),
    Field("host", "", True, ""),
    Field("offset_s", "s", True, "collector clock minus master clock, at the start"),
    Field("rtt_s", "s", True, ""),
    Field("offset_end_s", "s", True, "the same at the end"),
    Field("rtt_end_s", "s", True, ""),
    Field("reachable", "", False, ""),
    Field("gaps", "unix s", False, "[from, to] spans without samples"),
    Field("outages", "unix s", False, "[from, to] spans it did not answer (to: null if never again)"),
    Field("samples", "count", False, "samples written"),
    Field("dropped", "count", False, "samples that left its ring before they were read"),
    Field("restarts", "count", False, ""),
    Field(
        "server_roles", "", False, "its --server-role, ROLE=SERIES each: what its scraped series mean", optional=True
    ),
)

#: run.json's ``mode``: users sending back to back at each step's concurrency (--steps), or
#: arrivals on a schedule at each step's offered rate (--rates). A later mode (sessions) adds a
#: name here; the reader refuses one it does not know.
MODES = ("closed", "open")

#: ``server_metrics``: one per ``--server-metrics`` endpoint the master scraped (and per
#: ``--server-stats`` JSON endpoint it polled).
SERVER_METRICS: tuple[Field, ...] = (
    Field("url", "", False, ""),
    Field("samples", "count", False, "samples written (a failed scrape writes one with metrics null)"),
    Field("failures", "count", False, "scrapes that failed"),
    Field("series_left_out", "count", False, "series the cap left out at the last scrape"),
)

#: ``versions``: what measured, and how it was started.
VERSIONS: tuple[Field, ...] = (
    Field("python", "", False, ""),
    Field("tts-knee", "", True, "null when not installed as a distribution"),
    Field("locust", "", True, ""),
    Field("gevent", "", True, ""),
    Field("geventhttpclient", "", True, ""),
    Field("argv", "", False, "the command line, the collector token hidden"),
)

#: ``provenance.host``: the machine the master (or the local runner) ran on.
LOAD_HOST: tuple[Field, ...] = (
    Field("cpu_model", "", True, "the CPU's model name; null where the system does not say"),
    Field("cpu_cores", "count", True, "logical cores"),
    Field("cpu_physical_cores", "count", True, "physical cores; null where the system does not say"),
    Field("memory_bytes", "bytes", True, "physical memory"),
    Field("os", "", True, "the operating system and its release (Python's platform.platform())"),
)
#: ``provenance.server``: what the TTS server says of itself, from one bounded request before the
#: run (``GET /v1/models``, locustfiles.provenance); null where it did not say.
SERVER_INFO: tuple[Field, ...] = (
    Field("url", "", True, "the request sent; null where the protocol has no HTTP (Wyoming)"),
    Field("status", "", True, "its HTTP status; null without an answer"),
    Field(
        "http_version", "", True, "the HTTP version the server answered in: 'HTTP/1.1', 'HTTP/1.0', or 'HTTP/2' (gRPC)"
    ),
    Field("server", "", True, "its Server header"),
    Field("model", "", True, "the model it names: a model header of the answer, else the ids /v1/models lists"),
    Field("model_from", "", True, "where model came from: 'header NAME' or '/v1/models'"),
    Field("error", "", True, "why there is no answer, one line"),
)
#: ``provenance``: what two runs must share to compare like for like (``--baseline`` names each
#: difference, analysis.regression).
PROVENANCE: tuple[Field, ...] = (
    Field("tts_knee", "", True, "tts-knee's version; null when not installed as a distribution"),
    Field("commit", "", True, "the git commit of the clone tts-knee ran from; null when not run from a clone"),
    Field("modified", "", True, "the clone had uncommitted changes to tracked files; null when not a clone"),
    Field("python", "", False, "Python's version"),
    Field("locust", "", True, "Locust's version"),
    Field("corpus", "", True, "the corpus file read (--texts, its default, or --trace)"),
    Field("corpus_sha256", "", True, "SHA-256 of the corpus file's bytes; null where it could not be read"),
    Field("trace_sha256", "", True, "--trace: SHA-256 of the trace file's bytes", optional=True),
    Field(
        "options_sha256",
        "",
        False,
        "SHA-256 of run.json's options as canonical JSON (keys sorted, no spaces, UTF-8), audio_dir "
        "and texts left out (where the audio went and the corpus was read from: runformat.files."
        "UNDIGESTED_OPTIONS): equal options, equal digest",
    ),
    Field("host", "", False, "the load host: the master's, or the local runner's", of=LOAD_HOST),
    Field("server", "", False, "what the TTS server says of itself", of=SERVER_INFO),
)

#: ``preflight``: the warm-up request sent before the run.
PREFLIGHT: tuple[Field, ...] = (
    Field("ok", "", False, "the target answered like a TTS server (or busy, but a server)"),
    Field("status", "", True, "HTTP status (gRPC: the code name); null without an answer"),
    Field("ms", "ms", True, "its round trip"),
    Field("message", "", True, "why the run cannot start, one sentence"),
)

#: One decision of the step plan.
DECISION: tuple[Field, ...] = (
    Field("after_step", "", True, "the step judged last when it was taken"),
    Field("action", "", False, "'stop' (the rest of the grid skipped), 'refine' (a probe) or 'done'"),
    Field("skipped", "users", False, "stop: the grid's concurrencies skipped", optional=True),
    Field("concurrency", "users", False, "refine: the probe's concurrency", optional=True),
    Field("rate", "req/s", False, "refine: the probe's offered rate (open loop)", optional=True),
    Field("voices", "count", False, "refine: the probe's number of voices (voice sweep)", optional=True),
    Field("answer", "users", True, "done: the highest level (concurrency, or rate) meeting the SLO", optional=True),
    Field("why", "", False, "the decision in words, with the figures"),
)

#: One judged step's SLO verdict, as the plan took it.
VERDICT: tuple[Field, ...] = (
    Field("step", "", False, ""),
    Field("concurrency", "users", False, "closed loop", optional=True),
    Field("rate", "req/s", False, "open loop: the offered rate", optional=True),
    Field("voices", "count", False, "voice sweep: the step's number of voices", optional=True),
    Field("phase", "", False, ""),
    Field("repeat", "count", False, ""),
    Field("pass", "", True, "true, false, or null when inconclusive"),
    Field("failed", "", False, "the terms it fails, in words"),
    Field("inconclusive", "", False, "the terms the records cannot bound yet, in words"),
    Field("requests", "count", True, "requests judged"),
    Field("unanswered", "count", False, "requests sent before the cut-off with no record yet"),
    Field("steps", "", False, "the steps judged together"),
)

#: One verdict per tested level (concurrency, or offered rate), repeats pooled.
PLAN_LEVEL: tuple[Field, ...] = (
    Field("concurrency", "users", False, "closed loop", optional=True),
    Field("rate", "req/s", False, "open loop", optional=True),
    Field("voices", "count", False, "voice sweep", optional=True),
    Field("pass", "", True, ""),
    Field("failed", "", False, ""),
    Field("inconclusive", "", False, ""),
    Field("steps", "", False, "the steps pooled"),
)

PLAN: tuple[Field, ...] = (
    Field("grid", "users", False, "the concurrency grid (open loop: the rates; voice sweep: numbers of voices)"),
    Field("repeat", "count", False, "passes over the grid"),
    Field("slo", "", True, "the SLO spec"),
    Field("refine", "", False, ""),
    Field("stop_past_knee", "", False, ""),
    Field("decisions", "", False, "what the plan decided, step by step", of=DECISION),
    Field("verdicts", "", False, "each judged step's SLO verdict", of=VERDICT),
    Field("levels", "", False, "verdict per concurrency", optional=True, of=PLAN_LEVEL),
    Field("max_concurrency", "users", True, "highest level meeting the SLO", optional=True),
    Field("max_rate", "req/s", True, "open loop: highest offered rate meeting the SLO", optional=True),
    Field("max_voices", "count", True, "voice sweep: most voices meeting the SLO", optional=True),
)

#: ``voice_uploads``: each registration and deletion of a voice (--voice-upload), timed.
VOICE_UPLOAD: tuple[Field, ...] = (
    Field("voice", "", False, "the voice's name"),
    Field("action", "", False, "'create' (POST /v1/audio/voices) or 'delete'"),
    Field("t0", "unix s", False, "when it was sent"),
    Field("ms", "ms", False, "its round trip"),
    Field("status", "", True, "HTTP status; null without an answer"),
    Field("ok", "", False, "the server took it"),
    Field("error", "", True, "why not, one line"),
)

SPEECH_COUNTS: tuple[Field, ...] = (
    Field("offered", "count", False, "clips the judge was given"),
    Field("judged", "count", False, ""),
    Field("not_judged", "count", False, "undecodable, or the judge behind or gone (speech.jsonl says which)"),
)
#: ``trace``: the log a --trace run replays (locustfiles.inputs.trace) and its bursts (analysis.trace).
TRACE_BURST: tuple[Field, ...] = (
    Field("start_s", "s", False, "its first arrival, seconds from the trace's start"),
    Field("end_s", "s", False, "its last arrival"),
    Field("arrivals", "count", False, ""),
    Field("rate_rps", "req/s", False, "its arrivals over its length, at speed 1"),
    Field("times_mean", "", False, "rate_rps over the trace's mean rate"),
)
TRACE: tuple[Field, ...] = (
    Field("path", "", False, "the file replayed"),
    Field("rows", "count", False, "arrivals in it"),
    Field("duration_s", "s", False, "its last offset and one mean gap after it"),
    Field("rate_rps", "req/s", False, "rows / duration_s: a step at speed S offers S times this"),
    Field("conversations", "count", False, "conversations whose turns go in order on one caller"),
    Field("bursts", "", False, "where arrivals come at least twice as fast as the mean", of=TRACE_BURST),
)
SPIKE_HEALTH: tuple[Field, ...] = (
    Field("at", "unix s", False, "when it was answered (or failed)"),
    Field("phase", "", False, "the spike's step it was sent in"),
    *PREFLIGHT,
)
RUN: tuple[Field, ...] = (
    Field("format_version", "", False, "this format's version; missing means 1"),
    Field("run_id", "", False, "the run directory's name"),
    Field("start", "unix s", False, ""),
    Field("end", "unix s", True, "null while the run goes on"),
    Field("target", "", True, "the TTS server's base URL"),
    Field("mode", "", True, "how load was offered, one of MODES; null or missing: read from the steps"),
    Field("options", "", False, "the run's options, secrets left out (runformat.options)", of=RUN_OPTIONS),
    Field("settle_s", "s", False, "the run's settle window at the start of each step"),
    Field("steps", "", False, "one entry each, in the order run", of=STEP),
    Field("workers", "", False, "one entry each", of=WORKER),
    Field("collectors", "", False, "one entry each", of=COLLECTOR),
    Field("versions", "", False, "python, tts-knee, locust, gevent … and the command line", of=VERSIONS),
    Field(
        "provenance",
        "",
        False,
        "what made the run: tool, corpus, options, load host and server",
        optional=True,
        of=PROVENANCE,
    ),
    Field("plan", "", True, "the step plan and its decisions", optional=True, of=PLAN),
    Field("preflight", "", True, "the warm-up request", optional=True, of=PREFLIGHT),
    Field(
        "health",
        "",
        False,
        "after the run: the warm-up request once more, or a GET of --health-path (ok: audio, or a 2xx)",
        optional=True,
        of=PREFLIGHT,
    ),
    Field(
        "server_metrics",
        "",
        False,
        "one entry per --server-metrics (or --server-stats) endpoint",
        optional=True,
        of=SERVER_METRICS,
    ),
    Field("voice_uploads", "", False, "--voice-upload: each registration and deletion", optional=True, of=VOICE_UPLOAD),
    Field("trace", "", False, "--trace: the log replayed", optional=True, of=TRACE),
    Field(
        "spike_health",
        "",
        False,
        "--spike: health probes sent while it ran, once the server seemed gone",
        optional=True,
        of=SPIKE_HEALTH,
    ),
    Field("error", "", True, "why the run could not go on, one sentence", optional=True),
    Field(
        "speech",
        "count",
        False,
        "--asr-model: clips offered to the judge, judged, not judged",
        optional=True,
        of=SPEECH_COUNTS,
    ),
    Field("records", "count", True, "attempt records written, once the run ended", optional=True),
    Field(
        "cut_by_run_end",
        "count",
        False,
        "of them, attempts still in flight when the run's drain ended (error cut_by_run_end)",
        optional=True,
    ),
    Field(
        "audio_missing",
        "count",
        False,
        "attempts whose audio file was not written in time, by their audio_file ('late', 'dropped')",
        optional=True,
        of=Keyed("audio_file"),
    ),
)

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
