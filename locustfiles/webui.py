"""tts-knee in Locust's web UI: a "TTS steps" tab with the per-step table as the run goes (each
step's place in the plan, whether it is still open, and its SLO verdict once closed), and the live dashboard (knee,
diagnosis, timeline) served from Locust's own Flask app at ``/tts-knee/``, linked from the UI's
download tab. tts-knee's options, the SLO and the plan's among them, are in the start form.

The steps drive the run, so Locust's "Number of users" and "Ramp up" fields (shown as a disabled
0 while a shape runs) are hidden from the start form, and in their place a line says what the
steps will do, following the form's own step fields as they are edited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flask import Response, request

from tts_knee.runformat.options import DEFAULT_STEP_TIME_S, DEFAULT_STEPS, DEFAULTS, STEP_REQUESTS_CAP_S

TAB_KEY = "tts-knee-steps"
MOUNT = "/tts-knee/"


def mount(environment, node, live_view, columns) -> None:
    """Add the tab and the live dashboard to Locust's web UI; ``node`` is this node's tts-knee
    state, ``live_view(run_dirs)`` makes the dashboard's live view of a run, whose
    ``handle(path)`` serves its pages and, at ``/steps.json``, the tab's rows under ``columns``
    ((key, title) pairs): the composition root, locustfiles/tts.py, hands it the dashboard's
    :class:`dashboard.serve.LiveProcess` and :data:`dashboard.table.TAB_COLUMNS`. The tab and the
    report read one summary, so a step's row is the report's, and an open step is shown open."""
    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "TTS steps", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in columns]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": MOUNT, "title": "tts-knee live report: knee, diagnosis and the client/server timeline"}
    ]
    app = web_ui.app

    @app.after_request
    def _plan_in_form(response):
        if request.endpoint != "locust.index" or response.mimetype != "text/html" or environment.shape_class is None:
            return response
        defaults = {
            "step_time": DEFAULT_STEP_TIME_S,
            "step_requests_cap": STEP_REQUESTS_CAP_S,
            "steps": DEFAULT_STEPS,
            "repeat": DEFAULTS["repeat"],
            "refine_to": DEFAULTS["refine_to"],
        }
        script = _FORM_SCRIPT.replace("DEFAULTS", json.dumps(defaults))
        response.set_data(response.get_data(as_text=True).replace("</body>", script + "</body>", 1))
        return response

    @app.after_request
    def _add_step_table(response):
        if request.path != "/stats/requests" or response.mimetype != "application/json":
            return response
        view = _view()
        rows: list[Any] = []
        if view is not None:
            status, _, body = view.handle("/steps.json")
            rows = json.loads(body) if status == 200 else []
        data = response.get_json()
        data["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
        response.set_data(json.dumps(data))
        return response

    @app.route(MOUNT, defaults={"path": ""})
    @app.route(MOUNT + "<path:path>")
    @web_ui.auth_required_if_enabled
    def _live(path: str):
        view = _view()
        if view is None:
            return Response("No tts-knee run has started yet; start one, then reload.", 404, mimetype="text/plain")
        status, ctype, body = view.handle("/" + path)
        return Response(body, status, content_type=ctype)

    def _view():
        """The current run's live view (None before a run): made once per run, the last one closed."""
        run = node.run
        if run is None or run.run_dir is None:
            return None
        if node.live_view is None or node.live_view[0] != run.run_dir:
            _close()
            node.live_view = (run.run_dir, live_view([Path(run.run_dir)]))
        return node.live_view[1]

    @environment.events.quit.add_listener
    def _close(**_kw):
        if node.live_view is not None:
            view, node.live_view = node.live_view[1], None
            view.close()


# Locust's form is a React app: the note is kept in place as it re-renders. It reads the form's
# own tts-knee fields, so it shows the plan that pressing Start would run; a field the form does
# not show (the custom parameters folded away) or leaves empty is the option's default.
_FORM_SCRIPT = """<script>(function () {
  var D = DEFAULTS;
  function field(name) {
    var e = document.querySelector('[name="' + name + '"]');
    if (!e) return "";
    return e.type === "checkbox" ? (e.checked ? "true" : "") : String(e.value).trim();
  }
  function plan() {
    var rates = field("rates"), steps = field("steps") || D.steps;
    var time = parseFloat(field("step_time")) || 0, n = parseInt(field("step_requests"), 10) || 0;
    var per = n > 0 ? n + " settled requests per step (at most " + (time || D.step_requests_cap) + " s)"
                    : (time || D.step_time) + " s per step";
    var text = rates
      ? "Arrival rates drive this run: " + rates.split(",").join(" \u2192 ") + " requests/s, " + per + "."
      : "The steps drive this run: concurrency " + steps.split(",").join(" \u2192 ") + ", " + per + ".";
    var repeat = parseInt(field("repeat"), 10) || D.repeat;
    if (repeat > 1) text += " The grid runs " + repeat + " times.";
    if (field("slo")) text += " Each step is judged against " + field("slo") + ".";
    if (field("refine")) text += rates
      ? " Then it refines between the last passing and the first failing rate to within " +
        (field("refine_to") || D.refine_to) + "."
      : " Then it refines between the last passing and the first failing concurrency.";
    if (field("stop_past_knee")) text += " It stops past the knee.";
    return text + " Users and ramp-up come from the plan, not from Locust's user count.";
  }
  function apply() {
    var users = document.querySelector('input[name="userCount"]');
    if (!users) return;
    var boxes = ["userCount", "spawnRate"].map(function (n) {
      var e = document.querySelector('input[name="' + n + '"]');
      return e && (e.closest(".MuiFormControl-root") || e.parentElement);
    });
    boxes.forEach(function (b) { if (b && b.style.display !== "none") b.style.display = "none"; });
    var note = document.getElementById("tts-knee-plan");
    if (!note) {
      note = document.createElement("p");
      note.id = "tts-knee-plan";
      note.style.margin = "0";
      boxes[0].parentElement.insertBefore(note, boxes[0]);
    }
    var text = plan();
    if (note.textContent !== text) note.textContent = text;
  }
  new MutationObserver(apply).observe(document.body, {childList: true, subtree: true});
  document.addEventListener("input", apply, true);
  document.addEventListener("change", apply, true);
  apply();
})();</script>"""
