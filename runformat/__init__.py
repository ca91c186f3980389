"""The run directory format: the one definition of every file tts-knee writes into
``runs/<run-id>/`` and reads back, and of the wire between its nodes.

- ``runformat.schema``: each record kind declared once, as a TypedDict whose fields carry their
  unit and meaning; the tables derived from them, the builders writers and tests make records
  with, and the format version; ``runformat.fields`` is how a field is declared, how a table is
  derived and how a record is checked.
- ``runformat.options``: the run's options (flag, run.json key, unit, default, help), from which
  the load generator's parser is built and the reader takes its defaults.
- ``runformat.summary``: ``summary.json``, nested all the way down, declared the same way.
- ``runformat.wire``: the Locust messages between master and workers, and the collector's API.
- ``runformat.files``: the file names and how each file is written (JSONL lines, atomic files).
- ``runformat.check``: a finished run directory held to the declarations (no undeclared key).
- ``runformat.metric_roles``: what known servers' scraped series mean (queue depth, running
  requests, batch size, KV cache), for the collector that scrapes them and the analysis.
- ``runformat.live_series``: the live metrics a run serves (``--metrics-port``): each series'
  name, kind, labels and buckets.
- ``runformat.grpc_codes``: gRPC's status codes, which a gRPC attempt's ``status`` names, and
  the HTTP status each amounts to.
- ``runformat.reader``: reads a run directory back into columns (numpy, pandas, pyarrow; not
  imported by this package, so the collectors load none of them).

Imports neither locust nor gevent nor pandas: the collectors and the dashboard use it too.
"""

from .fields import Field, Keyed
from .files import (
    AUDIO_DIR,
    REPORT_HTML,
    REQUESTS,
    RESOURCES,
    RUN_JSON,
    SPEECH_DIR,
    SPEECH_FILE,
    SUMMARY_JSON,
    claim,
    json_text,
    jsonl_bytes,
    jsonl_line,
    versions,
    write_json,
    write_text,
)
from .options import OPTIONS, RUN_OPTIONS, Option
from .schema import (
    ATTEMPT,
    ATTEMPT_STREAM,
    ATTEMPT_TIMES,
    COLLECTOR,
    DECISION,
    FORMAT_VERSION,
    GPU,
    GPU_IDENTITY,
    GPU_READING,
    LOAD_HOST,
    MODES,
    PHASES,
    PLAN,
    PLAN_LEVEL,
    PREFLIGHT,
    PROBE_PHASE,
    PROC,
    PROVENANCE,
    READABLE_VERSIONS,
    RESOURCE_SAMPLE,
    RUN,
    SERVER_INFO,
    SERVER_METRICS,
    SOAK_PHASE,
    SPEECH,
    SPIKE_PHASES,
    STEP,
    VERDICT,
    VERSIONS,
    VOICE_UPLOAD,
    WORKER,
    attempt,
    collector_entry,
    format_version,
    gpu_reading,
    load_host_entry,
    missing_fields,
    proc_reading,
    provenance_entry,
    resource_sample,
    run_info,
    server_info_entry,
    server_metrics_entry,
    speech_entry,
    spike_health_entry,
    step_entry,
    unknown_fields,
    unreadable,
    voice_upload_entry,
    worker_entry,
)
from .summary import SUMMARY

__all__ = [
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "Field",
    "Keyed",
    "Option",
    "ATTEMPT",
    "ATTEMPT_TIMES",
    "ATTEMPT_STREAM",
    "RESOURCE_SAMPLE",
    "PROC",
    "GPU",
    "GPU_IDENTITY",
    "GPU_READING",
    "MODES",
    "RUN",
    "STEP",
    "WORKER",
    "COLLECTOR",
    "SERVER_METRICS",
    "VERSIONS",
    "PREFLIGHT",
    "PROVENANCE",
    "LOAD_HOST",
    "SERVER_INFO",
    "VOICE_UPLOAD",
    "voice_upload_entry",
    "SPEECH",
    "speech_entry",
    "spike_health_entry",
    "SPEECH_FILE",
    "SPEECH_DIR",
    "PLAN",
    "DECISION",
    "VERDICT",
    "PLAN_LEVEL",
    "SUMMARY",
    "OPTIONS",
    "RUN_OPTIONS",
    "attempt",
    "resource_sample",
    "proc_reading",
    "provenance_entry",
    "load_host_entry",
    "server_info_entry",
    "gpu_reading",
    "run_info",
    "step_entry",
    "worker_entry",
    "collector_entry",
    "server_metrics_entry",
    "unknown_fields",
    "missing_fields",
    "format_version",
    "unreadable",
    "PHASES",
    "SOAK_PHASE",
    "PROBE_PHASE",
    "SPIKE_PHASES",
    "json_text",
    "RUN_JSON",
    "REQUESTS",
    "RESOURCES",
    "SUMMARY_JSON",
    "REPORT_HTML",
    "AUDIO_DIR",
    "jsonl_bytes",
    "jsonl_line",
    "write_json",
    "write_text",
    "claim",
    "versions",
]
