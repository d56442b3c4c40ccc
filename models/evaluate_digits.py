"""Accuracy of a converted digits model, int8 through LiteRT, next to the QAT model's own.

    python models/evaluate_digits.py digits_qat.tflite

Needs only numpy and ai-edge-litert (both installed with qconvert). The float
accuracy is the QAT Keras model's, measured in TensorFlow when the model was built
(``digits_qat.json``); the int8 accuracy is measured here: each test image is
quantized with the model's input scale and zero point, run in LiteRT's reference
kernels, and the arg-max of the int8 output is compared with the label.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def int8_accuracy(tflite_path: str | Path, images: np.ndarray, labels: np.ndarray) -> float:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(tflite_path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    scale, zero_point = inp["quantization"]
    correct = 0
    for image, label in zip(images, labels):
        q = np.clip(np.round(image / scale) + zero_point, -128, 127).astype(np.int8)
        it.set_tensor(inp["index"], q[None])
        it.invoke()
        correct += int(np.argmax(it.get_tensor(out["index"])[0]) == label)
    return correct / len(labels)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python models/evaluate_digits.py MODEL.tflite", file=sys.stderr)
        return 2
    data = np.load(HERE / "digits_test.npz")
    info = json.loads((HERE / "digits_qat.json").read_text())
    acc = int8_accuracy(argv[0], data["input"], data["labels"])
    qat = info["qat_float_accuracy"]
    n = len(data["labels"])
    print(f"digits test set ({n} images): QAT model in TensorFlow {qat:.2%}, int8 model in LiteRT {acc:.2%} "
          f"(difference {100 * (acc - qat):+.2f} points)")
    return 0 if abs(acc - qat) <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
