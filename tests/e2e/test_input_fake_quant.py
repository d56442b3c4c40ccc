"""A graph input followed by a FakeQuant, then a same-scale op (QAT, TensorFlow's frozen-graph path),
measured on TF 2.21: after a ``FakeQuantWithMinMaxArgs`` the input takes the FakeQuant's parameters
whatever ``--inputs-range`` says and no QUANTIZE follows; after a ``FakeQuantWithMinMaxVars`` a Reshape
or a Transpose moves above the FakeQuant, the input takes ``--inputs-range`` and a QUANTIZE follows the
op (qconvert moved a Reshape above both kinds, and a Transpose above neither, before). Each graph
against TensorFlow's file: the operators, the input's parameters, and outputs in LiteRT REF."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402


@dataclass
class _Model:
    name: str
    graph_def: bytes
    inputs: list = field(default_factory=lambda: ["input"])
    outputs: list = field(default_factory=lambda: ["out"])
    shapes: dict = field(default_factory=lambda: {"input": [1, 4, 4, 2]})
    input_ranges: dict = field(default_factory=dict)


def _after(kind: str, q):  # type: ignore[no-untyped-def]
    if kind == "reshape":
        return tf.reshape(q, [1, 32])
    if kind == "reshape_fc":
        w = tf.quantization.fake_quant_with_min_max_args(
            tf.constant(np.linspace(-1, 1, 128, dtype=np.float32).reshape(32, 4)), -1, 1, narrow_range=True)
        return tf.quantization.fake_quant_with_min_max_args(tf.matmul(tf.reshape(q, [1, 32]), w), -8, 8)
    if kind == "reshape_relu":
        return tf.quantization.fake_quant_with_min_max_args(tf.nn.relu(tf.reshape(q, [1, 32])), 0, 1)
    if kind == "transpose":
        return tf.transpose(q, [0, 3, 1, 2])
    return tf.nn.max_pool2d(q, 2, 2, "VALID")


@pytest.mark.parametrize("fake_quant", ["args", "vars"])
@pytest.mark.parametrize("stated", [(-1.0, 1.0), (-2.0, 2.0)], ids=["same_range", "other_range"])
@pytest.mark.parametrize("kind", ["reshape", "reshape_fc", "reshape_relu", "transpose", "maxpool"])
def test_input_fake_quant_then_a_same_scale_op_as_tensorflow(kind: str, stated: tuple[float, float],
                                                              fake_quant: str) -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 2], name="input")
        if fake_quant == "args":
            q = tf.quantization.fake_quant_with_min_max_args(x, -1, 1)
        else:
            q = tf.quantization.fake_quant_with_min_max_vars(x, tf.constant(-1.0), tf.constant(1.0))
        tf.identity(_after(kind, q), name="out")
    m = _Model(kind, g.as_graph_def().SerializeToString(), input_ranges={"input": stated})
    theirs = oracle.tf_convert(m)
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, inputs_range=m.input_ranges).model
    assert oracle.op_names(ours) == oracle.op_names(theirs)
    assert oracle.compare_models(ours, theirs, n_inputs=8).max_abs_diff == 0


@pytest.mark.parametrize("producer", ["conv", "add", "relu6"])
def test_fake_quant_then_reshape_then_relu_keeps_tensorflows_order(producer: str) -> None:
    """``op → FakeQuant → RESHAPE → RELU → FakeQuant`` (QAT): TensorFlow moves the RESHAPE above the
    FakeQuant and keeps RESHAPE → RELU (the post-training rule moves the RELU before the RESHAPE)."""
    fq = tf.quantization.fake_quant_with_min_max_args
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 2], name="input")
        q = fq(x, -1, 1)
        if producer == "conv":
            w = fq(tf.constant(np.random.default_rng(0).normal(0, 0.3, (1, 1, 2, 2)).astype(np.float32)), -1, 1,
                   narrow_range=True)
            h = fq(tf.nn.conv2d(q, w, 1, "SAME"), -2, 2)
        elif producer == "add":
            h = fq(q + fq(tf.constant(np.full((1, 4, 4, 2), 0.5, np.float32)), 0, 1), -2, 2)
        else:
            h = fq(tf.nn.relu6(q), 0, 1)
        tf.identity(fq(tf.nn.relu(tf.reshape(h, [1, 32])), 0, 2), name="out")
    m = _Model(producer, g.as_graph_def().SerializeToString(), input_ranges={"input": (-1.0, 1.0)})
    theirs = oracle.tf_convert(m)
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, inputs_range=m.input_ranges).model
    assert oracle.op_names(ours) == oracle.op_names(theirs)
    assert oracle.compare_models(ours, theirs, n_inputs=8).max_abs_diff == 0
