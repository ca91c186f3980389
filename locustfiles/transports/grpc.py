"""gRPC: NVIDIA Riva's speech synthesis and Triton Inference Server models, one call per
utterance on the user's HTTP/2 connection (:mod:`locustfiles.transports.h2grpc`), with the
message classes their published packages ship (``nvidia-riva-client``, ``tritonclient``).

- Riva (``--tts-preset riva``): ``Synthesize`` answers the whole audio in one message;
  ``SynthesizeOnline`` (``--tts-stream``) streams it, a message per piece. Each request is a
  full ``SynthesizeSpeechRequest`` (text, language, LINEAR_PCM at ``--tts-sample-rate``, voice,
  an id Riva echoes), as NVIDIA's own clients send it. ``SynthesizeOnline`` takes the text as a
  stream of requests (nvidia-riva-client 2.25 on): the whole text in one, or, with
  ``--text-rate``, the pieces :mod:`locustfiles.inputs.pacing` says when it says, from a greenlet of
  their own while the audio is read, each a :class:`TextSent` (the first carries ``connect_ms``
  where the exchange opened the connection); the request stream's end is the
  end of the text (Riva has no flush of its own, so ``--flush`` only splits the sends). A Riva
  older than 2.25 serves ``SynthesizeOnline`` with one request in and reads only the first piece.
- Triton (``--tts-preset triton`` or a preset file naming the model, its input tensors and its
  audio output): a decoupled model answers on ``ModelStreamInfer``, one response per piece of
  audio, and says it is done with an empty response flagged ``triton_final_response`` (asked
  for with ``triton_enable_empty_final_response``, as tritonclient's ``async_stream_infer``
  does); any other model answers ``ModelInfer`` with the whole audio.

How an answer becomes the attempt's events: each message is a :class:`Received` and, where it
carries audio, an :class:`AudioPiece`; the status the call ends with is the :class:`Answered`
(``status`` the code's name), just before :class:`Ended`. A stream the server breaks off with a
code keeps the audio it sent, timed. What ``--retry-on`` judges a code by (:func:`retry_status`):
``RESOURCE_EXHAUSTED`` and ``UNAVAILABLE`` as the 429 and 503 they amount to, so the default
policy retries them, with the wait ``grpc-retry-pushback-ms`` (or a ``retry-after`` some servers
copy from HTTP) asks for; ``DEADLINE_EXCEEDED`` as a timeout (retried only with ``conn``); any
other code by its own name, which ``--retry-on`` may list. A connection that cannot be opened
or breaks is a connection error, as in HTTP (gRPC's clients call it UNAVAILABLE; the error says so).
"""

from __future__ import annotations

import json
import random
import ssl
import struct
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import gevent
from google.protobuf.message import DecodeError

from tts_knee.audio import containers

from .. import tls
from ..clock import mono, wall
from ..headers import parse_retry_after
from ..inputs import pacing
from .base import (
    NO_ASK,
    Answered,
    Ask,
    AudioPiece,
    Cancel,
    Ended,
    Received,
    TextSent,
    TlsError,
    Transport,
    TransportError,
)
from .h2grpc import Call, Connection, ConnectionLost, Status, os_error

