"""The pipeline's second model: holds its instance for ``cost_ms`` (a model parameter) per request
without using the CPU, as a GPU stage would, then answers with the audio it was given faded in
over its first 10 ms (so the audio passed through it)."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FADE_S = 0.010
SAMPLE_RATE = 22050


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.cost_s = float(parameters["cost_ms"]["string_value"]) / 1000

    def execute(self, requests):
        responses = []
        for request in requests:
            started = time.monotonic()
            audio = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy().reshape(-1).astype(np.float32)
            ramp = min(len(audio), int(FADE_S * SAMPLE_RATE))
            audio[:ramp] *= np.linspace(0.0, 1.0, ramp, endpoint=False, dtype=np.float32)
            time.sleep(max(0.0, self.cost_s - (time.monotonic() - started)))
            out = pb_utils.Tensor("AUDIO", audio.astype(np.int16))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
