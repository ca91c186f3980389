"""The report's listening section: what the ASR judge heard (``--asr-model``) beside the
latency, per step, the worst clips as text to read (with a player for each clip: the report sits
in the run directory beside ``speech/``, and the live view serves it), and the signal checks
(leading silence, audible TTFA, silent, runaway, truncated and clipped answers)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tts_knee.analysis.speech import MIN_MOS_DROP, MIN_RISE, MIN_SIMILARITY_DROP, pct
from tts_knee.audio.asr import UNINTELLIGIBLE
from tts_knee.runformat.summary import ListenDrop, SpeechRise, SpeechStep, StepSummary, Summary

from .kit import esc, fmt, is_streamed, number, stat
from .table import speech_metric


def _judged_steps(summary: Summary) -> list[StepSummary]:
    return [s for s in summary["steps"] if s.get("requests") and (sp := s.get("speech")) and sp.get("judged")]


def _speech(step: StepSummary) -> SpeechStep:
    """What the judge heard of a step this section shows (one it judged)."""
    speech = step.get("speech")
    assert speech is not None, "the steps shown here are those the judge heard"
    return speech


def speech_figure(summary: Summary) -> go.Figure | None:
    """Error rate (mean and p95) per step against the step's p95 latency (TTFA in a streamed
    run); None where no step was judged."""
    metric = speech_metric(summary)
    steps = _judged_steps(summary)
    if metric is None or not steps:
        return None
    name = metric.upper()
    labels = [str(s["concurrency"]) for s in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for q, dash in (("mean", "solid"), ("p95", "dot")):
        fig.add_scatter(
            x=labels,
            y=[100 * (number(_speech(s), f"{metric}_{q}") or 0) for s in steps],
            name=f"{name} {q} (%)",
            mode="lines+markers",
            line=dict(color="#9467bd", dash=dash),
        )
    key, what = ("ttfa_ms", "TTFA p95 (ms)") if is_streamed(summary) else ("latency_ms", "p95 wait (ms)")
    fig.add_scatter(
        x=labels,
        y=[stat(s, key, "p95") for s in steps],
        name=what,
        mode="lines+markers",
        line=dict(color="#1f77b4"),
        secondary_y=True,
    )
    at = summary["knee"]["methods"].get("speech")
    if at is not None and str(at) in labels:  # the speech knee
        fig.add_vline(x=labels.index(str(at)), line=dict(color="#9467bd", dash="dash"))
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(title_text=f"{name} (%)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text=what, rangemode="tozero", secondary_y=True)
    fig.update_layout(height=340, margin=dict(t=30, b=40, l=60, r=60), legend=dict(orientation="h", y=1.12))
    return fig


def speech_html(summary: Summary, figure_html: str) -> str:
    """The section (empty when the run was not judged and no signal check found anything)."""
    metric = speech_metric(summary)
    judge = summary.get("judge")
    parts = [f"<p class='meta'>{esc(judge['text'][0].upper() + judge['text'][1:])}.</p>"] if judge else []
    if metric:
        steps = _judged_steps(summary)
        name = metric.upper()
        rule = (
            f"{name}: the {'word' if metric == 'wer' else 'character'} error rate of each judged clip's "
            f"transcript against the text sent, both normalised as Whisper's evaluations do (case, "
            f"punctuation and spelled numbers do not count); unintelligible: above {UNINTELLIGIBLE:.0%}. "
            f"The speech knee is the first step whose clips, paired by text with the lowest step's, are "
            f"worse by more than {MIN_RISE:.0%} at the low end of a 95 % bootstrap interval."
        )
        rows = []
        rises = summary["knee"].get("speech_rise") or []
        levels = {
            lv["concurrency"]: (lv, rises[i] if i < len(rises) else None)
            for i, lv in enumerate(lv for lv in summary.get("levels") or [] if lv.get("requests"))
        }
        for s in steps:
            sp = _speech(s)
            rise = (levels.get(s["concurrency"]) or (None, None))[1]
            rows.append(
                f"<tr><td>{esc(s['concurrency'])}</td><td>{sp['judged']}</td><td>{sp['not_judged']}</td>"
                f"<td>{esc(pct(number(sp, metric + '_mean')))}</td><td>{esc(pct(number(sp, metric + '_p95')))}</td>"
                f"<td>{sp['unintelligible']}</td><td>{esc(_rise_text(rise))}</td></tr>"
            )
        parts.append(
            f"<p class='meta'>{esc(rule)}</p>{figure_html}"
            f"<table><tr><th>concurrency</th><th>judged</th><th>not judged</th><th>{name} mean</th>"
            f"<th>{name} p95</th><th>unintelligible</th><th class='l'>rise over the lowest (95 % interval)"
            f"</th></tr>{''.join(rows)}</table>"
        )
        parts.append(_behind(summary))
        worst = [(s, w) for s in steps for w in _speech(s).get("worst") or [] if w["error"] > 0]
        worst.sort(key=lambda p: -p[1]["error"])
        if worst:
            cells = "".join(
                f"<tr><td>{esc(s['concurrency'])}</td><td>{esc(pct(w['error']))}</td><td class='l'>{esc(w.get('text'))}"
                f"</td><td class='l'>{esc(w.get('transcript'))}</td><td>"
                + (f"<audio controls preload='none' src='{esc(w['clip'])}'></audio>" if w.get("clip") else "")
                + "</td></tr>"
                for s, w in worst[:8]
            )
            parts.append(
                f"<h3>The worst clips</h3><table><tr><th>concurrency</th><th>{name}</th><th class='l'>sent"
                f"</th><th class='l'>heard</th><th>clip</th></tr>{cells}</table>"
            )
        parts.append(_listen_html(summary, steps))
    signal = _signal_rows(summary)
    if signal:
        parts.append(signal)
    if not parts:
        return ""
    return "<h2>What the listener hears</h2>" + "".join(parts)


def _behind(summary: Summary) -> str:
    """A line saying how fast the judge went, where it fell behind (clips left unjudged for want
    of time); empty where it kept up."""
    heard = [(s, speech) for s in summary["steps"] if (speech := s.get("speech"))]
    behind = sum(sp.get("behind") or 0 for _, sp in heard)
    if not behind:
        return ""
    judged = sum(sp["judged"] for _, sp in heard)
    offered = judged + sum(sp["not_judged"] for _, sp in heard)
    cpu_s = sum(sp.get("judge_cpu_s") or 0.0 for _, sp in heard)
    step_s = sum(s["window"].get("duration_s") or 0.0 for s, _ in heard)
    rate = f"{judged / cpu_s:.2f} clips per CPU-second ({judged} clips in {cpu_s:.1f} CPU-s)" if cpu_s else "-"
    offer = f", against {offered / step_s:.2f} clips per second offered ({offered} in {step_s:.0f} s of steps)"
    return (
        f"<p class='meta'>The judge fell behind: {behind} of {offered} clips were not judged for want of time. "
        f"It judged {esc(rate)}{esc(offer) if step_s else ''}. Fewer clips a step (--asr-sample), longer steps or "
        f"more judge threads (--asr-threads) let it keep up.</p>"
    )


def _rise_text(rise: SpeechRise | None) -> str:
    if not rise:
        return "-"
    lo, hi = rise["ci"]
    return f"{pct(rise['mean'])} ({pct(lo)} to {pct(hi)}, {rise['pairs']} texts)"


def _signal_rows(summary: Summary) -> str:
    steps = [s for s in summary["steps"] if s.get("requests")]
    if not any(s.get("leading_silence_ms") or s.get("silent_rate") for s in steps):
        return ""
    rows = "".join(
        f"<tr><td>{esc(s['concurrency'])}</td><td>{fmt(stat(s, 'ttfa_ms', 'p50'))}</td>"
        f"<td>{fmt(stat(s, 'ttfa_audible_ms', 'p50'))}</td><td>{fmt(stat(s, 'ttfa_audible_ms', 'p95'))}</td>"
        f"<td>{fmt(stat(s, 'leading_silence_ms', 'p50'))}</td><td>{fmt(stat(s, 'leading_silence_ms', 'p95'))}</td>"
        f"<td>{fmt(stat(s, 'trailing_silence_ms', 'p95'))}</td>"
        + "".join(
            f"<td>{esc(pct(rate) if (rate := number(s, k)) is not None else '-')}</td>"
            for k in ("silent_rate", "runaway_rate", "truncated_rate", "clipped_rate")
        )
        + "</tr>"
        for s in steps
    )
    return (
        "<h3>The signal</h3><p class='meta'>Silence: 10 ms frames below -40 dBFS. Audible TTFA: when the "
        "playback model plays the first sound, so leading silence delays it even when the bytes came early. "
        "Runaway: at least twice the same text's length at the lowest step (a text heard once: audio per "
        "character over 5x the language's median); truncated: half of it or less (heard once: under a fifth); "
        "clipped: over 0.1 % of samples at full scale.</p>"
        "<table><tr><th>concurrency</th><th>TTFA p50</th><th>audible p50</th><th>audible p95</th>"
        "<th>leading silence p50</th><th>p95</th><th>trailing p95</th><th>silent</th><th>runaway</th>"
        f"<th>truncated</th><th>clipped</th></tr>{rows}</table>"
    )


def _drop_text(drop: ListenDrop | None) -> str:
    return "-" if not drop else f"{drop['mean']:.2f} ({drop['ci'][0]:.2f} to {drop['ci'][1]:.2f})"


def _listen_html(summary: Summary, steps: list[StepSummary]) -> str:
    """The voice and the sound: each step's speaker similarity and naturalness, their drops, the least alike clips."""
    if not any("similarity_mean" in _speech(s) for s in steps):
        return ""
    knee = summary["knee"]
    drops = {"similarity": knee.get("similarity_drop") or [], "mos": knee.get("mos_drop") or []}
    done = [lv for lv in summary.get("levels") or [] if lv.get("requests")]
    at = {lv["concurrency"]: i for i, lv in enumerate(done)}

    def drop(name: str, c: int) -> ListenDrop | None:
        i = at.get(c)
        return drops[name][i] if i is not None and i < len(drops[name]) else None

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = "".join(
        f"<tr><td>{esc(s['concurrency'])}</td><td>{num(sp.get('similarity_mean'))}</td>"
        f"<td>{num(sp.get('similarity_p5'))}</td><td>{esc(_drop_text(drop('similarity', s['concurrency'])))}</td>"
        f"<td>{num(sp.get('similarity_ref_mean'))}</td><td>{num(sp.get('mos_mean'))}</td><td>{num(sp.get('mos_p5'))}"
        f"</td><td>{num(sp.get('mos_sig_mean'))}</td><td>{num(sp.get('mos_bak_mean'))}</td>"
        f"<td>{esc(_drop_text(drop('mos', s['concurrency'])))}</td><td>{sp.get('not_listened') or 0}</td></tr>"
        for s in steps
        for sp in [_speech(s)]
    )
    rule = (
        f"Speaker similarity: the cosine of each clip's speaker embedding with the same text's at the lowest "
        f"step (1 there), and with the voice's reference audio where there is one. Naturalness: DNSMOS P.835 "
        f"OVRL (1-5), SIG the speech, BAK the background. A knee where the paired drop's 95 % interval "
        f"stays above {MIN_SIMILARITY_DROP:g} of similarity or {MIN_MOS_DROP:g} MOS."
    )
    least = sorted(
        ((s, w) for s in steps for w in _speech(s).get("worst_similarity") or []), key=lambda p: p[1]["similarity"]
    )
    clips = "".join(
        f"<tr><td>{esc(s['concurrency'])}</td><td>{w['similarity']:.2f}</td><td>{num(w.get('mos'))}</td>"
        f"<td class='l'>{esc(w.get('text'))}</td><td>"
        + (f"<audio controls preload='none' src='{esc(w['clip'])}'></audio>" if w.get("clip") else "")
        + "</td></tr>"
        for s, w in least[:8]
    )
    return (
        f"<h3>The voice and the sound</h3><p class='meta'>{esc(rule)}</p>"
        "<table><tr><th>concurrency</th><th>similarity mean</th><th>p5</th><th>drop (95 % interval)</th>"
        "<th>to reference</th><th>MOS mean</th><th>p5</th><th>SIG</th><th>BAK</th><th>drop (95 % interval)</th>"
        f"<th>not heard</th></tr>{rows}</table>"
        "<h3>The least alike clips</h3><table><tr><th>concurrency</th><th>similarity</th><th>MOS</th>"
        f"<th class='l'>sent</th><th>clip</th></tr>{clips}</table>"
    )
