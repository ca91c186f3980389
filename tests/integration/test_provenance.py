"""run.json's provenance, from two real runs against the simulator, and what ``--baseline`` makes
of it: each difference named before the comparison, the corpus first, and a run whose audio
failed its checks refused unless ``--baseline-anyway``."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess

import pytest

from procs import ROOT, dashboard, locust, spawn
from tts_knee.runformat.files import options_digest

SIM = ["tts_knee.testbed.sim", "--port", "0", "--base-ms", "5", "--per-char-ms", "0"]
RUN = ["--headless", "--steps", "1,2", "--step-time", "1.5"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The baseline against a clean simulator with the default corpus; the candidate with
    another corpus against one whose answers run away a third of the time."""
    d = tmp_path_factory.mktemp("provenance")
    corpus = d / "other.txt"
    corpus.write_text("The first of three texts.\nA second one, a little longer than the first.\nThird.\n")
    with spawn(SIM) as clean, spawn([*SIM, "--runaway-rate", "0.3", "--seed", "7"]) as runaway:
        old = locust([*RUN, "-H", clean.url, "--run-dir", str(d / "old")], timeout=60)
        new = locust([*RUN, "-H", runaway.url, "--texts", str(corpus), "--run-dir", str(d / "new")], timeout=60)
    assert old.returncode == 0 and new.returncode == 0, old.stdout[-2000:] + new.stdout[-2000:]
    return d / "old", d / "new", corpus


def _run_json(path) -> dict:
    return json.loads((path / "run.json").read_text())


def test_provenance_says_what_made_the_run(runs):
    old, new, corpus = runs
    run = _run_json(new)
    p = run["provenance"]
    assert p["corpus"] == str(corpus) and p["corpus_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    canonical = json.dumps(
        {k: v for k, v in run["options"].items() if k not in ("audio_dir", "texts")},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert p["options_sha256"] == hashlib.sha256(canonical.encode()).hexdigest() == options_digest(run["options"])
    assert p["python"] == platform.python_version() and p["locust"] == run["versions"]["locust"]
    assert p["host"]["cpu_cores"] == os.cpu_count() and p["host"]["memory_bytes"] > 0
    server = p["server"]
    assert server["url"].endswith("/v1/models") and server["status"] == 200 and server["error"] is None
    assert server["http_version"] == "HTTP/1.1"
    assert (server["model"], server["model_from"]) == ("tts-knee-sim", "/v1/models")
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert p["commit"] == head.stdout.strip() and isinstance(p["modified"], bool)
    # the runs' options differ in the corpus alone: its size counts, where it was read from does not
    old_run = _run_json(old)
    assert old_run["provenance"]["options_sha256"] != p["options_sha256"]
    like_old = {**run["options"], "texts_count": old_run["options"]["texts_count"], "texts": "elsewhere"}
    assert options_digest(like_old) == old_run["provenance"]["options_sha256"]


def test_baseline_names_the_corpus_first_and_refuses_runaway_audio(runs):
    old, new, _ = runs
    refused = dashboard(str(new), "--baseline", str(old), "--no-report")
    warnings = [line for line in refused.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings and warnings[0].startswith("warning: The corpus differs from the baseline's (sha256 "), (
        refused.stderr
    )
    assert any("options' digests differ" in w and "texts" in w for w in warnings[1:]), warnings
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --baseline refuses this run {new}: ") and "ran away" in last, refused.stderr
    assert "--baseline-anyway" in last
    anyway = dashboard(str(new), "--baseline", str(old), "--no-report", "--baseline-anyway")
    assert anyway.returncode in (0, 1), anyway.stderr
    reg = json.loads((new / "summary.json").read_text())["regression"]
    assert reg["warnings"][0].startswith("The corpus differs") and reg["warnings"] == [w[9:] for w in warnings]
    # the clean baseline against itself: nothing differs, nothing refused
    same = dashboard(str(old), "--baseline", str(old), "--no-report")
    assert same.returncode == 0 and "warning:" not in same.stderr, same.stderr
