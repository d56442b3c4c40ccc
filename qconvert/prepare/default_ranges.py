"""Stage 4b': ``--default-ranges MIN,MAX`` ("dummy quantization", TensorFlow's default_ranges_stats).

    op ──▶ y (no range)        ⇒        op ──▶ Q(default) ──▶ DQ ──▶ y

Every op result (and graph input) that propagation left without parameters gets the
default range, in the signed domain as TensorFlow's DefaultQuantParams pass does;
biases then follow from in×w when propagation runs again. The parameters are not
measured, so every tensor that got them is reported: this is for experiments.
"""

from __future__ import annotations

from qconvert.converter.ir import Graph
from qconvert.converter.ops import TFL_OPS, Rule
from qconvert.converter.qdq import insert_qdq_after


def apply_default_ranges(graph: Graph, default: tuple[float, float] | None) -> Graph:
    if default is None:
        return graph
    from qconvert.converter.quant_math import signed_range_params

    params = signed_range_params(*default)
    filled = []
    for node in list(graph.nodes):
        row = TFL_OPS.get(node.op)
        if row is None or row.rule is Rule.QUANT:
            continue
        for out in node.outputs:
            readers = graph.consumers(out)
            if graph.tensors[out].dtype != "float32":
                continue
            if readers and all(r.op == "QUANTIZE" for r in readers) and out not in graph.outputs:
                continue
            insert_qdq_after(graph, out, params, "default")
            filled.append(out)
    if filled:
        shown = ", ".join(f"'{t}'" for t in filled[:10]) + (f" and {len(filled) - 10} more" if len(filled) > 10 else "")
        graph.notes.append(
            f"--default-ranges {default[0]:g},{default[1]:g} used for {len(filled)} tensor(s) with no range: {shown}"
        )
    return graph
