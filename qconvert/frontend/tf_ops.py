"""The TensorFlow op table: every GraphDef op type qconvert reads, the TFLite op it
becomes, and how to infer its output shape (NHWC). With ``legalize/`` this is the only
place that knows TensorFlow op names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ops.windows import strided_index, strided_shape, window_out

Shape = tuple[int, ...]

# ---------------------------------------------------------------------------
# Shape inference for TensorFlow ops (NHWC)


_INT64_END = 1 << 63


def elements(dims: Sequence[int]) -> int:
    """``int(np.prod(dims, dtype=np.int64))``, numpy's wrap-around included, in a seventh of the
    time: Python's product, numpy's only for a product outside int64."""
    n = math.prod([int(d) for d in dims])
    return n if -_INT64_END <= n < _INT64_END else int(np.prod(dims, dtype=np.int64))


def _attr(node: Any, key: str, default: Any = None) -> Any:
    value = node.attrs.get(key)
    return default if value is None else value


def _nhwc_only(node: Any) -> None:
    fmt = _attr(node, "data_format", "NHWC")
    if fmt not in ("NHWC", "", None):
        raise ConversionError(
            f"node '{node.name}' ({node.op}) uses data_format {fmt}; only NHWC graphs are supported "
            f"(TFLite is NHWC): re-export the model with channels-last layout"
        )


def _conv_like(node: Any, x: Shape, h: int, w: int, out_c: int) -> Shape:
    _nhwc_only(node)
    if len(x) != 4:
        raise ConversionError(f"node '{node.name}' ({node.op}): input must be 4-D NHWC, got shape {list(x)}")
    strides = _attr(node, "strides", [1, 1, 1, 1])
    dil = _attr(node, "dilations", [1, 1, 1, 1]) or [1, 1, 1, 1]
    pad = _attr(node, "padding", "VALID")
    oh = window_out(x[1], h, strides[1], dil[1], pad)
    ow = window_out(x[2], w, strides[2], dil[2], pad)
    if oh <= 0 or ow <= 0:
        raise ConversionError(f"node '{node.name}' ({node.op}): window larger than input {list(x)}")
    return (x[0], oh, ow, out_c)


def shape_conv2d(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    w = s[1]
    # a filter with fewer input channels than the input is a grouped conv (Keras groups=G)
    if len(w) != 4 or w[2] <= 0 or s[0][-1] % w[2] or w[3] % (s[0][-1] // w[2]):
        raise ConversionError(
            f"node '{node.name}' (Conv2D): filter shape {list(w)} does not fit input {list(s[0])}"
        )
    return _conv_like(node, s[0], w[0], w[1], w[3])


def shape_depthwise(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    w = s[1]
    if len(w) != 4 or w[2] != s[0][-1]:
        raise ConversionError(
            f"node '{node.name}' (DepthwiseConv2dNative): filter shape {list(w)} does not fit input {list(s[0])}"
        )
    return _conv_like(node, s[0], w[0], w[1], w[2] * w[3])


def shape_pool(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    k = _attr(node, "ksize", [1, 1, 1, 1])
    if k[0] != 1 or k[3] != 1:
        raise ConversionError(f"node '{node.name}' ({node.op}): pooling over batch or channels is not supported")
    return _conv_like(node, s[0], k[1], k[2], s[0][3])


def shape_matmul(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    a, b = s
    if len(a) != 2 or len(b) != 2:
        raise ConversionError(f"node '{node.name}' (MatMul): operands must be 2-D, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if _attr(node, "transpose_a", False) else a
    k2, n = (b[1], b[0]) if _attr(node, "transpose_b", False) else b
    if k != k2:
        raise ConversionError(f"node '{node.name}' (MatMul): inner dimensions differ: {list(a)} x {list(b)}")
    return (m, n)


def shape_batch_matmul(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    """BatchMatMul/V2/V3 ``(x, y)``: ``[..., M, K] x [..., K, N]`` (``adj_x``/``adj_y`` swap the last two
    dimensions of an operand), batch dimensions broadcast (V2, V3)."""
    a, b = s
    if len(a) < 2 or len(b) < 2:
        raise ConversionError(f"node '{node.name}' ({node.op}): operands must have rank 2 or more, got "
                              f"{list(a)} and {list(b)}")
    m, k = (a[-1], a[-2]) if _attr(node, "adj_x", False) else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if _attr(node, "adj_y", False) else (b[-2], b[-1])
    if k != k2:
        raise ConversionError(f"node '{node.name}' ({node.op}): inner dimensions differ: {list(a)} x {list(b)}")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    except ValueError:
        raise ConversionError(f"node '{node.name}' ({node.op}): batch dimensions of {list(a)} and {list(b)} "
                              f"do not broadcast") from None
    return (*batch, m, n)


def shape_einsum(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    """Einsum ``(x, y)`` with explicit labels: each output label's size in the operands (what the
    legalization cannot lower it refuses there, naming the equation)."""
    equation = str(_attr(node, "equation", "")).replace(" ", "")
    terms, _, out = equation.partition("->")
    size: dict[str, int] = {}
    for term, shape in zip(terms.split(","), s):
        if term.isalpha() and len(term) == len(shape):
            for label, d in zip(term, shape):
                size.setdefault(label, int(d))
    if not _ or len(s) != 2 or any(label not in size for label in out):
        raise ConversionError(f"node '{node.name}' (Einsum '{equation}'): not lowered to TFLite ops: only two "
                              f"operands with explicit labels ('ab,bc->ac'), one per dimension of operands of "
                              f"ranks {[len(x) for x in s]}, are lowered (rewrite it with tf.linalg.matmul, "
                              f"tf.transpose and tf.reshape)")
    return tuple(size[label] for label in out)


def shape_broadcast(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*s))
    except ValueError:
        raise ConversionError(
            f"node '{node.name}' ({node.op}): shapes {[list(x) for x in s]} do not broadcast"
        ) from None


def shape_bias_add(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    _nhwc_only(node)
    if len(s[1]) != 1 or s[1][0] != s[0][-1]:
        raise ConversionError(f"node '{node.name}' (BiasAdd): bias {list(s[1])} does not match {list(s[0])}")
    return s[0]


def shape_same(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    return s[0]


def shape_batch_norm(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    if _attr(node, "is_training", False):  # normalizes by the statistics of each batch
        if _attr(node, "data_format", "NHWC") != "NCHW":  # a BatchNormalization frozen with training=True
            raise ConversionError(
                f"node '{node.name}' ({node.op}) is in training mode (it normalizes by the statistics of each "
                f"batch); freeze the model for inference (call it with training=False before freezing)")
        # NCHW: Keras' LayerNormalization (legalize/tf_rewrites.fused_batch_norm checks the rest)
        channels = s[0][1] if len(s[0]) == 4 else s[0][-1]
        if any(len(p) != 1 or p[0] != channels for p in s[1:3]):
            raise ConversionError(f"node '{node.name}' ({node.op}): scale/offset must have {channels} values")
        return s[0]
    _nhwc_only(node)
    channels = s[0][-1]
    if any(len(p) != 1 or p[0] != channels for p in s[1:5]):
        raise ConversionError(
            f"node '{node.name}' ({node.op}): scale/offset/mean/variance must have {channels} values"
        )
    return s[0]


def _const_input(node: Any, c: list[Any], i: int, what: str) -> np.ndarray:
    if i >= len(c) or c[i] is None:
        raise ConversionError(
            f"node '{node.name}' ({node.op}): the {what} must be a constant; freeze the graph so it is one"
        )
    return np.asarray(c[i])


def _axes(node: Any, axes: np.ndarray, rank: int) -> list[int]:
    out = []
    for a in np.atleast_1d(axes).astype(np.int64).tolist():
        if not -rank <= a < rank:
            raise ConversionError(f"node '{node.name}' ({node.op}): axis {a} out of range for rank {rank}")
        out.append(a % rank)
    return out


def shape_mean(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    axes = _axes(node, _const_input(node, c, 1, "reduction axes"), len(s[0]))
    if _attr(node, "keep_dims", False):
        return tuple(1 if i in axes else d for i, d in enumerate(s[0]))
    return tuple(d for i, d in enumerate(s[0]) if i not in axes)


def shape_slice(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    begin = [int(v) for v in _const_input(node, c, 1, "begin").reshape(-1)]
    size = [int(v) for v in _const_input(node, c, 2, "size").reshape(-1)]
    x = s[0]
    if len(begin) != len(x) or len(size) != len(x):
        raise ConversionError(f"node '{node.name}' (Slice): begin {begin} / size {size} do not fit {list(x)}")
    out = tuple(d - b if n == -1 else n for d, b, n in zip(x, begin, size))
    if any(b < 0 or n < 0 or b + n > d for b, n, d in zip(begin, out, x)):
        raise ConversionError(f"node '{node.name}' (Slice): begin {begin} / size {size} do not fit {list(x)}")
    return out


def shape_strided_slice(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    what = f"node '{node.name}' (StridedSlice)"
    args = [_const_input(node, c, i, name) for i, name in ((1, "begin"), (2, "end"), (3, "strides"))]
    return strided_shape(s[0], strided_index(len(s[0]), *args, node.attrs, what), what)


def shape_keras_lstm(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    """KerasLSTM(x [B, T, F], h0 [B, U], c0 [B, U], kernel [F, 4U], recurrent_kernel [U, 4U],
    bias [4U]) (``graphdef._keras_lstm``): the output sequence [B, T, U]."""
    x, k, rk = s[0], s[3], s[4]
    what = f"Keras LSTM '{node.name.rsplit('/', 1)[0]}'"
    if len(x) != 3 or len(k) != 2 or len(rk) != 2 or k[0] != x[2] or rk[1] != k[1] or 4 * rk[0] != k[1]:
        raise ConversionError(f"{what}: input {list(x)}, kernel {list(k)} and recurrent kernel {list(rk)} do not "
                              "fit an LSTM")
    if _attr(node, "time_major", False):
        raise ConversionError(f"{what}: time_major=True is not supported; build the layer batch-major "
                              "(time_major=False, the Keras default)")
    return (x[0], x[1], rk[0])


def shape_conv2d_transpose(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    """Conv2DBackpropInput(input_sizes, filter [H, W, out, in], x): the output is ``input_sizes``."""
    _nhwc_only(node)
    size = tuple(int(v) for v in _const_input(node, c, 0, "output shape (input_sizes)").reshape(-1))
    w, x = s[1], s[2]
    what = f"node '{node.name}' (Conv2DBackpropInput)"
    if len(size) != 4 or len(x) != 4 or len(w) != 4 or w[3] != x[3] or size[3] != w[2] or size[0] != x[0]:
        raise ConversionError(f"{what}: output shape {list(size)}, filter {list(w)} and input {list(x)} do not fit")
    if any(int(d) != 1 for d in (_attr(node, "dilations", [1, 1, 1, 1]) or [1, 1, 1, 1])):
        raise ConversionError(f"{what}: dilated transposed convolutions have no TFLite op; use dilation 1")
    strides = _attr(node, "strides", [1, 1, 1, 1])
    pad = _attr(node, "padding", "VALID")
    if pad not in ("SAME", "VALID"):
        raise ConversionError(f"{what}: padding {pad} is not supported (SAME or VALID)")
    for axis, k in ((1, w[0]), (2, w[1])):
        if window_out(size[axis], k, strides[axis], 1, pad) != x[axis]:
            raise ConversionError(f"{what}: output shape {list(size)} does not give input {list(x)} back "
                                  f"with filter {list(w)}, strides {list(strides)} and padding {pad}")
    return size


def shape_resize(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    size = [int(v) for v in _const_input(node, c, 1, "size").reshape(-1)]
    if len(s[0]) != 4 or len(size) != 2 or min(size) < 1:
        raise ConversionError(f"node '{node.name}' ({node.op}): size {size} does not fit {list(s[0])}")
    return (s[0][0], size[0], size[1], s[0][3])


def shape_expand_dims(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    axis = int(_const_input(node, c, 1, "axis").reshape(-1)[0])
    rank = len(s[0]) + 1
    if not -rank <= axis < rank:
        raise ConversionError(f"node '{node.name}' (ExpandDims): axis {axis} out of range for rank {rank}")
    out = list(s[0])
    out.insert(axis % rank, 1)
    return tuple(out)


def shape_reshape(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    # Python ints and products (``elements``): numpy's scalars and np.prod were 1 ms of EfficientViT_M0's 97 Reshapes
    target = [int(v) for v in _const_input(node, c, 1, "target shape").reshape(-1).tolist()]
    total = elements(s[0])
    known = elements([d for d in target if d != -1])
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ConversionError(f"node '{node.name}' (Reshape): invalid target shape {target}")
    if -1 in target:
        if known == 0 or total % known:
            raise ConversionError(f"node '{node.name}' (Reshape): cannot reshape {list(s[0])} to {target}")
        target[target.index(-1)] = total // known
    if elements(target) != total:
        raise ConversionError(f"node '{node.name}' (Reshape): cannot reshape {list(s[0])} to {target}")
    return tuple(target)


def shape_squeeze(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    dims = _attr(node, "squeeze_dims", []) or []
    axes = _axes(node, np.array(dims, dtype=np.int64), len(s[0])) if dims else [
        i for i, d in enumerate(s[0]) if d == 1
    ]
    for a in axes:
        if s[0][a] != 1:
            raise ConversionError(f"node '{node.name}' (Squeeze): dimension {a} of {list(s[0])} is not 1")
    return tuple(d for i, d in enumerate(s[0]) if i not in axes)


def shape_concat(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    n = _attr(node, "N", len(s) - 1)
    parts = s[:n]
    rank = len(parts[0])
    axis = _axes(node, _const_input(node, c, n, "axis"), rank)[0]
    for p in parts:
        if len(p) != rank or any(p[i] != parts[0][i] for i in range(rank) if i != axis):
            raise ConversionError(
                f"node '{node.name}' (ConcatV2): shapes {[list(x) for x in parts]} cannot be joined on axis {axis}"
            )
    out = list(parts[0])
    out[axis] = sum(p[axis] for p in parts)
    return tuple(out)


def shape_pack(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    rank = len(s[0]) + 1
    axis = int(_attr(node, "axis", 0))
    if not -rank <= axis < rank or any(p != s[0] for p in s):
        raise ConversionError(f"node '{node.name}' (Pack): shapes {[list(x) for x in s]} cannot be stacked "
                              f"on axis {axis}")
    out = list(s[0])
    out.insert(axis % rank, len(s))
    return tuple(out)


def shape_space_to_depth(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    b = int(_attr(node, "block_size", 0))
    n, h, w, ch = s[0] if len(s[0]) == 4 else (0, 0, 0, 0)
    if _attr(node, "data_format", "NHWC") != "NHWC" or b < 2 or not n:
        raise ConversionError(f"node '{node.name}' ({node.op}): only NHWC with block_size ≥ 2 is supported")
    if node.op == "SpaceToDepth":
        if h % b or w % b:
            raise ConversionError(f"node '{node.name}' (SpaceToDepth): {h}×{w} is not a multiple of {b}")
        return (n, h // b, w // b, ch * b * b)
    if ch % (b * b):
        raise ConversionError(f"node '{node.name}' (DepthToSpace): {ch} channels are not a multiple of {b * b}")
    return (n, h * b, w * b, ch // (b * b))


def shape_gather(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    indices = _const_input(node, c, 1, "indices")
    axis = _axes(node, _const_input(node, c, 2, "axis"), len(s[0]))[0]
    if int(_attr(node, "batch_dims", 0)) != 0:
        raise ConversionError(f"node '{node.name}' (GatherV2): batch_dims other than 0 is not supported")
    if indices.size and (indices.min() < 0 or indices.max() >= s[0][axis]):
        raise ConversionError(f"node '{node.name}' (GatherV2): indices outside 0..{s[0][axis] - 1}")
    return tuple(s[0][:axis]) + tuple(int(d) for d in indices.shape) + tuple(s[0][axis + 1:])


def shape_arg_max(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    axis = _axes(node, _const_input(node, c, 1, "axis"), len(s[0]))[0]
    if _attr(node, "output_type", "int64") not in ("int32", "int64"):
        raise ConversionError(f"node '{node.name}' (ArgMax): output_type must be int32 or int64")
    return tuple(d for i, d in enumerate(s[0]) if i != axis)


def shape_pad(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    pads = _const_input(node, c, 1, "paddings").astype(np.int64)
    if pads.shape != (len(s[0]), 2) or (pads < 0).any():
        raise ConversionError(f"node '{node.name}' (Pad): paddings {pads.tolist()} do not fit {list(s[0])}")
    return tuple(int(d + p[0] + p[1]) for d, p in zip(s[0], pads))


def _block_args(node: Any, s: list[Shape], c: list[Any], what: str) -> tuple[list[int], np.ndarray]:
    block = [int(v) for v in _const_input(node, c, 1, "block shape").reshape(-1)]
    pads = _const_input(node, c, 2, what).astype(np.int64).reshape(-1, 2)
    if len(block) not in (1, 2) or len(s[0]) != len(block) + 2 or pads.shape != (len(block), 2) \
            or min(block) < 1 or (pads < 0).any():
        raise ConversionError(f"node '{node.name}' ({node.op}): only 1-D and 2-D spatial blocks are supported")
    return block, pads


def shape_space_to_batch(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    block, pads = _block_args(node, s, c, "paddings")
    padded = [d + int(p.sum()) for d, p in zip(s[0][1:-1], pads)]
    if any(d % b for d, b in zip(padded, block)):
        raise ConversionError(f"node '{node.name}' (SpaceToBatchND): padded size is not a multiple of the block")
    return (s[0][0] * int(np.prod(block)), *(d // b for d, b in zip(padded, block)), s[0][-1])


def shape_batch_to_space(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    block, crops = _block_args(node, s, c, "crops")
    n = int(np.prod(block))
    if s[0][0] % n:
        raise ConversionError(f"node '{node.name}' (BatchToSpaceND): batch is not a multiple of the block")
    return (s[0][0] // n, *(d * b - int(p.sum()) for d, b, p in zip(s[0][1:-1], block, crops)), s[0][-1])


def shape_transpose(node: Any, s: list[Shape], c: list[Any]) -> Shape:
    perm = _const_input(node, c, 1, "permutation").astype(np.int64).tolist()
    return tuple(s[0][p] for p in perm)


class Parts:
    """A multi-output op (Split, SplitV, Unpack) as one slice per output: the TFLite op the
    slices are regrouped into, the data operand, the axis and each part's [start, stop)."""

    # Parts and TfOp are plain classes: as frozen dataclasses their generated methods cost 0.6 ms of every start-up
    __slots__ = ("axis", "bounds", "data", "tfl")
    tfl: str
    data: int
    axis: int
    bounds: list[tuple[int, int]]

    def __init__(self, tfl: str, data: int, axis: int, bounds: list[tuple[int, int]]) -> None:
        self.tfl, self.data, self.axis, self.bounds = tfl, data, axis, bounds

    @property
    def operands(self) -> tuple[str, ...]:
        """The TFLite op's operands: "x", "axis", "sizes"."""
        return {"SPLIT": ("axis", "x"), "SPLIT_V": ("x", "sizes", "axis")}.get(self.tfl, ("x",))

    @property
    def options(self) -> dict[str, int]:
        n = len(self.bounds)
        return {"num": n, "axis": self.axis} if self.tfl == "UNPACK" else {"num_splits": n}


