"""Integer kernels: TFLite's int8 reference kernels (``OpResolverType.BUILTIN_REF``) in numpy.

16x8 files (int16 activations, int64 biases): CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV
rescale their int64 accumulator with the multiplier cut to 16 bits (``mbqm_int64``); LOGISTIC,
TANH and SOFTMAX are the int16 kernels of ``transcendental16``; ops that move data or clamp are
the same on both widths.

FULLY_CONNECTED: LiteRT 2.3's reference kernel rounds ``acc * (in*w/out)`` in double
precision (int8 and int16 inputs alike); qconvert stores that factor's 64 bits (the record's wide flag) and reproduces
the double product and its rounding with integers. ``integer_fully_connected`` selects
TFLite's classic integer kernel instead (the 31-bit multiplier, double rounding), which
older TFLite and microcontroller runtimes use; the two differ by 1 LSB on ~0.25% of outputs.

Each kernel gets an :class:`OpCall` (the operator, its int arrays, its requant record and
the integer parameters of its tensors) and returns the int8 output. Only integers reach a
kernel: int8/int32 buffers, zero points, and the multipliers, shifts and clamps stored in
the file's ``qconvert_requant`` record. Float scales are read only at the model's float
boundary (QUANTIZE from float32, DEQUANTIZE to float32), in ``interpreter.py``.

Layouts are TFLite's: NHWC, CONV_2D weights [O, H, W, I], DEPTHWISE_CONV_2D [1, H, W, C*M],
FULLY_CONNECTED [O, I]. Accumulators are int64 (the C++ uses int32 and never overflows
on int8 data of realistic size); every rescale wraps and rounds as int32 arithmetic does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.errors import KernelError
from qconvert.ops import windows as windows_
from qconvert.ops.windows import (
    bilinear_taps_int,
    nearest_indices,
    strided_index,
    windows,
)
from qconvert.quant.rounding import round_half_away_array
from qconvert.runtime import detection, lstm, reduce, svdf, transcendental, transcendental16
from qconvert.runtime.int_math import (I64, count_leading_zeros32, current_rounding, mbqm, mbqm_int64,
                                       scale_by_binary64, srdhm)


@dataclass
class OpCall:
    index: int
    builtin: str
    name: str  # the first output tensor's name, for messages
    options: dict[str, Any]
    inputs: list[np.ndarray | None]
    input_zps: list[int]
    output_zp: int
    output_shape: tuple[int, ...]
    record: Any | None  # RequantRecord
    integer_fully_connected: bool = False  # FULLY_CONNECTED by the 31-bit multiplier, not the wide factor
    output_dtype: str = "int8"  # "int16" in a 16x8 file
    # per-tensor scales as stored (float32), for the uint8 kernels that rescale in float (CONCATENATION)
    input_scales: list[float] = field(default_factory=list)
    output_scale: float = 0.0
    states: dict[int, np.ndarray] = field(default_factory=dict)  # filled by a kernel: new VARIABLE inputs, by slot

    @property
    def int16(self) -> bool:
        return self.output_dtype == "int16"

    @property
    def bounds(self) -> tuple[int, int]:
        """The output type's range: int8, uint8 (older TFLite files) or int16."""
        info = np.iinfo(self.output_dtype if self.output_dtype in ("uint8", "int16") else "int8")
        return int(info.min), int(info.max)

    def pairs(self, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        if self.record is None or not self.record.pairs:
            raise KernelError(f"operator {self.index} ({self.builtin} '{self.name}') has no multiplier in the "
                              "file's qconvert_requant metadata; `qconvert run` needs a file qconvert wrote")
        p = np.asarray(self.record.pairs, dtype=I64)
        if count is not None and len(p) != count:
            raise KernelError(f"operator {self.index} ({self.builtin} '{self.name}'): its qconvert_requant "
                              f"record has {len(p)} multiplier(s), {count} expected")
        return p[:, 0], p[:, 1]

    def clamp(self) -> tuple[int, int]:
        if self.record is None:
            return self.bounds
        return int(self.record.act_min), int(self.record.act_max)


def _finish(call: OpCall, acc: np.ndarray) -> np.ndarray:
    lo, hi = call.clamp()
    return np.clip(acc, lo, hi).astype(call.output_dtype)


def _rescale_accumulator(call: OpCall, acc: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A weighted op's accumulator to the output: int8 inputs through the 31-bit multiplier
    (int32 accumulator), int16 inputs (16x8) through the 16-bit cut of it on int64."""
    return mbqm_int64(acc, m, s) if call.int16 else mbqm(acc, m, s)


# ---------------------------------------------------------------------------
# windows


def _windows(x: np.ndarray, kh: int, kw: int, options: dict[str, Any], fill: int) -> np.ndarray:
    """The float executor's sliding windows (same SAME/VALID arithmetic), on integers."""

    if min(kh, kw, *(int(options.get(k, 1)) for k in ("stride_h", "stride_w", "dilation_h_factor",
                                                        "dilation_w_factor"))) < 1:
        raise KernelError(f"window {kh}x{kw} with options {options} is out of range")
    return windows(options, x, kh, kw, fill=fill, max_elements=1 << 28)


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer matrix product through float64 BLAS (|terms| < 2**16, sums < 2**53)."""
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(I64)


# ---------------------------------------------------------------------------
# weighted ops


def conv_2d(call: OpCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    bias = call.inputs[2] if len(call.inputs) > 2 else None
    o, kh, kw, i = w.shape
    cols = _windows(x.astype(I64) - call.input_zps[0], kh, kw, call.options, 0)
    n, oh, ow = cols.shape[:3]
    groups = x.shape[3] // i  # a grouped conv: output channel c reads input group c // (o / groups)
    wq = w.astype(I64) - call.input_zps[1]
    if groups == 1:
        acc = _product(cols.reshape(n * oh * ow, kh * kw * i), wq.reshape(o, -1).T)
    else:
        og = o // groups
        cols = cols.reshape(n * oh * ow, kh, kw, groups, i)
        acc = np.concatenate([_product(cols[..., g, :].reshape(n * oh * ow, -1),
                                       wq[g * og:(g + 1) * og].reshape(og, -1).T) for g in range(groups)], axis=1)
    if bias is not None:
        acc = acc + bias.astype(I64)
    m, s = call.pairs(o)
    return _finish(call, _rescale_accumulator(call, acc, m, s) + call.output_zp).reshape(n, oh, ow, o)


def depthwise_conv_2d(call: OpCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    bias = call.inputs[2] if len(call.inputs) > 2 else None
    _, kh, kw, oc = w.shape
    ic = x.shape[3]
    mult = oc // ic
    cols = _windows(x.astype(I64) - call.input_zps[0], kh, kw, call.options, 0)
    if mult > 1:
        cols = np.repeat(cols, mult, axis=5)  # output channel c reads input channel c // mult
    acc = np.einsum("nhwijc,ijc->nhwc", cols.astype(np.float64), (w[0].astype(I64) - call.input_zps[1]).astype(
        np.float64))
    acc = np.rint(acc).astype(I64)
    if bias is not None:
        acc = acc + bias.astype(I64)
    m, s = call.pairs(oc)
    return _finish(call, _rescale_accumulator(call, acc, m, s) + call.output_zp)


def transpose_conv(call: OpCall) -> np.ndarray:
    """TRANSPOSE_CONV(output shape, weights, x, bias): int32 sums of (x − zp)·(w − zp) scattered
    into the output, then the bias, one multiplier per output channel, the clamp."""
    w, x = call.inputs[1], call.inputs[2]
    bias = call.inputs[3] if len(call.inputs) > 3 and call.inputs[3] is not None else None
    o, kh, kw, i = w.shape
    n, h, wd, _ = x.shape
    rows = (x.astype(I64) - call.input_zps[2]).reshape(-1, i)
    taps = _product(rows, (w.astype(I64) - call.input_zps[1]).transpose(3, 1, 2, 0).reshape(i, -1))
    out_h, out_w = (int(v) for v in np.asarray(call.inputs[0]).reshape(-1)[1:3])
    acc = windows_.transpose_conv_scatter(call.options, taps.reshape(n, h, wd, kh, kw, o), out_h, out_w)
    if bias is not None:
        acc = acc + bias.astype(I64)
    m, s = call.pairs(o)
    return _finish(call, _rescale_accumulator(call, acc, m, s) + call.output_zp)


def fully_connected(call: OpCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    bias = call.inputs[2] if len(call.inputs) > 2 and call.inputs[2] is not None else None
    o, depth = w.shape
    rows = x.reshape(-1, depth).astype(I64) - call.input_zps[0]
    acc = _product(rows, w.T.astype(I64) - call.input_zps[1])
    if bias is not None:
        acc = acc + bias.astype(I64)
    m, s = call.pairs()
    if len(m) not in (1, o):
        raise KernelError(f"operator {call.index} (FULLY_CONNECTED '{call.name}'): {len(m)} multipliers for "
                          f"{o} output channels")
    wide = getattr(call.record, "wide", None)
    if wide is not None and not call.integer_fully_connected and current_rounding() == "double":
        # LiteRT 2.3's reference kernel: round(acc * double factor), reproduced in integers
        y = _finish(call, scale_by_binary64(acc, np.asarray(wide, np.uint64)) + call.output_zp)
    else:  # TFLite's integer kernel: MultiplyByQuantizedMultiplier (int16: the 16-bit cut on int64)
        y = _finish(call, _rescale_accumulator(call, acc, m, s) + call.output_zp)
    return y.reshape(call.output_shape) if int(np.prod(call.output_shape)) == y.size else y


def batch_matmul(call: OpCall) -> np.ndarray:
    """BATCH_MATMUL: sums of (x − zp)·(y − zp) over broadcast batch dimensions (int32 for int8, int64
    for int16), rescaled by the one pair, plus the output zero point, clamped."""
    x = call.inputs[0].astype(I64) - call.input_zps[0]
    y = call.inputs[1].astype(I64) - call.input_zps[1]
    if call.options.get("adj_x"):
        x = np.swapaxes(x, -1, -2)
    if call.options.get("adj_y"):
        y = np.swapaxes(y, -1, -2)
    acc = np.rint(np.matmul(x.astype(np.float64), y.astype(np.float64))).astype(I64)
    m, s = call.pairs(1)
    return _finish(call, _rescale_accumulator(call, acc, m[0], s[0]) + call.output_zp)


# ---------------------------------------------------------------------------
# element-wise


def _rescaled_operands(call: OpCall) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ADD, SUB, SQUARED_DIFFERENCE: each ``(x - zp) << left_shift`` through its input pair; and
    the output pair (multipliers, shifts)."""
    a, b = call.inputs[0].astype(I64), call.inputs[1].astype(I64)
    m, s = call.pairs(3)
    left = int(call.record.left_shift)
    return (mbqm((a - call.input_zps[0]) << left, m[0], s[0]), mbqm((b - call.input_zps[1]) << left, m[1], s[1]),
            m[2], s[2])


def _add_sub(call: OpCall, sign: int) -> np.ndarray:
    sa, sb, m, s = _rescaled_operands(call)
    return _finish(call, mbqm(sa + sign * sb, m, s) + call.output_zp)


def add(call: OpCall) -> np.ndarray:
    return _add_sub(call, 1)


def sub(call: OpCall) -> np.ndarray:
    return _add_sub(call, -1)


def mul(call: OpCall) -> np.ndarray:
    a = call.inputs[0].astype(I64) - call.input_zps[0]
    b = call.inputs[1].astype(I64) - call.input_zps[1]
    m, s = call.pairs(1)
    return _finish(call, mbqm(a * b, m[0], s[0]) + call.output_zp)


def div(call: OpCall) -> np.ndarray:
    """DIV int8 (div.cc, reference/div.h ``DivElementwise``): ``x1 - zp1`` over ``x2 - zp2``
    (both negated where the divisor is negative) as ``x1`` times the divisor's fixed-point reciprocal
    (``GetReciprocal``: 1/(1+x) on its normalised mantissa), ``x1`` shifted up by its headroom, then
    through the output pair with the two shifts taken off, plus ``out_zp``. LiteRT's kernel fails on a
    divisor equal to its zero point (a zero), as ``run`` does."""
    x2 = call.inputs[1]
    if x2.size and bool(np.any(x2 == call.input_zps[1])):
        raise KernelError(f"operator {call.index} (DIV '{call.name}'): a divisor equal to its zero point "
                          f"{call.input_zps[1]} (a zero); TFLite's kernel fails with 'data[i] != zero_point'")
    a, b = np.broadcast_arrays(call.inputs[0].astype(I64) - call.input_zps[0], x2.astype(I64) - call.input_zps[1])
    a, b = np.where(b < 0, -a, a), np.abs(b)
    clz = count_leading_zeros32(b)
    reciprocal = transcendental.one_over_one_plus_x_for_x_in_0_1((b << clz) - (1 << 31))
    headroom = count_leading_zeros32(a ^ (a >> 31)) - 1  # CountLeadingSignBits (31 for 0)
    unscaled = mbqm(a, reciprocal, headroom)  # MultiplyByQuantizedMultiplierGreaterThanOne
    m, s = call.pairs(1)
    return _finish(call, _smaller_than_one_exp(unscaled, m[0], s[0] - (31 - clz) - headroom) + call.output_zp)


def _smaller_than_one_exp(x: np.ndarray, multiplier: int, shift: np.ndarray) -> np.ndarray:
    """``MultiplyByQuantizedMultiplierSmallerThanOneExp`` as LiteRT's default build runs it where the
    right shift exceeds 31 (DIV of a small numerator, a zero above all): gemmlowp's
    ``RoundingDivideByPOT`` then takes its mask as the low 32 bits of ``2^e - 1`` (all ones) and the
    CPU shifts by ``e mod 32``, so 0 becomes 1 (x86-64, measured against LiteRT REF). Other
    roundings (``--rounding``) cap the shift at 31."""
    if current_rounding() != "double":
        return mbqm(x, multiplier, np.maximum(shift, -31))
    e = -np.asarray(shift, I64)
    if not np.any(e > 31):
        return mbqm(x, multiplier, shift)
    v = srdhm(x, multiplier)
    wide = (v >> (e & 31)) + (v > (-1 >> 1) + (v < 0))  # mask -1: the remainder is v itself
    return np.where(e > 31, wide, mbqm(x, multiplier, np.where(e > 31, -31, shift)))


def squared_difference(call: OpCall) -> np.ndarray:
    """SQUARED_DIFFERENCE int8 (squared_difference.cc): each ``(x - zp) << 7`` through its
    input pair, the difference squared (int32), through the output pair, plus ``out_zp``."""
    sa, sb, m, s = _rescaled_operands(call)
    return _finish(call, mbqm((sa - sb) ** 2, m, s) + call.output_zp)


def _no_negative(call: OpCall, op: str, litert_says: str) -> None:
    """RSQRT/SQRT int8: the kernel refuses an input below its zero point (a negative value)."""
    x = call.inputs[0]
    if x.size and int(x.min()) < call.input_zps[0]:
        raise KernelError(f"operator {call.index} ({op} '{call.name}'): input {int(x.min())} below the zero point "
                          f"{call.input_zps[0]} (a negative value); TFLite's kernel fails with '{litert_says}'")


def rsqrt(call: OpCall) -> np.ndarray:
    """RSQRT int8 (elementwise.cc) by its table; the kernel refuses an input below its zero point."""
    _no_negative(call, "RSQRT", "Rsqrt is only defined for positive values")
    return transcendental.lookup(call)


def exp(call: OpCall) -> np.ndarray:
    """EXP int8 by its table; int16 by LiteRT's 513-entry table of ``expf`` built from the scales."""
    if call.int16:
        return transcendental16.exp16(call.inputs[0], call.input_scales[0], call.output_scale)
    return transcendental.lookup(call)


def log(call: OpCall) -> np.ndarray:
    """LOG int8 by its table; int16 by LiteRT's 513-entry table of ``logf`` (an input ``<= 0`` gives the
    lowest output value) built from the scales."""
    if call.int16:
        return transcendental16.log16(call.inputs[0], call.input_scales[0], call.output_scale)
    return transcendental.lookup(call)


def sqrt(call: OpCall) -> np.ndarray:
    """SQRT int8 (elementwise.cc) by its table; the kernel refuses an input below its zero point."""
    _no_negative(call, "SQRT", "Sqrt is only defined for non-negative values")
    return transcendental.lookup(call)


def abs_(call: OpCall) -> np.ndarray:
    """ABS int8 / int16 (elementwise.cc AbsEvalQuantized): ``|x - in_zp|`` through the pair, plus
    ``out_zp``, clamped to the type (with equal scales the kernel skips the pair, which is then the
    identity (2^30, 1))."""
    m, s = call.pairs(1)
    v = np.abs(call.inputs[0].astype(I64) - call.input_zps[0])
    return _finish(call, mbqm(v, m[0], s[0]) + call.output_zp)


def maximum(call: OpCall) -> np.ndarray:
    return np.maximum(call.inputs[0], call.inputs[1]).astype(call.output_dtype)


def minimum(call: OpCall) -> np.ndarray:
    return np.minimum(call.inputs[0], call.inputs[1]).astype(call.output_dtype)


def relu(call: OpCall) -> np.ndarray:
    """ReluX int8 (reference_ops::ReluX): rescale ``x - in_zp`` to the output, clamp."""
    m, s = call.pairs(1)
    return _finish(call, mbqm(call.inputs[0].astype(I64) - call.input_zps[0], m[0], s[0]) + call.output_zp)


def leaky_relu(call: OpCall) -> np.ndarray:
    """reference_ops::QuantizeLeakyRelu: ``x - in_zp`` through the identity pair where it is
    ≥ 0, through the alpha pair where it is negative; plus ``out_zp``, clamped to int8."""
    m, s = call.pairs(2)
    v = call.inputs[0].astype(I64) - call.input_zps[0]
    y = np.where(v >= 0, mbqm(v, m[0], s[0]), mbqm(v, m[1], s[1])) + call.output_zp
    return np.clip(y, *call.bounds).astype(call.output_dtype)


def prelu(call: OpCall) -> np.ndarray:
    """reference_ops::BroadcastPrelu4DSlow: ``x - in_zp`` through the identity pair where it is
    ≥ 0, else ``(x - in_zp)·(alpha - alpha_zp)`` through the alpha pair; plus ``out_zp``."""
    m, s = call.pairs(2)
    v = call.inputs[0].astype(I64) - call.input_zps[0]
    a = np.broadcast_to(call.inputs[1].astype(I64) - call.input_zps[1], v.shape)
    y = np.where(v >= 0, mbqm(v, m[0], s[0]), mbqm(v * a, m[1], s[1])) + call.output_zp
    return np.clip(y, *call.bounds).astype(call.output_dtype)


def reduce_max(call: OpCall) -> np.ndarray:
    """REDUCE_MAX int8: the largest value over the axes (one scale for input and output)."""
    x = call.inputs[0]
    axes = tuple(int(a) % x.ndim for a in np.asarray(call.inputs[1]).reshape(-1))
    return x.max(axis=axes, keepdims=bool(call.options.get("keep_dims", False))).astype(call.output_dtype)


def resize_nearest_neighbor(call: OpCall) -> np.ndarray:
    """reference_ops::ResizeNearestNeighbor: each output pixel copies its nearest source."""
    x = call.inputs[0]
    oh, ow = call.output_shape[1:3]
    ac, hp = bool(call.options.get("align_corners")), bool(call.options.get("half_pixel_centers"))
    rows = nearest_indices(x.shape[1], oh, ac, hp)
    cols = nearest_indices(x.shape[2], ow, ac, hp)
    return x[:, rows][:, :, cols].astype(call.output_dtype)


def resize_bilinear(call: OpCall) -> np.ndarray:
    """reference_ops::ResizeBilinearInteger: weights in 1/1024, the four products summed in
    int64, divided by 2^20 rounding half away from zero (C division after ±2^19)."""
    x = call.inputs[0].astype(I64)
    oh, ow = call.output_shape[1:3]
    ac, hp = bool(call.options.get("align_corners")), bool(call.options.get("half_pixel_centers"))
    y0, y1, fy = bilinear_taps_int(x.shape[1], oh, ac, hp)
    x0, x1, fx = bilinear_taps_int(x.shape[2], ow, ac, hp)
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    total = (x[:, y0][:, :, x0] * (1024 - fy) * (1024 - fx) + x[:, y1][:, :, x0] * fy * (1024 - fx)
             + x[:, y0][:, :, x1] * (1024 - fy) * fx + x[:, y1][:, :, x1] * fy * fx)
    rounded = total + np.where(total > 0, 1 << 19, -(1 << 19))
    return (np.sign(rounded) * (np.abs(rounded) >> 20)).astype(call.output_dtype)


def requantize(call: OpCall) -> np.ndarray:
    """QUANTIZE int8 → int8 (reference_ops::Requantize)."""
    m, s = call.pairs(1)
    return _finish(call, mbqm(call.inputs[0].astype(I64) - call.input_zps[0], m[0], s[0]) + call.output_zp)


# ---------------------------------------------------------------------------
# pooling and reductions


def average_pool_2d(call: OpCall) -> np.ndarray:
    """reference_integer_ops::AveragePool: the sum over the window's in-bounds part divided
    by its size, rounding half away from zero."""
    x = call.inputs[0]
    kh, kw = int(call.options["filter_height"]), int(call.options["filter_width"])
    sums = _windows(x.astype(I64), kh, kw, call.options, 0).sum(axis=(3, 4))
    ones = np.ones((1,) + x.shape[1:3] + (1,), dtype=I64)
    counts = _windows(ones, kh, kw, call.options, 0).sum(axis=(3, 4))
    half = counts // 2
    q = np.where(sums > 0, (sums + half) // counts, -((-(sums - half)) // counts))
    return _finish(call, q)


def max_pool_2d(call: OpCall) -> np.ndarray:
    x = call.inputs[0]
    kh, kw = int(call.options["filter_height"]), int(call.options["filter_width"])
    return _finish(call, _windows(x.astype(I64), kh, kw, call.options, -(2**40)).max(axis=(3, 4)))


def mean(call: OpCall) -> np.ndarray:
    return _finish(call, reduce.mean(call))


def sum_(call: OpCall) -> np.ndarray:
    return _finish(call, reduce.sum_(call))


def slice_(call: OpCall) -> np.ndarray:
    """SLICE: ``begin`` and ``size`` (−1: to the end) per dimension; one scale in and out."""
    x = call.inputs[0]
    begin = [int(b) for b in np.asarray(call.inputs[1]).reshape(-1)]
    size = [int(s) for s in np.asarray(call.inputs[2]).reshape(-1)]
    index = tuple(slice(b, x.shape[d] if s == -1 else b + s) for d, (b, s) in enumerate(zip(begin, size)))
    return x[index].astype(call.output_dtype)


def strided_slice(call: OpCall) -> np.ndarray:
    """STRIDED_SLICE: begin / end / strides with TensorFlow's masks; one scale in and out."""
    x = call.inputs[0]
    return x[strided_index(x.ndim, *call.inputs[1:4], call.options, "STRIDED_SLICE")].astype(call.output_dtype)


# ---------------------------------------------------------------------------
# data movement


def reshape(call: OpCall) -> np.ndarray:
    return call.inputs[0].reshape(call.output_shape)


def shape(call: OpCall) -> np.ndarray:
    """SHAPE: the input's dimensions (int32, or int64 by ``out_type``)."""
    return np.asarray(call.inputs[0].shape, dtype=call.output_dtype)


def concatenation(call: OpCall) -> np.ndarray:
    """Inputs joined along the axis. A uint8 input whose parameters differ from the output's is
    rescaled first, as LiteRT's uint8 kernel does (ConcatenationWithScaling, float32):
    ``round_half_away(x · s + b) + zp_out`` clamped to [0, 255], with ``s = s_in · (1 / s_out)`` and
    ``b = -zp_in · s``."""
    axis = int(call.options.get("axis", 0))
    parts = []
    for k, x in enumerate(call.inputs):
        if x is None:
            continue
        if call.output_dtype == "uint8" and k < len(call.input_scales) and (
                np.float32(call.input_scales[k]) != np.float32(call.output_scale)
                or call.input_zps[k] != call.output_zp):
            f = np.float32
            scale = f(f(call.input_scales[k]) * (f(1) / f(call.output_scale)))
            bias = f(f(-call.input_zps[k]) * scale)
            v = (x.astype(f) * scale + bias).astype(f)
            x = np.clip(round_half_away_array(v).astype(np.int64) + call.output_zp, 0, 255).astype(np.uint8)
        parts.append(x)
    return np.concatenate(parts, axis=axis)


def pack(call: OpCall) -> np.ndarray:
    return np.stack([x for x in call.inputs if x is not None], axis=int(call.options.get("axis", 0)))


def split(call: OpCall) -> list[np.ndarray]:
    """SPLIT ``(axis, x)``: equal parts, one per output."""
    x = call.inputs[1]
    axis = int(np.asarray(call.inputs[0]).reshape(-1)[0]) % x.ndim
    return list(np.split(x, int(call.options["num_splits"]), axis=axis))


def split_v(call: OpCall) -> list[np.ndarray]:
    """SPLIT_V ``(x, size_splits, axis)``: parts of the given sizes (one may be -1)."""
    x = call.inputs[0]
    axis = int(np.asarray(call.inputs[2]).reshape(-1)[0]) % x.ndim
    sizes = [int(s) for s in np.asarray(call.inputs[1]).reshape(-1)]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def unpack(call: OpCall) -> list[np.ndarray]:
    """UNPACK: the slices along ``axis``, that axis removed."""
    x = call.inputs[0]
    axis = int(call.options.get("axis", 0)) % x.ndim
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def space_to_depth(call: OpCall) -> np.ndarray:
    return windows_.space_to_depth(call.inputs[0], int(call.options["block_size"]))


def depth_to_space(call: OpCall) -> np.ndarray:
    return windows_.depth_to_space(call.inputs[0], int(call.options["block_size"]))


def gather(call: OpCall) -> np.ndarray:
    """GATHER (batch_dims 0): rows of ``x`` along ``axis``; one scale in and out."""
    x, indices = call.inputs[0], np.asarray(call.inputs[1]).astype(np.int64)
    return np.take(x, indices, axis=int(call.options.get("axis", 0)) % x.ndim)


def arg_max(call: OpCall) -> np.ndarray:
    x = call.inputs[0]
    out = np.int32 if call.options.get("output_type") in ("INT32", 2) else np.int64
    return np.argmax(x, axis=int(np.asarray(call.inputs[1]).reshape(-1)[0]) % x.ndim).astype(out)


def tile(call: OpCall) -> np.ndarray:
    """TILE (tile.cc): the input repeated ``multiples[d]`` times along each dimension d (int32 or int64
    multiples, one per dimension); the raw values of any type, whatever their quantization."""
    x, multiples = call.inputs[0], np.asarray(call.inputs[1]).reshape(-1)
    if len(multiples) != x.ndim or (multiples < 0).any():
        raise KernelError(f"operator {call.index} (TILE '{call.name}'): multiples {multiples.tolist()} for an input "
                          f"of {x.ndim} dimensions; TFLite's kernel wants one non-negative multiple per dimension")
    return np.tile(x, [int(m) for m in multiples])


def cast(call: OpCall) -> np.ndarray:
    """CAST (cast.cc): each raw value converted to the output's type, no quantization read. Integer to
    integer wraps (C's static_cast); to bool is ``!= 0``; to float rounds to nearest, ties to even.
    Float to integer truncates toward zero and saturates: below the type's range its minimum, above it
    (and NaN) its maximum (LiteRT 2.3, measured)."""
    x, to = call.inputs[0], np.dtype(call.output_dtype)
    if x.dtype.kind != "f" or to.kind not in "iu":
        return x.astype(to)
    info = np.iinfo(to)
    t = np.trunc(x.astype(np.float64))
    high = np.isnan(t) | (t >= float(int(info.max) + 1))  # a power of two: exact in float64
    low = t < float(int(info.min))
    inside = np.where(high | low, 0.0, t).astype(np.int64)
    return np.where(high, int(info.max), np.where(low, int(info.min), inside)).astype(to)


def detection_postprocess(call: OpCall) -> list[np.ndarray]:
    """TFLite_Detection_PostProcess (LiteRT's custom op, ``qconvert.runtime.detection``): float32 box
    encodings, class scores and anchors in, float32 boxes, classes, scores and count out; ``options``
    are its FlexBuffer map. The one kernel here that computes in float, as LiteRT's does."""
    try:
        return detection.postprocess(*[np.asarray(v) for v in call.inputs], call.options)
    except detection.DetectionError as exc:
        raise KernelError(f"operator {call.index} (TFLite_Detection_PostProcess '{call.name}'): {exc}") from None


def transpose(call: OpCall) -> np.ndarray:
    return np.transpose(call.inputs[0], [int(v) for v in call.inputs[1]])


def reverse_v2(call: OpCall) -> np.ndarray:
    x = call.inputs[0]
    return np.flip(x, tuple(int(a) % x.ndim for a in np.asarray(call.inputs[1]).reshape(-1)))


def pad(call: OpCall) -> np.ndarray:
    pads = call.inputs[1].astype(I64).tolist()
    fill = call.output_zp if len(call.inputs) < 3 or call.inputs[2] is None else int(call.inputs[2].reshape(-1)[0])
    return np.pad(call.inputs[0], pads, constant_values=fill)


def space_to_batch_nd(call: OpCall) -> np.ndarray:
    x = call.inputs[0]
    block = [int(v) for v in call.inputs[1]]
    pads = call.inputs[2].astype(I64).tolist()
    spatial = len(block)
    full = [[0, 0]] + pads + [[0, 0]] * (x.ndim - 1 - spatial)
    x = np.pad(x, full, constant_values=call.output_zp)
    n = x.shape[0]
    dims = x.shape[1:1 + spatial]
    rest = x.shape[1 + spatial:]
    shape = [n]
    for d, b in zip(dims, block):
        shape += [d // b, b]
    x = x.reshape(shape + list(rest))
    # [n, d0/b0, b0, d1/b1, b1, ...rest] -> [b0, b1, n, d0/b0, d1/b1, ...rest]
    order = [2 + 2 * k for k in range(spatial)] + [0] + [1 + 2 * k for k in range(spatial)]
    order += list(range(1 + 2 * spatial, x.ndim))
    x = x.transpose(order)
    return x.reshape([n * int(np.prod(block))] + [d // b for d, b in zip(dims, block)] + list(rest))


def batch_to_space_nd(call: OpCall) -> np.ndarray:
    x = call.inputs[0]
    block = [int(v) for v in call.inputs[1]]
    crops = call.inputs[2].astype(I64).tolist()
    spatial = len(block)
    nb = x.shape[0]
    n = nb // int(np.prod(block))
    dims = x.shape[1:1 + spatial]
    rest = x.shape[1 + spatial:]
    x = x.reshape(block + [n] + list(dims) + list(rest))
    order = [spatial]
    for k in range(spatial):
        order += [spatial + 1 + k, k]
    order += list(range(2 * spatial + 1, x.ndim))
    x = x.transpose(order).reshape([n] + [d * b for d, b in zip(dims, block)] + list(rest))
    index = [slice(None)] + [slice(c[0], x.shape[1 + k] - c[1]) for k, c in enumerate(crops)]
    return x[tuple(index)]


# ---------------------------------------------------------------------------
# the fixed-output ops: int8 by their tables and gemmlowp arithmetic, int16 by the 16x8 kernels


def _int16_pair(call: OpCall) -> tuple[int, int]:
    m, s = call.pairs(1)
    return int(m[0]), int(s[0])


def softmax(call: OpCall) -> np.ndarray:
    if call.int16 and call.inputs[0].dtype == np.int16:  # int8 -> int16 is the int8 kernel (transcendental)
        return transcendental16.softmax16(call.inputs[0], *_int16_pair(call))
    return transcendental.softmax(call)


def logistic(call: OpCall) -> np.ndarray:
    if call.int16:
        return transcendental16.logistic16(call.inputs[0], *_int16_pair(call))
    return transcendental.logistic(call)


def tanh(call: OpCall) -> np.ndarray:
    if call.int16:
        return transcendental16.tanh16(call.inputs[0], *_int16_pair(call))
    return transcendental.tanh(call)


def gelu(call: OpCall) -> np.ndarray:
    if call.int16:
        return transcendental16.gelu16(call.inputs[0], call.input_scales[0], call.output_scale,
                                       bool(call.options.get("approximate", False)))
    return transcendental.lookup(call)


# ---------------------------------------------------------------------------


# The integer kernel of each op, by its op table row's name (tests/ops/test_op_rows.py checks both ways). A
# kernel runs every integer form the row claims: int8; int16 (``form16`` RUN), uint8 (``uint8``), int8 in and
# int16 out (``int8_to_int16``) and int32 shape values (``int32_shapes``) where the row says so.
KERNELS: dict[str, Callable[[OpCall], np.ndarray]] = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "FULLY_CONNECTED": fully_connected,
    "TRANSPOSE_CONV": transpose_conv,
    "ADD": add,
    "SUB": sub,
    "MUL": mul,
    "DIV": div,
    "MAXIMUM": maximum,
    "MINIMUM": minimum,
    "RELU": relu,
    "RELU6": relu,
    "RELU_N1_TO_1": relu,
    "LEAKY_RELU": leaky_relu,
    "REDUCE_MAX": reduce_max,
    "SUM": sum_,
    "SLICE": slice_,
    "STRIDED_SLICE": strided_slice,
    "RESIZE_NEAREST_NEIGHBOR": resize_nearest_neighbor,
    "AVERAGE_POOL_2D": average_pool_2d,
    "MAX_POOL_2D": max_pool_2d,
    "MEAN": mean,
    "RESHAPE": reshape,
    "SQUEEZE": reshape,
    "CONCATENATION": concatenation,
    "TRANSPOSE": transpose,
    "REVERSE_V2": reverse_v2,
    "BATCH_MATMUL": batch_matmul,
    "TILE": tile,  # any element type (the row's any_type)
    "CAST": cast,  # between bool, integers and floats (the row's any_type)
    "TFLite_Detection_PostProcess": detection_postprocess,  # a custom op, float32 (the row's custom)
    "PAD": pad,
    "PADV2": pad,
    "SPACE_TO_BATCH_ND": space_to_batch_nd,
    "BATCH_TO_SPACE_ND": batch_to_space_nd,
    "QUANTIZE": requantize,
    "SOFTMAX": softmax,
    "LOGISTIC": logistic,
    "TANH": tanh,
    "HARD_SWISH": transcendental.lookup,
    "GELU": gelu,
    "RSQRT": rsqrt,
    "EXP": exp,
    "LOG": log,
    "SQRT": sqrt,
    "ABS": abs_,
    "SQUARED_DIFFERENCE": squared_difference,
    "PRELU": prelu,
    "PACK": pack,
    "SPACE_TO_DEPTH": space_to_depth,
    "DEPTH_TO_SPACE": depth_to_space,
    "GATHER": gather,
    "ARG_MAX": arg_max,
    "SPLIT": split,
    "SPLIT_V": split_v,
    "UNPACK": unpack,
    "RESIZE_BILINEAR": resize_bilinear,
    "EXPAND_DIMS": reshape,
    "SHAPE": shape,
    "SVDF": svdf.svdf,  # int8 in and out, an int16 state (svdf.py)
    "UNIDIRECTIONAL_SEQUENCE_LSTM": lstm.unidirectional_sequence_lstm,  # int8, int16 cell state (lstm.py)
}
