"""Biases that do not fit int32 at scale input×weight (issue 15), against TensorFlow 2.21.

Real trained networks have dead output channels (all-zero weights) with a non-zero bias, and
channels whose bias is large for their weights. TensorFlow's quantization driver
(``SetBiasParamsWithAdjustments``) enlarges such a channel's weight scale so that
``|bias| / scale`` stays within INT32_MAX / 2, for weights whose parameters come from their
values: post-training quantization, and QAT graphs whose kernel has no FakeQuant. A kernel
*with* a FakeQuant keeps its range, and TensorFlow then saturates the bias silently at
INT32_MIN (measured on TF 1-style graphs and on a tfmot Conv→BatchNorm→ReLU6 model). qconvert
enlarges the scale of such a channel when all its weights are zero (their integers stay 0, so
the training graph's grid is kept and the bias is exact: the training graph is the oracle
there, TensorFlow is wrong), says so, and refuses, naming the bias, when they are not.

Each case is a small TF1 graph (conv or dense, 3 output channels); TensorFlow's file is the
oracle for the int8 weights, weight scales, int32 biases, bias scales and LiteRT outputs.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from qconvert.api import convert_graph
from qconvert.errors import ConversionError

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")

DEAD = [0.1, -1.25, 0.3]  # channel 1 has all-zero weights and a bias of -1.25
LARGE = [0.1, 3e4, -2.5e5]  # channels 1 and 2 have weights of 1e-4 and large biases


def _graph(qat: bool, dense: bool, bias: list[float], weight_fq: bool,
           dead: float = 0.0) -> tuple[bytes, list[int]]:
    tf1 = tf.compat.v1
    shape = [1, 8] if dense else [1, 4, 4, 2]
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, shape, name="input")
        h = tf.quantization.fake_quant_with_min_max_vars(x, -1.0, 1.0) if qat else x
        rng = np.random.default_rng(0)
        w = rng.normal(0, 0.3, (8, 3) if dense else (3, 3, 2, 3)).astype(np.float32)
        w[..., 1] = dead if bias is DEAD else 1e-4
        if bias is LARGE:
            w[..., 2] = 1e-4
        wc = tf.constant(w)
        if weight_fq:
            m = np.abs(w).reshape(-1, 3).max(axis=0)
            wc = tf.quantization.fake_quant_with_min_max_vars_per_channel(wc, -m, m, narrow_range=True)
        y = tf.matmul(h, wc) if dense else tf.nn.conv2d(h, wc, [1, 1, 1, 1], "SAME")
        y = tf.nn.bias_add(y, tf.constant(np.array(bias, np.float32)))
        if qat:
            y = tf.quantization.fake_quant_with_min_max_vars(y, -4.0, 4.0)
        tf.identity(y, name="out")
    return g.as_graph_def().SerializeToString(), shape


def _samples(shape: list[int]) -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.stack([rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(16)])


def _tf_convert(pb: bytes, qat: bool, shape: list[int]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pb")
        with open(path, "wb") as f:
            f.write(pb)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, ["input"], ["out"], {"input": shape})
        if qat:
            c.inference_type = tf.int8
            c.quantized_input_stats = {"input": (-0.5, 127.5)}  # [-1, 1]
        else:
            data = _samples(shape)
            c.optimizations = [tf.lite.Optimize.DEFAULT]
            c.representative_dataset = lambda: ([s] for s in data)
            c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            c.inference_input_type = c.inference_output_type = tf.int8
        return c.convert()


def _affine(tflite: bytes) -> tuple[list, list, list, list]:
    from qconvert.schema.reader import read_model

    sg = read_model(tflite).subgraphs[0]
    op = next(o for o in sg.operators if o.builtin in ("CONV_2D", "FULLY_CONNECTED"))
    w, b = sg.tensors[op.inputs[1]], sg.tensors[op.inputs[2]]
    return w.array().tolist(), list(w.scale), b.array().tolist(), list(b.scale)


def _outputs(tflite: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    s, z = i["quantization"]
    out = []
    for sample in x:
        it.set_tensor(i["index"], np.clip(np.round(sample / s) + z, -128, 127).astype(np.int8)[None])
        it.invoke()
        out.append(it.get_tensor(o["index"]).copy())
    return np.stack(out)


@pytest.mark.parametrize("bias", [DEAD, LARGE], ids=["dead_channel", "large_bias"])
@pytest.mark.parametrize("dense", [False, True], ids=["conv", "dense"])
@pytest.mark.parametrize("qat", [True, False], ids=["qat_kernel_without_fakequant", "ptq"])
def test_weight_scale_is_enlarged_as_tensorflow_does(qat: bool, dense: bool, bias: list[float]) -> None:
    pb, shape = _graph(qat, dense, bias, weight_fq=False)
    theirs = _tf_convert(pb, qat, shape)
    result = convert_graph(pb, inputs=["input"], outputs=["out"],
                           calibration_data=None if qat else {"input": _samples(shape)[:, 0]})
    w, w_scale, b, b_scale = _affine(result.model)
    tw, tw_scale, tb, tb_scale = _affine(theirs)
    assert (w, b) == (tw, tb)
    assert w_scale == tw_scale and b_scale == tb_scale
    assert max(abs(v) for v in b) <= 2**30  # within INT32_MAX / 2 (+1 for rounding)
    x = _samples(shape)[:, 0]
    np.testing.assert_array_equal(_outputs(result.model, x), _outputs(theirs, x))
    if qat:
        assert any("enlarged" in n for n in result.notes), result.notes


def _training_graph_outputs(pb: bytes, x: np.ndarray) -> np.ndarray:
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(pb), name="")
    with tf.compat.v1.Session(graph=g) as s:
        return np.stack([s.run("out:0", {"input:0": sample[None]}) for sample in x])


def _dequantized(tflite: bytes, x: np.ndarray) -> np.ndarray:
    from qconvert.schema.reader import read_model

    sg = read_model(tflite).subgraphs[0]
    out = sg.tensors[sg.outputs[0]]
    return (_outputs(tflite, x).astype(np.float64) - out.zero_point[0]) * out.scale[0]


@pytest.mark.parametrize("dense", [False, True], ids=["conv", "dense"])
def test_a_dead_fakequant_channel_keeps_its_bias_where_tensorflow_saturates_it(dense: bool) -> None:
    pb, shape = _graph(True, dense, DEAD, weight_fq=True)
    x = np.random.default_rng(5).uniform(-1, 1, [16, *shape[1:]]).astype(np.float32)
    result = convert_graph(pb, inputs=["input"], outputs=["out"])
    assert any("all zero" in n and "TensorFlow saturates" in n for n in result.notes), result.notes
    w, w_scale, b, b_scale = _affine(result.model)
    assert abs(b[1] - (-1.25 / b_scale[1])) <= 1 and abs(b[1]) <= 2**30  # exact, not saturated
    training = _training_graph_outputs(pb, x)[..., 1].reshape(-1)
    ours = _dequantized(result.model, x)[..., 1].reshape(-1)
    assert np.abs(ours - training).max() <= 0.5 * 8.0 / 255  # half an output step (FakeQuant range [-4, 4])
    if not dense:  # TensorFlow rejects per-channel FakeQuant on MatMul weights ("mismatched quantized axes")
        theirs = _tf_convert(pb, True, shape)
        tw, tw_scale, tb, tb_scale = _affine(theirs)
        assert tb[1] == -(2**31), "TensorFlow no longer saturates: revisit the rule"
        assert w == tw and [s for k, s in enumerate(w_scale) if k != 1] == [s for k, s in enumerate(tw_scale) if k != 1]
        theirs_out = _dequantized(theirs, x)[..., 1].reshape(-1)
        assert np.abs(theirs_out - training).max() > 1.0  # -0.066 where training says -1.25


def test_a_fakequant_kernel_whose_live_channel_bias_overflows_is_refused() -> None:
    pb, shape = _graph(True, False, DEAD, weight_fq=True, dead=1e-7)  # tiny, not zero: its grid matters
    theirs = _affine(_tf_convert(pb, True, shape))
    assert min(theirs[2]) == -(2**31), "TensorFlow no longer saturates: revisit the rule"
    with pytest.raises(ConversionError, match=r"bias '.*' of CONV_2D .* does not fit int32: channel 1 is -1.25"):
        convert_graph(pb, inputs=["input"], outputs=["out"])


# 16x8: TensorFlow 2.21 quantizes the weights with its older quantizer (TOCO's quantize_model):
# scale max|w| / 127 in float32 without widening a tiny range (an all-zero channel gets scale 0),
# and AdjustWeightsForBiasScale where |bias| >= 0.5 · input scale · weight scale · INT32_MAX
def _channels_16x8_graph(dense: bool) -> tuple[bytes, list[int]]:
    rng = np.random.default_rng(3)
    g = tf.Graph()
    with g.as_default():
        if dense:
            shape = [1, 6]
            w = rng.normal(0, 0.3, (6, 5)).astype(np.float32)
            w[:, 1] = 0  # dead, bias 0.2: its scale follows from the bias
            w[:, 2] *= 1e-9  # tiny, bias 0: scale max|w| / 127 (the int8 quantizer widens it to 5e-7 / 127)
            w[:, 4] = 0  # dead, bias 0: scale 0
            x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
            y = tf.matmul(x, tf.constant(w)) + tf.constant(np.array([0.1, 0.2, 0, 0.1, 0], np.float32))
        else:
            shape = [1, 4, 4, 4]
            w = rng.normal(0, 0.3, (1, 1, 4, 6)).astype(np.float32)
            w[..., 1] *= 2e-9
            w[..., 2] = 0
            w[..., 3] *= 1e-6  # small weights, bias 0.01: scale enlarged, integers 0..2
            w[..., 5] = 0
            x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
            y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, tf.constant(w), 1, "SAME"),
                                          tf.constant(np.array([0.01, 0, 0.01, 0.01, 0.01, 0], np.float32))))
        tf.identity(y, name="out")
    return g.as_graph_def().SerializeToString(), shape


@pytest.mark.parametrize("per_tensor", [False, True], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("dense", [False, True], ids=["conv", "dense"])
def test_16x8_weight_scales_are_tensorflows_on_tiny_and_dead_channels(dense: bool, per_tensor: bool) -> None:
    import oracle

    pb, shape = _channels_16x8_graph(dense)
    model = oracle.FloatGraph(pb, ["x"], ["out"], {"x": shape})
    samples = {"x": np.random.default_rng(1).uniform(-1, 1, (4, *shape[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples, int16=True, per_tensor=per_tensor)
    w_scales = _affine(theirs)[1]
    if not per_tensor:  # what the case is about, in TensorFlow's file: a zero scale, a tiny one, enlarged ones
        assert 0.0 in w_scales and min(s for s in w_scales if s) < 1e-10, w_scales
    ours = convert_graph(pb, inputs=["x"], outputs=["out"], calibration_data=samples, activations="int16",
                         per_tensor_weights=per_tensor).model
    report = oracle.compare_ptq(ours, theirs, samples, ["x"])
    assert report.weights == 1 and report.biases == 1 and not report.unpaired, report
    assert not report.weight_diffs and not report.bias_diffs, report
    assert report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours)
