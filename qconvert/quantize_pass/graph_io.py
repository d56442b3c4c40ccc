"""The ``quantize`` stage: the graph's inputs and outputs, of the types asked for
(``--input-type`` / ``--output-type``; ``legalize/io_types.py`` resolves them).

    int8 (the default; int16 in a 16x8 model):
        input (float) ──▶ Q(p) ──▶ …        ⇒        input (int8, p) ──▶ …
        … ──▶ y (int8) ──▶ DQ ──▶ output     ⇒        … ──▶ y (int8) = output
    float32:  the QUANTIZE after the input and the DEQUANTIZE before the output stay
        input (float) ──▶ QUANTIZE ──▶ input_int8 (p) ──▶ …     … ──▶ y (p) ──▶ DEQUANTIZE ──▶ output (float)
    uint8: the same QUANTIZE from a uint8 input, and a QUANTIZE to a uint8 output, both at p's
        scale and zero point + 128 (TensorFlow 2.21's post-training boundary)
        input (uint8, p+128) ──▶ QUANTIZE ──▶ input_int8 (p) ──▶ …     … ──▶ y (p) ──▶ QUANTIZE ──▶ output (uint8)

The model inside does not change. Tensors get back the names the user knows: the placeholder
names for inputs and the output node names for outputs.
"""

from __future__ import annotations

import dataclasses

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context
from qconvert.ir.qdq import QUANTIZE, is_dequantize, is_quantize
from qconvert.legalize.io_types import io_types
from qconvert.ops import is_custom
from qconvert.quant.params import QuantParams


def _uint8(p: QuantParams) -> QuantParams:
    """int8 parameters moved to uint8: the same scale, zero point + 128."""
    return dataclasses.replace(p, zero_point=tuple(z + 128 for z in p.zero_point), qmin=0, qmax=255, dtype="uint8")


def _not_applied(ctx: Context, side: str, name: str, kind: str, dtype: str, why: str) -> None:
    types = ctx.options.precision.input_type if side == "input" else ctx.options.precision.output_type
    if types and kind != dtype:
        ctx.note(f"{side} '{name}' stays {dtype} ({why}); --{side}-type {kind} is not applied")


def quantize_io(graph: Graph, ctx: Context) -> bool:
    in_types, out_types = io_types(graph, ctx)
    new_inputs = []
    boundary: dict[str, str] = {}  # the int tensor after a kept QUANTIZE -> its new name
    for name, user, kind in zip(graph.inputs, graph.input_names or graph.inputs, in_types):
        qs = [n for n in graph.consumers(name) if is_quantize(n)]
        others = [n for n in graph.consumers(name) if not is_quantize(n)]
        if (ctx.allow_float or any(n in ctx.float_ops for n in others)) and (not qs or others):
            new_inputs.append(name)  # a float op reads it: the input stays float
            _not_applied(ctx, "input", user, kind, "float32", "a float op reads it")
            continue
        if not qs or others:
            if not others:
                raise ConversionError(f"input '{name}': no op reads it once constants are folded (the outputs do "
                                      f"not depend on it: zero weights or a zero-initialised layer?); check the "
                                      f"model, or name the inputs the outputs depend on with --inputs")
            raise ConversionError(f"input '{name}' is read by {others[0].op} '{others[0].name}', which is not "
                                  f"quantized; convert with --allow-float to keep it float, or report the graph")
        first = qs[0]
        for other in qs[1:]:
            other.inputs = [first.outputs[0]]
        if kind in ("float32", "uint8"):  # the QUANTIZE stays: from float, or uint8 → int8
            new_inputs.append(name)
            inner = graph.tensors[first.outputs[0]]
            boundary[inner.name] = f"{user}_{inner.dtype}"
            if kind == "uint8":
                t = graph.tensors[name]
                t.dtype, t.quant = "uint8", _uint8(inner.quant)  # type: ignore[arg-type]
            continue
        new_inputs.append(first.outputs[0])
        graph.remove_nodes([first])
    graph.inputs = new_inputs
    outs = []
    for name, user, kind in zip(graph.outputs, graph.output_names or graph.outputs, out_types):
        dq = graph.producer(name)
        if graph.tensors[name].dtype in ("int32", "int64"):  # ARG_MAX's index: an output as it is
            outs.append(name)
            _not_applied(ctx, "output", user, kind, graph.tensors[name].dtype, "it is an index, not quantized")
            continue
        if (ctx.allow_float or dq in ctx.float_ops) and not is_dequantize(dq):
            outs.append(name)  # produced by a float op (a custom op's results): the output stays float
            _not_applied(ctx, "output", user, kind, "float32", "a float op gives it")
            continue
        if not is_dequantize(dq):
            raise ConversionError(f"output '{name}' is not quantized; add a FakeQuant before it")
        if kind in ("float32", "uint8"):  # the DEQUANTIZE stays, or becomes a QUANTIZE to uint8
            outs.append(name)
            inner = graph.tensors[dq.inputs[0]]
            if inner.name.endswith(("/q", "/dq")) or inner.name == user:  # the user's name goes to the output
                boundary[inner.name] = f"{user}_{inner.dtype}"
            if kind == "uint8":
                t = graph.tensors[name]
                t.dtype, t.quant = "uint8", _uint8(inner.quant)  # type: ignore[arg-type]
                q = Node(QUANTIZE, list(dq.inputs), list(dq.outputs), {}, name=dq.name)
                graph.add_node(q, after=dq)
                graph.remove_nodes([dq])
            continue
        outs.append(dq.inputs[0])
    graph.outputs = outs
    graph.prune()
    rename_tensors(graph, {old: graph.unique_name(new) for old, new in boundary.items() if old in graph.tensors})
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
        if "_intermediates" in node.attrs:
            node.attrs["_intermediates"] = [mapping.get(t, t) for t in node.attrs["_intermediates"]]
    graph.inputs = [mapping.get(i, i) for i in graph.inputs]
    graph.outputs = [mapping.get(o, o) for o in graph.outputs]


DETECTION_POSTPROCESS = "TFLite_Detection_PostProcess"


def detection_output_shapes(graph: Graph, ctx: Context) -> bool:
    """For ``--target tflm``: the four outputs of ``TFLite_Detection_PostProcess`` get their shapes,
    boxes [1, N, 4], classes [1, N], scores [1, N], count [1] with N = max_detections ×
    max_classes_per_detection, as LiteRT's and TFLite Micro's kernels size them. TensorFlow 2.21 writes
    them empty: LiteRT resizes them at Prepare, TFLite Micro cannot and writes past them (measured:
    ``check --target tflm`` on such a file gives infinities on every output)."""
    if "tflm" not in ctx.options.targets:
        return False
    changed = False
    for node in graph:
        if not is_custom(node.op) or node.attrs.get("custom_code") != DETECTION_POSTPROCESS or len(node.outputs) != 4:
            continue
        options = {key: value for key, _, value in node.attrs.get("custom_options", ())}
        n = int(options.get("max_detections", 0)) * int(options.get("max_classes_per_detection", 1))
        if n <= 0:
            continue
        for name, shape in zip(node.outputs, ((1, n, 4), (1, n), (1, n), (1,))):
            if graph.tensors[name].shape != shape:
                graph.tensors[name].shape = shape
                changed = True
        if changed:
            ctx.note(f"--target tflm: the outputs of {DETECTION_POSTPROCESS} '{node.name}' get their shapes "
                     f"([1,{n},4], [1,{n}], [1,{n}], [1]): TFLite Micro does not resize outputs (TensorFlow writes "
                     f"them without shape)")
    return changed
