"""The dashboard on streamed runs: fields read, per-step stream figures, the knee judged on
what a listener hears, audio integrity, the queueing verdict and the stream-health report."""

from __future__ import annotations

import json
import statistics
import subprocess

import numpy as np
import pytest

from procs import dashboard
from rundirs import Model, build_run
from tts_knee.analysis.knee import find_knee
from tts_knee.analysis.playback import playback
from tts_knee.analysis.summary import analyze, load
from tts_knee.dashboard.table import TABLE_COLUMNS, format_table

# A server sharing 5x real time among its streams (0.2 s chunks, 100 ms prefill), short texts
# (0.1-6 s of audio) and a 300 ms playback buffer: TTFA ~140/180/260/420 ms; every stream
# keeps ahead of playback up to 4; at 8 each gets 0.625x, so the streams longer than the buffer
# can cover run dry. Whole-body time doubles from 1 to 2 all the same.
SHARED_5X = dict(
    steps=(1, 2, 4, 8),
    step_s=20,
    slots=1,
    gpu_busy_util=97,
    stream_capacity=5,
    playback_buffer_ms=300,
    text_ids=["a", "b", "c", "d", "e"],
    audio_s_per_char=0.01,
)


def _by_conc(s):
    return {x["concurrency"]: x for x in s["steps"]}


@pytest.mark.parametrize("options", [True, False], ids=["run.json says streamed", "old run: chunk data"])
def test_a_streamed_run_is_judged_on_playback_not_whole_body_time(tmp_path, options):
    s = analyze(load(build_run(tmp_path / "r", Model(**SHARED_5X, stream_options=options))))
    st = _by_conc(s)
    assert st[2]["latency_ms"]["p50"] > 1.5 * st[1]["latency_ms"]["p50"]  # what used to make knee 2
    for c, ttfa in ((1, 140), (2, 180), (4, 260), (8, 420)):
        assert st[c]["streamed"] is True
        assert st[c]["ttfa_ms"]["p50"] == pytest.approx(ttfa, rel=0.06), c
    assert [st[c]["underrun_rate"] for c in (1, 2, 4)] == [0.0, 0.0, 0.0]
    assert 0.5 < st[8]["underrun_rate"] < 1.0
    assert st[8]["underrun_ms"]["p95"] > 0 and st[8]["gap_max_ms"]["p95"] > 300
    knee = s["knee"]
    assert knee["streamed"] is True and knee["concurrency"] == 8 and s["recommended_concurrency"] == 4
    assert knee["methods"]["underruns"] == 8 and knee["methods"]["latency_vs_lowest"] == 2
    assert "underruns" in knee["agree"] and "latency_vs_lowest" not in knee["agree"]
    d = s["diagnosis"]
    assert d["kind"] == "compute_bound", d
    assert f"{st[8]['underrun_rate']:.0%} of streams stalled" in d["evidence"][0]
    assert "TTFA p95" in d["evidence"][0] and "at 1" in d["evidence"][0]
    assert "TTFA p95" in s["recommendation"] and "stalled" in s["recommendation"]


def test_a_ttfa_rise_below_the_floor_is_no_knee(tmp_path):
    # TTFA 140 -> 180 -> 260 ms: 1.9x, still instant to a listener; streams never run dry.
    m = Model(
        steps=(1, 2, 4),
        slots=None,
        stream_capacity=40,
        stream_max_speed=5,
        prefill_ms=100,
        prefill_ms_per_stream=40,
        audio_s_per_char=0.01,
    )
    s = analyze(load(build_run(tmp_path / "r", m)))
    st = _by_conc(s)
    assert st[4]["ttfa_ms"]["p95"] > 1.5 * st[1]["ttfa_ms"]["p95"] and st[4]["ttfa_ms"]["p95"] < 300
    assert s["knee"]["concurrency"] is None and s["knee"]["methods"]["ttfa_vs_lowest"] is None
    assert s["recommended_concurrency"] == 4
    assert s["diagnosis"]["kind"] == "no_knee"
    assert any("300 ms floor" in e for e in s["diagnosis"]["evidence"])


