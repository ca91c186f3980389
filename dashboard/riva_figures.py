"""The report's Riva figures of a streamed run: per step, first audio and chunk latency and RTFX as
NVIDIA's ``riva_tts_perf_client`` prints them, so a team can set tts-knee's numbers beside the
perf client's."""

from __future__ import annotations

from .kit import esc
from .table import RIVA_COLUMNS, RIVA_NOTE, riva_rows
from .view import RunView


def riva_html(view: RunView) -> str:
    """The section as rendered; "" for a run that was not streamed."""
    rows = riva_rows(view)
    if not rows:
        return ""
    head = "".join(f"<th>{esc(column)}</th>" for column in RIVA_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f"<h2>Riva's figures</h2><table><tr>{head}</tr>{body}</table>"
        f"<p class='meta'>{esc(RIVA_NOTE)} The perf client runs its streams back to back on one channel "
        f"at one --num_parallel_requests; each row here is one step's concurrency, its streams those that "
        f"ended within the step.</p>"
    )
