"""The wire between tts-knee's nodes, declared once for both ends.

Locust custom messages between the master and its workers (each :class:`Payload`'s ``name`` is
the message type both ends register), and the collector's HTTP API as the master's puller
reads it (``name`` is the path). A sender builds its payload with the payload itself
(``STEP(step=2, …)``), which refuses a field the table does not declare; a receiver reads the
declared names. To add a message or an endpoint: one :class:`Payload` here, then its sender and
its receiver.
"""

from __future__ import annotations

from typing import Any

from .fields import Builder, Field
from .schema import ATTEMPT, RESOURCE_SAMPLE


class Payload:
    """One message type or endpoint answer: ``name`` (message type, or path), ``doc`` (who sends
    it to whom, and when) and its ``fields``; calling it builds a payload."""

    def __init__(self, name: str, doc: str, fields: tuple[Field, ...]):
        self.name = name
        self.doc = doc
        self.fields = fields
        self._build = Builder(f"the {name} payload", fields)

    def __call__(self, **values: Any) -> dict[str, Any]:
        return self._build(**values)

    def __repr__(self) -> str:
        return f"Payload({self.name!r})"


# ---- Locust custom messages --------------------------------------------------------------

STEP = Payload(
    "tts_knee_step",
    "master -> every worker, as each step begins",
    (
        Field("step", "", False, "1-based"),
        Field("concurrency", "users", False, "open loop: 0"),
        Field("settle_s", "s", True, "the step's settle window; null: the run's"),
        Field("rate", "req/s", True, "open loop: the offered rate, all workers together"),
        Field("workers", "", True, "open loop: worker id -> its index among those sharing the rate"),
        Field(
            "hold_s", "s", True, "a soak's length (its arrivals are laid over it); missing: --step-time", optional=True
        ),
        Field("voices", "count", True, "--voice-steps: the step draws its voices from the first this many"),
        Field("phase", "", False, "'probe' for a step of --probe-texts (its texts are the probe's)", optional=True),
    ),
)

RECORDS = Payload(
    "tts_knee_records",
    "worker -> master: a batch of attempt records, every "
    "BATCH_INTERVAL_S or BATCH_MAX records, and a final one at test stop",
    (
        Field("run", "", False, "the run it belongs to (the run directory's name)"),
        Field("seq", "count", False, "the batch's number on its worker, from 1"),
        Field("records", "", False, "attempt records, on the master's clock", of=ATTEMPT),
        Field("final", "", False, "the worker's last batch of the run"),
        Field("offset_s", "s", True, "the worker's clock minus the master's (null: not known yet)"),
        Field("rtt_s", "s", True, "round trip of the probe the offset came from"),
        Field("host", "", False, "the worker's hostname"),
        Field(
            "arrivals",
            "",
            False,
            "open loop: step -> what its arrivals became on the worker so far (running totals: planned, sent, "
            "dropped, not_sent by reason, and done once its schedule is settled)",
        ),
        Field("at", "unix s", False, "when the batch was made, on the master's clock"),
        Field(
            "in_flight",
            "unix s",
            True,
            "open loop: when each request the worker had in flight then was sent, "
            "on the master's clock (null in a closed loop)",
        ),
    ),
)

ACK = Payload(
    "tts_knee_ack",
    "master -> one worker, once its batch is written and flushed",
    (
        Field("seq", "count", False, "the batch acknowledged"),
        Field("run", "", False, ""),
    ),
)

WORKER_ERROR = Payload(
    "tts_knee_worker_error",
    "worker -> master: why it cannot run, before it leaves",
    (Field("message", "", False, "one sentence"),),
)

PING = Payload(
    "tts_knee_ping",
    "worker -> master: a clock probe",
    (
        Field("n", "count", False, "the probe's number"),
        Field("t", "unix s", False, "the worker's clock at sending"),
    ),
)

PONG = Payload(
    "tts_knee_pong",
    "master -> the worker that pinged: the answer",
    (
        Field("n", "count", False, "the probe answered"),
        Field("t", "unix s", False, "the ping's own t, sent back"),
        Field("tm", "unix s", False, "the master's clock at answering"),
    ),
)

CLIP = Payload(
    "tts_knee_clip",
    "worker -> master: a clip for the ASR judge (--asr-model), as its attempt's record goes out",
    (
        Field("req_id", "", False, "the attempt's request"),
        Field("step", "", False, ""),
        Field("concurrency", "users", True, ""),
        Field("text_id", "", False, ""),
        Field("text", "", False, "what was sent, to score the transcript against"),
        Field("language", "", True, "what the judge listens for; null: it detects"),
        Field(
            "reference",
            "",
            True,
            "listening: the voice's reference audio (its ref_audio, else --reference-voice), a path the master reads",
        ),
        Field("audio", "bytes", False, "the clip, a WAV (or the compressed audio as it came)"),
    ),
)

MESSAGES = (STEP, RECORDS, ACK, WORKER_ERROR, PING, PONG, CLIP)


# ---- the collector's HTTP API --------------------------------------------------------------

SAMPLES = Payload(
    "/samples",
    "GET /samples?since=SEQ: the samples with seq >= SEQ still in the ring",
    (
        Field("host", "", False, "the collector's hostname"),
        Field("boot", "", False, "changes when the collector restarts"),
        Field("next", "count", False, "the seq to ask for next time"),
        Field("samples", "", False, "resource samples on the collector's clock, each with its seq", of=RESOURCE_SAMPLE),
        Field("dropped", "count", False, "asked-for samples that already left the ring", optional=True),
        Field("server_roles", "", False, "its --server-role, ROLE=SERIES each", optional=True),
        Field("server_stage_label", "", False, "its --server-stage-label", optional=True),
    ),
)

TIME = Payload(
    "/time", "GET /time: the collector's clock, for the offset probes", (Field("time", "unix s", False, ""),)
)

SCRAPE_STATE = (
    Field("url", "", False, "a --scrape endpoint"),
    Field("state", "", False, "new, ok, down or bad"),
    Field("scrapes", "count", False, ""),
    Field("failures", "count", False, ""),
)

HEALTH = Payload(
    "/healthz",
    "GET /healthz: what the collector is doing",
    (
        Field("status", "", False, "'ok'"),
        Field("nvml", "", False, "NVML answers"),
        Field("samples", "count", False, "samples taken since it started"),
        Field("host", "", False, ""),
        Field("boot", "", False, ""),
        Field("interval_s", "s", False, "seconds between samples"),
        Field("gpus", "count", False, "GPUs in the latest sample"),
        Field("lost_gpus", "count", False, "of them, those that stopped answering"),
        Field("watching", "", True, "pid of the watched process, or null"),
        Field("scrapes", "", False, "each --scrape endpoint's state", of=SCRAPE_STATE),
    ),
)

ERROR = Payload(
    "error",
    "any endpoint's answer to a request it cannot serve (401, 400, 404)",
    (Field("error", "", False, "what was wrong, in a few words"),),
)

#: GET /metrics: the collector's own readings in Prometheus text exposition (not JSON).
METRICS_PATH = "/metrics"
