"""Stage 4c: every op on the path must be fully quantizable; say which are not.

With ``--allow-float`` the offending ops are marked to stay float instead, and reported.

Requires: after propagation, every float operand of a compute op comes from a
DEQUANTIZE and every result is read only by QUANTIZE nodes. Anything else would
leave a float op in the model, which TensorFlow's converter does silently and we
refuse to do. Every offending tensor is listed once, in one message, with the op
that produces it, the ops that read it, and where to add a FakeQuant.
"""

from __future__ import annotations

from qconvert.converter.ir import ConversionError, Graph, Node
from qconvert.converter.ops import TFL_OPS, Rule
from qconvert.converter.qdq import params_in

_ZERO_POINT_ZERO_WEIGHTS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def check_quantizable(graph: Graph) -> Graph:
    missing: dict[str, list[Node]] = {}  # tensor -> readers that need it quantized
    problems: list[str] = []
    culprits: list[Node] = []
    for node in graph.nodes:
        row = TFL_OPS.get(node.op)
        if row is None:
            problems.append(f"node '{node.name}' has op {node.op}, which cannot be quantized")
            continue
        if row.rule is Rule.QUANT:
            continue
        for name in node.inputs:
            prod = graph.producer(name)
            if graph.tensors[name].dtype == "float32" and (prod is None or prod.op != "DEQUANTIZE"):
                missing.setdefault(name, []).append(node)
        if node.op in _ZERO_POINT_ZERO_WEIGHTS and len(node.inputs) > 1:
            params = params_in(graph, node.inputs[1])
            if params is not None and any(params[0].zero_point):
                culprits.append(node)
                problems.append(
                    f"the weights of {node.op} '{node.name}' get zero point {sorted(set(params[0].zero_point))} "
                    f"from their FakeQuant range, and TFLite's int8 convolution kernels only run zero point 0 "
                    f"(conv.cc); use narrow_range=True with a symmetric range [-m, m] on weight FakeQuants"
                )
        for name in node.outputs:
            readers = graph.consumers(name)
            if not readers or any(r.op != "QUANTIZE" for r in readers) or name in graph.outputs:
                missing.setdefault(name, [])
    for name, readers in missing.items():
        prod = graph.producer(name)
        culprits += readers + ([prod] if prod is not None and prod.op not in ("QUANTIZE", "DEQUANTIZE") else [])
        read = ", ".join(f"{r.op} '{r.name}'" for r in readers)
        if graph.tensors[name].data is not None:
            problems.append(f"constant '{name}' (read by {read}) has no quantization range; add a FakeQuant on it")
            continue
        what = f"output of {prod.op} '{prod.name}'" if prod is not None else "a graph input"
        where = f"; read by {read}" if read else ""
        problems.append(
            f"tensor '{name}' ({what}{where}) has no quantization range; "
            f"add a FakeQuant after '{prod.name if prod is not None else name}'"
        )
    if problems and graph.allow_float:
        return _leave_float(graph, culprits, problems)
    if problems:
        more = f" ({len(problems)} problems)" if len(problems) > 1 else ""
        raise ConversionError("cannot quantize fully" + more + ": " + "; ".join(problems))
    return graph


def _leave_float(graph: Graph, culprits: list[Node], problems: list[str]) -> Graph:
    """--allow-float: the ops around each problem stay float, with DEQUANTIZE/QUANTIZE at the
    boundaries (the quantize stage keeps those pairs as real ops). Each float op is reported."""
    seen: set[int] = set()
    for node in culprits:
        if id(node) in seen:
            continue
        seen.add(id(node))
        node.attrs["_float"] = True
        graph.notes.append(f"{node.op} '{node.name}' stays float32 (--allow-float)")
    graph.notes.append("why: " + "; ".join(problems))
    return graph
