"""Records into verdicts: each step's figures, levels, the knee, the SLO verdicts, confidence
intervals, the playback model, the open-loop figures, the server's own metrics by role
(``runformat.metric_roles``), the diagnosis, the regression test, the gate and ``summary.json``.
How they are shown (the terminal table, ``report.html``) is the dashboard's.

Used by the load generator's live plan (``locustfiles.plan``) and by the dashboard; imports
neither, nor locust, gevent or plotly.
"""
