"""Stage 4a: fuse a bias add and a following activation into the op before them.

0. ``op(x, w, b) ──▶ MUL(·, m)`` ⇒ ``op(x, w·m, b·m)`` (a BatchNorm's scale; see fold_mul_into_weights)
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
from qconvert.converter.qdq import dequantized_from


def _sole_reader(graph: Graph, node: Node) -> Node | None:
    out = node.outputs[0]
    readers = graph.consumers(out)
    if len(readers) != 1 or out in graph.outputs:
        return None
    return readers[0]


def _weight_source(graph: Graph, name: str):
    """The float constant behind a weight operand: itself, or the input of its Q → DQ pair."""
    if graph.is_const(name):
        return name
    pair = dequantized_from(graph, name)
    if pair is not None and graph.is_const(pair[0].inputs[0]):
        return pair[0].inputs[0]
    return None


def fold_mul_into_weights(graph: Graph) -> Graph:
    """``op(x, w, b) ──▶ MUL(·, m)`` ⇒ ``op(x, w·m, b·m)`` for a per-channel (or scalar) constant m.

    This is how a BatchNorm after a convolution ends up in its weights. A weight that
    had a FakeQuant is folded as its fake-quantized float values, and its int8
    parameters are then derived again from the folded values (symmetric, per channel
    where the op allows), which is what TensorFlow's converter does.
    """
    dead = []
    for node in graph:
        row = TFL_OPS.get(node.op)
        if row is None or row.rule is not Rule.WEIGHTED or node.attrs.get("fused_activation_function") != "NONE":
            continue
        mul = _sole_reader(graph, node)
        if mul is None or mul.op != "MUL" or mul.attrs.get("fused_activation_function") != "NONE":
            continue
        other = mul.inputs[1] if mul.inputs[0] == node.outputs[0] else mul.inputs[0]
        m = graph.const(other)
        w_src = _weight_source(graph, node.inputs[1])
        bias = graph.const(node.inputs[2])
        channels = graph.tensors[node.inputs[2]].shape[0]
        if m is None or m.dtype != np.float32 or w_src is None or bias is None:
            continue
        if m.size not in (1, channels) or (m.ndim > 0 and m.shape[-1] != m.size):
            continue
        m = np.broadcast_to(m.reshape(-1), (channels,)).astype(np.float32)
        w = graph.const(w_src).astype(np.float32)
        axis = 0 if row.weight_axis is None else row.weight_axis
        shape = [1] * w.ndim
        shape[axis] = channels
        node.inputs[1] = graph.add_const(f"{w_src}/folded", w * m.reshape(shape))
        node.inputs[2] = graph.add_const(f"{node.name}/bias", (bias * m).astype(np.float32))
        node.outputs = list(mul.outputs)
        dead.append(mul)
        graph.touch()
    graph.remove_nodes(dead)
    graph.prune()
    return graph


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
