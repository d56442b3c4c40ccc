"""Stage 4a: fuse a bias add and a following activation into the op before them.

1. ``CONV_2D | DEPTHWISE_CONV_2D | FULLY_CONNECTED (…, bias) ──▶ ADD(·, c)``
   ⇒ the op with ``bias + c``, when ``c`` is a constant of one value per output
   channel and the op's output has no other reader (also ``SUB``: ``bias - c``).
2. ``op ──▶ RELU | RELU6 | RELU_N1_TO_1`` ⇒ ``op`` with ``fused_activation_function``
   set, for ops whose TFLite kernel clamps (conv, depthwise, FC, ADD, SUB, MUL).

Both happen before quantization, as in TensorFlow's converter: a FakeQuant between
the two ops (a Q/DQ pair) blocks the fusion, since the range in between matters.
"""

from __future__ import annotations

import numpy as np

from qconvert.converter.ir import Graph, Node
from qconvert.converter.ops import ACTIVATIONS, TFL_OPS, Rule


def _sole_reader(graph: Graph, node: Node) -> Node | None:
    out = node.outputs[0]
    readers = graph.consumers(out)
    if len(readers) != 1 or out in graph.outputs:
        return None
    return readers[0]


def fuse_bias_add(graph: Graph) -> Graph:
    dead = []
    for node in graph:
        row = TFL_OPS.get(node.op)
        if row is None or row.rule is not Rule.WEIGHTED or node.attrs.get("fused_activation_function") != "NONE":
            continue
        add = _sole_reader(graph, node)
        if add is None or add.op not in ("ADD", "SUB") or add.attrs.get("fused_activation_function") != "NONE":
            continue
        if add.inputs[0] != node.outputs[0] or not graph.is_const(add.inputs[1]):
            continue
        bias = graph.tensors[node.inputs[2]]
        c = np.asarray(graph.const(add.inputs[1]), dtype=np.float32)
        channels = bias.shape[0]
        if c.size != channels or (c.ndim > 0 and c.shape[-1] != channels) or c.dtype != np.float32:
            continue
        c = c.reshape(channels)
        new = bias.data + c if add.op == "ADD" else bias.data - c
        node.inputs[2] = graph.add_const(f"{node.name}/bias", new.astype(np.float32))
        node.outputs = list(add.outputs)
        dead.append(add)
        graph.touch()
    graph.remove_nodes(dead)
    graph.prune()
    return graph


def fuse_activation(graph: Graph) -> Graph:
    dead = []
    for node in graph:
        row = TFL_OPS.get(node.op)
        if row is None or not row.fuses_activation or node.attrs.get("fused_activation_function") != "NONE":
            continue
        act = _sole_reader(graph, node)
        if act is None or act.op not in ACTIVATIONS:
            continue
        node.attrs["fused_activation_function"] = ACTIVATIONS[act.op]
        node.outputs = list(act.outputs)
        dead.append(act)
        graph.touch()
    graph.remove_nodes(dead)
    graph.prune()
    return graph
