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

from .kit import esc, fmt, number, stat
from .view import RunView, speech_metric


def _judged_steps(summary: Summary) -> list[StepSummary]:
    steps = summary["steps"]
    return [step for step in steps if step.get("requests") and (heard := step.get("speech")) and heard.get("judged")]


def _speech(step: StepSummary) -> SpeechStep:
    """What the judge heard of a step this section shows (one it judged)."""
    speech = step.get("speech")
    assert speech is not None, "the steps shown here are those the judge heard"
    return speech


def speech_figure(view: RunView) -> go.Figure | None:
    """Error rate (mean and p95) per step against the step's p95 latency (TTFA in a streamed
    run); None where no step was judged."""
    metric = view.speech_metric
    steps = _judged_steps(view.summary)
    if metric is None or not steps:
        return None
    name = metric.upper()
    labels = [str(step["concurrency"]) for step in steps]
    heard = [_speech(step) for step in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for figure, dash in (("mean", "solid"), ("p95", "dot")):
        fig.add_scatter(
            x=labels,
            y=[100 * (number(speech, f"{metric}_{figure}") or 0) for speech in heard],
            name=f"{name} {figure} (%)",
            mode="lines+markers",
            line=dict(color="#9467bd", dash=dash),
        )
    key, what = ("ttfa_ms", "TTFA p95 (ms)") if view.streamed else ("latency_ms", "p95 wait (ms)")
    fig.add_scatter(
        x=labels,
        y=[stat(step, key, "p95") for step in steps],
        name=what,
        mode="lines+markers",
        line=dict(color="#1f77b4"),
        secondary_y=True,
    )
    knee = view.summary["knee"]["methods"].get("speech")
    if knee is not None and str(knee) in labels:  # the speech knee
        fig.add_vline(x=labels.index(str(knee)), line=dict(color="#9467bd", dash="dash"))
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
            level["concurrency"]: (level, rises[index] if index < len(rises) else None)
            for index, level in enumerate(level for level in summary.get("levels") or [] if level.get("requests"))
        }
        for step in steps:
            heard = _speech(step)
            rise = (levels.get(step["concurrency"]) or (None, None))[1]
            rows.append(
                f"<tr><td>{esc(step['concurrency'])}</td><td>{heard['judged']}</td><td>{heard['not_judged']}</td>"
                f"<td>{esc(pct(number(heard, metric + '_mean')))}</td>"
                f"<td>{esc(pct(number(heard, metric + '_p95')))}</td>"
                f"<td>{heard['unintelligible']}</td><td>{esc(_rise_text(rise))}</td></tr>"
            )
        parts.append(
            f"<p class='meta'>{esc(rule)}</p>{figure_html}"
            f"<table><tr><th>concurrency</th><th>judged</th><th>not judged</th><th>{name} mean</th>"
            f"<th>{name} p95</th><th>unintelligible</th><th class='l'>rise over the lowest (95 % interval)"
            f"</th></tr>{''.join(rows)}</table>"
        )
        parts.append(_behind(summary))
        worst = [(step, clip) for step in steps for clip in _speech(step).get("worst") or [] if clip["error"] > 0]
        worst.sort(key=lambda pair: -pair[1]["error"])
        if worst:
            cells = "".join(
                f"<tr><td>{esc(step['concurrency'])}</td><td>{esc(pct(clip['error']))}</td>"
                f"<td class='l'>{esc(clip.get('text'))}</td><td class='l'>{esc(clip.get('transcript'))}</td><td>"
                + (f"<audio controls preload='none' src='{esc(clip['clip'])}'></audio>" if clip.get("clip") else "")
                + "</td></tr>"
                for step, clip in worst[:8]
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
    heard = [(step, speech) for step in summary["steps"] if (speech := step.get("speech"))]
    behind = sum(speech.get("behind") or 0 for _, speech in heard)
    if not behind:
        return ""
    judged = sum(speech["judged"] for _, speech in heard)
    offered = judged + sum(speech["not_judged"] for _, speech in heard)
    cpu_s = sum(speech.get("judge_cpu_s") or 0.0 for _, speech in heard)
    step_s = sum(step["window"].get("duration_s") or 0.0 for step, _ in heard)
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
    low, high = rise["ci"]
    return f"{pct(rise['mean'])} ({pct(low)} to {pct(high)}, {rise['pairs']} texts)"


def _signal_rows(summary: Summary) -> str:
    steps = [step for step in summary["steps"] if step.get("requests")]
    if not any(step.get("leading_silence_ms") or step.get("silent_rate") for step in steps):
        return ""
    rows = "".join(
        f"<tr><td>{esc(step['concurrency'])}</td><td>{fmt(stat(step, 'ttfa_ms', 'p50'))}</td>"
        f"<td>{fmt(stat(step, 'ttfa_audible_ms', 'p50'))}</td><td>{fmt(stat(step, 'ttfa_audible_ms', 'p95'))}</td>"
        f"<td>{fmt(stat(step, 'leading_silence_ms', 'p50'))}</td>"
        f"<td>{fmt(stat(step, 'leading_silence_ms', 'p95'))}</td>"
        f"<td>{fmt(stat(step, 'trailing_silence_ms', 'p95'))}</td>"
        + "".join(
            f"<td>{esc(pct(rate) if (rate := number(step, key)) is not None else '-')}</td>"
            for key in ("silent_rate", "runaway_rate", "truncated_rate", "clipped_rate")
        )
        + "</tr>"
        for step in steps
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
    done = [level for level in summary.get("levels") or [] if level.get("requests")]
    at = {level["concurrency"]: index for index, level in enumerate(done)}

    def drop(name: str, users: int) -> ListenDrop | None:
        index = at.get(users)
        return drops[name][index] if index is not None and index < len(drops[name]) else None

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = "".join(
        f"<tr><td>{esc(step['concurrency'])}</td><td>{num(heard.get('similarity_mean'))}</td>"
        f"<td>{num(heard.get('similarity_p5'))}</td><td>{esc(_drop_text(drop('similarity', step['concurrency'])))}</td>"
        f"<td>{num(heard.get('similarity_ref_mean'))}</td><td>{num(heard.get('mos_mean'))}</td><td>{num(heard.get('mos_p5'))}"
        f"</td><td>{num(heard.get('mos_sig_mean'))}</td><td>{num(heard.get('mos_bak_mean'))}</td>"
        f"<td>{esc(_drop_text(drop('mos', step['concurrency'])))}</td><td>{heard.get('not_listened') or 0}</td></tr>"
        for step in steps
        for heard in [_speech(step)]
    )
    rule = (
        f"Speaker similarity: the cosine of each clip's speaker embedding with the same text's at the lowest "
        f"step (1 there), and with the voice's reference audio where there is one. Naturalness: DNSMOS P.835 "
        f"OVRL (1-5), SIG the speech, BAK the background. A knee where the paired drop's 95 % interval "
        f"stays above {MIN_SIMILARITY_DROP:g} of similarity or {MIN_MOS_DROP:g} MOS."
    )
    least = sorted(
        ((step, clip) for step in steps for clip in _speech(step).get("worst_similarity") or []),
        key=lambda pair: pair[1]["similarity"],
    )
    clips = "".join(
        f"<tr><td>{esc(step['concurrency'])}</td><td>{clip['similarity']:.2f}</td><td>{num(clip.get('mos'))}</td>"
        f"<td class='l'>{esc(clip.get('text'))}</td><td>"
        + (f"<audio controls preload='none' src='{esc(clip['clip'])}'></audio>" if clip.get("clip") else "")
        + "</td></tr>"
        for step, clip in least[:8]
    )
    return (
        f"<h3>The voice and the sound</h3><p class='meta'>{esc(rule)}</p>"
        "<table><tr><th>concurrency</th><th>similarity mean</th><th>p5</th><th>drop (95 % interval)</th>"
        "<th>to reference</th><th>MOS mean</th><th>p5</th><th>SIG</th><th>BAK</th><th>drop (95 % interval)</th>"
        f"<th>not heard</th></tr>{rows}</table>"
        "<h3>The least alike clips</h3><table><tr><th>concurrency</th><th>similarity</th><th>MOS</th>"
        f"<th class='l'>sent</th><th>clip</th></tr>{clips}</table>"
    )
