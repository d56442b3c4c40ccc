"""The float kernels calibration runs, against LiteRT's builtin (optimized) kernels: the
kernels TensorFlow's calibrator runs (BuiltinOpResolver, no delegate). A range is the min
and max of these values, so "close" is not enough: the last bits decide a scale's bits.

The oracle is a one-op model written by TensorFlow's converter, run in LiteRT with
``BUILTIN_WITHOUT_DEFAULT_DELEGATES``; ours is ``qconvert.ops.float_kernels`` on the same
weights in TFLite's layout.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest

from qconvert.ops import float_kernels

DEPTHWISE_CASES = [  # size, channels, kernel, stride, multiplier, dilation, padding, activation
    (17, 8, 3, 1, 1, 1, "same", "relu6"),
    (16, 5, 3, 2, 1, 1, "same", None),
    (9, 4, 5, 1, 2, 1, "valid", "relu"),
    (12, 6, 3, 1, 1, 2, "same", None),
    (15, 3, 3, 2, 3, 1, "valid", None),
    (19, 4, 3, (1, 2), 1, 1, "same", None),  # column phases: stride 2 across, 1 down
    (20, 3, 3, 3, 2, 1, "same", "relu"),
    (11, 6, 3, (2, 1), 1, 1, "valid", None),
]


@pytest.fixture(scope="module")
def tf():  # type: ignore[no-untyped-def]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow", reason="TensorFlow's converter writes the one-op oracle models")


def _litert_builtin(tflite: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_depthwise_equals_litert_builtin_on_every_output(tf, case) -> None:  # type: ignore[no-untyped-def]
    size, channels, k, stride, mult, dilation, padding, act = case
    rng = np.random.default_rng(size * 100 + channels)
    inp = tf.keras.Input((size, size, channels), batch_size=1)
    layer = tf.keras.layers.DepthwiseConv2D(k, strides=stride, padding=padding, depth_multiplier=mult,
                                            dilation_rate=dilation, activation=act)
    model = tf.keras.Model(inp, layer(inp))
    w = rng.normal(0, 1, layer.get_weights()[0].shape).astype(np.float32)  # [kh, kw, C, M]
    b = rng.normal(0, 1, layer.get_weights()[1].shape).astype(np.float32)
    layer.set_weights([w, b])
    tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    x = rng.normal(0, 1, (1, size, size, channels)).astype(np.float32)
    theirs = _litert_builtin(tflite, x)

    sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
    node = SimpleNamespace(name="dw", attrs={
        "stride_h": sh, "stride_w": sw, "dilation_h_factor": dilation, "dilation_w_factor": dilation,
        "padding": padding.upper(), "fused_activation_function": {"relu6": "RELU6", "relu": "RELU"}.get(act, "NONE")})
    ours = float_kernels.depthwise_conv_2d(node, x, w.reshape(1, k, k, channels * mult), b)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs), f"{np.count_nonzero(ours != theirs)} of {ours.size} outputs differ"
