"""The ``fold`` stage: move weight layout changes above their quantization pair.

    c ──▶ Q(axis a) ──▶ DQ ──▶ TRANSPOSE/RESHAPE ──▶ op
        ⇒   layout(c) ──▶ Q(axis a') ──▶ DQ ──▶ op

A FakeQuant on a Conv2D kernel quantizes along the last HWIO axis (O); after the
HWIO→OHWI transpose that axis is 0, which is where TFLite wants it. Depthwise
kernels [H,W,C,M] become [1,H,W,C·M]: per-tensor parameters carry over, and a
per-channel FakeQuant along M (what tfmot writes) is repeated for each C.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, QuantParams
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import add_qdq, dequantized_from, origin_of
from qconvert.ops import row


def _moved_axis(layout: str, arg: np.ndarray, old_shape: tuple[int, ...], new_shape: tuple[int, ...], params: QuantParams, where: str) -> QuantParams:
    if params.axis is None:
        return params
    if len(params.scale) == 1:
        return replace(params, axis=None)
    if layout == "transpose":
        return replace(params, axis=[int(p) for p in arg].index(params.axis))
    # RESHAPE: the quantized axis must survive as the last axis with the same size and inner layout.
    if params.axis == len(old_shape) - 1 and new_shape[-1] == old_shape[-1]:
        return replace(params, axis=len(new_shape) - 1)
    # Depthwise [H,W,C,M] -> [1,H,W,C*M] with parameters along M: channel c*M+m uses m's.
    if params.axis == len(old_shape) - 1 and len(old_shape) >= 2 and new_shape[-1] == old_shape[-2] * old_shape[-1]:
        reps = old_shape[-2]
        return replace(params, axis=len(new_shape) - 1, scale=params.scale * reps,
                       zero_point=params.zero_point * reps)
    raise ConversionError(
        f"{where}: a per-channel FakeQuant along axis {params.axis} of {list(old_shape)} cannot follow the "
        f"reshape to {list(new_shape)}; quantize depthwise kernels per tensor or along C·M"
    )


def hoist_layout(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        r = row(node.op)
        if r is None or r.layout is None or not graph.is_const(node.inputs[1]):
            continue
        pair = dequantized_from(graph, node.inputs[0])
        if pair is None:
            continue
        q, dq = pair
        src = q.inputs[0]
        if not graph.is_const(src):
            continue
        arg = np.asarray(graph.const(node.inputs[1]))
        old = graph.tensors[src]
        new_shape = graph.tensors[node.outputs[0]].shape
        value = np.transpose(old.data, arg.tolist()) if r.layout == "transpose" else old.data.reshape(new_shape)
        params = _moved_axis(r.layout, arg, old.shape, new_shape, graph.tensors[q.outputs[0]].quant, f"node '{node.name}'")
        const = graph.add_const(f"{src}/{node.op.lower()}", value)
        _, _, dq_out = add_qdq(graph, const, params, origin_of(q) or Origin.FAKE_QUANT, before=node)
        graph.replace_all_uses(node.outputs[0], dq_out)
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
