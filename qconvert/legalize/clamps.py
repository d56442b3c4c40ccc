"""The ``legalize`` stage: clamps written with Minimum/Maximum become TFLite activations.

1. ``Minimum(Maximum(x, -1), 1)`` or ``Maximum(Minimum(x, 1), -1)`` ⇒ ``RELU_N1_TO_1(x)``
2. ``Minimum(Maximum(x, 0), 6)`` or ``Maximum(Minimum(x, 6), 0)``   ⇒ ``RELU6(x)``
3. ``Maximum(x, 0)``                                                ⇒ ``RELU(x)``

The bounds must be scalar constants (any operand order), and the inner op's
result must have no other reader. Other Minimum/Maximum nodes stay and become
MINIMUM/MAXIMUM. Once they are activations, the ``fuse`` stage fuses them into the op
before them, as TensorFlow's converter does.
"""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context

_PAIRS = {(-1.0, 1.0): "RELU_N1_TO_1", (0.0, 6.0): "RELU6"}


def _bound(graph: Graph, node: Node) -> tuple[str, float] | None:
    """(the non-constant operand, the scalar bound) of a Minimum/Maximum node."""
    if len(node.inputs) != 2:
        return None
    for value, other in ((node.inputs[1], node.inputs[0]), (node.inputs[0], node.inputs[1])):
        c = graph.const(value)
        if c is not None and not graph.is_const(other) and np.asarray(c).size == 1:
            return other, float(np.asarray(c).reshape(-1)[0])
    return None


def _inner_of_a_pair(graph: Graph, node: Node) -> bool:
    """``node`` (a Maximum(x, 0)) is the inner op of a clamp its sole reader completes
    (``Minimum(Maximum(x, 0), 6)``, visited after it): the pair becomes one RELU6, not RELU then
    MINIMUM (measured on TF 2.21: ``x * min(max(x + 3, 0), 6) / 6`` is one HARD_SWISH)."""
    readers = graph.consumers(node.outputs[0])
    if len(readers) != 1 or readers[0].op != "Minimum" or node.outputs[0] in graph.outputs:
        return False
    rb = _bound(graph, readers[0])
    return rb is not None and rb[0] == node.outputs[0] and (0.0, rb[1]) in _PAIRS


def legalize_clamps(graph: Graph, ctx: Context) -> bool:
    dead = []
    changed = False
    for outer in graph:
        if outer.op not in ("Minimum", "Maximum"):
            continue
        ob = _bound(graph, outer)
        if ob is None:
            continue
        inner = graph.producer(ob[0])
        inner_op = "Maximum" if outer.op == "Minimum" else "Minimum"
        ib = _bound(graph, inner) if inner is not None and inner.op == inner_op else None
        if ib is not None and len(graph.consumers(inner.outputs[0])) == 1 and inner.outputs[0] not in graph.outputs:
            lo, hi = (ib[1], ob[1]) if outer.op == "Minimum" else (ob[1], ib[1])
            act = _PAIRS.get((lo, hi))
            if act is not None:
                outer.op, outer.inputs, outer.attrs = act, [ib[0]], {}
                dead.append(inner)
                changed = True
                continue
        if outer.op == "Maximum" and ob[1] == 0.0 and not _inner_of_a_pair(graph, outer):
            outer.op, outer.inputs, outer.attrs = "RELU", [ob[0]], {}
            changed = True
    graph.remove_nodes(dead)
    graph.prune()
    return changed or bool(dead)
