"""nnstreamer's trained float MNIST graph (../shared/realmodels/nnstreamer/mnist.pb), calibrated
on handwritten digits, against TensorFlow's ``representative_dataset`` conversion (issue 15:
bit-exact, and stays so). The samples are scikit-learn's 8×8 digits (data that ships inside a
package) scaled to 28×28 in [0, 1], as MNIST images are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT.parent / "shared" / "realmodels" / "nnstreamer" / "mnist.pb"



@pytest.mark.skipif(not MNIST.is_file(), reason=f"{MNIST} is absent (a real third-party graph)")
def test_mnist_ptq_is_bit_exact_with_tensorflow() -> None:
    pytest.importorskip("tensorflow", reason="TensorFlow's post-training quantizer is the oracle")
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn ships the digits")
    import oracle

    from qconvert.api import convert_graph

    digits = datasets.load_digits().images[:64] / 16.0  # [64, 8, 8] in [0, 1]
    big = np.kron(digits, np.ones((3, 3)))  # 24 × 24
    images = np.pad(big, ((0, 0), (2, 2), (2, 2))).reshape(64, 784).astype(np.float32)
    samples = {"input": images}
    pb = MNIST.read_bytes()
    theirs = oracle.tf_ptq_convert(oracle.FloatGraph(pb, ["input"], ["softmax"], {"input": [1, 784]}), samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["softmax"], calibration_data=samples).model
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.within_1 == report.outputs, report
