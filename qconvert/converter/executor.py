"""A float32 numpy executor for the TFLite-level IR, used to calibrate float graphs.

It runs the graph as it stands after the prepare-stage fusions (bias adds, BatchNorm
and activations fused into CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / ADD ...),
which is the float model TensorFlow's calibrator runs: the tensors it records are the
tensors of that model. QUANTIZE → DEQUANTIZE pairs (ranges from FakeQuants) are run
as quantize-then-dequantize in float, as a TFLite float model with those ops runs.

Axis 0 is the batch: the graph's shapes say 1, and a batch of B samples runs at once
(RESHAPE and SQUEEZE targets get B in place of their leading 1).

Layouts are TFLite's: NHWC activations, CONV_2D weights [O, H, W, I], DEPTHWISE_CONV_2D
weights [1, H, W, C*M], FULLY_CONNECTED weights [O, I]. Convolutions are im2col views
(``as_strided``) and one BLAS product.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

import numpy as np

from qconvert.converter.ir import ConversionError, Graph, Node

Kernel = Callable[..., np.ndarray]


def _act(node: Node, y: np.ndarray) -> np.ndarray:
    act = node.attrs.get("fused_activation_function", "NONE")
    if act == "NONE":
        return y
    if act == "RELU":
        return np.maximum(y, np.float32(0))
    if act == "RELU6":
        return np.clip(y, np.float32(0), np.float32(6))
    if act == "RELU_N1_TO_1":
        return np.clip(y, np.float32(-1), np.float32(1))
    if act == "TANH":
        return np.tanh(y)
    raise ConversionError(f"node '{node.name}' ({node.op}): fused activation {act} cannot be calibrated")


def window_padding(size: int, k: int, stride: int, dilation: int, padding: str) -> tuple[int, int, int]:
    """(output size, pad before, pad after) as TensorFlow computes SAME / VALID."""
    from qconvert.converter.ops import _window_out  # the shape inference's output size

    out = _window_out(size, k, stride, dilation, padding)
    if padding == "VALID":
        return out, 0, 0
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return out, total // 2, total - total // 2


def windows(attrs: Mapping[str, Any], x: np.ndarray, kh: int, kw: int, fill: float = 0.0,
            max_elements: int | None = None) -> np.ndarray:
    """[N, OH, OW, kh, kw, C] view of the (padded) input's sliding windows, for an op whose
    ``attrs`` (TFLite option names: stride_h, dilation_h_factor, padding, ...) say how.
    Also the integer kernels' (qconvert run); ``max_elements`` refuses a padded input larger
    than that (ValueError) instead of allocating it."""
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    dh, dw = int(attrs.get("dilation_h_factor", 1)), int(attrs.get("dilation_w_factor", 1))
    padding = attrs.get("padding", "VALID")
    n, h, w, c = x.shape
    oh, top, bottom = window_padding(h, kh, sh, dh, padding)
    ow, left, right = window_padding(w, kw, sw, dw, padding)
    if max_elements is not None and n * (h + top + bottom) * (w + left + right) * c > max_elements:
        raise ValueError(f"window {kh}x{kw}, stride {sh}x{sw}, dilation {dh}x{dw} on input {list(x.shape)} "
                         "needs too large a padded input")
    if top or bottom or left or right:
        x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, oh, ow, kh, kw, c), (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)


def _conv(node: Node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    _, kh, kw, _ = w.shape
    y = np.tensordot(windows(node.attrs, x, kh, kw), w, axes=([3, 4, 5], [1, 2, 3]))
    if b is not None:
        y = y + b
    return _act(node, y.astype(np.float32, copy=False))


def _depthwise(node: Node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    _, kh, kw, cm = w.shape
    c = x.shape[-1]
    win = windows(node.attrs, x, kh, kw)
    if cm != c:
        win = np.repeat(win, cm // c, axis=-1)  # output channel c*M+m reads input channel c
    y = np.einsum("nhwijc,ijc->nhwc", win, w[0], optimize=True)
    if b is not None:
        y = y + b
    return _act(node, y.astype(np.float32, copy=False))


def _fully_connected(node: Node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x.reshape(-1, w.shape[1]) @ w.T
    if b is not None:
        y = y + b
    return _act(node, y.astype(np.float32, copy=False))


def _pool(node: Node, x: np.ndarray, kind: str) -> np.ndarray:
    kh, kw = int(node.attrs["filter_height"]), int(node.attrs["filter_width"])
    if kind == "max":
        y = windows(node.attrs, x, kh, kw, fill=-np.inf).max(axis=(3, 4))
    else:  # TFLite averages over the window's in-bounds elements only
        total = windows(node.attrs, x, kh, kw).sum(axis=(3, 4))
        ones = np.ones((1, *x.shape[1:3], 1), np.float32)
        count = windows(node.attrs, ones, kh, kw).sum(axis=(3, 4))
        y = total / count
    return _act(node, y.astype(np.float32, copy=False))


def _like_output(graph: Graph, node: Node, batch: int) -> list[int]:
    """The node's output shape with the batch in place of the leading 1."""
    shape = list(graph.tensors[node.outputs[0]].shape or ())
    if batch != 1:
        if not shape or shape[0] != 1:
            raise ConversionError(
                f"node '{node.name}' ({node.op}) reshapes the batch dimension; calibrate with --calibration-batch 1")
        shape[0] = batch
    return shape


