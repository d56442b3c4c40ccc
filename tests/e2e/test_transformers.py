"""Einsum and Keras transformers against TensorFlow 2.21's post-training quantizer (issue 35).

Einsum, one op per graph: the equations Keras' MultiHeadAttention and EinsumDense write (Q/K/V
projections ``abc,cde->abde``, scores ``aecd,abcd->acbe``, attention × value ``acbe,aecd->abcd``,
output projection ``abcd,cde->abe``, Dense forms ``ab,bc->ac`` and ``abc,cd->abd``) and others the
rule covers (contraction on rows, several free labels on both sides, no batch label with
a transpose). Measured, TensorFlow writes TRANSPOSE v2 / RESHAPE v1 of each operand as its einsum
lowering orders the labels, BATCH_MATMUL v2 (or FULLY_CONNECTED v5 with keep_num_dims, v4 on 2-D,
when the right operand is a constant: the weights reshaped and transposed), then RESHAPE and
TRANSPOSE to the output order; qconvert must write the same file.

The transformers (tests/fixtures/transformers.py): a tf_keras encoder (patch Conv2D or Dense on
patches, MultiHeadAttention, LayerNormalization, GELU FFN in both forms, residual adds) and a
ViT-style classifier with a class token. Post-training, qconvert is given TensorFlow's recorded
ranges (``oracle.use_tensorflows_statistics``, and TensorFlow's rsqrt as in
test_keras_apps_ptq.py): every scale, zero point and weight equal, outputs 0 LSB apart in LiteRT
REF, TensorFlow's op list; ``qconvert run`` equal to LiteRT REF on every file. 16x8: TensorFlow
writes a file LiteRT cannot run (int16 SQUARED_DIFFERENCE in LayerNormalization); qconvert
refuses it in one line.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")
pytest.importorskip("tf_keras", reason="the transformers are tf_keras models")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import oracle  # noqa: E402
import transformers  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

# equation, x's shape, y's shape, y constant (a weight)
EQUATIONS = [
    ("abc,cde->abde", [1, 8, 16], [16, 2, 8], True),  # MultiHeadAttention Q/K/V projection
    ("aecd,abcd->acbe", [1, 8, 2, 8], [1, 8, 2, 8], False),  # scores
    ("acbe,aecd->abcd", [1, 2, 8, 8], [1, 8, 2, 8], False),  # attention × value
    ("abcd,cde->abe", [1, 8, 2, 8], [2, 8, 16], True),  # output projection
    ("ab,bc->ac", [1, 16], [16, 10], True),  # EinsumDense on 2-D
    ("abc,cd->abd", [1, 8, 16], [16, 10], True),  # EinsumDense on 3-D
    ("abc,abd->acd", [1, 8, 6], [1, 8, 4], False),  # contraction over rows (x transposed)
    ("abcd,abde->abce", [1, 2, 4, 6], [1, 2, 6, 5], False),  # two batch labels
    ("abc,cd->dab", [1, 4, 6], [6, 5], True),  # no batch label, output transposed
    ("abc,adc->abd", [1, 8, 6], [1, 4, 6], False),  # contraction over both last dimensions (y transposed)
]


def _einsum_graph(eq: str, xs: list[int], ys: list[int], const: bool) -> oracle.FloatGraph:
    g = tf.Graph()
    rng = np.random.default_rng(0)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, xs, name="x")
        if const:
            y, inputs, shapes = tf.constant(rng.normal(size=ys).astype(np.float32)), ["x"], {"x": xs}
        else:
            y, inputs, shapes = tf.compat.v1.placeholder(tf.float32, ys, name="y"), ["x", "y"], {"x": xs, "y": ys}
        tf.identity(tf.einsum(eq, x, y), name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), inputs, ["out"], shapes)


def _ops(tflite: bytes) -> list[tuple[str, int]]:
    return sorted((o.builtin, o.version) for o in read_model(tflite).subgraphs[0].operators)


def _op_options(tflite: bytes) -> list[tuple[str, object]]:
    """Each op with its int32 constant operands (permutations, shapes) and options, in file order."""
    m = read_model(tflite).subgraphs[0]
    out = []
    for o in m.operators:
        consts = tuple(tuple(np.asarray(m.tensors[i].data).reshape(-1).tolist()) for i in o.inputs
                       if i >= 0 and m.tensors[i].data is not None and m.tensors[i].dtype == "int32"
                       and o.builtin in ("TRANSPOSE", "RESHAPE"))
        shapes = tuple(tuple(m.tensors[i].shape) for i in o.outputs)
        out.append((o.builtin, consts, shapes, tuple(sorted((o.options or {}).items()))))
    return sorted(out, key=repr)


def _ptq(monkeypatch: pytest.MonkeyPatch, model: oracle.FloatGraph, samples: dict[str, np.ndarray],
         int16: bool = False) -> tuple[bytes, bytes]:
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs, calibration_data=samples,
                         activations="int16" if int16 else "int8").model
    return ours, theirs


@pytest.mark.parametrize("eq,xs,ys,const", EQUATIONS, ids=[e[0] for e in EQUATIONS])
def test_einsum_as_tensorflow_lowers_it(eq: str, xs: list[int], ys: list[int], const: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _einsum_graph(eq, xs, ys, const)
    rng = np.random.default_rng(1)
    samples = {n: rng.uniform(-1, 1, (4, *s[1:])).astype(np.float32) for n, s in model.shapes.items()}
    ours, theirs = _ptq(monkeypatch, model, samples)
    assert _ops(ours) == _ops(theirs)
    assert _op_options(ours) == _op_options(theirs)
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, model.inputs)
    assert report.weights == int(const) and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("eq,xs,ys", [
    ("abb,bc->ac", [1, 4, 4], [4, 3]),  # a label repeated in one operand (a diagonal)
    ("ab,bc->a", [1, 4], [4, 3]),  # c summed within one operand
    ("...b,bc->...c", [1, 4], [4, 3]),  # an ellipsis
])
def test_einsum_it_cannot_lower_is_refused_in_one_line(eq: str, xs: list[int], ys: list[int]) -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, xs, name="x")
        y = tf.constant(np.ones(ys, np.float32))
        try:
            out = tf.einsum(eq, x, y)
        except (ValueError, tf.errors.InvalidArgumentError):  # TF refuses to build it: write the node by hand
            out = tf.raw_ops.Einsum(inputs=[x, y], equation=eq)
        tf.identity(out, name="out")
    with pytest.raises(ConversionError) as e:
        convert_graph(g.as_graph_def().SerializeToString(), inputs=["x"], outputs=["out"],
                      calibration_data={"x": np.ones([2, *xs[1:]], np.float32)})
    message = str(e.value)
    assert "\n" not in message and "Einsum" in message and eq.replace(" ", "") in message, message


# --------------------------------------------------------------------------------------------
# Keras transformers

MODELS = {  # id: build arguments
    "encoder-conv-erf": {"kind": "encoder", "projection": "conv", "blocks": 1, "approximate": False},
    "encoder-conv-tanh-2blocks": {"kind": "encoder", "projection": "conv", "blocks": 2, "approximate": True},
    "vit-conv-erf": {"kind": "vit", "projection": "conv", "blocks": 1, "approximate": False},
}


def _samples() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).uniform(-1, 1, (8, *transformers.SHAPE[1:])).astype(np.float32)}


def _model(name: str) -> oracle.FloatGraph:
    return oracle.FloatGraph(transformers.build(**MODELS[name]), ["input"], ["Identity"], {"input": transformers.SHAPE})


@pytest.mark.parametrize("name", list(MODELS))
def test_transformer_bit_exact_with_tensorflows_ptq_given_its_ranges(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = _samples()
    ours, theirs = _ptq(monkeypatch, _model(name), samples)
    assert collections.Counter(_ops(ours)) == collections.Counter(_ops(theirs))
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 40 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("name", ["encoder-conv-erf", "vit-conv-erf"])
def test_transformer_16x8_refused_in_one_line_where_tensorflows_file_does_not_run(name: str) -> None:
    """TensorFlow 2.21 writes a 16x8 file whose LayerNormalization has an int16 SQUARED_DIFFERENCE
    (version 2), which LiteRT cannot run ("SquaredDifference only supports FLOAT32 and INT32");
    qconvert refuses the 16x8 form in one line naming those ops."""
    samples = _samples()
    model = _model(name)
    theirs = oracle.tf_ptq_convert(model, samples, int16=True)
    assert "SQUARED_DIFFERENCE" in oracle.op_names(theirs)
    with pytest.raises(RuntimeError, match="SquaredDifference only supports"):
        oracle.run_litert(theirs, {"input": np.zeros(transformers.SHAPE, np.int16)})
    with pytest.raises(ConversionError) as e:
        convert_graph(model.graph_def, inputs=["input"], outputs=["Identity"], calibration_data=samples,
                      activations="int16")
    message = str(e.value)
    assert "\n" not in message and "SQUARED_DIFFERENCE" in message and "--activations int8" in message, message


def test_dense_on_patches_differs_from_tensorflow_where_it_combines_bias_and_position() -> None:
    """Known difference (measured on TF 2.21): patches cut by RESHAPE/TRANSPOSE(6-D)/RESHAPE, then a
    Dense, then the position embedding. TensorFlow adds the Dense's bias [D] into the position
    embedding [1, T, D] (one ADD of their sum, the FULLY_CONNECTED without a bias, on the 2-D
    [T, 48] patches); qconvert fuses the bias into the FULLY_CONNECTED and adds the embedding alone.
    Same op counts but for that bias; the ADD's constant scale differs (rel 6e-4), outputs ≤ 4 LSB
    apart given TensorFlow's ranges (the 2-block form). The test pins the difference so that a fix shows."""
    model = oracle.FloatGraph(transformers.build(kind="encoder", projection="dense", blocks=1, approximate=True),
                              ["input"], ["Identity"], {"input": transformers.SHAPE})
    samples = _samples()
    theirs = oracle.tf_ptq_convert(model, samples)
    ours = convert_graph(model.graph_def, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    assert ("TRANSPOSE", 6) in _ops(ours) and ("TRANSPOSE", 6) in _ops(theirs)

    def biases(tflite: bytes) -> int:
        m = read_model(tflite).subgraphs[0]
        return sum(1 for o in m.operators if o.builtin == "FULLY_CONNECTED" and len(o.inputs) > 2 and o.inputs[2] >= 0)

    assert biases(theirs) == biases(ours) - 1  # TF's patch projection has no bias: it went into the ADD
    oracle.assert_run_equals_litert(ours)
