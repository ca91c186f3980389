"""The live view (LiveView and --serve) and the report in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from procs import dashboard, http_get, spawn
from rundirs import SCENARIOS, Model, build_run
from tts_knee.dashboard.serve import LiveView

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_liveview_routes_and_updates(tmp_path):
    p = build_run(tmp_path / "r", Model(in_progress=True))
    view = LiveView([p])
    status, ctype, body = view.handle("/")
    assert status == 200 and ctype.startswith("text/html") and b"plotly.min.js" in body
    assert b"version" in body  # the polling script
    v1 = view.handle("/version")[2]
    s = json.loads(view.handle("/summary.json")[2])
    assert s["run"]["in_progress"] is True
    assert view.handle("/plotly.min.js")[0] == 200
    for bad in ("/../run.json", "/run.json", "/requests.jsonl", "//etc/passwd", "/runs/5/", "/%2e%2e/run.json"):
        assert view.handle(bad)[0] == 404, bad
    # the run finishes: the page is rebuilt from the new files
    build_run(p, Model())
    import tts_knee.dashboard.serve as serve

    serve.MIN_REBUILD_S, old = 0.0, serve.MIN_REBUILD_S
    try:
        assert view.handle("/version")[2] != v1
        assert json.loads(view.handle("/summary.json")[2])["run"]["in_progress"] is False
    finally:
        serve.MIN_REBUILD_S = old


def test_serve_cli(tmp_path):
    a = build_run(tmp_path / "a", SCENARIOS["compute_bound"][0])
    b = build_run(tmp_path / "b", SCENARIOS["no_knee"][0])
    with spawn(["tts_knee.dashboard", str(a), str(b), "--serve", "--port", "0", "--no-report"]) as proc:
        assert proc.url.startswith("http://127.0.0.1:")
        status, body = http_get(proc.url + "/")
        assert status == 200 and b"comparison of 2 runs" in body
        status, body = http_get(proc.url + "/runs/1/")
        assert status == 200 and b"no_knee" in body
        for bad in ("/../run.json", "/runs/0/../../run.json", "/a/run.json", "/summary.json/x"):
            assert http_get(proc.url + bad)[0] == 404, bad
        # raw socket: urllib normalises nothing, but make sure a literal traversal is refused too
        import socket

        host, port = proc.url[len("http://") :].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /../../etc/passwd HTTP/1.0\r\n\r\n")
            assert b" 404 " in sock.recv(200)


def _chromium(args, timeout=90):
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=8000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (apt-get install chromium)")
def test_report_and_live_page_render_in_chromium(tmp_path):
    evil = "<script>window.__pwned=1;console.error('Uncaught pwned')</script>"
    p = build_run(
        tmp_path / "r",
        Model(server_timing=True, rate_limit_from=16, text_ids=[evil, "b", "c"], error_from=16, error_text=evil),
    )
    r = dashboard(p)
    assert r.returncode == 0, r.stderr
    res = _chromium(["--dump-dom", (p / "report.html").as_uri()])
    assert res.stdout.count("main-svg") >= 6 and "js-plotly-plot" in res.stdout
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]
    assert "pwned" not in res.stderr
    with spawn(["tts_knee.dashboard", str(p), "--serve", "--port", "0", "--no-report"]) as proc:
        res = _chromium(["--dump-dom", proc.url + "/"])
    assert "js-plotly-plot" in res.stdout and res.stdout.count("main-svg") >= 6
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize(
    "model",
    [
        Model(slots=4, rate_limit_from=8, continuous=True),
        Model(slots=4, stream_capacity=5.0, steps=(1, 2, 4, 8), continuous=True),
    ],
    ids=["throttled", "streamed"],
)
def test_a_live_view_fed_line_by_line_gives_the_summary_the_dashboard_gives(tmp_path, model):
    """The live reader keeps figures from one refresh to the next (analysis.incremental): at
    every point of a run growing in pieces, its summary is the one a fresh read of the same
    files gives, to the last bit."""
    from tts_knee.analysis.summary import analyze, load
    from tts_knee.runformat.reader import RunDir

    whole = build_run(tmp_path / "whole", model)
    lines = (whole / "requests.jsonl").read_bytes().splitlines(keepends=True)
    live_dir, fresh_dir = tmp_path / "live", tmp_path / "fresh"
    for d in (live_dir, fresh_dir):
        d.mkdir()
        for name in ("run.json", "resources.jsonl"):
            shutil.copy(whole / name, d / name)
    live = RunDir(live_dir, live=True)
    cuts = [len(lines) // 5, len(lines) // 2, len(lines) // 2 + 7, len(lines)]
    done = 0
    for cut in cuts:
        part = b"".join(lines[done:cut])
        for d in (live_dir, fresh_dir):
            with open(d / "requests.jsonl", "ab") as f:
                f.write(part)
        done = cut
        live.refresh()
        got = json.loads(json.dumps(analyze(live)))
        want = json.loads(json.dumps(analyze(load(fresh_dir))))
        for s in (got, want):
            s["run"]["path"] = None
        assert got == want, cut
