"""Three patterns of CNN code against TensorFlow 2.21's converter (issue 35): hard-swish written
by hand, ``tf.split`` pieces requantized for different readers, and a squeeze-and-excite RESHAPE
before a broadcasting op.

Each case is a small float graph (``tf.function`` frozen), converted by TensorFlow's post-training
quantizer and by qconvert given TensorFlow's recorded ranges (as tests/e2e/test_keras_apps_ptq.py
does), then compared op by op (``oracle.compare_ptq``: every scale, zero point and weight, and every
output byte in LiteRT REF), with TensorFlow's op list. The hard-swish spellings also go through the
QAT path (FakeQuants around the activation, ``oracle.tf_convert``).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")

SHAPE = [1, 8, 8, 3]
_rng = np.random.default_rng(0)
W1 = _rng.normal(0, .5, (3, 3, 3, 8)).astype(np.float32)
W2 = _rng.normal(0, .3, (1, 1, 8, 8)).astype(np.float32)
W4 = _rng.normal(0, .8, (3, 3, 4, 4)).astype(np.float32)
W16 = _rng.normal(0, .5, (3, 3, 3, 16)).astype(np.float32)
D16 = _rng.normal(0, .5, (16, 16)).astype(np.float32)


def _freeze(fn: Callable[[Any], Any]) -> tuple[bytes, list[str]]:
    from tensorflow.python.framework import convert_to_constants

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(SHAPE, tf.float32, name="input"))
    frozen = convert_to_constants.convert_variables_to_constants_v2(cf)
    return frozen.graph.as_graph_def().SerializeToString(), [t.name.split(":")[0] for t in frozen.outputs]


def _ptq_against_tensorflow(fn: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    """(ours, TensorFlow's) post-training files of ``fn``'s graph, ours given TF's ranges; asserts
    they agree on every parameter, weight and output byte."""
    import oracle

    from qconvert.api import convert_graph

    pb, outs = _freeze(fn)
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *SHAPE[1:])).astype(np.float32)}
    model = oracle.FloatGraph(pb, ["input"], outs, {"input": SHAPE})
    with redirect_stdout(io.StringIO()):
        theirs = oracle.tf_ptq_convert(model, samples)
        stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, unpaired
    ours = convert_graph(pb, inputs=["input"], outputs=outs, calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert not report.unpaired and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_rel_scale < 1e-6 and report.max_lsb == 0, report
    assert Counter(oracle.op_names(ours)) == Counter(oracle.op_names(theirs))
    return ours, theirs


# ---------------------------------------------------------------------------
# 1. hard-swish by hand
# ---------------------------------------------------------------------------

S = 1 / 6
# spelling → whether TensorFlow 2.21 fuses it into one HARD_SWISH (measured; r = relu6(x + 3))
HARD_SWISH = {
    "x*r/6": (lambda x, r: x * r / 6, True),  # Keras code's hard-swish: (x * relu6(x + 3)) / 6
    "x*r*(1/6)": (lambda x, r: x * r * S, True),
    "(1/6)*(x*r)": (lambda x, r: S * (x * r), True),
    "tf.divide": (lambda x, r: tf.math.divide(tf.multiply(x, r), 6.0), True),
    "x*(r/6)": (lambda x, r: x * (r / 6), True),  # Keras' hard_sigmoid times x
    "(r/6)*x": (lambda x, r: (r / 6) * x, True),
    "x*((1/6)*r)": (lambda x, r: x * (S * r), True),
    "r*x/6": (lambda x, r: r * x / 6, False),  # the product the other way round: ADD, MUL (1/6 into the conv)
    "r*x*(1/6)": (lambda x, r: r * x * S, False),
    "x*r*0.1667": (lambda x, r: x * r * 0.1667, False),  # not 1/6 in float32
}


@pytest.mark.parametrize("spelling", sorted(HARD_SWISH))
def test_hard_swish_spellings_as_tensorflow(spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    f, fused = HARD_SWISH[spelling]

    def fn(x: Any) -> Any:
        y = tf.nn.conv2d(x, W1, 1, "SAME")
        return tf.nn.conv2d(f(y, tf.nn.relu6(y + 3.0)), W2, 1, "SAME")  # a conv after: the 1/6 could fold into it

    ours, theirs = _ptq_against_tensorflow(fn, monkeypatch)
    assert ("HARD_SWISH" in oracle.op_names(theirs)) == fused  # the measurement the table above records
    assert oracle.op_names(ours) == oracle.op_names(theirs)


# the clamp written with Minimum/Maximum instead of relu6 (both orders): TensorFlow fuses both into one
# HARD_SWISH, and a standalone min(max(x, 0), 6) is one RELU6 (measured); qconvert turned the inner
# Maximum(x, 0) into a RELU first and kept ADD, MINIMUM, MUL for the first
CLAMPS = {
    "min(max(x+3,0),6)": lambda y: y * tf.minimum(tf.maximum(y + 3.0, 0.0), 6.0) / 6.0,
    "max(min(x+3,6),0)": lambda y: y * tf.maximum(tf.minimum(y + 3.0, 6.0), 0.0) / 6.0,
    "min(max(x,0),6) alone": lambda y: tf.minimum(tf.maximum(y, 0.0), 6.0),
}


@pytest.mark.parametrize("spelling", sorted(CLAMPS))
def test_clamp_spellings_as_tensorflow(spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    def fn(x: Any) -> Any:
        return tf.nn.conv2d(CLAMPS[spelling](tf.nn.conv2d(x, W1, 1, "SAME")), W2, 1, "SAME")

    ours, theirs = _ptq_against_tensorflow(fn, monkeypatch)
    assert "MINIMUM" not in oracle.op_names(theirs)  # the measurement the comment above records
    assert oracle.op_names(ours) == oracle.op_names(theirs)


def test_hard_swish_with_the_constant_first_in_the_add(monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    def fn(x: Any) -> Any:
        y = tf.nn.conv2d(x, W1, 1, "SAME")
        return tf.nn.conv2d(y * tf.nn.relu6(3.0 + y) / 6.0, W2, 1, "SAME")

    ours, theirs = _ptq_against_tensorflow(fn, monkeypatch)
    assert oracle.op_names(theirs) == oracle.op_names(ours) == ["CONV_2D", "HARD_SWISH", "CONV_2D"]


def _hard_swish_qat(form: str) -> Any:
    from corpus import CorpusModel

    def fq(t: Any, lo: float, hi: float) -> Any:
        return tf.quantization.fake_quant_with_min_max_vars(t, lo, hi, num_bits=8, narrow_range=False)

    def fqw(w: np.ndarray) -> Any:
        m = float(np.abs(w).max())
        return tf.quantization.fake_quant_with_min_max_vars(tf.constant(w), -m, m, narrow_range=True)

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
        y = fq(tf.nn.conv2d(fq(x, -1.0, 1.0), fqw(W1), 1, "SAME"), -4.0, 4.0)
        h = HARD_SWISH[form][0](y, tf.nn.relu6(y + 3.0))
        out = fq(tf.nn.conv2d(fq(h, -0.5, 4.0), fqw(W2), 1, "SAME"), -3.0, 3.0)
        tf.identity(out, name="output")
    return CorpusModel("hard_swish_" + "".join(c if c.isalnum() else "_" for c in form), g.as_graph_def().SerializeToString(), ["input"], ["output"],
                       {"input": SHAPE}, {"input": (-1.0, 1.0)})


@pytest.mark.parametrize("form", ["x*r/6", "x*r*(1/6)", "x*(r/6)"])
def test_hard_swish_qat_as_tensorflow(form: str) -> None:
    """QAT, a FakeQuant after the conv and after the activation only: TensorFlow fuses all three
    spellings (measured)."""
    import oracle

    from qconvert.api import convert_graph

    model = _hard_swish_qat(form)
    with redirect_stdout(io.StringIO()):
        theirs = oracle.tf_convert(model)
    ours = convert_graph(model.graph_def, input_ranges=model.input_ranges, inputs=model.inputs,
                         outputs=model.outputs).model
    assert oracle.op_names(theirs) == oracle.op_names(ours) == ["CONV_2D", "HARD_SWISH", "CONV_2D"]
    oracle.compare_models(ours, theirs)


# ---------------------------------------------------------------------------
# 2. tf.split: each piece requantized on its own
# ---------------------------------------------------------------------------

def _two_concats(y: Any, split: Callable[[Any], Any]) -> Any:
    """Piece a feeds a wide concatenation and a convolution, piece b a narrow one and a convolution."""
    a, b = split(y)
    wide = tf.concat([a, tf.nn.conv2d(b, W4, 1, "SAME") * 5.0], 3)
    narrow = tf.concat([b, tf.nn.conv2d(a, W4, 1, "SAME") * 0.1], 3)
    return wide, narrow


@pytest.mark.parametrize("kind", ["SPLIT", "SPLIT_V"])
def test_split_pieces_requantized_after_the_split(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow writes the SPLIT at the input's parameters and a QUANTIZE on the one piece the
    wide concatenation reads (the convolution reads the piece itself); qconvert requantized the whole
    input before STRIDED_SLICEs."""
    import oracle

    def split(y: Any) -> Any:
        return tf.split(y, 2, axis=3) if kind == "SPLIT" else tf.split(y, [4, 4], axis=3)

    def fn(x: Any) -> Any:
        return _two_concats(tf.nn.conv2d(x, W1, 1, "SAME"), split)

    ours, theirs = _ptq_against_tensorflow(fn, monkeypatch)
    for ops in (oracle.op_names(ours), oracle.op_names(theirs)):
        assert ops.count(kind) == 1 and ops.count("QUANTIZE") == 1 and "STRIDED_SLICE" not in ops


def test_split_pieces_through_qconvert_run() -> None:
    """``qconvert run`` executes the SPLIT + requantized piece bit-exactly with LiteRT REF."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.runtime.interpreter import IntegerModel

    pb, outs = _freeze(lambda x: _two_concats(tf.nn.conv2d(x, W1, 1, "SAME"), lambda y: tf.split(y, 2, axis=3)))
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *SHAPE[1:])).astype(np.float32)}
    ours = convert_graph(pb, inputs=["input"], outputs=outs, calibration_data=samples).model
    x = np.random.default_rng(2).integers(-128, 128, SHAPE).astype(np.int8)
    want = oracle.run_litert(ours, {"input": x})
    got = list(IntegerModel(ours).run({"input": x}).values())
    assert "QUANTIZE" in oracle.op_names(ours) and "SPLIT" in oracle.op_names(ours)
    assert len(want) == len(got) == 2 and all(np.array_equal(a, b) for a, b in zip(want, got))


# ---------------------------------------------------------------------------
# 3. squeeze-and-excite: the RESHAPE before a broadcasting op
# ---------------------------------------------------------------------------

def _excite(y: Any) -> Any:
    return tf.sigmoid(tf.matmul(tf.reduce_mean(y, [1, 2]), D16))  # [1, 16]


def _two_readers(y: Any, r: Any) -> Any:
    return y * r, y + r


def _also_an_output(y: Any, r: Any) -> Any:
    return y * r, r


SE = {  # spelling → whether TensorFlow keeps the RESHAPE (measured)
    "y*reshape": (lambda y, s: y * tf.reshape(s, [1, 1, 1, 16]), False),
    "reshape(-1)*y": (lambda y, s: tf.reshape(s, [-1, 1, 1, 16]) * y, False),
    "expand_dims": (lambda y, s: y * tf.expand_dims(tf.expand_dims(s, 1), 1), False),
    "add": (lambda y, s: y + tf.reshape(s, [1, 1, 1, 16]), False),
    "sub": (lambda y, s: y - tf.reshape(s, [1, 1, 1, 16]), False),
    "two_readers": (lambda y, s: _two_readers(y, tf.reshape(s, [1, 1, 1, 16])), False),
    "also_an_output": (lambda y, s: _also_an_output(y, tf.reshape(s, [1, 1, 1, 16])), True),
    "maximum": (lambda y, s: tf.maximum(y, tf.reshape(s, [1, 1, 1, 16])), True),
}


@pytest.mark.parametrize("spelling", sorted(SE))
def test_squeeze_excite_reshape_as_tensorflow(spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    f, kept = SE[spelling]

    def fn(x: Any) -> Any:
        y = tf.nn.relu(tf.nn.conv2d(x, W16, 1, "SAME"))
        return f(y, _excite(y))

    _, theirs = _ptq_against_tensorflow(fn, monkeypatch)  # our ops equal TensorFlow's there
    assert ("RESHAPE" in oracle.op_names(theirs)) == kept
