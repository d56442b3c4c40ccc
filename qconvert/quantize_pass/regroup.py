"""The ``quantize`` stage: regroup the slices of a Split / SplitV / Unpack into one multi-output op.

The importer writes a multi-output TensorFlow op as one STRIDED_SLICE per output (tagged
``_group``/``_part``/``_kind``), so every pass before this one deals with single-output
nodes. Once the slices are int8, a complete group that reads one tensor and keeps its scale
and zero point on every output becomes the op TensorFlow writes:

    STRIDED_SLICE × n (x)   ⇒   SPLIT (axis, x) | SPLIT_V (x, sizes, axis) | UNPACK (x)

Outputs nobody reads (their slices were pruned) come back as unread tensors, as in
TensorFlow's file. A group whose parts were requantized stays as slices, which compute the
same integers.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from qconvert.ir import Graph, Node, Tensor
from qconvert.ir.passes import Context


def regroup_splits(graph: Graph, ctx: Context) -> bool:
    groups: dict[str, list[Node]] = defaultdict(list)
    for node in graph:
        if "_group" in node.attrs:
            groups[node.attrs["_group"]].append(node)
    changed = False
    for name, parts in groups.items():
        parts.sort(key=lambda n: n.attrs["_part"])
        first = parts[0]
        sizes = first.attrs["_sizes"]
        x = first.inputs[0]
        src = graph.tensors[x]
        if src.quant is None or \
                any(p.inputs[0] != x or graph.tensors[p.outputs[0]].quant is None
                    or not graph.tensors[p.outputs[0]].quant.same_as(src.quant)
                    or graph.tensors[p.outputs[0]].dtype != src.dtype for p in parts):
            continue
        kind, axis = first.attrs["_kind"], int(first.attrs["_axis"])
        operands = {"x": lambda: x, "axis": lambda: graph.add_const(f"{name}/axis", np.asarray(axis, np.int32)),
                    "sizes": lambda: graph.add_const(f"{name}/size_splits", np.asarray(sizes, np.int32))}
        inputs = [operands[role]() for role in first.attrs["_operands"]]
        outputs = _outputs(graph, name, parts, sizes)
        merged = Node(kind, inputs, outputs, dict(first.attrs["_options"]), name=name)
        graph.add_node(merged, before=first)  # before the slices: the outputs' producers change
        graph.remove_nodes(parts)
        changed = True
    graph.prune()
    return changed


def _outputs(graph: Graph, name: str, parts: list[Node], sizes: list[int]) -> list[str]:
    """One tensor per output; the outputs nobody reads (their slices were pruned) are recreated,
    as TensorFlow's op has them all."""
    by_part = {p.attrs["_part"]: p.outputs[0] for p in parts}
    axis = int(parts[0].attrs["_axis"])
    x = graph.tensors[parts[0].inputs[0]]
    names = []
    for k, size in enumerate(sizes):
        if k in by_part:
            names.append(by_part[k])
            continue
        shrunk = parts[0].attrs.get("shrink_axis_mask", 0)  # UNPACK drops the axis
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis) if shrunk else \
            tuple(size if i == axis else d for i, d in enumerate(x.shape))
        out = graph.unique_name(name if k == 0 else f"{name}:{k}")
        graph.add_tensor(Tensor(out, x.dtype, shape, None, x.quant))
        names.append(out)
    return names
