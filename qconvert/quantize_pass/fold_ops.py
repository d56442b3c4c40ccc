"""Stage 5b: fold DQ → op → Q into a quantized op.

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

from qconvert.converter.ir import ConversionError, Graph
from qconvert.converter.ops import TFL_OPS, Rule


def fold_quantized_ops(graph: Graph) -> Graph:
    for node in graph:
        row = TFL_OPS.get(node.op)
        if row is None or row.rule is Rule.QUANT:
            continue
        if node.attrs.get("_float"):
            continue
        for slot, name in enumerate(node.inputs):
            prod = graph.producer(name)
            if prod is not None and prod.op == "DEQUANTIZE":
                node.inputs[slot] = prod.inputs[0]
            elif graph.tensors[name].dtype == "float32":
                raise ConversionError(f"{node.op} '{node.name}': operand '{name}' is still float")
        out = node.outputs[0]
        readers = [r for r in graph.consumers(out) if r.op == "QUANTIZE"]
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
    return graph


def fold_requantize(graph: Graph) -> Graph:
    dead = []
    for node in graph:
        if node.op != "QUANTIZE":
            continue
        dq = graph.producer(node.inputs[0])
        if dq is None or dq.op != "DEQUANTIZE":
            continue
        src = dq.inputs[0]
        if graph.tensors[src].quant.same_as(graph.tensors[node.outputs[0]].quant):
            graph.replace_all_uses(node.outputs[0], src)
            dead.append(node)
        else:
            node.inputs = [src]
            node.attrs = {}
    graph.remove_nodes(dead)
    graph.prune()
    _fold_trivial_requantize(graph)
    return graph


def _fold_trivial_requantize(graph: Graph) -> None:
    dead = []
    for node in graph:
        if node.op != "QUANTIZE" or graph.tensors[node.inputs[0]].dtype == "float32":
            continue
        src = node.inputs[0]
        prod = graph.producer(src)
        row = TFL_OPS.get(prod.op) if prod is not None else None
        if row is None or row.rule not in (Rule.FREE, Rule.WEIGHTED):
            continue
        if len(graph.consumers(src)) != 1 or src in graph.outputs:
            continue
        prod.outputs = [node.outputs[0]]
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()


def float_op_constants(graph: Graph) -> Graph:
    """--allow-float: a float op reads its constants (weights, biases, operands) as float:
    the value a Q → DQ pair would have quantized, i.e. the fake-quantized weight or the
    original constant, as TensorFlow's float fallback does."""
    for node in graph.nodes:
        if not node.attrs.get("_float"):
            continue
        for slot, name in enumerate(node.inputs):
            prod = graph.producer(name)
            if prod is None or prod.op != "DEQUANTIZE":
                continue
            q = graph.producer(prod.inputs[0])
            if q is not None and q.op == "QUANTIZE" and graph.is_const(q.inputs[0]):
                node.inputs[slot] = q.inputs[0]
    graph.prune()
    return graph
