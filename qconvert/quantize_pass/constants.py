"""Stage 5a: quantize constants.

    const (float) ──▶ Q(params)        ⇒        const (int8 / int32, params)

Weights round half away from zero after dividing by the double scale and adding the
zero point; biases are int32 with zero point 0 (TensorFlow's UniformSupport.h).
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_quantize
from qconvert.quant import quantize_array, quantize_bias


def quantize_constants(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        if not is_quantize(node) or not graph.is_const(node.inputs[0]):
            continue
        out = graph.tensors[node.outputs[0]]
        value = graph.const(node.inputs[0])
        if not np.isfinite(value).all():
            raise ConversionError(
                f"constant '{node.inputs[0]}' contains NaN or infinite values; it cannot be quantized "
                f"(check the weights and BatchNorm statistics of the frozen graph)"
            )
        params = out.quant
        if params.dtype == "int32":
            out.data = quantize_bias(value, params.scale if params.axis is not None else params.scale[0])
        else:
            out.data = quantize_array(value, params)
        out.dtype = out.data.dtype.name
        dead.append(node)
    graph.remove_nodes(dead)
    return bool(dead)
