"""Unit tests per pass, on hand-built graphs. Expected values are derived by hand
(in the comments) from the formulas in tflite-quantization-facts.md, never from a
run of the code under test."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from graphs import const, fake_quant, graph_with_input, op, per_tensor

from qconvert.options import ConvertOptions
from qconvert.errors import ConversionError, InvariantError, UsageError
from qconvert.fold.drop_fake_quant import drop_fake_quant
from qconvert.fold.fold_constants import fold_constants
from qconvert.fold.hoist_layout import hoist_layout
from qconvert.fuse.into_op import fuse_activation, fuse_bias_add
from qconvert.ir import Graph
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after, params_in
from qconvert.legalize.fake_quant_pairs import legalize_fake_quant
from qconvert.legalize.input_ranges import set_input_ranges
from qconvert.legalize.tf_rewrites import legalize_ops
from qconvert.prepare.propagate import _choose_same_scale, propagate_quant_params
from qconvert.prepare.quantizable import check_quantizable
from qconvert.quantize_pass.fold_ops import fold_quantized_ops, fold_requantize


def ctx(**options) -> Context:
    """A pass context for the given converter options (flat keys, as ``ConvertOptions.of``)."""
    return Context(options=ConvertOptions.of(**options))


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


# -- inputs ------------------------------------------------------------------


def test_input_range_is_signed_domain():
    # [-1, 1]: scale 2/255; zero point -128 - (-1)/(2/255) = -0.5, rounded half away from 0 -> -1
    g = graph_with_input()
    g.outputs = [op(g, "Relu", ["x"], "y", (1, 4, 4, 3))]
    set_input_ranges(g, ctx(input_ranges={None: (-1.0, 1.0)}))
    assert ops(g) == ["QUANTIZE", "DEQUANTIZE", "Relu"]
    q = g.tensors[g.nodes[0].outputs[0]].quant
    assert q.zero_point == (-1,)
    assert float(np.float32(q.scale[0])) == float(np.float32(2 / 255))


def test_input_range_errors_name_the_input():
    g = graph_with_input()
    g.outputs = [op(g, "Relu", ["x"], "y", (1, 4, 4, 3))]
    with pytest.raises(ConversionError, match=r"input 'x' has no range.*--inputs-range x=MIN,MAX"):
        set_input_ranges(g, ctx())
    with pytest.raises(UsageError, match=r"'nope'.*inputs are: x"):
        set_input_ranges(g, ctx(input_ranges={"nope": (0.0, 1.0)}))


def test_fake_quant_on_input_wins_over_the_range():
    g = graph_with_input()
    g.outputs = [fake_quant(g, "x", 0.0, 6.0, "fq")]
    c = ctx(input_ranges={"x": (-1.0, 1.0)})
    set_input_ranges(g, c)
    assert ops(g) == ["FakeQuantWithMinMaxVars"]
    assert "ignored" in c.notes[0]


# -- legalize ----------------------------------------------------------------


def test_fake_quant_becomes_q_dq_with_unsigned_nudging():
    # [-1, 1] full range in the unsigned domain: scale 2/255, zp_from_min = 0 + 1/(2/255) = 127.5 -> 128,
    # shifted to int8: 0.  (The signed-domain input rule above gives -1 for the same range.)
    g = graph_with_input()
    g.outputs = [fake_quant(g, "x", -1.0, 1.0, "fq")]
    legalize_fake_quant(g, ctx())
    assert ops(g) == ["FAKE_QUANT", "QUANTIZE", "DEQUANTIZE"]
    q = g.tensors[g.nodes[1].outputs[0]].quant
    assert q.zero_point == (0,) and (q.qmin, q.qmax) == (-128, 127)
    assert q.scale[0] == pytest.approx(2 / 255, rel=1e-7)


def test_fake_quant_narrow_range_and_errors():
    # [0, 6] narrow: qmin 1, scale 6/254, zp_from_min = 1 -> signed -127; storage [-127, 127]
    g = graph_with_input()
    g.outputs = [fake_quant(g, "x", 0.0, 6.0, "fq", narrow=True)]
    legalize_fake_quant(g, ctx())
    q = g.tensors[g.nodes[1].outputs[0]].quant
    assert q.zero_point == (-127,) and q.qmin == -127
    g2 = graph_with_input()
    g2.outputs = [fake_quant(g2, "x", 1.0, -1.0, "bad")]
    with pytest.raises(ConversionError, match=r"'bad'.*min > max"):
        legalize_fake_quant(g2, ctx())


def test_conv2d_legalizes_to_ohwi_with_zero_bias():
    g = graph_with_input()
    w = const(g, "w", np.zeros((3, 3, 3, 5), np.float32))
    g.outputs = [op(g, "Conv2D", ["x", w], "conv", (1, 4, 4, 5), strides=[1, 1, 1, 1], padding="SAME")]
    legalize_ops(g, ctx())
    assert ops(g) == ["TRANSPOSE", "CONV_2D"]
    assert g.const(g.nodes[0].inputs[1]).tolist() == [3, 0, 1, 2]
    conv = g.nodes[1]
    assert g.tensors[conv.inputs[1]].shape == (5, 3, 3, 3)
    assert g.const(conv.inputs[2]).tolist() == [0.0] * 5
    assert conv.attrs["fused_activation_function"] == "NONE" and conv.attrs["padding"] == "SAME"


# -- fold, fuse ---------------------------------------------------------------


def _qat_conv(per_channel: bool = True) -> Graph:
    """x -> FQ -> Conv2D(FQ_pc(w)) -> BiasAdd(b) -> Relu -> FQ"""
    g = graph_with_input((1, 4, 4, 2))
    set_input_ranges_for_test(g)
    w = np.arange(2 * 2 * 2 * 3, dtype=np.float32).reshape(2, 2, 2, 3) / 24 - 0.5
    wn = const(g, "w", w)
    if per_channel:
        m = np.abs(w).reshape(-1, 3).max(axis=0).astype(np.float32)
        mn, mx = const(g, "wmin", -m), const(g, "wmax", m)
        wq = op(g, "FakeQuantWithMinMaxVarsPerChannel", [wn, mn, mx], "wq", w.shape, num_bits=8, narrow_range=True)
    else:
        wq = fake_quant(g, wn, -0.5, 0.5, "wq", narrow=True)
    c = op(g, "Conv2D", ["xq", wq], "conv", (1, 4, 4, 3), strides=[1, 1, 1, 1], padding="SAME")
    b = op(g, "BiasAdd", [c, const(g, "b", np.array([0.1, -0.2, 0.3], np.float32))], "bias", (1, 4, 4, 3))
    r = op(g, "Relu", [b], "relu", (1, 4, 4, 3))
    g.outputs = [fake_quant(g, r, 0.0, 4.0, "out")]
    g.output_names = ["out"]
    return g


def set_input_ranges_for_test(g: Graph) -> None:
    fake_quant(g, "x", -1.0, 1.0, "xq")


def test_weight_fake_quant_folds_and_axis_follows_the_transpose():
    g = _qat_conv()
    for p in (legalize_fake_quant, legalize_ops, fold_constants, hoist_layout, fold_constants, drop_fake_quant):
        p(g, ctx())
    conv = next(n for n in g.nodes if n.op == "CONV_2D")
    params, immutable = params_in(g, conv.inputs[1])
    assert params.axis == 0 and len(params.scale) == 3 and immutable
    # the folded weight sits on the FakeQuant grid: w / scale is (nearly) an integer in [-127, 127]
    q = next(n for n in g.nodes if n.op == "QUANTIZE" and n.outputs[0] == g.producer(conv.inputs[1]).inputs[0])
    w = g.const(q.inputs[0])
    assert w.shape == (3, 2, 2, 2)
    ratio = w.astype(np.float64) / np.asarray(params.scale).reshape(3, 1, 1, 1)
    assert np.abs(ratio - np.round(ratio)).max() < 1e-3 and np.abs(ratio).max() <= 127.001
    assert "FAKE_QUANT" not in ops(g) and "TRANSPOSE" not in ops(g)


def test_bias_add_and_relu_fuse_into_conv():
    g = _qat_conv()
    for p in (legalize_fake_quant, legalize_ops, fold_constants, hoist_layout, fold_constants, drop_fake_quant,
              fuse_bias_add, fuse_activation):
        p(g, ctx())
    conv = next(n for n in g.nodes if n.op == "CONV_2D")
    assert conv.attrs["fused_activation_function"] == "RELU"
    assert g.const(conv.inputs[2]).tolist() == pytest.approx([0.1, -0.2, 0.3])
    assert "ADD" not in ops(g) and "RELU" not in ops(g)


def test_bias_scale_is_the_double_product():
    g = _qat_conv(per_channel=False)
    for p in (legalize_fake_quant, legalize_ops, fold_constants, hoist_layout, fold_constants, drop_fake_quant,
              fuse_bias_add, fuse_activation, propagate_quant_params, check_quantizable):
        p(g, ctx())
    conv = next(n for n in g.nodes if n.op == "CONV_2D")
    bias = params_in(g, conv.inputs[2])[0]
    # input [-1,1] unsigned: 2/255; weight [-0.5,0.5] narrow: 1/254; bias = 2/255 * 1/254 in double
    assert bias.scale[0] == (2.0 / 255.0) * (1.0 / 254.0)
    assert bias.zero_point == (0,) and bias.dtype == "int32"


# -- prepare -----------------------------------------------------------------


def test_same_scale_choice_follows_tensorflow():
    a, b, c = per_tensor(0.1, 0), per_tensor(0.2, 0), per_tensor(0.3, 0)
    assert _choose_same_scale([(a, True)], [(b, True)]) == a  # lone immutable operand wins
    assert _choose_same_scale([(a, False)], [(b, True)]) == b  # then a lone immutable result
    assert _choose_same_scale([(a, True), (b, True)], [(c, True)]) == c  # concat: the result
    assert _choose_same_scale([(a, False), None], [None]) == a
    assert _choose_same_scale([None], [None]) is None


def _two_branch_concat() -> Graph:
    g = graph_with_input((1, 2, 2, 1))
    insert_qdq_after(g, "x", per_tensor(0.01, 0), Origin.INPUT_RANGE)
    a = op(g, "MAX_POOL_2D", ["x/dq"], "a", (1, 2, 2, 1))
    op(g, "RELU", ["x/dq"], "b", (1, 2, 2, 1))
    insert_qdq_after(g, "b", per_tensor(0.02, -128), Origin.FAKE_QUANT)
    cat = op(g, "CONCATENATION", [a, "b/dq"], "cat", (1, 2, 2, 2), axis=3, fused_activation_function="NONE")
    insert_qdq_after(g, cat, per_tensor(0.03, -128), Origin.FAKE_QUANT)
    g.outputs = ["cat/dq"]
    return g


def test_concat_requantizes_its_inputs_to_the_output_params():
    g = _two_branch_concat()
    propagate_quant_params(g, ctx())
    cat = next(n for n in g.nodes if n.op == "CONCATENATION")
    for name in cat.inputs:
        assert params_in(g, name)[0] == per_tensor(0.03, -128)
    # the max pool keeps its input's parameters (same-scale), so a requantize follows it
    pool_out = next(n for n in g.nodes if n.op == "MAX_POOL_2D").outputs[0]
    q = [n for n in g.consumers(pool_out) if n.op == "QUANTIZE"]
    assert g.tensors[q[0].outputs[0]].quant == per_tensor(0.01, 0)
    c = ctx()
    for p in (check_quantizable, fold_quantized_ops, fold_requantize):
        p(g, c)
    requants = [n for n in g.nodes if n.op == "QUANTIZE" and g.tensors[n.inputs[0]].dtype == "int8"]
    # pool -> QUANTIZE(0.01 -> 0.03) stays; RELU -> Q(0.02) -> QUANTIZE(0.03) folds into the RELU
    assert len(requants) == 1 and g.producer(requants[0].inputs[0]).op == "MAX_POOL_2D"
    relu = next(n for n in g.nodes if n.op == "RELU")
    assert g.tensors[relu.outputs[0]].quant == per_tensor(0.03, -128)


def test_softmax_gets_fixed_output_params():
    g = graph_with_input((1, 4))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.INPUT_RANGE)
    s = op(g, "SOFTMAX", ["x/dq"], "s", (1, 4), beta=1.0)
    g.outputs = [s]
    propagate_quant_params(g, ctx())
    # activations.cc SoftmaxPrepare requires scale 1/256 and zero point -128
    assert [n.op for n in g.consumers("s")] == ["QUANTIZE"]
    assert g.tensors[g.consumers("s")[0].outputs[0]].quant == per_tensor(1 / 256, -128)


def test_missing_range_names_every_tensor_and_the_fix():
    g = graph_with_input((1, 4))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.INPUT_RANGE)
    a = op(g, "RELU", ["x/dq"], "a", (1, 4))
    b = op(g, "RELU6", ["x/dq"], "b", (1, 4))
    g.outputs = [a, b]
    with pytest.raises(ConversionError) as info:
        propagate_quant_params(g, ctx())
        check_quantizable(g, ctx())
    msg = str(info.value)
    assert "2 problems" in msg and "'a'" in msg and "'b'" in msg and "add a FakeQuant after" in msg
    assert "\n" not in msg


# -- more single passes --------------------------------------------------------


def test_relu1_pattern_becomes_relu_n1_to_1():
    from qconvert.legalize.clamps import legalize_clamps

    g = graph_with_input((1, 4))
    m = op(g, "Maximum", ["x", const(g, "lo", np.float32(-1.0))], "max", (1, 4))
    g.outputs = [op(g, "Minimum", [const(g, "hi", np.float32(1.0)), m], "min", (1, 4))]
    legalize_clamps(g, ctx())
    assert ops(g) == ["RELU_N1_TO_1"] and g.nodes[0].inputs == ["x"]


def test_other_clamps_stay_minimum_maximum():
    from qconvert.legalize.clamps import legalize_clamps

    g = graph_with_input((1, 4))
    m = op(g, "Maximum", ["x", const(g, "lo", np.float32(-0.5))], "max", (1, 4))
    g.outputs = [op(g, "Minimum", [m, const(g, "hi", np.float32(0.5))], "min", (1, 4))]
    legalize_clamps(g, ctx())
    assert ops(g) == ["Maximum", "Minimum"]


def test_identity_arithmetic_is_removed():
    from qconvert.fold.identity_arith import remove_identity_arith

    g = graph_with_input((1, 4))
    a = op(g, "MUL", ["x", const(g, "one", np.float32(1.0))], "a", (1, 4), fused_activation_function="NONE")
    b = op(g, "ADD", [a, const(g, "zero", np.zeros(4, np.float32))], "b", (1, 4), fused_activation_function="NONE")
    g.outputs = [op(g, "SUB", [const(g, "z2", np.float32(0.0)), b], "c", (1, 4), fused_activation_function="NONE")]
    remove_identity_arith(g, ctx())
    assert ops(g) == ["SUB"]  # 0 - x is not x


def test_quantize_constants_rounds_half_away_from_zero():
    from qconvert.quantize_pass.constants import quantize_constants

    g = graph_with_input((1, 4))
    w = const(g, "w", np.array([0.25, -0.25, 0.75, 12.0], np.float32))
    insert_qdq_after(g, w, per_tensor(0.5, 0), Origin.WEIGHT)
    g.outputs = ["w/dq"]
    quantize_constants(g, ctx())
    # 0.25/0.5 = 0.5 -> 1; -0.5 -> -1; 1.5 -> 2; 24 stays 24
    assert g.const("w/q").tolist() == [1, -1, 2, 24] and g.tensors["w/q"].dtype == "int8"


def test_int8_io_and_names():
    from qconvert.quantize_pass.graph_io import quantize_io, rename_io

    g = graph_with_input((1, 4))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.INPUT_RANGE)
    g.outputs = ["x/dq"]
    quantize_io(g, ctx())
    assert g.inputs == ["x/q"] and g.outputs == ["x/q"] and ops(g) == []
    g.tensors["x/q"].data = None
    g.input_names, g.output_names = ["x"], ["y"]
    rename_io(g, ctx())
    assert g.inputs == ["x"]


@pytest.mark.parametrize("each_pass", [True, False])
def test_a_broken_pass_is_reported_with_its_stage(monkeypatch, each_pass):
    from qconvert.converter import pipeline
    from qconvert.ir import Tensor

    def broken(graph, ctx):
        graph.outputs.append("ghost")
        return True

    # first pass of 'legalize': later passes run before the stage check
    stages = tuple(replace(s, passes=(broken, *s.passes)) if s.name == "legalize" else s for s in pipeline.STAGES)
    monkeypatch.setattr(pipeline, "STAGES", stages)
    monkeypatch.setenv("QCONVERT_CHECK_EACH_PASS", "0")
    g = graph_with_input((1, 4))
    g.outputs = [fake_quant(g, "x", -1.0, 1.0, "fq")]
    g.add_tensor(Tensor("unused", "float32", (1,)))
    where = r"pass broken" if each_pass else r"rerun with --debug to name the pass"
    with pytest.raises(InvariantError, match=rf"after stage 'legalize' \({where}\).*'ghost'"):
        pipeline.run(g, ConvertOptions(), debug=each_pass)


def test_concat_without_fake_quant_gets_the_union_of_its_input_ranges():
    from qconvert.legalize.fake_quant_pairs import concat_union_ranges

    g = graph_with_input((1, 2, 2, 1))
    a = fake_quant(g, "x", -1.0, 0.5, "fa")
    c = fake_quant(g, "x", 0.0, 2.0, "fc")
    g.outputs = [op(g, "ConcatV2", [a, c, const(g, "axis", np.int32(3))], "cat", (1, 2, 2, 2), N=2)]
    concat_union_ranges(g)
    fq = g.producer(g.outputs[0])
    assert fq.op == "FakeQuantWithMinMaxVars" and fq.inputs[0] == "cat"
    assert (g.const(fq.inputs[1]).item(), g.const(fq.inputs[2]).item()) == (-1.0, 2.0)


def test_work_list_runs_last_op_first():
    # concat(pool(a), pool(c)) with no FakeQuant after: TF's driver pops the last op first, so
    # the second pool decides the concat's parameters and the first pool is requantized.
    g = graph_with_input((1, 2, 2, 1))
    insert_qdq_after(g, "x", per_tensor(0.01, 0), Origin.INPUT_RANGE)
    a = op(g, "RELU", ["x/dq"], "a", (1, 2, 2, 1))
    insert_qdq_after(g, a, per_tensor(0.02, 0), Origin.FAKE_QUANT)
    c = op(g, "RELU6", ["x/dq"], "c", (1, 2, 2, 1))
    insert_qdq_after(g, c, per_tensor(0.03, -128), Origin.FAKE_QUANT)
    pa = op(g, "MAX_POOL_2D", ["a/dq"], "pa", (1, 2, 2, 1))
    pc = op(g, "MAX_POOL_2D", ["c/dq"], "pc", (1, 2, 2, 1))
    cat = op(g, "CONCATENATION", [pa, pc], "cat", (1, 2, 2, 2), axis=3, fused_activation_function="NONE")
    g.outputs = [cat]
    propagate_quant_params(g, ctx())
    concat = next(n for n in g.nodes if n.op == "CONCATENATION")
    assert [params_in(g, i)[0] for i in concat.inputs] == [per_tensor(0.03, -128)] * 2


def test_batch_norm_fold_keeps_the_weight_grid_and_scales_by_abs_multiplier():
    from qconvert.fuse.into_op import fold_mul_into_weights

    g = graph_with_input((1, 1, 1, 2))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.INPUT_RANGE)
    w = const(g, "w", np.array([[[[0.5]]], [[[-0.25]]]], np.float32))  # OHWI, 2 channels
    from qconvert.ir import QuantParams

    insert_qdq_after(g, w, QuantParams((0.5 / 127, 0.5 / 127), (0, 0), axis=0, qmin=-127), Origin.FAKE_QUANT)
    b = const(g, "b", np.array([1.0, 2.0], np.float32))
    c = op(g, "CONV_2D", ["x/dq", "w/dq", b], "c", (1, 1, 1, 2), fused_activation_function="NONE")
    m = const(g, "m", np.array([2.0, -3.0], np.float32))
    g.outputs = [op(g, "MUL", [c, m], "y", (1, 1, 1, 2), fused_activation_function="NONE")]
    fold_mul_into_weights(g, ctx())
    conv = next(n for n in g.nodes if n.op == "CONV_2D")
    params = params_in(g, conv.inputs[1])[0]
    # scales (0.5/127)·|2| and (0.5/127)·|-3|; weights 0.5·2 = 1 and -0.25·-3 = 0.75; bias 2 and -6
    assert params.scale == (0.5 / 127 * 2.0, 0.5 / 127 * 3.0) and params.axis == 0
    q = g.producer(conv.inputs[1]).inputs[0]
    assert g.const(g.producer(q).inputs[0]).reshape(-1).tolist() == [1.0, 0.75]
    assert g.const(conv.inputs[2]).tolist() == [2.0, -6.0]
    assert conv.outputs == ["y"] and "MUL" not in ops(g)


def test_dilated_conv_pattern_folds():
    from qconvert.legalize.dilated_conv import fold_dilated_conv

    g = graph_with_input((1, 8, 8, 1))
    blk = const(g, "blk", np.array([2, 2], np.int32))
    s2b = op(g, "SpaceToBatchND", ["x", blk, const(g, "pads", np.array([[2, 2], [2, 2]], np.int32))],
             "s2b", (4, 6, 6, 1))
    conv = op(g, "Conv2D", [s2b, const(g, "w", np.zeros((3, 3, 1, 1), np.float32))], "conv", (4, 4, 4, 1),
              strides=[1, 1, 1, 1], padding="VALID")
    g.outputs = [op(g, "BatchToSpaceND", [conv, blk, const(g, "crops", np.zeros((2, 2), np.int32))],
                    "b2s", (1, 8, 8, 1))]
    fold_dilated_conv(g, ctx())
    assert ops(g) == ["Conv2D"]
    node = g.nodes[0]
    assert node.inputs[0] == "x" and node.attrs["dilations"] == [1, 2, 2, 1] and node.attrs["padding"] == "SAME"
    assert g.tensors[node.outputs[0]].shape == (1, 8, 8, 1) and g.outputs == [node.outputs[0]]


def test_reshape_moves_above_a_fake_quant():
    from qconvert.legalize.fake_quant_pairs import move_reshape_above_fake_quant

    g = graph_with_input((1, 2, 2, 1))
    relu = op(g, "Relu", ["x"], "relu", (1, 2, 2, 1))
    fq = fake_quant(g, relu, -1.0, 1.0, "fq")
    g.outputs = [op(g, "Reshape", [fq, const(g, "shape", np.array([1, 4], np.int32))], "r", (1, 4))]
    move_reshape_above_fake_quant(g, ctx())
    assert ops(g) == ["Relu", "Reshape", "FakeQuantWithMinMaxVars"]
    assert g.nodes[1].inputs[0] == "relu" and g.outputs == ["fq"] and g.tensors["fq"].shape == (1, 4)


def test_at_a_graph_input_only_a_vars_fake_quant_lets_a_reshape_or_transpose_above_it():
    """TensorFlow moves a Reshape or Transpose above a graph input's FakeQuantWithMinMaxVars, not above
    a FakeQuantWithMinMaxArgs (tests/e2e/test_input_fake_quant.py compares with its files)."""
    from qconvert.legalize.fake_quant_pairs import move_reshape_above_fake_quant

    for kind, moves in (("args", False), ("vars", True)):
        g = graph_with_input((1, 2, 2, 1))
        fq = fake_quant(g, "x", -1.0, 1.0, "fq")
        if kind == "args":
            g.nodes[0].op, g.nodes[0].inputs = "FakeQuantWithMinMaxArgs", ["x"]
            g.nodes[0].attrs.update(min=-1.0, max=1.0)
        g.outputs = [op(g, "Transpose", [fq, const(g, "perm", np.array([0, 2, 1, 3], np.int32))], "t", (1, 2, 2, 1))]
        assert move_reshape_above_fake_quant(g, ctx()) is moves
        assert ops(g)[0] == ("Transpose" if moves else g.nodes[0].op)


def test_back_to_back_fake_quants_keep_the_first_range():
    from qconvert.quantize_pass.back_to_back import drop_back_to_back_fake_quant

    g = graph_with_input((1, 4))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.FAKE_QUANT)
    insert_qdq_after(g, "x/dq", per_tensor(0.2, 0), Origin.FAKE_QUANT)
    g.outputs = [op(g, "RELU", ["x/dq/dq"], "r", (1, 4))]
    c = ctx()
    drop_back_to_back_fake_quant(g, c)
    assert g.nodes[-1].inputs == ["x/dq"] and "two FakeQuants in a row" in c.notes[0]


def test_conv_weights_with_a_nonzero_zero_point_are_refused():
    # TF writes such a model, and LiteRT then refuses to run it (conv.cc: zero point must be 0).
    from qconvert.ir import QuantParams

    g = graph_with_input((1, 1, 1, 1))
    insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.INPUT_RANGE)
    w = const(g, "w", np.ones((1, 1, 1, 1), np.float32))
    insert_qdq_after(g, w, QuantParams((0.01,), (-1,)), Origin.FAKE_QUANT)
    c = op(g, "CONV_2D", ["x/dq", "w/dq", const(g, "b", np.zeros(1, np.float32))], "c", (1, 1, 1, 1),
           fused_activation_function="NONE")
    insert_qdq_after(g, c, per_tensor(0.1, 0), Origin.FAKE_QUANT)
    g.outputs = ["c/dq"]
    with pytest.raises(ConversionError, match=r"zero point \[-1\].*narrow_range=True"):
        propagate_quant_params(g, ctx())
        check_quantizable(g, ctx())


def test_dedupe_merges_the_same_op_on_the_same_operands_only() -> None:
    from qconvert.fold.dedupe import dedupe_ops

    g = graph_with_input((1, 4, 4, 2))
    a = op(g, "RELU", ["x"], "a", (1, 4, 4, 2))
    b = op(g, "RELU", ["x"], "b", (1, 4, 4, 2))  # the same as a
    c = op(g, "MAX_POOL_2D", [a], "c", (1, 2, 2, 2), filter_height=2, filter_width=2, stride_h=2, stride_w=2)
    d = op(g, "MAX_POOL_2D", [b], "d", (1, 2, 2, 2), filter_height=2, filter_width=2, stride_h=2, stride_w=2)
    e = op(g, "MAX_POOL_2D", [a], "e", (1, 3, 3, 2), filter_height=2, filter_width=2, stride_h=1, stride_w=1)
    qa = insert_qdq_after(g, c, per_tensor(0.1, 0), Origin.FAKE_QUANT)
    g.outputs = [qa, d, e]  # d is a graph output: kept, though the same as c
    assert dedupe_ops(g, ctx())
    # b goes (d now reads a); d stays (an output); e has other attributes; c stays
    assert sorted(n.outputs[0] for n in g.nodes if n.op in ("RELU", "MAX_POOL_2D")) == ["a", "c", "d", "e"]
    assert next(n for n in g.nodes if n.outputs[0] == "d").inputs == ["a"]
    assert not dedupe_ops(g, ctx())


def test_dedupe_keeps_quantizes_with_other_parameters() -> None:
    from qconvert.fold.dedupe import dedupe_ops

    g = graph_with_input((1, 2))
    one = insert_qdq_after(g, "x", per_tensor(0.1, 0), Origin.FAKE_QUANT)
    q1 = g.producer(g.producer(one).inputs[0])
    from qconvert.ir.qdq import add_qdq

    _, _, two = add_qdq(g, "x", per_tensor(0.2, 0), Origin.FAKE_QUANT, after=q1)
    _, _, three = add_qdq(g, "x", per_tensor(0.1, 0), Origin.FAKE_QUANT, after=q1)
    y1, y2, y3 = (op(g, "RELU", [t], f"y{k}", (1, 2)) for k, t in enumerate((one, two, three)))
    g.outputs = [y1, y2, y3]
    assert dedupe_ops(g, ctx())
    # the third pair repeats the first (same parameters): it goes; the 0.2 pair stays
    assert sorted(g.tensors[n.outputs[0]].quant.scale[0] for n in g.nodes if n.op == "QUANTIZE") == [0.1, 0.2]
