"""A float ``.tflite`` model → IR graph, already in TFLite ops.

    .tflite ──schema.reader (converter/)──▶ ModelInfo (plain data) ──import_tflite──▶ Graph

A float TFLite file holds what the pipeline's ``fuse`` stage makes of a TensorFlow graph:
TFLite builtins with their fused activations and options, OHWI weights, float32 constants. So
each operator becomes one node (op = its builtin name, attrs = its options table as the reader
spells it, less ``quantized_bias_type``, which the quantize stage sets), each constant a
constant tensor, and the later stages run on it as on an imported ``.pb``:

1. A DEQUANTIZE of a constant (float16 weights, or int8/int4 weights stored quantized) becomes
   the float32 constant it computes; a quantized constant read by a float op directly (a
   dynamic-range file's hybrid op) too. The weights are then quantized again from their values
   (for int8 weights stored symmetric per channel: the same integers).
2. Tensors keep the file's names (``--inputs``, ``--outputs``, ``--ranges-file`` and
   ``--precision`` patterns use them); a signature's input and output names are taken as well,
   and the signature itself is kept (``graph.signature``) for the writer, unless ``--inputs``/
   ``--outputs`` cut the graph at other tensors (then it is dropped with a note).
3. Refused in one line: a file whose activations are already quantized, an op qconvert does not
   know or cannot run in float, a custom op, an op that calls another subgraph, sparse
   constants, several signatures without ``serving_default``.

The model is duck-typed (``qconvert.schema.reader.ModelInfo``): this layer does not import the
schema, so the stages still run without LiteRT.

May import: ``qconvert.ir``, ``qconvert.ops`` (the table's rows), ``qconvert.quant``, ``qconvert.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qconvert.errors import ConversionError, UsageError
from qconvert.ir import Graph, Node, Signature, Tensor
from qconvert.ops import CUSTOM, row
from qconvert.ops.table import Made
from qconvert.ops.windows import STRIDED_SLICE_MASKS

# options the quantize stage decides (TFLite's writer-side fields): not taken from the float file; an
# absent nested table (FULLY_CONNECTED's quant_spec) is left out too
_WRITER_OPTIONS = ("quantized_bias_type",)
# ops whose integer form is what quantization makes: a file holding them with integer activations
# is already quantized
_QUANT_OPS = ("QUANTIZE", "DEQUANTIZE")
_FLOATS = ("float32", "float16")


def import_tflite(model: Any, inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  source: str = "the model") -> tuple[Graph, list[str]]:
    """The IR graph of ``model``'s subgraph (its ``serving_default`` signature's, or the first)
    from ``inputs`` to ``outputs`` (tensor or signature names; default: the subgraph's), and the
    notes for the user (one line each)."""
    notes: list[str] = []
    index, signature = _pick_subgraph(model, source, notes)
    sg = model.subgraphs[index]
    names = _tensor_names(sg.tensors)
    by_name = {n: i for i, n in enumerate(names)}
    sig_in = dict(signature.inputs) if signature is not None else {}
    sig_out = dict(signature.outputs) if signature is not None else {}
    in_ids = _resolve(inputs, sig_in, by_name, "--inputs") if inputs else list(sg.inputs)
    out_ids = _resolve(outputs, sig_out, by_name, "--outputs") if outputs else list(sg.outputs)
    for i in out_ids:
        if sg.tensors[i].data is not None:
            raise UsageError(f"output '{names[i]}' is a constant; name a computed tensor with --outputs")
    if input_shapes:
        _check_input_shapes(input_shapes, sg.tensors, names, in_ids)
    ops = _needed(sg, in_ids, out_ids, names)
    _refuse_quantized(sg, ops, names, source)
    graph = Graph()
    folded = _fold_dequantized_constants(sg, ops, names, graph)
    if folded:
        kinds = sorted({sg.tensors[i].dtype for i in folded.values()})
        notes.append(f"{len(folded)} weight(s) stored {'/'.join(kinds)} behind DEQUANTIZE (or read quantized) "
                     "are taken as float32 and quantized again")
    for i in in_ids:
        if sg.tensors[i].data is not None:
            raise UsageError(f"input '{names[i]}' is a constant; name a computed tensor or a model input")
        graph.add_tensor(_activation(sg.tensors[i], names[i]))
        if int(np.prod(graph.tensors[names[i]].shape, dtype=np.float64)) > _MAX_INPUT_ELEMENTS:
            raise ConversionError(f"input '{names[i]}' has shape {list(sg.tensors[i].shape)}: more than 2^28 elements "
                                  "per sample")
        graph.inputs.append(names[i])
    for op in ops:
        if id(op) in folded:
            continue
        _add_op(graph, sg, op, names, source)
    graph.outputs = [names[i] for i in out_ids]
    graph.output_names = list(graph.outputs)
    graph.signature = _signature(signature, in_ids, out_ids, notes)
    for o in graph.outputs:
        if graph.is_const(o):
            raise ConversionError(f"output '{o}' is a constant; name a computed tensor with --outputs")
    return graph, notes


def _pick_subgraph(model: Any, source: str, notes: list[str]) -> tuple[int, Any]:
    """The subgraph to convert: the only signature's or ``serving_default``'s, else the first; a
    call into another subgraph (WHILE, IF, CALL_ONCE, ...) is refused."""
    sigs = list(model.signatures)
    signature = None
    if len(sigs) == 1:
        signature = sigs[0]
    elif sigs:
        signature = next((s for s in sigs if s.key == "serving_default"), None)
        if signature is None:
            raise ConversionError(f"{source} has {len(sigs)} signatures ({', '.join(s.key for s in sigs)}) and none "
                                  "is 'serving_default'; qconvert converts one: export that one alone")
    index = signature.subgraph if signature is not None else 0
    for k, op in enumerate(model.subgraphs[index].operators):
        calls = sorted(key for key in op.options if "subgraph_ind" in key)
        if calls:
            raise ConversionError(f"{source}: operator {k} ({op.builtin}) calls another subgraph ({calls[0]}); "
                                  "qconvert converts one subgraph without control flow")
    others = len(model.subgraphs) - 1
    if others:
        notes.append(f"{source} has {others + 1} subgraphs; converting subgraph {index}"
                     f"{f' (signature {signature.key!r})' if signature is not None else ''}, which calls no other")
    return index, signature


def _signature(signature: Any, in_ids: Sequence[int], out_ids: Sequence[int], notes: list[str]) -> Signature | None:
    """The file's signature over the converted graph's inputs and outputs (positions), or None with a
    note when ``--inputs``/``--outputs`` cut the graph elsewhere than at the signature's tensors."""
    if signature is None:
        return None
    if sorted(signature.inputs.values()) != sorted(in_ids) or sorted(signature.outputs.values()) != sorted(out_ids):
        notes.append(f"signature '{signature.key}' is not written: its inputs and outputs are not the converted "
                     "graph's (--inputs/--outputs cut it elsewhere); the file's are named by tensor")
        return None
    return Signature(signature.key, tuple((name, list(in_ids).index(i)) for name, i in signature.inputs.items()),
                     tuple((name, list(out_ids).index(i)) for name, i in signature.outputs.items()))


def _tensor_names(tensors: Sequence[Any]) -> list[str]:
    """The file's tensor names, made unique (a file may repeat a name or leave it empty)."""
    seen: set[str] = set()
    out = []
    for i, t in enumerate(tensors):
        base = t.name or f"tensor_{i}"
        name, k = base, 1
        while name in seen:
            name, k = f"{base}_{k}", k + 1
        seen.add(name)
        out.append(name)
    return out


def _resolve(given: Sequence[str], signature: Mapping[str, int], by_name: Mapping[str, int], flag: str) -> list[int]:
    out = []
    for name in given:
        if name in by_name:
            out.append(by_name[name])
        elif name in signature:
            out.append(signature[name])
        else:
            known = list(signature) + [n for n in list(by_name)[:8] if n not in signature]
            raise UsageError(f"{flag} names '{name}', which is no tensor of the model; e.g. {', '.join(known)}")
    return out


def _check_input_shapes(shapes: Mapping[str, Sequence[int]], tensors: Sequence[Any], names: list[str],
                        in_ids: list[int]) -> None:
    """A TFLite file's shapes are static: ``--input-shapes`` may only repeat them."""
    for name, shape in shapes.items():
        found = [i for i in in_ids if names[i] == name]
        if not found:
            raise UsageError(f"--input-shapes names '{name}', which is not an input of the model")
        have = tuple(tensors[found[0]].shape)
        if tuple(int(d) for d in shape) != have:
            raise UsageError(f"--input-shapes {name}: a .tflite file's shapes are fixed ({list(have)}); "
                             "convert the model at the shape you need")


def _needed(sg: Any, in_ids: list[int], out_ids: list[int], names: list[str]) -> list[Any]:
    """The operators the outputs need, back to the inputs, in the file's (execution) order."""
    producer = {}
    for op in sg.operators:
        for o in op.outputs:
            producer[o] = op
    stop = set(in_ids)
    needed: set[int] = set()
    work = [o for o in out_ids if o not in stop]
    seen: set[int] = set()
    while work:
        t = work.pop()
        if t in seen:
            continue
        seen.add(t)
        op = producer.get(t)
        if op is None:
            if sg.tensors[t].data is None and not sg.tensors[t].is_variable:
                raise UsageError(f"tensor '{names[t]}' is needed for the outputs but is not among the inputs; "
                                 "name it in --inputs")
            continue
        if id(op) in needed:
            continue
        needed.add(id(op))
        work.extend(i for i in op.inputs if i >= 0 and i not in stop)
    return [op for op in sg.operators if id(op) in needed]


def _activations(sg: Any, ops: list[Any]) -> list[int]:
    produced = [o for op in ops for o in op.outputs]
    return [*dict.fromkeys([*sg.inputs, *produced])]


def _refuse_quantized(sg: Any, ops: list[Any], names: list[str], source: str) -> None:
    """A file whose activations are already integers (a quantized model, or part of one) is not
    quantized again: the ranges it was quantized with are gone."""
    quantized = [i for i in _activations(sg, ops) if sg.tensors[i].scale and sg.tensors[i].dtype not in _FLOATS]
    if not quantized:
        return
    floats = [op for op in ops if op.builtin not in _QUANT_OPS
              and any(sg.tensors[o].dtype in _FLOATS for o in op.outputs)]
    first = names[quantized[0]]
    if not floats:
        raise ConversionError(f"{source} is already quantized (tensor '{first}' is {sg.tensors[quantized[0]].dtype} "
                              "with a scale, no float op): nothing to convert; `qconvert dump` shows it")
    raise ConversionError(f"{source} has quantized activations (tensor '{first}', {sg.tensors[quantized[0]].dtype}) "
                          f"beside {len(floats)} float op(s); qconvert quantizes float models: give it the float file")


def _dequantized(t: Any) -> np.ndarray:
    """A quantized constant's float32 values: ``(q - zero_point) * scale``, per channel along its
    quantized dimension."""
    q = t.array().astype(np.float32)
    scale = np.asarray(t.scale, np.float32)
    zp = np.asarray(t.zero_point or (0,) * len(t.scale), np.float32)
    if zp.size != scale.size or (scale.size > 1 and not (0 <= t.quantized_dimension < q.ndim
                                                           and q.shape[t.quantized_dimension] == scale.size)):
        raise ValueError(f"{scale.size} scale(s) and {zp.size} zero point(s) do not fit shape {list(q.shape)} "
                         f"along dimension {t.quantized_dimension}")
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[t.quantized_dimension] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q - zp) * scale).astype(np.float32)


