"""Float32 numpy kernels, one per TFLite op: what the op computes on float values.

Constant folding (stage 3) evaluates ops whose inputs are all constants with them, and
the calibration executor runs a whole float model with them. A kernel takes the node
(for ``attrs``, ``name`` and ``op``; any object with those) and the values of its inputs
(``None`` for an absent optional input), and returns the value of its first output.

Layouts are TFLite's: NHWC activations, CONV_2D weights [O, H, W, I], DEPTHWISE_CONV_2D
weights [1, H, W, C*M], FULLY_CONNECTED weights [O, I], TRANSPOSE_CONV weights [O, H, W, I].
Convolutions are im2col views (``as_strided``) and one BLAS product. Axis 0 is the batch: a batch of B samples runs at
once. Ops whose result is their input in another shape (RESHAPE, SQUEEZE) have no kernel:
their row says ``reshapes`` and the caller gives the value the output tensor's shape.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from qconvert import quant
from qconvert.errors import ConversionError
from qconvert.ops import windows as windows_
from qconvert.ops.windows import bilinear_taps, nearest_indices, strided_index, windows

Kernel = Callable[..., np.ndarray]

# fused_activation_function values and the float function each one applies
ACTIVATION_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {  # (y, out=None)
    "RELU": lambda y, out=None: np.maximum(y, np.float32(0), out=out),
    "RELU6": lambda y, out=None: np.clip(y, np.float32(0), np.float32(6), out=out),
    "RELU_N1_TO_1": lambda y, out=None: np.clip(y, np.float32(-1), np.float32(1), out=out),
    "TANH": lambda y, out=None: np.tanh(y, out=out),
}


def activation(node: Any, y: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``y`` through the node's fused activation (none: ``y`` itself, dtype unchanged);
    ``in_place``: ``y`` is the kernel's own float32 array and may be overwritten."""
    act = node.attrs.get("fused_activation_function", "NONE")
    if act == "NONE":
        return y
    fn = ACTIVATION_FUNCTIONS.get(act)
    if fn is None:
        raise ConversionError(f"node '{node.name}' ({node.op}): fused activation {act} cannot be evaluated")
    y = y.astype(np.float32, copy=False)
    return fn(y, out=y if in_place and y.flags.writeable else None)


