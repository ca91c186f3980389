"""The report kit: what every section of ``report.html`` (and the comparison page) builds with.

HTML escaping, number formatting, the page skeleton and its style, a Plotly figure as an HTML
fragment, and the concurrency axis (linear in log2), shared by the sections so none imports
another. Every string that comes from the run goes through :func:`esc` before it reaches the
page or a Plotly hover label.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from tts_knee.analysis.axis import of_summary
from tts_knee.runformat.summary import BargeIn, Summary

#: A summary whose steps stand at their rate or number of voices (:func:`dashboard.sweep.by_step`):
#: the summary's shape with each ``concurrency`` relabelled (a rate in it), which is no declared
#: type, so read as JSON; a summary of a run on the concurrency axis is one as it is.
Relabelled = Mapping[str, Any]

GIB = 1024**3
KNEE_COLOUR, REC_COLOUR = "#d62728", "#2ca02c"
PASS_COLOUR, FAIL_COLOUR, UNSURE_COLOUR = "#2ca02c", "#d62728", "#ff7f0e"  # verdicts: pass, fail, inconclusive
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:13px} .verdict{background:#f6f8fa;border-left:4px solid #d62728;
padding:10px 16px;margin:12px 0} .verdict.ok{border-color:#2ca02c} .kind{font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{padding:3px 8px;text-align:right;
border-bottom:1px solid #eee} th{background:#f3f3f3} td.l,th.l{text-align:left}
tr.knee td{background:#fdecea} tr.rec td{background:#eaf7ea} tr.open td{color:#777;font-style:italic} .warn{color:#b35900}
"""  # noqa: E501 - one rule a line of the report's CSS
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def fmt(v, spec="{:.0f}") -> str:
    """A figure as tables show it: ``spec`` formatted, "-" where it is missing."""
    return "-" if v is None else spec.format(v)


def step_row(s: Mapping[str, object], cells: list[str], cls: str = "") -> str:
    """A step table's row of ``cells``, ``cls`` marking the knee or the recommendation; a step
    still running is marked open instead, with why its figures are partial on hover."""
    title = ""
    opened = s.get("open")
    if opened:
        assert isinstance(opened, dict), "a step's open is its open window's note"
        cls, title = "open", f" title='{esc(opened['note'])}'"
    return f"<tr class='{cls}'{title}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>"


def capacity_html(summary: Summary) -> str:
    """The recommendation in replicas and money (``summary.capacity``), for the verdict box; ""
    where nothing is recommended."""
    cap = summary.get("capacity")
    return f"<div class='capacity'>{esc(cap['text'])}</div>" if cap and cap.get("at") and cap.get("text") else ""


_NO_FIGURES: Mapping[str, object] = {}


def figures(part: Mapping[str, object] | None) -> Mapping[str, object]:
    """A part of the summary (a step's ``latency_ms``, its ``server`` …) read as figures by name,
    none where it is missing (null)."""
    return part or _NO_FIGURES


def number(part: Mapping[str, object] | None, name: str) -> float | None:
    """``part[name]`` where it is a number (a figure named at run time, ``wer_mean`` say), else None."""
    value = part.get(name) if part else None
    return value if isinstance(value, (int, float)) else None


def stat(s: Mapping[str, object], key: str, q: str) -> object:
    """``s[key][q]`` (a step's ``latency_ms`` p95, say), None where either is missing."""
    figure = s.get(key)
    return figure.get(q) if isinstance(figure, dict) else None


def fig_html(fig: go.Figure, plotlyjs) -> str:
    """``fig`` as an HTML fragment; ``plotlyjs``: True embeds plotly.js, a URL loads it from there,
    False leaves it to an earlier figure on the page."""
    return pio.to_html(fig, full_html=False, include_plotlyjs=plotlyjs, config=_PLOT_CONFIG)


def page(title: str, body: str, head_extra: str = "") -> str:
    """A whole HTML page in the report's style."""
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>{head_extra}"
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )


def lx(n):
    """Concurrency axes are linear in log2(concurrency): plotly's log axes put shapes and
    annotations in log10 units, which is easy to get wrong."""
    return np.log2(np.asarray(n, dtype=float)) if np.ndim(n) else math.log2(n)


def is_open_loop(summary: Relabelled) -> bool:
    """Whether the run offered rates (``--rates``, run.json mode ``open``): its steps stand at an
    offered rate, not a concurrency."""
    return of_summary(summary).open_loop


def is_voice_sweep(summary: Relabelled) -> bool:
    """Whether the run swept the number of distinct voices at one load (``--voice-steps``)."""
    return of_summary(summary).key == "voices"


def is_streamed(summary: Relabelled) -> bool:
    """Whether the run was judged as streams (on underruns and TTFA)."""
    return bool((summary.get("knee") or {}).get("streamed"))


def step_axis(summary: Relabelled) -> str:
    """The title of a per-step figure's x axis (and of a table's step column)."""
    if is_voice_sweep(summary):
        return "distinct voices"
    return "offered rate (req/s)" if is_open_loop(summary) else "concurrency"


def step_label(s: Mapping[str, object]) -> str:
    """A step as per-step figures and tables name it: its offered rate (open loop), else its concurrency."""
    return f"{s['rate']:g}" if s.get("rate") is not None else str(s["concurrency"])


def conc_axis(fig, steps, title="concurrency", **where):
    """Ticks at the steps' concurrencies (or offered rates) on an x axis drawn with :func:`lx`."""
    ticks = sorted({s["concurrency"] for s in steps})
    text = [f"{t:g}" if isinstance(t, float) else str(t) for t in ticks]  # an offered rate: 4, not 4.0
    fig.update_xaxes(tickvals=[lx(t) for t in ticks], ticktext=text, title_text=title, **where)


def ci_bars(steps: list[dict], key: str, q: str) -> dict | None:
    """Plotly error bars for the 95% interval ``{q}_ci`` of ``steps[i][key]``, or None."""
    pts = [s.get(key) or {} for s in steps]
    if not any(p.get(f"{q}_ci") for p in pts):
        return None
    ci = [p.get(f"{q}_ci") for p in pts]
    # an end too few requests could bound (None) gets no bar on that side; the tables say so
    return dict(
        type="data",
        visible=True,
        thickness=1.2,
        width=4,
        array=[c[1] - p[q] if c and c[1] is not None else None for p, c in zip(pts, ci)],
        arrayminus=[p[q] - c[0] if c and c[0] is not None else None for p, c in zip(pts, ci)],
    )


def orphaned_words(barge: BargeIn) -> str:
    """Barge-in's orphaned work per cancel in words: from the running series, from the process's
    CPU (with its interval), or why it is not known."""
    work = barge["orphaned_work_s"]
    per = work["per_cancel_s"] if work else None
    if work is None or per is None:
        why = barge.get("orphaned_note") or "no running-requests series, no collector watching the server process"
        return f"n/a ({why})"
    uncertainty = work.get("uncertainty_s")
    if uncertainty is not None:
        return f"{per:.2f} ± {uncertainty:.2f} CPU-s per cancel (from the server process's CPU)"
    return f"{per:.2f} s per cancel"
