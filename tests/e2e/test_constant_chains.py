"""Chains of constant additions, as TensorFlow 2.21 folds them (issue 35, "look for siblings"):
``x + c1 + c2`` is one ADD of ``c1 + c2``; a convolution's BiasAdd, then ``+ c``, then ``+ c`` all go
into its bias; ``x + c1 - c2`` and ``x · c1 · c2`` stay two ops. Each graph against TensorFlow's
post-training file given its recorded ranges: the same operators, every scale, zero point and
constant exact, outputs 0 LSB apart in LiteRT REF."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402


def _c(rng: np.random.Generator, *shape: int) -> Any:
    return tf.constant(rng.normal(size=shape).astype(np.float32))


CASES: dict[str, Callable[[Any, np.random.Generator], Any]] = {
    "add_add": lambda x, r: (x + _c(r, 4)) + _c(r, 4),
    "scalar_then_tensor": lambda x, r: (x + 1.0) + _c(r, 1, 6, 4),
    "three_adds": lambda x, r: ((x + _c(r, 4)) + _c(r, 6, 4)) + 0.3,
    "conv_bias_add_add": lambda x, r: (tf.nn.bias_add(tf.nn.conv2d(tf.reshape(x, [1, 6, 4, 1]), _c(r, 1, 1, 1, 4), 1,
                                                                   "SAME"), _c(r, 4)) + _c(r, 4)) + _c(r, 4),
    "add_sub": lambda x, r: (x + _c(r, 4)) - _c(r, 4),
    "mul_mul": lambda x, r: (x * _c(r, 4)) * _c(r, 4),
    "inner_read_twice": lambda x, r: (lambda a: (a + _c(r, 4)) + tf.nn.relu(a))(x + _c(r, 4)),
    # x · 0 folds only when the zero operand has the product's shape (grappler's rule): not here
    "times_broadcast_zeros": lambda x, r: x * tf.zeros([4]) + _c(r, 4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_constant_chains_as_tensorflow(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 4], name="input")
        tf.identity(tf.nn.relu(CASES[name](x, rng)), name="out")
    pb = g.as_graph_def().SerializeToString()
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": [1, 6, 4]})
    samples = {"input": rng.uniform(-1, 1, (8, 6, 4)).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples).model
    assert sorted(oracle.op_names(ours)) == sorted(oracle.op_names(theirs))
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert not report.unpaired and report.max_rel_scale == 0 and not report.zero_point_diffs, report
    assert not report.weight_diffs and report.max_lsb == 0, report


def test_an_output_that_does_not_read_the_input_is_refused_in_one_line() -> None:
    """``x · zeros`` of x's shape folds (TensorFlow's graph optimizer; its file then has no operator
    and a dangling input): qconvert says the outputs do not depend on the input."""
    from qconvert.errors import ConversionError

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 4], name="x")
        tf.identity(x * tf.zeros([1, 6, 4]) + 1.0, name="out")
    with pytest.raises(ConversionError, match="input 'x': no op reads it once constants are folded"):
        convert_graph(g.as_graph_def().SerializeToString(), inputs=["x"], outputs=["out"],
                      calibration_data={"x": np.ones((2, 6, 4), np.float32)})