def _softmax(node: Node, x: np.ndarray) -> np.ndarray:
    z = (x - x.max(axis=-1, keepdims=True)) * np.float32(node.attrs.get("beta", 1.0))
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _quant_view(graph: Graph, name: str, x: np.ndarray):  # type: ignore[no-untyped-def]
    q = graph.tensors[name].quant
    if q is None:
        raise ConversionError(f"tensor '{name}' has no quantization parameters")
    scale = np.asarray(q.scale, np.float64)
    zp = np.asarray(q.zero_point, np.float64)
    if q.axis is not None and x.ndim:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return q, scale, zp


def _quantize(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    q, scale, zp = _quant_view(graph, node.outputs[0], x)
    from qconvert.converter.quant_math import round_half_away_array

    return np.clip(round_half_away_array(x.astype(np.float64) / scale) + zp, q.qmin, q.qmax)


def _dequantize(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    _, scale, zp = _quant_view(graph, node.inputs[0], x)
    return ((x - zp) * scale).astype(np.float32)


def run(graph: Graph, feeds: Mapping[str, np.ndarray],
        record: Callable[[str, np.ndarray], None] | None = None,
        fake_quant: bool = True) -> dict[str, np.ndarray]:
    """Run the graph on ``feeds`` (graph input name → [B, ...] float32); call ``record(name,
    value)`` for every tensor computed; return the graph outputs. With ``fake_quant=False``
    QUANTIZE and DEQUANTIZE pass values through: the float model without its FakeQuants."""
    values: dict[str, np.ndarray] = {}
    batch = None
    for name in graph.inputs:
        if name not in feeds:
            raise ConversionError(f"no calibration data for input '{name}'")
        values[name] = np.ascontiguousarray(feeds[name], dtype=np.float32)
        batch = values[name].shape[0] if batch is None else batch
        if record is not None:
            record(name, values[name])
    readers = {t: len(graph.consumers(t)) for n in graph.nodes for t in n.outputs}
    outputs = set(graph.outputs)
    for node in graph.nodes:
        args = []
        for i in node.inputs:
            if not i:
                args.append(None)
            elif i in values:
                args.append(values[i])
            else:
                data = graph.const(i)
                if data is None:
                    raise ConversionError(f"node '{node.name}' ({node.op}) reads '{i}', which has no value")
                args.append(data)
        if not fake_quant and node.op in ("QUANTIZE", "DEQUANTIZE"):
            y = np.asarray(args[0], dtype=np.float32)
        else:
            y = evaluate(graph, node, args, batch or 1)
        out = node.outputs[0]
        values[out] = y
        if record is not None and y.dtype == np.float32:
            record(out, y)
        for i in set(node.inputs):  # free what no later node reads
            if i in readers:
                readers[i] -= 1
                if readers[i] == 0 and i not in outputs:
                    values.pop(i, None)
    return {name: values[name] for name in graph.outputs}


def evaluate(graph: Graph, node: Node, args: list, batch: int) -> np.ndarray:  # type: ignore[type-arg]
    """One node on its argument values (``None`` for an absent optional input)."""
    op = node.op
    kernel = _KERNELS.get(op)
    if kernel is not None:
        return kernel(node, *args)
    if op == "QUANTIZE":
        return _quantize(graph, node, args[0])
    if op == "DEQUANTIZE":
        return _dequantize(graph, node, args[0])
    if op in ("RESHAPE", "SQUEEZE"):
        return args[0].reshape(_like_output(graph, node, batch))
    raise ConversionError(f"node '{node.name}': {op} cannot be run for calibration; supported: "
                          f"{', '.join(sorted([*_KERNELS, 'QUANTIZE', 'DEQUANTIZE', 'RESHAPE', 'SQUEEZE']))}")


def _space_to_batch(node: Node, x: np.ndarray, block: np.ndarray, pads: np.ndarray) -> np.ndarray:
    bh, bw = (int(v) for v in np.asarray(block).reshape(-1))
    (pt, pb), (pl, pr) = np.asarray(pads).astype(np.int64).reshape(2, 2).tolist()
    x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, h, w, c = x.shape
    y = x.reshape(n, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return y.reshape(bh * bw * n, h // bh, w // bw, c)  # output batch index (i * bw + j) * n + b


def _batch_to_space(node: Node, x: np.ndarray, block: np.ndarray, crops: np.ndarray) -> np.ndarray:
    bh, bw = (int(v) for v in np.asarray(block).reshape(-1))
    (ct, cb), (cl, cr) = np.asarray(crops).astype(np.int64).reshape(2, 2).tolist()
    nb, h, w, c = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, h * bh, w * bw, c)
    return y[:, ct:h * bh - cb, cl:w * bw - cr, :]


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    return lambda node, a, b: _act(node, fn(a, b).astype(np.float32, copy=False))


def _mean(node: Node, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    ax = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    return x.mean(axis=ax, keepdims=bool(node.attrs.get("keep_dims", False)), dtype=np.float32)


_KERNELS: dict[str, Kernel] = {
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected,
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "MAXIMUM": lambda node, a, b: np.maximum(a, b),
    "MINIMUM": lambda node, a, b: np.minimum(a, b),
    "MAX_POOL_2D": lambda node, x: _pool(node, x, "max"),
    "AVERAGE_POOL_2D": lambda node, x: _pool(node, x, "avg"),
    "MEAN": _mean,
    "RELU": lambda node, x: np.maximum(x, np.float32(0)),
    "RELU6": lambda node, x: np.clip(x, np.float32(0), np.float32(6)),
    "RELU_N1_TO_1": lambda node, x: np.clip(x, np.float32(-1), np.float32(1)),
    "LOGISTIC": lambda node, x: (1 / (1 + np.exp(-x))).astype(np.float32),
    "TANH": lambda node, x: np.tanh(x),
    "SOFTMAX": _softmax,
    "CONCATENATION": lambda node, *xs: _act(node, np.concatenate(xs, axis=int(node.attrs["axis"]))),
    "PAD": lambda node, x, p: np.pad(x, np.asarray(p).astype(np.int64).tolist()),
    "TRANSPOSE": lambda node, x, perm: np.transpose(x, np.asarray(perm).astype(np.int64).tolist()),
    "SPACE_TO_BATCH_ND": _space_to_batch,
    "BATCH_TO_SPACE_ND": _batch_to_space,
}


def batches(samples: Mapping[str, np.ndarray], batch: int) -> Iterator[dict[str, np.ndarray]]:
    """Split ``{input: [N, ...]}`` into feeds of at most ``batch`` samples."""
    n = len(next(iter(samples.values())))
    for start in range(0, n, batch):
        yield {k: v[start:start + batch] for k, v in samples.items()}
