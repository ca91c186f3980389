"""What runs after the sweep tried on the server, in the terminal and the report: the hostile-text
probe (``--probe-texts``: per class, what the server did at each probe level; ``summary["probe"]``,
from :mod:`analysis.probe`) and the spike (``--spike``: ``summary["spike"]``, from
:mod:`analysis.spike`)."""

from __future__ import annotations

from collections.abc import Mapping

from tts_knee.runformat.summary import Outcome, Probe, ProbeLevel, SpikeBehaviour as Behaviour, Summary

from .kit import esc, fmt
from .view import RunView

_OUTCOMES = tuple(Outcome)


def probe_headline(probe: Probe) -> str:
    levels = " and ".join(map(str, probe["levels"]))
    guard = probe["needs_guarding"]
    return f"hostile texts (probe at concurrency {levels}): " + (
        f"guard {', '.join(guard)}" if guard else "every class answered as a service should"
    )


def _level_counts(level: ProbeLevel) -> str:
    """A probe level's outcomes in words (those with requests)."""
    counts: Mapping[str, object] = level
    named = (f"{counts[outcome]} {outcome.replace('_', ' ')}" for outcome in _OUTCOMES if counts[outcome])
    return f"{level['concurrency']}: " + ", ".join(named)


def probe_lines(summary: Summary) -> list[str]:
    """The probe's headline and one line per class (none without a probe)."""
    probe = summary.get("probe")
    if not probe:
        return []
    width = max((len(kind["class"]) for kind in probe["classes"]), default=0)
    return [probe_headline(probe) + ":"] + [
        f"  {'!' if kind['needs_guarding'] else ' '} {kind['class']:<{width}}  {kind['verdict']}"
        for kind in probe["classes"]
    ]


def probe_html(view: RunView) -> str:
    """The report's section (empty without a probe)."""
    probe = view.summary.get("probe")
    if not probe:
        return ""
    head = "".join(f"<th>{esc(outcome.replace('_', ' '))}</th>" for outcome in _OUTCOMES)
    rows = []
    for kind in probe["classes"]:
        levels = "<br>".join(_level_counts(level) for level in kind["by_concurrency"])
        outcomes: Mapping[str, object] = kind["outcomes"]
        statuses = ", ".join(f"{status} x{count}" for status, count in kind["statuses"].items())
        rows.append(
            f"<tr{' class=knee' if kind['needs_guarding'] else ''}><td class='l'>{esc(kind['class'])}</td>"
            f"<td class='l'>{esc(kind['what'])}</td><td>{kind['requests']}</td>"
            + "".join(f"<td>{outcomes[outcome] or ''}</td>" for outcome in _OUTCOMES)
            + f"<td class='l'>{esc(statuses)}</td>"
            f"<td>{fmt(kind['ms_p50'])}</td><td>{fmt(kind['ms_max'])}</td><td>{fmt(kind['audio_s_p50'], '{:.2f}')}</td>"
            f"<td class='l'>{levels}</td><td class='l'>{esc(kind['verdict'])}</td>"
            f"<td class='l'>{esc(kind['error'] or '')}</td></tr>"
        )
    note = probe["note"] or "Every class was answered with audio or refused with a 4xx: nothing to guard."
    return (
        f"<h2>Hostile texts</h2><div class='verdict{'' if probe['needs_guarding'] else ' ok'}'>"
        f"<div class='meta'>{esc(probe_headline(probe))}</div><div class='kind'>{esc(note)}</div></div>"
        f"<table><tr><th class='l'>class</th><th class='l'>what</th><th>requests</th>{head}"
        f"<th class='l'>statuses</th><th>p50 ms</th><th>max ms</th><th>audio p50 s</th>"
        f"<th class='l'>per concurrency</th><th class='l'>what the server did</th><th class='l'>first error</th></tr>"
        f"{''.join(rows)}</table><p class='meta'>Each request by its final attempt, retries included; left out of "
        f"the sweep's figures. Highlighted: a server error, a timeout, silence, another failure or audio of the "
        f"wrong length.</p>"
    )


def spike_html(view: RunView) -> str:
    """The report's spike section (empty without a spike): the verdict and each phase's figures."""
    spike = view.summary.get("spike")
    if not spike:
        return ""
    behaved = spike["behaviour"] in (Behaviour.SHEDS, Behaviour.ABSORBS, Behaviour.QUEUES)
    held = behaved and spike["recovery_s"] is not None
    rows = []
    phases = (("spike", spike["spike_level"], spike["during"]), ("recovery", spike["level"], spike["after"]))
    for name, level, part in phases:
        if part:
            rows.append(
                f"<tr><td class='l'>{name}</td><td>{level}</td><td>{part['attempts']}</td><td>{part['ok']}</td>"
                f"<td>{part['shed']}</td><td>{part['failed']}</td><td>{fmt(part['shed_ms_p50'])}</td>"
                f"<td>{fmt(part['p95_ms'])}</td><td>{fmt(part['p95_x'], '{:.2f}')}</td></tr>"
            )
    return (
        f"<h2>Spike and recovery</h2><div class='verdict{' ok' if held else ''}'><div class='kind'>"
        f"{esc(spike['text'])}</div></div><table><tr><th class='l'>phase</th><th>users</th><th>attempts</th>"
        f"<th>ok</th><th>shed (429/503)</th><th>failed</th><th>shed p50 ms</th><th>p95 ms</th>"
        f"<th>p95 / before</th></tr>{''.join(rows)}</table><p class='meta'>p95 before the spike: "
        f"{fmt(spike['before_p95_ms'])} ms ({esc(spike['basis'])}); recovery: from the recovery step's start until "
        f"every 1 s window of requests sent has its p95 within 1.2x of that, with no failure.</p>"
    )