@pytest.mark.parametrize("floor, knee", [(None, 4), (800, 8)])
def test_a_ttfa_rise_above_the_floor_is_a_knee(tmp_path, floor, knee):
    # TTFA 400 -> 500 -> 700 -> 1100 ms with every stream ahead of playback: at 4 it is 1.75x
    # the lowest step's and above the default 300 ms floor; a floor of 800 ms moves it to 8.
    m = Model(
        steps=(1, 2, 4, 8),
        slots=None,
        stream_capacity=80,
        stream_max_speed=5,
        prefill_ms=360,
        prefill_ms_per_stream=100,
        audio_s_per_char=0.01,
        ttfa_floor_ms=floor,
        resources=False,
    )
    s = analyze(load(build_run(tmp_path / "r", m)))
    assert all(x["underrun_rate"] == 0.0 for x in s["steps"])
    assert s["knee"]["concurrency"] == knee and s["knee"]["methods"]["ttfa_vs_lowest"] == knee
    assert s["knee"]["ttfa_floor_ms"] == (floor or 300)
    assert s["recommended_concurrency"] == knee // 2
    d = s["diagnosis"]
    assert d["kind"] == "queueing", d
    assert "requests queue; without server samples the cause cannot be told" in d["evidence"][0]
    assert f"At {knee} streams 0% of streams stalled; TTFA p95" in d["evidence"][0]
    assert any("--collector" in e for e in d["evidence"])


def test_streamed_queueing_without_server_samples_keeps_the_knee(tmp_path):
    s = analyze(load(build_run(tmp_path / "r", Model(**dict(SHARED_5X, resources=False)))))
    assert s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    d = s["diagnosis"]
    assert d["kind"] == "queueing" and d["resource_data"] is False
    assert "of streams stalled (p95 stall" in d["evidence"][0]
    assert "cannot be told" in d["evidence"][0] and "--collector" in d["evidence"][1]