PRESETS_DIR = Path(__file__).resolve().parent.parent.parent / "configs" / "presets"
RIVA_SYNTHESIZE = "/nvidia.riva.tts.RivaSpeechSynthesis/Synthesize"
RIVA_ONLINE = "/nvidia.riva.tts.RivaSpeechSynthesis/SynthesizeOnline"
TRITON_INFER = "/inference.GRPCInferenceService/ModelInfer"
TRITON_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
SERVICES = ("riva", "triton")
TRITON_INPUT_TYPES = ("BYTES", "INT32", "INT64", "FP32", "BOOL")
TRITON_OUTPUT_TYPES = {"INT16": 2, "FP32": 4}  # bytes per sample
_PACK = {"INT32": "<i", "INT64": "<q", "FP32": "<f", "BOOL": "<?"}
#: How --retry-on sees the codes that amount to an HTTP status it knows how to retry.
RETRY_AS_HTTP = {"OK": 200, "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503}


class PresetError(ValueError):
    """A gRPC preset that cannot be used; the message names the file and what is wrong."""


def load_preset(name: str) -> tuple[dict, str]:
    """The preset ``name`` (riva, triton: ``configs/presets/NAME.json``) or file, checked, and
    the name or path it was found by. Raises :class:`PresetError`."""
    path = PRESETS_DIR / f"{name}.json" if name in SERVICES else Path(name)
    try:
        preset = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PresetError(
            f"--tts-preset {name}: cannot read {path} ({error.strerror or error}); give riva, triton or a preset file"
        ) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise PresetError(f"--tts-preset {name}: {path} is not JSON ({error})") from None
    if not isinstance(preset, dict) or preset.get("protocol") != "grpc" or preset.get("service") not in SERVICES:
        raise PresetError(
            f'--tts-preset {name}: {path} must be a JSON object with "protocol": "grpc" and '
            f'"service": one of {", ".join(SERVICES)}'
        )
    if preset["service"] == "triton":
        _check_triton(preset, f"--tts-preset {name}: {path}")
    return preset, name


def _check_triton(preset: dict, where: str) -> None:
    if not isinstance(preset.get("model"), str) or not preset["model"]:
        raise PresetError(f'{where} needs "model", the Triton model\'s name')
    inputs = preset.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(spec, dict) for spec in inputs):
        raise PresetError(f'{where} needs "inputs": a list of {{name, datatype, shape, value}}')
    if sum(spec.get("value") == "{text}" for spec in inputs) != 1:
        raise PresetError(f'{where}: exactly one input\'s "value" must be "{{text}}", where the text goes')
    for spec in inputs:
        if not isinstance(spec.get("name"), str) or spec.get("datatype") not in TRITON_INPUT_TYPES:
            raise PresetError(
                f"{where}: input {spec.get('name')!r} needs a name and a datatype among {', '.join(TRITON_INPUT_TYPES)}"
            )
        if spec["value"] == "{text}" and spec["datatype"] != "BYTES":
            raise PresetError(f"{where}: the text input {spec['name']!r} must be BYTES")
        shape = spec.get("shape", [1])
        if not isinstance(shape, list) or not all(isinstance(dim, int) and dim > 0 for dim in shape):
            raise PresetError(f"{where}: input {spec['name']!r} needs a shape of positive whole numbers")
        if spec["value"] == "{text}":
            continue
        values = spec["value"] if isinstance(spec["value"], list) else [spec["value"]]
        size = 1
        for dim in shape:
            size *= dim
        try:
            if len(values) != size:
                raise ValueError
            _tensor(spec)
        except (ValueError, TypeError, struct.error):
            raise PresetError(
                f"{where}: input {spec['name']!r} needs {size} {spec['datatype']} value"
                f"{'s' if size != 1 else ''} for its shape {shape}, got {spec['value']!r}"
            ) from None
    out = preset.get("output")
    if (
        not isinstance(out, dict)
        or not isinstance(out.get("name"), str)
        or out.get("datatype") not in TRITON_OUTPUT_TYPES
    ):
        raise PresetError(f'{where} needs "output": {{name, datatype}} of the audio, datatype INT16 or FP32')
    if not isinstance(preset.get("sample_rate"), int) or preset["sample_rate"] <= 0:
        raise PresetError(f'{where} needs "sample_rate", the model\'s audio rate in Hz')


def method_path(preset: dict, stream: bool) -> str:
    """The method a run calls: Riva's Synthesize or SynthesizeOnline, Triton's ModelInfer or
    ModelStreamInfer."""
    if preset["service"] == "riva":
        return RIVA_ONLINE if stream else RIVA_SYNTHESIZE
    return TRITON_STREAM if preset.get("decoupled") else TRITON_INFER


def target(host: str) -> tuple[str, int] | None:
    """``grpc://host:port`` (``grpcs://`` for TLS) as (host, port); None when it is not one."""
    parts = urlsplit(host)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("grpc", "grpcs") or not parts.hostname or port is None or parts.path not in ("", "/"):
        return None
    return parts.hostname, port


def transport_for(settings) -> Transport:
    return RivaTransport(settings) if settings.grpc_preset["service"] == "riva" else TritonTransport(settings)


def retry_status(code: str, pushback_refused: bool = False) -> int | str | None:
    """What --retry-on judges the code by (see the module doc); a pushback that says not to
    retry (a negative one) leaves the code to its name."""
    if code == "DEADLINE_EXCEEDED":
        return None
    if code in RETRY_AS_HTTP and not pushback_refused:
        return RETRY_AS_HTTP[code]
    return code


