"""`qconvert run` on float islands (issue 37): LiteRT REF's float32 kernels, bit for bit.

Oracle: LiteRT 2.3's interpreter with ``OpResolverType.BUILTIN_REF`` and every intermediate tensor kept.
The model is a small CNN holding every op kind a float island takes here (CONV_2D, DEPTHWISE_CONV_2D
with a depth multiplier, ADD, LOGISTIC, MUL, SUB, MEAN, FULLY_CONNECTED, TANH, CONCATENATION,
RESHAPE, BATCH_MATMUL, SOFTMAX, fused RELU/RELU6), every weight and bias drawn at random (non-zero
biases: LiteRT REF adds a bias after the products, its optimized kernels before them), converted by
qconvert with ``--keep-float`` on all of it or on parts of it. Then single float ops on inputs that
cross LOGISTIC's cutoffs and TANH's saturation, against TensorFlow's float .tflite in LiteRT REF.
"""

from __future__ import annotations


import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the model")
keras = pytest.importorskip("tf_keras", reason="the model is a tf-keras model")

import oracle
from model_cache import cached

from qconvert.schema.reader import read_model

CALIB = np.random.default_rng(1).uniform(-1, 1, (16, 8, 8, 3)).astype(np.float32)


def _freeze(model: object, shape: list[int]) -> bytes:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    fn = tf.function(lambda t: model(t, training=False))  # type: ignore[operator]
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(tf.TensorSpec(shape, tf.float32,
                                                                                       name="input")))
    return frozen.graph.as_graph_def().SerializeToString()


def _build() -> bytes:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu6")(x)
    x = L.Add()([x, L.Conv2D(8, 1)(y)])
    x = L.Multiply()([x, L.Conv2D(8, 1, activation="sigmoid")(x)])
    x = L.Subtract()([x, L.Conv2D(8, 3, strides=2, padding="same")(x)[:, :1, :1, :]])
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(16, activation="tanh")(x)
    x = L.Reshape((4, 5))(L.Concatenate()([x, L.Dense(4)(x)]))
    x = L.Reshape((16,))(L.Lambda(lambda t: tf.matmul(t, t, transpose_b=True))(x))
    model = keras.Model(inp, L.Softmax()(L.Dense(10)(x)))
    rng = np.random.default_rng(0)
    for layer in model.layers:
        layer.set_weights([rng.normal(0, 0.6, w.shape).astype(np.float32) for w in layer.get_weights()])
    return _freeze(model, [1, 8, 8, 3])


@pytest.fixture(scope="module")
def cnn() -> bytes:
    return cached("float_islands_cnn_v1.pb", _build)


@pytest.mark.parametrize("patterns", [
    ["."],  # every compute op float, between the input's DEQUANTIZE and the output's QUANTIZE
    ["depthwise", "Sigmoid", "Mean", "MatMul", "Softmax", "Tanh"],  # islands between int8 ops
])
def test_every_float_op_kind_equals_litert_ref(cnn: bytes, patterns: list[str]) -> None:
    from qconvert.api import convert_graph

    r = convert_graph(cnn, inputs=["input"], outputs=["Identity"], calibration_data={"input": CALIB},
                      keep_float=patterns)
    sg = read_model(r.model).subgraphs[0]
    kinds = {op.builtin for op in sg.operators if sg.tensors[op.outputs[0]].dtype == "float32"}
    int8 = {op.builtin for op in sg.operators if sg.tensors[op.outputs[0]].dtype == "int8"}
    assert int8 == {"QUANTIZE"} if patterns == ["."] else int8 > {"QUANTIZE"}, int8
    if patterns == ["."]:
        assert kinds >= {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "LOGISTIC", "MUL", "SUB", "MEAN", "FULLY_CONNECTED",
                         "TANH", "CONCATENATION", "RESHAPE", "BATCH_MATMUL", "SOFTMAX", "STRIDED_SLICE"}, kinds
    assert oracle.assert_run_equals_litert_everywhere(r.model, n=48) > 20


def _one_op_float_file(fn: object, shape: list[int]) -> bytes:
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(shape, tf.float32))  # type: ignore[arg-type]
    return tf.lite.TFLiteConverter.from_concrete_functions([concrete]).convert()


@pytest.mark.parametrize("op", ["TANH", "LOGISTIC", "SOFTMAX", "MEAN", "SUM"])
def test_float_kernels_over_wide_inputs(op: str) -> None:
    """Inputs from -40 to 40 (LOGISTIC's cutoffs at -9 and 16.62, TANH's saturation, SOFTMAX's exp
    underflow), and MEAN/SUM over two axes of 37 and 29 elements (where a pairwise sum would differ)."""
    from qconvert.runtime.float_ref import FLOAT_KERNELS

    shape = [3, 37, 29] if op in ("MEAN", "SUM") else [4, 1000]
    fns = {"TANH": tf.math.tanh, "LOGISTIC": tf.math.sigmoid, "SOFTMAX": tf.nn.softmax,
           "MEAN": lambda t: tf.reduce_mean(t, axis=[1, 2]), "SUM": lambda t: tf.reduce_sum(t, axis=[2, 1])}
    tflite = _one_op_float_file(fns[op], shape)
    ops = [o.builtin for o in read_model(tflite).subgraphs[0].operators]
    assert ops == [op], ops
    rng = np.random.default_rng(7)
    for scale in (1.0, 10.0, 40.0):
        x = (rng.uniform(-1, 1, shape) * scale).astype(np.float32)
        expected = oracle.run_litert(tflite, {"x": x})[0]
        args = [np.array([1, 2], np.int32)] if op in ("MEAN", "SUM") else []
        got = FLOAT_KERNELS[op]({"beta": 1.0}, x, *args, output_shape=expected.shape)
        assert got.dtype == np.float32 and got.tobytes() == expected.tobytes(), \
            (op, scale, int(np.sum(got != expected)))
