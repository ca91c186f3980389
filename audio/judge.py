"""The ASR judge's process: ``python -m tts_knee.audio.judge --model SPEC`` loads the
recogniser once (:func:`audio.asr.load_model`) and transcribes the clips it is sent, one at a
time, off the load generator's event loop and interpreter.

Its stdin carries clips, each a frame: the length of a JSON header (4 bytes, big-endian), the
header (``id``, ``text``, ``language`` or null, ``metric``: "", "wer" or "cer"; on the first clip
of a batch, optionally ``batch``: how many clips, it included, to judge together), then the
clip's ``bytes`` bytes (any audio PyAV decodes: WAV, MP3, Ogg ...; raw PCM goes as a WAV). Its
stdout carries JSON lines: first ``{"ready": true}`` once the model has loaded, or
``{"fatal": SENTENCE}`` and exit status 2; then one line per clip, in order (the clips of a batch,
else those waiting together, are judged together, several to a Whisper window:
:func:`audio.asr.transcribe`): ``id``, ``transcript``, ``language``, ``metric``, ``error`` (the
rate; null when not judged), ``reason`` (why not; null when judged), ``window`` (the ``id`` of the
first clip of the Whisper window it was heard in: its own when heard alone), ``audio_s`` and
``judge_s`` (the process's CPU seconds on it: its even share of the clips judged together).
``--device`` puts the recogniser on a GPU (:data:`audio.asr.DEVICES`). With ``--listen``:
``embedding`` (the speaker embedding,
:mod:`audio.speaker`; 256 values, or null), ``similarity_ref`` (its cosine to the header's
``reference`` clip, a path, where given), ``mos``, ``mos_sig``, ``mos_bak`` (DNSMOS P.835,
:mod:`audio.quality`) and ``listen_reason`` (why a figure is null). It ends at the end of its input.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import select
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from . import asr, quality, speaker

if TYPE_CHECKING:  # loaded by asr.load_model (faster-whisper has no types: Any)
    from faster_whisper import WhisperModel


#: Clips read from stdin before judging them together at most (:func:`audio.asr.transcribe`
#: packs those that fit into one window).
BATCH_MAX = 24


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    while got < size:
        data = stream.read(size - got)
        if not data:
            return None
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _waiting(stream: IO[bytes]) -> bool:
    """Whether more input is there to read now (a stream with no descriptor: always)."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    return bool(select.select([descriptor], [], [], 0)[0])


class Listener:
    """Speaker similarity and predicted naturalness of a clip (``--listen``)."""

    def __init__(self, threads: int = 1) -> None:
        self.encoder = speaker.load()
        self.mos = quality.MosPredictor(threads=threads)
        self.references: dict[str, speaker.Floats | str] = {}

    def reference(self, path: str) -> speaker.Floats | str:
        """The reference clip's embedding, or why there is none (a sentence); read once."""
        if path not in self.references:
            ref: speaker.Floats | str | None
            try:
                ref = self.encoder.embed(decode(path))
            except Exception as error:  # not a file PyAV decodes
                ref = (
                    f"the reference voice {path} could not be read "
                    f"({str(error).splitlines()[0] if str(error) else error!r})"
                )
            self.references[path] = (
                ref if ref is not None else f"the reference voice {path} holds too little speech to embed"
            )
        return self.references[path]

    def hear(self, samples: speaker.Floats, reference: str | None) -> dict[str, object]:
        """``embedding``, ``similarity_ref``, ``mos``, ``mos_sig``, ``mos_bak``, ``listen_reason``."""
        return self.hear_all([samples], [reference])[0]

    def hear_all(self, clips: list[speaker.Floats], references: list[str | None]) -> list[dict[str, object]]:
        """:meth:`hear` of each clip, their speaker embeddings computed as one batch."""
        return [
            self._figures(samples, embedding, reference)
            for samples, embedding, reference in zip(clips, self.encoder.embed_many(clips), references)
        ]

    def _figures(
        self, samples: speaker.Floats, embedding: speaker.Floats | None, reference: str | None
    ) -> dict[str, object]:
        reasons: list[str] = []
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
            "embedding": None if embedding is None else [round(float(value), 4) for value in embedding],
            "similarity_ref": similarity_ref,
            "mos": None if scores is None else round(scores.ovrl, 3),
            "mos_sig": None if scores is None else round(scores.sig, 3),
            "mos_bak": None if scores is None else round(scores.bak, 3),
            "listen_reason": "; ".join(reasons) or None,
        }


