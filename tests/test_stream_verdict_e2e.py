"""What a listener hears decides a streamed run's verdict, end to end: the simulator shares 5x
real time among its streams (0.2 s chunks, 100 ms prefill), so playback keeps up to 4 streams
(1.25x each) and falls behind at 8 (0.625x), while whole-body time already doubles from 1 to 2.
A sweep judged on whole-body time would say knee 2, recommend 1; a listener's answer is 8 and 4."""
import json

import pytest

from procs import dashboard, locust, spawn

SHORT = ["Hello there.", "Good morning to you.", "The train leaves at nine.", "Please hold the line.",
         "It is raining again.", "Your order has shipped.", "See you tomorrow.", "Thanks for calling."]
#: TTFA of one stream at 1/2/4/8 streams: prefill + 200 ms of audio at 5/n x real time.
TRUTH_MS = {1: 140, 2: 180, 4: 260, 8: 420}


@pytest.mark.slow
@pytest.mark.parametrize("sim_extra,client_extra", [
    ([], ["--tts-stream"]),                                            # WAV, placeholder sizes
    (["--wav-header-alone"], ["--tts-stream"]),                        # WAV header sent alone first
    ([], ["--tts-stream-format", "sse", "--tts-format", "pcm"]),       # OpenAI server-sent events
], ids=["wav", "wav-header-alone", "sse"])
def test_a_streamed_sweep_is_judged_by_what_a_listener_hears(tmp_path, sim_extra, client_extra):
    texts = tmp_path / "short.txt"
    texts.write_text("\n".join(SHORT) + "\n")
    run_dir = tmp_path / "run"
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--capacity", "5", "--chunk-ms", "200", "--prefill-ms", "100",
                "--sample-rate", "24000", *sim_extra]) as sim:
        proc = locust(["--headless", "-H", sim.url, "--steps", "1,2,4,8", "--step-time", "8", "--texts", str(texts),
                       "--run-dir", str(run_dir), *client_extra], timeout=150)
    assert "Traceback" not in proc.stdout, proc.stdout
    judged = dashboard(run_dir)
    assert judged.returncode == 0, judged.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    by_c = {s["concurrency"]: s for s in summary["steps"]}
    for c, truth in TRUTH_MS.items():
        assert by_c[c]["ttfa_ms"]["p50"] == pytest.approx(truth, abs=50), (c, by_c[c]["ttfa_ms"])
        assert by_c[c]["error_rate"] == 0
    assert by_c[1]["underrun_rate"] == 0 and by_c[2]["underrun_rate"] == 0
    assert by_c[4]["underrun_rate"] < 0.05
    assert by_c[8]["underrun_rate"] > 0.5
    # whole-body time doubles from 1 to 2 streams, and is not what decides
    assert by_c[2]["latency_ms"]["p50"] > 1.3 * by_c[1]["latency_ms"]["p50"]
    assert summary["knee"]["concurrency"] == 8, summary["knee"]
    assert summary["recommended_concurrency"] == 4, summary["recommendation"]
    # the recommendation quotes what a listener hears (the kind may say client_bound on a busy host)
    assert "stalled" in summary["recommendation"] and "TTFA" in summary["recommendation"]
    assert "ttfa p95" in judged.stdout and "underrun%" in judged.stdout
