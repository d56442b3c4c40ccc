"""The ``fold`` stage: FakeQuant nodes left on activations are identities now.

    x ──▶ FAKE_QUANT ──▶ Q ──▶ DQ        ⇒        x ──▶ Q ──▶ DQ

Their range already lives in the Q/DQ pair that the ``legalize`` stage put after them.
"""

from __future__ import annotations

from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.ops import row


def drop_fake_quant(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        r = row(node.op)
        if r is not None and r.dropped_after_legalize:
            graph.replace_all_uses(node.outputs[0], node.inputs[0])
            dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
