"""GraphDef nodes → IR graph with TensorFlow op names and static shapes.

The importer cuts the graph down to what the requested outputs need, starting at the
requested inputs (Placeholders, or any tensor ``node`` / ``node:k``: the graph is cut there and
the producer side dropped, as TensorFlow's ``input_arrays`` does), resolves
Identity-like aliases (Identity, StopGradient, Snapshot), turns Const nodes into
constant tensors and Placeholders into graph inputs, and infers every output
shape with the op table's shape functions. It never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from qconvert.errors import ConversionError, UsageError
from qconvert.frontend.const_eval import CONST_EVAL, CONST_ONLY, FILLED_LIKE, evaluate, shape_of
from qconvert.frontend.custom import add_custom, check_known_shape, custom_ports
from qconvert.frontend.graphdef import RawNode
from qconvert.frontend.tf_ops import (
    MULTI_OUTPUT,
    SHAPE_FROM_CONSTANTS,
    SHAPE_ONLY,
    STRUCTURAL,
    TF_OPS,
    elements,
    split_parts,
    supported_ops,
)
from qconvert.ir import Graph, Node, Tensor
from qconvert.ops.windows import strided_shape

# TF1 control flow (tf.while_loop): no TFLite builtin takes it; TensorFlow refuses it too.
_CONTROL_FLOW = {"Enter", "Exit", "LoopCond", "Merge", "NextIteration", "Switch", "TensorArrayV3",
                 "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArrayGatherV3"}

# Ops that are never graph outputs when outputs are auto-detected.
_NOT_SINKS = {"Const", "NoOp", "Placeholder", "Assert", "SaveV2", "RestoreV2", "VarHandleOp"}
_MAX_ELEMENTS = 1 << 31
_DTYPE_NAMES: dict[np.dtype, str] = {}  # np.dtype -> its name: numpy computes .name in Python (1.5 µs)


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def tensor_name(ref: str) -> str:
    """GraphDef input reference ("n", "n:0", "n:2") → IR tensor name ("n", "n", "n:2")."""
    if ref.endswith(":0"):
        return ref[:-2]
    return ref


def _node_of(ref: str) -> str:
    if ":" not in ref:  # most references (a third of the time)
        return ref
    name, _, port = ref.rpartition(":")
    return name if name and port.isdigit() else ref


def detect_outputs(nodes: Sequence[RawNode]) -> list[str]:
    """Graph sinks: nodes whose value nobody reads, skipping constants and NoOps."""
    read: set[str] = set()
    for n in nodes:
        for ref in n.inputs:
            if not ref.startswith("^"):
                read.add(_node_of(ref))
    return [n.name for n in nodes if n.name not in read and n.op not in _NOT_SINKS]


def import_graph(
    nodes: Sequence[RawNode],
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    allow_custom_ops: bool = False,
) -> Graph:
    """The IR graph of ``nodes`` from ``inputs`` to ``outputs``, in four steps: validate what
    the user named, reach back from the outputs to the nodes they need, refuse what cannot be
    converted, add the rest in topological order. ``allow_custom_ops``: an op neither table
    knows becomes a CUSTOM node (``custom.py``) instead of an error."""
    # validate
    by_name = _by_name(nodes)
    out_refs = _output_refs(nodes, by_name, outputs)
    cut = _cut_tensors(nodes, by_name, inputs)
    _check_input_shapes(nodes, cut, input_shapes)
    # reach
    input_set = {i for i in inputs or [] if tensor_name(i) not in cut}
    needed = _reach(out_refs, by_name, input_set, cut)
    # refuse
    _refuse(needed, by_name, allow_custom_ops)
    # add
    order = _topological(needed, by_name, input_set, cut)
    shapes = {tensor_name(k): tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    graph = Graph()
    _add_cut_inputs(graph, inputs or [], cut, by_name, shapes)
    alias: dict[str, str] = {}
    ports = custom_ports(nodes, out_refs) if allow_custom_ops else {}
    unknown: dict[str, str] = {}  # a tensor of unknown shape → the custom op it comes from
    for name in order:
        raw = by_name[name]
        if allow_custom_ops and is_unknown(raw.op) and name not in input_set:
            unknown.update(dict.fromkeys(add_custom(graph, raw, _data_inputs(graph, raw, alias), ports.get(name, 1)), name))
            continue
        if unknown and raw.op not in STRUCTURAL and raw.op not in ("Const", "Placeholder", "NoOp"):
            check_known_shape(raw, _data_inputs(graph, raw, alias), unknown)
        _add_node(graph, raw, alias, input_set, shapes)
    _set_outputs(graph, out_refs, alias)
    return graph


# --- validate: what the user named is in the graph -------------------------------------

def _by_name(nodes: Sequence[RawNode]) -> dict[str, RawNode]:
    by_name: dict[str, RawNode] = {}
    for n in nodes:
        if n.name in by_name:
            raise ConversionError(f"the graph has two nodes named '{n.name}'; node names must be unique")
        by_name[n.name] = n
    return by_name


def _placeholders(nodes: Sequence[RawNode]) -> list[str]:
    return [n.name for n in nodes if n.op == "Placeholder"]


def _output_refs(nodes: Sequence[RawNode], by_name: Mapping[str, RawNode],
                 outputs: Sequence[str] | None) -> list[str]:
    """The tensors to convert up to: ``--outputs`` (each naming a node), else the graph's sinks."""
    if not outputs:
        out_refs = detect_outputs(nodes)
        if not out_refs:
            raise ConversionError("the graph has no output node; name one with --outputs")
        return out_refs
    for o in outputs:
        if _node_of(o) not in by_name:
            raise UsageError(
                f"--outputs names '{o}', which is not a node of the graph; sinks are: "
                f"{', '.join(detect_outputs(nodes)) or '(none)'}"
            )
    return list(outputs)


