"""The baseline for bench/generator_cost.py: a bare Locust ``FastHttpUser`` making the same
POST as tts-knee's user (OpenAI shape, the same corpus in the same order), reading the body
and nothing else: no timestamps, no audio check, no audio file, no record.

    BENCH_METER_OUT=/tmp/bare.json locust -f bench/bare_locustfile.py --headless \\
        -H http://127.0.0.1:8300 -u 8 -r 100 -t 8s
"""
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust import FastHttpUser, constant, task  # noqa: E402

from bench import meter  # noqa: E402,F401  (attaches the CPU meter)
from locustfiles import corpus  # noqa: E402

_TEXTS = corpus.load()
_NEXT = itertools.count()


class BareUser(FastHttpUser):
    wait_time = constant(0)

    @task
    def synthesize(self) -> None:
        text = _TEXTS[next(_NEXT) % len(_TEXTS)].text
        body = json.dumps({"model": "tts-1", "input": text, "response_format": "wav", "voice": "alloy"},
                          ensure_ascii=False).encode()
        self.client.post("/v1/audio/speech", data=body,
                         headers={"Content-Type": "application/json; charset=utf-8"})
