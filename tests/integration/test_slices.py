"""Slices end to end: a corpus mixing short Chinese and long English texts against the simulator,
which slows Chinese requests fourfold past 1 in flight (--slow-above 1 --slow-language zh). An
English text takes about 200 ms, a Chinese one 25 ms (100 ms slowed): the pooled p50 and p95 are
the English texts' (the longer ones, and the most of them), so the pooled figures hold (to 4, or
to 2 where a stall of the loaded machine lifts step 4) while the zh slice breaks at 2; the summary
has both slices and the diagnosis says so."""

from __future__ import annotations

import json

from procs import dashboard, locust, spawn
from rundirs import assert_declared

ZH = ["你好。", "谢谢。", "再见。"]
EN = [
    "The quarterly report shows revenue up twelve percent year over year, driven mostly by new customers in "
    "Europe and Asia, while costs stayed flat.",
    "Please remember to bring your identity card, your boarding pass, and a pen; the form is only available on "
    "paper at the gate.",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who "
    "wound forty clocks every morning.",
    "Travellers came from far away to hear the clocks strike noon together; it sounded, people said, like a "
    "choir of bells ringing.",
]


def test_a_language_that_breaks_first_is_named_though_the_pooled_figures_hold(tmp_path):
    corpus = tmp_path / "texts.jsonl"
    entries = [{"id": f"zh{i}", "text": t, "language": "zh"} for i, t in enumerate(ZH)]
    entries += [{"id": f"en{i}", "text": t, "language": "en"} for i, t in enumerate(EN)]
    corpus.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
    run = tmp_path / "run"
    sim_args = ["--port", "0", "--slots", "16", "--base-ms", "20", "--per-char-ms", "1.5", "--jitter", "0.05"]
    with spawn(
        ["tts_knee.testbed.sim", *sim_args, "--slow-above", "1", "--slow-language", "zh", "--slow-x", "4"],
        timeout=120,
    ) as sim:
        proc = locust(
            ["--headless", "-H", sim.url, "--texts", str(corpus), "--steps", "1,2,4", "--step-time", "4"]
            + ["--run-dir", str(run)],
            timeout=120,
        )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout
    out = dashboard(run)
    assert out.returncode == 0, out.stdout + out.stderr
    s = json.loads((run / "summary.json").read_text())
    assert_declared(run)
    sliced = s["slices"]
    by_name = {sl["name"]: sl for sl in sliced["by_language"]}
    assert set(by_name) == {"en", "zh"} and "by_voice" not in sliced, sliced
    zh, en = by_name["zh"], by_name["en"]
    # the slowed language: its own p95 four times its lowest step's, a knee at 2 by the latency rule
    assert zh["judged"] and zh["knee"] == 2 and "latency_vs_lowest" in zh["rules"], zh
    p95 = [lv["p95_ms"] for lv in zh["levels"]]
    assert p95[1] > 2 * p95[0] and p95[2] > 2 * p95[0], p95
    # a late timer can only lift the English texts (and the pool) at 4, never at 2 and 4 both
    assert en["judged"] and en["knee"] in (None, 4), en
    assert s["knee"]["concurrency"] in (None, 4) and sliced["knee"] == s["knee"]["concurrency"], s["knee"]
    note = sliced["note"]
    assert note and note.startswith("By language, zh breaks first: at 2 its wait p"), note
    assert f"en held to {en['held_to']:g}" in note and en["held_to"] in (2, 4), note
    assert note in s["diagnosis"]["evidence"]
    assert "slices by language: en: " in out.stdout and "zh: breaks at 2" in out.stdout, out.stdout
    html = (run / "report.html").read_text()
    assert "<h2>Slices</h2>" in html and "wait p95 by language" in html
