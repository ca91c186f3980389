"""The report's slices: each language's (voice's) p95 along the run's axis, its knee, and a table
of its figures per level, where the run's requests mix them (``summary.slices``,
:mod:`analysis.slices`). Manual: docs/results.md."""

from __future__ import annotations

from typing import Literal

import plotly.graph_objects as go

from tts_knee.analysis.slices import MIN_REQUESTS
from tts_knee.analysis.speech import pct
from tts_knee.runformat.summary import SliceSpeech, Summary

from .kit import KNEE_COLOUR, Renderer, esc, fmt
from .view import RunView

#: The slices by what the records name: ``slices``'s lists
Kind = Literal["by_language", "by_voice"]
_KINDS: tuple[tuple[Kind, str], ...] = (("by_language", "language"), ("by_voice", "voice"))


def slice_figure(view: RunView, key: Kind, what: str) -> go.Figure:
    """Each slice's p95 (TTFA p95 in a streamed run) along the axis, its knee marked."""
    sliced = view.summary["slices"]
    assert sliced is not None, "drawn for a run with slices"
    field: Literal["ttfa_p95_ms", "p95_ms"] = "ttfa_p95_ms" if view.streamed else "p95_ms"
    fig = go.Figure()
    placed = []
    for one in sliced[key]:
        levels = [level for level in one["levels"] if level.get(view.key) is not None]
        places = [level.get(view.key) for level in levels]
        placed += places
        fig.add_scatter(
            x=view.axis.at(places), y=[level[field] for level in levels], name=esc(one["name"]), mode="lines+markers"
        )
        at_knee = [level for level in levels if one["knee"] is not None and level.get(view.key) == one["knee"]]
        if at_knee:
            fig.add_scatter(
                x=[view.axis.at(one["knee"])],
                y=[at_knee[0][field]],
                mode="markers",
                marker=dict(symbol="x", size=12, color=KNEE_COLOUR),
                name=f"{esc(one['name'])} knee",
                showlegend=False,
                hovertext=esc(one["broke"]),
            )
    if placed:
        view.axis.draw(fig, placed)
    if sliced["knee"] is not None:
        fig.add_vline(
            x=view.axis.at(sliced["knee"]), line=dict(color=KNEE_COLOUR, dash="dot"), annotation_text="pooled knee"
        )
    fig.update_layout(
        title=f"{'TTFA p95' if view.streamed else 'wait p95'} by {what} (ms; x: where the {what} breaks)",
        height=320,
        margin=dict(t=40, b=40, l=60, r=20),
    )
    return fig


def _speech_cell(heard: SliceSpeech | None) -> str:
    if not heard:
        return "-"
    metric = heard["metric"]
    error_mean = heard["wer_mean"] if metric == "wer" else heard["cer_mean"] if metric == "cer" else None
    said = [f"{metric.upper()} {pct(error_mean)}"]
    if heard.get("similarity_mean") is not None:
        said.append(f"sim {heard['similarity_mean']:.2f}")
    if heard.get("mos_mean") is not None:
        said.append(f"MOS {heard['mos_mean']:.2f}")
    return ", ".join(said)


def table(view: RunView, key: Kind, what: str) -> str:
    """One row per slice and level: requests, failures, p50 and p95, TTFA p95 and underruns
    (streamed), what the judge heard; the knee's row marked."""
    sliced = view.summary["slices"]
    assert sliced is not None, "drawn for a run with slices"
    judged = any(level.get("speech") for one in sliced[key] for level in one["levels"])
    head = [what, view.axis.title, "requests", "failed", "p50 ms", "p95 ms"]
    head += ["TTFA p95 ms", "underruns %"] if view.streamed else []
    head += ["heard"] if judged else []
    rows = []
    for one in sliced[key]:
        for level in one["levels"]:
            cells = [one["name"], fmt(level.get(view.key), "{:g}"), str(level["requests"]), str(level["failed"])]
            cells += [fmt(level["p50_ms"]), fmt(level["p95_ms"])]
            if view.streamed:
                underrun = level["underrun_rate"]
                cells += [fmt(level["ttfa_p95_ms"]), fmt(None if underrun is None else 100 * underrun)]
            if judged:
                cells.append(_speech_cell(level.get("speech")))
            knee = one["knee"] is not None and level.get(view.key) == one["knee"]
            rows.append(
                f"<tr class='{'knee' if knee else ''}'>"
                + "".join(
                    f"<td class='{'l' if column == 0 else ''}'>{esc(cell)}</td>" for column, cell in enumerate(cells)
                )
                + "</tr>"
            )
    header = "".join(f"<th class='{'l' if column == 0 else ''}'>{esc(name)}</th>" for column, name in enumerate(head))
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def verdicts(summary: Summary, key: Kind) -> str:
    """Each slice's knee in words."""
    axis = summary["slices"]["axis"]
    unit = {"rate": " req/s", "voices": " voices"}.get(axis, "")
    said = []
    for one in summary["slices"][key]:
        if not one["judged"]:
            said.append(f"{one['name']}: too few requests at a level to judge")
        elif one["knee"] is None:
            said.append(f"{one['name']}: no knee up to {fmt(one['held_to'], '{:g}')}{unit}")
        else:
            said.append(f"{one['name']}: breaks at {one['knee']:g}{unit} ({one['broke']}; {', '.join(one['rules'])})")
    return "; ".join(said)


RULE = (
    "A slice is the requests whose records name one language (voice). Each is judged by the rules of the pooled "
    f"knee, on the same axis, over its own requests; a slice with fewer than {MIN_REQUESTS} requests at a level "
    "is not judged."
)


def slices_html(view: RunView, render: Renderer) -> str:
    """The section ("" where the run has no slices)."""
    sliced = view.summary.get("slices")
    if not sliced:
        return ""
    parts = [f"<h2>Slices</h2><p class='meta'>{esc(RULE)}</p>"]
    if sliced.get("note"):
        parts.append(f"<div class='warn'>{esc(sliced['note'])}</div>")
    for key, what in _KINDS:
        if sliced.get(key):
            parts.append(
                f"<h3>By {what}</h3><p class='meta'>{esc(verdicts(view.summary, key))}</p>"
                f"{render(slice_figure(view, key, what))}{table(view, key, what)}"
            )
    return "".join(parts)


def slice_lines(summary: Summary) -> list[str]:
    """The terminal's lines: each kind's slices and their knees ([] where the run has none)."""
    sliced = summary.get("slices")
    return [f"slices by {what}: {verdicts(summary, key)}" for key, what in _KINDS if sliced and sliced.get(key)]
