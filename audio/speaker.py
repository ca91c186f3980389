"""Speaker embeddings for the judge: Resemblyzer's speaker encoder (a GE2E d-vector, Apache-2.0) run
in numpy from the weights its PyPI wheel ships, without torch.

The wheel's ``pretrained.pt`` is a torch state dict in torch's legacy file format (pickles, then
each tensor's raw bytes); :func:`load` reads it with a small unpickler that knows only the names a
state dict holds. The network is a 3-layer LSTM (40 mel bands in, 256 units), a linear layer and a
ReLU, L2-normalised; an utterance is cut into 1.6 s partials 1.3 a second apart, and its embedding
is their normalised mean, as Resemblyzer does. Resemblyzer trims long silences with webrtcvad
first; here a level gate (30 ms windows within :data:`GATE_DB` of the loudest) does that, and
volume is raised to -30 dBFS, as there. Manual: docs/listening.md.
"""

from __future__ import annotations

import importlib.util
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_RATE = 1.3  # partials a second
MIN_COVERAGE = 0.75
TARGET_DBFS = -30.0
#: Windows quieter than the loudest by more than this are silence, cut where long.
GATE_DB = 40.0
GATE_WINDOW = 480  # 30 ms
#: Windows below this level (dBFS) are silence whatever the loudest.
SILENCE_DBFS = -70.0
#: Speech needed to embed a clip (seconds, after long silences are cut).
MIN_SPEECH_S = 0.5

Floats = npt.NDArray[np.float32]
_NO_PARTIALS: Floats = np.zeros((0, PARTIAL_FRAMES, N_MELS), np.float32)


class SpeakerModelMissing(RuntimeError):
    """The speaker encoder's weights are not installed."""


def weights_path() -> Path:
    """Where the installed Resemblyzer wheel keeps its encoder's weights (its package is never
    imported: it imports torch)."""
    spec = importlib.util.find_spec("resemblyzer")
    path = Path(next(iter(spec.submodule_search_locations or []), "")) / "pretrained.pt" if spec else None
    if path is None or not path.is_file():
        raise SpeakerModelMissing(
            "speaker similarity needs the speaker encoder's weights: install them with "
            "`pip install --no-deps Resemblyzer==0.1.4` (make install does; --no-deps keeps torch out)"
        )
    return path


