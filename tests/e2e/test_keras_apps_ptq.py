"""keras.applications under post-training quantization, against TensorFlow's converter.

TensorFlow's calibrator runs its own float kernels (Eigen, 4 threads), and the last bits
of a deep network's recorded ranges depend on their summation order: no other executor
reproduces them on every model (numpy: 6 of VGG16's 20 ranges; ai-edge-litert's kernels:
20 of 20 on VGG16, 15 of 74 on ResNet50). So the comparison here gives qconvert
TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics``) and checks everything
after the recording: which ranges are kept, every scale and zero point, every int8 weight
and int32 bias, and every output byte in LiteRT REF. BatchNorm is folded with TensorFlow's
rsqrt for the same reason (``oracle.use_tensorflows_rsqrt``).

Models: ``include_top=False`` with global average pooling, ``weights=None`` from a fixed
seed, trained briefly (``keras_apps.train_briefly``: two SGD steps, then BatchNorm statistics from a
batch, so activations keep a realistic scale through the depth), at the smallest input each
accepts (32 px), calibrated on 8 samples. Each takes 30 s to 60 s (build, TensorFlow's two
conversions, ours).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the models and is the oracle")
keras = pytest.importorskip("tf_keras", reason="keras.applications comes from tf-keras")

# VGG16: plain convs and pools; ResNet50: BatchNorm folding, ADD, in-place calibration;
# DenseNet121: concats whose range reaches back through MaxPool and Pad; ResNet50V2 and
# MobileNetV3Small: ZeroPadding2D folded into SAME convolutions, hard-swish; RegNetX002: grouped
# convolutions, which Keras writes as jit-compiled functions (PartitionedCall) that we inline;
# ConvNeXtTiny: LayerNormalization (MEAN, SQUARED_DIFFERENCE, RSQRT, SUB) and GELU, Dense on 4-D
# EfficientNetB0: squeeze-and-excite (MEAN that keeps its dims, MEAN over 1x1 removed), the input
# Rescaling folded into the stem convolution's weights after its BatchNorm factor
ARCHITECTURES = ["VGG16", "ResNet50", "DenseNet121", "ResNet50V2", "MobileNetV3Small", "RegNetX002", "ConvNeXtTiny",
                 "EfficientNetB0"]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_bit_exact_with_tensorflows_ptq_given_its_ranges(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import keras_apps
    import oracle

    from qconvert.api import convert_graph

    pb, shape = keras_apps.build(name)
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)  # BatchNorm folding: TF's CPU rsqrt (docs/differences.md, "Where we differ")
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 20 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0, report
