"""The report kit: what every section of ``report.html`` (and the comparison page) builds with.

HTML escaping, number formatting, the page skeleton and its style, the figures drawn as HTML
fragments (the first with plotly.js), and the log2 axis the steps' levels are drawn on, shared by
the sections so none imports another. Every string that comes from the run goes through :func:`esc` before it
reaches the page or a Plotly hover label.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from tts_knee.runformat.summary import BargeIn, Summary

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


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value: object, spec: str = "{:.0f}") -> str:
    """A figure as tables show it: ``spec`` formatted, "-" where it is missing."""
    return "-" if value is None else spec.format(value)


def step_row(step: Mapping[str, object], cells: list[str], cls: str = "") -> str:
    """A step table's row of ``cells``, ``cls`` marking the knee or the recommendation; a step
    still running is marked open instead, with why its figures are partial on hover."""
    title = ""
    opened = step.get("open")
    if opened:
        assert isinstance(opened, dict), "a step's open is its open window's note"
        cls, title = "open", f" title='{esc(opened['note'])}'"
    return f"<tr class='{cls}'{title}>" + "".join(f"<td>{esc(cell)}</td>" for cell in cells) + "</tr>"


def capacity_html(summary: Summary) -> str:
    """The recommendation in replicas and money (``summary.capacity``), for the verdict box; ""
    where nothing is recommended."""
    cap = summary.get("capacity")
    return f"<div class='capacity'>{esc(cap['text'])}</div>" if cap and cap.get("at") and cap.get("text") else ""


_NO_FIGURES: Mapping[str, object] = {}


def figures(part: object) -> Mapping[str, object]:
    """A part of the summary (a step's ``latency_ms``, its ``server`` …) read as figures by name,
    none where it is missing (null)."""
    return part if isinstance(part, Mapping) else _NO_FIGURES


def number(part: Mapping[str, object] | None, name: str) -> float | None:
    """``part[name]`` where it is a number (a figure named at run time, ``wer_mean`` say), else None."""
    value = part.get(name) if part else None
    return value if isinstance(value, (int, float)) else None


def stat(step: Mapping[str, object], key: str, quantile: str) -> Any:
    """``step[key][quantile]`` (a step's ``latency_ms`` p95, say, or its ``p95_ci``), None where
    either is missing."""
    figure = step.get(key)
    return figure.get(quantile) if isinstance(figure, dict) else None


class Renderer:
    """Draws a page's figures as HTML fragments in turn: the first with ``plotlyjs`` (True embeds
    plotly.js, a URL loads it from there, False leaves it to the page), every later one without."""

    def __init__(self, plotlyjs: bool | str) -> None:
        self.plotlyjs = plotlyjs

    def __call__(self, fig: go.Figure | None) -> str:
        """``fig`` as HTML ("" for no figure)."""
        if fig is None:
            return ""
        drawn = pio.to_html(fig, full_html=False, include_plotlyjs=self.plotlyjs, config=_PLOT_CONFIG)
        self.plotlyjs = False
        return drawn


def page(title: str, body: str, head_extra: str = "") -> str:
    """A whole HTML page in the report's style."""
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>{head_extra}"
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )


@dataclass(frozen=True)
class LevelAxis:
    """An x axis of levels (concurrencies, offered rates, numbers of voices), linear in
    log2(level): plotly's log axes put shapes and annotations in log10 units, which is easy to get
    wrong."""

    title: str = "concurrency"

    @staticmethod
    def at(levels: Any) -> Any:
        """Where a level (or each of ``levels``) stands on the axis."""
        return np.log2(np.asarray(levels, dtype=float)) if np.ndim(levels) else math.log2(levels)

    def draw(self, fig: go.Figure, levels: Iterable[float | None], **where: object) -> None:
        """The axis's title, and ticks at ``levels``."""
        ticks = sorted({level for level in levels if level is not None})
        text = [f"{tick:g}" if isinstance(tick, float) else str(tick) for tick in ticks]  # a rate: 4, not 4.0
        fig.update_xaxes(tickvals=[self.at(tick) for tick in ticks], ticktext=text, title_text=self.title, **where)


def ci_bars(values: Sequence[float | None], intervals: Sequence[Sequence[float | None] | None]) -> dict | None:
    """Plotly error bars for the 95% ``intervals`` [low, high] around ``values``, or None where
    there is none; an end too few requests could bound (None) gets no bar on that side (the tables
    say so)."""
    if not any(intervals):
        return None
    return dict(
        type="data",
        visible=True,
        thickness=1.2,
        width=4,
        array=[_arm(value, interval, 1) for value, interval in zip(values, intervals)],
        arrayminus=[_arm(value, interval, 0) for value, interval in zip(values, intervals)],
    )


def _arm(value: float | None, interval: Sequence[float | None] | None, end: int) -> float | None:
    """How far ``interval`` reaches above (``end`` 1) or below (0) ``value``, None where unbounded."""
    bound = interval[end] if interval else None
    if bound is None or value is None:
        return None
    return bound - value if end else value - bound


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
