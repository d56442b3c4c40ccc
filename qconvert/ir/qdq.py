"""Helpers for the QUANTIZE → DEQUANTIZE pairs that carry quantization parameters.

Between legalization and the quantize stage, a tensor's int8 parameters are
expressed the way TensorFlow's converter expresses them: a float tensor ``t``
feeds ``QUANTIZE`` (whose int8 output carries the parameters), whose output
feeds ``DEQUANTIZE`` back to float. The ``origin`` attribute on the QUANTIZE
node (an :class:`Origin`) records who decided the parameters; parameters from a
FakeQuant, an input range or a fixed-output op are immutable, propagated ones are not.

QUANTIZE and DEQUANTIZE are the IR's own carriers of parameters, so this module names
them; passes ask :func:`is_quantize` / :func:`is_dequantize` instead of comparing names.
"""

from __future__ import annotations

from qconvert.ir.graph import Graph, Node, Tensor
from qconvert.ir.passes import Origin
from qconvert.quant.params import QuantParams

QUANTIZE = "QUANTIZE"
DEQUANTIZE = "DEQUANTIZE"


def is_quantize(node: Node | None) -> bool:
    return node is not None and node.op == QUANTIZE


def is_dequantize(node: Node | None) -> bool:
    return node is not None and node.op == DEQUANTIZE


def source_of(graph: Graph, tensor: str) -> tuple[str, Node | None, list[Node]]:
    """Back through QUANTIZE / DEQUANTIZE chains: the tensor they start from, its producer (None for a
    graph input or a constant), and the QUANTIZE and DEQUANTIZE nodes passed, nearest first."""
    passed: list[Node] = []
    while True:
        producer = graph.producer(tensor)
        if not (is_quantize(producer) or is_dequantize(producer)):
            return tensor, producer, passed
        passed.append(producer)  # type: ignore[arg-type]
        tensor = producer.inputs[0]  # type: ignore[union-attr]


def origin_of(node: Node | None) -> Origin | None:
    """Who set a QUANTIZE node's parameters (None for anything else)."""
    return node.attrs.get("origin") if is_quantize(node) else None  # type: ignore[union-attr]


def _immutable(q: Node | None) -> bool:
    o = origin_of(q)
    return o is not None and o.immutable


def add_qdq(graph: Graph, source: str, params: QuantParams, origin: Origin, *,
            before: Node | None = None, after: Node | None = None,
            at_start: bool = False) -> tuple[Node, Node, str]:
    """Create Q(source) → DQ nodes, placed as :meth:`Graph.add_node` places one node;
    return (q, dq, name of the float DQ output)."""
    base = graph.tensors[source]
    qname = graph.unique_name(f"{source}/q")
    dqname = graph.unique_name(f"{source}/dq")
    graph.add_tensor(Tensor(qname, params.dtype, base.shape, None, params))
    graph.add_tensor(Tensor(dqname, "float32", base.shape))
    q = Node(QUANTIZE, [source], [qname], {"origin": origin}, name=qname)
    dq = Node(DEQUANTIZE, [qname], [dqname], {}, name=dqname)
    if after is not None or at_start:
        graph.add_node(dq, after=after, at_start=at_start)
        graph.add_node(q, after=after, at_start=at_start)
    else:
        graph.add_node(q, before=before)
        graph.add_node(dq, before=before)
    return q, dq, dqname


def insert_qdq_after(graph: Graph, tensor: str, params: QuantParams, origin: Origin) -> str:
    """Every reader of ``tensor`` (and graph outputs) now reads it through Q(params) → DQ."""
    readers = list(graph.consumers(tensor))
    was_output = tensor in graph.outputs
    prod = graph.producer(tensor)
    q, dq, dq_out = add_qdq(graph, tensor, params, origin, after=prod, at_start=prod is None)
    for node in readers:
        node.inputs = [dq_out if i == tensor else i for i in node.inputs]
    if was_output:
        graph.outputs = [dq_out if o == tensor else o for o in graph.outputs]
    return dq_out


def insert_qdq_on_edge(graph: Graph, node: Node, slot: int, params: QuantParams, origin: Origin) -> str:
    """Only ``node``'s operand ``slot`` reads its value through a new Q(params) → DQ."""
    source = node.inputs[slot]
    _, _, dq_out = add_qdq(graph, source, params, origin, before=node)
    node.inputs[slot] = dq_out
    return dq_out


def dequantized_from(graph: Graph, tensor: str) -> tuple[Node, Node] | None:
    """If ``tensor`` is DQ(Q(x)), return (q, dq)."""
    dq = graph.producer(tensor)
    if not is_dequantize(dq):
        return None
    q = graph.producer(dq.inputs[0])  # type: ignore[union-attr]
    if not is_quantize(q):
        return None
    return q, dq  # type: ignore[return-value]


def params_in(graph: Graph, tensor: str) -> tuple[QuantParams, bool] | None:
    """Parameters a reader of ``tensor`` sees, and whether they are immutable."""
    dq = graph.producer(tensor)
    if not is_dequantize(dq):
        return None
    qt = graph.tensors[dq.inputs[0]]  # type: ignore[union-attr]
    q = graph.producer(dq.inputs[0])  # type: ignore[union-attr]
    return qt.quant, _immutable(q)  # type: ignore[return-value]


def params_out(graph: Graph, tensor: str) -> tuple[QuantParams, bool] | None:
    """Parameters of the first QUANTIZE reading ``tensor``, and whether immutable."""
    for node in graph.consumers(tensor):
        if is_quantize(node) and node.inputs[0] == tensor:
            return graph.tensors[node.outputs[0]].quant, _immutable(node)  # type: ignore[return-value]
    return None