class _StateDictUnpickler(pickle.Unpickler):
    """Unpickles a legacy torch state dict: tensors become (storage key, offset, shape, stride)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            import collections

            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *_: (storage, offset, tuple(size), tuple(stride))
        if module == "torch" and name.endswith("Storage"):
            return name
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in the speaker weights")

    def persistent_load(self, pid: Any) -> Any:
        _, storage_type, key, _location, _size = pid[:5]
        return (storage_type, key)


_DTYPES = {"FloatStorage": np.float32, "LongStorage": np.int64, "IntStorage": np.int32}


def _read_state_dict(stream: IO[bytes]) -> dict[str, np.ndarray]:
    for _ in range(3):  # magic number, protocol version, system info
        pickle.load(stream)
    state = _StateDictUnpickler(stream).load()
    keys = pickle.load(stream)
    storages: dict[str, np.ndarray] = {}
    dtypes = {key: kind for tensor in _tensors(state) for kind, key in [tensor[0]]}
    for key in keys:
        (count,) = struct.unpack("<q", stream.read(8))
        dtype = np.dtype(_DTYPES.get(dtypes.get(key, "FloatStorage"), np.float32))
        storages[key] = np.frombuffer(stream.read(count * dtype.itemsize), dtype=dtype)
    out = {}
    for name, ((_, key), offset, shape, _stride) in _named_tensors(state):
        size = int(np.prod(shape)) if shape else 1
        out[name] = storages[key][offset : offset + size].reshape(shape).copy()
    return out


def _named_tensors(state: Any) -> list[tuple[str, Any]]:
    model = state.get("model_state", state) if isinstance(state, dict) else {}
    return [(name, tensor) for name, tensor in model.items() if isinstance(tensor, tuple) and len(tensor) == 4]


def _tensors(state: Any) -> list[Any]:
    return [tensor for _, tensor in _named_tensors(state)]


@dataclass(frozen=True)
class SpeakerEncoder:
    """The encoder's weights as numpy arrays."""

    lstm: tuple[tuple[Floats, Floats, Floats], ...]  # per layer: W_ih, W_hh, bias (i, f, g, o gates)
    linear_w: Floats
    linear_b: Floats
    mel_basis: Floats
    window: Floats

    def embed(self, samples: Floats) -> Floats | None:
        """The clip's embedding (unit length, 256 values) from 16 kHz mono samples; None when it
        holds less than :data:`MIN_SPEECH_S` of sound."""
        return self.embed_many([samples])[0]

    def embed_many(self, clips: list[Floats]) -> list[Floats | None]:
        """:meth:`embed` of each clip, the partials of all of them run through the LSTM as one
        batch: its loop over time steps is Python, paid once for the batch instead of per clip."""
        partials: list[Floats] = []
        for samples in clips:
            wav = _trim_silences(_raise_volume(samples.astype(np.float32)))
            partials.append(self._partials(wav) if len(wav) >= MIN_SPEECH_S * SAMPLE_RATE else _NO_PARTIALS)
        if not any(len(clip_partials) for clip_partials in partials):
            return [None] * len(clips)
        hidden = np.concatenate(partials)
        for w_ih, w_hh, bias in self.lstm:
            hidden = _lstm_layer(hidden, w_ih, w_hh, bias)
        per_partial = np.maximum(hidden[:, -1, :] @ self.linear_w.T + self.linear_b, 0.0)
        per_partial /= np.linalg.norm(per_partial, axis=1, keepdims=True) + 1e-12
        out: list[Floats | None] = []
        start = 0
        for clip_partials in partials:
            if not len(clip_partials):
                out.append(None)
                continue
            mean = per_partial[start : start + len(clip_partials)].mean(axis=0)
            start += len(clip_partials)
            out.append((mean / (np.linalg.norm(mean) + 1e-12)).astype(np.float32))
        return out

    def _partials(self, wav: Floats) -> Floats:
        n_frames = int(np.ceil((len(wav) + 1) / HOP))
        frame_step = int(round(SAMPLE_RATE / PARTIAL_RATE / HOP))
        starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + frame_step + 1), frame_step))
        coverage = (len(wav) - starts[-1] * HOP) / (PARTIAL_FRAMES * HOP)
        if coverage < MIN_COVERAGE and len(starts) > 1:
            starts.pop()
        end = (starts[-1] + PARTIAL_FRAMES) * HOP
        wav = np.pad(wav, (0, max(0, end - len(wav))))
        mel = self._mel(wav)
        return np.stack([mel[start : start + PARTIAL_FRAMES] for start in starts]).astype(np.float32)

    def _mel(self, wav: Floats) -> Floats:
        padded = np.pad(wav, N_FFT // 2, mode="reflect")
        count = 1 + (len(padded) - N_FFT) // HOP
        frames = np.lib.stride_tricks.as_strided(
            padded, shape=(count, N_FFT), strides=(padded.strides[0] * HOP, padded.strides[0])
        )
        power = np.abs(np.fft.rfft(frames * self.window, axis=1)) ** 2
        return (power @ self.mel_basis.T).astype(np.float32)


def _sigmoid(values: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * values))


