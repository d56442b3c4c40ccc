"""Shape arithmetic that folds at a fixed input size (issue 35): ``tf.range(tf.shape(x)[1])`` as
position ids (a GATHER of a position table, a float position ramp), folded while importing as
TensorFlow's converter folds it; the file against TensorFlow's post-training file of the same graph
given its recorded ranges (every scale, zero point and constant; outputs 0 LSB apart in LiteRT REF)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graph and is the oracle")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402
from qconvert.frontend.const_eval import evaluate  # noqa: E402


def _positions_graph() -> bytes:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 4], name="input")
        n = tf.shape(x)[1]
        table = tf.constant(np.random.default_rng(0).normal(size=[10, 4]).astype(np.float32))
        ramp = tf.reshape(tf.cast(tf.range(n), tf.float32), [1, 6, 1])
        y = x + (tf.gather(table, tf.range(n)) * 0.5 + ramp * tf.constant(0.1)
                 + tf.cast(tf.range(1, n + 1, 2)[0], tf.float32))
        tf.identity(tf.nn.relu(y), name="out")
    return g.as_graph_def().SerializeToString()


def test_range_positions_fold_as_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    pb = _positions_graph()
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": [1, 6, 4]})
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, 1, 6, 4)).astype(np.float32)}
    samples["input"] = samples["input"].reshape(8, 6, 4)
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples).model
    assert oracle.op_names(ours) == oracle.op_names(theirs)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 0 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and report.max_lsb == 0, report


class _Node:
    def __init__(self, **attrs: object) -> None:
        self.op, self.name, self.attrs = "Range", "r", attrs


def test_range_values_and_refusals() -> None:
    """np.arange semantics, as tf.range: negative steps, the Tidx dtype; a zero step is one error."""
    assert evaluate(_Node(Tidx="int32"), [np.int32(5), np.int32(-1), np.int32(-2)]).tolist() == [5, 3, 1]
    assert evaluate(_Node(Tidx="float32"), [np.float32(0), np.float32(1), np.float32(0.25)]).dtype == np.float32
    with pytest.raises(ConversionError, match="node 'r' \\(Range\\)"):
        evaluate(_Node(Tidx="int32"), [np.int32(0), np.int32(4), np.int32(0)])
