"""Listening to the audio: how a transcript is scored against the text that was sent, and which
recogniser model judges (``--asr-model``).

**Normalisation.** Both the text sent and the transcript go through the normaliser of OpenAI's
Whisper (the ``whisper-normalizer`` package, the one TTS evaluations use): for English its
``EnglishTextNormalizer`` (lower case, punctuation dropped, spelled numbers and digits both as
digits, "Dr." and "doctor" alike, British and American spellings alike), for other languages its
``BasicTextNormalizer`` (lower case, punctuation and symbols dropped). So "7" and "seven", a
comma or a capital never count as errors.

**The error rate.** ``wer``: word error rate (edits over the reference's words, ``jiwer``);
``cer``: character error rate over the normalised text without spaces, for languages written
without spaces between words (:data:`CER_LANGUAGES`) or where ``--asr-metric cer`` says so. A
rate can exceed 1 (a transcript of more words than were sent); an empty reference scores 0 for
an empty transcript and 1 otherwise.

**The model.** faster-whisper (CTranslate2) is an optional extra (``pip install
'tts-knee[asr]'``); :func:`check_model` tells before the run, in one sentence, what is wrong
with ``--asr-model``; the judge process (:mod:`audio.judge`) loads it.

**Several clips to a window.** Whisper reads 30-second windows, whatever the clip's length: a
0.7 s clip costs as much encoding as 30 s of audio. So :func:`transcribe` packs the clips the
judge has waiting (of one language) into one window, :data:`GAP_S` of silence between them, up to
:data:`WINDOW_S` of audio, and gives each clip back the words whose middle falls in it (word
timestamps; a word in a gap goes to the nearer clip). A clip alone, or one too long to share, is
transcribed alone as before. On piper's short clips (about a second each) eight to a window cost
a fifth of the CPU of eight alone, with the same transcripts (``bench/listening_cost.py``). Each
clip is told the window it shared (:attr:`Heard.window`), so that a run judged again afterwards
(``tts-knee judge``) can hear it beside the same neighbours.

**The same audio, the same words.** Decoding is greedy at temperature 0 with no fallback:
faster-whisper's default retries a window whose transcript repeats itself or reads unlikely at
rising temperatures, sampling at random, so the same clip could come back with other words from
one run to the next. Without it a clip's transcript is a function of its window's audio.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # loaded when a model is asked for (faster-whisper has no types: Any)
    from faster_whisper import WhisperModel

#: Languages written without spaces between words: judged by character error rate.
CER_LANGUAGES = frozenset(("zh", "ja", "ko", "th", "lo", "km", "my", "yue", "bo"))
#: A clip judged with an error rate over this is unintelligible.
UNINTELLIGIBLE = 0.5
EXTRA = "pip install 'tts-knee[asr]'"
#: Whisper's sample rate: the clips as :func:`transcribe` takes them (faster-whisper's decode_audio).
SAMPLE_RATE = 16000
#: Silence between two clips that share a window, seconds.
GAP_S = 1.0
#: Audio one shared window holds at most, seconds (clips and gaps; Whisper's window is 30 s, but
#: its word timestamps drift early towards a full window's end, by half a second near 28 s: one
#: word landed in the clip before, where at 20 s none did).
WINDOW_S = 20.0


class AsrError(ValueError):
    """What is wrong with the judge's set-up, in one sentence naming the option."""


def base_language(language: str | None) -> str | None:
    """``en`` of ``en-US``, ``zh`` of ``zh_CN``; None for none."""
    if not language:
        return None
    return language.replace("_", "-").split("-")[0].lower() or None


def metric_for(language: str | None, forced: str = "") -> str:
    """``wer`` or ``cer`` for a language (``forced``: ``--asr-metric``)."""
    if forced:
        return forced
    return "cer" if base_language(language) in CER_LANGUAGES else "wer"


@functools.lru_cache(maxsize=2)
def _normalizer(english: bool) -> Callable[[str], str]:
    if english:
        from whisper_normalizer.english import EnglishTextNormalizer

        english_normalizer: Callable[[str], str] = EnglishTextNormalizer()
        return english_normalizer
    from whisper_normalizer.basic import BasicTextNormalizer

    basic_normalizer: Callable[[str], str] = BasicTextNormalizer()
    return basic_normalizer


