"""The run-directory format module: its builders, its version rule, and its public names."""

import subprocess
import sys
import types

import pytest

from tts_knee import runformat
from tts_knee.runformat import ATTEMPT, RESOURCE_SAMPLE, RUN


def test_public_names_are_the_intended_ones():
    # runformat's submodules show up as its attributes once anything imported them: not public names
    modules = {name for name, value in vars(runformat).items() if isinstance(value, types.ModuleType)}
    assert set(runformat.__all__) == {n for n in dir(runformat) if not n.startswith("_")} - modules


def test_attempt_builder_fills_every_required_field_in_table_order():
    rec = runformat.attempt(t0=1.0, ok=True, step=2)
    required = [f.name for f in ATTEMPT if not f.optional]
    assert list(rec) == required
    assert rec["t0"] == 1.0 and rec["ok"] is True and rec["step"] == 2 and rec["t1"] is None


def test_optional_fields_only_when_given_and_in_place():
    rec = runformat.attempt(scheduled=5.0, t0=6.0)
    assert list(rec)[-1] == "scheduled" and "sched_wait_ms" not in rec
    sample = runformat.resource_sample(ts=1.0, metrics={"q": 2.0}, source="locust-heartbeat")
    names = [k for k in sample]
    assert names.index("source") < names.index("cpu_percent") and "metrics" in sample


def test_a_misspelt_field_is_an_error_naming_it():
    with pytest.raises(TypeError, match="wait_s"):
        runformat.attempt(wait_s=3.0)
    rec = runformat.attempt()
    with pytest.raises(TypeError, match="setled"):
        runformat.attempt.update(rec, setled=False)
    assert runformat.attempt.update(rec, settled=False)["settled"] is False


def test_every_field_says_its_unit_and_nullability():
    for table in (
        ATTEMPT,
        RESOURCE_SAMPLE,
        RUN,
        runformat.STEP,
        runformat.GPU,
        runformat.PROC,
        runformat.WORKER,
        runformat.COLLECTOR,
        runformat.PLAN,
        runformat.SUMMARY,
    ):
        names = [f.name for f in table]
        assert len(names) == len(set(names))
        for f in table:
            assert isinstance(f.unit, str) and isinstance(f.nullable, bool)
    by = {f.name: f for f in ATTEMPT}
    assert by["wait_ms"].unit == "ms" and by["status"].nullable and not by["req_id"].nullable


def test_unknown_and_missing_fields():
    rec = runformat.attempt()
    assert runformat.unknown_fields(ATTEMPT, dict(rec, extra=1)) == ["extra"]
    del rec["t0"]
    assert runformat.missing_fields(ATTEMPT, rec) == ["t0"]


@pytest.mark.parametrize(
    "run, readable",
    [
        ({}, True),
        ({"format_version": 1}, True),
        ({"format_version": runformat.FORMAT_VERSION}, True),
        ({"format_version": runformat.FORMAT_VERSION + 1}, False),
        ({"format_version": "2"}, False),
    ],
)
def test_format_versions(run, readable):
    why = runformat.unreadable(run)
    assert (why is None) == readable
    if why:
        assert why.endswith(".") and "format" in why


