"""--trace and --trace-speed as the options take them: the trace format read from JSONL and CSV,
resolved against the corpus, shared out among workers with each conversation whole, its bursts
found, its speeds on the rate axis bisected to 0.1x; and every mistake one sentence naming the
row or the option."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from procs import option_defaults
from tts_knee.analysis.trace import bursts
from tts_knee.locustfiles import settings as settings_mod
from tts_knee.locustfiles.inputs import corpus, trace
from tts_knee.locustfiles.plan import SpeedAxis, StepPlan
from tts_knee.runformat import trace as fmt


def _write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def _settings(**changes):
    return settings_mod.from_options(SimpleNamespace(**{**option_defaults(), **changes}), "http://127.0.0.1:8300")


def test_jsonl_and_csv_read_alike_and_each_text_column_resolves(tmp_path):
    texts = tuple(corpus.load(None))
    j = _write(
        tmp_path,
        [
            {"offset_s": 0, "text": "Hello there."},
            {"offset_s": 0.5, "text_len": 100, "voice": "amy"},
            "# a comment",
            {"offset_s": 0.5, "text_id": texts[2].id, "language": "de"},
        ],
    )
    c = tmp_path / "t.csv"
    c.write_text(
        f"offset_s,text,text_len,text_id,voice,language\n0,Hello there.,,,,\n0.5,,100,,amy,\n0.5,,,{texts[2].id},,de\n"
    )
    for path in (j, c):
        t = trace.load(str(path), texts)
        assert t.offsets == (0.0, 0.5, 0.5) and t.rows == 3
        assert t.texts[0].text == "Hello there." and t.texts[0].id.startswith("trace:") and t.texts[0].tier == "short"
        nearest = min(texts, key=lambda x: abs(len(x.text) - 100))
        assert t.texts[1].text == nearest.text and t.texts[1].voice == "amy"
        assert t.texts[2].text == texts[2].text and t.texts[2].language == "de"
    # three rows, the last at 0.5 s: it lasts one mean gap (0.25 s) past that, 4 req/s
    assert t.duration_s == pytest.approx(0.75) and t.base_rps == pytest.approx(4.0)


def test_a_conversation_is_one_lane_in_turn_order_and_stays_on_one_worker(tmp_path):
    rows = [
        {"offset_s": 0, "text": "a", "conversation": "c1", "turn": 2},
        {"offset_s": 0, "text": "b", "conversation": "c1", "turn": 1},
        {"offset_s": 1, "text": "c"},
        {"offset_s": 2, "text": "d", "conversation": 7},
        {"offset_s": 3, "text": "e", "conversation": "7"},
        {"offset_s": 4, "text": "f"},
    ]
    t = trace.load(str(_write(tmp_path, rows)), tuple(corpus.load(None)))
    assert t.conversations == 2
    assert t.lanes_of == ((1, 0), (2,), (3, 4), (5,))  # turn 1 before turn 2; 7 and "7" one conversation
    shared = [t.lanes(i, 3) for i in range(3)]
    assert sorted(lane for part in shared for lane in part) == sorted(t.lanes_of)
    assert shared[0] == [(1, 0), (5,)] and shared[1] == [(2,)] and shared[2] == [(3, 4)]
    assert t.replayed(2.0, 1.0) == 3  # 1 s at 2x replays the trace's first 2 s: offsets 0, 0 and 1
    assert t.offered_between(2.0, 0.5, 1.0) == 1


@pytest.mark.parametrize(
    "rows, says",
    [
        ([], "has no rows: a trace lists one arrival per row"),
        (
            [{"offset_s": 2, "text": "a"}, {"offset_s": 1, "text": "b"}],
            "line 2: offset_s 1 is before line 1's 2: a trace lists its arrivals in the order they came",
        ),
        ([{"offset_s": -1, "text": "a"}], "line 1: offset_s -1 is negative"),
        ([{"offset_s": 0, "txt": "a"}], "line 1: unknown column 'txt'; a trace's columns are offset_s, text"),
        ([{"offset_s": 0}], "line 1 has no text: a row gives exactly one of text, text_len"),
        ([{"offset_s": 0, "text": "a", "text_len": 3}], "line 1 has text and text_len: a row gives exactly one"),
        ([{"text": "a"}], "line 1 has no offset_s"),
        ([{"offset_s": "soon", "text": "a"}], "line 1: offset_s 'soon' is not a number"),
        ([{"offset_s": 0, "text_len": 2.5}], "line 1: text_len 2.5 is not a whole number"),
        (["{not json"], "line 1 is not JSON"),
        ([{"offset_s": 0, "text": "a", "turn": 1}], "line 1 has a turn but no conversation"),
        (
            [
                {"offset_s": 0, "text": "a", "conversation": "c", "turn": 1},
                {"offset_s": 1, "text": "b", "conversation": "c", "turn": 1},
            ],
            "line 2: conversation 'c' has turn 1 twice",
        ),
        (
            [
                {"offset_s": 0, "text": "a", "conversation": "c", "turn": 2},
                {"offset_s": 1, "text": "b", "conversation": "c", "turn": 1},
            ],
            "line 1: turn 2 of conversation 'c' comes at 0 s, before turn 1 at 1 s",
        ),
    ],
)
def test_a_malformed_trace_is_one_sentence_naming_the_row(tmp_path, rows, says):
    path = _write(tmp_path, rows)
    with pytest.raises(fmt.TraceError) as e:
        fmt.read(path)
    assert says in str(e.value) and str(path) in str(e.value)


def test_a_csv_trace_names_its_unknown_column_and_a_short_row(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("offset_s,txt\n0,a\n")
    with pytest.raises(fmt.TraceError, match=r"bad.csv line 1: unknown column 'txt'"):
        fmt.read(bad)
    bad.write_text("offset_s,text\n0,a,b\n")
    with pytest.raises(fmt.TraceError, match=r"line 2 has 3 cells for the header's 2 columns"):
        fmt.read(bad)


def test_the_speeds_are_rates_of_the_trace_and_refine_on_a_grid_of_a_tenth(tmp_path):
    path = _write(tmp_path, [{"offset_s": i * 0.2, "text_len": 50} for i in range(600)])
    s = _settings(trace=str(path), trace_speed="0.5,1,2,4", step_time="20")
    assert s.mode == "open" and s.trace.base_rps == pytest.approx(5.0)
    assert s.rates == pytest.approx((2.5, 5.0, 10.0, 20.0)) and s.trace_speed == (0.5, 1.0, 2.0, 4.0)
    assert s.public()["trace"] == str(path) and s.public()["trace_speed"] == [0.5, 1, 2, 4]
    axis = SpeedAxis(s.trace.base_rps)
    assert axis.text(10.0) == "2x (10 req/s)"
    assert axis.speed(axis.midpoint(10.0, 20.0)) == 3.0 and axis.speed(axis.midpoint(15.0, 17.5)) == 3.2
    assert not axis.close_enough(15.0, 16.0) and axis.close_enough(15.0, 15.5)
    # a bisection between 2x (passes) and 4x (fails) ends two tenths apart at most, every probe a tenth
    from tts_knee.analysis import slo as slo_mod

    plan = StepPlan(s.rates, slo=slo_mod.parse("p95_ms<=1000"), refine=True, axis=axis)
    limit, step = 3.23, 0
    while (nxt := plan.next()) is not None:
        step += 1
        ok = axis.speed(nxt.level) <= limit
        plan.finish(
            {"step": step, "rate": nxt.level, "concurrency": 0, "phase": nxt.phase, "repeat": 1},
            {
                "requests": 200,
                "sched_wait_ms": {"p95": 500.0 if ok else 3000.0, "count": 200},
                "error_rate": 0.0,
                "failed": 0,
            },
        )
    probes = [axis.speed(v["rate"]) for v in plan.verdicts if v["phase"] == "refine"]
    assert all(round(p * 10, 6) == int(round(p * 10, 6)) for p in probes), probes
    assert axis.speed(plan.max_level()) == 3.2 and plan.decisions[-1]["action"] == "done"


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"trace_speed": "2"}, "--trace-speed sets the speeds a trace is replayed at: give --trace FILE too"),
        ({"trace": "T", "rates": "2,4"}, "--trace replays its own arrivals at --trace-speed: drop --rates"),
        ({"trace": "T", "steps": "1,2"}, "--trace replays its own arrivals at --trace-speed: drop --steps"),
        ({"trace": "T", "trace_speed": "0,1"}, "--trace-speed needs at least one speed, each a number above 0"),
        ({"trace": "T", "trace_speed": "fast"}, "--trace-speed must be comma-separated speeds like 0.5,1,2,4"),
        ({"trace": "T", "step_requests": "50"}, "--step-requests does not apply to it"),
        ({"trace": "T", "refine_to": "1"}, "--refine-to is for --rates; a trace's speeds are refined to 0.1x"),
        (
            {"trace": "T", "trace_speed": "100", "step_time": "30"},
            "--trace at 100x lasts 1.2 s, no longer than --settle-time (3 s)",
        ),
        ({"trace": "MISSING"}, "--trace: MISSING does not exist"),
        ({"trace": "ID"}, "line 1: text_id 'nope' is not in the corpus (--texts)"),
    ],
)
def test_a_trace_given_wrong_is_one_sentence(tmp_path, changes, says):
    good = _write(tmp_path, [{"offset_s": i * 0.2, "text_len": 50} for i in range(600)])
    unknown = _write(tmp_path, [{"offset_s": 0, "text_id": "nope"}], "id.jsonl")
    where = {"T": str(good), "ID": str(unknown), "MISSING": "MISSING"}
    if "trace" in changes:
        changes = dict(changes, trace=where[changes["trace"]])
    with pytest.raises(settings_mod.SettingsError) as e:
        _settings(**changes)
    assert says in str(e.value)


def test_a_burst_is_found_where_arrivals_come_three_times_as_fast_and_a_poisson_trace_has_none():
    rng = random.Random(3)
    t, poisson = 0.0, []
    while (t := t + rng.expovariate(5.0)) < 120:
        poisson.append(t)
    assert bursts(poisson, fmt.duration_s(poisson)) == []
    even = sorted([i * 0.2 for i in range(600)] + [60 + i * 0.1 for i in range(20)])
    (b,) = bursts(even, fmt.duration_s(even))
    assert 59.5 <= b["start_s"] <= 60.0 and 61.5 <= b["end_s"] <= 62.0, b
    assert 25 <= b["arrivals"] <= 31 and b["times_mean"] > 2.5, b
