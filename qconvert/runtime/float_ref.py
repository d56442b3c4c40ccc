"""Float32 kernels of LiteRT's reference resolver (``OpResolverType.BUILTIN_REF``), for the float
islands of a mixed file (``convert --keep-float``: DEQUANTIZE → float ops → QUANTIZE).

Bit-exact means LiteRT REF's order of float32 operations, not numpy's: its FULLY_CONNECTED,
CONV_2D, DEPTHWISE_CONV_2D and BATCH_MATMUL start each output at 0 and add the products one at a
time along the reduction (FULLY_CONNECTED: the input depth; CONV_2D: filter rows, columns, input
channels; DEPTHWISE_CONV_2D: filter rows, columns), then add the bias last; MEAN and SUM add the
reduced elements in the input's memory order (MEAN then divides by the count in float32); SOFTMAX
sums ``exp((x - max) · beta)`` left to right. numpy's BLAS products and pairwise sums group the
terms otherwise, which moves outputs by an ulp, and an ulp at a QUANTIZE's rounding boundary is an
int8 LSB. Here every kernel is vectorised over the output elements and sequential over the
reduction axis (``np.multiply`` then ``np.add`` in float32, one term per step: the C++ compiles
``total += a * b`` to a multiply and an add, no fused multiply-add, measured on ai-edge-litert 2.3).

Transcendentals are the C library's float functions, as ``std::tanh(float)`` and ``std::exp(float)``
call them: TANH is ``tanhf``; LOGISTIC is ``1 / (1 + expf(-x))`` with LiteRT's cutoffs (1 above
16.619047, ``expf(x)`` below -9); SOFTMAX's exponentials are ``expf``. Fused activations clamp with
``min(max(x, lo), hi)``, ±FLT_MAX when there is none (so ±inf become ±FLT_MAX, as in LiteRT).

Ops that only move values (RESHAPE, CONCATENATION, TRANSPOSE, PAD, SLICE, GATHER, ...) and
element-wise ADD, SUB, MUL, MAXIMUM, MINIMUM, RELU, RELU6 are one float32 operation per element
whatever the order: the op table's float kernels (``qconvert.ops.float_kernels``) compute them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from qconvert.ops import float_kernels as fk
from qconvert.ops import windows as windows_

F32 = np.float32
_FLT_MAX = F32(np.finfo(np.float32).max)
_CLAMPS = {"NONE": (-_FLT_MAX, _FLT_MAX), "RELU": (F32(0), _FLT_MAX), "RELU6": (F32(0), F32(6)),
           "RELU_N1_TO_1": (F32(-1), F32(1))}


def _activation(options: dict[str, Any], y: np.ndarray) -> np.ndarray:
    """ActivationFunctionWithMinMax: ``min(max(y, lo), hi)`` (NaN stays NaN)."""
    act = options.get("fused_activation_function", "NONE") or "NONE"
    if act not in _CLAMPS:
        raise ValueError(f"fused activation {act} in a float op")
    lo, hi = _CLAMPS[act]
    return np.minimum(np.maximum(y.astype(F32, copy=False), lo), hi)


def _dot_sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` [..., K] by ``b`` [K, O] → [..., O]: each output ``((0 + a0·b0) + a1·b1) + ...`` in float32."""
    a = a.astype(F32, copy=False)
    b = b.astype(F32, copy=False)
    acc = np.zeros((*a.shape[:-1], b.shape[1]), F32)
    term = np.empty_like(acc)
    for k in range(a.shape[-1]):
        np.multiply(a[..., k:k + 1], b[k], out=term)
        acc += term
    return acc