def test_imports_neither_locust_nor_gevent_nor_pandas():
    code = (
        "import sys, tts_knee.runformat as runformat; bad = {'locust', 'gevent', 'pandas'} & set(sys.modules); "
        "print(sorted(bad)); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_claim_and_write_json(tmp_path):
    first = runformat.claim(tmp_path / "run")
    runformat.write_json(first / runformat.RUN_JSON, runformat.run_info(run_id="run"))
    second = runformat.claim(tmp_path / "run")
    assert second.name == "run-2" and not list(first.glob(".*.tmp"))


def _summary_of(run_dir):
    from tts_knee.analysis.summary import analyze, load

    return analyze(load(run_dir), None)


def test_a_format_1_run_directory_reads_as_format_2(tmp_path):
    import json

    from rundirs import Model, build_run

    new = build_run(tmp_path / "v2", Model(slots=4))
    old = build_run(tmp_path / "v1", Model(slots=4))
    info = json.loads((old / runformat.RUN_JSON).read_text())
    del info["format_version"]
    (old / runformat.RUN_JSON).write_text(json.dumps(info))
    a, b = _summary_of(new), _summary_of(old)
    for s in (a, b):
        s.pop("run")
    assert a == b and a["knee"]["concurrency"] == 8


def test_summary_keys_are_the_ones_runformat_defines(tmp_path):
    from rundirs import Model, build_run

    s = _summary_of(build_run(tmp_path / "run", Model(slots=4)))
    assert not runformat.unknown_fields(runformat.SUMMARY, s)
    assert not runformat.missing_fields(runformat.SUMMARY, s)


def test_a_newer_format_is_refused_in_one_sentence(tmp_path):
    import json

    from procs import dashboard
    from rundirs import Model, build_run

    run = build_run(tmp_path / "run", Model(slots=4))
    info = json.loads((run / runformat.RUN_JSON).read_text())
    info["format_version"] = runformat.FORMAT_VERSION + 1
    (run / runformat.RUN_JSON).write_text(json.dumps(info))
    out = dashboard(run)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert f"format_version {runformat.FORMAT_VERSION + 1}" in out.stderr + out.stdout
    assert not (run / runformat.SUMMARY_JSON).exists()


def _with_run_json(run_dir, **changes):
    import json

    info = json.loads((run_dir / runformat.RUN_JSON).read_text())
    for k, v in changes.items():
        if v is None:
            info.pop(k, None)
        else:
            info[k] = v
    (run_dir / runformat.RUN_JSON).write_text(json.dumps(info))
    return info


def test_the_run_mode_is_read_from_run_json_or_told_from_the_steps(tmp_path):
    """A run from before ``mode`` was written reads as the steps say: offered rates make it open."""
    from rundirs import Model, build_run
    from tts_knee.runformat.reader import RunDir

    run = build_run(tmp_path / "run", Model(slots=4))
    info = _with_run_json(run, mode=None)
    rd = RunDir(run)
    rd.refresh()
    assert rd.mode() == "closed"
    _with_run_json(run, mode="closed")
    rd.refresh()
    assert rd.mode() == "closed" and _summary_of(run)["run"]["mode"] == "closed"
    for st in info["steps"]:
        st.update(rate=float(st["concurrency"]), concurrency=0)
    _with_run_json(run, mode=None, steps=info["steps"])
    rd.refresh()
    assert rd.mode() == "open"
    _with_run_json(run, mode=None, steps=[], options=dict(info["options"], rates=[4, 8]))
    rd.refresh()
    assert rd.mode() == "open"


def test_a_mode_the_steps_contradict_or_this_version_does_not_know_is_one_sentence(tmp_path, capsys):
    from rundirs import Model, build_run
    from tts_knee.dashboard.__main__ import main

    run = build_run(tmp_path / "run", Model(slots=4))
    info = _with_run_json(run, mode="open")  # steps of concurrency, no offered rate
    assert main([str(run), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "step entry 1" in err and "open loop" in err and "Traceback" not in err
    info["steps"][0]["rate"] = 4.0
    _with_run_json(run, mode="closed", steps=info["steps"])
    assert main([str(run), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "offered rate, but the run is closed loop" in err and len(err.strip().splitlines()) == 1
    _with_run_json(run, mode="session")
    assert main([str(run), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "mode 'session'" in err and "upgrade" in err and len(err.strip().splitlines()) == 1


def test_the_strict_check_names_every_undeclared_key_in_every_file(tmp_path):
    import json

    from rundirs import Model, assert_declared, build_run
    from tts_knee.runformat.check import undeclared_keys

    run = build_run(tmp_path / "run", Model(steps=(1, 2), slo="p95_ms<=400", stream_capacity=5))
    from procs import dashboard

    assert dashboard(run, "--no-report").returncode == 0  # summary.json too, and all declared
    assert undeclared_keys(run) == []
    info = json.loads((run / runformat.RUN_JSON).read_text())
    info["options"]["tts_dialect"] = "ws"
    info["steps"][1]["speakers"] = 3
    (run / runformat.RUN_JSON).write_text(json.dumps(info))
    lines = (run / runformat.REQUESTS).read_text().splitlines()
    second = json.loads(lines[1])
    second["server_timing"] = {"queue": 1.0}  # keys that are data: declared as such
    second["loudness_lufs"] = -23.0
    lines[1] = json.dumps(second)
    (run / runformat.REQUESTS).write_text("\n".join(lines) + "\n")
    samples = (run / runformat.RESOURCES).read_text().splitlines()
    first = json.loads(samples[0])
    first["gpus"][0]["fan_percent"] = 30
    first["metrics"] = {"vllm:num_requests_waiting": 2.0}
    samples[0] = json.dumps(first)
    (run / runformat.RESOURCES).write_text("\n".join(samples) + "\n")
    summary = json.loads((run / runformat.SUMMARY_JSON).read_text())
    summary["steps"][0]["latency_ms"]["p999"] = 1.0
    summary["knee"]["methods"]["guess"] = 2
    summary["slo"]["steps"][0]["values"]["p95_ms"] = 300.0  # SLO terms are data
    (run / runformat.SUMMARY_JSON).write_text(json.dumps(summary))
    assert undeclared_keys(run) == [
        "run.json.options.tts_dialect",
        "run.json.steps[1].speakers",
        "summary.json.steps[0].latency_ms.p999",
        "summary.json.knee.methods.guess",
        "requests.jsonl:2.loudness_lufs",
        "resources.jsonl:1.gpus[0].fan_percent",
    ]
    with pytest.raises(AssertionError, match="run.json.options.tts_dialect"):
        assert_declared(run)


def test_an_object_where_a_plain_value_is_declared_is_undeclared():
    from tts_knee.runformat.fields import undeclared

    rec = runformat.attempt(t0=1.0, error={"code": 5})
    assert undeclared(ATTEMPT, rec, "r") == ["r.error.code"]
    assert undeclared(ATTEMPT, dict(rec, error="x"), "r") == []


def test_the_wire_payloads_refuse_an_undeclared_field():
    from tts_knee.runformat import wire

    assert wire.STEP(step=1, concurrency=4) == {
        "step": 1,
        "concurrency": 4,
        "settle_s": None,
        "rate": None,
        "workers": None,
        "voices": None,
    }
    with pytest.raises(TypeError, match="tts_knee_step.*speakers"):
        wire.STEP(step=1, concurrency=4, speakers=2)
    names = [p.name for p in wire.MESSAGES]
    assert len(set(names)) == len(names) and all(n.startswith("tts_knee_") for n in names)
    assert wire.SAMPLES(host="h", boot="b", next=0, samples=[]) == {"host": "h", "boot": "b", "next": 0, "samples": []}


def test_every_option_is_declared_once_with_a_unit_and_a_default_its_help_shows():
    from tts_knee.runformat.options import DEFAULTS, OPTIONS

    flags = [o.flag for o in OPTIONS if o.flag]
    keys = [o.key for o in OPTIONS if o.key]
    assert len(set(flags)) == len(flags) and len(set(keys)) == len(keys)
    for o in OPTIONS:
        assert isinstance(o.unit, str) and "{default}" not in o.help_text()
        if o.flag:
            assert "default" in o.help_text(), o.flag
    assert DEFAULTS["ttfa_floor_ms"] == 300.0 and DEFAULTS["playback_buffer_ms"] == 0.0


def test_the_reader_and_the_parser_take_the_same_defaults(tmp_path):
    import json

    from procs import plain_parser
    from tts_knee.runformat.options import DEFAULTS
    from tts_knee.runformat.reader import RunDir

    parsed = vars(plain_parser().parse_args([]))
    assert parsed["ttfa_floor_ms"] == DEFAULTS["ttfa_floor_ms"]
    assert parsed["playback_buffer_ms"] == DEFAULTS["playback_buffer_ms"]
    (tmp_path / runformat.RUN_JSON).write_text(json.dumps({"options": {}}))
    rd = RunDir(tmp_path)
    rd.refresh()
    assert rd.ttfa_floor_ms() == parsed["ttfa_floor_ms"]
    assert rd.playback_buffer_ms() == parsed["playback_buffer_ms"]
