"""--spike end to end against the simulator (4 slots of 100 ms): a server that sheds (a queue of 2,
then 503 with Retry-After) is named ``sheds`` and stops refusing once it is over; one that dies past 12 in flight
(``--crash-above 12``) is named ``crashed``, the health probe during the spike and after the run
failing, the run stopped there with every attempt recorded and the exit status non-zero; one slow to
come back (``--recovery-s``) recovers no sooner than its lag. The spike's steps stay out of the
sweep's figures."""

from __future__ import annotations

import json
from contextlib import ExitStack

from procs import dashboard, free_port, locust, read_jsonl, spawn

SIM = ["tts_knee.testbed.sim", "--port", "0", "--slots", "4", "--base-ms", "100", "--per-char-ms", "0", "--jitter", "0"]


def _run(tmp_path, name, sim_extra, *extra, watched=False):
    """A run against its own simulator; ``watched``: with a collector watching the simulator's process."""
    run_dir = tmp_path / name
    with spawn([*SIM, *sim_extra]) as sim, ExitStack() as more:
        if watched:
            port = free_port()
            more.enter_context(
                spawn(["tts_knee.collectors", "--port", str(port), "--interval", "0.2", "--pid", str(sim.pid)])
            )
            extra = (*extra, "--collector", f"http://127.0.0.1:{port}")
        proc = locust(
            [
                "--headless",
                "-H",
                sim.url,
                "--step-time",
                "2",
                "--settle-time",
                "0",
                "--run-dir",
                str(run_dir),
                "--spike-at",
                "4",
                *extra,
            ],
            timeout=120,
        )
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    return proc, json.loads((run_dir / "summary.json").read_text()), judged.stdout, run_dir


def test_a_server_that_sheds_is_named_and_recovers_and_one_that_dies_is_named_crashed(tmp_path):
    proc, s, out, run_dir = _run(tmp_path, "sheds", ["--queue-limit", "2"], "--steps", "1,4", "--spike", "3x3")
    sp = s["spike"]
    assert (sp["level"], sp["spike_level"], sp["factor"], sp["seconds"]) == (4, 12, 3, 3)
    assert sp["behaviour"] == "sheds", sp
    # 4 in slots and 2 queued of 12: the rest refused at once (and retried after their Retry-After)
    assert sp["during"]["shed_share"] > 0.1 and sp["during"]["shed_ms_p50"] < 50
    # back: far fewer refusals once the spike is over; and its recovery, where found, within 5 s (a
    # loaded machine's late timers can only stretch a window's p95 past the line, so it may not be)
    assert sp["after"]["shed_share"] < sp["during"]["shed_share"] / 2, sp
    assert sp["recovery_s"] is None or sp["recovery_s"] <= 5, sp
    assert sp["text"] in s["diagnosis"]["evidence"] and f"spike: {sp['text']}" in out
    assert "<h2>Spike and recovery</h2>" in (run_dir / "report.html").read_text()
    assert [st["concurrency"] for st in s["steps"]] == [1, 4]  # the sweep's own steps only
    run = json.loads((run_dir / "run.json").read_text())
    assert [st["phase"] for st in run["steps"]] == ["grid", "grid", "before_spike", "spike", "recovery"]
    assert [st["concurrency"] for st in run["steps"]][2:] == [4, 12, 4]

    proc, s, out, run_dir = _run(
        tmp_path, "crash", ["--crash-above", "12"], "--steps", "4", "--spike", "4x2", watched=True
    )
    assert proc.returncode != 0
    sp = s["spike"]
    assert sp["behaviour"] == "crashed" and sp["recovery_s"] is None, sp
    # the collector saw the server's process go, after the spike began
    spiked = next(st for st in json.loads((run_dir / "run.json").read_text())["steps"] if st["phase"] == "spike")
    assert sp["process_gone_at"] is not None and sp["process_gone_at"] >= spiked["start"], sp
    assert "the server process the collector watched exited" in sp["text"]
    assert s["health"]["ok"] is False and "stopped answering" in sp["text"]
    records = read_jsonl(run_dir / "requests.jsonl")
    assert s["records"]["attempts"] == len(records) > 0  # nothing lost
    spike_step = next(
        st["step"] for st in json.loads((run_dir / "run.json").read_text())["steps"] if st["phase"] == "spike"
    )
    assert any(not r["ok"] and r["status"] is None for r in records if r["step"] >= spike_step)
    # the run saw it go: the health probe during the spike failed, and the run stopped there
    run = json.loads((run_dir / "run.json").read_text())
    assert "the server stopped answering during the" in run["error"] and "the run stops here" in run["error"]
    assert run["spike_health"] and run["spike_health"][-1]["ok"] is False, run.get("spike_health")
    assert run["spike_health"][-1]["phase"] in ("spike", "recovery")


def test_a_server_slow_to_come_back_recovers_no_sooner_than_its_lag(tmp_path):
    # --recovery-s 4: twice as slow until 4 s after its queue last held a request, which is no sooner
    # than the recovery's start; a window is at least 1 s, so the first whole window at the old pace
    # can start no sooner than about 3 s in. A late timer can only delay it (or leave it unfound).
    proc, s, out, run_dir = _run(tmp_path, "lag", ["--recovery-s", "4"], "--steps", "4", "--spike", "3x3")
    assert proc.returncode == 0, proc.stdout[-3000:]
    sp = s["spike"]
    assert sp["behaviour"] == "queues", sp
    assert sp["recovery_s"] is None or sp["recovery_s"] >= 2.5, sp
    assert sp["after"]["p95_x"] > 1.5, sp  # the recovery step as a whole was slow: the lag is seen
