"""The ``quantize`` stage, first: two FakeQuants in a row keep the first one's range, as in
TensorFlow.

    x ──▶ Q(p1) ──▶ DQ ──▶ Q(p2) ──▶ DQ ──▶ op        ⇒        x ──▶ Q(p1) ──▶ DQ ──▶ op

TensorFlow's converter folds ``quantize(dequantize(v))`` back to ``v`` when ``v`` comes
from a quantized op, so the second FakeQuant's requantize disappears: the tensor keeps
the first range, and the second range survives only in what the quantization driver
already derived from it (the next op's bias scale). That is inconsistent, so the user
is told; but it is what TensorFlow ships, and we match it bit for bit. Pairs that
propagation added (requantizes for same-scale ops) are not affected.
"""

from __future__ import annotations

from qconvert.ir import Graph
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import dequantized_from, origin_of


def drop_back_to_back_fake_quant(graph: Graph, ctx: Context) -> bool:
    changed = False
    for q2 in graph:
        if origin_of(q2) is not Origin.FAKE_QUANT:
            continue
        pair = dequantized_from(graph, q2.inputs[0])
        if pair is None or origin_of(pair[0]) is not Origin.FAKE_QUANT:
            continue
        q1, dq1 = pair
        p1, p2 = graph.tensors[q1.outputs[0]].quant, graph.tensors[q2.outputs[0]].quant
        if p1.same_as(p2):
            continue
        ctx.note(
            f"two FakeQuants in a row after '{q1.inputs[0]}' ({p1}, then {p2}): as TensorFlow does, the tensor "
            f"keeps the first range and the second is used only for the next op's bias; remove one of them"
        )
        for dq2 in list(graph.consumers(q2.outputs[0])):
            graph.replace_all_uses(dq2.outputs[0], dq1.outputs[0])
        changed = True
    graph.prune()
    return changed
