"""Orphaned work from the server's CPU against a real server: piper's own HTTP server (the joe
voice) answers a whole WAV at the end and keeps synthesising after the client hangs up. Measured
by hand first (piper's CPU time for the long text hung up on, alone), then by a run that hangs
up on it at --request-timeout among short texts it answers, a collector watching piper: the
summary's CPU-seconds per hang-up agree with the hand measurement within a quarter.

piper runs with one onnxruntime thread per synthesis (``--threads 1``). With onnxruntime's
default, a thread per core that spins while idle, the long text alone cost 3.71 CPU-s (both
cores for its 1.86 s) and the same text among the run's short ones 2.72: the hand measurement
then measures the spinning, not the work.

The hang-up point is taken from how fast this machine synthesises (timed first), never assumed:
a fast machine made the long text in under 0.4 s, so a fixed 0.4 s timeout hung up on nothing."""

from __future__ import annotations

import json
import socket
import statistics
import time
import urllib.request

import psutil
import pytest

from procs import dashboard, locust, spawn

pytest.importorskip("piper")

LONG = (
    "The storm rolled in over the hills late in the afternoon. Rain began to fall on the tin roofs of the "
    "village. Children ran home from the fields with their baskets. The old miller closed the gates of his "
    "yard. By evening the river had risen above its banks. Nobody in the village slept much that night. "
    "In the morning the water had reached the mill. The miller and his sons carried sacks of flour up to "
    "the loft. A boat came down the street where the market had stood. The baker handed bread through his "
    "window to the people in it. By noon the rain had stopped and the sun came out over the flooded fields. "
    "It took a week for the river to go back to its bed."
)
SHORT = ("Hello there.", "The bus is late.", "Turn left at the bridge.")


def _tree_cpu(root: psutil.Process) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])


def _hang_up(url: str, text: str, after_s: float) -> None:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    body = json.dumps({"text": text}).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /synthesize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        time.sleep(after_s)


def _synthesis_s(url: str, text: str) -> float:
    """Seconds piper takes to answer ``text`` whole (the faster of two tries)."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/synthesize",
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    times = []
    for _ in range(2):
        start = time.monotonic()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        times.append(time.monotonic() - start)
    return min(times)


def _hand(url: str, pid: int, hang_up_s: float, long_s: float) -> float:
    """Median CPU-seconds of piper's processes for the long text hung up on ``hang_up_s`` in,
    alone; each followed by a quiet wait of the long text's whole synthesis time and half a
    second more, so that its synthesis ends inside the measurement."""
    root = psutil.Process(pid)
    costs = []
    for _ in range(3):
        before = _tree_cpu(root)
        _hang_up(url, LONG, hang_up_s)
        time.sleep(long_s + 0.5)
        costs.append(_tree_cpu(root) - before)
    return statistics.median(costs)


@pytest.mark.slow
@pytest.mark.alone  # CPU-seconds per request hold only while the cores are the server's
def test_cpu_seconds_per_hang_up_agree_with_a_hand_measurement(tmp_path):
    corpus = tmp_path / "mix.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(SHORT))
        + json.dumps({"id": "long", "text": LONG})
        + "\n"
    )
    run = tmp_path / "run"
    with spawn(["tts_knee.testbed.piper", "--port", "0", "--threads", "1"], timeout=120) as piper:
        _hang_up(piper.url, SHORT[0], 1.0)  # the voice loaded before anything is measured
        long_s = _synthesis_s(piper.url, LONG)
        short_s = max(_synthesis_s(piper.url, text) for text in SHORT)
        # hung up a third of the way through the long text, and after four times the slowest short one
        timeout_s = max(long_s / 3, 4 * short_s)
        print(f"piper here: long text {long_s:.3f} s, slowest short text {short_s:.3f} s; timeout {timeout_s:.3f} s")
        assert timeout_s <= long_s / 2, "piper answers the long text too fast here to hang up on it"
        hand = _hand(piper.url, piper.pid, timeout_s, long_s)
        # one thread: a synthesis costs no more CPU-seconds than it takes (a loaded host only lengthens it)
        assert hand <= 1.25 * long_s, f"piper used {hand:.2f} CPU-s in {long_s:.2f} s: more than one core"
        with spawn(["tts_knee.collectors", "--port", "0", "--interval", "0.5", "--pid", str(piper.pid)]) as coll:
            # open loop at 1 req/s leaves the cores idle between requests (a saturated host is refused)
            proc = locust(
                [
                    "--headless",
                    "-H",
                    piper.url,
                    "--tts-api",
                    "piper",
                    "--texts",
                    str(corpus),
                    "--rates",
                    "1",
                    "--step-time",
                    "30",
                    "--request-timeout",
                    f"{timeout_s:.3f}",
                    "--collector",
                    coll.url,
                    "--run-dir",
                    str(run),
                ],
                timeout=240,
            )
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    out = dashboard(str(run))
    s = json.loads((run / "summary.json").read_text())
    recs = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    longs = [r for r in recs if r["text_id"] == "long"]
    assert longs and all((r["error"] or "").startswith("timed out") for r in longs)
    assert all(r["ok"] for r in recs if r["text_id"] != "long"), [r["error"] for r in recs if not r["ok"]]
    hung = s["hangups"]
    assert hung["timed_out"] == len(longs), hung
    work = hung["orphaned_work_s"]
    if work is None and hung["note"].startswith("the server host's CPU was saturated"):
        # the product's answer on a host other work holds (CI shared with another suite): its
        # refusal is right only if the cores were busy with what was not piper's
        others = _others_cores(run / "resources.jsonl")
        print(f"not fitted: {hung['note']}; other work held {others:.2f} cores")
        assert others >= 0.5, hung["note"]
        return
    assert work is not None, (hung["note"], len(longs), len(recs))
    print(
        f"hand {hand:.3f} CPU-s; fitted {work['per_hangup_s']:.3f} ± {work['uncertainty_s']:.3f} over "
        f"{len(longs)} hang-ups, {work['samples']} samples"
    )
    assert work["per_hangup_s"] == pytest.approx(hand, rel=0.25)
    assert work["uncertainty_s"] < 0.5 * work["per_hangup_s"]
    assert "CPU-s per hang-up" in out.stdout and "Requests the client gave up on" in out.stdout


def _others_cores(resources) -> float:
    """The cores the server host spent on what was not piper, the median over the collector's
    samples (host CPU is a share of all cores, the process's a share of one)."""
    server = [json.loads(line) for line in resources.read_text().splitlines()]
    others = [
        sample["cpu_percent"] / 100 * psutil.cpu_count() - sample["proc"]["cpu_percent"] / 100
        for sample in server
        if sample.get("role") == "server" and sample.get("proc") and sample.get("cpu_percent") is not None
    ]
    return statistics.median(others)
