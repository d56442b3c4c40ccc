"""Stage 5c: int8 graph inputs and outputs.

    input (float) ──▶ Q(p) ──▶ …        ⇒        input (int8, p) ──▶ …
    … ──▶ y (int8) ──▶ DQ ──▶ output     ⇒        … ──▶ y (int8) = output

The model then takes and returns int8, as TensorFlow's converter makes it with
``inference_type=int8``. Tensors get back the names the user knows: the
placeholder names for inputs and the output node names for outputs.
"""

from __future__ import annotations

from qconvert.converter.ir import ConversionError, Graph


def quantize_io(graph: Graph) -> Graph:
    new_inputs = []
    for name in graph.inputs:
        qs = [n for n in graph.consumers(name) if n.op == "QUANTIZE"]
        others = [n for n in graph.consumers(name) if n.op != "QUANTIZE"]
        if graph.allow_float and (not qs or others):
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
        if graph.allow_float and (dq is None or dq.op != "DEQUANTIZE"):
            outs.append(name)  # produced by a float op: the output stays float
            continue
        if dq is None or dq.op != "DEQUANTIZE":
            raise ConversionError(f"output '{name}' is not quantized; add a FakeQuant before it")
        outs.append(dq.inputs[0])
    graph.outputs = outs
    graph.prune()
    return graph


def rename_io(graph: Graph, input_names: list[str], output_names: list[str]) -> Graph:
    """Give graph inputs/outputs the user's names where those names are free."""
    mapping = {}
    for current, name in list(zip(graph.inputs, input_names)) + list(zip(graph.outputs, output_names)):
        if current != name and current not in mapping and name not in graph.tensors and name not in mapping.values():
            mapping[current] = name
    rename_tensors(graph, mapping)
    return graph


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