def _lstm_layer(inputs: Floats, w_ih: Floats, w_hh: Floats, bias: Floats) -> Floats:
    """One LSTM layer over ``inputs`` (batch, steps, features). The state is kept a column per
    partial, so each step is ``w_hh @ hidden``: OpenBLAS packs the weights of ``hidden @ w_hh.T``
    anew each call, which made a batch of eight cost as much per step as eight steps of one."""
    batch, steps, _ = inputs.shape
    units = w_hh.shape[1]
    projected = np.ascontiguousarray((inputs @ w_ih.T + bias).transpose(1, 2, 0))
    hidden = np.zeros((units, batch), np.float32)
    cell = np.zeros((units, batch), np.float32)
    out = np.empty((steps, units, batch), np.float32)
    for step in range(steps):
        gates = projected[step] + w_hh @ hidden
        # the gates' rows i, f, g, o, sliced (np.split's bookkeeping cost more than the arithmetic)
        cell = _sigmoid(gates[units : 2 * units]) * cell + _sigmoid(gates[:units]) * np.tanh(
            gates[2 * units : 3 * units]
        )
        hidden = _sigmoid(gates[3 * units :]) * np.tanh(cell)
        out[step] = hidden
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def speech_seconds(samples: Floats) -> float:
    """Seconds of sound in 16 kHz samples once long silences are cut (what :meth:`embed` reads)."""
    return len(_trim_silences(_raise_volume(samples.astype(np.float32)))) / SAMPLE_RATE


def _raise_volume(wav: Floats) -> Floats:
    rms = float(np.sqrt(np.mean(wav.astype(np.float64) ** 2))) if len(wav) else 0.0
    if rms <= 0:
        return wav
    change_db = TARGET_DBFS - 20 * np.log10(rms)
    return wav * np.float32(10 ** (change_db / 20)) if change_db > 0 else wav


def _trim_silences(wav: Floats) -> Floats:
    """Cut silences longer than about 200 ms (Resemblyzer's VAD does the same with webrtcvad)."""
    count = len(wav) // GATE_WINDOW
    if count == 0:
        return wav[:0]
    windows = wav[: count * GATE_WINDOW].reshape(count, GATE_WINDOW).astype(np.float64)
    level = 10 * np.log10((windows**2).mean(axis=1) + 1e-12)
    sound = (level > level.max() - GATE_DB) & (level > SILENCE_DBFS)
    smoothed = np.convolve(sound.astype(float), np.ones(8) / 8)[3 : 3 + count] >= 0.5
    keep = np.convolve(smoothed.astype(float), np.ones(7))[3 : 3 + count] > 0  # dilate by 3 windows
    return windows[keep].reshape(-1).astype(np.float32)


def _mel_basis() -> Floats:
    """Slaney-scale mel filters, area-normalised (librosa's defaults) for 16 kHz, 400-point FFT."""
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)

    def hz_to_mel(frequency_hz: np.ndarray) -> np.ndarray:
        frequency_hz = np.asarray(frequency_hz, dtype=float)
        lin = frequency_hz / (200.0 / 3)
        log_part = 15.0 + np.log(np.maximum(frequency_hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(frequency_hz >= 1000.0, log_part, lin)

    def mel_to_hz(mel: np.ndarray) -> np.ndarray:
        lin = mel * (200.0 / 3)
        log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
        return np.where(mel >= 15.0, log_part, lin)

    edges = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(SAMPLE_RATE / 2)), N_MELS + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    basis = np.maximum(0, np.minimum(lower, upper))
    basis *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return basis.astype(np.float32)


def load(path: Path | None = None) -> SpeakerEncoder:
    """The encoder from the installed weights (:func:`weights_path`), or from ``path``."""
    with open(path or weights_path(), "rb") as weights_file:
        state = _read_state_dict(weights_file)
    layers = tuple(
        (
            state[f"lstm.weight_ih_l{layer}"],
            state[f"lstm.weight_hh_l{layer}"],
            (state[f"lstm.bias_ih_l{layer}"] + state[f"lstm.bias_hh_l{layer}"]).astype(np.float32),
        )
        for layer in range(3)
    )
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    return SpeakerEncoder(layers, state["linear.weight"], state["linear.bias"], _mel_basis(), window)


def cosine(embedding: Floats, other: Floats) -> float:
    """Cosine similarity of two embeddings."""
    return float(np.dot(embedding, other) / (np.linalg.norm(embedding) * np.linalg.norm(other) + 1e-12))
