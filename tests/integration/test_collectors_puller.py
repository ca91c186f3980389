"""The puller in this process (gevent, no monkey-patching) against real collector processes:
clock-offset correction, a collector that restarts mid-run, one unreachable at start, a token."""

from __future__ import annotations

import signal

import gevent
import pytest
from test_collectors import CPU_ONLY, get_json

from procs import free_port, read_jsonl, spawn
from tts_knee.collectors.puller import CollectorPuller
from tts_knee.locustfiles.clock import wall

#: Offsets to 5 ms against a known skew: run with the machine to itself (make test's second pass).
pytestmark = pytest.mark.alone

INTERVAL = 0.2


def test_skewed_collector_clock_is_corrected(tmp_path):
    out = tmp_path / "run" / "resources.jsonl"
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", str(INTERVAL)],
        env=dict(CPU_ONLY, TTS_KNEE_CLOCK_SKEW_S="5.0"),
    ) as c:
        puller = CollectorPuller([c.url], out, interval_s=INTERVAL, client_host="loadgen-1")
        assert puller.start() == [] and puller.unreachable == []
        gevent.sleep(1.5)
        puller.stop()
        raw = {s["seq"]: s["ts"] for s in get_json(f"{c.url}/samples?since=0")["samples"]}
    [d] = puller.describe()
    assert d["url"] == c.url and d["reachable"] and d["host"]
    assert d["offset_s"] == pytest.approx(5.0, abs=0.005)
    assert d["offset_end_s"] == pytest.approx(5.0, abs=0.005)
    assert 0 < d["rtt_s"] < 0.05 and d["gaps"] == [] and d["restarts"] == 0

    lines = read_jsonl(out)
    server = [s for s in lines if s["role"] == "server"]
    client = [s for s in lines if s["role"] == "client"]
    assert len(server) == d["samples"] >= 5
    assert wall() - 2.0 < server[-1]["ts"] < wall()  # on the master's clock, not 5 s ahead
    for s in server:
        assert s["collector"] == c.url
        # The collector is on this machine, so its clock minus the skew is the master's clock.
        assert s["ts"] == pytest.approx(raw[s["seq"]] - 5.0, abs=0.005)
    assert [s["seq"] for s in server] == sorted({s["seq"] for s in server})
    assert len(client) >= 5
    assert all(s["host"] == "loadgen-1" and s["gpus"] == [] and s["collector"] is None for s in client)
    assert all(s["proc"] is None or s["proc"]["rss_bytes"] > 0 for s in client)
    assert client[-1]["cpu_percent"] is not None


def test_collector_restart_leaves_a_gap_and_pulling_resumes(tmp_path):
    out = tmp_path / "resources.jsonl"
    port = free_port()
    args = ["tts_knee.collectors", "--port", str(port), "--interval", str(INTERVAL)]
    with spawn(args, env=CPU_ONLY) as c:
        puller = CollectorPuller([c.url], out, interval_s=INTERVAL, sample_client=False)
        assert puller.start() == []
        gevent.sleep(1.0)
        c.stop(signal.SIGKILL)
        gevent.sleep(0.8)
    with spawn(args, env=CPU_ONLY):
        gevent.sleep(2.5)
        puller.stop()
    [d] = puller.describe()
    assert d["restarts"] == 1
    assert len(d["gaps"]) == 1 and d["gaps"][0][0] < d["gaps"][0][1]
    assert len(d["outages"]) == 1 and d["outages"][0][1] is not None
    seqs = [s["seq"] for s in read_jsonl(out)]
    restart_at = next(i for i in range(1, len(seqs)) if seqs[i] < seqs[i - 1])
    assert seqs[restart_at] == 0 and len(seqs) - restart_at >= 3, seqs
    ts = [s["ts"] for s in read_jsonl(out)]
    assert ts == sorted(ts)
    assert ts[restart_at - 1] == pytest.approx(d["gaps"][0][0])
    assert ts[restart_at] == pytest.approx(d["gaps"][0][1])


def test_a_restart_read_before_its_first_sample_still_leaves_the_gap(tmp_path):
    # The restarted collector takes its first sample 1.5 s after it starts, so the puller finds
    # it restarted with nothing to read yet; the outage must still be recorded as a gap (a
    # restarted collector's ring cannot cover it, whatever its "dropped" says).
    out = tmp_path / "resources.jsonl"
    port = free_port()
    with spawn(["tts_knee.collectors", "--port", str(port), "--interval", str(INTERVAL)], env=CPU_ONLY) as c:
        puller = CollectorPuller([c.url], out, interval_s=INTERVAL, sample_client=False)
        assert puller.start() == []
        gevent.sleep(1.0)
        c.stop(signal.SIGKILL)
        gevent.sleep(0.8)
    with spawn(["tts_knee.collectors", "--port", str(port), "--interval", "1.5"], env=CPU_ONLY):
        gevent.sleep(4.0)
        puller.stop()
    [d] = puller.describe()
    assert d["restarts"] == 1
    assert len(d["gaps"]) == 1 and d["gaps"][0][0] < d["gaps"][0][1], d
    ts = [s["ts"] for s in read_jsonl(out)]
    after = [t for t in ts if t > d["gaps"][0][0]]
    assert after and after[0] == pytest.approx(d["gaps"][0][1])


def test_unreachable_at_start_warns_once_and_catches_up(tmp_path):
    out = tmp_path / "resources.jsonl"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    puller = CollectorPuller([url], out, interval_s=INTERVAL, sample_client=False)
    warnings = puller.start()
    assert len(warnings) == 1 and url in warnings[0] and warnings[0].endswith(".")
    assert puller.unreachable == [url]
    with spawn(["tts_knee.collectors", "--port", str(port), "--interval", str(INTERVAL)], env=CPU_ONLY):
        gevent.sleep(3.0)
        puller.stop()
    [d] = puller.describe()
    assert d["reachable"] is False and d["samples"] >= 3 and d["offset_s"] is not None
    assert len(d["gaps"]) == 1 and puller.unreachable == [url]


def test_token_is_sent_and_a_wrong_one_is_reported(tmp_path):
    with spawn(
        ["tts_knee.collectors", "--port", "0", "--interval", str(INTERVAL), "--token", "t0k"], env=CPU_ONLY
    ) as c:
        bad = CollectorPuller([c.url], tmp_path / "bad.jsonl", sample_client=False)
        [warning] = bad.start()
        bad.stop()
        assert "401" in warning
        good = CollectorPuller([c.url], tmp_path / "good.jsonl", token="t0k", interval_s=INTERVAL, sample_client=False)
        assert good.start() == []
        gevent.sleep(0.6)
        good.stop()
    assert good.describe()[0]["samples"] >= 2
    good.stop()  # stopping twice is harmless
