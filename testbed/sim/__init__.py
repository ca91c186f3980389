"""A TTS server with a known capacity, for aiming tts-knee at something predictable.

Run it::

    tts-knee sim --port 8300 --slots 4 --base-ms 50 --per-char-ms 1
    tts-knee sim --port 8300 --capacity 5 --stream      # streaming, shared capacity

Once it accepts connections it prints one line to stdout::

    listening on http://127.0.0.1:8300

and logs its knobs once to stderr. Every answer holds ``AUDIO_S_PER_CHAR`` seconds of a quiet
tone per input character (at least ``MIN_AUDIO_S``) as PCM16 mono: a WAV by default, raw PCM
for ``response_format: "pcm"`` (``audio/pcm``), with ``Server-Timing`` and ``X-Request-Id``.

Real speech (``--speech``, the ``piper`` extra): each text spoken by piper's joe voice instead,
at the voice's own 22050 Hz (which ``--sample-rate`` may only repeat), as long as the speech is;
the timing model is the same. Each text is rendered once (about 0.3 s of CPU a sentence) into
``--speech-cache`` (default ``~/.cache/tts-knee/sim-speech/``, one WAV per text keyed by the
sha1 of its text: :mod:`tts_knee.testbed.speech`); before it listens the simulator renders (or
reads back) ``--speech-corpus`` (default the load generator's default corpus; with
``--capacity`` each text's sentences too, as a session synthesises them) and logs ``sim: speech:
N texts ready ... (R rendered, C from the cache in DIR)``; other texts are rendered the first
time one is asked for. Drills that break an answer under load, counted against the requests in
flight as ``--oom-above`` counts them (queued or holding a slot, the answer's own included):
``--garble-above K`` (with ``--speech``) keeps the first 40 % of the clip and speaks the rest
with another corpus text's speech, the length unchanged; ``--silence-above K`` puts
``--silence-ms`` (default 600) of zeros first, so the first audio still comes when it would
have; ``--runaway-rate P`` repeats the clip to 8x its length (at most 25 s) with probability P
(the seeded RNG); ``--runaway-above K`` runs every answer on past its text, its clip followed
by other corpus texts' speech (more tone without ``--speech``) to ``--runaway-x`` (default 4)
times its length. The shared-capacity model makes the longer audio in proportion (a runaway
takes 8x the engine time); the slots model's service time stays the text's, its pieces larger.
Every face's answers go through :class:`~testbed.sim.audio.Speaker`, and say what was done:
``--chunk-log`` lines carry ``garbled``, ``silence_ms`` and ``runaway`` (a session's utterance:
any of its sentences, silence summed), and ``--log-requests`` lines end ``request_id=ID
audio_ms=MS garbled=false silence_ms=0.0 runaway=false`` (gRPC calls log such a line too).

Two models of the time it takes:

- Slots (default): ``--slots`` requests (default 4) synthesise at a time, the rest wait in a
  FIFO queue; latency = queue wait + service time, service time = ``--base-ms`` +
  ``--per-char-ms`` x characters, +/- ``--jitter``. A streamed answer sends its first chunk
  after ``--first-chunk-ms`` and the rest evenly until the service time is over.
- Shared capacity (``--capacity X``): the server makes X audio-seconds per second in all,
  shared equally by the requests generating at that moment (processor sharing), each at most
  ``--max-speed`` x real time (default X): with n generating, each makes audio at
  min(max_speed, X / n) x real time, recomputed exactly whenever one starts or stops. A
  request first waits ``--prefill-ms`` (default 100; uses no capacity), then makes its audio
  in chunks of ``--chunk-ms`` (default 200); a streamed answer writes each chunk as soon as it
  is made. Short texts at ``--capacity 5``: time to first audio = 100 + 200 / (5 / n) ms, so
  about 140/180/260/420 ms at 1/2/4/8 concurrent streams, and 8 streams fall behind playback.
  ``--base-ms``, ``--per-char-ms``, ``--jitter`` and ``--first-chunk-ms`` are refused with
  it (as are the capacity knobs without it), and ``--slots`` is unlimited unless given (a
  request holds its slot while it generates and streams). A request that is not streamed
  shares the capacity alike and is answered whole once all its audio is made.

Streaming (``--stream``, or per request ``"stream": true`` or a ``"stream_format"``): chunked
transfer, one write per chunk. WAV streams carry 0xFFFFFFFF placeholder sizes, the header in
the first audio write, or as its own write first with ``--wav-header-alone``. Server-sent
events (``--sse``, or per request ``"stream_format": "sse"``; ``"audio"`` opts out) answer
``text/event-stream`` in OpenAI's format: one ``data: {"type": "speech.audio.delta", "audio":
BASE64}`` event per chunk, where the audio is always raw PCM16, then ``data: {"type":
"speech.audio.done", "usage": {"input_tokens", "output_tokens", "total_tokens"}}``.
``--chunk-log FILE`` appends one JSON line per streamed answer when it ends: ``request_id``,
``format``, ``received`` (unix seconds the request had been read), ``generating`` (when it
began to share the capacity, after the prefill; null in the slots model) and ``sent`` (unix
seconds at which each audio-carrying write had been handed to the socket) with ``audio_ms``
(audio in each of those writes): the truth to time a client by.

Sessions, with ``--capacity``: vLLM-Omni's WebSocket dialect on ``/v1/audio/speech/stream``
(``session.config``, ``input.text`` pieces, ``input.done``; per sentence ``audio.start``,
binary PCM16 frames, ``audio.done``; then ``session.done``; the connection stays open for the
next utterance unless ``--ws-close-after-done``) and, on ``--wyoming-port``, Wyoming over TCP
(``synthesize``, or ``synthesize-start``/``-chunk``/``-stop`` answered per sentence). Each
sentence is synthesised once its text is in, on the same capacity as the HTTP streams; the
Wyoming port is printed before the HTTP line (``wyoming on tcp://HOST:PORT``). Their
``--chunk-log`` lines carry ``protocol`` (``ws`` or ``wyoming``), ``session``, ``utterance``
(its number on the connection), ``request_id`` (a WebSocket upgrade's ``X-Request-Id``),
``text_first`` and ``text_done`` (unix seconds the first piece and the end of the text
arrived) with ``generating``, ``sent`` and ``audio_ms``. Refusals: at a WebSocket upgrade the
HTTP status and Retry-After, on an open session close 1013, over Wyoming an ``error`` event.

Endpoints: ``POST /v1/audio/speech`` (OpenAI: ``input``, ``voice``, ``response_format`` wav or
pcm, ``stream``, ``stream_format`` sse or audio), ``POST /synthesize`` (piper: ``text``),
``POST /tts`` (``text``) and ``GET /health`` -> ``{"status", "slots" (null: unlimited),
"busy", "queued", "served", "rejected"}``, plus ``"generating"`` with ``--capacity``, and
``GET /metrics``: the same in Prometheus text exposition, named the way vLLM names its own
(``sim:num_requests_waiting``, ``sim:num_requests_running``, ``sim:requests_served_total`` ...),
so a collector's ``--scrape`` has a server queue to read; ``GET /v1/models`` lists one model,
``tts-knee-sim``, as an OpenAI-style server does (a run's provenance reads it).

gRPC (``--grpc-port PORT``): NVIDIA Riva's ``RivaSpeechSynthesis`` (``Synthesize``,
``SynthesizeOnline``) beside HTTP, on the same capacity; after the HTTP line it prints ``listening
on grpc://127.0.0.1:PORT``. See :mod:`testbed.sim.grpc` for how its answers, refusals and drills
look in gRPC.

Limits: ``--queue-limit`` (503 + Retry-After), ``--rate``/``--burst`` (token bucket, 429 +
Retry-After), ``--oom-above`` (500 "CUDA out of memory"), and ``--fault`` knobs for drills
(see ``FAULTS``; one is picked per faulty request; ``exhausted`` is a 429 whose Retry-After is
``--pushback-ms`` rounded up to seconds, ``wrong-encoding`` is gRPC's alone). In a streamed answer ``truncate`` ends the
body cleanly after half the audio (SSE: without the done event), ``reset`` aborts the
connection (RST) there, ``sse-error`` sends an SSE ``error`` event there and ``garbage`` a
malformed SSE event (bad base64 or bad JSON); ``sse-error`` leaves other answers alone, and
``garbage``, ``html``, ``json`` and ``empty`` answer non-SSE streams with their whole wrong body.
``--leak-mb-per-min`` makes it a leaking server for soaks to find: it keeps that much more
written memory each minute (:mod:`~testbed.sim.leak`), so its resident set really grows.
SIGTERM or SIGINT stops it with exit status 0.

The package: :mod:`~testbed.sim.capacity` (limits, slots and both timing models, shared by
every protocol the simulator serves), :mod:`~testbed.sim.faults` (the drills' fault names),
:mod:`~testbed.sim.audio` (the tone or the speech, the drills that break it, and the WAV
header), :mod:`~testbed.sim.http` (the WSGI
app), :mod:`~testbed.sim.ws` and :mod:`~testbed.sim.wyoming` (the session faces) on
:mod:`~testbed.sim.session`, :mod:`~testbed.sim.grpc` (Riva's protocol),
:mod:`~testbed.sim.metrics` (``/health`` and ``/metrics``), :mod:`~testbed.sim.cli` (the
knobs and serving) and :mod:`~testbed.sim.leak` (the leak).
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None, prog: str = "tts-knee sim") -> int:
    """Serve until SIGTERM or SIGINT; 2 on a bad flag or a port that cannot be bound."""
    # the whole simulator runs on gevent: patch before its modules load the standard library
    from gevent import monkey

    monkey.patch_all()
    from tts_knee.testbed.sim.cli import serve

    return serve(argv, prog)
