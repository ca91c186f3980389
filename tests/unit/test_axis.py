"""One axis: what a closed loop gets, an open loop and a voice sweep get too.

The speech knee (``--asr-model``) on each axis, over synthetic run directories
(:mod:`tests.rundirs`) with a judge's ``speech.jsonl`` written beside them: latency stays flat,
the words heard break at the fourth level, and each axis names that level its own way. The
end-to-end run with the Whisper judge (tests/integration/test_listening.py) covers a closed loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rundirs import Model, build_run
from tts_knee.analysis import axis as axis_mod
from tts_knee.analysis.summary import analyze, load

TEXTS = 8


def _run(path: Path, sweep: str) -> Path:
    """A run of four steps along ``sweep`` (``concurrency``, ``rate`` or ``voices``), latency
    flat, whose judge heard the texts right at the first three levels and garbled at the fourth."""
    build_run(path, Model(steps=(2, 2, 2, 2) if sweep == "voices" else (1, 2, 4, 8), slots=None, resources=False))
    run = json.loads((path / "run.json").read_text())
    for i, st in enumerate(run["steps"]):
        if sweep == "voices":
            st["voices"] = 2**i
        elif sweep == "rate":
            st.update(rate=float(2**i), concurrency=0)
    if sweep == "rate":
        run["mode"] = "open"
        records = [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]
        (path / "requests.jsonl").write_text("".join(json.dumps(dict(r, scheduled=r["t0"])) + "\n" for r in records))
    (path / "run.json").write_text(json.dumps(run))
    heard = [
        {
            "req_id": f"{st['step']}-{t}",
            "step": st["step"],
            "text_id": f"t{t}",
            "error": 0.05 * (t % 3) + (0.5 if i == 3 else 0.0),
            "metric": "wer",
            "text": f"text {t}",
            "transcript": "garbled" if i == 3 else f"text {t}",
        }
        for i, st in enumerate(run["steps"])
        for t in range(TEXTS)
    ]
    (path / "speech.jsonl").write_text("".join(json.dumps(e) + "\n" for e in heard))
    return path


@pytest.mark.parametrize(
    ("sweep", "knee_at", "said"),
    [("concurrency", 8, " at 4 to "), ("rate", 8.0, " at 4 req/s to "), ("voices", 8, " at 4 to ")],
)
def test_the_speech_knee_holds_on_every_axis(tmp_path, sweep, knee_at, said):
    s = analyze(load(_run(tmp_path / sweep, sweep)))
    knee = s["knee"]
    assert axis_mod.of_summary(s).key == sweep
    assert "speech" in knee["rules"] and knee["methods"]["speech"] == knee_at, knee
    assert knee["speech_first"] and knee["index"] == 3 and knee[sweep] == knee_at, knee
    assert knee["agree"] == ["speech"], knee  # latency stayed flat: no other rule points there
    assert [r is None for r in knee["speech_rise"]] == [True, False, False, False]
    assert knee["speech_rise"][3]["pairs"] == TEXTS and knee["speech_rise"][3]["ci"][0] > 0
    d = s["diagnosis"]
    assert d["kind"] == "speech_degraded" and d["evidence"][0].startswith("WER rose from "), d
    assert said in d["evidence"][0] and "degrades before its latency does" in d["evidence"][0], d["evidence"]
    recommended = {"concurrency": "recommended_concurrency", "rate": "recommended_rate", "voices": "recommended_voices"}
    assert s[recommended[sweep]] == knee_at / 2  # the level before the knee


def test_speech_heard_alike_at_every_level_is_no_knee_on_any_axis(tmp_path):
    for sweep in ("concurrency", "rate", "voices"):
        path = _run(tmp_path / sweep, sweep)
        entries = [json.loads(line) for line in (path / "speech.jsonl").read_text().splitlines()]
        (path / "speech.jsonl").write_text("".join(json.dumps(dict(e, error=0.05)) + "\n" for e in entries))
        knee = analyze(load(path))["knee"]
        assert knee["methods"]["speech"] is None and not knee["speech_first"], (sweep, knee)


@pytest.mark.parametrize(("sweep", "knee_at"), [("concurrency", 8), ("rate", 8.0), ("voices", 8)])
def test_the_similarity_knee_holds_on_every_axis(tmp_path, sweep, knee_at):
    """--asr-listen: the words heard alike everywhere, the fourth level in another voice (its
    embedding far from the first level's), the naturalness flat: a similarity knee there."""
    path = _run(tmp_path / sweep, sweep)
    steps = {st["step"]: st for st in json.loads((path / "run.json").read_text())["steps"]}
    entries = [json.loads(line) for line in (path / "speech.jsonl").read_text().splitlines()]
    (path / "speech.jsonl").write_text(
        "".join(
            json.dumps(
                dict(
                    e,
                    error=0.05,
                    transcript=e["text"],
                    concurrency=steps[e["step"]]["concurrency"],
                    embedding=[0.3, 1.0, 0.0, 0.0] if e["step"] == 4 else [1.0, 0.0, 0.01 * int(e["text_id"][1:]), 0.0],
                    mos=3.5 - 0.01 * (int(e["text_id"][1:]) % 3),
                )
            )
            + "\n"
            for e in entries
        )
    )
    s = analyze(load(path))
    knee = s["knee"]
    assert knee["methods"]["speech"] is None and knee["methods"]["mos"] is None, knee
    assert knee["methods"]["similarity"] == knee_at and knee[sweep] == knee_at, knee
    assert knee["speech_changed"] == ["similarity"] and knee["speech_first"], knee
    assert knee["similarity_drop"][3]["ci"][0] > 0.2 and knee["similarity_drop"][2]["ci"][1] < 0.05, knee
    levels = s["levels"]
    assert levels[0]["speech"]["similarity_mean"] == 1.0 and levels[3]["speech"]["similarity_mean"] < 0.5, levels
    d = s["diagnosis"]
    assert d["kind"] == "speech_degraded" and d["evidence"][0].startswith("The voice changed: "), d
    assert f" at 4{' req/s' if sweep == 'rate' else ''} to " in d["evidence"][0], d["evidence"]