def pushback(metadata: dict) -> tuple[str | None, float | None, bool]:
    """(as sent, seconds, refused) of the wait the server asks for: ``grpc-retry-pushback-ms``
    (gRFC A6: a whole number of ms; negative or not a number: do not retry), else a
    ``retry-after`` (HTTP's delta-seconds or date)."""
    said = metadata.get("grpc-retry-pushback-ms")
    if said is not None:
        raw = f"grpc-retry-pushback-ms: {said}"
        try:
            pushback_ms = int(said)
        except ValueError:
            return raw, None, True
        return (raw, None, True) if pushback_ms < 0 else (raw, pushback_ms / 1000.0, False)
    said = metadata.get("retry-after")
    if said is not None:
        return f"retry-after: {said}", parse_retry_after(said, wall()), False
    return None, None, False


class GrpcTransport(Transport):
    """One HTTP/2 connection to ``-H grpc://host:port``, opened at the first exchange and
    again after it is dropped; a subclass makes the call (:meth:`_call`)."""

    request_type = "gRPC"

    def __init__(self, settings):
        self.s = settings
        self.name = settings.tts_path
        host_port = target(settings.host)
        assert host_port is not None  # settings take only -H grpc://host:port with gRPC
        self.host, self.port = host_port
        self.conn: Connection | None = None
        self.request_id: str | None = None  # the id the last request carried
        self.connect_ms: float | None = None  # opening the connection, where this exchange had to
        self._answered = False  # the exchange yielded its provisional Answered

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    reset = close

    def exchange(self, text: str, ask: Ask = NO_ASK, cancel: Cancel | None = None):
        # one voice: settings refuse a mix for gRPC
        self.request_id, self.connect_ms, self._answered = uuid.uuid4().hex, None, False
        try:
            if self.conn is None or not self.conn.usable:
                self.close()
                started = mono()
                try:
                    self.conn = Connection(self.host, self.port, self.s.connect_timeout, self.s.tls)
                except ssl.SSLError as error:
                    raise TlsError(tls.verify_hint(error, self.s.tls_insecure, bool(self.s.tls_client_cert))) from None
                except OSError as error:
                    raise TransportError(
                        f"cannot connect to {self.host}:{self.port} ({os_error(error)}; gRPC would say UNAVAILABLE)"
                    ) from None
                self.connect_ms = round((mono() - started) * 1000.0, 3)
            call = self.conn.start(
                self.name, (("grpc-timeout", f"{int(self.s.request_timeout * 1000)}m"), *self.s.grpc_metadata)
            )
            if cancel is None:
                yield from self._call(call, text)
            else:
                yield from self._interruptible(call, text, cancel)
        except ConnectionLost as error:
            self.close()
            raise TransportError(
                f"{'gRPC stream open, then ' if self._answered else ''}{error} (gRPC would say UNAVAILABLE)"
            ) from None
        except BaseException:  # the attempt's timeout, or the user stopped: the call is mid-answer
            self.close()
            raise
        if not self.conn.usable:
            self.close()

    def _call(self, call: Call, text: str):
        raise NotImplementedError

    def _interruptible(self, call: Call, text: str, cancel: Cancel):
        """The call, which the listener may interrupt (barge-in): the call's stream is reset
        (RST_STREAM CANCEL, as a gRPC client's cancel does), which stops the server and leaves the
        connection to the next call, and the call ends CANCELLED, quiet at once: nothing more of
        it can arrive. A PING wakes the reader waiting on the socket (any HTTP/2 server answers
        one; gRPC's ping policy forgives it, the server having sent audio since the last)."""

        def hang_up():
            call.cancel()
            if self.conn is call.conn:
                call.conn.wake()

        cancel.hook = hang_up
        for event in self._call(call, text):
            if cancel.at is not None and type(event) in (Answered, Ended):  # the end of the call we cancelled
                break
            yield event
        else:
            if cancel.at is None:
                return
        yield Answered("CANCELLED", True, "gRPC CANCELLED by the listener", None)
        yield Ended(mono(), quiet="closed")

    def _answer(self, call: Call):
        """Each message of the answer as ``(arrival, bytes)``, with a :class:`Received` first;
        before the first, one provisional :class:`Answered`, so that audio which arrived is
        timed even if the connection breaks before the status comes."""
        for arrived_at, msg in call.messages():
            if not self._answered:
                self._answered = True
                yield Answered(None, True, "gRPC stream open", None)
            yield Received(arrived_at, len(msg) + 5)
            yield arrived_at, msg

    def _end(self, status: Status, ended_at: float, pieces: containers.PcmPieces, error: str | None = None):
        """The answer's :class:`Answered` and :class:`Ended`: audio for an OK call with some,
        else the failure in one sentence (``error``: one the client found itself)."""
        code, audio_messages = status.code, len(pieces.pieces)
        raw, wait_s, refused = pushback(status.metadata) if code != "OK" else (None, None, False)
        yield Answered(
            code,
            bool(audio_messages) or code == "OK",
            f"gRPC {code}",
            retry_status(code, refused),
            raw,
            retry_after_s=wait_s,
        )
        if error is None and code != "OK":
            error = f"gRPC {code}" + (f": {status.details}" if status.details else "")
            if audio_messages:
                error += f" after {audio_messages} audio message{'s' if audio_messages != 1 else ''}"
            if code == "UNIMPLEMENTED":
                error += f" ({self.name} is not served there: wrong --tts-preset, or the wrong port?)"
            elif code == "DEADLINE_EXCEEDED":
                error += " (the server's deadline: a timeout)"
        elif error is not None and audio_messages:
            error += f", after {audio_messages} audio message{'s' if audio_messages != 1 else ''}"
        if error is None and not audio_messages:
            error = "gRPC OK, but the answer carried no audio"
        if error is not None:
            yield Ended(ended_at, error, data=pieces.pieces)
            return
        try:
            data, audio = pieces.audio()
        except containers.AudioError as audio_error:
            yield Ended(ended_at, str(audio_error), data=pieces.pieces)
            return
        yield Ended(ended_at, audio=audio, data=data)


