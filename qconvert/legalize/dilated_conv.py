"""Stage 2 (first): dilated convolutions written as SpaceToBatchND → conv → BatchToSpaceND.

    SpaceToBatchND(x, block, pads) ──▶ Conv2D|DepthwiseConv2dNative (VALID) [──▶ BiasAdd]
        ──▶ BatchToSpaceND(·, block, crops)
    ⇒   Conv2D|DepthwiseConv2dNative(x, dilations=block, padding=SAME or VALID) [──▶ BiasAdd]

TensorFlow builds a dilated convolution this way when it runs it; its converter folds
the pattern back into one dilated CONV_2D / DEPTHWISE_CONV_2D, and so do we. The
padding is VALID when the block paddings are all zero, else SAME; the fold is only
made when the folded op's output shape is the BatchToSpaceND's.
"""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.ops.windows import window_out as _window_out

_CONVS = ("Conv2D", "DepthwiseConv2dNative")


def fold_dilated_conv(graph: Graph, ctx: Context) -> bool:
    dead = []
    for b2s in graph:
        if b2s.op != "BatchToSpaceND":
            continue
        mid = graph.producer(b2s.inputs[0])
        bias = None
        if mid is not None and mid.op == "BiasAdd" and len(graph.consumers(mid.outputs[0])) == 1:
            bias, mid = mid, graph.producer(mid.inputs[0])
        conv = mid
        if conv is None or conv.op not in _CONVS or len(graph.consumers(conv.outputs[0])) != 1:
            continue
        s2b = graph.producer(conv.inputs[0])
        if s2b is None or s2b.op != "SpaceToBatchND" or len(graph.consumers(s2b.outputs[0])) != 1:
            continue
        block = graph.const(s2b.inputs[1])
        block2 = graph.const(b2s.inputs[1])
        pads = graph.const(s2b.inputs[2])
        if block is None or block2 is None or pads is None or not np.array_equal(block, block2):
            continue
        if conv.attrs.get("padding") != "VALID" or list(conv.attrs.get("strides", [1, 1, 1, 1])) != [1, 1, 1, 1]:
            continue
        dh, dw = (int(v) for v in np.asarray(block).reshape(-1))
        padding = "VALID" if not np.asarray(pads).any() else "SAME"
        x = s2b.inputs[0]
        xs = graph.tensors[x].shape
        ws = graph.tensors[conv.inputs[1]].shape
        out = graph.tensors[b2s.outputs[0]].shape
        expect = (_window_out(xs[1], ws[0], 1, dh, padding), _window_out(xs[2], ws[1], 1, dw, padding))
        if tuple(out[1:3]) != expect:
            continue
        conv.inputs[0] = x
        conv.attrs["dilations"] = [1, dh, dw, 1]
        conv.attrs["padding"] = padding
        graph.tensors[conv.outputs[0]].shape = out
        last = conv
        if bias is not None:
            graph.tensors[bias.outputs[0]].shape = out
            last = bias
        graph.replace_all_uses(b2s.outputs[0], last.outputs[0])
        dead += [s2b, b2s]
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
