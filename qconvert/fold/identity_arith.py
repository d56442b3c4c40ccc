"""The ``fold`` stage (and again in ``fuse``): arithmetic that changes nothing is removed, as
TensorFlow's canonicalizer does.

    x * 1,  1 * x,  x + 0,  0 + x,  x - 0        ⇒        x
    x * 0,  0 * x                                 ⇒        0 (a constant of the output's shape)
    MEAN(x) over axes of size 1, keep_dims        ⇒        x

(x * 0: an unrolled RNN's first step multiplies by its zero initial state; TensorFlow's
graph optimizer folds that product, and the ADD of it then goes as x + 0. Only when the zero
operand has the product's shape, as grappler's rule asks: ``x * zeros([4])`` on a [1, 4] x stays a
MUL in TensorFlow 2.21's file, measured. Not the MUL of a
decomposed BatchNorm with a zero scale, γ = 0, as residual blocks initialise their last one:
the optimizer sees a FusedBatchNorm there, and TensorFlow's converter folds the MUL into the
convolution before it, which stays with zero weights.)

only for scalar (or all-equal) constants whose broadcast leaves x's shape as it is.
"""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.legalize.tf_rewrites import BATCH_NORM_PRODUCT
from qconvert.ops import row


def remove_identity_arith(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        r = row(node.op)
        if r is None:
            continue
        if r.removable_if_same_shape and graph.tensors[node.inputs[0]].shape == graph.tensors[node.outputs[0]].shape:
            # A mean over axes of size 1 with keep_dims (a global pool over a 1x1 map).
            graph.replace_all_uses(node.outputs[0], node.inputs[0])
            dead.append(node)
            continue
        rule = r.neutral
        if rule is None or node.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        out = graph.tensors[node.outputs[0]]
        if r.arith == "mul" and out.shape is not None and node.outputs[0] not in graph.outputs \
                and not node.attrs.get(BATCH_NORM_PRODUCT) and any(
                c is not None and c.size and not np.any(c) and c.dtype == np.float32
                and tuple(c.shape) == tuple(out.shape)
                for c in (graph.const(i) for i in node.inputs)):
            out.data = np.zeros(out.shape, np.float32)
            out.dtype = "float32"
            dead.append(node)
            continue
        neutral, const_slots = rule
        for slot in const_slots:
            c = graph.const(node.inputs[slot])
            other = node.inputs[1 - slot]
            if c is None or graph.is_const(other) or c.size == 0 or not np.all(c == neutral):
                continue
            if graph.tensors[other].shape != graph.tensors[node.outputs[0]].shape:
                continue
            graph.replace_all_uses(node.outputs[0], other)
            dead.append(node)
            break
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
