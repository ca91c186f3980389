"""Audio: what the servers send and whether it is right. Parsing every container the servers
answer with, whole or as it arrives (:mod:`audio.containers`: WAV, raw PCM, MP3, ADTS-AAC, Ogg,
FLAC, SSE payloads), the signal checks every attempt gets (:mod:`audio.signal`: silence,
clipping, runaways) and the speech judge (:mod:`audio.asr` scores a transcript, :mod:`audio.judge`
is the recogniser's process). Used by the load generator, the analysis and the report; imports
neither locust nor gevent (nor the recogniser, until a judge asks for it)."""
