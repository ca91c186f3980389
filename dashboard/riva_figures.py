"""The report's Riva figures of a streamed run: per step, first audio and chunk latency and RTFX as
NVIDIA's ``riva_tts_perf_client`` prints them, so a team can set tts-knee's numbers beside the
perf client's."""

from __future__ import annotations

from tts_knee.runformat.summary import Summary

from .kit import esc
from .table import RIVA_COLUMNS, RIVA_NOTE, riva_rows


def riva_html(summary: Summary) -> str:
    """The section as rendered; "" for a run that was not streamed."""
    rows = riva_rows(summary)
    if not rows:
        return ""
    head = "".join(f"<th>{esc(c)}</th>" for c in RIVA_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (
        f"<h2>Riva's figures</h2><table><tr>{head}</tr>{body}</table>"
        f"<p class='meta'>{esc(RIVA_NOTE)} The perf client runs its streams back to back on one channel "
        f"at one --num_parallel_requests; each row here is one step's concurrency, its streams those that "
        f"ended within the step.</p>"
    )
