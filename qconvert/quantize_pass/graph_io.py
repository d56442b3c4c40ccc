"""The ``quantize`` stage: int8 graph inputs and outputs.

    input (float) ──▶ Q(p) ──▶ …        ⇒        input (int8, p) ──▶ …
    … ──▶ y (int8) ──▶ DQ ──▶ output     ⇒        … ──▶ y (int8) = output

The model then takes and returns int8, as TensorFlow's converter makes it with
``inference_type=int8``. Tensors get back the names the user knows: the
placeholder names for inputs and the output node names for outputs.
"""

from __future__ import annotations

from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize


def quantize_io(graph: Graph, ctx: Context) -> bool:
    new_inputs = []
    for name in graph.inputs:
        qs = [n for n in graph.consumers(name) if is_quantize(n)]
        others = [n for n in graph.consumers(name) if not is_quantize(n)]
        if (ctx.allow_float or any(n in ctx.float_ops for n in others)) and (not qs or others):
            new_inputs.append(name)  # a float op reads it: the input stays float
            continue
        if not qs or others:
            raise ConversionError(f"input '{name}' is read by an op that is not quantized")
        first = qs[0]
        new_inputs.append(first.outputs[0])
        for other in qs[1:]:
            other.inputs = [first.outputs[0]]
        graph.remove_nodes([first])
    graph.inputs = new_inputs
    outs = []
    for name in graph.outputs:
        dq = graph.producer(name)
        if graph.tensors[name].dtype in ("int32", "int64"):  # ARG_MAX's index: an output as it is
            outs.append(name)
            continue
        if (ctx.allow_float or dq in ctx.float_ops) and not is_dequantize(dq):
            outs.append(name)  # produced by a float op (a custom op's results): the output stays float
            continue
        if not is_dequantize(dq):
            raise ConversionError(f"output '{name}' is not quantized; add a FakeQuant before it")
        outs.append(dq.inputs[0])
    graph.outputs = outs
    graph.prune()
    return True


def rename_io(graph: Graph, ctx: Context) -> bool:
    """Give graph inputs/outputs the user's names (``graph.input_names``/``output_names``:
    the placeholders and the requested outputs) where those names are free."""
    mapping = {}
    pairs = list(zip(graph.inputs, graph.input_names)) + list(zip(graph.outputs, graph.output_names))
    for current, name in pairs:
        if current != name and current not in mapping and name not in graph.tensors and name not in mapping.values():
            mapping[current] = name
    rename_tensors(graph, mapping)
    return bool(mapping)


def rename_tensors(graph: Graph, mapping: dict[str, str]) -> None:
    """Rename tensors in one pass over the graph (``old → new``; new names must be free)."""
    if not mapping:
        return
    for old, new in mapping.items():
        t = graph.tensors.pop(old)
        t.name = new
        graph.tensors[new] = t
    for node in graph.nodes:
        node.inputs = [mapping.get(i, i) for i in node.inputs]
        node.outputs = [mapping.get(o, o) for o in node.outputs]
    graph.inputs = [mapping.get(i, i) for i in graph.inputs]
    graph.outputs = [mapping.get(o, o) for o in graph.outputs]
