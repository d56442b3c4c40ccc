"""Stage 4c: every op on the path must be fully quantizable; say which are not.

Requires: after propagation, every float operand of a compute op comes from a
DEQUANTIZE and every result is read only by QUANTIZE nodes. Anything else would
leave a float op in the model, which TensorFlow's converter does silently and we
refuse to do. All offenders are listed in one message.
"""

from __future__ import annotations

from qconvert.converter.ir import ConversionError, Graph
from qconvert.converter.ops import TFL_OPS, Rule


def check_quantizable(graph: Graph) -> Graph:
    problems: list[str] = []
    for node in graph.nodes:
        row = TFL_OPS.get(node.op)
        if row is None:
            problems.append(f"node '{node.name}' has op {node.op}, which cannot be quantized")
            continue
        if row.rule in (Rule.QUANT, Rule.LAYOUT):
            continue
        for slot, name in enumerate(node.inputs):
            t = graph.tensors[name]
            if t.dtype != "float32":
                continue
            prod = graph.producer(name)
            if prod is not None and prod.op == "DEQUANTIZE":
                continue
            if t.data is not None:
                problems.append(
                    f"constant '{name}' (operand {slot} of {node.op} '{node.name}') has no quantization range; "
                    f"add a FakeQuant on it"
                )
            else:
                src = f"output of {prod.op} '{prod.name}'" if prod is not None else "a graph input"
                problems.append(
                    f"tensor '{name}' ({src}, read by {node.op} '{node.name}') has no quantization range; "
                    f"add a FakeQuant after '{prod.name if prod else name}'"
                )
        for name in node.outputs:
            readers = graph.consumers(name)
            if not readers or any(r.op != "QUANTIZE" for r in readers) or name in graph.outputs:
                problems.append(
                    f"tensor '{name}' (output of {node.op} '{node.name}') has no quantization range; "
                    f"add a FakeQuant after '{node.name}'"
                )
    unique = list(dict.fromkeys(problems))
    if unique:
        more = f" ({len(unique)} problems)" if len(unique) > 1 else ""
        raise ConversionError("cannot quantize fully" + more + ": " + "; ".join(unique))
    return graph
