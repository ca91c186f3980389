"""Did the run measure the server or its cache? Against the simulator's answer cache
(--cache-hit-ms) every run tells, from the texts it sent again in a step, that the server caches
and says so first in the diagnosis; a server without one is not called a cache; and
--text-reuse unique sends every request a text of its own, so nothing is served from the cache."""

from __future__ import annotations

import json
import urllib.request

from procs import dashboard, locust, read_jsonl, spawn

TEXTS = [
    "Hello there.",
    "Good morning to you.",
    "The train leaves at nine.",
    "Please hold the line.",
    "It is raining again.",
    "Your order has shipped.",
    "See you tomorrow.",
    "Thanks for calling.",
]


def _sweep(tmp_path, name, sim_extra, *extra):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    run_dir = tmp_path / name
    with spawn(
        ["tts_knee.testbed.sim", "--port", "0", "--slots", "2", "--base-ms", "120", "--per-char-ms", "0", *sim_extra]
    ) as sim:
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--steps",
                "1,2",
                "--step-time",
                "4",
                "--settle-time",
                "0",
                "--texts",
                str(texts),
                "--run-dir",
                str(run_dir),
                *extra,
            ],
            timeout=90,
        )
        with urllib.request.urlopen(f"{sim.url}/health", timeout=10) as r:
            served = json.loads(r.read())
    assert proc.returncode == 0, proc.stdout[-2000:]
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    return json.loads((run_dir / "summary.json").read_text()), read_jsonl(run_dir / "requests.jsonl"), served, judged


def test_a_server_that_caches_is_named_and_unique_texts_reach_it_uncached(tmp_path):
    s, _, served, judged = _sweep(tmp_path, "cached", ["--cache-hit-ms", "5"])
    reuse = s["text_reuse"]
    # at 120 ms a request, each of the 8 texts comes round again in the first step's 4 s
    assert served["text_cache_hits"] > 0 and reuse["pairs"] == len(TEXTS)
    assert reuse["caches"] is True and reuse["ratio"] < 0.2 and reuse["repeat_ms"] < 60 < 100 < reuse["first_ms"]
    assert s["diagnosis"]["evidence"][0] == reuse["note"] and "The server caches its answers" in reuse["note"]
    assert f"  - {reuse['note']}" in judged.stdout

    s, records, served, _ = _sweep(tmp_path, "unique", ["--cache-hit-ms", "5"], "--text-reuse", "unique")
    # the preflight and the health probe send the shortest text as it is: only their second is a hit
    assert served["text_cache_hits"] <= 1 and s["text_reuse"]["caches"] is None
    assert s["text_reuse"]["note"].startswith("Every request had a text of its own")
    assert s["run"]["options"]["text_reuse"] == "unique"
    # each text numbered first ("17, Hello there."): its length and nothing else changed
    for r in records:
        extra = r["text_len"] - len(TEXTS[int(r["text_id"].split(":")[1]) - 1])
        assert 3 <= extra <= 2 + len(str(len(records))), r
    assert not any("The server caches" in e for e in s["diagnosis"]["evidence"])

    s, _, served, _ = _sweep(tmp_path, "plain", [])
    assert "text_cache_hits" not in served
    assert s["text_reuse"]["caches"] is False and 0.6 < s["text_reuse"]["ratio"] < 1.6, s["text_reuse"]
    assert s["text_reuse"]["note"].startswith("No sign of an answer cache")
