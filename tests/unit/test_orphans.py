"""Orphaned work from the server process's CPU (analysis.orphans): a server whose CPU is made
from known costs (per character heard, and a fixed cost that goes on after each cancel or
hang-up) is read back, the fit recovering the orphaned cost within its stated interval; a server
that stops on a cancel reads about 0; a saturated host and too few abandonments say why not."""

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tts_knee.analysis import orphans
from tts_knee.runformat.reader import RunDir

T0 = 1_800_000_000.0
TEXTS = {"s0": 12, "s1": 24, "s2": 40, "long": 300}
PER_CHAR = 0.004  # CPU-s per character the server synthesises
AUDIO_PER_CHAR = 0.06


def _server(
    tmp_path: Path, orphan_s: float, kind: str = "cancel", host_cpu: float = 30.0, seed: int = 1, n: int = 120
) -> RunDir:
    """A run directory: ``n`` requests arriving at about 1 a second; the long text abandoned (cancelled
    after its first fifth was heard, or hung up on before any); its synthesis goes on for
    ``orphan_s`` CPU-s after the abandonment, spread over 0.6 s; a collector's samples every
    0.5 s of the CPU all that made."""
    rng = random.Random(seed)
    work = []  # (start, end, cpu_s): CPU spent evenly over [start, end]
    recs, t = [], T0
    for _i in range(n):
        t += rng.expovariate(1.0)
        tid = rng.choice(list(TEXTS))
        chars = TEXTS[tid]
        took = 0.05 + chars * 0.002
        rec = {
            "step": 1,
            "concurrency": 1,
            "attempt": 1,
            "final": True,
            "t0": t,
            "text_id": tid,
            "text_len": chars,
            "status": 200,
            "ok": True,
            "error": None,
        }
        if tid != "long":
            work.append((t, t + took, PER_CHAR * chars))
            rec.update(t3=t + took, audio_s=AUDIO_PER_CHAR * chars)
        elif kind == "cancel":
            heard = 0.2 * chars
            gone = t + 0.2 * took
            work += [(t, gone, PER_CHAR * heard), (gone, gone + 0.6, orphan_s)]
            rec.update(t3=gone, audio_s=AUDIO_PER_CHAR * heard, cancel_ms=1000 * (gone - t), cancelled=True)
        else:  # hung up at --request-timeout 0.4 before any audio: the whole text goes on
            work += [(t, t + 0.4, PER_CHAR * 0.2 * chars), (t + 0.4, t + 1.0, orphan_s)]
            rec.update(status=None, ok=False, error="timed out after 0.4 s before the first byte")
        recs.append(rec)
    # the server's CPU, sampled every 0.5 s (with a little noise, as psutil's ticks give)
    edges = np.arange(T0 - 2, t + 4, 0.5)
    cpu = np.zeros(len(edges) - 1)
    for a, b, c in work:
        overlap = np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0, None)
        cpu += c * overlap / (b - a)
    cpu += np.random.default_rng(seed).normal(0, 0.01, len(cpu)).clip(-cpu)
    samples = [
        {
            "ts": float(edges[0]),
            "host": "srv",
            "role": "server",
            "cpu_percent": host_cpu,
            "proc": {"pid": 7, "cpu_percent": None, "rss_bytes": 1},
        }
    ]
    samples += [
        {
            "ts": float(e),
            "host": "srv",
            "role": "server",
            "cpu_percent": host_cpu,
            "proc": {"pid": 7, "cpu_percent": 100 * c / 0.5, "rss_bytes": 1},
        }
        for e, c in zip(edges[1:], cpu)
    ]
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "resources.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    rd = RunDir(tmp_path)
    rd.refresh()
    return rd


def _fit(rd: RunDir) -> dict:
    return orphans.fit(rd.requests.attempts(), rd.resources, 0.4)


@pytest.mark.parametrize("kind", ["cancel", "hangup"])
def test_the_cost_left_after_an_abandonment_is_read_back(tmp_path, kind):
    got = _fit(_server(tmp_path, 0.8, kind))[kind]
    assert got["count"] >= 20
    # a cancel's first fifth was heard; nothing of a hang-up was, so what it cost before counts too
    want = 0.8 if kind == "cancel" else 0.8 + PER_CHAR * 0.2 * TEXTS["long"]
    assert abs(got["per_s"] - want) <= max(got["uncertainty_s"], 0.1), got
    assert got["uncertainty_s"] < 0.2
    assert got["per_char_s"] == pytest.approx(PER_CHAR, rel=0.25)


def test_a_server_that_stops_on_a_cancel_reads_about_nothing(tmp_path):
    got = _fit(_server(tmp_path, 0.0))["cancel"]
    assert abs(got["per_s"]) <= max(got["uncertainty_s"], 0.05), got


def test_a_saturated_host_and_too_few_abandonments_say_why(tmp_path):
    busy = _fit(_server(tmp_path / "busy", 0.8, host_cpu=99.0))
    assert busy["cancel"] is None and "saturated" in busy["note"]
    few = _fit(_server(tmp_path / "few", 0.8, n=4, seed=1))  # one long text among them
    assert few["cancel"] is None and few["hangup"] is None and few["note"]