def _constant(t: Any, name: str) -> np.ndarray:
    if t.sparse:
        raise ConversionError(f"constant '{name}' is stored sparse; qconvert reads dense constants only")
    if t.blockwise is not None:
        raise ConversionError(f"constant '{name}' is quantized blockwise; qconvert reads float or per-channel weights")
    try:
        value = t.array()
    except (TypeError, ValueError) as exc:  # a dtype numpy has no name for, or a buffer of the wrong size
        raise ConversionError(f"constant '{name}' ({t.dtype}{list(t.shape)}) cannot be read: {exc}") from None
    if t.scale and value.dtype.kind in "iu" and t.dtype != "int32":
        try:
            return _dequantized(t)
        except ValueError as exc:
            raise ConversionError(f"constant '{name}' ({t.dtype}{list(t.shape)}): {exc}; the file is damaged") from None
    if t.dtype == "float16":
        return value.astype(np.float32)
    return np.ascontiguousarray(value)


def _fold_dequantized_constants(sg: Any, ops: list[Any], names: list[str], graph: Graph) -> dict[int, int]:
    """Every DEQUANTIZE of a constant becomes its float32 result (a constant named as its
    output); returns those operators (by id) with the tensor each read."""
    folded = {}
    for op in ops:
        if op.builtin == "DEQUANTIZE" and len(op.inputs) == 1 and op.inputs[0] >= 0:
            t = sg.tensors[op.inputs[0]]
            if t.data is not None:
                value = _constant(t, names[op.inputs[0]])
                out = names[op.outputs[0]]
                graph.add_tensor(Tensor(out, "float32", tuple(value.shape), value.astype(np.float32)))
                folded[id(op)] = op.inputs[0]
    return folded


