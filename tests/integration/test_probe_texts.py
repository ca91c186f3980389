"""--probe-texts end to end against the simulator as a server that guards some input and not the
rest: a 4,096-character limit and empty texts refused (400), a body that is not UTF-8 refused as
bad JSON, and a text with nothing to speak (emoji or symbols only) hanging past the client's
timeout. After a sweep 1,2 the probe runs at concurrency 1 and at the recommendation, reports
each class by what the server did, names those to guard, and leaves the sweep's figures alone."""

from __future__ import annotations

import json

from procs import dashboard, locust, read_jsonl, spawn
from tts_knee.runformat.probe import CLASSES

TEXTS = [
    "Hello there.",
    "Good morning to you.",
    "The train leaves at nine.",
    "Please hold the line.",
    "It is raining again today, as it so often does here in the autumn.",
]


def test_each_class_is_reported_by_what_the_server_did_and_the_sweep_is_untouched(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    run_dir = tmp_path / "run"
    with spawn(
        [
            "tts_knee.testbed.sim",
            "--port",
            "0",
            "--slots",
            "4",
            "--base-ms",
            "60",
            "--per-char-ms",
            "1",
            "--max-chars",
            "4096",
            "--unspeakable",
            "hang",
            "--stall-s",
            "3",
        ]
    ) as sim:
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--steps",
                "1,2",
                "--step-time",
                "3",
                "--settle-time",
                "0",
                "--texts",
                str(texts),
                "--run-dir",
                str(run_dir),
                "--probe-texts",
                "all",
                "--request-timeout",
                "1",
                "--retry-max-attempts",
                "1",
            ],
            timeout=150,
        )
    # the probe's refusals and timeouts are its findings: the exit status is the sweep's (no failure)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    p = s["probe"]
    assert p["levels"] == sorted({1, s["recommended_concurrency"]})
    by = {c["class"]: c for c in p["classes"]}
    assert list(by) == list(CLASSES)
    for name in ("empty", "whitespace", "long", "invalid-utf8"):  # guarded: a fast 400
        c = by[name]
        assert c["outcomes"]["refused"] == c["requests"] > 0 and c["statuses"] == {"400": c["requests"]}, c
        assert not c["needs_guarding"] and c["ms_max"] < 1000
    assert "not valid JSON" in by["invalid-utf8"]["error"]  # the raw byte reached the server as sent
    assert "at most 4096" in by["long"]["error"]
    for name in ("mixed-script", "numbers", "ssml"):  # spoken
        assert by[name]["outcomes"]["audio"] == by[name]["requests"] and not by[name]["needs_guarding"]
    # one-char: "a" spoken, "?" and "。" hang; emoji: the sentence spoken, symbols alone hang
    for name, _spoken in (("one-char", 1), ("emoji", 1)):
        c = by[name]
        assert c["outcomes"]["timeout"] == 2 * c["outcomes"]["audio"] > 0 and c["needs_guarding"], c
        assert [lv["concurrency"] for lv in c["by_concurrency"]] == p["levels"]
    assert p["needs_guarding"] == ["one-char", "emoji"]
    assert "Hostile texts the server does not answer as a service should: one-char" in s["diagnosis"]["evidence"][-1]
    assert (
        "guard one-char, emoji" in judged.stdout and "<h2>Hostile texts</h2>" in (run_dir / "report.html").read_text()
    )

    # the sweep's figures are the corpus's alone
    records = read_jsonl(run_dir / "requests.jsonl")
    run = json.loads((run_dir / "run.json").read_text())
    probe_steps = {st["step"] for st in run["steps"] if st["phase"] == "probe"}
    assert len(probe_steps) == len(p["levels"]) and [st["step"] for st in s["steps"]] == [1, 2]
    assert all(r["text_id"].startswith("probe:") == (r["step"] in probe_steps) for r in records)
    assert sum(st["attempts"] for st in s["steps"]) == sum(r["step"] not in probe_steps for r in records)
    assert s["run"]["options"]["probe_texts"] == list(CLASSES)
