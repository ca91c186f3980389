"""The report's slices: each language's (voice's) p95 along the run's axis, its knee, and a table
of its figures per level, where the run's requests mix them (``summary.slices``,
:mod:`analysis.slices`). Manual: docs/results.md."""

from __future__ import annotations

from typing import Literal

import plotly.graph_objects as go

from tts_knee.analysis.slices import MIN_REQUESTS
from tts_knee.analysis.speech import pct
from tts_knee.runformat.summary import SliceLevel, SliceSpeech, Summary

from .kit import KNEE_COLOUR, conc_axis, esc, fig_html, fmt, lx, step_axis

#: The slices by what the records name: ``slices``'s lists
Kind = Literal["by_language", "by_voice"]
_KINDS: tuple[tuple[Kind, str], ...] = (("by_language", "language"), ("by_voice", "voice"))


def _x(level: SliceLevel, axis: str) -> float | None:
    """A level's place on the axis (its concurrency, offered rate or number of voices)."""
    if axis == "concurrency":
        return level["concurrency"]
    return level.get("rate") if axis == "rate" else level.get("voices") if axis == "voices" else None


def _streamed(summary: Summary) -> bool:
    return bool(summary["knee"].get("streamed"))


def figure(summary: Summary, key: Kind, what: str) -> go.Figure:
    """Each slice's p95 (TTFA p95 in a streamed run) along the axis, its knee marked."""
    sliced, axis = summary["slices"], summary["slices"]["axis"]
    field: Literal["ttfa_p95_ms", "p95_ms"] = "ttfa_p95_ms" if _streamed(summary) else "p95_ms"
    label = "TTFA p95" if _streamed(summary) else "wait p95"
    fig = go.Figure()
    points = []
    for sl in sliced[key]:
        levels = [lv for lv in sl["levels"] if _x(lv, axis) is not None]
        points += [{"concurrency": _x(lv, axis)} for lv in levels]
        fig.add_scatter(
            x=lx([_x(lv, axis) for lv in levels]),
            y=[lv[field] for lv in levels],
            name=esc(sl["name"]),
            mode="lines+markers",
        )
        at = [lv for lv in levels if sl["knee"] is not None and _x(lv, axis) == sl["knee"]]
        if at:
            fig.add_scatter(
                x=[lx(sl["knee"])],
                y=[at[0][field]],
                mode="markers",
                marker=dict(symbol="x", size=12, color=KNEE_COLOUR),
                name=f"{esc(sl['name'])} knee",
                showlegend=False,
                hovertext=esc(sl["broke"]),
            )
    if points:
        conc_axis(fig, points, step_axis(summary))
    if sliced["knee"] is not None:
        fig.add_vline(x=lx(sliced["knee"]), line=dict(color=KNEE_COLOUR, dash="dot"), annotation_text="pooled knee")
    fig.update_layout(
        title=f"{label} by {what} (ms; x: where the {what} breaks)",
        height=320,
        margin=dict(t=40, b=40, l=60, r=20),
    )
    return fig


def _speech_cell(sp: SliceSpeech | None) -> str:
    if not sp:
        return "-"
    metric = sp["metric"]
    error_mean = sp["wer_mean"] if metric == "wer" else sp["cer_mean"] if metric == "cer" else None
    said = [f"{metric.upper()} {pct(error_mean)}"]
    if sp.get("similarity_mean") is not None:
        said.append(f"sim {sp['similarity_mean']:.2f}")
    if sp.get("mos_mean") is not None:
        said.append(f"MOS {sp['mos_mean']:.2f}")
    return ", ".join(said)


def table(summary: Summary, key: Kind, what: str) -> str:
    """One row per slice and level: requests, failures, p50 and p95, TTFA p95 and underruns
    (streamed), what the judge heard; the knee's row marked."""
    axis, streamed = summary["slices"]["axis"], _streamed(summary)
    judged = any(lv.get("speech") for sl in summary["slices"][key] for lv in sl["levels"])
    head = [what, step_axis(summary), "requests", "failed", "p50 ms", "p95 ms"]
    head += ["TTFA p95 ms", "underruns %"] if streamed else []
    head += ["heard"] if judged else []
    rows = []
    for sl in summary["slices"][key]:
        for lv in sl["levels"]:
            cells = [sl["name"], fmt(_x(lv, axis), "{:g}"), str(lv["requests"]), str(lv["failed"])]
            cells += [fmt(lv["p50_ms"]), fmt(lv["p95_ms"])]
            if streamed:
                cells += [
                    fmt(lv["ttfa_p95_ms"]),
                    fmt(None if (underrun := lv["underrun_rate"]) is None else 100 * underrun),
                ]
            if judged:
                cells.append(_speech_cell(lv.get("speech")))
            knee = sl["knee"] is not None and _x(lv, axis) == sl["knee"]
            rows.append(
                f"<tr class='{'knee' if knee else ''}'>"
                + "".join(f"<td class='{'l' if i == 0 else ''}'>{esc(c)}</td>" for i, c in enumerate(cells))
                + "</tr>"
            )
    header = "".join(f"<th class='{'l' if i == 0 else ''}'>{esc(h)}</th>" for i, h in enumerate(head))
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def verdicts(summary: Summary, key: Kind) -> str:
    """Each slice's knee in words."""
    axis = summary["slices"]["axis"]
    unit = {"rate": " req/s", "voices": " voices"}.get(axis, "")
    said = []
    for sl in summary["slices"][key]:
        if not sl["judged"]:
            said.append(f"{sl['name']}: too few requests at a level to judge")
        elif sl["knee"] is None:
            said.append(f"{sl['name']}: no knee up to {fmt(sl['held_to'], '{:g}')}{unit}")
        else:
            said.append(f"{sl['name']}: breaks at {sl['knee']:g}{unit} ({sl['broke']}; {', '.join(sl['rules'])})")
    return "; ".join(said)


RULE = (
    "A slice is the requests whose records name one language (voice). Each is judged by the rules of the pooled "
    f"knee, on the same axis, over its own requests; a slice with fewer than {MIN_REQUESTS} requests at a level "
    "is not judged."
)


def slices_html(summary: Summary) -> str:
    """The section ("" where the run has no slices)."""
    sliced = summary.get("slices")
    if not sliced:
        return ""
    parts = [f"<h2>Slices</h2><p class='meta'>{esc(RULE)}</p>"]
    if sliced.get("note"):
        parts.append(f"<div class='warn'>{esc(sliced['note'])}</div>")
    for key, what in _KINDS:
        if sliced.get(key):
            parts.append(
                f"<h3>By {what}</h3><p class='meta'>{esc(verdicts(summary, key))}</p>"
                f"{fig_html(figure(summary, key, what), False)}{table(summary, key, what)}"
            )
    return "".join(parts)


def slice_lines(summary: Summary) -> list[str]:
    """The terminal's lines: each kind's slices and their knees ([] where the run has none)."""
    sliced = summary.get("slices")
    return [f"slices by {what}: {verdicts(summary, key)}" for key, what in _KINDS if sliced and sliced.get(key)]
