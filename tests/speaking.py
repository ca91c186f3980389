"""What the listening tests share: their English corpus (six short sentences, one JSONL line each
with its language) and the simulator speaking it with piper's joe voice at a flat 150 ms. The
``corpus`` fixture (tests/integration/conftest.py) writes :data:`TEXTS` once per module."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path

from procs import Proc, spawn

TEXTS = [
    "Good morning, how can I help you today?",
    "The train to the airport leaves at nine.",
    "Please hold the line while I check your order.",
    "Thank you for calling, have a nice day.",
    "Your table for four is ready now.",
    "The museum opens again on Monday morning.",
]


def write_corpus(path: Path, texts: list[str] = TEXTS) -> Path:
    """``texts`` as a JSONL corpus at ``path`` (ids t0, t1 …, language en); returns ``path``."""
    path.write_text(
        "".join(json.dumps({"id": f"t{i}", "text": t, "language": "en"}) + "\n" for i, t in enumerate(texts))
    )
    return path


def speaking(corpus: Path, *knobs: str) -> AbstractContextManager[Proc]:
    """The simulator speaking ``corpus``, latency flat at 150 ms (slots for every user), with ``knobs``."""
    return spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--speech",
            "--speech-corpus",
            str(corpus),
            "--slots",
            "64",
            "--base-ms",
            "150",
            "--per-char-ms",
            "0",
            "--jitter",
            "0",
            *knobs,
        ],
        timeout=300,
    )
