"""The run directory format: the one definition of every file tts-knee writes into
``runs/<run-id>/`` and reads back.

- ``runformat.schema``: each record kind's fields (name, unit, may it be null) as tables, the
  builders writers and tests make records with, and the format version.
- ``runformat.files``: the file names and how each file is written.
- ``runformat.metric_roles``: what known servers' scraped series mean (queue depth, running
  requests, batch size, KV cache), for the collector that scrapes them and the analysis.
- ``runformat.reader``: reads a run directory back into columns (numpy, pandas, pyarrow; not
  imported by this package, so the collectors load none of them).

Imports neither locust nor gevent nor pandas: the collectors and the dashboard use it too.
"""
from .files import (AUDIO_DIR, REPORT_HTML, REQUESTS, RESOURCES, RUN_JSON, SUMMARY_JSON, claim,
                    jsonl_bytes, jsonl_line, versions, write_json)
from .schema import (ATTEMPT, ATTEMPT_STREAM, ATTEMPT_TIMES, COLLECTOR, FORMAT_VERSION, GPU,
                     GPU_IDENTITY, GPU_READING, MODES, PLAN, PROC, READABLE_VERSIONS, RESOURCE_SAMPLE, RUN,
                     STEP, SUMMARY, WORKER, Field, attempt, collector_entry, format_version,
                     gpu_reading, missing_fields, proc_reading, resource_sample, run_info,
                     step_entry, unknown_fields, unreadable, worker_entry)

__all__ = [
    "FORMAT_VERSION", "READABLE_VERSIONS", "Field",
    "ATTEMPT", "ATTEMPT_TIMES", "ATTEMPT_STREAM", "RESOURCE_SAMPLE", "PROC", "GPU", "GPU_IDENTITY",
    "GPU_READING", "MODES", "RUN", "STEP", "WORKER", "COLLECTOR", "PLAN", "SUMMARY",
    "attempt", "resource_sample", "proc_reading", "gpu_reading", "run_info", "step_entry",
    "worker_entry", "collector_entry", "unknown_fields", "missing_fields", "format_version",
    "unreadable",
    "RUN_JSON", "REQUESTS", "RESOURCES", "SUMMARY_JSON", "REPORT_HTML", "AUDIO_DIR",
    "jsonl_bytes", "jsonl_line", "write_json", "claim", "versions",
]
