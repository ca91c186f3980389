"""Predicted naturalness for the judge: DNSMOS P.835 (Microsoft, MIT), the ONNX model PyPI's
``speechmos`` ships, run with onnxruntime (the package itself is never imported: it imports
librosa).

The model reads 9.01 s of 16 kHz audio (a shorter clip is repeated to that length, a longer one is
read in 9.01 s windows 1 s apart and their scores averaged, as DNSMOS does) and gives three
scores on the 1-5 scale of ITU-T P.835: SIG (the speech itself: distortion, a metallic or clipped
voice), BAK (the background: noise, clicks) and OVRL (the overall quality a listener would give).
The judge reports OVRL as ``mos``: a TTS fault shows in either part, and OVRL is the one trained on
the overall rating; SIG and BAK are kept beside it to say which part fell. DNSMOS's P.808 model
is left out: it reads librosa's log-mel features (a second model and a feature pipeline to keep
equal to librosa's) and tells no more about a TTS fault than OVRL. Manual: docs/listening.md.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16000
WINDOW_S = 9.01
#: Windows scored at most, spread over a long clip (DNSMOS reads every one, 1 s apart: 12 for a
#: 20 s clip; four tell the same within a few hundredths at a third of the CPU).
MAX_WINDOWS = 4
#: Sound needed to score a clip (seconds).
MIN_AUDIO_S = 0.5
# DNSMOS's calibration of the model's raw scores to P.835 MOS (the non-personalised model)
_OVRL = np.poly1d([-0.06766283, 1.11546468, 0.04602535])
_SIG = np.poly1d([-0.08397278, 1.22083953, 0.0052439])
_BAK = np.poly1d([-0.13166888, 1.60915514, -0.39604546])


class MosModelMissing(RuntimeError):
    """The DNSMOS model is not installed."""


@dataclass(frozen=True)
class Mos:
    """One clip's DNSMOS scores (1-5)."""

    ovrl: float
    sig: float
    bak: float


def model_path() -> Path:
    """The installed ``speechmos`` package's DNSMOS P.835 model."""
    spec = importlib.util.find_spec("speechmos")
    path = (
        Path(next(iter(spec.submodule_search_locations or []), "")) / "dnsmos_models" / "sig_bak_ovr.onnx"
        if spec
        else None
    )
    if path is None or not path.is_file():
        raise MosModelMissing(
            "predicted naturalness (MOS) needs the asr extra's DNSMOS model: pip install 'tts-knee[asr]'"
        )
    return path


class MosPredictor:
    """DNSMOS P.835 on onnxruntime, one thread."""

    def __init__(self, path: Path | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        self.session: Any = ort.InferenceSession(str(path or model_path()), options, providers=["CPUExecutionProvider"])
        self.input_name: str = self.session.get_inputs()[0].name

    def score(self, samples: npt.NDArray[np.float32]) -> Mos | None:
        """The clip's scores from 16 kHz mono samples in [-1, 1]; None when it holds less than
        :data:`MIN_AUDIO_S` of audio."""
        if len(samples) < MIN_AUDIO_S * SAMPLE_RATE:
            return None
        audio = np.clip(samples.astype(np.float32), -1.0, 1.0)
        need = int(WINDOW_S * SAMPLE_RATE)
        if len(audio) < need:  # repeated to one window, not past it: more would score the same audio again
            audio = np.tile(audio, int(np.ceil(need / len(audio))))[:need]
        hops = max(1, int(np.floor(len(audio) / SAMPLE_RATE) - WINDOW_S) + 1)
        starts = sorted({int(round(hop)) for hop in np.linspace(0, hops - 1, min(hops, MAX_WINDOWS))})
        raw = []
        for hop in starts:
            window = audio[hop * SAMPLE_RATE : hop * SAMPLE_RATE + need]
            raw.append(self.session.run(None, {self.input_name: window[np.newaxis, :]})[0][0])
        sig, bak, ovrl = np.mean(raw, axis=0)
        return Mos(ovrl=float(_OVRL(ovrl)), sig=float(_SIG(sig)), bak=float(_BAK(bak)))