def normalize(text: str, language: str | None) -> str:
    """``text`` as it is scored (see the module doc), words separated by one space."""
    english = base_language(language) in (None, "en")
    return " ".join(_normalizer(english)(text or "").split())


def error_rate(reference: str, transcript: str, language: str | None, metric: str) -> float:
    """The word (``wer``) or character (``cer``) error rate of ``transcript`` against
    ``reference``, both normalised for ``language``."""
    import jiwer

    ref, hyp = normalize(reference, language), normalize(transcript, language)
    if metric == "cer":
        ref, hyp = ref.replace(" ", ""), hyp.replace(" ", "")
    if not ref:
        return 0.0 if not hyp else 1.0
    if metric == "cer":
        return float(jiwer.cer(ref, hyp))
    return float(jiwer.wer(ref, hyp))


def check_model(spec: str, language: str = "", metric: str = "") -> None:
    """Raise :class:`AsrError` where ``--asr-model spec`` (with ``--asr-language``) cannot judge:
    the extra not installed, a directory that is missing or not a faster-whisper model, a name
    faster-whisper does not know, a language that is no language code. Cheap: the model itself is
    loaded by the judge process, which reports a model that will not load, or a language it does
    not know (:func:`check_language`), before the run's first step."""
    missing = [
        module
        for module in ("faster_whisper", "jiwer", "whisper_normalizer")
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise AsrError(f"--asr-model needs {', '.join(missing)}, not installed here: {EXTRA}")
    if metric and metric not in ("wer", "cer"):
        raise AsrError(f"--asr-metric must be wer or cer, got {metric!r}")
    lang = base_language(language)
    if language and not (lang and lang.isalpha() and 2 <= len(lang) <= 3):
        raise AsrError(f"--asr-language {language!r} is not a language code (en, zh, de ...)")
    path = Path(spec).expanduser()
    if path.is_dir():
        missing = [file_name for file_name in ("model.bin", "config.json") if not (path / file_name).is_file()]
        if missing:
            raise AsrError(
                f"--asr-model {spec}: the directory is not a faster-whisper (CTranslate2) model: "
                f"it has no {' or '.join(missing)}"
            )
        return
    if path.exists():
        raise AsrError(
            f"--asr-model {spec} is a file; give the model's directory (model.bin, config.json, "
            f"tokenizer.json) or a model name"
        )
    from faster_whisper.utils import available_models

    if "/" in spec or spec.startswith("."):
        if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
            return  # a Hugging Face repository id, fetched by the judge
        raise AsrError(f"--asr-model {spec}: no such directory")
    if spec not in available_models():
        raise AsrError(
            f"--asr-model {spec!r} is neither a directory nor a model name faster-whisper knows "
            f"({', '.join(available_models())})"
        )


def check_language(model: WhisperModel, language: str) -> None:
    """Raise :class:`AsrError` when the loaded ``model`` does not know ``--asr-language``."""
    lang = base_language(language)
    known = tuple(getattr(model, "supported_languages", ()) or ())
    if lang and known and lang not in known:
        raise AsrError(
            f"--asr-language {language!r} is not a language the recogniser knows "
            f"(it knows {', '.join(known[:12])} ... {len(known)} in all)"
        )


#: Where the recogniser runs (``--asr-device``): the CPU, a GPU through CTranslate2's CUDA build,
#: or a GPU where CTranslate2 sees one.
DEVICES = ("cpu", "cuda", "auto")
#: CTranslate2's compute type on each device: int8 weights on the CPU, half precision on a GPU
#: (faster-whisper's own choice for each).
COMPUTE_TYPES = {"cpu": "int8", "cuda": "float16"}


def device_of(device: str) -> str:
    """``cpu`` or ``cuda``: ``auto`` is cuda where CTranslate2 sees a GPU."""
    if device != "auto":
        return device
    import ctranslate2

    return "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"


def load_model(spec: str, threads: int = 1, device: str = "cpu") -> WhisperModel:
    """The recogniser for ``spec`` on ``device`` (:data:`DEVICES`; the CPU with ``threads``
    threads); raises :class:`AsrError` in one sentence where it cannot be had (a name fetched with
    no network, a GPU that is not there)."""
    from faster_whisper import WhisperModel

    path = Path(spec).expanduser()
    try:
        runs_on = device_of(device)
        return WhisperModel(
            str(path) if path.is_dir() else spec,
            device=runs_on,
            compute_type=COMPUTE_TYPES[runs_on],
            cpu_threads=threads,
            num_workers=1,
        )
    except Exception as error:  # huggingface_hub's and CTranslate2's errors: a sentence, not a traceback
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        if device != "cpu" and ("cuda" in why.lower() or "gpu" in why.lower()):
            raise AsrError(f"--asr-device {device}: the recogniser cannot run on a GPU here ({why})") from None
        if path.is_dir():
            raise AsrError(f"--asr-model {spec}: the model did not load ({why})") from None
        raise AsrError(
            f"--asr-model {spec}: faster-whisper could not fetch the model ({why}); with no network, "
            f"give a model directory"
        ) from None


@dataclass
class Heard:
    """What the recogniser heard in one clip: the transcript, the language it was told or
    detected (None where it was told none and heard nothing), and the window it was heard in: the
    index of that window's first clip among those transcribed together (its own when alone)."""

    transcript: str
    language: str | None
    window: int = 0


def windows(durations: Sequence[float], languages: Sequence[str | None]) -> list[list[int]]:
    """The clips (their indices, in order) that share a window: consecutive clips of one language
    it was told, :data:`GAP_S` apart, together at most :data:`WINDOW_S`. A clip of no language
    (detected per clip) and one too long to share are alone."""
    out: list[list[int]] = []
    used = 0.0
    for clip_index, (seconds, language) in enumerate(zip(durations, languages)):
        prev = out[-1] if out else None
        fits = used + GAP_S + seconds <= WINDOW_S
        if prev is not None and language and languages[prev[0]] == language and fits:
            prev.append(clip_index)
            used += GAP_S + seconds
        else:
            out.append([clip_index])
            used = seconds if language else WINDOW_S  # no language: nothing joins it
    return out


def _options(language: str | None) -> dict[str, Any]:
    return {
        "language": language,
        "beam_size": 1,
        "condition_on_previous_text": False,
        "vad_filter": False,
        "temperature": 0.0,  # no fallback to sampling: the same window, the same words (module doc)
    }


def _alone(model: WhisperModel, samples: np.ndarray, language: str | None) -> Heard:
    segments, info = model.transcribe(samples, without_timestamps=True, **_options(language))
    transcript = " ".join(seg.text.strip() for seg in segments).strip()
    return Heard(transcript, language or info.language)


def _shared(model: WhisperModel, clips: Sequence[np.ndarray], language: str) -> list[Heard]:
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    spans: list[tuple[float, float]] = []
    parts: list[np.ndarray] = []
    offset_s = 0.0
    for clip in clips:
        spans.append((offset_s, offset_s + len(clip) / SAMPLE_RATE))
        parts += [clip.astype(np.float32, copy=False), gap]
        offset_s += (len(clip) + len(gap)) / SAMPLE_RATE
    segments, _info = model.transcribe(np.concatenate(parts[:-1]), word_timestamps=True, **_options(language))
    words: list[list[str]] = [[] for _ in clips]
    for seg in segments:
        for word in seg.words or ():
            middle = (word.start + word.end) / 2
            nearest = min(
                range(len(spans)),
                key=lambda span_index: max(spans[span_index][0] - middle, middle - spans[span_index][1], 0.0),
            )
            words[nearest].append(word.word)
    return [Heard("".join(clip_words).strip(), language) for clip_words in words]


def transcribe(model: WhisperModel, clips: Sequence[np.ndarray], languages: Sequence[str | None]) -> list[Heard]:
    """What ``model`` hears in each clip (16 kHz mono float samples, :data:`SAMPLE_RATE`), told
    each clip's language (a base code, or None to detect it): clips that fit share a window
    (:func:`windows`). Raises what the recogniser raises."""
    heard: list[Heard] = []
    for group in windows([len(clip) / SAMPLE_RATE for clip in clips], languages):
        language = languages[group[0]]
        if len(group) == 1 or not language:
            heard += [
                replace(_alone(model, clips[clip_index], languages[clip_index]), window=clip_index)
                for clip_index in group
            ]
        else:
            heard += [
                replace(said, window=group[0])
                for said in _shared(model, [clips[clip_index] for clip_index in group], language)
            ]
    return heard
