"""The ``fuse`` stage as golden text: the IR before (built by hand) and the IR expected after,
written by hand in ``Graph.dump``'s format, as TensorFlow's ``prepare-quantize.mlir`` tests do."""

from __future__ import annotations

import numpy as np
from graphs import const, graph_with_input, op

from qconvert.converter.pipeline import STAGES
from qconvert.ir.passes import Context

BEFORE = """\
graph inputs=['x'] outputs=['relu']
  conv:float32[1x1x1x2] = CONV_2D(x:float32[1x1x1x1], w:float32[2x1x1x1] const, b:float32[2] const) {'padding': 'VALID', 'fused_activation_function': 'NONE'}
  add:float32[1x1x1x2] = ADD(conv:float32[1x1x1x2], c:float32[2] const) {'fused_activation_function': 'NONE'}
  relu:float32[1x1x1x2] = RELU(add:float32[1x1x1x2])"""

# The ADD of a per-channel constant goes into the bias (b + c), the RELU into the conv, which
# now produces 'relu'; the bias is a new constant named after the conv; the rest is pruned.
AFTER = """\
graph inputs=['x'] outputs=['relu']
  relu:float32[1x1x1x2] = CONV_2D(x:float32[1x1x1x1], w:float32[2x1x1x1] const, conv/bias:float32[2] const) {'padding': 'VALID', 'fused_activation_function': 'RELU'}"""


def test_fuse_stage_golden_text() -> None:
    g = graph_with_input((1, 1, 1, 1))
    w = const(g, "w", np.ones((2, 1, 1, 1), np.float32))
    b = const(g, "b", np.array([0.5, -1.0], np.float32))
    conv = op(g, "CONV_2D", ["x", w, b], "conv", (1, 1, 1, 2), padding="VALID", fused_activation_function="NONE")
    add = op(g, "ADD", [conv, const(g, "c", np.array([0.25, 2.0], np.float32))], "add", (1, 1, 1, 2),
             fused_activation_function="NONE")
    g.outputs = [op(g, "RELU", [add], "relu", (1, 1, 1, 2))]
    assert g.dump() == BEFORE
    fuse = next(s for s in STAGES if s.name == "fuse")
    ctx = Context()
    assert [p(g, ctx) for p in fuse.passes] == [False, False, False, False, False, False, False, False, False, False,
                                                False, False, True, False, False, False, False, False, False, False,
                                                False, False, False, False, True, False, False, False, False, False,
                                                False]
    # reshape chains, pad→conv, N-D FC, RESHAPE before FC, binary before reshape, activation before reshape, reshape
    # chains, reduce keep_dims, RESHAPE before a
    # broadcast, identities, mul→conv weights (BN), add/mul→FC, bias, mul→weights (BN), hswish (before the fold into the next conv), mul→next
    # weights, bias, mul→weights (a scale after the BatchNorm's shift: layer scale), bias, constant ADD chains,
    # reshape chains, RESHAPE before a broadcast, N-D FC across other leading dimensions, reshape chains, ReLU,
    # FC keeps its dimensions before a RESHAPE, N-D FC across other leading dimensions, reshape chains, hswish, prelu,
    # splat constants after an affine op as scalars
    assert g.dump() == AFTER
    assert g.const("conv/bias").tolist() == [0.75, 1.0]  # 0.5 + 0.25, -1 + 2


def _fuse(g) -> None:  # type: ignore[no-untyped-def]
    fuse = next(s for s in STAGES if s.name == "fuse")
    ctx = Context()
    for p in fuse.passes:
        p(g, ctx)


def _conv(g, x: str, name: str, channels: int = 2) -> str:  # type: ignore[no-untyped-def]
    w = const(g, f"{name}/w", np.full((channels, 1, 1, channels), 0.5, np.float32))
    return op(g, "CONV_2D", [x, w], name, (1, 2, 2, channels), padding="VALID", fused_activation_function="NONE")


def test_hard_swish_before_a_conv_is_fused_not_folded() -> None:
    """``(x · relu6(x + 3)) · (1/6) → conv``: one HARD_SWISH, the conv's weights unchanged (the 1/6
    was folded into them before, leaving ADD + MUL); ``relu6(x + 3) · x · (1/6)`` stays ADD + MUL with
    the 1/6 in the weights, as in TensorFlow."""
    for x_first in (True, False):
        g = graph_with_input((1, 2, 2, 2))
        add = op(g, "ADD", ["x", const(g, "three", np.float32(3))], "add", (1, 2, 2, 2),
                 fused_activation_function="NONE")
        gate = op(g, "RELU6", [add], "relu6", (1, 2, 2, 2))
        prod = op(g, "MUL", ["x", gate] if x_first else [gate, "x"], "mul", (1, 2, 2, 2),
                  fused_activation_function="NONE")
        sixth = op(g, "MUL", [prod, const(g, "sixth", np.float32(1 / 6))], "div", (1, 2, 2, 2),
                   fused_activation_function="NONE")
        g.outputs = [_conv(g, sixth, "conv")]
        _fuse(g)
        ops = [n.op for n in g]
        w = g.const(g.producer("conv").inputs[1])
        if x_first:
            assert ops == ["HARD_SWISH", "CONV_2D"] and np.all(w == np.float32(0.5))
        else:
            assert ops == ["ADD", "MUL", "CONV_2D"] and np.all(w == np.float32(0.5) * np.float32(1 / 6))


def test_reshape_that_only_adds_leading_ones_before_a_broadcast_goes() -> None:
    g = graph_with_input((1, 2, 2, 4))
    s = op(g, "MEAN", ["x", const(g, "axes", np.array([1, 2], np.int32))], "mean", (1, 4), keep_dims=False)
    s = op(g, "LOGISTIC", [s], "sig", (1, 4))
    r = op(g, "RESHAPE", [s, const(g, "shape", np.array([1, 1, 1, 4], np.int32))], "r", (1, 1, 1, 4))
    g.outputs = [op(g, "MUL", ["x", r], "se", (1, 2, 2, 4), fused_activation_function="NONE")]
    _fuse(g)
    assert [n.op for n in g] == ["MEAN", "LOGISTIC", "MUL"] and g.producer("se").inputs == ["x", "sig"]


def test_reshape_before_a_maximum_or_that_is_an_output_stays() -> None:
    for binary, outputs in (("MAXIMUM", ["se"]), ("MUL", ["se", "r"])):
        g = graph_with_input((1, 2, 2, 4))
        s = op(g, "LOGISTIC", [op(g, "MEAN", ["x", const(g, "axes", np.array([1, 2], np.int32))], "mean", (1, 4),
                                     keep_dims=False)], "sig", (1, 4))
        r = op(g, "RESHAPE", [s, const(g, "shape", np.array([1, 1, 1, 4], np.int32))], "r", (1, 1, 1, 4))
        op(g, binary, ["x", r], "se", (1, 2, 2, 4), **({"fused_activation_function": "NONE"} if binary == "MUL" else {}))
        g.outputs = outputs
        _fuse(g)
        assert "RESHAPE" in [n.op for n in g]