def _blank(header: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": header.get("id"),
        "transcript": None,
        "language": header.get("language"),
        "metric": None,
        "error": None,
        "reason": None,
        "window": None,
        "audio_s": None,
        "judge_s": None,
    }


def _why(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def decode(source: str | IO[bytes]) -> speaker.Floats:
    """16 kHz mono float samples of any audio PyAV decodes (a path or a binary stream): the
    samples faster-whisper's ``decode_audio`` gives (the same resampler, fed the same way), without
    the full garbage collection it runs after every clip (most of a short clip's decoding)."""
    import av

    resampler = av.AudioResampler(format="s16", layout="mono", rate=asr.SAMPLE_RATE)
    pcm: list[np.ndarray] = []
    with av.open(source, mode="r", metadata_errors="ignore") as container:
        for group in _grouped(container.decode(audio=0)):
            pcm += [frame.to_ndarray() for frame in resampler.resample(group)]
    pcm += [frame.to_ndarray() for frame in resampler.resample(None)]
    return (np.concatenate(pcm, axis=None) if pcm else np.zeros(0, np.int16)).astype(np.float32) / 32768.0


def _grouped(frames: Iterator[Any], samples: int = 500000) -> Iterator[Any]:
    """Decoded frames gathered ``samples`` at a time, past frames that fail to decode (what
    ``decode_audio`` hands its resampler)."""
    import av

    fifo = av.AudioFifo()
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            break
        except av.error.InvalidDataError:
            continue
        frame.pts = None  # its timestamps are not checked
        fifo.write(frame)
        if fifo.samples >= samples:
            yield fifo.read()
    if fifo.samples > 0:
        yield fifo.read()


def _decode(audio: bytes, out: dict[str, Any]) -> np.ndarray | None:
    try:
        samples = decode(io.BytesIO(audio))
    except Exception as error:  # PyAV's errors: the clip is not audio it can decode
        out["reason"] = f"the clip could not be decoded ({_why(error)})"
        return None
    out["audio_s"] = round(len(samples) / asr.SAMPLE_RATE, 3)
    if not len(samples):
        out["reason"] = "the clip holds no audio"
        return None
    return samples


def _hear(model: WhisperModel, clips: list[np.ndarray], languages: list[str | None]) -> list[asr.Heard | str]:
    """What the model heard in each clip, or the sentence of why not: a window it chokes on is
    tried again clip by clip, so only the clip that fails goes unjudged."""
    try:
        return list[asr.Heard | str](asr.transcribe(model, clips, languages))
    except Exception:
        if len(clips) == 1:
            raise
    heard: list[asr.Heard | str] = []
    for clip_index, (clip, language) in enumerate(zip(clips, languages)):
        try:
            heard += [replace(said, window=clip_index) for said in asr.transcribe(model, [clip], [language])]
        except Exception as error:  # a clip the model chokes on: that clip only
            heard.append(f"the recogniser failed on the clip ({_why(error)})")
    return heard


def judge_clips(
    model: WhisperModel, batch: list[tuple[dict[str, Any], bytes]], listener: Listener | None = None
) -> list[dict[str, Any]]:
    """One line per clip (see the module doc), judged together: the clips that fit share a
    Whisper window (:func:`audio.asr.transcribe`); ``judge_s`` is the batch's CPU shared evenly."""
    started = time.process_time()
    lines = [_blank(header) for header, _ in batch]
    todo: list[int] = []
    clips: list[np.ndarray] = []
    languages: list[str | None] = []
    heard: list[asr.Heard | str]
    for clip_index, (header, audio) in enumerate(batch):
        samples = _decode(audio, lines[clip_index])
        if samples is not None:
            todo.append(clip_index)
            clips.append(samples)
            languages.append(asr.base_language(header.get("language")))
    if listener is not None and clips:
        for clip_index, figures in zip(
            todo, listener.hear_all(clips, [batch[clip_index][0].get("reference") for clip_index in todo])
        ):
            lines[clip_index].update(figures)
    try:
        heard = _hear(model, clips, languages) if clips else []
    except Exception as failure:  # a lone clip the model chokes on
        heard = [f"the recogniser failed on the clip ({_why(failure)})"]
    for clip_index, said in zip(todo, heard):
        if isinstance(said, str):
            lines[clip_index]["reason"] = said
            continue
        header = batch[clip_index][0]
        metric = asr.metric_for(said.language, header.get("metric") or "")
        error = asr.error_rate(header.get("text") or "", said.transcript, said.language, metric)
        lines[clip_index].update(
            transcript=said.transcript,
            language=said.language,
            metric=metric,
            error=round(error, 4),
            window=batch[todo[said.window]][0].get("id"),
        )
    share = round((time.process_time() - started) / max(1, len(todo)), 3)
    for clip_index in todo:
        if lines[clip_index]["reason"] is None:
            lines[clip_index]["judge_s"] = share
    return lines


def judge_clip(
    model: WhisperModel, header: dict[str, Any], audio: bytes, listener: Listener | None = None
) -> dict[str, Any]:
    """One clip's line (see the module doc), judged alone."""
    return judge_clips(model, [(header, audio)], listener)[0]


def _next(inp: IO[bytes]) -> tuple[dict[str, Any], bytes] | None:
    size = _read_exactly(inp, 4)
    if size is None:
        return None
    header = _read_exactly(inp, struct.unpack(">I", size)[0])
    if header is None:
        return None
    head = json.loads(header)
    audio = _read_exactly(inp, int(head.get("bytes", 0))) if head.get("bytes") else b""
    return None if audio is None else (head, audio)


def serve(model: WhisperModel, inp: IO[bytes], out: IO[str], listener: Listener | None = None) -> int:
    """Judge every clip on ``inp`` (binary), a line each on ``out`` (text); the clips judged.
    A clip whose header says ``batch`` is judged with the clips after it that make up that
    many; any other with those already waiting when it is read (up to :data:`BATCH_MAX`)."""
    judged = 0
    while True:
        first = _next(inp)
        if first is None:
            return judged
        batch = [first]
        ended = False
        told = first[0].get("batch")
        while isinstance(told, int) and len(batch) < told:  # as many as the sender said: no timing in it
            more = _next(inp)
            if more is None:
                ended = True
                break
            batch.append(more)
        while told is None and len(batch) < BATCH_MAX and _waiting(inp):
            more = _next(inp)
            if more is None:
                ended = True
                break
            batch.append(more)
        for line in judge_clips(model, batch, listener):
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        out.flush()
        judged += len(batch)
        if ended:
            return judged


def frame(header: dict[str, Any], audio: bytes) -> bytes:
    """One clip as the judge reads it."""
    head = json.dumps({**header, "bytes": len(audio)}, ensure_ascii=False).encode()
    return struct.pack(">I", len(head)) + head + audio


def main(argv: list[str] | None = None) -> int:
    arg_parser = argparse.ArgumentParser(
        prog="python -m tts_knee.audio.judge",
        description="Transcribe the clips on stdin and score them against their text.",
    )
    arg_parser.add_argument("--model", required=True, help="faster-whisper model directory or name (--asr-model)")
    arg_parser.add_argument("--threads", type=int, default=1, help="CPU threads (--asr-threads)")
    arg_parser.add_argument(
        "--device", default="cpu", choices=asr.DEVICES, help="where the recogniser runs (--asr-device)"
    )
    arg_parser.add_argument(
        "--language", default="", help="the language it will be told (--asr-language), checked once loaded"
    )
    arg_parser.add_argument(
        "--listen", action="store_true", help="also speaker similarity and naturalness (unless --asr-words-only)"
    )
    args = arg_parser.parse_args(argv)
    try:
        model = asr.load_model(args.model, max(1, args.threads), args.device)
        asr.check_language(model, args.language)
        listener = Listener(max(1, args.threads)) if args.listen else None
    except (asr.AsrError, speaker.SpeakerModelMissing, quality.MosModelMissing) as error:
        print(json.dumps({"fatal": str(error)}), flush=True)
        return 2
    print(json.dumps({"ready": True}), flush=True)
    # unbuffered: what select says waits is what a read gets
    with (
        open(sys.stdin.fileno(), "rb", buffering=0, closefd=False) as inp,
        contextlib.suppress(BrokenPipeError, KeyboardInterrupt),
    ):
        serve(model, inp, sys.stdout, listener)
    return 0


if __name__ == "__main__":
    sys.exit(main())
