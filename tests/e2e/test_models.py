"""The demo models shipped in models/: they convert, and the digits model keeps its accuracy.

The digits model (models/build_digits.py) was trained with tensorflow-model-optimization's
QAT on scikit-learn's digits; its own accuracy in TensorFlow is recorded in
digits_qat.json. The int8 model qconvert writes must stay within 1 point of it when run
in LiteRT (the oracle here is the held-out labels), and must match TensorFlow's converter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from qconvert.api import convert_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))


def test_digits_int8_accuracy_within_one_point(tmp_path: Path) -> None:
    import numpy as np
    from evaluate_digits import int8_accuracy

    out = tmp_path / "digits.tflite"
    out.write_bytes(convert_bytes(ROOT / "models" / "digits_qat.pb"))
    data = np.load(ROOT / "models" / "digits_test.npz")
    qat = json.loads((ROOT / "models" / "digits_qat.json").read_text())["qat_float_accuracy"]
    acc = int8_accuracy(out, data["input"], data["labels"])
    assert qat > 0.9, "the demo model should be a real classifier"
    assert abs(acc - qat) <= 0.01, f"int8 {acc:.4f} vs QAT {qat:.4f}"


@pytest.mark.parametrize("name", ["digits_qat", "example_qat"])
def test_demo_models_match_tensorflow(name: str) -> None:
    pytest.importorskip("tensorflow", reason="TensorFlow is the oracle")
    import corpus
    import oracle

    from qconvert.frontend.graphdef import read_graphdef
    from qconvert.frontend.importer import detect_outputs

    pb = ROOT / "models" / f"{name}.pb"
    nodes = read_graphdef(pb)
    (ph,) = [n for n in nodes if n.op == "Placeholder"]
    m = corpus.CorpusModel(name=name, graph_def=pb.read_bytes(), inputs=[ph.name], outputs=detect_outputs(nodes),
                           shapes={ph.name: list(ph.attrs["shape"])}, input_ranges={ph.name: (-1.0, 1.0)},
                           description="", ops=frozenset())
    ours = convert_bytes(pb, {ph.name: (-1.0, 1.0)})
    oracle.compare_models(ours, oracle.tf_convert(m), n_inputs=16)
    assert oracle.float_tensors(ours) == []
