"""tts-knee in Locust's web UI: a "TTS steps" tab with the per-step table as the run goes (each
step's place in the plan and its SLO verdict once judged), and the live dashboard (knee,
diagnosis, timeline) served from Locust's own Flask app at ``/tts-knee/``, linked from the UI's
download tab. tts-knee's options, the SLO and the plan's among them, are in the start form."""
from __future__ import annotations

import json
from pathlib import Path

from flask import Response, request

TAB_KEY = "tts-knee-steps"
MOUNT = "/tts-knee/"
_COLUMNS = [("step", "Step"), ("phase", "Phase"), ("concurrency", "Concurrency"), ("requests", "Requests"),
            ("failed", "Failed"), ("retries", "Retries"), ("p50_ms", "p50 wait (ms)"), ("p95_ms", "p95 wait (ms)"),
            ("max_ms", "max wait (ms)"), ("slo", "SLO")]


def mount(environment, node) -> None:
    """Add the tab and the live dashboard to Locust's web UI; ``node`` is this node's tts-knee state."""
    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "TTS steps", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in _COLUMNS]}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": MOUNT, "title": "tts-knee live report: knee, diagnosis and the client/server timeline"}]
    app = web_ui.app

    @app.after_request
    def _add_step_table(response):
        if request.path != "/stats/requests" or response.mimetype != "application/json":
            return response
        rows = node.run.step_table() if node.run is not None else []
        data = response.get_json()
        data["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
        response.set_data(json.dumps(data))
        return response

    @app.route(MOUNT, defaults={"path": ""})
    @app.route(MOUNT + "<path:path>")
    @web_ui.auth_required_if_enabled
    def _live(path: str):
        from dashboard.serve import LiveView
        run = node.run
        if run is None or run.run_dir is None:
            return Response("No tts-knee run has started yet; start one, then reload.", 404, mimetype="text/plain")
        if node.live_view is None or node.live_view[0] != run.run_dir:   # only the current run's view is kept
            node.live_view = (run.run_dir, LiveView([Path(run.run_dir)]))
        status, ctype, body = node.live_view[1].handle("/" + path)
        return Response(body, status, content_type=ctype)