def _add_op(graph: Graph, sg: Any, op: Any, names: list[str], source: str) -> None:
    out = names[op.outputs[0]] if op.outputs else f"operator of {op.builtin}"
    if op.builtin in _SPLITS:
        _add_slices(graph, sg, op, names, source)
        return
    if op.builtin == CUSTOM:
        raise ConversionError(f"{source}: tensor '{out}' comes from custom op '{op.custom_code}', which qconvert "
                              "cannot quantize")
    if op.builtin == "POW":
        _add_square(graph, sg, op, names, source, out)
        return
    r = row(op.builtin)
    if r is None or r.made is not Made.FLOAT or (r.kernel is None and not r.reshapes):
        raise ConversionError(f"{source}: tensor '{out}' comes from {op.builtin}, which qconvert cannot quantize "
                              "(docs/supported-ops.md lists the ops it does)")
    if len(op.outputs) != 1:
        raise ConversionError(f"{source}: {op.builtin} '{out}' has {len(op.outputs)} outputs; qconvert reads it "
                              "with one")
    ins = [_operand(graph, sg, i, names) for i in op.inputs]
    if op.builtin == "RESHAPE" and len(ins) == 2 and ins[1] and graph.tensors[ins[1]].data is not None \
            and np.ndim(graph.tensors[ins[1]].data) != 1:
        # a shape operand that is not a vector (TOCO's [1, N] in dp_net): LiteRT reads the new shape
        # from the options then (reshape.cc), and qconvert writes a vector, as TensorFlow 2.21 does
        ins[1] = graph.add_const(f"{out}/shape", np.asarray(sg.tensors[op.outputs[0]].shape, np.int32))
    for o in op.outputs:
        graph.add_tensor(_activation(sg.tensors[o], names[o]))
    attrs = {k: v for k, v in op.options.items() if k not in _WRITER_OPTIONS and v is not None}
    graph.add_node(Node(op.builtin, ins, [names[o] for o in op.outputs], attrs, name=out))


