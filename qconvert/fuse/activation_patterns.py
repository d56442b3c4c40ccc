"""The ``fuse`` stage: activations written out in several ops become the one TFLite op,
as TensorFlow's optimize pass fuses them (after ``into_op.fuse_activation``, whose fused
RELU/RELU6 the patterns look for).

1. ``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)`` (see fuse_hard_swish).
2. ``relu(x) + c · relu(-x)`` ⇒ ``PRELU(x, -c)`` (see fuse_prelu).

A FakeQuant in between (a Q/DQ pair) blocks them, as in TensorFlow's converter.
"""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context
from qconvert.ops import HARD_SWISH_GATE, PRELU_GATE, row


def _arith(graph: Graph, name: str, kind: str) -> Node | None:
    """The producer of ``name`` if it is a ``kind`` op ("add", "mul") read only there, without
    a fused activation unless the caller checks it."""
    node = graph.producer(name)
    r = row(node.op) if node is not None else None
    if r is None or r.arith != kind or len(graph.consumers(name)) != 1 or name in graph.outputs:
        return None
    return node


def _split(graph: Graph, node: Node, value: float) -> str | None:
    """The operand of a binary ``node`` whose other operand is exactly the scalar constant ``value``."""
    return graph.scalar_operand(node, value)


def _add3_relu6(graph: Graph, name: str) -> str | None:
    """``x`` where ``name`` is ``ADD(x, 3)`` with a fused RELU6, read only once."""
    add = _arith(graph, name, "add")
    if add is None or add.attrs.get("fused_activation_function") != HARD_SWISH_GATE:
        return None
    return _split(graph, add, 3.0)


def fuse_hard_swish(graph: Graph, ctx: Context) -> bool:
    """``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)``, as TensorFlow's optimize pass fuses it
    (measured on TF 2.21: one HARD_SWISH v1 in post-training quantization, for Keras'
    ``x * (relu6(x + 3) * (1/6))`` and for ``(x * relu6(x + 3)) * (1/6)``). The constants are
    float32 scalars 3 and 1/6; the RELU6 is the ADD's fused activation (fuse_activation ran first);
    every intermediate has one reader. A FakeQuant in between (a Q/DQ pair) blocks it."""
    dead: list[Node] = []
    for outer in graph:
        r = row(outer.op)
        if r is None or r.arith != "mul" or outer.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        x = None
        for slot in (0, 1):  # x · (relu6(x + 3) · 1/6)
            inner = _arith(graph, outer.inputs[1 - slot], "mul")
            if inner is None or inner.attrs.get("fused_activation_function", "NONE") != "NONE":
                continue
            gate = _split(graph, inner, 1.0 / 6.0)
            if gate is not None and _add3_relu6(graph, gate) == outer.inputs[slot]:
                x, parts = outer.inputs[slot], [inner, graph.producer(gate)]
                break
        if x is None:  # (x · relu6(x + 3)) · 1/6
            product = _split(graph, outer, 1.0 / 6.0)
            inner = _arith(graph, product, "mul") if product is not None else None
            if inner is not None and inner.attrs.get("fused_activation_function", "NONE") == "NONE":
                for slot in (0, 1):
                    if _add3_relu6(graph, inner.inputs[1 - slot]) == inner.inputs[slot]:
                        x, parts = inner.inputs[slot], [inner, graph.producer(inner.inputs[1 - slot])]
                        break
        if x is None:
            continue
        outer.op, outer.inputs, outer.attrs = "HARD_SWISH", [x], {}
        dead += parts  # type: ignore[arg-type]
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _negated(graph: Graph, name: str, activation: str = "NONE") -> tuple[str, Node] | None:
    """``(x, node)`` where ``name`` is ``MUL(x, -1)`` (a legalized Neg) with that fused
    activation, read only once."""
    node = _arith(graph, name, "mul")
    if node is None or node.attrs.get("fused_activation_function", "NONE") != activation:
        return None
    x = _split(graph, node, -1.0)
    return (x, node) if x is not None else None


def _activation(node: Node) -> str | None:
    r = row(node.op)
    return r.activation if r is not None else None


def fuse_prelu(graph: Graph, ctx: Context) -> bool:
    """``relu(x) + c · relu(-x)`` ⇒ ``PRELU(x, -c)``: Keras' PReLU (``-alpha`` times ``relu(-x)``),
    as TensorFlow's optimize pass fuses it (measured on TF 2.21: one PRELU v1 in post-training
    quantization). ``-x`` is a legalized Neg, ``MUL(x, -1)``, whose RELU fuse_activation fused; ``c`` is a
    constant (its negation is alpha, exact in float32) or a negated value (alpha behind a
    FakeQuant: ``MUL(DQ(alpha), -1)``). Every intermediate has one reader."""
    dead: list[Node] = []
    for add in graph:
        r = row(add.op)
        if r is None or r.arith != "add" or add.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        found = next((m for m in (_prelu_halves(graph, add, slot) for slot in (0, 1)) if m is not None), None)
        if found is None:
            continue
        x, alpha, parts = found
        add.op, add.inputs, add.attrs = "PRELU", [x, alpha], {}
        dead += parts
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _prelu_halves(graph: Graph, add: Node, slot: int) -> tuple[str, str, list[Node]] | None:
    """``(x, alpha, nodes to remove)`` when ``add``'s operand ``slot`` is ``relu(x)`` and the other
    is ``c · relu(-x)``."""
    pos = graph.producer(add.inputs[slot])
    scaled = _arith(graph, add.inputs[1 - slot], "mul")
    if pos is None or _activation(pos) != PRELU_GATE or len(graph.consumers(pos.outputs[0])) != 1 \
            or scaled is None or scaled.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    x = pos.inputs[0]
    for k in (0, 1):
        neg = _negated(graph, scaled.inputs[k], PRELU_GATE)
        if neg is None or neg[0] != x:
            continue
        c = scaled.inputs[1 - k]
        value = graph.const(c)
        if value is not None and value.dtype == np.float32:
            return x, graph.add_const(f"{add.name}/alpha", np.negative(value)), [pos, scaled, neg[1]]
        minus = _negated(graph, c)
        if minus is not None:
            return x, minus[0], [pos, scaled, neg[1], minus[1]]
    return None
