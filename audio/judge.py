"""The ASR judge's process: ``python -m tts_knee.audio.judge --model SPEC`` loads the
recogniser once (:func:`audio.asr.load_model`) and transcribes the clips it is sent, one at a
time, off the load generator's event loop and interpreter.

Its stdin carries clips, each a frame: the length of a JSON header (4 bytes, big-endian), the
header (``id``, ``text``, ``language`` or null, ``metric``: "", "wer" or "cer"), then the clip's
``bytes`` bytes (any audio PyAV decodes: WAV, MP3, Ogg ...; raw PCM goes as a WAV). Its stdout carries JSON lines: first
``{"ready": true}`` once the model has loaded, or ``{"fatal": SENTENCE}`` and exit status 2; then
one line per clip, in order: ``id``, ``transcript``, ``language``, ``metric``, ``error`` (the rate;
null when not judged), ``reason`` (why not; null when judged), ``audio_s`` and ``judge_s`` (the
process's CPU seconds on it). With ``--listen``: ``embedding`` (the speaker embedding,
:mod:`audio.speaker`; 256 values, or null), ``similarity_ref`` (its cosine to the header's
``reference`` clip, a path, where given), ``mos``, ``mos_sig``, ``mos_bak`` (DNSMOS P.835,
:mod:`audio.quality`) and ``listen_reason`` (why a figure is null). It ends at the end of its input.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import struct
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from . import asr, quality, speaker

if TYPE_CHECKING:  # loaded by asr.load_model (faster-whisper has no types: Any)
    from faster_whisper import WhisperModel


def _read_exactly(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


class Listener:
    """Speaker similarity and predicted naturalness of a clip (``--listen``)."""

    def __init__(self, threads: int = 1) -> None:
        self.encoder = speaker.load()
        self.mos = quality.MosPredictor(threads=threads)
        self.references: dict[str, speaker.Floats | str] = {}

    def reference(self, path: str) -> speaker.Floats | str:
        """The reference clip's embedding, or why there is none (a sentence); read once."""
        if path not in self.references:
            from faster_whisper import decode_audio

            ref: speaker.Floats | str | None
            try:
                ref = self.encoder.embed(decode_audio(path))
            except Exception as e:  # not a file PyAV decodes
                ref = f"the reference voice {path} could not be read ({str(e).splitlines()[0] if str(e) else e!r})"
            self.references[path] = (
                ref if ref is not None else f"the reference voice {path} holds too little speech to embed"
            )
        return self.references[path]

    def hear(self, samples: speaker.Floats, reference: str | None) -> dict[str, object]:
        """``embedding``, ``similarity_ref``, ``mos``, ``mos_sig``, ``mos_bak``, ``listen_reason``."""
        reasons: list[str] = []
        embedding = self.encoder.embed(samples)
        if embedding is None:
            reasons.append(f"too little speech to embed (under {speaker.MIN_SPEECH_S:g} s)")
        similarity_ref = None
        if reference and embedding is not None:
            ref = self.reference(reference)
            if isinstance(ref, str):
                reasons.append(ref)
            else:
                similarity_ref = round(speaker.cosine(embedding, ref), 4)
        scores = self.mos.score(samples)
        if scores is None:
            reasons.append(f"too short to score its naturalness (under {quality.MIN_AUDIO_S:g} s)")
        return {
            "embedding": None if embedding is None else [round(float(v), 4) for v in embedding],
            "similarity_ref": similarity_ref,
            "mos": None if scores is None else round(scores.ovrl, 3),
            "mos_sig": None if scores is None else round(scores.sig, 3),
            "mos_bak": None if scores is None else round(scores.bak, 3),
            "listen_reason": "; ".join(reasons) or None,
        }


def judge_clip(
    model: WhisperModel, header: dict[str, Any], audio: bytes, listener: Listener | None = None
) -> dict[str, Any]:
    """One clip's line (see the module doc)."""
    from faster_whisper import decode_audio

    out = {
        "id": header.get("id"),
        "transcript": None,
        "language": header.get("language"),
        "metric": None,
        "error": None,
        "reason": None,
        "audio_s": None,
        "judge_s": None,
    }
    started = time.process_time()
    try:
        samples = decode_audio(io.BytesIO(audio))
    except Exception as e:  # PyAV's errors: the clip is not audio it can decode
        out["reason"] = f"the clip could not be decoded ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        return out
    out["audio_s"] = round(len(samples) / 16000, 3)
    if not len(samples):
        out["reason"] = "the clip holds no audio"
        return out
    if listener is not None:
        out.update(listener.hear(samples, header.get("reference")))
    language = asr.base_language(header.get("language"))
    try:
        segments, info = model.transcribe(
            samples,
            language=language,
            beam_size=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        transcript = " ".join(seg.text.strip() for seg in segments).strip()
    except Exception as e:  # a clip the model chokes on: that clip only
        out["reason"] = f"the recogniser failed on the clip ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        return out
    language = language or info.language
    metric = asr.metric_for(language, header.get("metric") or "")
    out.update(
        transcript=transcript,
        language=language,
        metric=metric,
        error=round(asr.error_rate(header.get("text") or "", transcript, language, metric), 4),
        judge_s=round(time.process_time() - started, 3),
    )
    return out


def serve(model: WhisperModel, inp: IO[bytes], out: IO[str], listener: Listener | None = None) -> int:
    """Judge every clip on ``inp`` (binary), a line each on ``out`` (text); the clips judged."""
    n = 0
    while True:
        size = _read_exactly(inp, 4)
        if size is None:
            return n
        header = _read_exactly(inp, struct.unpack(">I", size)[0])
        if header is None:
            return n
        header = json.loads(header)
        audio = _read_exactly(inp, int(header.get("bytes", 0))) if header.get("bytes") else b""
        if audio is None:
            return n
        out.write(json.dumps(judge_clip(model, header, audio, listener), ensure_ascii=False) + "\n")
        out.flush()
        n += 1


def frame(header: dict[str, Any], audio: bytes) -> bytes:
    """One clip as the judge reads it."""
    head = json.dumps({**header, "bytes": len(audio)}, ensure_ascii=False).encode()
    return struct.pack(">I", len(head)) + head + audio


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tts_knee.audio.judge",
        description="Transcribe the clips on stdin and score them against their text.",
    )
    p.add_argument("--model", required=True, help="faster-whisper model directory or name (--asr-model)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (--asr-threads)")
    p.add_argument("--language", default="", help="the language it will be told (--asr-language), checked once loaded")
    p.add_argument("--listen", action="store_true", help="also speaker similarity and naturalness (--asr-listen)")
    args = p.parse_args(argv)
    try:
        model = asr.load_model(args.model, max(1, args.threads))
        asr.check_language(model, args.language)
        listener = Listener(max(1, args.threads)) if args.listen else None
    except (asr.AsrError, speaker.SpeakerModelMissing, quality.MosModelMissing) as e:
        print(json.dumps({"fatal": str(e)}), flush=True)
        return 2
    print(json.dumps({"ready": True}), flush=True)
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(model, sys.stdin.buffer, sys.stdout, listener)
    return 0


if __name__ == "__main__":
    sys.exit(main())
