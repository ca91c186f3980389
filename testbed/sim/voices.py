"""The simulated server's voices: an LRU cache of speaker embeddings and the voices clients
registered, whatever protocol a request arrives by.

A request that names a voice (``voice``) or sends a reference clip (``ref_audio``, or a
form's file part) needs that voice's speaker embedding. ``--voice-cache K`` keeps the K most
recently used; a miss computes the embedding, which costs ``--voice-miss-ms`` of the request's
slot (the server's compute), and evicts the least recently used one when the cache is full. A
clip is keyed by its bytes, so the same clip sent by two requests is one voice; a registered
voice (``POST /v1/audio/voices``) by its clip too. A request that names neither uses the
default voice, which is always loaded.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

DEFAULT_MISS_MS = 300.0
#: Largest reference clip a registration takes, as vLLM-Omni's server limits it.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
UPLOAD_TYPES = (
    "audio/wav",
    "audio/x-wav",
    "audio/wave",
    "audio/mpeg",
    "audio/mp3",
    "audio/flac",
    "audio/ogg",
    "audio/aac",
    "audio/webm",
    "audio/mp4",
)


def clip_key(data: bytes) -> str:
    return "clip:" + hashlib.sha1(data).hexdigest()


class VoiceCache:
    """The ``capacity`` most recently used speaker embeddings (0: no cache at all, nothing a
    voice costs), with the counters ``/metrics`` and ``/health`` report."""

    def __init__(self, capacity: int, miss_ms: float):
        self.capacity = capacity
        self.miss_s = miss_ms / 1000
        self._lru: OrderedDict[str, None] = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    @property
    def size(self) -> int:
        return len(self._lru)

    def use(self, key: str | None) -> float:
        """Seconds the request spends on its voice: 0 on a hit (or no voice, or no cache), the
        miss cost on a miss."""
        if key is None or not self.capacity:
            return 0.0
        if key in self._lru:
            self._lru.move_to_end(key)
            self.hits += 1
            return 0.0
        self.misses += 1
        self._lru[key] = None
        if len(self._lru) > self.capacity:
            self._lru.popitem(last=False)
            self.evictions += 1
        return self.miss_s

    def figures(self) -> dict:
        """For ``/health`` (and ``--server-stats``): counts named as their counters are."""
        return {
            "voice_cache_capacity": self.capacity,
            "voice_cache_size": self.size,
            "voice_cache_hits_total": self.hits,
            "voice_cache_misses_total": self.misses,
            "voice_cache_evictions_total": self.evictions,
        }


class Registry:
    """Voices registered by clients: name -> what ``GET /v1/audio/voices`` lists and the key of
    its clip."""

    def __init__(self):
        self.voices: dict[str, dict] = {}
        self.keys: dict[str, str] = {}

    def add(self, name: str, consent: str, data: bytes, mime: str) -> dict:
        """Register a voice; raises ValueError with the server's sentence when it is refused."""
        if not name.strip():
            raise ValueError("voice name must not be empty")
        if name in self.voices:
            raise ValueError(f"Voice '{name}' already exists")
        if len(data) > MAX_UPLOAD_BYTES:
            raise ValueError("Audio file exceeds maximum size of 10MB")
        if mime not in UPLOAD_TYPES:
            raise ValueError(f"Unsupported MIME type {mime!r}")
        info = {
            "name": name,
            "consent": consent,
            "created_at": int(time.time()),
            "mime_type": mime,
            "file_size": len(data),
        }
        self.voices[name] = info
        self.keys[name] = clip_key(data)
        return info

    def remove(self, name: str) -> bool:
        self.keys.pop(name, None)
        return self.voices.pop(name, None) is not None