def _cut_tensors(nodes: Sequence[RawNode], by_name: Mapping[str, RawNode],
                 inputs: Sequence[str] | None) -> set[str]:
    """The tensors the graph is cut at: the ``--inputs`` that are not a Placeholder itself."""
    cut: set[str] = set()
    for i in inputs or []:
        if _node_of(i) not in by_name:
            raise UsageError(
                f"--inputs names '{i}', which is not a node of the graph; placeholders are: "
                f"{', '.join(_placeholders(nodes)) or '(none)'} (any tensor can be an input: NODE or NODE:K)"
            )
        if by_name[_node_of(i)].op != "Placeholder" or i != _node_of(i):
            cut.add(tensor_name(i))
    return cut


def _check_input_shapes(nodes: Sequence[RawNode], cut: set[str],
                        input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    placeholders = _placeholders(nodes)
    known_inputs = set(placeholders) | cut
    for name in input_shapes or {}:
        if tensor_name(name) not in known_inputs:
            raise UsageError(
                f"--input-shapes names '{name}', which is not an input; placeholders are: "
                f"{', '.join(placeholders) or '(none)'}"
            )


# --- reach: only what the outputs need is converted ------------------------------------

def _reach(out_refs: Sequence[str], by_name: Mapping[str, RawNode], input_set: set[str],
           cut: set[str]) -> list[str]:
    """The nodes the outputs need, walking back from them; an input node or a cut tensor stops
    the walk."""
    needed: list[str] = []
    seen: set[str] = set()
    stack = [_node_of(o) for o in out_refs if tensor_name(o) not in cut]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        needed.append(name)
        if name in input_set:
            continue
        for ref in by_name[name].inputs:
            if ref.startswith("^") or (cut and tensor_name(ref) in cut):
                continue
            src = _node_of(ref)
            if src not in by_name:
                raise ConversionError(f"node '{name}' reads '{ref}', which is not in the graph")
            stack.append(src)
    return needed


# --- refuse: ops qconvert does not read, named before any work -------------------------

def _refuse(needed: Sequence[str], by_name: Mapping[str, RawNode], allow_custom_ops: bool = False) -> None:
    """A TF1 while loop, or an op neither the TF op table nor constant evaluation knows (unless
    ``allow_custom_ops``: it becomes a custom op)."""
    unknown = sorted({by_name[n].op for n in needed if is_unknown(by_name[n].op)})
    loop = sorted(set(unknown) & _CONTROL_FLOW)
    if loop:
        where = [n for n in needed if by_name[n].op in _CONTROL_FLOW]
        raise ConversionError(
            f"the graph has a TF1 while loop ({', '.join(loop)}; e.g. node '{where[0]}'): a loop that is not a "
            f"tf_keras LSTM layer cannot become an int8 TFLite graph (TensorFlow 2.21 crashes calibrating a Keras "
            f"GRU, SimpleRNN or Keras 3 LSTM loop); export the recurrent layer unrolled (Keras: unroll=True; a "
            f"tf_keras LSTM in a SavedModel converts as it is), or cut the graph before it with --outputs"
        )
    if unknown and not allow_custom_ops:
        where = ", ".join(
            f"'{n}' ({by_name[n].op})" for n in needed if by_name[n].op in unknown
        )
        raise ConversionError(
            f"unsupported op{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} at node{'s' if len(where.split(',')) > 1 else ''} "
            f"{_shorten(where)}; convert with --allow-custom-ops to write {'them' if len(unknown) > 1 else 'it'} "
            f"as a TFLite custom op (for a runtime that registers it), or cut the graph before it with --outputs; "
            f"supported ops: {supported_ops()}"
        )


# --- add: tensors and nodes in topological order ---------------------------------------

def _add_cut_inputs(graph: Graph, inputs: Sequence[str], cut: set[str], by_name: Mapping[str, RawNode],
                    shapes: Mapping[str, tuple[int, ...]]) -> None:
    for ref in inputs:
        name = tensor_name(ref)
        if name in cut and name not in graph.tensors:
            graph.add_tensor(_cut_input(ref, by_name, shapes.get(name)))
            graph.inputs.append(name)


def _add_node(graph: Graph, raw: RawNode, alias: dict[str, str], input_set: set[str],
              shapes: Mapping[str, tuple[int, ...]]) -> None:
    """One node: a constant, a graph input, an alias (Identity and the like), a value computed
    now (constant shape arithmetic), the slices of a split, or an op."""
    name, op = raw.name, raw.op
    if op == "Const":
        graph.add_tensor(_const_tensor(raw))
        return
    if op == "Placeholder" or name in input_set:
        if name not in graph.tensors:
            graph.add_tensor(_placeholder(raw, shapes.get(name)))
            graph.inputs.append(name)
        return
    if op == "NoOp":
        return
    data_inputs = _data_inputs(graph, raw, alias)
    if op in STRUCTURAL:
        _add_alias(raw, data_inputs, alias)
        return
    value = _value_now(graph, raw, data_inputs)
    if value is not None:
        graph.add_tensor(Tensor(name, value.dtype.name, tuple(value.shape), value))
    elif op in MULTI_OUTPUT:
        _add_parts(graph, raw, data_inputs)
    else:
        _add_op(graph, raw, data_inputs)


def _const_tensor(raw: RawNode) -> Tensor:
    value = raw.attrs.get("value")
    if not isinstance(value, np.ndarray):
        raise ConversionError(f"node '{raw.name}' (Const) has no tensor value")
    return Tensor(raw.name, _dtype_name(value.dtype), value.shape, value)


def _resolve(alias: Mapping[str, str], ref: str) -> str:
    """The tensor a GraphDef reference reads, through Identity-like aliases."""
    name = tensor_name(ref)
    while name in alias:
        name = alias[name]
    return name


def _data_inputs(graph: Graph, raw: RawNode, alias: Mapping[str, str]) -> list[str]:
    data_inputs = [_resolve(alias, r) for r in raw.inputs if not r.startswith("^")]
    for t in data_inputs:
        if t not in graph.tensors:
            raise ConversionError(f"node '{raw.name}' reads '{t}', which no node produces")
    return data_inputs


def _add_alias(raw: RawNode, data_inputs: list[str], alias: dict[str, str]) -> None:
    if not data_inputs:
        raise ConversionError(f"node '{raw.name}' ({raw.op}) has no input")
    for k, src in enumerate(data_inputs if raw.op == "IdentityN" else data_inputs[:1]):
        alias[raw.name if k == 0 else f"{raw.name}:{k}"] = src  # IdentityN: output k is input k


def _value_now(graph: Graph, raw: RawNode, data_inputs: list[str]) -> np.ndarray | None:
    """The value of a Shape, or of shape arithmetic on constants, folded while importing."""
    if raw.op == "Shape" and data_inputs:
        return shape_of(raw, graph.tensors[data_inputs[0]].shape)
    if raw.op in FILLED_LIKE and data_inputs:  # zeros_like(x) at a static shape (GroupNorm's moments)
        x = graph.tensors[data_inputs[0]]
        return np.full(x.shape, FILLED_LIKE[raw.op], dtype=np.dtype(raw.attrs.get("T", x.dtype)))
    if raw.op in CONST_EVAL and data_inputs and all(graph.is_const(t) for t in data_inputs):
        return evaluate(raw, [graph.const(t) for t in data_inputs])
    return None


def _add_op(graph: Graph, raw: RawNode, data_inputs: list[str]) -> None:
    """An op node and its output tensor, of the shape (and dtype) the TF op table infers."""
    name, op = raw.name, raw.op
    if op in CONST_ONLY:
        raise ConversionError(
            f"node '{name}' ({op}) computes on tensors that are not constant; only constant "
            f"shape arithmetic is supported (give the graph static shapes, e.g. --input-shapes)"
        )
    dtype = raw.attrs.get("T", "float32")
    if dtype != "float32":
        raise ConversionError(
            f"node '{name}' ({op}) computes in {dtype}; only float32 activations can be quantized"
        )
    in_shapes = [graph.tensors[t].shape for t in data_inputs]
    consts = [graph.tensors[t].data for t in data_inputs]
    spec = TF_OPS[op]
    shape = spec.shape(raw, in_shapes, consts) if spec.shape else in_shapes[0]
    if any(d <= 0 for d in shape) or elements(shape) > _MAX_ELEMENTS:
        raise ConversionError(f"node '{name}' ({op}) would produce a tensor of shape {list(shape)}")
    graph.add_tensor(Tensor(name, spec.dtype(raw) if spec.dtype else "float32", tuple(int(d) for d in shape)))
    attrs = {k: v for k, v in raw.attrs.items() if v is not None}  # an empty AttrValue = not set
    graph.add_node(Node(op, data_inputs, [name], attrs, name=name))


def _set_outputs(graph: Graph, out_refs: Sequence[str], alias: Mapping[str, str]) -> None:
    graph.outputs = [_resolve(alias, o) for o in out_refs]
    graph.output_names = [tensor_name(o) for o in out_refs]
    for o in graph.outputs:
        if graph.is_const(o):
            raise ConversionError(f"output '{o}' is a constant; name a computed node with --outputs")
    if not graph.inputs:
        raise ConversionError("the graph has no Placeholder input on the path to its outputs")


def is_unknown(op: str) -> bool:
    """Neither the TF op table nor constant evaluation knows the op."""
    return op not in TF_OPS and op not in CONST_ONLY


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def _placeholder(raw: RawNode, override: tuple[int, ...] | None) -> Tensor:
    dtype = raw.attrs.get("dtype", "float32")
    if dtype != "float32":
        raise ConversionError(f"input '{raw.name}' has dtype {dtype}; only float32 inputs can be quantized")
    shape = raw.attrs.get("shape")
    if override is not None:
        if shape is not None and len(shape) != len(override):
            raise UsageError(
                f"--input-shapes {raw.name}: rank {len(override)} does not match the placeholder's {list(shape)}"
            )
        shape = override
    if shape is None:
        raise ConversionError(
            f"input '{raw.name}' has unknown rank; pass --input-shapes {raw.name}=D0,D1,..."
        )
    dims = list(shape)
    if dims and dims[0] == -1:
        dims[0] = 1  # unknown batch → 1, as TensorFlow's converter does
    if any(d < 0 for d in dims):
        raise ConversionError(
            f"input '{raw.name}' has unknown dimensions {list(shape)}; pass --input-shapes {raw.name}=D0,D1,..."
        )
    if any(d == 0 for d in dims) or int(np.prod(dims, dtype=np.int64)) > _MAX_ELEMENTS:
        raise ConversionError(f"input '{raw.name}' has an unusable shape {dims}")
    return Tensor(raw.name, "float32", tuple(dims))


def _topological(needed: list[str], by_name: Mapping[str, RawNode], cut: set[str],
                 cut_tensors: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Depth-first post-order over data inputs; reports a cycle by node name."""
    state: dict[str, int] = {}
    order: list[str] = []
    def data_inputs(name: str) -> list[str]:  # the nodes they come from
        return [] if name in cut else [_node_of(r) for r in by_name[name].inputs
                                       if not r.startswith("^") and (not cut_tensors or tensor_name(r) not in cut_tensors)]

    for root in sorted(needed):
        if root in state:
            continue
        stack: list[tuple[str, list[str], int]] = [(root, data_inputs(root), 0)]
        state[root] = 1
        while stack:
            name, refs, i = stack[-1]
            if i < len(refs):
                stack[-1] = (name, refs, i + 1)
                src = refs[i]
                st = state.get(src, 0)
                if st == 1:
                    raise ConversionError(f"the graph has a cycle through node '{src}'")
                if st == 0:
                    state[src] = 1
                    stack.append((src, data_inputs(src), 0))
            else:
                state[name] = 2
                order.append(name)
                stack.pop()
    return order


def _cut_input(ref: str, by_name: Mapping[str, RawNode], override: tuple[int, ...] | None) -> Tensor:
    """The graph input that replaces tensor ``ref`` (its producer side is dropped): float32,
    with the shape given by --input-shapes, else inferred on the dropped side."""
    name = tensor_name(ref)
    raw = by_name[_node_of(ref)]
    dtype = raw.attrs.get("T") or raw.attrs.get("dtype") or "float32"
    if dtype != "float32":
        raise ConversionError(f"--inputs {ref}: the tensor is {dtype}; only float32 inputs can be quantized")
    shape = override if override is not None else infer_shape(ref, by_name)
    if shape is None:
        raise UsageError(f"--inputs {ref}: its shape cannot be inferred from the graph; pass --input-shapes {name}=D0,D1,...")
    dims = list(shape)
    if dims and dims[0] == -1:
        dims[0] = 1  # unknown batch -> 1, as for a placeholder
    if any(d <= 0 for d in dims) or int(np.prod(dims, dtype=np.int64)) > _MAX_ELEMENTS:
        raise UsageError(f"--inputs {ref}: shape {list(shape)} is not static; pass --input-shapes {name}=D0,D1,...")
    return Tensor(name, "float32", tuple(int(d) for d in dims))


def infer_shape(ref: str, by_name: Mapping[str, RawNode]) -> tuple[int, ...] | None:
    """The static shape of tensor ``ref``, from the nodes that produce it: the op table's shape
    functions, the shape-only functions of ops qconvert does not convert (audio front ends),
    ``_output_shapes`` where the exporter kept them. None when something is unknown."""
    memo: dict[str, list[tuple[int, ...]] | None] = {}

    def outputs_of(node: str, depth: int = 0) -> list[tuple[int, ...]] | None:
        if node in memo:
            return memo[node]
        memo[node] = None  # a cycle or a deep chain gives up
        raw = by_name.get(node)
        if raw is None or depth > 500:
            return None
        shapes: list[tuple[int, ...]] | None = None
        if isinstance(raw.attrs.get("_output_shapes"), list) and raw.attrs["_output_shapes"]:
            listed = [tuple(int(d) for d in s) if s is not None else None for s in raw.attrs["_output_shapes"]]
            if all(s is not None and all(d >= 0 for d in s) for s in listed):
                shapes = listed  # type: ignore[assignment]
        if shapes is None and raw.op == "Placeholder":
            s = raw.attrs.get("shape")
            shapes = [tuple(int(d) for d in s)] if s is not None else None
        elif shapes is None and raw.op == "Const" and isinstance(raw.attrs.get("value"), np.ndarray):
            shapes = [tuple(raw.attrs["value"].shape)]
        elif shapes is None:
            ins = []
            consts = []
            for r in raw.inputs:
                if r.startswith("^") or _node_of(r) not in by_name:
                    continue
                src = outputs_of(_node_of(r), depth + 1)
                k = int(r.rpartition(":")[2]) if ":" in r and r.rpartition(":")[2].isdigit() else 0
                ins.append(src[k] if src is not None and k < len(src) else None)
                v = by_name[_node_of(r)].attrs.get("value") if by_name[_node_of(r)].op == "Const" else None
                consts.append(v)
            if any(s is None for s in ins):
                from_consts = SHAPE_FROM_CONSTANTS.get(raw.op)
                shapes = from_consts(raw, consts) if from_consts is not None else None
                memo[node] = shapes
                return shapes
            try:
                if raw.op in SHAPE_ONLY:
                    shapes = SHAPE_ONLY[raw.op](raw, ins)
                elif raw.op in STRUCTURAL:
                    shapes = [ins[0]]
                elif raw.op in TF_OPS and TF_OPS[raw.op].shape is not None:
                    shapes = [tuple(TF_OPS[raw.op].shape(raw, ins, consts))]
            except (ConversionError, ValueError, IndexError, TypeError):
                shapes = None
        memo[node] = shapes
        return shapes

    out = outputs_of(_node_of(ref))
    k = int(ref.rpartition(":")[2]) if ":" in ref and ref.rpartition(":")[2].isdigit() else 0
    return out[k] if out is not None and k < len(out) else None


def _add_parts(graph: Graph, raw: RawNode, data_inputs: list[str]) -> None:
    """A Split / SplitV / Unpack as one StridedSlice per output (``name``, ``name:1``, ...), each
    tagged with its group; the quantize stage regroups them into one SPLIT / SPLIT_V / UNPACK."""
    name = raw.name
    parts = split_parts(raw, [graph.tensors[t].shape for t in data_inputs],
                        [graph.tensors[t].data for t in data_inputs])
    x = data_inputs[parts.data]
    shape = graph.tensors[x].shape
    value = graph.const(x)
    shrink = parts.tfl == TF_OPS["Unpack"].tfl
    for k, (start, stop) in enumerate(parts.bounds):
        out = name if k == 0 else f"{name}:{k}"
        index = tuple((start if shrink else slice(start, stop)) if d == parts.axis else slice(None)
                      for d in range(len(shape)))
        if value is not None:
            part = np.ascontiguousarray(value[index])
            graph.add_tensor(Tensor(out, part.dtype.name, tuple(part.shape), part))
            continue
        begin = [start if d == parts.axis else 0 for d in range(len(shape))]
        end = [stop if d == parts.axis else shape[d] for d in range(len(shape))]
        consts = [graph.add_const(f"{out}/{what}", np.asarray(v, np.int32))
                  for what, v in (("begin", begin), ("end", end), ("strides", [1] * len(shape)))]
        graph.add_tensor(Tensor(out, "float32", strided_shape(shape, index, f"node '{name}' ({raw.op})")))
        attrs = {"shrink_axis_mask": 1 << parts.axis if shrink else 0, "_group": name, "_part": k,
                 "_kind": parts.tfl, "_axis": parts.axis, "_sizes": [b - a for a, b in parts.bounds],
                 "_operands": parts.operands, "_options": parts.options}
        graph.add_node(Node("StridedSlice", [x, *consts], [out], attrs, name=out))
