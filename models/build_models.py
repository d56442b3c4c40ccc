"""Build the example QAT model shipped in models/ (needs TensorFlow).

    python models/build_models.py          # writes models/example_qat.pb

The model is a small image classifier over 1x28x28x1 inputs, built as a TF1-style
quantization-aware-training graph: FakeQuant on every weight and after every activation
(none on the input: its range comes from ``--inputs-range``), with ranges "learned" from random inputs. It uses the same
graph helpers as the end-to-end test corpus (tests/fixtures/corpus.py). The output is
deterministic: the same bytes on every run.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))

from corpus import CorpusModel, GraphBuilder, build_qat_graph  # noqa: E402

SEED = 2024
INPUT_RANGE = (-1.0, 1.0)


def example_classifier(b: GraphBuilder) -> str:
    """conv 3x3/2 -> ReLU -> depthwise 3x3 -> ReLU6 -> conv 1x1 -> ReLU -> MaxPool -> dense -> Softmax."""
    tf = b.tf
    x = b.input("input", [1, 28, 28, 1], INPUT_RANGE, fake_quant=None)  # range from the command line
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 8, stride=2)), "conv1")  # 14x14x8
    y = b.act(tf.nn.relu6(b.depthwise(y, 3, 1)), "dw1")  # 14x14x8
    y = b.act(tf.nn.relu(b.conv(y, 1, 1, 16)), "pw1")  # 14x14x16
    y = tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")  # 7x7x16
    y = tf.reshape(y, [-1, 7 * 7 * 16])
    y = b.act(b.dense(y, 10), "logits")
    b.output(tf.nn.softmax(y), "output")
    return "example 10-class QAT classifier over 1x28x28x1"


def build() -> CorpusModel:
    return build_qat_graph("example_qat", SEED, example_classifier)


def main() -> int:
    model = build()
    out = HERE / "example_qat.pb"
    out.write_bytes(model.graph_def)
    lo, hi = model.input_ranges["input"]
    print(f"wrote {out} ({len(model.graph_def)} bytes, sha256 "
          f"{hashlib.sha256(model.graph_def).hexdigest()[:16]})")
    print(f"inputs {model.inputs} {model.shapes}, outputs {model.outputs}; "
          f"convert with: qconvert {out.name} --inputs-range input={lo:g},{hi:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