def _add_bias(acc: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    return acc if bias is None else (acc + bias.astype(F32, copy=False)).astype(F32, copy=False)


def fully_connected(options: dict[str, Any], x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                    output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::FullyConnected (float): ``total`` over the input depth, then ``total + bias``."""
    y = _add_bias(_dot_sequential(x.reshape(-1, w.shape[1]), w.T), b)
    return _activation(options, y).reshape(output_shape)


def conv_2d(options: dict[str, Any], x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
            output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::Conv (float): taps in filter-row, filter-column, input-channel order (a tap
    outside the image adds nothing: 0·w here, the same float32 sum), then the bias."""
    o, kh, kw, i = w.shape
    win = windows_.windows(options, x.astype(F32, copy=False), kh, kw)  # [N, OH, OW, kh, kw, C]
    n, oh, ow = win.shape[:3]
    groups = x.shape[3] // i
    if groups == 1:
        acc = _dot_sequential(np.ascontiguousarray(win).reshape(n, oh, ow, kh * kw * i), w.reshape(o, -1).T)
    else:
        og = o // groups
        win = np.ascontiguousarray(win).reshape(n, oh, ow, kh, kw, groups, i)
        acc = np.concatenate([_dot_sequential(win[..., g, :].reshape(n, oh, ow, -1),
                                              w[g * og:(g + 1) * og].reshape(og, -1).T) for g in range(groups)],
                             axis=-1)
    return _activation(options, _add_bias(acc, b))


def depthwise_conv_2d(options: dict[str, Any], x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                      output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::DepthwiseConv (float): per output channel ``c·M + m``, the taps in filter-row,
    filter-column order from 0, then the bias (the optimized kernel starts at the bias instead)."""
    _, kh, kw, cm = w.shape
    c = x.shape[3]
    mult = cm // c
    win = windows_.windows(options, x.astype(F32, copy=False), kh, kw)  # [N, OH, OW, kh, kw, C]
    if mult > 1:
        win = np.repeat(win, mult, axis=-1)
    acc = np.zeros((*win.shape[:3], cm), F32)
    wf = w.astype(F32, copy=False)
    for fy in range(kh):
        for fx in range(kw):
            acc += win[:, :, :, fy, fx, :] * wf[0, fy, fx]
    return _activation(options, _add_bias(acc, b))


def batch_matmul(options: dict[str, Any], x: np.ndarray, y: np.ndarray,
                 output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::BatchMatMul (float): each output summed from 0 over the shared depth, in order."""
    if options.get("adj_x"):
        x = np.swapaxes(x, -1, -2)
    if options.get("adj_y"):
        y = np.swapaxes(y, -1, -2)
    x, y = x.astype(F32, copy=False), y.astype(F32, copy=False)
    shape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    acc = np.zeros((*shape, x.shape[-2], y.shape[-1]), F32)
    for k in range(x.shape[-1]):
        acc += x[..., :, k:k + 1] * y[..., k:k + 1, :]
    return acc


def _reduce_sequential(x: np.ndarray, axes_value: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """The reduced elements added in the input's memory order (ReduceSumImpl): (sums, count, axes)."""
    axes = tuple(sorted({int(a) % x.ndim for a in np.asarray(axes_value).reshape(-1)})) if x.ndim else ()
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x.astype(F32, copy=False), kept + list(axes))
    flat = moved.reshape(*[x.shape[d] for d in kept], -1)
    acc = np.zeros(flat.shape[:-1], F32)
    for r in range(flat.shape[-1]):
        acc += flat[..., r]
    return acc, flat.shape[-1], axes


def sum_(options: dict[str, Any], x: np.ndarray, axes: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    return _reduce_sequential(x, axes)[0].reshape(output_shape)


def mean(options: dict[str, Any], x: np.ndarray, axes: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """The sum in memory order, divided by the count in float32."""
    acc, count, _ = _reduce_sequential(x, axes)
    return (acc / F32(count)).astype(F32).reshape(output_shape)


@functools.cache
def _libm(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The C library's float32 ``name`` (``tanhf``, ``expf``) over an array, one call per distinct value."""
    from qconvert.quant.multipliers import _libm_float

    fn = _libm_float(name)

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, F32)
        values, inverse = np.unique(x, return_inverse=True)
        return np.array([fn(v) for v in values], F32)[inverse].reshape(x.shape)

    return apply


def tanh(options: dict[str, Any], x: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::Tanh: ``std::tanh(float)`` per element."""
    return _libm("tanhf")(x)


_LOGISTIC_UPPER, _LOGISTIC_LOWER = F32(16.619047164916992188), F32(-9.0)


def logistic(options: dict[str, Any], x: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::Logistic (float): 1 above the upper cutoff, ``expf(x)`` below -9, else
    ``1 / (1 + expf(-x))`` in float32."""
    x = np.asarray(x, F32)
    middle = F32(1) / (F32(1) + _libm("expf")(-x))
    y = np.where(x < _LOGISTIC_LOWER, _libm("expf")(x), middle)
    return np.where(x > _LOGISTIC_UPPER, F32(1), y).astype(F32)


def softmax(options: dict[str, Any], x: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    """reference_ops::Softmax (float) over the last axis: ``e = expf((x - max) · beta)``, summed from 0
    left to right, then ``e / sum``."""
    x = np.asarray(x, F32)
    beta = F32(options.get("beta", 1.0))
    e = _libm("expf")((x - x.max(axis=-1, keepdims=True)) * beta)
    total = np.zeros(x.shape[:-1], F32)
    for c in range(x.shape[-1]):
        total += e[..., c]
    return (e / total[..., None]).astype(F32)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def kernel(options: dict[str, Any], a: np.ndarray, b: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
        return _activation(options, fn(a.astype(F32, copy=False), b.astype(F32, copy=False)))
    return kernel


def _table(name: str) -> Callable[..., np.ndarray]:
    """The op table's float kernel, for an op whose float32 result does not depend on an order."""
    kernel = getattr(fk, name)

    def run(options: dict[str, Any], *inputs: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
        return np.asarray(kernel(SimpleNamespace(attrs=options, name="", op=""), *inputs))
    return run


def _reshape(options: dict[str, Any], x: np.ndarray, *rest: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    return x.reshape(output_shape)


def _concatenation(options: dict[str, Any], *xs: np.ndarray, output_shape: tuple[int, ...] = ()) -> np.ndarray:
    return np.concatenate(xs, axis=int(options["axis"]) % len(output_shape))


# builtin → kernel(options, *inputs, output_shape=...): the ops `run` executes on float32 in a float island
FLOAT_KERNELS: dict[str, Callable[..., np.ndarray]] = {
    "FULLY_CONNECTED": fully_connected,
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "BATCH_MATMUL": batch_matmul,
    "MEAN": mean,
    "SUM": sum_,
    "SOFTMAX": softmax,
    "TANH": tanh,
    "LOGISTIC": logistic,
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "MAXIMUM": _table("maximum"),
    "MINIMUM": _table("minimum"),
    "RELU": _table("relu"),
    "RELU6": _table("relu6"),
    "RELU_N1_TO_1": _table("relu_n1_to_1"),
    "RESHAPE": _reshape,
    "SQUEEZE": _reshape,
    "EXPAND_DIMS": _reshape,
    "CONCATENATION": _concatenation,
    "TRANSPOSE": _table("transpose"),
    "PAD": _table("pad"),
    "PADV2": _table("padv2"),
    "SLICE": _table("slice_"),
    "STRIDED_SLICE": _table("strided_slice"),
    "GATHER": _table("gather"),
    "MAX_POOL_2D": _table("max_pool_2d"),
    "REDUCE_MAX": _table("reduce_max"),
}
