"""The ``fold`` stage, first (and again after ``hoist_layout``): evaluate nodes whose inputs are
all constants.

    const ──▶ op ──▶ y        ⇒        y (const)

Kernels come from the op table (rows that fold); an op that only reshapes takes its
output tensor's shape. FAKE_QUANT on a constant weight is evaluated with
an emulation of TensorFlow's float32 FakeQuant kernel, as TensorFlow's converter
does before it quantizes the weight. QUANTIZE/DEQUANTIZE are never folded here:
they carry the parameters the later stages need.
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.ir.graph import dtype_name
from qconvert.ir.passes import Context
from qconvert.ops import row


def fold_constants(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        r = row(node.op)
        if r is None or not r.folds or not node.inputs or not all(graph.is_const(i) for i in node.inputs):
            continue
        args = [graph.const(i) for i in node.inputs]
        out = graph.tensors[node.outputs[0]]
        try:
            if r.reshapes:
                target = out.shape if out.shape is not None else [int(v) for v in args[1].reshape(-1)]
                value = np.asarray(args[0]).reshape(target)
            else:
                value = np.asarray(r.kernel(node, *args))  # type: ignore[misc]
        except (ValueError, IndexError, TypeError) as exc:
            raise ConversionError(f"node '{node.name}' ({node.op}): cannot fold constant inputs: {exc}") from None
        if out.shape is not None and value.shape != tuple(out.shape):
            value = value.reshape(out.shape)
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        if value.base is not None or not value.flags.c_contiguous:  # a view of an input: own it
            value = np.array(value, copy=True, order="C")
        out.data = value
        out.dtype = dtype_name(value.dtype)
        dead.append(node)
    graph.remove_nodes(dead)
    return bool(dead)
