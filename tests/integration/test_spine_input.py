"""Bad input ends in one sentence and a non-zero exit, never a traceback."""

import pytest

from procs import locust, spawn


@pytest.fixture(scope="module")
def sim():
    with spawn(["tts_knee.testbed.sim", "--port", "0", "--base-ms", "5", "--per-char-ms", "0"]) as p:
        yield p


def run_bad(tmp_path, *args):
    proc = locust(
        ["--headless", "--steps", "1", "--step-time", "1", "--run-dir", str(tmp_path / "run"), *args], timeout=60
    )
    assert "Traceback" not in proc.stdout, proc.stdout
    errors = [line for line in proc.stdout.splitlines() if "/ERROR/" in line]
    return proc, errors


def test_unreachable_host(tmp_path):
    proc, errors = run_bad(tmp_path, "-H", "http://127.0.0.1:9")
    assert proc.returncode == 2
    assert len(errors) == 1 and "cannot reach http://127.0.0.1:9" in errors[0]


def test_wrong_path_is_a_404(tmp_path, sim):
    proc, errors = run_bad(tmp_path, "-H", sim.url, "--tts-path", "/v2/nothing")
    assert proc.returncode == 2
    assert len(errors) == 1 and "answered 404" in errors[0] and "--tts-path" in errors[0]


def test_target_that_is_not_a_tts_server(tmp_path):
    # The collector answers HTTP but is no TTS server.
    with spawn(["tts_knee.collectors", "--port", "0"]) as collector:
        proc, errors = run_bad(tmp_path, "-H", collector.url, "--tts-path", "/healthz", "--tts-api", "piper")
    assert proc.returncode == 2
    assert len(errors) == 1, errors


def test_wrong_api_shape_is_rejected(tmp_path, sim):
    proc, errors = run_bad(tmp_path, "-H", sim.url, "--tts-api", "json", "--tts-template", '{"words": "{text}"}')
    assert proc.returncode == 2
    assert len(errors) == 1 and "rejected the request with 400" in errors[0]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--steps", "1,x"], "--steps must be comma-separated whole numbers"),
        (["--steps", "0"], "--steps needs at least one concurrency of 1 or more"),
        (["--retry-on", "42x"], "--retry-on takes HTTP statuses"),
        (["--retry-base-ms", "500", "--retry-max-ms", "100"], "--retry-max-ms (100) must not be below"),
        (["--collector", "ftp://x"], "--collector must be an http:// URL"),
        (["--tts-api", "json"], "--tts-api json needs --tts-template"),
        (["--tts-format", "aiff"], "--tts-format must be one of"),
        (["--settle-time", "5"], "--settle-time (5 s) must be shorter than --step-time (1 s)"),
        (["--tts-stream-format", "websocket"], "--tts-stream-format must be sse or audio, got 'websocket'"),
        (["--playback-buffer-ms", "-5"], "--playback-buffer-ms must be zero or more"),
        (["--ttfa-floor-ms", "nan"], "--ttfa-floor-ms must be a finite number"),
    ],
)
def test_bad_options_are_named(tmp_path, sim, args, message):
    proc, errors = run_bad(tmp_path, "-H", sim.url, *args)
    assert proc.returncode == 2
    assert len(errors) == 1 and message in errors[0], proc.stdout


def test_malformed_corpus_names_the_line(tmp_path, sim):
    corpus = tmp_path / "texts.jsonl"
    corpus.write_text('{"text": "fine"}\n\n{"text": "also fine", "tier": "short"}\n{"text": oops}\n')
    proc, errors = run_bad(tmp_path, "-H", sim.url, "--texts", str(corpus))
    assert proc.returncode == 2
    assert len(errors) == 1 and f"{corpus}, line 4 is not valid JSON" in errors[0]


def test_missing_host(tmp_path):
    proc, errors = run_bad(tmp_path)
    assert proc.returncode == 2
    assert len(errors) == 1 and "-H/--host" in errors[0]
