"""The ``legalize`` stage: GELU written out in TensorFlow ops becomes one TFLite GELU, as
TensorFlow's converter fuses it (measured on TF 2.21: keras.applications.ConvNeXtTiny gets
18 GELU v2, ``approximate=False``).

1. ``Mul(Mul(x, 0.5), Erfc(Mul(Neg(x), 1/√2)))``  ⇒ ``GELU(x)``
   (``tf.nn.gelu``, Keras' ``gelu``; ``Mul(x, -1/√2)`` for the Neg-and-Mul pair too)
2. ``Mul(Mul(x, 0.5), AddV2(1, Tanh(Mul(√(2/π), AddV2(x, Mul(0.044715, Pow(x, 3)))))))``
   ⇒ ``GELU(x, approximate=True)`` (``tf.nn.gelu(approximate=True)``)

Constants are float32 scalars in either operand slot, compared with float32 tolerance;
every intermediate has one reader. An Erfc or Pow outside these patterns is refused when
``legalize_ops`` reaches it (``qconvert.legalize.tf_rewrites.pattern_only``).
"""

from __future__ import annotations

import math

from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context

_MUL, _ADD = ("Mul",), ("Add", "AddV2")


def _only(graph: Graph, name: str, ops: tuple[str, ...]) -> Node | None:
    """The producer of ``name`` if it is one of ``ops`` and ``name`` has no other reader."""
    node = graph.producer(name)
    if node is None or node.op not in ops or len(graph.consumers(name)) != 1 or name in graph.outputs:
        return None
    return node


def _with_const(graph: Graph, node: Node | None, value: float) -> str | None:
    """The operand of binary ``node`` whose other operand is the scalar constant ``value``
    (float32 tolerance: TF writes 1/√2 and √(2/π) rounded from double)."""
    return graph.scalar_operand(node, value, rel_tol=1e-6) if node is not None else None


def _half(graph: Graph, name: str) -> tuple[str, Node] | None:
    node = _only(graph, name, _MUL)
    x = _with_const(graph, node, 0.5)
    return (x, node) if x is not None and node is not None else None


def _erfc_of_scaled(graph: Graph, name: str) -> tuple[str, list[Node]] | None:
    """``(x, nodes)`` where ``name`` is ``Erfc(Mul(Neg(x), 1/√2))`` or ``Erfc(Mul(x, -1/√2))``."""
    erfc = _only(graph, name, ("Erfc",))
    if erfc is None:
        return None
    scale = _only(graph, erfc.inputs[0], _MUL)
    inv = math.sqrt(0.5)
    neg_x = _with_const(graph, scale, inv)
    if neg_x is not None:
        neg = _only(graph, neg_x, ("Neg",))
        return (neg.inputs[0], [erfc, scale, neg]) if neg is not None else None  # type: ignore[list-item]
    x = _with_const(graph, scale, -inv)
    return (x, [erfc, scale]) if x is not None else None  # type: ignore[list-item]


def _one_plus_tanh(graph: Graph, name: str) -> tuple[str, list[Node]] | None:
    """``(x, nodes)`` where ``name`` is ``1 + tanh(√(2/π)·(x + 0.044715·x³))``."""
    add1 = _only(graph, name, _ADD)
    t = _with_const(graph, add1, 1.0)
    tanh = _only(graph, t, ("Tanh",)) if t is not None else None
    if tanh is None:
        return None
    scaled = _only(graph, tanh.inputs[0], _MUL)
    inner_name = _with_const(graph, scaled, math.sqrt(2.0 / math.pi))
    inner = _only(graph, inner_name, _ADD) if inner_name is not None else None
    if inner is None:
        return None
    for slot in (0, 1):
        x, cubic = inner.inputs[slot], _only(graph, inner.inputs[1 - slot], _MUL)
        cube_name = _with_const(graph, cubic, 0.044715)
        cube = _only(graph, cube_name, ("Pow",)) if cube_name is not None else None
        if cube is not None and cube.inputs[0] == x and _with_const(graph, cube, 3.0) == x:
            return x, [add1, tanh, scaled, inner, cubic, cube]  # type: ignore[list-item]
    return None


def fuse_gelu(graph: Graph, ctx: Context) -> bool:
    dead: list[Node] = []
    for outer in graph:
        if outer.op not in _MUL or len(outer.inputs) != 2:
            continue
        for slot in (0, 1):
            half = _half(graph, outer.inputs[slot])
            if half is None:
                continue
            x, half_node = half
            other = outer.inputs[1 - slot]
            exact = _erfc_of_scaled(graph, other)
            approximate = None if exact is not None else _one_plus_tanh(graph, other)
            match = exact or approximate
            if match is None or match[0] != x:
                continue
            outer.op, outer.inputs, outer.attrs = "GELU", [x], {"approximate": approximate is not None}
            dead += [half_node, *match[1]]
            break
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
