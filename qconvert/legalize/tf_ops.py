"""Stage 2b: TensorFlow ops become TFLite-level ops (still float), each by the rewrite its row
in the frontend's TF op table names (``qconvert.frontend.tf_ops``, rewrites in
``qconvert.frontend.legalization``: conv kernels HWIO → OHWI with a zero bias, MatMul →
FULLY_CONNECTED, FusedBatchNorm → MUL + ADD, options as TFLite writes them).
"""

from __future__ import annotations

from qconvert.errors import ConversionError
from qconvert.frontend.tf_ops import TF_OPS
from qconvert.ir import Graph
from qconvert.ir.passes import Context


def legalize_ops(graph: Graph, ctx: Context) -> bool:
    changed = False
    for node in graph:
        spec = TF_OPS.get(node.op)
        if spec is None or spec.tfl is None:
            continue
        if spec.legalize is None:
            raise ConversionError(f"node '{node.name}': no legalization for {node.op}")
        spec.legalize(graph, node)
        changed = True
    return changed
