"""The baseline for bench/generator_cost.py: the locustfile a user would write to load a TTS
endpoint without tts-knee, a ``FastHttpUser`` with Locust's defaults posting the OpenAI-shaped
request with ``json=`` and reading the whole WAV body (as ``self.client.post`` does). It sends
the same corpus in the same order as tts-knee's user; nothing else is tuned.

    BENCH_METER_OUT=/tmp/bare.json locust -f bench/bare_locustfile.py --headless \\
        -H http://127.0.0.1:8300 -u 10 -r 100 -t 8s
"""

import itertools

from locust import FastHttpUser, task

import meter  # noqa: F401  (attaches the CPU meter)
from tts_knee.locustfiles.inputs import corpus

TEXTS = [t.text for t in corpus.load()]
_NEXT = itertools.count()


class BareUser(FastHttpUser):
    @task
    def synthesize(self) -> None:
        text = TEXTS[next(_NEXT) % len(TEXTS)]
        self.client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
        )
