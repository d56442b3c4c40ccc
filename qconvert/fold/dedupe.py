"""The ``fold`` stage, last: an op computed twice on the same operands is computed once.

    y1 = op(a, b) {attrs},  y2 = op(a, b) {attrs}        ⇒        y1, and y2's readers read y1

TensorFlow's converter runs common-subexpression elimination on the graph; NASNet's cells
apply the same ReLU and the same pooling to one tensor in several branches (measured on
NASNetMobile at 32 px: TensorFlow writes 48 RELU, 40 AVERAGE_POOL_2D and 4 MAX_POOL_2D where
each branch's copy gave 112, 52 and 8). Two ops are the same when they have the same op,
operands (by name, in order), attributes, and output types, shapes and quantization
parameters (two QUANTIZE nodes of one tensor with other parameters are different ops).
A constant operand is compared by value (shape, bytes, parameters), as TensorFlow's
converter makes equal constants one before it compares ops: FastViT's identity-branch
BatchNormalization and the one its block subtracts read one tensor with equal statistics, and
TensorFlow writes one MUL+ADD for both (kcam FastViT_T8, measured: 25 MUL where two copies gave 35).
Integer constants (shapes, paddings, axes) too, whatever their width (int32 and int64 paddings of
equal values are one): two ZeroPadding2D of one tensor are one PAD, two MEANs over the same axes
one MEAN (measured on TF 2.21; kcam EfficientFormerV2S0 at 32 px: 8 PAD where separate copies gave 9).
A merged PAD still goes into each convolution it pads as SAME (fuse's fuse_pad_into_conv takes its
readers one by one: YOLOV8_N's two PADs of its 1x1 map go into both convolutions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.digest import value_digest
from qconvert.ir.passes import Context


def _frozen(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


_HEAD = 16  # elements compared before two constants of a shape are digested


def _value(data: np.ndarray) -> np.ndarray:
    """A constant as compared: integers of any width as int64."""
    data = np.asarray(data)
    return data.astype(np.int64) if data.dtype.kind in "iu" else data


def _const_names(graph: Graph) -> dict[str, str]:
    """Each constant equal to an earlier one (shape, value, parameters; float32 to float32,
    integers of any width to integers) → that one's name. Only constants sharing their shape,
    parameters and first elements with another are digested (a digest, not a copy of the bytes:
    ResNet50 has tens of MB of weights of a shared shape; the first elements tell most weights apart
    without reading them all)."""
    groups: dict[tuple, list[str]] = {}
    for name, t in graph.tensors.items():
        if t.data is not None and (t.dtype == "float32" or np.asarray(t.data).dtype.kind in "iu"):
            data = _value(t.data)
            head = data.flat[:_HEAD].tobytes()  # in C order, without copying a strided array
            groups.setdefault((data.dtype, data.shape, t.quant, t.blockwise, head), []).append(name)
    same: dict[str, str] = {}
    for key, names in groups.items():
        if len(names) < 2:
            continue
        if int(np.prod(key[1])) <= _HEAD:  # the first elements are all of them: equal already, no digest
            same.update((name, names[0]) for name in names[1:])
            continue
        first: dict[bytes, str] = {}
        for name in names:
            kept = first.setdefault(value_digest(_value(graph.tensors[name].data)), name)
            if kept != name:
                same[name] = kept
    return same


def _rest(graph: Graph, node: Node) -> tuple:
    """What else makes two ops with the same op and operands the same: attributes, output types."""
    # QuantParams is a frozen dataclass of tuples: hashable and compared field by field
    # (its repr printed every per-channel scale: 17 ms on ResNet50)
    outs = tuple((graph.tensors[o].dtype, _frozen(graph.tensors[o].shape), graph.tensors[o].quant)
                 for o in node.outputs)
    return _frozen(node.attrs), outs


def dedupe_ops(graph: Graph, ctx: Context) -> bool:
    # ops bucketed by op and operands; the rest of the key only where two share a bucket (most ops are
    # alone in theirs: freezing every op's attributes was half of this pass, 4 ms on EfficientViT_M0)
    seen: dict[tuple, list[list]] = {}
    dead = []
    same = _const_names(graph)
    for node in graph:
        if not node.inputs or any(o in graph.outputs for o in node.outputs):
            continue
        bucket = seen.setdefault((node.op, tuple(same.get(i, i) for i in node.inputs)), [])
        if not bucket:
            bucket.append([None, node])
            continue
        rest = _rest(graph, node)
        first = None
        for entry in bucket:
            if entry[0] is None:
                entry[0] = _rest(graph, entry[1])
            if entry[0] == rest:
                first = entry[1]
                break
        if first is None:
            bucket.append([rest, node])
            continue
        for mine, kept in zip(node.outputs, first.outputs):
            graph.replace_all_uses(mine, kept)
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)