def _add_square(graph: Graph, sg: Any, op: Any, names: list[str], source: str, out: str) -> None:
    """POW(x, 2) as MUL(x, x) and POW(x, 0.5) as SQRT(x): TensorFlow 2.21's converter writes
    ``tf.pow(x, 2.0)`` and ``tf.pow(x, 0.5)`` so, and quantizes them as MUL and SQRT; any other POW it
    leaves float (no int8 kernel; measured: DEQUANTIZE, POW, QUANTIZE even under TFLITE_BUILTINS_INT8),
    and qconvert refuses it (older converters wrote POW(x, 2) and POW(x, 0.5): dp_net)."""
    t = sg.tensors[op.inputs[1]] if len(op.inputs) == 2 and op.inputs[1] >= 0 else None
    exponent = _constant(t, names[op.inputs[1]]) if t is not None and t.data is not None else None
    power = float(exponent.reshape(-1)[0]) if exponent is not None and exponent.size else None
    if power not in (2.0, 0.5) or not np.all(exponent == power) \
            or tuple(sg.tensors[op.outputs[0]].shape) != tuple(sg.tensors[op.inputs[0]].shape):
        what = "an activation" if exponent is None else f"{exponent.reshape(-1)[:1].tolist()[0]:g}"
        raise ConversionError(f"{source}: tensor '{out}' comes from POW (exponent {what}), which TensorFlow 2.21 "
                              "leaves float (no int8 kernel) and qconvert cannot quantize; only x**2 and x**0.5 "
                              "convert (as MUL x·x and SQRT, as TensorFlow writes them): rewrite the power, or keep "
                              "the model float")
    x = _operand(graph, sg, op.inputs[0], names)
    graph.add_tensor(_activation(sg.tensors[op.outputs[0]], out))
    if power == 0.5:
        graph.add_node(Node("SQRT", [x], [out], {}, name=out))
    else:
        graph.add_node(Node("MUL", [x, x], [out], {"fused_activation_function": "NONE"}, name=out))


