"""An open-loop step's arrivals: how long a step sends them (:func:`arrival_span_s`), and what
they became on one node: how many its schedule held, how many
were sent, dropped at ``--max-inflight``, and not sent with why, so that every arrival a step
planned (every row of a replayed trace) ends as a record or as a count that says why it has none.

The scheduler (:mod:`.openloop_user`) fills one :class:`StepArrivals` per step; a worker ships its
tallies with every record batch (running totals, so a batch sent twice counts nothing twice) and
ships at once when a step's schedule is settled. The master sums them per step into run.json's
``arrivals`` (:func:`step_entry`), and at a step's end waits until every worker has settled its
arrivals for it (``StepShape._await_arrivals``): a worker that started late, or a conversation
whose turn waits for the turn above to be answered, still sends what the step planned.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tts_knee.runformat.schema import WORKER_LOST, Arrivals

if TYPE_CHECKING:
    from .settings import Settings


@dataclass
class StepArrivals:
    """One step's arrivals on one node (or, summed, on the run's). ``planned``: what the
    schedule holds (a trace's rows due within the step's span; the arrivals of ``--rates`` as
    each comes due, and those left when the step ends); ``open``: the node's scheduler and
    conversations still laying out arrivals (0 with ``done``: nothing more will be sent)."""

    planned: int = 0
    sent: int = 0
    dropped: int = 0
    not_sent: Counter[str] = field(default_factory=Counter)
    open: int = 0
    done: bool = False

    def enter(self) -> None:
        """A scheduler or a conversation starts laying out this step's arrivals."""
        self.open += 1

    def leave(self) -> bool:
        """One of them is over; True when that settles the step's arrivals on this node."""
        self.open -= 1
        if self.open == 0 and not self.done:
            self.done = True
            return True
        return False

    @property
    def unsent(self) -> int:
        """Planned arrivals neither sent nor dropped."""
        return self.planned - self.sent - self.dropped

    def wire(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "sent": self.sent,
            "dropped": self.dropped,
            "not_sent": dict(self.not_sent),
            "done": self.done,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> StepArrivals:
        return cls(
            int(data["planned"]),
            int(data["sent"]),
            int(data["dropped"]),
            Counter({str(reason): int(count) for reason, count in (data.get("not_sent") or {}).items()}),
            done=bool(data.get("done")),
        )

    def add(self, other: StepArrivals) -> None:
        self.planned += other.planned
        self.sent += other.sent
        self.dropped += other.dropped
        self.not_sent.update(other.not_sent)


def arrival_span_s(settings: Settings, rate: float, settle_s: float, hold_s: float | None = None) -> float:
    """How long a step at ``rate`` (req/s, the whole run's) sends arrivals, from its start:
    ``--step-time``, or with ``--step-requests N`` its settle window and N arrivals (at most
    ``--step-time``); a soak (``hold_s``) its own length. In open loop a step's requests are what
    it offers: one that went on sending until N had finished would offer more the slower the
    server, and hand its queue to the next."""
    if hold_s is not None:
        return hold_s
    if settings.trace is not None:  # the trace from its start for --step-time, or the whole of it
        return settings.trace.span_s(rate / settings.trace.base_rps, settings.step_time)
    if settings.step_requests:
        return min(settings.step_time, settle_s + settings.step_requests / rate)
    return settings.step_time


def step_entry(total: StepArrivals, planned: int | None = None) -> Arrivals:
    """run.json's ``arrivals`` of a step from the nodes' summed tallies; ``planned`` (a trace's
    rows due within the step, as the master counts them) makes the rows no node accounted for
    (its worker went away) count as not sent."""
    not_sent = Counter(total.not_sent)
    planned_all = total.planned if planned is None else max(planned, total.planned)
    unaccounted = planned_all - total.sent - total.dropped - sum(not_sent.values())
    if unaccounted > 0:
        not_sent[WORKER_LOST] += unaccounted
    return {
        "planned": planned_all,
        "sent": total.sent,
        "dropped": total.dropped,
        "not_sent": dict(sorted(not_sent.items())),
    }
