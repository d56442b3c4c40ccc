"""The ``fold`` stage, last: an op computed twice on the same operands is computed once.

    y1 = op(a, b) {attrs},  y2 = op(a, b) {attrs}        ⇒        y1, and y2's readers read y1

TensorFlow's converter runs common-subexpression elimination on the graph; NASNet's cells
apply the same ReLU and the same pooling to one tensor in several branches (measured on
NASNetMobile at 32 px: TensorFlow writes 48 RELU, 40 AVERAGE_POOL_2D and 4 MAX_POOL_2D where
each branch's copy gave 112, 52 and 8). Two ops are the same when they have the same op,
operands (by name, in order), attributes, and output types, shapes and quantization
parameters (two QUANTIZE nodes of one tensor with other parameters are different ops).
A float32 constant operand is compared by value (shape, bytes, parameters), as TensorFlow's
converter makes equal constants one before it compares ops: FastViT's identity-branch
BatchNormalization and the one its block subtracts read one tensor with equal statistics, and
TensorFlow writes one MUL+ADD for both (kcam FastViT_T8, measured: 25 MUL where two copies gave 35).
Integer constants (shapes, paddings) stay compared by name: TensorFlow does not merge every pair
of equal PADs (kcam YOLOV8_N at 32 px: the two PADs of one 4x4 or 2x2 map are one, the two of the
1x1 map stay apart and go into their convolutions), a rule not settled here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.digest import value_digest
from qconvert.ir.passes import Context


def _frozen(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


_HEAD = 16  # elements compared before two constants of a shape are digested


def _const_names(graph: Graph) -> dict[str, str]:
    """Each float32 constant equal to an earlier one (shape, bytes, parameters) → that one's name.
    Only constants sharing their shape, parameters and first elements with another are digested (a
    digest, not a copy of the bytes: ResNet50 has tens of MB of weights of a shared shape; the first
    elements tell most weights apart without reading them all)."""
    groups: dict[tuple, list[str]] = {}
    for name, t in graph.tensors.items():
        if t.data is not None and t.dtype == "float32":
            data = np.asarray(t.data)
            head = data.flat[:_HEAD].tobytes()  # in C order, without copying a strided array
            groups.setdefault((data.shape, t.quant, t.blockwise, head), []).append(name)
    same: dict[str, str] = {}
    for names in groups.values():
        if len(names) < 2:
            continue
        first: dict[bytes, str] = {}
        for name in names:
            kept = first.setdefault(value_digest(np.asarray(graph.tensors[name].data)), name)
            if kept != name:
                same[name] = kept
    return same


def _key(graph: Graph, node: Node, same: dict[str, str]) -> tuple:
    # QuantParams is a frozen dataclass of tuples: hashable and compared field by field
    # (its repr printed every per-channel scale: 17 ms on ResNet50)
    outs = tuple((graph.tensors[o].dtype, _frozen(graph.tensors[o].shape), graph.tensors[o].quant)
                 for o in node.outputs)
    return node.op, tuple(same.get(i, i) for i in node.inputs), _frozen(node.attrs), outs


def dedupe_ops(graph: Graph, ctx: Context) -> bool:
    seen: dict[tuple, Node] = {}
    dead = []
    same = _const_names(graph)
    for node in graph:
        if not node.inputs or any(o in graph.outputs for o in node.outputs):
            continue
        key = _key(graph, node, same)
        first = seen.setdefault(key, node)
        if first is node:
            continue
        for mine, kept in zip(node.outputs, first.outputs):
            graph.replace_all_uses(mine, kept)
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