def split_parts(node: Any, s: list[Shape], c: list[Any]) -> Parts:
    what = f"node '{node.name}' ({node.op})"
    if node.op == "Unpack":
        rank = len(s[0])
        axis = int(_attr(node, "axis", 0))
        if not -rank <= axis < rank:
            raise ConversionError(f"{what}: axis {axis} out of range for {list(s[0])}")
        axis %= rank
        return Parts("UNPACK", 0, axis, [(i, i + 1) for i in range(s[0][axis])])
    data, dim_slot = (1, 0) if node.op == "Split" else (0, 2)
    shape = s[data]
    axis = _axes(node, _const_input(node, c, dim_slot, "split axis"), len(shape))[0]
    n = int(_attr(node, "num_split", 1))
    if node.op == "Split":
        if n < 1 or shape[axis] % n:
            raise ConversionError(f"{what}: dimension {axis} of {list(shape)} does not split into {n} parts")
        sizes = [shape[axis] // n] * n
    else:
        sizes = [int(v) for v in _const_input(node, c, 1, "size_splits").reshape(-1)]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
        if len(sizes) != n or min(sizes) < 0 or sum(sizes) != shape[axis]:
            raise ConversionError(f"{what}: sizes {sizes} do not split dimension {axis} of {list(shape)}")
    stops = np.cumsum(sizes).tolist()
    return Parts("SPLIT" if node.op == "Split" else "SPLIT_V", data, axis,
                 [(int(b - n_), int(b)) for b, n_ in zip(stops, sizes)])


MULTI_OUTPUT = {"Split", "SplitV", "Unpack"}


class TfOp:
    """A TensorFlow op we read: the TFLite op it becomes and its shape function. The ``legalize``
    stage rewrites it into that op (``qconvert.legalize.tf_rewrites.REWRITES``); FakeQuant* have
    their own pass there, and the importer turns Split/SplitV/Unpack into slices."""

    __slots__ = ("dtype", "shape", "tfl")
    tfl: str | None
    shape: Callable[[Any, list[Shape], list[Any]], Shape] | None
    dtype: Callable[[Any], str] | None  # the output's dtype when it is not float32

    def __init__(self, tfl: str | None, shape: Callable[[Any, list[Shape], list[Any]], Shape] | None,
                 dtype: Callable[[Any], str] | None = None) -> None:
        self.tfl, self.shape, self.dtype = tfl, shape, dtype

# ``None`` as the TFLite op marks structural ops that disappear (Identity) or that
# the importer turns into tensors (Const, Placeholder).
TF_OPS: dict[str, TfOp] = {
    "Placeholder": TfOp(None, None),
    "PlaceholderWithDefault": TfOp(None, shape_same),
    "Const": TfOp(None, None),
    "Identity": TfOp(None, shape_same),
    "IdentityN": TfOp(None, shape_same),
    "StopGradient": TfOp(None, shape_same),
    "Snapshot": TfOp(None, shape_same),
    "NoOp": TfOp(None, None),
    "Conv2D": TfOp("CONV_2D", shape_conv2d),
    "DepthwiseConv2dNative": TfOp("DEPTHWISE_CONV_2D", shape_depthwise),
    "MatMul": TfOp("FULLY_CONNECTED", shape_matmul),
    # FULLY_CONNECTED where the right operand is a 2-D constant (legalize/tf_rewrites.batch_matmul)
    "BatchMatMul": TfOp("BATCH_MATMUL", shape_batch_matmul),
    "BatchMatMulV2": TfOp("BATCH_MATMUL", shape_batch_matmul),
    # TRANSPOSE/RESHAPE around BATCH_MATMUL or FULLY_CONNECTED (legalize/einsum.py)
    "Einsum": TfOp("BATCH_MATMUL", shape_einsum),
    "Conv2DBackpropInput": TfOp("TRANSPOSE_CONV", shape_conv2d_transpose),
    "BiasAdd": TfOp("ADD", shape_bias_add),
    "Add": TfOp("ADD", shape_broadcast),
    "AddV2": TfOp("ADD", shape_broadcast),
    "Sub": TfOp("SUB", shape_broadcast),
    "Mul": TfOp("MUL", shape_broadcast),
    "RealDiv": TfOp("MUL", shape_broadcast),
    "DivNoNan": TfOp("MUL", shape_broadcast),
    "Neg": TfOp("MUL", shape_same),
    "SquaredDifference": TfOp("SQUARED_DIFFERENCE", shape_broadcast),
    "Rsqrt": TfOp("RSQRT", shape_same),
    "Abs": TfOp("ABS", shape_same),
    "Exp": TfOp("EXP", shape_same),
    "Log": TfOp("LOG", shape_same),
    "Sqrt": TfOp("SQRT", shape_same),
    # x**2 as MUL x·x, x**0.5 as SQRT (legalize/tf_rewrites.py pow_); GELU's x³ inside its pattern
    "Pow": TfOp("MUL", shape_broadcast),
    "Square": TfOp("MUL", shape_same),
    # parts of GELU's patterns (qconvert/legalize/gelu.py), refused anywhere else
    "Erfc": TfOp("GELU", shape_same),
    "ResizeNearestNeighbor": TfOp("RESIZE_NEAREST_NEIGHBOR", shape_resize),
    "ResizeBilinear": TfOp("RESIZE_BILINEAR", shape_resize),
    "FusedBatchNorm": TfOp("MUL", shape_batch_norm),
    "FusedBatchNormV2": TfOp("MUL", shape_batch_norm),
    "FusedBatchNormV3": TfOp("MUL", shape_batch_norm),
    "Relu": TfOp("RELU", shape_same),
    "Relu6": TfOp("RELU6", shape_same),
    "LeakyRelu": TfOp("LEAKY_RELU", shape_same),
    "Max": TfOp("REDUCE_MAX", shape_mean),
    "Sum": TfOp("SUM", shape_mean),
    "Slice": TfOp("SLICE", shape_slice),
    "StridedSlice": TfOp("STRIDED_SLICE", shape_strided_slice),
    "KerasLSTM": TfOp("UNIDIRECTIONAL_SEQUENCE_LSTM", shape_keras_lstm),  # a Keras LSTM's function (graphdef.py)
    "ExpandDims": TfOp("RESHAPE", shape_expand_dims),
    "Maximum": TfOp("MAXIMUM", shape_broadcast),
    "Minimum": TfOp("MINIMUM", shape_broadcast),
    "AvgPool": TfOp("AVERAGE_POOL_2D", shape_pool),
    "MaxPool": TfOp("MAX_POOL_2D", shape_pool),
    "Mean": TfOp("MEAN", shape_mean),
    "Reshape": TfOp("RESHAPE", shape_reshape),
    "Transpose": TfOp("TRANSPOSE", shape_transpose),
    "ReverseV2": TfOp("REVERSE_V2", shape_same),
    "SpaceToBatchND": TfOp("SPACE_TO_BATCH_ND", shape_space_to_batch),
    "BatchToSpaceND": TfOp("BATCH_TO_SPACE_ND", shape_batch_to_space),
    "Squeeze": TfOp("SQUEEZE", shape_squeeze),
    "ConcatV2": TfOp("CONCATENATION", shape_concat),
    "Pack": TfOp("PACK", shape_pack),
    "SpaceToDepth": TfOp("SPACE_TO_DEPTH", shape_space_to_depth),
    "DepthToSpace": TfOp("DEPTH_TO_SPACE", shape_space_to_depth),
    "GatherV2": TfOp("GATHER", shape_gather),
    "ArgMax": TfOp("ARG_MAX", shape_arg_max, dtype=lambda node: node.attrs.get("output_type") or "int64"),
    "Split": TfOp("SPLIT", None),  # MULTI_OUTPUT: the importer makes one slice per output
    "SplitV": TfOp("SPLIT_V", None),
    "Unpack": TfOp("UNPACK", None),
    "Pad": TfOp("PAD", shape_pad),
    "PadV2": TfOp("PADV2", shape_pad),
    "Softmax": TfOp("SOFTMAX", shape_same),
    "Sigmoid": TfOp("LOGISTIC", shape_same),
    "Tanh": TfOp("TANH", shape_same),
    "FakeQuantWithMinMaxArgs": TfOp("FAKE_QUANT", shape_same),
    "FakeQuantWithMinMaxVars": TfOp("FAKE_QUANT", shape_same),
    "FakeQuantWithMinMaxVarsPerChannel": TfOp("FAKE_QUANT", shape_same),
}

STRUCTURAL = {"Identity", "StopGradient", "Snapshot", "PlaceholderWithDefault", "IdentityN"}


def supported_ops() -> str:
    return ", ".join(sorted(k for k in TF_OPS if k not in ("NoOp",)))


# Ops computing constants only (shape arithmetic), folded while importing: see const_eval.py.


# ---------------------------------------------------------------------------
# Shapes of ops qconvert does not convert, so that a graph cut after them (--inputs Mfcc)
# knows its input's shape: the audio front end of speech models. Each gives every output's
# shape (TensorFlow's shape functions in core/ops/audio_ops.cc).


def _decode_wav_shapes(node: Any, s: list[Shape]) -> list[Shape]:
    samples, channels = int(_attr(node, "desired_samples", -1)), int(_attr(node, "desired_channels", -1))
    if samples < 0 or channels < 0:
        raise ConversionError(f"node '{node.name}' (DecodeWav): desired_samples/channels are not set")
    return [(samples, channels), ()]


def _audio_spectrogram_shapes(node: Any, s: list[Shape]) -> list[Shape]:
    samples, channels = s[0]
    window, stride = int(_attr(node, "window_size")), int(_attr(node, "stride"))
    frames = 1 + (samples - window) // stride if samples >= window else 0
    fft = 1 << max(0, (window - 1).bit_length())  # the next power of two >= window_size
    return [(channels, frames, fft // 2 + 1)]


def _mfcc_shapes(node: Any, s: list[Shape]) -> list[Shape]:
    channels, frames, _ = s[0]
    return [(channels, frames, int(_attr(node, "dct_coefficient_count", 13)))]


SHAPE_ONLY: dict[str, Callable[[Any, list[Shape]], list[Shape]]] = {
    "DecodeWav": _decode_wav_shapes,
    "AudioSpectrogram": _audio_spectrogram_shapes,
    "Mfcc": _mfcc_shapes,
}


def _reshape_to_constant(node: Any, consts: list[Any]) -> list[Shape] | None:
    target = consts[1] if len(consts) > 1 else None
    if target is None:
        return None
    dims = [int(v) for v in np.asarray(target).reshape(-1)]
    return [tuple(dims)] if all(d >= 0 for d in dims) else None


# Output shapes that follow from constant operands alone, when an input's shape is unknown
# (a Reshape to a fully given shape after a decoder qconvert does not read).
SHAPE_FROM_CONSTANTS: dict[str, Callable[[Any, list[Any]], list[Shape] | None]] = {
    "Reshape": _reshape_to_constant,
}