def _operand(graph: Graph, sg: Any, i: int, names: list[str]) -> str:
    """The IR name of operand ``i`` ("" for an absent optional one), its tensor added on first use."""
    if i < 0:
        return ""
    name = names[i]
    if name not in graph.tensors:
        t = sg.tensors[i]
        if t.data is not None and not t.is_variable:
            value = _constant(t, name)
            graph.add_tensor(Tensor(name, value.dtype.name, tuple(value.shape), value))
        else:
            graph.add_tensor(_activation(t, name, variable=bool(t.is_variable)))
    return name


_MAX_ELEMENTS = 1 << 31
_MAX_INPUT_ELEMENTS = 1 << 28  # one sample: 1 GiB of float32


def _activation(t: Any, name: str, variable: bool = False) -> Tensor:
    """A computed tensor (or a graph input, or a state) of the file's dtype and shape."""
    shape = tuple(int(d) for d in t.shape)
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.float64)) >= _MAX_ELEMENTS:
        raise ConversionError(f"tensor '{name}' has shape {list(shape)}; qconvert takes static shapes of fewer than "
                              "2^31 elements")
    return Tensor(name, t.dtype, shape, variable=variable)


# multi-output ops, held as one STRIDED_SLICE per output until the quantize stage regroups them (as
# the GraphDef importer writes a Split): op → its operand roles
_SPLITS = {"SPLIT": ("axis", "x"), "SPLIT_V": ("x", "sizes", "axis"), "UNPACK": ("x",)}


def _add_slices(graph: Graph, sg: Any, op: Any, names: list[str], source: str) -> None:
    """    SPLIT | SPLIT_V | UNPACK (x) → y0, y1, ...   ⇒   STRIDED_SLICE (x, begin, end, strides) → yk, each"""
    group = names[op.outputs[0]] if op.outputs else "?"
    what = f"{source}: {op.builtin} '{group}'"
    if len(op.inputs) != len(_SPLITS[op.builtin]) or any(i < 0 for i in op.inputs) or not op.outputs:
        raise ConversionError(f"{what}: {len(op.inputs)} operand(s) and {len(op.outputs)} result(s), where it "
                              f"takes {', '.join(_SPLITS[op.builtin])}; the file is damaged")
    roles = dict(zip(_SPLITS[op.builtin], op.inputs))
    x = _operand(graph, sg, roles["x"], names)
    shape = graph.tensors[x].shape
    rank = len(shape)
    if op.builtin == "UNPACK":
        axis = int(op.options.get("axis", 0))
    else:
        a = sg.tensors[roles["axis"]]
        if a.data is None:
            raise ConversionError(f"{what}: its axis is not a constant")
        axis = int(np.asarray(a.array()).reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ConversionError(f"{what}: axis {axis} out of range for {list(shape)}")
    axis %= rank
    n = len(op.outputs)
    if op.builtin == "UNPACK":
        sizes = [1] * n
    elif op.builtin == "SPLIT":
        sizes = [shape[axis] // n] * n
    else:
        sizes = [int(sg.tensors[o].shape[axis]) for o in op.outputs]
    if sum(sizes) != shape[axis]:
        raise ConversionError(f"{what}: its {n} outputs do not split dimension {axis} of {list(shape)}")
    options = {"num": n, "axis": axis} if op.builtin == "UNPACK" else {"num_splits": n}
    start = 0
    for k, (o, size) in enumerate(zip(op.outputs, sizes)):
        out = names[o]
        begin = [start if d == axis else 0 for d in range(rank)]
        end = [start + size if d == axis else shape[d] for d in range(rank)]
        consts = [graph.add_const(f"{out}/{w}", np.asarray(v, np.int32))
                  for w, v in (("begin", begin), ("end", end), ("strides", [1] * rank))]
        graph.add_tensor(_activation(sg.tensors[o], out))
        attrs = {m: 0 for m in STRIDED_SLICE_MASKS} | {
            "shrink_axis_mask": 1 << axis if op.builtin == "UNPACK" else 0, "_group": group, "_part": k,
            "_kind": op.builtin, "_axis": axis, "_sizes": sizes, "_operands": _SPLITS[op.builtin],
            "_options": options}
        graph.add_node(Node("STRIDED_SLICE", [x, *consts], [out], attrs, name=out))
        start += size
