"""PADV2: a pad with a fill value (``tf.pad(x, p, constant_values=c)``; PyTorch's ``MaxPool2d(padding=1)``
through litert-torch, the stem of every torchvision ResNet, is a PADV2 of -inf then a VALID max pool).

Measured on TensorFlow 2.21 (full int8, ``representative_dataset``), the oracle for a finite fill: PADV2 v2,
one scale and zero point for its input, its fill and its output, from the output's range (which holds the
fill), the fill quantized and clamped (c = -3 over inputs in [-1, 1]: scale 4/255, fill -128; c = 5: fill
127); the max pool after it keeps them. For a fill of -inf (written -FLT_MAX by TensorFlow's converter, -inf
by litert-torch) TensorFlow's range takes the fill in: scale 1.33e36, every output the same integer. qconvert
gives such a pad its input's range and the fill the lowest integer (docs/differences.md), so the int8 max pool
over it is the max pool of the int8 input, the padding never chosen: checked by hand and against LiteRT REF.
16x8: TensorFlow writes int16 activations with a float32 fill, which LiteRT refuses ("INT16 != FLOAT32"):
qconvert refuses it in one line (tests/e2e/test_int16.py).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")
pytest.importorskip("ai_edge_litert", reason="LiteRT runs the files")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

SHAPE = [1, 6, 6, 3]
PADS = [[0, 0], [1, 1], [1, 1], [0, 0]]


def _graph(fill: float, after: str) -> oracle.FloatGraph:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
        y = tf.pad(x, PADS, constant_values=fill)
        if after == "max_pool":
            y = tf.nn.max_pool2d(y, 3, 2, "VALID")
        elif after == "conv":
            w = np.random.default_rng(0).normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32)
            y = tf.nn.relu(tf.nn.conv2d(y, w, 1, "VALID"))
        tf.identity(y, name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["out"], {"input": SHAPE})


def _samples(n: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).uniform(-1, 1, (n, *SHAPE[1:])).astype(np.float32)}


def _convert(model: oracle.FloatGraph, source: str, samples: dict[str, np.ndarray]) -> bytes:
    if source == "tflite":  # TensorFlow's float file: what a user of another producer has
        return convert_graph(oracle.tf_float_convert(model), calibration_data=samples).model
    return convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs,
                         calibration_data=samples).model


def _padv2(tflite: bytes, op_name: str = "PADV2"):  # type: ignore[no-untyped-def]
    sg = read_model(tflite).subgraphs[0]
    (op,) = [o for o in sg.operators if o.builtin == op_name]
    return op, [sg.tensors[i] for i in op.inputs], sg.tensors[op.outputs[0]]


@pytest.mark.parametrize("source", ["pb", "tflite"])
@pytest.mark.parametrize("fill, after", [(-3.0, "max_pool"), (0.5, "max_pool"), (5.0, "max_pool"), (-3.0, "conv"),
                                         (0.5, "none")])
def test_finite_fill_equals_tensorflows_int8_file(fill: float, after: str, source: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model, samples = _graph(fill, after), _samples()
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = _convert(model, source, samples)
    assert sorted((o.builtin, o.version) for o in read_model(ours).operators) == \
        sorted((o.builtin, o.version) for o in read_model(theirs).operators)
    (op_a, ins_a, out_a), (op_b, ins_b, out_b) = _padv2(ours), _padv2(theirs)
    assert op_a.version == op_b.version == 2 and op_a.options == op_b.options
    for a, b in [(ins_a[0], ins_b[0]), (ins_a[2], ins_b[2]), (out_a, out_b)]:  # input, fill, output: one scale
        assert (a.dtype, a.scale, a.zero_point) == (b.dtype, b.scale, b.zero_point) == ("int8", out_b.scale,
                                                                                         out_b.zero_point)
    assert ins_a[2].data == ins_b[2].data and ins_a[1].data == ins_b[1].data  # the fill's byte, the paddings
    report = oracle.compare_ptq(ours, theirs, samples, model.inputs)
    assert report.tensors > 0 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.within_1 == report.outputs > 0, report
    oracle.compare_models(ours, theirs)  # I/O parameters; random int8 inputs in LiteRT REF
    oracle.assert_run_equals_litert(ours, n=4)  # qconvert run


def _max_pool_by_hand(q: np.ndarray, lowest: int) -> np.ndarray:
    """The int8 max pool (3x3, stride 2) of ``q`` padded by one with ``lowest``."""
    p = np.pad(q, PADS, constant_values=lowest)
    h = (p.shape[1] - 3) // 2 + 1
    w = (p.shape[2] - 3) // 2 + 1
    return np.array([[p[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(0, 1)) for j in range(w)]
                     for i in range(h)])[None]


@pytest.mark.parametrize("source", ["pb", "tflite"])
def test_minus_infinity_fill_takes_the_inputs_range_and_the_lowest_integer(source: str) -> None:
    """-inf in the graph (the .pb), -FLT_MAX in TensorFlow's float file: the same file. Its parameters are
    TensorFlow's for the same graph padded with 0 (a PAD; 0 is inside the input's range [-1, 1], so the range is the
    input's), the fill is -128, and every int8 output is the max of its window's int8 inputs."""
    samples = _samples()
    ours = _convert(_graph(-np.inf, "max_pool"), source, samples)
    zero_fill = oracle.tf_ptq_convert(_graph(0.0, "max_pool"), samples)
    _, ins, out = _padv2(ours)
    _, _, out_tf = _padv2(zero_fill, "PAD")  # TensorFlow writes a PADV2 of 0 as PAD
    assert (ins[0].scale, ins[0].zero_point) == (out.scale, out.zero_point) == (out_tf.scale, out_tf.zero_point)
    assert ins[2].dtype == "int8" and int(ins[2].array().reshape(-1)[0]) == -128
    assert sorted(o.builtin for o in read_model(ours).operators) == ["MAX_POOL_2D", "PADV2"]  # no requantize
    rng = np.random.default_rng(4)
    for _ in range(8):
        q = rng.integers(-128, 128, SHAPE).astype(np.int8)
        (got,) = oracle.run_litert(ours, {"input": q})
        assert np.array_equal(got, _max_pool_by_hand(q, -128))
    oracle.assert_run_equals_litert(ours, n=4)


def test_minus_infinity_fill_is_close_to_the_float_model_where_tensorflows_file_is_not() -> None:
    """TensorFlow's own int8 file of that graph (scale 1.33e36, measured) outputs one constant; ours is
    within half a step of the float model."""
    model = _graph(-np.inf, "max_pool")
    samples, held_out = _samples(), _samples(8, 1)
    flt = oracle.tf_float_convert(model)
    ours, theirs = _convert(model, "tflite", samples), oracle.tf_ptq_convert(model, samples)
    assert _padv2(theirs)[2].scale[0] > 1e30  # TensorFlow's range takes -FLT_MAX in

    def error(tflite: bytes) -> float:
        d_in, d_out = oracle.io_details(tflite)["inputs"][0], oracle.io_details(tflite)["outputs"][0]
        errs = []
        for k in range(len(held_out["input"])):
            x = held_out["input"][k:k + 1]
            q = np.clip(np.round(x / d_in["quant"][0] + d_in["quant"][1]), -128, 127).astype(np.int8)
            (y,) = oracle.run_litert(tflite, {"input": q})
            (want,) = oracle.run_litert(flt, {"input": x})
            errs.append(float(np.max(np.abs((y.astype(np.float64) - d_out["quant"][1]) * d_out["quant"][0] - want))))
        return max(errs)

    mine, tfs = error(ours), error(theirs)
    print(f"\nPADV2(-inf) + max pool, max |error| against the float file: qconvert {mine:.5f}, TensorFlow {tfs:.5f}")
    assert mine <= 0.5 * _padv2(ours)[2].scale[0] + 1e-6 and tfs > 0.5
