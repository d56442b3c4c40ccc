"""Stage 3a: evaluate nodes whose inputs are all constants.

    const ──▶ op ──▶ y        ⇒        y (const)

Kernels come from the op table. FAKE_QUANT on a constant weight is evaluated with
an emulation of TensorFlow's float32 FakeQuant kernel, as TensorFlow's converter
does before it quantizes the weight. QUANTIZE/DEQUANTIZE are never folded here:
they carry the parameters the later stages need.
"""

from __future__ import annotations

import numpy as np

from qconvert.converter.ir import ConversionError, Graph
from qconvert.converter.ops import KERNELS


def fold_constants(graph: Graph) -> Graph:
    dead = []
    for node in graph:
        kernel = KERNELS.get(node.op)
        if kernel is None or not node.inputs or not all(graph.is_const(i) for i in node.inputs):
            continue
        args = [graph.const(i) for i in node.inputs]
        out = graph.tensors[node.outputs[0]]
        try:
            value = np.asarray(kernel(node, *args))
        except (ValueError, IndexError, TypeError) as exc:
            raise ConversionError(f"node '{node.name}' ({node.op}): cannot fold constant inputs: {exc}") from None
        if out.shape is not None and value.shape != tuple(out.shape):
            value = value.reshape(out.shape)
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        out.data = np.array(value, copy=True, order="C")
        out.dtype = value.dtype.name
        dead.append(node)
    graph.remove_nodes(dead)
    return graph
