"""The ``quantize`` stage: fold DQ → op → Q into a quantized op.

    DQ(a) ─┐
    DQ(w) ─┼─▶ op ──▶ Q(p)      ⇒      a, w, b ──▶ op ──▶ y (int8, p)
    DQ(b) ─┘

Then what is left of the Q/DQ pairs between ops:

    Q(p2)(DQ(x: p1))  ⇒  x                       when p1 == p2
                      ⇒  QUANTIZE(x) (int8→int8)  otherwise (a requantize)

and, as TensorFlow's post-quantize pass does, a requantize right after an op whose
output scale is free (not same-scale, not fixed) and read by nothing else is folded
into that op: the op produces the requantized parameters directly.
"""

from __future__ import annotations

from qconvert.errors import ConversionError
from qconvert.fuse.into_op import fuse_activation
from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.ops import Rule, row


def fold_quantized_ops(graph: Graph, ctx: Context) -> bool:
    folded = False
    for node in graph:
        r = row(node.op)
        if r is None or r.rule is Rule.QUANT or node in ctx.float_ops:
            continue
        # the operands looked up first and set at once: an edit between look-ups re-indexes the node
        # at each (EfficientViT_M0: 1,357 -> 500 flushes, 4.9 -> 4.5 ms)
        inputs = list(node.inputs)
        for slot, name in enumerate(inputs):
            if not name:  # an absent optional operand (an LSTM's peepholes)
                continue
            prod = graph.producer(name)
            if is_dequantize(prod):
                inputs[slot] = prod.inputs[0]  # type: ignore[union-attr]
            elif graph.tensors[name].dtype == "float32":
                raise ConversionError(f"{node.op} '{node.name}': operand '{name}' is still float")
        if inputs != node.inputs:
            node.inputs = inputs
        out = node.outputs[0]
        if graph.tensors[out].dtype != "float32":  # ARG_MAX: an index, not a quantized value
            folded = True
            continue
        readers = [x for x in graph.consumers(out) if is_quantize(x)]
        if not readers:
            raise ConversionError(f"{node.op} '{node.name}': output '{out}' has no quantization parameters")
        first = readers[0]
        # The quantized result takes the float result's name (the TensorFlow node name).
        qname = first.outputs[0]
        qt = graph.tensors.pop(qname)
        qt.name = out
        graph.tensors[out] = qt
        for reader in graph.consumers(qname):
            reader.inputs = [out if i == qname else i for i in reader.inputs]
        graph.remove_nodes([first])
        for other in readers[1:]:
            other.inputs = [out]
        folded = True
    return folded


def fold_requantize(graph: Graph, ctx: Context) -> bool:
    dead = []
    requantizes = 0
    for node in graph:
        if not is_quantize(node):
            continue
        dq = graph.producer(node.inputs[0])
        if not is_dequantize(dq):
            continue
        src = dq.inputs[0]
        if graph.tensors[src].quant.same_as(graph.tensors[node.outputs[0]].quant):
            graph.replace_all_uses(node.outputs[0], src)
            dead.append(node)
        else:
            node.inputs = [src]
            node.attrs = {}
            requantizes += 1
    graph.remove_nodes(dead)
    graph.prune()
    # an op whose only reader requantizes it writes the new parameters itself (TF's int8 files);
    # TF's 16x8 files keep that QUANTIZE (measured on TF 2.21: conv → QUANTIZE → concat)
    trivial = ctx.activation_bits != 16 and _fold_trivial_requantize(graph)
    return trivial or bool(dead) or requantizes > 0


def _fold_trivial_requantize(graph: Graph) -> bool:
    dead = []
    for node in graph:
        if not is_quantize(node) or graph.tensors[node.inputs[0]].dtype == "float32":
            continue
        src = node.inputs[0]
        prod = graph.producer(src)
        r = row(prod.op) if prod is not None else None
        if r is None or r.rule not in (Rule.FREE, Rule.WEIGHTED):
            continue
        if len(graph.consumers(src)) != 1 or src in graph.outputs \
                or graph.tensors[src].dtype != graph.tensors[node.outputs[0]].dtype:  # --int16's int8 <-> int16
            continue
        prod.outputs = [node.outputs[0]]
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def float_op_constants(graph: Graph, ctx: Context) -> bool:
    """--allow-float: a float op reads its constants (weights, biases, operands) as float:
    the value a Q → DQ pair would have quantized, i.e. the fake-quantized weight or the
    original constant, as TensorFlow's float fallback does."""
    changed = False
    for node in graph.nodes:
        if node not in ctx.float_ops:
            continue
        for slot, name in enumerate(node.inputs):
            prod = graph.producer(name)
            if not is_dequantize(prod):
                continue
            q = graph.producer(prod.inputs[0])  # type: ignore[union-attr]
            if is_quantize(q) and graph.is_const(q.inputs[0]):  # type: ignore[union-attr]
                node.inputs[slot] = q.inputs[0]  # type: ignore[union-attr]
                changed = True
    graph.prune()
    return changed


def fuse_quantized_activation(graph: Graph, ctx: Context) -> bool:
    """TensorFlow runs its op fusions again after quantization, so a quantized
    RELU/RELU6/RELU_N1_TO_1 right after a conv, FC, ADD, SUB or MUL whose output it
    alone reads is fused into it; the op then produces the activation's parameters."""
    return fuse_activation(graph, ctx)
