"""Import-time evaluation of constant subgraphs (shape arithmetic, mostly).

Frozen graphs often compute a Reshape's target shape with ``Shape → StridedSlice
→ Prod → Pack``. With static shapes all of it is constant, and TensorFlow's
converter folds it away; so do we, while importing, so that later stages only
see the constant. Each entry maps a TF op to ``fn(node, values) -> ndarray``;
``Shape`` is special: it needs only its input's static shape.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ops.windows import strided_index
from qconvert.quant.rounding import rsqrt_float32


def _dtype(node: Any, key: str, default: str) -> np.dtype:
    return np.dtype(node.attrs.get(key, default))


def _strided_slice(node: Any, v: Sequence[np.ndarray]) -> np.ndarray:
    x, begin, end, strides = (np.asarray(a) for a in v)
    index = strided_index(x.ndim, begin, end, strides, node.attrs, f"node '{node.name}' (StridedSlice)")
    return np.asarray(x[index])


def _reduce(fn: Callable) -> Callable:
    def run(node: Any, v: Sequence[np.ndarray]) -> np.ndarray:
        axes = tuple(int(i) for i in np.atleast_1d(v[1]).tolist())
        return np.asarray(fn(v[0], axis=axes, keepdims=bool(node.attrs.get("keep_dims", False)))).astype(v[0].dtype)

    return run


def _range(node: Any, v: Sequence[np.ndarray]) -> np.ndarray:
    start, limit, delta = (np.asarray(a).reshape(-1)[0] for a in v)
    if delta == 0 or abs((limit - start) / delta) > 1 << 24:
        raise ConversionError(f"node '{node.name}' (Range): range({start}, {limit}, {delta}) is not a usable constant")
    return np.arange(start, limit, delta).astype(_dtype(node, "Tidx", "int32"))


def _binary(fn: Callable) -> Callable:
    return lambda node, v: np.asarray(fn(v[0], v[1])).astype(np.result_type(v[0], v[1]))


CONST_EVAL: dict[str, Callable[[Any, Sequence[np.ndarray]], np.ndarray]] = {
    "StridedSlice": _strided_slice,
    "Pack": lambda node, v: np.stack(v, axis=int(node.attrs.get("axis", 0))),
    "Prod": _reduce(np.prod),
    "Sum": _reduce(np.sum),
    "Max": _reduce(np.max),
    "Min": _reduce(np.min),
    "Rsqrt": lambda node, v: rsqrt_float32(v[0]) if v[0].dtype == np.float32 else 1.0 / np.sqrt(v[0]),
    "Neg": lambda node, v: np.negative(v[0]),
    "Sqrt": lambda node, v: np.sqrt(v[0]),  # IEEE: correctly rounded in float32, as TensorFlow
    "Cast": lambda node, v: v[0].astype(_dtype(node, "DstT", "float32")),
    "Add": _binary(np.add),
    "AddV2": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "FloorDiv": _binary(np.floor_divide),
    "Maximum": _binary(np.maximum),
    "Minimum": _binary(np.minimum),
    "ConcatV2": lambda node, v: np.concatenate(v[:-1], axis=int(np.asarray(v[-1]).reshape(-1)[0])),
    "ExpandDims": lambda node, v: np.expand_dims(v[0], int(np.asarray(v[1]).reshape(-1)[0])),
    "Reshape": lambda node, v: v[0].reshape([int(d) for d in np.asarray(v[1]).reshape(-1)]),
    "Transpose": lambda node, v: np.transpose(v[0], [int(d) for d in np.asarray(v[1]).reshape(-1)]),
    "Squeeze": lambda node, v: np.squeeze(v[0], axis=tuple(node.attrs.get("squeeze_dims") or []) or None),
    "Fill": lambda node, v: np.full([int(d) for d in v[0].reshape(-1)], v[1]),
    "Range": _range,  # position ids of a fixed input size (tf.range(tf.shape(x)[1]))
    # a learned class token broadcast to the batch (tf.broadcast_to(token, [tf.shape(x)[0], 1, D]))
    "BroadcastTo": lambda node, v: np.broadcast_to(v[0], [int(d) for d in np.asarray(v[1]).reshape(-1)]),
}
# Like Shape, these need only their input's static shape and type: the value they fill it with.
FILLED_LIKE = {"ZerosLike": 0, "OnesLike": 1}
# Ops that exist only to compute constants: they must fold, or the graph is not supported.
CONST_ONLY = {"Prod", "Min", "Cast", "FloorDiv", "Fill", "Shape", "Range", "BroadcastTo", *FILLED_LIKE}


def evaluate(node: Any, values: Sequence[np.ndarray]) -> np.ndarray:
    try:
        with np.errstate(all="ignore"):
            return np.array(CONST_EVAL[node.op](node, values), copy=True, order="C")
    except ConversionError:
        raise
    except (ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
        raise ConversionError(f"node '{node.name}' ({node.op}): cannot evaluate its constant inputs: {exc}") from None


def shape_of(node: Any, shape: Sequence[int]) -> np.ndarray:
    return np.array(list(shape), dtype=_dtype(node, "out_type", "int32"))
