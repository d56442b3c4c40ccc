"""Stage 3c: FakeQuant nodes left on activations are identities now.

    x ──▶ FAKE_QUANT ──▶ Q ──▶ DQ        ⇒        x ──▶ Q ──▶ DQ

Their range already lives in the Q/DQ pair that stage 2 put after them.
"""

from __future__ import annotations

from qconvert.converter.ir import Graph


def drop_fake_quant(graph: Graph) -> Graph:
    dead = []
    for node in graph:
        if node.op == "FAKE_QUANT":
            graph.replace_all_uses(node.outputs[0], node.inputs[0])
            dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return graph
