"""The fast requests.jsonl reader (pyarrow by block, orjson by line) against a plain reference:
``json.loads`` of every line and the column rules written out value by value. Same columns,
same labels, same Server-Timing stages, same chunk gaps, same gRPC status names, same bad-line
count, whichever path a block takes and however the file is cut while it is being written."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random

import numpy as np
import pytest

from rundirs import SCENARIOS, build_run
from tts_knee.runformat import reader as rundir
from tts_knee.runformat.reader import RequestLog

NUMS = (
    "t0",
    "ttfb_ms",
    "wait_ms",
    "write_ms",
    "concat_ms",
    "audio_s",
    "rtf",
    "retry_after_s",
    "backoff_ms",
    "text_len",
)
AMOUNTS = ("ttfa_ms", "gap_max_ms", "underrun_ms")
COUNTS = ("chunks", "underruns")
INTS = ("step", "concurrency", "attempt")
#: gRPC's codes and the HTTP statuses they amount to, written out (not imported from runformat).
GRPC = {"OK": 200, "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503, "INTERNAL": 500, "DEADLINE_EXCEEDED": 504}


# The independent reference for rundir._num (not imported: the reader must not be checked against itself).
def _num(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


# The independent reference for rundir._Labels.code (uncapped: these files hold few labels).
def _label(v, names):
    if v is None:
        return -1
    s = str(v)[:300]
    if s not in names:
        names.append(s)
    return names.index(s)


def reference(data: bytes) -> dict:
    """Columns of every complete line, the plain way."""
    cols = {
        k: []
        for k in (
            *NUMS,
            *AMOUNTS,
            *COUNTS,
            *INTS,
            "status",
            "status_name",
            "tend",
            "final",
            "ok",
            "settled",
            "error",
            "text",
            "tier",
            "offset",
            "chunk_n",
            "gap_n",
        )
    }
    labels = {"error": [], "text": [], "tier": [], "status": []}
    gaps: list[float] = []
    stage_rows: dict[str, dict[int, float]] = {}
    bad = pos = 0
    for raw in data.split(b"\n")[:-1]:
        at, pos = pos, pos + len(raw) + 1
        if not raw.strip():
            continue
        try:
            r = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if not isinstance(r, dict):
            bad += 1
            continue
        row = len(cols["offset"])
        for k in NUMS:
            cols[k].append(_num(r.get(k)))
        for k in AMOUNTS + COUNTS:
            f = _num(r.get(k))
            ok = f is not None and f >= 0 and (k not in COUNTS or f == int(f))
            cols[k].append(f if ok else None)
        for k in INTS:
            f = _num(r.get(k))
            cols[k].append(-1 if f is None else int(f))
        status = r.get("status")
        named = isinstance(status, str) and status in GRPC
        f = GRPC[status] if named else _num(status)
        cols["status"].append(-1 if f is None else int(f))
        cols["status_name"].append(_label(status, labels["status"]) if named else -1)
        end = next((x for x in (_num(r.get("t3")), _num(r.get("t2"))) if x is not None), None)
        if end is None and _num(r.get("t0")) is not None and _num(r.get("wait_ms")) is not None:
            end = _num(r["t0"]) + _num(r["wait_ms"]) / 1000.0
        cols["tend"].append(end)
        cols["final"].append(r.get("final", True) is not False)
        cols["ok"].append(r.get("ok") is True)
        cols["settled"].append(r.get("settled", True) is not False)
        cols["error"].append(_label(r.get("error") or None, labels["error"]))
        cols["text"].append(_label(r.get("text_id"), labels["text"]))
        cols["tier"].append(_label(r.get("tier"), labels["tier"]))
        ca, cm = r.get("chunk_at_ms"), r.get("chunk_audio_ms")
        cols["chunk_n"].append(len(ca) if isinstance(ca, list) and isinstance(cm, list) and len(ca) == len(cm) else -1)
        cols["offset"].append(at if cols["chunk_n"][-1] >= 0 else -1)
        at = [_num(x) for x in ca] if cols["chunk_n"][-1] >= 2 else []
        usable = at and None not in at
        cols["gap_n"].append(len(at) - 1 if usable else 0)
        gaps += [b - a for a, b in zip(at, at[1:])] if usable else []
        st = r.get("server_timing")
        if isinstance(st, dict):
            for name, ms in st.items():
                ms = _num(ms)
                if ms is not None:
                    stage_rows.setdefault(str(name)[:64], {})[row] = ms
    n = len(cols["offset"])
    out = {k: np.array([np.nan if x is None else x for x in v], dtype=float) for k, v in cols.items()}
    stages = {}
    for name, rows in stage_rows.items():
        a = stages[name] = np.full(n, np.nan)
        a[list(rows)] = list(rows.values())
    return {"cols": out, "labels": labels, "stages": stages, "bad": bad, "gaps": np.array(gaps, dtype=np.float32)}


def assert_same(log: RequestLog, data: bytes) -> None:
    ref = reference(data)
    a = log.attempts()
    assert log.bad_lines == ref["bad"]
    assert len(a) == len(ref["cols"]["offset"])
    for k, want in ref["cols"].items():
        got = a[k].astype(float)
        assert np.array_equal(got, want, equal_nan=True), (k, np.flatnonzero(~((got == want) | np.isnan(want))))
    assert a.errors == ref["labels"]["error"] and a.texts == ref["labels"]["text"] and a.tiers == ref["labels"]["tier"]
    assert a.statuses == ref["labels"]["status"]
    assert np.array_equal(a.gaps, ref["gaps"])
    assert list(a.stages) == list(ref["stages"])
    for name, want in ref["stages"].items():
        assert np.array_equal(a.stages[name], want, equal_nan=True), name


def _record(rng: random.Random, i: int, grpc: bool = False) -> dict:
    """A plausible attempt, with the odd values real files hold: nulls, missing fields, unicode,
    empty errors, negative or fractional stream figures, uneven chunk lists, integer stages;
    ``grpc``: statuses are gRPC code names."""
    t0 = 1_700_000_000 + i * 0.01
    r = {
        "req_id": f"w1-{i // 2}",
        "attempt": 1 + i % 2,
        "final": bool(i % 2) or i % 7 == 0,
        "step": 1 + i // 50,
        "concurrency": 2 ** (i // 50 % 8),
        "worker": "w1",
        "user": i % 4,
        "text_id": rng.choice(["t1", "中文", "emoji 🎙️", "x" * 400]),
        "text_len": rng.choice([10, 12.0, None]),
        "tier": rng.choice(["short", "long", None]),
        "t0": t0,
        "t1": t0 + 0.05,
        "t2": rng.choice([t0 + 0.2, None]),
        "t3": rng.choice([t0 + 0.21, None]),
        "ttfb_ms": 50.0,
        "wait_ms": rng.choice([200.0, None, 0]),
        "write_ms": None,
        "concat_ms": None,
        "status": rng.choice(["OK", "RESOURCE_EXHAUSTED", "INTERNAL", None] if grpc else [200, 429, None]),
        "ok": rng.choice([True, False, None]),
        "error": rng.choice([None, "", "HTTP 429", "délai dépassé"]),
        "bytes": 88200,
        "audio_s": 2.0,
        "rtf": 0.1,
        "retry_after_s": None,
        "retry_after_raw": None,
        "backoff_ms": 0.0,
        "server_timing": rng.choice([None, {}, {"queue": 1, "infer": 2.5}, {"infer": 3.0, "post": 0.5}]),
        "settled": rng.choice([True, False, None]),
        "ttfa_ms": rng.choice([120.0, -1.0, None, 0]),
        "chunks": rng.choice([3, 2.5, -1, None]),
        "gap_max_ms": 10.0,
        "underruns": rng.choice([0, 1, 1.5]),
        "underrun_ms": rng.choice([0.0, 20.0, -3.0]),
        "chunk_at_ms": rng.choice([[1.0, 2.0], [], None, [5.0], [0.5, 40.25]]),
        "chunk_audio_ms": rng.choice([[10.0, 10.0], [], None]),
    }
    for k in rng.sample(sorted(r), 2):  # fields go missing
        del r[k]
    return r


def _clean(rng: random.Random, n: int, grpc: bool = False) -> bytes:
    lines = [json.dumps(_record(rng, i, grpc), ensure_ascii=rng.random() < 0.5) for i in range(n)]
    lines[3] = "   "  # whitespace-only and empty lines are no attempt and not bad
    lines[5] = ""
    lines[8] = "  " + lines[8] + "\r"
    return ("\n".join(lines) + "\n").encode()


# each of these makes pyarrow refuse its block, or json.loads read a line its own way
DIRTY = [
    b"not json",
    b"[1, 2]",
    b"5",
    b'"str"',
    b"null",
    b'{"t0": 1}{"t0": 2}',
    b'{"t0": NaN, "wait_ms": Infinity}',
    b'{"t0": "1.5", "wait_ms": "nan", "status": "200"}',
    b'{"t0": true, "ok": 1, "final": 0}',
    b'{"t0": 1e400, "status": 200.7}',
    b'{"t0": 1, "t0": 2}',
    b'{"error": 5, "text_id": 7, "tier": false}',
    b'{"text_id": "\\ud800 lone"}',
    b'{"error": "\xff\xfe"}',
    b'\xef\xbb\xbf{"t0": 3}',
    b'{"server_timing": {"queue": "12.5", "infer": true, "post": {"x": 1}, "' + b"s" * 70 + b'": 4}}',
    b'{"server_timing": "queue;dur=3"}',
    b'{"chunk_at_ms": [1, "a"], "chunk_audio_ms": [1, 2]}',
    b'{"t0": 1, "tab": "a\tb"}',
    b'{"t0": 2',
    b"{}",
    b'{"t0": 1}null{"t0": 2}',
    b" null ",
    b'{"t0": 1} 5',
    b'{"status": "UNAVAILABLE"}',
    b'{"status": "NOT_A_CODE"}',
    b'{"chunk_at_ms": [1, 2, 1e400], "chunk_audio_ms": [1, 2, 3]}',
]


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_clean_file_takes_the_block_path_and_matches(tmp_path, monkeypatch, grpc):
    data = _clean(random.Random(1), 3000, grpc)
    path = tmp_path / "requests.jsonl"
    path.write_bytes(data)
    by_line = []
    monkeypatch.setattr(RequestLog, "_parse", lambda self, lines, base: by_line.append(len(lines)))
    log = RequestLog(path)
    log.update()
    assert not by_line, "a clean file must not need the line-by-line reader"
    assert_same(log, data)


def test_a_block_pyarrow_cannot_convert_is_read_line_by_line(tmp_path):
    """A server that answered with Server-Timing, then went away: a few stages, then thousands of
    refused attempts without. pyarrow's threaded reader failed on most reads of such a run
    (ArrowNotImplementedError, "JSON conversion to struct<queue: int64 ...> is not supported")
    and the report was a traceback; the block is now read the plain way."""
    rng = random.Random(3)
    records = [_record(rng, i) for i in range(5000)]
    for i, r in enumerate(records):
        r["server_timing"] = {"queue": 0.0, "infer": 20.0 + i / 10, "total": 21.0 + i / 10} if i < 86 else None
    data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode() * 3
    path = tmp_path / "requests.jsonl"
    path.write_bytes(data)
    for _ in range(20):  # pyarrow's threads fail on some reads only
        log = RequestLog(path)
        log.update()
        assert log.lines == 15_000 and log.bad_lines == 0
    assert_same(log, data)


def test_dirty_lines_match_the_reference(tmp_path):
    rng = random.Random(2)
    lines = _clean(rng, 400).split(b"\n")[:-1]
    for bad in DIRTY:
        lines.insert(rng.randrange(len(lines)), bad)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "requests.jsonl"
    path.write_bytes(data)
    log = RequestLog(path)
    log.update()
    assert log.bad_lines >= 8
    assert_same(log, data)


@pytest.mark.parametrize("block", [300, 4096, 1 << 20])
def test_incremental_reads_with_cut_lines_match_one_read(tmp_path, monkeypatch, block):
    monkeypatch.setattr(rundir, "READ_BYTES", block)
    rng = random.Random(3)
    lines = _clean(rng, 600).split(b"\n")[:-1]
    for bad in DIRTY[:6] + DIRTY[-2:]:
        lines.insert(rng.randrange(len(lines)), bad)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "requests.jsonl"
    log = RequestLog(path)
    written = 0
    with open(path, "wb") as f:
        while written < len(data):  # the writer appends pieces that end mid-line
            step = rng.randrange(1, 9000)
            f.write(data[written : written + step])
            f.flush()
            written += step
            log.update()
            assert log.incomplete_last_line == (not data[:written].endswith(b"\n"))
    assert_same(log, data)


def test_synthetic_run_matches_and_e2e_joins_retries(tmp_path):
    p = build_run(tmp_path / "r", dataclasses.replace(SCENARIOS["rate_limited"][0], bad_lines=3))
    data = (p / "requests.jsonl").read_bytes()
    log = RequestLog(p / "requests.jsonl")
    log.update()
    assert_same(log, data)
    a = log.attempts()
    # a retried request's end-to-end time runs from its first attempt
    recs = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            recs.append(json.loads(line))
    first = {r["req_id"]: r["t0"] for r in recs if r["attempt"] == 1}
    rows = [i for i, r in enumerate(recs) if r["final"] and r["attempt"] > 1 and r["req_id"] in first]
    assert rows
    for i in rows:
        assert a["e2e_ms"][i] == pytest.approx((a["tend"][i] - first[recs[i]["req_id"]]) * 1000.0)


def test_updates_read_only_the_bytes_appended_since(tmp_path):
    """The live view and the web UI's plan refresh often: what was read is never read again, so
    scribbling over it in place (same size) changes nothing, and the appended lines are read."""
    from tts_knee.runformat.reader import RunDir

    p = build_run(tmp_path / "r", SCENARIOS["compute_bound"][0])
    rd = RunDir(p)
    rd.refresh()
    n_req, n_res = len(rd.requests.attempts()), len(rd.resources)
    req, res = p / "requests.jsonl", p / "resources.jsonl"
    first_req, first_res = req.read_bytes().splitlines(keepends=True), res.read_bytes().splitlines(keepends=True)
    for path in (req, res):
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.write(b"#" * (size - 1))  # every byte read so far, but the last newline, is now garbage
    with open(req, "ab") as f:
        f.writelines(first_req[:5] + [first_req[5][:20]])  # five lines and a cut one
    with open(res, "ab") as f:
        f.writelines(first_res[:3])
    assert rd.refresh()
    assert len(rd.requests.attempts()) == n_req + 5 and rd.requests.bad_lines == 0
    assert rd.requests.incomplete_last_line
    assert len(rd.resources) == n_res + 3 and rd.resource_bad_lines == 0
    assert not rd.refresh()


def _sample_reference(s) -> dict | None:
    """One resource sample as a frame row, the plain way (the rules ResourceLog documents)."""
    ts = _num(s.get("ts")) if isinstance(s, dict) else None
    if ts is None:
        return None
    row = {"ts": ts, "host": str(s.get("host") or "?"), "role": str(s.get("role") or "server")}
    for k in ("cpu_percent", "cpu_max_core_percent", "mem_used_bytes", "mem_total_bytes"):
        row[k] = _num(s.get(k))
    proc = s.get("proc") if isinstance(s.get("proc"), dict) else {}
    row["proc_cpu_percent"], row["proc_rss_bytes"] = _num(proc.get("cpu_percent")), _num(proc.get("rss_bytes"))
    gpus = [g for g in (s.get("gpus") if isinstance(s.get("gpus"), list) else []) if isinstance(g, dict)]
    utils = [u for u in (_num(g.get("util_percent")) for g in gpus) if u is not None]
    row["gpu_util_percent"] = max(utils) if utils else None
    fullest, frac = (None, None), -math.inf
    for g in gpus:
        used, total = _num(g.get("mem_used_bytes")), _num(g.get("mem_total_bytes"))
        if used is None:
            continue
        fr = used / total if total else 0.0
        if fr > frac:
            fullest, frac = (used, total), fr
    row["gpu_mem_used_bytes"], row["gpu_mem_total_bytes"] = fullest
    powers = [p for p in (_num(g.get("power_w")) for g in gpus) if p is not None]
    row["gpu_power_w"] = sum(powers) if powers else None
    row["gpu_count"] = len(gpus)
    row["metrics"] = s.get("metrics") if isinstance(s.get("metrics"), dict) else None
    return row


def _gpu(rng: random.Random) -> object:
    if rng.random() < 0.05:
        return rng.choice([None, "GPU-0", 3])
    return {
        "util_percent": rng.choice([0, 50.5, 100, None, "7", True, -1.0]),
        "mem_used_bytes": rng.choice([1e9, 2e9, 4e9, 0, None, "x"]),
        "mem_total_bytes": rng.choice([8e9, 4e9, 0, None, -8e9]),
        "power_w": rng.choice([120.0, 80, None, "nan"]),
    }


def test_resource_samples_match_the_plain_rules(tmp_path):
    """resources.jsonl is read column by column; every row must be what the sample-by-sample
    rules give: the busiest GPU, the fullest GPU's memory (the first of a tie), the GPUs' power
    summed, and whatever is malformed (a GPU list that is not a list, a ts that is no number)
    dropped or read as missing, never a crash."""
    rng = random.Random(7)
    samples = []
    for i in range(600):
        s = {
            "ts": rng.choice([1_700_000_000 + i * 0.5] * 8 + [None, "x", float("nan"), True]),
            "host": rng.choice(["tts", "", None, 5]),
            "role": rng.choice(["server", "client", None]),
            "cpu_percent": rng.choice([12.5, 7, None, "3", False]),
            "cpu_max_core_percent": 50.0,
            "mem_used_bytes": rng.choice([8e9, None]),
            "mem_total_bytes": 64e9,
            "proc": rng.choice([{"pid": 1, "cpu_percent": 40.0, "rss_bytes": 2e9}, {}, None, [1]]),
            "gpus": rng.choice([[_gpu(rng) for _ in range(rng.randint(0, 4))]] * 6 + [None, {"0": {}}, 5, "g"]),
            "metrics": rng.choice([None, {"q": 3.0}, [1]]),
        }
        if rng.random() < 0.1:
            del s[rng.choice(sorted(s))]
        samples.append(s)
    lines = [json.dumps(s) for s in samples] + ["[1]", "not json", "7"]
    rng.shuffle(lines)
    _assert_samples_read_as_the_rules_say(tmp_path, lines)


def test_clean_resource_samples_are_read_by_pyarrow_and_match_the_plain_rules(tmp_path, monkeypatch):
    """Samples as the collector writes them (every field its own JSON type, some null or absent,
    GPU lists empty, null or with null figures) are read into columns by pyarrow, not sample by
    sample, and give the same rows."""
    from tts_knee.runformat import reader

    rng = random.Random(11)
    samples = []
    for i in range(800):
        s = {
            "ts": rng.choice([1_700_000_000 + i * 0.5] * 9 + [None]),
            "host": rng.choice(["tts", "loadgen", "", None]),
            "role": rng.choice(["server", "client", None]),
            "cpu_percent": rng.choice([12.5, 7, None]),
            "cpu_max_core_percent": 50.0,
            "mem_used_bytes": rng.choice([8e9, None]),
            "mem_total_bytes": 64e9,
            "proc": rng.choice([{"pid": 1, "cpu_percent": 40.0, "rss_bytes": 2e9}, {"pid": 2}, None]),
            "gpus": rng.choice(
                [
                    [
                        {
                            "util_percent": rng.choice([0, 50.5, None]),
                            "mem_used_bytes": rng.choice([1e9, 4e9, None]),
                            "mem_total_bytes": rng.choice([8e9, 0, None]),
                            "power_w": rng.choice([120.0, None]),
                        }
                        for _ in range(rng.randint(0, 3))
                    ],
                    None,
                    [],
                ]
            ),
            "metrics": None,
        }
        if rng.random() < 0.1:
            del s[rng.choice(sorted(s))]
        samples.append(s)
    monkeypatch.setattr(reader, "_sample_frame", lambda samples: pytest.fail("read sample by sample"))
    _assert_samples_read_as_the_rules_say(tmp_path, [json.dumps(s) for s in samples])


def _assert_samples_read_as_the_rules_say(tmp_path, lines: list[str]) -> None:
    from tts_knee.runformat.reader import ResourceLog

    path = tmp_path / "resources.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = ResourceLog(path)
    assert log.update()
    got = log.frame()
    want = [r for r in (_sample_reference(json.loads(x)) if x[0] in "{[" else None for x in lines) if r]
    want.sort(key=lambda r: r["ts"])
    assert log.bad_lines == len(lines) - len(want)
    assert len(got) == len(want) and len(want) > 300
    for k in want[0]:
        col = list(got[k])
        for i, r in enumerate(want):
            w, g = r[k], col[i]
            if isinstance(w, float) or (w is None and isinstance(g, float)):
                assert (w is None and math.isnan(g)) or w == g, (k, i, w, g)
            else:
                assert w == g, (k, i, w, g)


def test_resource_samples_read_block_by_block_match_one_read(tmp_path, monkeypatch):
    """resources.jsonl is read a block at a time (bounded memory); small blocks, a line longer
    than a block and a sample appended later give the rows one read gives, in ts order."""
    from tts_knee.runformat.reader import ResourceLog

    rng = random.Random(5)
    lines = [
        json.dumps({"ts": 1_700_000_000 + rng.random() * 50, "host": "h" * rng.choice([1, 3000]), "cpu_percent": i})
        for i in range(400)
    ]
    path = tmp_path / "resources.jsonl"
    path.write_text("\n".join(lines[:300]) + "\n" + lines[300][:20])
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(lines) + "\n")
    want = ResourceLog(whole)
    want.update()
    monkeypatch.setattr(rundir, "READ_BYTES", 1024)
    log = ResourceLog(path)
    assert log.update() and log.incomplete_last_line
    path.write_text("\n".join(lines) + "\n")
    assert log.update() and not log.incomplete_last_line
    got, ref = log.frame(), want.frame()
    assert len(got) == len(ref) == 400
    assert got["ts"].tolist() == ref["ts"].tolist() and got["cpu_percent"].tolist() == ref["cpu_percent"].tolist()


def test_a_field_no_record_wrote_takes_no_memory(tmp_path):
    """A field no record has written (a run that did not stream: no TTFA) reads as missing in
    every row from one value in memory, also in a subset; once a record writes it, the rows
    before it read as missing and the column is the reference's."""
    rec = {"attempt": 1, "final": True, "step": 1, "concurrency": 1, "wait_ms": 100.0, "ok": True, "status": 200}
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps({**rec, "req_id": f"r{i}", "t0": 1.7e9 + i}) + "\n" for i in range(100)))
    log = RequestLog(path, live=True)
    log.update()
    a = log.attempts()
    for name, missing in (("ttfa_ms", np.nan), ("cancel_ms", np.nan), ("voice", -1), ("chunk_n", -1), ("offset", -1)):
        assert a[name].strides == (0,) and len(a[name]) == 100, name
        assert np.array_equal(a[name], np.full(100, missing), equal_nan=True), name
    assert a["wait_ms"].strides != (0,)
    half = a.subset(np.arange(100) % 2 == 0)
    assert len(half["ttfa_ms"]) == 50 and half["ttfa_ms"].strides == (0,) and len(half["wait_ms"]) == 50
    with open(path, "a") as f:
        f.write(json.dumps({**rec, "req_id": "late", "t0": 1.7e9 + 100, "ttfa_ms": 80.0, "voice": "v1"}) + "\n")
    log.update()
    a = log.attempts()
    assert np.isnan(a["ttfa_ms"][:100]).all() and a["ttfa_ms"][100] == 80.0
    assert (a["voice"][:100] == -1).all() and a.voices[a["voice"][100]] == "v1"
    assert_same(log, path.read_bytes())
