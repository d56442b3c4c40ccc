"""The ``fold`` stage, last: an op computed twice on the same operands is computed once.

    y1 = op(a, b) {attrs},  y2 = op(a, b) {attrs}        ⇒        y1, and y2's readers read y1

TensorFlow's converter runs common-subexpression elimination on the graph; NASNet's cells
apply the same ReLU and the same pooling to one tensor in several branches (measured on
NASNetMobile at 32 px: TensorFlow writes 48 RELU, 40 AVERAGE_POOL_2D and 4 MAX_POOL_2D where
each branch's copy gave 112, 52 and 8). Two ops are the same when they have the same op,
operands (by name, in order), attributes, and output types, shapes and quantization
parameters (two QUANTIZE nodes of one tensor with other parameters are different ops).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.ir import Graph, Node
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


def _key(graph: Graph, node: Node) -> tuple:
    # QuantParams is a frozen dataclass of tuples: hashable and compared field by field
    # (its repr printed every per-channel scale: 17 ms on ResNet50)
    outs = tuple((graph.tensors[o].dtype, _frozen(graph.tensors[o].shape), graph.tensors[o].quant)
                 for o in node.outputs)
    return node.op, tuple(node.inputs), _frozen(node.attrs), outs


def dedupe_ops(graph: Graph, ctx: Context) -> bool:
    seen: dict[tuple, Node] = {}
    dead = []
    for node in graph:
        if not node.inputs or any(o in graph.outputs for o in node.outputs):
            continue
        key = _key(graph, node)
        first = seen.setdefault(key, node)
        if first is node:
            continue
        for mine, kept in zip(node.outputs, first.outputs):
            graph.replace_all_uses(mine, kept)
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
