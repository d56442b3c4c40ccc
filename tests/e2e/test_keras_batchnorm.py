"""Keras-style graphs (issue 15, item 4): BatchNormalization spelled as Rsqrt/Mul/Sub/Add on
constants and ReLU6 as ``Relu`` then ``clip_by_value``, with a dead output channel (all-zero
kernel) carrying a bias of −1.25 and a channel whose bias is large for its weights: against
TensorFlow's post-training quantization of the same float graph on the same samples.

TensorFlow folds the Rsqrt with its CPU kernel, whose bits depend on the CPU (see
tests/e2e/test_real_kws.py); the test gives qconvert TensorFlow's own rsqrt values so that
everything else is compared bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graph and is the oracle")



def _graph() -> bytes:
    tf1 = tf.compat.v1
    rng = np.random.default_rng(11)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        k = rng.normal(0, 0.3, (3, 3, 3, 16)).astype(np.float32)
        k[..., 1] = 0.0  # a dead channel
        k[..., 2] *= 1e-4  # weights tiny for their bias
        y = tf.nn.conv2d(x, tf.constant(k), [1, 1, 1, 1], "SAME")
        gamma = rng.uniform(0.5, 1.5, 16).astype(np.float32)
        beta = rng.normal(0, 0.2, 16).astype(np.float32)
        beta[1], beta[2] = -1.25, 40.0
        mean = rng.normal(0, 0.1, 16).astype(np.float32)
        var = rng.uniform(0.2, 2.0, 16).astype(np.float32)
        scale = tf.constant(gamma) * tf.math.rsqrt(tf.constant(var) + 1e-3)  # Keras' batchnorm arithmetic
        y = y * scale + (tf.constant(beta) - tf.constant(mean) * scale)
        y = tf.clip_by_value(tf.nn.relu(y), 0.0, 6.0)
        w2 = rng.normal(0, 0.2, (1, 1, 16, 4)).astype(np.float32)
        y = tf.nn.conv2d(y, tf.constant(w2), [1, 1, 1, 1], "VALID")
        tf.identity(tf.reduce_mean(y, axis=[1, 2]), name="out")
    return g.as_graph_def().SerializeToString()


def test_keras_batchnorm_and_relu6_with_dead_and_large_bias_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    from qconvert.api import convert_graph

    oracle.use_tensorflows_rsqrt(monkeypatch)
    pb = _graph()
    samples = {"input": np.random.default_rng(2).uniform(-1, 1, (32, 8, 8, 3)).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(oracle.FloatGraph(pb, ["input"], ["out"], {"input": [1, 8, 8, 3]}), samples)
    result = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples)
    report = oracle.compare_ptq(result.model, theirs, samples, ["input"])
    print(f"\n{report}; notes: {result.notes}")
    assert report.tensors > 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.within_1 == report.outputs, report
    assert any("enlarged" in n for n in result.notes)  # the dead and the large-bias channels