class RivaTransport(GrpcTransport):
    """Riva's RivaSpeechSynthesis: Synthesize, or SynthesizeOnline with --tts-stream."""

    def __init__(self, settings):
        super().__init__(settings)
        from riva.client.proto import riva_audio_pb2, riva_tts_pb2

        self._response = riva_tts_pb2.SynthesizeSpeechResponse
        self._request = riva_tts_pb2.SynthesizeSpeechRequest(
            language_code=settings.tts_language or settings.grpc_preset.get("language", ""),
            encoding=riva_audio_pb2.AudioEncoding.LINEAR_PCM,
            sample_rate_hz=settings.tts_sample_rate,
            voice_name=settings.tts_voice,
        )
        self._online = settings.tts_path == RIVA_ONLINE
        self._rng = random.Random()

    def _message(self, text: str) -> bytes:
        req = self._request
        req.text = text
        req.id.value = self.request_id
        return req.SerializeToString()

    def _write(self, call: Call, text: str, sent: list) -> None:
        """The text's pieces, each once it is due (a greenlet of its own): one request each, the
        last ending the request stream."""
        settings = self.s
        pacer = pacing.Pacer(
            pacing.schedule(text, settings.text_rate, settings.text_jitter, self._rng),
            mono(),
            settings.flush == "sentence",
        )
        connect_ms = self.connect_ms  # the first send's, where this exchange opened the connection
        for send in pacer.sends(mono, gevent.sleep):
            if not call.send(self._message(send.text), end=send.last):
                return  # the call ended, or the connection broke: the reader says which
            sent.append(TextSent(mono(), len(send.text), last=send.last, connect_ms=connect_ms))
            connect_ms = None

    def _call(self, call: Call, text: str):
        sent: list[TextSent] = []  # the text's sends so far, to yield
        writer = None
        if self._online and self.s.text_rate:
            writer = gevent.spawn(self._write, call, text, sent)
        else:
            call.send(self._message(text), end=True)
            if self._online:
                sent.append(TextSent(mono(), len(text), last=True, connect_ms=self.connect_ms))
        try:
            yield from self._read(call, sent)
        finally:
            if writer is not None:
                writer.kill(block=False)

    def _read(self, call: Call, sent: list):
        pieces = containers.PcmPieces(self.s.tts_sample_rate)
        for item in self._answer(call):
            if sent:  # the sends the writer made meanwhile, in order
                yield from sent
                sent.clear()
            if type(item) is not tuple:
                yield item
                continue
            arrived_at, msg = item
            try:
                audio = self._response.FromString(msg).audio
                audio_ms = pieces.add(audio)
            except containers.StreamError as error:
                call.cancel()
                yield from self._end(call.outcome()[0], arrived_at, pieces, str(error))
                return
            except DecodeError:
                call.cancel()
                yield from self._end(
                    call.outcome()[0], arrived_at, pieces, "a message that is not a SynthesizeSpeechResponse"
                )
                return
            if audio:
                yield AudioPiece(arrived_at, audio_ms)
        yield from sent
        yield from self._end(*call.outcome(), pieces)


