"""The ``prepare`` stage: ``--default-ranges MIN,MAX`` ("dummy quantization", TensorFlow's
default_ranges_stats).

    op ──▶ y (no range)        ⇒        op ──▶ Q(default) ──▶ DQ ──▶ y

Every op result (and graph input) that propagation left without parameters gets the
default range, in the signed domain as TensorFlow's DefaultQuantParams pass does;
biases then follow from in×w when propagation runs again. The parameters are not
measured, so every tensor that got them is reported: this is for experiments.
"""

from __future__ import annotations

from qconvert.ir import Graph
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after, is_quantize
from qconvert.ops import Rule, row
from qconvert.prepare.propagate import propagate_quant_params
from qconvert.quant import signed_range_params


def apply_default_ranges(graph: Graph, ctx: Context) -> bool:
    """``--default-ranges`` (``ctx.options.precision.default_ranges``), then propagation again."""
    default = ctx.options.precision.default_ranges
    if default is None:
        return False
    params = signed_range_params(*default)
    filled = []
    for node in list(graph.nodes):
        r = row(node.op)
        if r is None or r.rule is Rule.QUANT:
            continue
        for out in node.outputs:
            readers = graph.consumers(out)
            if graph.tensors[out].dtype != "float32":
                continue
            if readers and all(is_quantize(x) for x in readers) and out not in graph.outputs:
                continue
            insert_qdq_after(graph, out, params, Origin.DEFAULT_RANGE)
            filled.append(out)
    if filled:
        shown = ", ".join(f"'{t}'" for t in filled[:10]) + (f" and {len(filled) - 10} more" if len(filled) > 10 else "")
        ctx.note(
            f"--default-ranges {default[0]:g},{default[1]:g} used for {len(filled)} tensor(s) with no range: {shown}"
        )
    propagated = propagate_quant_params(graph, ctx)  # biases of the newly ranged inputs, same-scale ops
    return bool(filled) or propagated
