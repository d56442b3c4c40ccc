"""The ``fuse`` stage: activations written out in several ops become the one TFLite op,
as TensorFlow's optimize pass fuses them (after ``into_op.fuse_activation``, whose fused
RELU/RELU6 the patterns look for).

1. ``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)`` (see fuse_hard_swish; it runs before
   fuse_activation too, so that the 1/6 is not folded into the next convolution first).
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


def _add3_relu6(graph: Graph, name: str) -> tuple[str, list[Node]] | None:
    """``(x, nodes)`` where ``name`` is ``relu6(x + 3)`` read only once: an ADD(x, 3) with a fused
    RELU6, or (before fuse_activation) a RELU6 op reading an ADD(x, 3) that nothing else reads."""
    add = _arith(graph, name, "add")
    if add is not None and add.attrs.get("fused_activation_function") == HARD_SWISH_GATE:
        x = _split(graph, add, 3.0)
        return (x, [add]) if x is not None else None
    gate = graph.producer(name)
    if gate is None or _activation(gate) != HARD_SWISH_GATE or len(graph.consumers(name)) != 1 \
            or name in graph.outputs:
        return None
    add = _arith(graph, gate.inputs[0], "add")
    if add is None or add.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    x = _split(graph, add, 3.0)
    return (x, [gate, add]) if x is not None else None


def _plain_mul(graph: Graph, name: str) -> Node | None:
    node = _arith(graph, name, "mul")
    return node if node is not None and node.attrs.get("fused_activation_function", "NONE") == "NONE" else None


def fuse_hard_swish(graph: Graph, ctx: Context) -> bool:
    """``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)``, as TensorFlow's optimize pass fuses it
    (measured on TF 2.21, post-training and QAT without a FakeQuant inside: one HARD_SWISH v1) in
    its two forms:

    1. ``(x · relu6(x + 3)) · (1/6)``: the inner MUL with ``x`` first (``relu6(x + 3) · x · (1/6)``
       stays ADD + MUL, the 1/6 folded into a following convolution, as in TensorFlow); the
       outer MUL either way round; ``/ 6`` is the same MUL (legalized RealDiv), so Keras code's
       ``x * relu6(x + 3) / 6`` fuses;
    2. ``x · (relu6(x + 3) · (1/6))`` (Keras' hard_sigmoid, ``/ 6`` too), either way round.

    The constants are float32 scalars 3 (either side of the ADD) and 1/6 (0.16666667 written out
    is the same float32; 0.1667 is not); every intermediate has one reader. The RELU6 is the
    ADD's fused activation or, when this runs before fuse_activation (so that
    fold_mul_into_following_weights does not take the 1/6 into the next convolution first), the
    RELU6 op after it. A FakeQuant in between (a Q/DQ pair) blocks it."""
    dead: list[Node] = []
    for outer in graph:
        r = row(outer.op)
        if r is None or r.arith != "mul" or outer.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        found = _hard_swish_of(graph, outer)
        if found is None:
            continue
        x, parts = found
        outer.op, outer.inputs, outer.attrs = "HARD_SWISH", [x], {}
        dead += parts
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _hard_swish_of(graph: Graph, outer: Node) -> tuple[str, list[Node]] | None:
    """``(x, nodes to remove)`` when the MUL ``outer`` ends one of fuse_hard_swish's forms."""
    for slot in (0, 1):  # x · (relu6(x + 3) · 1/6), either way round
        inner = _plain_mul(graph, outer.inputs[1 - slot])
        gate = _split(graph, inner, 1.0 / 6.0) if inner is not None else None
        found = _add3_relu6(graph, gate) if gate is not None else None
        if found is not None and found[0] == outer.inputs[slot]:
            return found[0], [inner, *found[1]]
    product = _split(graph, outer, 1.0 / 6.0)  # (x · relu6(x + 3)) · 1/6, x first in the product
    inner = _plain_mul(graph, product) if product is not None else None
    found = _add3_relu6(graph, inner.inputs[1]) if inner is not None and len(inner.inputs) == 2 else None
    if found is not None and found[0] == inner.inputs[0]:
        return found[0], [inner, *found[1]]
    return None


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
