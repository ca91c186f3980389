"""What the ASR judge hears of a clip (words, voice, sound), whether it can, and the line it writes
of each: shared by the judge during a run (:mod:`locustfiles.listening`) and after it
(``tts-knee judge``, :mod:`dashboard.judge`), so that both write the same figures of the same
audio. Manual: docs/listening.md.

``--asr-model`` hears the words (the error rate against the text sent), the voice (speaker
similarity, :mod:`audio.speaker`) and the sound (DNSMOS, :mod:`audio.quality`);
``--asr-words-only`` the words alone. Where the listening models are not installed and listening
was not asked for by name (``--asr-listen``, ``--reference-voice``), the judge hears the words and
says in one sentence that the voice and the sound went unheard, and why; asked for by name, their
absence stops the judge before it starts.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

import numpy as np

from . import asr, quality, speaker

#: What the judge can hear of a clip: its words (the error rate), its voice (speaker similarity)
#: and its sound (predicted naturalness).
WORDS, VOICE, SOUND = "words", "voice", "sound"


#: Why the voice and the sound went unheard where the words alone were asked for.
WORDS_ONLY = "--asr-words-only asked for the words alone"
#: The words alone and the voice too, both asked for.
CONTRARY = (
    "--asr-words-only judges the words alone, and --asr-listen and --reference-voice ask for the voice too: give one"
)


class Hearing(NamedTuple):
    """What the judge will hear: ``listen``, the voice and the sound besides the words; where it
    will not, ``not_heard`` says why in one sentence (None: they are heard)."""

    listen: bool
    not_heard: str | None = None

    @property
    def heard(self) -> list[str]:
        return [WORDS, VOICE, SOUND] if self.listen else [WORDS]


def decide(asked: bool, words_only: bool, reference_voice: str = "") -> Hearing:
    """What the judge hears: the words only with ``words_only``; else the voice and the sound too
    where their models are installed. ``asked``: listening was asked for by name (``--asr-listen``
    or ``--reference-voice``), so their models missing, or a reference voice that cannot be heard,
    raise :class:`audio.asr.AsrError` (one sentence) instead."""
    if words_only:
        return Hearing(False, WORDS_ONLY)
    try:
        speaker.weights_path()
        quality.model_path()
    except (speaker.SpeakerModelMissing, quality.MosModelMissing) as error:
        if asked or reference_voice:
            flag = "--asr-listen" if asked else f"--reference-voice {reference_voice}"
            raise asr.AsrError(f"{flag}: {error}") from None
        return Hearing(False, str(error))
    if reference_voice:
        check_reference(reference_voice)
    return Hearing(True)


def check_reference(reference_voice: str) -> None:
    """Raise :class:`audio.asr.AsrError` (one sentence) where ``--reference-voice`` is missing, not
    audio, or too short to embed."""
    if not os.path.isfile(reference_voice):
        raise asr.AsrError(f"--reference-voice {reference_voice}: no such file")
    try:
        from faster_whisper import decode_audio

        samples = decode_audio(reference_voice)
    except Exception:  # PyAV's errors: whatever it is, it is not audio
        raise asr.AsrError(f"--reference-voice {reference_voice}: not an audio file PyAV can decode") from None
    heard = speaker.speech_seconds(samples)
    if heard < speaker.MIN_SPEECH_S:
        raise asr.AsrError(
            f"--reference-voice {reference_voice}: {heard:.2f} s of speech, too short to embed "
            f"(at least {speaker.MIN_SPEECH_S:g} s)"
        )


def judge_command(model: str, threads: int, language: str, device: str, listen: bool) -> list[str]:
    """The judge process's command line (:mod:`audio.judge`), the same during a run and after."""
    return [
        sys.executable,
        "-m",
        "tts_knee.audio.judge",
        "--model",
        model,
        "--threads",
        str(threads),
        "--language",
        language,
        "--device",
        device,
        *(["--listen"] if listen else []),
    ]


def judge_environment(threads: int) -> dict[str, str]:
    """The judge process's environment: numpy's BLAS held to the judge's threads (its idle threads
    spin, ten times the CPU), and so the same sums in the same order whoever starts it."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


class FirstHeard:
    """Each text's speaker embedding at the lowest concurrency heard so far: what a clip's
    ``similarity`` compares with (1 for that clip itself). Clips taken in the order they were
    judged give the same figures during the run and after it."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[float, np.ndarray]] = {}

    def similarity(self, text_id: str, concurrency: float, embedding: list[float]) -> float:
        """The cosine of ``embedding`` with its text's first heard (itself, where it is the first
        or at a lower concurrency than any before)."""
        first = self.first.get(text_id)
        mine = np.asarray(embedding)
        if first is None or concurrency < first[0]:
            self.first[text_id] = first = (concurrency, mine)
        return round(speaker.cosine(mine, first[1]), 4)


def judged(clip: dict[str, Any], said: dict[str, Any], hearing: Hearing, first: FirstHeard) -> dict[str, Any]:
    """The fields of a ``speech.jsonl`` line (beside the clip's own: ``req_id``, ``step``,
    ``concurrency``, ``text_id``, ``text``, ``clip``) for a clip the judge process answered
    (``said``, :mod:`audio.judge`); ``clip`` as the judge was given it, ``language`` the one it
    was told (None: detect it)."""
    fields = {
        "language": said.get("language") or clip["language"],
        "told_language": clip["language"],
        "metric": said.get("metric"),
        "error": said.get("error"),
        "transcript": said.get("transcript"),
        "reason": said.get("reason"),
        "window": said.get("window"),
        "audio_s": said.get("audio_s"),
        "judge_s": said.get("judge_s"),
    }
    if not hearing.listen:
        return fields
    embedding = said.get("embedding")
    similarity = None
    if isinstance(embedding, list) and embedding:
        similarity = first.similarity(clip["text_id"], clip.get("concurrency") or 0, embedding)
    return {
        **fields,
        "similarity": similarity,
        "similarity_ref": said.get("similarity_ref"),
        "reference": clip.get("reference"),
        "mos": said.get("mos"),
        "mos_sig": said.get("mos_sig"),
        "mos_bak": said.get("mos_bak"),
        "listen_reason": said.get("listen_reason"),
        "embedding": embedding,
    }


def unjudged(clip: dict[str, Any], reason: str) -> dict[str, Any]:
    """The same fields for a clip that was not judged, and why (one sentence)."""
    return {
        "language": clip["language"],
        "told_language": clip["language"],
        "metric": None,
        "error": None,
        "transcript": None,
        "reason": reason,
        "audio_s": None,
        "judge_s": None,
    }