def _expected_mismatches(path):
    """Mismatches per concurrency, counted straight from requests.jsonl."""
    recs = [json.loads(x) for x in (path / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in recs if r["ok"] and r["settled"] and r["final"] and r["audio_s"] is not None]
    low = min(r["concurrency"] for r in ok)
    ref = {}
    for r in ok:
        if r["concurrency"] == low:
            ref.setdefault(r["text_id"], []).append(r["audio_s"])
    ref = {k: statistics.median(v) for k, v in ref.items()}
    out = {}
    for r in ok:
        e = ref.get(r["text_id"])
        if e is not None and abs(r["audio_s"] - e) > max(0.15 * e, 0.1):
            out[r["concurrency"]] = out.get(r["concurrency"], 0) + 1
    return out


@pytest.mark.parametrize("streamed", [True, False])
def test_integrity_mismatches_are_counted(tmp_path, streamed):
    m = Model(
        steps=(1, 2, 4, 8),
        truncate_from=4,
        truncate_fraction=0.3,
        **({"stream_capacity": 40, "audio_s_per_char": 0.01} if streamed else {}),
    )
    p = build_run(tmp_path / "r", m)
    s = analyze(load(p))
    st, want = _by_conc(s), _expected_mismatches(p)
    assert set(want) == {4, 8}
    for c in (1, 2, 4, 8):
        it = st[c]["integrity"]
        assert it["checked"] == st[c]["ok"] and it["mismatched"] == want.get(c, 0), c
    ex = st[8]["integrity"]["examples"][0]
    assert ex["got_s"] == pytest.approx(ex["expected_s"] / 2, abs=0.002)
    assert 0.15 < st[8]["integrity"]["rate"] < 0.45
    assert any("Audio length was off at concurrency 4" in e for e in s["diagnosis"]["evidence"])


def test_stream_fields_read_tolerantly_and_chunks_reread(tmp_path):
    p = build_run(tmp_path / "r", Model(steps=(1, 2), stream_capacity=5, audio_s_per_char=0.01))
    rd = load(p)
    a = rd.requests.attempts()
    n = len(a)
    good = json.loads((p / "requests.jsonl").read_text().splitlines()[-1])
    bad = [
        dict(good, ttfa_ms="soon", underruns=1.5, underrun_ms=-3, chunks=True, gap_max_ms=float("nan")),
        dict(good, chunk_at_ms=[1, 2, 3], chunk_audio_ms=[200, 200]),
        dict(good, chunk_at_ms=[1, "x"], chunk_audio_ms=[200, 200]),
    ]
    with open(p / "requests.jsonl", "a") as f:
        f.write("".join(json.dumps(r).replace("NaN", "null") + "\n" for r in bad))
    rd.refresh()
    a = rd.requests.attempts()
    assert len(a) == n + 3
    for k in ("ttfa_ms", "underruns", "underrun_ms", "chunks", "gap_max_ms"):
        assert np.isnan(a[k][n]), k
    assert a["chunk_n"][n + 1] == -1 and rd.requests.chunk_series(n + 1) is None
    assert a["chunk_n"][n + 2] == 2 and rd.requests.chunk_series(n + 2) is None
    at, audio = rd.requests.chunk_series(n)  # the appended copy, found by its own offset
    assert at.tolist() == good["chunk_at_ms"] and audio.tolist() == good["chunk_audio_ms"]
    assert a["ttfa_ms"][n - 1] == good["ttfa_ms"] and a["underruns"][n - 1] == good["underruns"]


def test_playback_replays_the_clients_player():
    # 200 ms chunks at 100, 300 and 900 ms: plays 100-500, waits 500-900 (one stall), ends at 1100.
    pb = playback(np.array([100.0, 300.0, 900.0]), np.array([200.0, 200.0, 200.0]))
    assert (pb.underruns, pb.underrun_ms, pb.start_ms) == (1, 400.0, 100.0)
    assert pb.played_t.tolist() == [0, 100, 300, 500, 900, 1100]
    assert pb.played.tolist() == [0, 0, 200, 400, 400, 600]
    # a 500 ms buffer waits for the third chunk, then never runs dry
    pb = playback(np.array([100.0, 300.0, 900.0]), np.array([200.0, 200.0, 200.0]), buffer_ms=500)
    assert (pb.underruns, pb.start_ms) == (0, 900.0) and pb.played[-1] == 600


def _stream_step(c, ttfa_p95, underrun=0.0, wait_p50=300.0, fail=0.0):
    return {
        "concurrency": c,
        "requests": 100,
        "ok": 100,
        "attempt_failure_rate": fail,
        "latency_ms": {"p50": wait_p50, "p95": wait_p50 * 1.5},
        "e2e_ms": None,
        "throughput_rps": c / wait_p50 * 1000,
        "ttfa_ms": {"p50": ttfa_p95 * 0.9, "p95": ttfa_p95},
        "underrun_rate": underrun,
    }


def test_knee_rules_for_streams():
    doubling = [_stream_step(c, 150, wait_p50=300 * c) for c in (1, 2, 4, 8)]
    k = find_knee(doubling, streamed=True)
    assert k["concurrency"] is None and k["methods"]["latency_vs_lowest"] == 2
    assert find_knee(doubling)["concurrency"] == 2  # read whole, the same steps have a knee at 2
    steps = [_stream_step(c, 150, u) for c, u in zip((1, 2, 4, 8), (0, 0.04, 0.05, 0.6))]
    assert find_knee(steps, streamed=True)["concurrency"] == 4
    # a one-step TTFA spike is not a knee; a sustained rise above the floor is
    spike = [_stream_step(c, t) for c, t in zip((1, 2, 4, 8), (400, 700, 420, 430))]
    assert find_knee(spike, streamed=True)["concurrency"] is None
    rise = [_stream_step(c, t) for c, t in zip((1, 2, 4, 8), (400, 450, 700, 900))]
    assert find_knee(rise, streamed=True)["concurrency"] == 4
    assert find_knee(rise, streamed=True, ttfa_floor_ms=800)["concurrency"] == 8
    fails = [_stream_step(c, 150, fail=f) for c, f in zip((1, 2, 4), (0, 0, 0.3))]
    assert find_knee(fails, streamed=True)["methods"]["failures"] == 4


def test_cli_and_report_of_a_streamed_run(tmp_path):
    p = build_run(tmp_path / "r", Model(**SHARED_5X))
    r = dashboard(p)
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[1].split()
    assert "ttfa" in header and "underrun%" in header and "knee: 8" in r.stdout
    html = (p / "report.html").read_text()
    assert "Stream health: audio received vs played" in html
    assert "received (typical)" in html and "played (worst)" in html and "p95 TTFA" in html
    assert "Streams that stalled" in html and "Audio integrity" in html
    summary = json.loads((p / "summary.json").read_text())
    assert summary["steps"][0]["integrity"]["mismatched"] == 0
    assert summary["steps"][-1]["underrun_ms"]["max"] > 0


def test_a_run_read_whole_keeps_its_table_and_report(tmp_path):
    s = analyze(load(build_run(tmp_path / "r", Model())))
    assert s["knee"]["streamed"] is False and s["steps"][0]["streamed"] is False
    assert s["steps"][0]["underrun_rate"] is None and s["steps"][0]["ttfa_ms"] is None
    assert format_table(s).splitlines()[1].split() == " ".join(TABLE_COLUMNS).split()
    from tts_knee.dashboard.report import report_html

    html = report_html(load(tmp_path / "r"), s)
    assert "Stream health" not in html and "Audio integrity" in html


CHROMIUM = __import__("shutil").which("chromium") or __import__("shutil").which("chromium-browser")


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (apt-get install chromium)")
def test_streamed_report_renders_in_chromium(tmp_path):
    p = build_run(tmp_path / "r", Model(**dict(SHARED_5X, text_ids=["<b>x</b>", "b", "c", "d", "e"])))
    r = dashboard(p)
    assert r.returncode == 0, r.stderr
    res = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=8000",
            "--dump-dom",
            (p / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert res.stdout.count("main-svg") >= 8 and "Uncaught" not in res.stderr, res.stderr[-2000:]
    html = (p / "report.html").read_text()
    assert "text &lt;b&gt;x&lt;\\u002fb&gt;" in html and "text \\u003cb" not in html


def test_a_streamed_run_without_stream_figures_is_judged_on_whole_body_time(tmp_path):
    # run.json says streamed, but the client that wrote the records did not time the stream.
    p = build_run(tmp_path / "r", Model())
    run = json.loads((p / "run.json").read_text())
    run["options"]["tts_stream"] = True
    (p / "run.json").write_text(json.dumps(run))
    s = analyze(load(p))
    assert s["steps"][0]["streamed"] is True and s["knee"]["untimed_stream"] is True
    assert s["knee"]["streamed"] is False and s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    assert any("did not time the stream" in e for e in s["diagnosis"]["evidence"])


def test_streams_still_playing_when_the_next_step_began_are_not_this_steps(tmp_path):
    # As in a real sweep: two streams sent just before the 4-user step ended ran on while 8
    # users shared the server, and stalled. They are the next step's load, not this one's.
    p = build_run(tmp_path / "r", Model(**SHARED_5X))
    run = json.loads((p / "run.json").read_text())
    step3 = next(s for s in run["steps"] if s["concurrency"] == 4)
    recs = [json.loads(x) for x in (p / "requests.jsonl").read_text().splitlines()]
    model = next(r for r in recs if r["concurrency"] == 4 and r["settled"] and r["ok"])
    late = []
    for i, before in enumerate((0.04, 0.0)):
        t0 = step3["end"] - before
        late.append(
            dict(
                model,
                req_id=f"late-{i}",
                t0=t0,
                t2=t0 + 2.6,
                t3=t0 + 2.601,
                wait_ms=2600.0,
                ttfa_ms=380.0,
                underruns=7,
                underrun_ms=770.0,
            )
        )
    with open(p / "requests.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in late))
    s = analyze(load(p))
    at4 = _by_conc(s)[4]
    over = sum(
        1
        for r in recs + late
        if r["step"] == step3["step"] and r["ok"] and r["settled"] and (r["t3"] or r["t2"]) > step3["end"]
    )
    assert at4["streams"]["cut_by_step_end"] == over >= 2
    assert at4["streams"]["counted"] == at4["ok"] - over
    assert at4["underrun_rate"] == 0.0 and at4["ttfa_ms"]["max"] < 300
    assert s["knee"]["concurrency"] == 8 and s["recommended_concurrency"] == 4
    # Summarised again with its records relabelled and no window (as steps at one concurrency
    # are pooled), the step still leaves those streams out.
    import dataclasses

    from tts_knee.analysis.steps import step_stats

    rd = load(p)
    analyze(rd)
    a = rd.requests.attempts()
    pooled = dataclasses.replace(a, cols={**a.cols, "step": np.where(a["step"] == step3["step"], -2, a["step"])})
    again = step_stats(pooled, {"step": -2, "concurrency": 4, "start": None, "end": None}, rd.resources, streamed=True)
    assert again["streams"] == at4["streams"] and again["underrun_rate"] == 0.0


def test_the_slo_section_draws_and_tabulates_the_slos_own_terms(tmp_path):
    """A streamed run judged on TTFA and underruns: the SLO chart's y values are the TTFA p95s
    (and underrun rates) the step table shows, each term's threshold drawn; the table has a
    column per term and no wait p95."""
    from tts_knee.analysis.slo import parse
    from tts_knee.dashboard.kit import Renderer
    from tts_knee.dashboard.slo_verdicts import slo_figure, slo_html
    from tts_knee.dashboard.table import table_columns, table_rows
    from tts_knee.dashboard.view import RunView

    # 40 s steps: enough requests at each concurrency for an interval to bound a p95 from above
    rd = load(build_run(tmp_path / "r", Model(**dict(SHARED_5X, step_s=40))))
    s = analyze(rd, parse("ttfa_p95_ms<=400,underrun_rate<=0.05"))
    view = RunView.of(s)
    fig = slo_figure(view)
    by_name = {t.name.split(" ")[0]: t for t in fig.data}
    cols = table_columns(view)
    table = {int(r[cols.index("conc")]): r for r in table_rows(view)}
    ttfa = list(by_name["ttfa_p95_ms"].y)
    assert [f"{v:.0f}" for v in ttfa] == [table[c][cols.index("ttfa p95")] for c in (1, 2, 4, 8)]
    assert ttfa == [lv["ttfa_ms"]["p95"] for lv in s["levels"]]
    assert list(by_name["underrun_rate"].y) == [lv["underrun_rate"] for lv in s["levels"]]
    assert by_name["ttfa_p95_ms"].error_y.array is not None  # its interval
    lines = {(round(sh.y0, 3), sh.yref) for sh in fig.layout.shapes if sh.y0 == sh.y1}
    assert {(400.0, "y"), (0.05, "y2")} <= lines
    html = slo_html(view, Renderer(False))
    assert "<th>ttfa_p95_ms [95% CI]</th><th>underrun_rate [95% CI]</th>" in html and "<th>p95 wait" not in html
    assert "met up to <b>4</b>" in html
    none = slo_html(RunView.of(analyze(rd, parse("ttfa_p95_ms<=100"))), Renderer(False))
    assert "no tested concurrency meets it" in none and "none" not in none[:300]
