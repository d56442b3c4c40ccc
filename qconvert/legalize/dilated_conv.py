"""The ``legalize`` stage, first: dilated convolutions written as SpaceToBatchND → conv → BatchToSpaceND.

    SpaceToBatchND(x, block, pads) ──▶ Conv2D|DepthwiseConv2dNative (VALID) [──▶ BiasAdd]
        ──▶ BatchToSpaceND(·, block, crops)
    ⇒   Conv2D|DepthwiseConv2dNative(x, dilations=block, padding=SAME or VALID) [──▶ BiasAdd]

A 1-D one (Keras Conv1D with dilation_rate) has its 2-D convolution between ExpandDims
and Squeeze, and a one-element block:

    SpaceToBatchND(x, [d], pads) ──▶ ExpandDims(·, 1) ──▶ Conv2D (VALID) ──▶ Squeeze(·, [1])
        [──▶ BiasAdd] ──▶ BatchToSpaceND(·, [d], crops)
    ⇒   ExpandDims(x, 1) ──▶ Conv2D(dilations=[1, 1, d, 1]) ──▶ Squeeze [──▶ BiasAdd]

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
        if mid is not None and mid.op == "BiasAdd" and _only_use(graph, mid):
            bias, mid = mid, graph.producer(mid.inputs[0])
        squeeze = expand = None
        if mid is not None and mid.op == "Squeeze" and _only_use(graph, mid) \
                and [int(v) for v in mid.attrs.get("squeeze_dims", [])] in ([1], [-3]):
            squeeze, mid = mid, graph.producer(mid.inputs[0])
        conv = mid
        if conv is None or conv.op not in _CONVS or not _only_use(graph, conv):
            continue
        s2b = graph.producer(conv.inputs[0])
        if squeeze is not None:
            expand = s2b
            axis = graph.const(expand.inputs[1]) if expand is not None and expand.op == "ExpandDims" else None
            if axis is None or int(np.asarray(axis).reshape(-1)[0]) not in (1, -3) or not _only_use(graph, expand):
                continue
            s2b = graph.producer(expand.inputs[0])
        if s2b is None or s2b.op != "SpaceToBatchND" or not _only_use(graph, s2b):
            continue
        block = graph.const(s2b.inputs[1])
        block2 = graph.const(b2s.inputs[1])
        pads = graph.const(s2b.inputs[2])
        if block is None or block2 is None or pads is None or not np.array_equal(block, block2):
            continue
        if conv.attrs.get("padding") != "VALID" or list(conv.attrs.get("strides", [1, 1, 1, 1])) != [1, 1, 1, 1]:
            continue
        dilation = [int(v) for v in np.asarray(block).reshape(-1)]
        if len(dilation) != (1 if squeeze is not None else 2):
            continue
        dh, dw = (1, dilation[0]) if squeeze is not None else dilation
        padding = "VALID" if not np.asarray(pads).any() else "SAME"
        x = s2b.inputs[0]
        xs = list(graph.tensors[x].shape)
        ws = graph.tensors[conv.inputs[1]].shape
        out = graph.tensors[b2s.outputs[0]].shape
        spatial = [1, xs[1]] if squeeze is not None else xs[1:3]
        expect = (_window_out(spatial[0], ws[0], 1, dh, padding), _window_out(spatial[1], ws[1], 1, dw, padding))
        if tuple(out[1:-1]) != (expect if squeeze is None else expect[1:]):
            continue
        conv.attrs["dilations"] = [1, dh, dw, 1]
        conv.attrs["padding"] = padding
        if squeeze is None:
            conv.inputs[0] = x
            graph.tensors[conv.outputs[0]].shape = out
        else:
            expand.inputs[0] = x
            graph.tensors[expand.outputs[0]].shape = (xs[0], 1, *xs[1:])
            graph.tensors[conv.outputs[0]].shape = (out[0], 1, *out[1:])
            graph.tensors[squeeze.outputs[0]].shape = out
        last = squeeze or conv
        if bias is not None:
            graph.tensors[bias.outputs[0]].shape = out
            last = bias
        graph.replace_all_uses(b2s.outputs[0], last.outputs[0])
        dead += [s2b, b2s]
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _only_use(graph: Graph, node) -> bool:  # type: ignore[no-untyped-def]
    return len(graph.consumers(node.outputs[0])) == 1