def conv_2d(node: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    o, kh, kw, i = w.shape
    win = windows(node.attrs, x, kh, kw)
    groups = x.shape[-1] // i  # a grouped conv: output channel c reads input group c // (o / groups)
    if groups == 1:
        y = np.tensordot(win, w, axes=([3, 4, 5], [1, 2, 3]))
    else:
        win = win.reshape(*win.shape[:5], groups, i)
        y = np.einsum("nhwijgc,goijc->nhwgo", win, w.reshape(groups, o // groups, kh, kw, i), optimize=True)
        y = y.reshape(*y.shape[:3], o)
    if b is not None:
        if y.dtype == np.float32:
            y += b  # in place: the same rounding as y + b, one pass less
        else:
            y = y + b
    return activation(node, y.astype(np.float32, copy=False), in_place=True)


def depthwise_conv_2d(node: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """TFLite's optimized float kernel, the one TensorFlow's calibrator runs: each output starts
    at its bias and adds the taps' float32 products one at a time, filter rows outer, columns
    inner (DepthwiseConvInitAccBuffer, then the row accumulators). Measured equal on every
    output against LiteRT's builtin kernel; its reference kernel adds the bias last instead,
    which changes 26-63 % of the outputs in their last bits.

    Each tap is one multiply and one add over whole output rows: a row of ``ow`` pixels by
    ``cm`` channels is contiguous in the input when the column stride is 1 (for stride s the
    input's columns are first split into s phases), so the weights are tiled along the row
    and numpy's inner loop runs ``ow·cm`` long instead of ``cm`` (1.3-2.4× faster on
    MobileNetV2's layers; the same float32 operations in the same order)."""
    _, kh, kw, cm = w.shape
    c = x.shape[-1]
    if cm != c:
        x = np.repeat(x, cm // c, axis=-1)  # output channel c*M+m reads input channel c
    xp, (oh, ow), (sh, sw), (dh, dw) = windows_.padded(node.attrs, np.asarray(x, np.float32), kh, kw)
    n = xp.shape[0]
    phases = [xp] if sw == 1 else [np.ascontiguousarray(xp[:, :, p::sw, :]) for p in range(sw)]
    acc = np.empty((n, oh, ow * cm), np.float32)
    acc[...] = 0.0 if b is None else np.broadcast_to(np.asarray(b, np.float32), (ow, cm)).reshape(-1)
    rows = np.broadcast_to(np.asarray(w[0], np.float32)[:, :, None, :], (kh, kw, ow, cm)).reshape(kh, kw, ow * cm)
    product = np.empty_like(acc)
    for i in range(kh):
        for j in range(kw):
            q, p = divmod(j * dw, sw)  # input column o·sw + j·dw is column o + q of phase p
            taps = phases[p][:, i * dh:i * dh + (oh - 1) * sh + 1:sh, q:q + ow, :].reshape(n, oh, ow * cm)
            np.multiply(taps, rows[i, j], out=product)
            acc += product
    return activation(node, acc.reshape(n, oh, ow, cm), in_place=True)


def transpose_conv(node: Any, size: np.ndarray, w: np.ndarray, x: np.ndarray,
                   b: np.ndarray | None = None) -> np.ndarray:
    """TRANSPOSE_CONV(output shape, weights [O, H, W, I], x, bias)."""
    taps = np.tensordot(x, w, axes=([3], [3])).transpose(0, 1, 2, 4, 5, 3)  # [N, H, W, kh, kw, O]
    out_h, out_w = (int(v) for v in np.asarray(size).reshape(-1)[1:3])
    y = windows_.transpose_conv_scatter(node.attrs, taps.astype(np.float32, copy=False), out_h, out_w)
    if b is not None:
        y = y + b
    return activation(node, y.astype(np.float32, copy=False))


def fully_connected(node: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x.reshape(-1, w.shape[1]) @ w.T
    if b is not None:
        y = y + b
    if node.attrs.get("keep_num_dims"):
        y = y.reshape(*x.shape[:-1], w.shape[0])
    return activation(node, y.astype(np.float32, copy=False))


def batch_matmul(node: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """BATCH_MATMUL(x, y): ``x @ y`` over broadcast batch dimensions, ``adj_x``/``adj_y`` swapping an
    operand's last two dimensions (float32 sums)."""
    if node.attrs.get("adj_x"):
        x = np.swapaxes(x, -1, -2)
    if node.attrs.get("adj_y"):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x.astype(np.float32, copy=False), y.astype(np.float32, copy=False))


def _pool(node: Any, x: np.ndarray, kind: str) -> np.ndarray:
    kh, kw = int(node.attrs["filter_height"]), int(node.attrs["filter_width"])
    if kind == "max":
        y = windows(node.attrs, x, kh, kw, fill=-np.inf).max(axis=(3, 4))
    else:  # TFLite averages over the window's in-bounds elements only
        total = windows(node.attrs, x, kh, kw).sum(axis=(3, 4))
        ones = np.ones((1, *x.shape[1:3], 1), np.float32)
        count = windows(node.attrs, ones, kh, kw).sum(axis=(3, 4))
        y = total / count
    return activation(node, y.astype(np.float32, copy=False))


def max_pool_2d(node: Any, x: np.ndarray) -> np.ndarray:
    return _pool(node, x, "max")


def average_pool_2d(node: Any, x: np.ndarray) -> np.ndarray:
    return _pool(node, x, "avg")


def binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    """An element-wise op with a fused activation (ADD, SUB, MUL); integer constants
    (shape arithmetic) stay integers."""
    return lambda node, a, b: activation(node, fn(a, b))


def softmax(node: Any, x: np.ndarray) -> np.ndarray:
    z = (x - x.max(axis=-1, keepdims=True)) * np.float32(node.attrs.get("beta", 1.0))
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def mean(node: Any, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    ax = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    return x.mean(axis=ax, keepdims=bool(node.attrs.get("keep_dims", False)), dtype=np.float32)


def concatenation(node: Any, *xs: np.ndarray) -> np.ndarray:
    return activation(node, np.concatenate(xs, axis=int(node.attrs["axis"])))


def pack(node: Any, *xs: np.ndarray) -> np.ndarray:
    return np.stack(xs, axis=int(node.attrs["axis"]))


def arg_max(node: Any, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """The first index of the largest value (TFLite's ArgMinMax); int32 or int64."""
    out = np.int32 if node.attrs.get("output_type") == "INT32" else np.int64
    return np.argmax(x, axis=int(np.asarray(axis).reshape(-1)[0]) % x.ndim).astype(out)


def pad(node: Any, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    return np.pad(x, np.asarray(p).astype(np.int64).tolist())


def padv2(node: Any, x: np.ndarray, p: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """PAD with a fill value (its third operand, a scalar; -inf for PyTorch's padded max pool)."""
    c = np.float32(np.asarray(fill).reshape(-1)[0])
    return np.pad(x, np.asarray(p).astype(np.int64).tolist(), constant_values=c)


def transpose(node: Any, x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return np.transpose(x, np.asarray(perm).astype(np.int64).tolist())


def reverse_v2(node: Any, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    return np.flip(x, tuple(int(a) % x.ndim for a in np.asarray(axis).reshape(-1)))


def space_to_depth(node: Any, x: np.ndarray) -> np.ndarray:
    return windows_.space_to_depth(x, int(node.attrs["block_size"]))


def depth_to_space(node: Any, x: np.ndarray) -> np.ndarray:
    return windows_.depth_to_space(x, int(node.attrs["block_size"]))


def gather(node: Any, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return np.take(x, np.asarray(indices).astype(np.int64), axis=int(node.attrs.get("axis", 0)))


def space_to_batch_nd(node: Any, x: np.ndarray, block: np.ndarray, pads: np.ndarray) -> np.ndarray:
    bh, bw = (int(v) for v in np.asarray(block).reshape(-1))
    (pt, pb), (pl, pr) = np.asarray(pads).astype(np.int64).reshape(2, 2).tolist()
    x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, h, w, c = x.shape
    y = x.reshape(n, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return y.reshape(bh * bw * n, h // bh, w // bw, c)  # output batch index (i * bw + j) * n + b


def batch_to_space_nd(node: Any, x: np.ndarray, block: np.ndarray, crops: np.ndarray) -> np.ndarray:
    bh, bw = (int(v) for v in np.asarray(block).reshape(-1))
    (ct, cb), (cl, cr) = np.asarray(crops).astype(np.int64).reshape(2, 2).tolist()
    nb, h, w, c = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, h * bh, w * bw, c)
    return y[:, ct:h * bh - cb, cl:w * bw - cr, :]


def fake_quant(node: Any, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    """TensorFlow's float32 FakeQuant kernel, as training ran it on the weights."""
    return quant.fake_quant_float32(
        x, node.attrs["min"], node.attrs["max"],
        num_bits=node.attrs.get("num_bits", 8), narrow_range=node.attrs.get("narrow_range", False),
        per_channel=node.attrs.get("per_channel", False), variant=node.attrs.get("variant", "vars"))


def leaky_relu(node: Any, x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, x * np.float32(node.attrs.get("alpha", 0.2))).astype(np.float32)


def reduce_sum(node: Any, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    ax = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    return x.sum(axis=ax, keepdims=bool(node.attrs.get("keep_dims", False)), dtype=np.float32)


def slice_(node: Any, x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
    b = [int(v) for v in np.asarray(begin).reshape(-1)]
    s = [int(v) for v in np.asarray(size).reshape(-1)]
    return x[tuple(slice(bi, x.shape[d] if si == -1 else bi + si) for d, (bi, si) in enumerate(zip(b, s)))]


def strided_slice(node: Any, x: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray) -> np.ndarray:
    return x[strided_index(x.ndim, begin, end, strides, node.attrs, f"STRIDED_SLICE '{node.name}'")]


def prelu(node: Any, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """TFLite's float PRELU: ``x`` where ``x ≥ 0``, else ``x · alpha`` (alpha broadcast)."""
    return np.where(x >= 0, x, (x * np.asarray(alpha, np.float32)).astype(np.float32))


def reduce_max(node: Any, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    ax = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    return x.max(axis=ax, keepdims=bool(node.attrs.get("keep_dims", False)))


def hard_swish(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float HARD_SWISH: ``x · min(6, max(0, x + 3)) / 6`` in float32."""
    f = np.float32
    return (x * np.minimum(f(6), np.maximum(f(0), x + f(3))) / f(6)).astype(np.float32)


def squared_difference(node: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a - b).astype(np.float32)
    return d * d


def abs_(node: Any, x: np.ndarray) -> np.ndarray:
    return np.abs(x)


def rsqrt(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float RSQRT: ``1.f / std::sqrt(x)`` in float32."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.float32(1) / np.sqrt(x.astype(np.float32))).astype(np.float32)


def exp(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float EXP: ``std::exp`` in float32 (the double value rounded to float32)."""
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def log(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float LOG: ``std::log`` in float32 (-inf at 0, NaN below)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x.astype(np.float64)).astype(np.float32)


def sqrt(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float SQRT: ``std::sqrt`` in float32 (NaN below 0)."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(x.astype(np.float32)).astype(np.float32)


def _erf64(z: np.ndarray) -> np.ndarray:
    """erf in double precision, vectorised: ``2/sqrt(pi) · exp(-z²) · Σ 2ⁿ z^(2n+1) / (2n+1)!!``
    (every term positive, so no cancellation) for |z| ≤ 4.5, and ±1 beyond, where
    ``erfc(4.5) < 2e-10``."""
    a = np.minimum(np.abs(z), 4.5)
    two_a2 = 2.0 * a * a
    term = a.copy()
    total = a.copy()
    for n in range(1, 120):  # the terms peak near n = a² (≤ 20) and are < 1e-17 of the sum by n = 110
        term = term * two_a2 / (2 * n + 1)
        total += term
        if n % 8 == 0 and not (term > 1e-17 * total).any():  # typical activations: done by n ≈ 40
            break
    r = (2.0 / np.sqrt(np.pi)) * np.exp(-a * a) * total
    return np.where(np.abs(z) >= 4.5, 1.0, r) * np.sign(z)


def gelu(node: Any, x: np.ndarray) -> np.ndarray:
    """TFLite's float GELU: ``0.5·x·erfc(-x/√2)`` or, with ``approximate``,
    ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``, in double rounded to float32 (TFLite's
    Eigen kernel is within a few float32 ULP of it: only the calibrated ranges' last bits)."""
    v = x.astype(np.float64)
    if node.attrs.get("approximate", False):
        y = 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))
    else:
        y = 0.5 * v * (1.0 + _erf64(v * np.sqrt(0.5)))
    return y.astype(np.float32)


def resize_bilinear(node: Any, x: np.ndarray, size: np.ndarray) -> np.ndarray:
    """TFLite's float RESIZE_BILINEAR (reference kernel, float32, left to right)."""
    oh, ow = (int(v) for v in np.asarray(size).reshape(-1))
    ac, hp = bool(node.attrs.get("align_corners", False)), bool(node.attrs.get("half_pixel_centers", False))
    y0, y1, fy = bilinear_taps(x.shape[1], oh, ac, hp)
    x0, x1, fx = bilinear_taps(x.shape[2], ow, ac, hp)
    one = np.float32(1)
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    a, b = x[:, y0][:, :, x0], x[:, y1][:, :, x0]
    c, d = x[:, y0][:, :, x1], x[:, y1][:, :, x1]
    return (a * (one - fy) * (one - fx) + b * fy * (one - fx) + c * (one - fy) * fx + d * fy * fx).astype(np.float32)


def resize_nearest_neighbor(node: Any, x: np.ndarray, size: np.ndarray) -> np.ndarray:
    oh, ow = (int(v) for v in np.asarray(size).reshape(-1))
    ac, hp = bool(node.attrs.get("align_corners", False)), bool(node.attrs.get("half_pixel_centers", False))
    rows = nearest_indices(x.shape[1], oh, ac, hp)
    cols = nearest_indices(x.shape[2], ow, ac, hp)
    return x[:, rows][:, :, cols]


def relu(node: Any, x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0))


def relu6(node: Any, x: np.ndarray) -> np.ndarray:
    return np.clip(x, np.float32(0), np.float32(6))


def relu_n1_to_1(node: Any, x: np.ndarray) -> np.ndarray:
    return np.clip(x, np.float32(-1), np.float32(1))


def logistic(node: Any, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) → inf for x < -88: the result 0 is right
        return (1 / (1 + np.exp(-x))).astype(np.float32)


def tanh(node: Any, x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def maximum(node: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def minimum(node: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(a, b)


def unidirectional_sequence_lstm(node: Any, x: np.ndarray, *operands: np.ndarray | None
                                 ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """UNIDIRECTIONAL_SEQUENCE_LSTM (batch-major, no peephole, projection or layer norm, TANH
    cell activation, ``cell_clip``), as TFLite's float kernel (lstm_eval.cc ``EvalFloat``) runs each
    step: a gate is bias + W_x·x + W_h·h in float32, then sigmoid (tanh for the cell gate);
    c = f·c + i·g, clipped to ±cell_clip; h = o·tanh(c). With no state operands (None) each of the B
    samples starts at zero, all at once. Given the states ([1, U]: what the previous sample left),
    the samples run one after the other, each from the state the one before left, as TFLite's
    VARIABLE state tensors carry over from one invocation to the next (TensorFlow's calibrator does
    not reset them between samples). Returns the output sequence [B, T, U] and the (output state,
    cell state) each sample ended with ([B, U] each), which the calibration records under the state
    tensors' names."""
    ops = (None, *operands)
    if any(ops[s] is not None for s in (9, 10, 11, 16, 17, 20, 21, 22, 23) if s < len(ops)):
        raise ConversionError(f"node '{node.name}': an LSTM with peephole, projection or layer-norm weights "
                              "cannot be calibrated")
    if node.attrs.get("time_major", False):
        raise ConversionError(f"node '{node.name}': a time-major LSTM cannot be calibrated")
    w_in = [np.asarray(ops[s], np.float32) for s in (1, 2, 3, 4)]
    w_rec = [np.asarray(ops[s], np.float32) for s in (5, 6, 7, 8)]
    bias = [np.asarray(ops[s], np.float32) for s in (12, 13, 14, 15)]
    x = np.asarray(x, np.float32)
    batch, steps = x.shape[0], x.shape[1]
    units = w_rec[0].shape[0]
    clip = np.float32(node.attrs.get("cell_clip", 0.0))

    def run(x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = np.empty((x.shape[0], steps, units), np.float32)
        with np.errstate(over="ignore"):
            for t in range(steps):
                pre = [bias[g] + x[:, t] @ w_in[g].T + h @ w_rec[g].T for g in range(4)]
                i = 1 / (1 + np.exp(-pre[0]))
                f = 1 / (1 + np.exp(-pre[1]))
                g = np.tanh(pre[2])
                o = 1 / (1 + np.exp(-pre[3]))
                c = (f * c + i * g).astype(np.float32)
                if clip > 0:
                    c = np.clip(c, -clip, clip)
                h = (o * np.tanh(c)).astype(np.float32)
                out[:, t] = h
        return out, h, c

    h0, c0 = (ops[s] if s < len(ops) else None for s in (18, 19))
    if h0 is None or c0 is None:
        zeros = np.zeros((batch, units), np.float32)
        out, h, c = run(x, zeros, zeros)
        return out, (h, c)
    h, c = np.asarray(h0, np.float32).reshape(1, units), np.asarray(c0, np.float32).reshape(1, units)
    outs, hs, cs = [], [], []
    for b in range(batch):
        out, h, c = run(x[b:b + 1], h, c)
        outs.append(out)
        hs.append(h)
        cs.append(c)
    return np.concatenate(outs), (np.concatenate(hs), np.concatenate(cs))
