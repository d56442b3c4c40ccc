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
    assert [p(g, ctx) for p in fuse.passes] == [False, False, False, False, False, False, False, False, True, False,
                                                False, False, False, True, False, False]
    # pad→conv, N-D FC, RESHAPE before FC, binary before reshape, reshape chains, reduce keep_dims, identities,
    # add→FC, bias, BN, mul→weights, bias, constant ADD chains, ReLU, hswish, prelu
    assert g.dump() == AFTER
    assert g.const("conv/bias").tolist() == [0.75, 1.0]  # 0.5 + 0.25, -1 + 2