class TritonTransport(GrpcTransport):
    """A Triton model named by the preset: ModelStreamInfer for a decoupled one, else ModelInfer."""

    def __init__(self, settings):
        super().__init__(settings)
        from tritonclient.grpc import service_pb2

        preset = settings.grpc_preset
        self._stream = bool(preset.get("decoupled"))
        self._output, self._datatype = preset["output"]["name"], preset["output"]["datatype"]
        self._width = TRITON_OUTPUT_TYPES[self._datatype]
        self._rate = preset["sample_rate"]
        req = service_pb2.ModelInferRequest(
            model_name=settings.tts_model, model_version=preset.get("model_version") or ""
        )
        for spec in preset["inputs"]:
            req.inputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec.get("shape", [1]))
        req.outputs.add(name=self._output)
        if self._stream:
            req.parameters["triton_enable_empty_final_response"].bool_param = True
        self._req = req
        self._fixed = [None if spec["value"] == "{text}" else _tensor(spec) for spec in preset["inputs"]]
        self._answer_type = service_pb2.ModelStreamInferResponse if self._stream else service_pb2.ModelInferResponse

    def _call(self, call: Call, text: str):
        req = self._req
        req.id = self.request_id
        del req.raw_input_contents[:]
        req.raw_input_contents.extend(_bytes_tensor([text.encode()]) if raw is None else raw for raw in self._fixed)
        call.send(req.SerializeToString(), end=True)
        pieces = containers.PcmPieces(self._rate)
        final = None
        for item in self._answer(call):
            if type(item) is not tuple:
                yield item
                continue
            arrived_at, msg = item
            try:
                answer = self._answer_type.FromString(msg)
            except DecodeError:
                call.cancel()
                yield from self._end(
                    call.outcome()[0], arrived_at, pieces, f"a message that is not a {self._answer_type.__name__}"
                )
                return
            if self._stream:
                if answer.error_message:
                    call.cancel()
                    yield from self._end(
                        Status("OK", ""), arrived_at, pieces, f"Triton failed the request: {answer.error_message}"
                    )
                    return
                answer = answer.infer_response
            try:
                audio = self._audio(answer)
                audio_ms = pieces.add(audio) if audio else 0.0
            except containers.StreamError as error:
                call.cancel()
                yield from self._end(call.outcome()[0], arrived_at, pieces, str(error))
                return
            if audio:
                yield AudioPiece(arrived_at, audio_ms)
            flag = answer.parameters.get("triton_final_response")
            if not self._stream or (flag is not None and flag.bool_param):
                final = arrived_at
        status, ended_at = call.outcome()
        if status.code != "OK":
            yield from self._end(status, ended_at, pieces)
        elif final is None:
            yield from self._end(status, ended_at, pieces, "the stream ended without Triton's final response")
        else:
            yield from self._end(status, final, pieces)

    def _audio(self, answer) -> bytes:
        """The audio output's samples, as PCM16 (FP32 converted); b"" where the response has none."""
        for output_index, out in enumerate(answer.outputs):
            if out.name != self._output:
                continue
            if out.datatype != self._datatype:
                raise containers.StreamError(
                    f"Triton sent {self._output} as {out.datatype}, where the preset says {self._datatype}"
                )
            if output_index >= len(answer.raw_output_contents):
                raise containers.StreamError(f"Triton sent {self._output} without its raw contents")
            raw = answer.raw_output_contents[output_index]
            if self._datatype == "FP32":
                import numpy as np

                samples = np.frombuffer(raw[: len(raw) // 4 * 4], dtype="<f4")
                return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
            return raw
        return b""


def _bytes_tensor(items: list[bytes]) -> bytes:
    """Triton's raw layout of a BYTES tensor: each element's 4-byte little-endian length, then it."""
    return b"".join(struct.pack("<I", len(element)) + element for element in items)


def _tensor(spec: dict) -> bytes:
    """A fixed input's raw contents from the preset's ``value`` (a scalar, or a list laid out flat)."""
    values = spec["value"] if isinstance(spec["value"], list) else [spec["value"]]
    if spec["datatype"] == "BYTES":
        return _bytes_tensor([str(value).encode() for value in values])
    return b"".join(struct.pack(_PACK[spec["datatype"]], value) for value in values)
