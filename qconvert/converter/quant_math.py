"""Quantization arithmetic, re-implemented to match TensorFlow 2.21 bit for bit.

Three families live here, each emulating one TensorFlow component:

* converter side (``fake_quant_params``, ``input_range_params``, ``quantize_array``,
  ``quantize_bias``, ``bias_params``): what the MLIR converter writes into the
  ``.tflite`` file. Arithmetic in double, as the C++ does.
* training side (``fake_quant_float32``): the TF CPU FakeQuant kernels, whose
  output a frozen graph's constant weights have already been through. Arithmetic
  in float32, op for op.
* runtime side (``*_requant``, ``activation_range``, fixed-point helpers): what
  the TFLite int8 kernels derive at Prepare time from the float32 scales stored
  in the file, and the gemmlowp-style integer arithmetic used at Eval time.

Every function names the upstream file its formula comes from (paths in
``tensorflow/tensorflow`` unless noted). Formulas are re-implemented, not copied.

Shift convention: every ``(multiplier, shift)`` pair uses TFLite's
``QuantizeMultiplier`` exponent convention, ``real ~= multiplier * 2**(shift - 31)``
(positive shift = left shift).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from qconvert.converter.ir import QuantParams

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# quantization_utils.cc: kNearZeroTolerance and kSmallestHalfRange.
_NEAR_ZERO_TOLERANCE = 1.0e-6
_SMALLEST_HALF_RANGE = _NEAR_ZERO_TOLERANCE / 2
_DBL_EPSILON = 2.220446049250313e-16


# ---------------------------------------------------------------------------
# Rounding primitives


def round_half_away(x: float) -> int:
    """``std::round`` / ``TfLiteRound`` on a double: ties away from zero.

    ``floor(x + 0.5)`` is wrong for 0.49999999999999994 (the sum rounds up to 1),
    so the fractional part is compared instead; ``x - floor(x)`` is exact.
    """
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"cannot round {x}")
    a = abs(x)
    f = math.floor(a)
    r = f + (1 if a - f >= 0.5 else 0)
    return int(-r if x < 0 else r)


def round_half_away_array(x: np.ndarray) -> np.ndarray:
    """Element-wise ties-away rounding in the array's own float precision
    (``std::round`` on float for float32 input, on double for float64).

    ``rint`` rounds ties to even; only exact ties (``|x - rint(x)| == 0.5``) differ,
    and for those ``x + copysign(0.5, x)`` is exact and is the ties-away result.
    """
    x = np.asarray(x)
    flat = x.reshape(-1)
    r = np.rint(flat)
    d = np.subtract(flat, r)
    np.abs(d, out=d)
    tie = d == 0.5
    if tie.any():
        r[tie] = flat[tie] + np.copysign(0.5, flat[tie]).astype(x.dtype)
    return r.reshape(x.shape)


# ---------------------------------------------------------------------------
# Converter side: FakeQuant min/max -> scale / zero point


def _storage_range(num_bits: int, narrow_range: bool, signed: bool) -> tuple[int, int]:
    """Storage min/max as ``getDefaultStorageParams`` picks them
    (compiler/mlir/quantization/common/ir/FakeQuantSupport.cc).

    The range comes from the storage type, not from ``num_bits``: any width in
    5..8 gets the full 8-bit range. Only 8-bit storage maps onto int8.
    """
    if not 5 <= num_bits <= 8:
        raise ValueError(f"num_bits={num_bits}: only 8-bit storage (num_bits 5..8) maps onto int8")
    qmin, qmax = (-128, 127) if signed else (0, 255)
    if narrow_range:
        qmin += 1
    return qmin, qmax


def _expand_very_small_range(rmin: float, rmax: float) -> tuple[float, float]:
    """``ExpandVerySmallRange`` (quantization_lib/quantization_utils.cc): a range of
    width <= 1e-6 is widened to straddle 0 by at least 5e-7 each side."""
    if rmax - rmin > _NEAR_ZERO_TOLERANCE:
        return rmin, rmax
    return min(rmin, -_SMALLEST_HALF_RANGE), max(rmax, _SMALLEST_HALF_RANGE)


def _nudged_scale_and_zero_point(qmin: int, qmax: int, rmin: float, rmax: float) -> tuple[float, int]:
    """``fakeQuantAttrsToType`` + ``getNudgedScaleAndZeroPoint``
    (compiler/mlir/quantization/common/ir/FakeQuantSupport.cc), all in double.

    When the range excludes 0 (0 < rmin or rmax < 0) both zero-point candidates
    fall outside [qmin, qmax] and the zero point is clamped to qmin (resp. qmax):
    the range is shifted to contain 0 with its width, and the scale, unchanged.
    """
    if abs(rmax - rmin) < _DBL_EPSILON:
        return 1.0, qmin
    qmin_d, qmax_d = float(qmin), float(qmax)
    scale = (rmax - rmin) / (qmax_d - qmin_d)
    zp_from_min = qmin_d - rmin / scale
    zp_from_min_err = abs(qmin_d) + abs(rmin / scale)
    zp_from_max = qmax_d - rmax / scale
    zp_from_max_err = abs(qmax_d) + abs(rmax / scale)
    zp = zp_from_min if zp_from_min_err < zp_from_max_err else zp_from_max
    if zp < qmin_d:
        nudged = qmin
    elif zp > qmax_d:
        nudged = qmax
    else:
        nudged = round_half_away(zp)
    return scale, nudged


def _nudged_scale_and_zero_point_array(
    qmin: int, qmax: int, rmin: np.ndarray, rmax: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_nudged_scale_and_zero_point` on arrays of ranges (the same double
    operations, element by element); returns float64 scales and int64 zero points."""
    qmin_d, qmax_d = float(qmin), float(qmax)
    degenerate = np.abs(rmax - rmin) < _DBL_EPSILON
    with np.errstate(all="ignore"):
        scale = np.where(degenerate, 1.0, (rmax - rmin) / (qmax_d - qmin_d))
        zp_from_min = qmin_d - rmin / scale
        zp_from_min_err = abs(qmin_d) + np.abs(rmin / scale)
        zp_from_max = qmax_d - rmax / scale
        zp_from_max_err = abs(qmax_d) + np.abs(rmax / scale)
    zp = np.where(zp_from_min_err < zp_from_max_err, zp_from_min, zp_from_max)
    if np.any(np.isnan(zp) & ~degenerate):
        raise ValueError("cannot round a NaN zero point")
    zp = np.where(degenerate, qmin_d, zp)
    nudged = np.where(zp < qmin_d, qmin_d, np.where(zp > qmax_d, qmax_d, round_half_away_array(zp)))
    return scale, nudged.astype(np.int64)


def _as_f32_double(v: float) -> float:
    """A float32 attribute/constant as the converter reads it (widened to double)."""
    return float(np.float32(v))


def fake_quant_params(rmin: float, rmax: float, num_bits: int = 8, narrow_range: bool = False) -> QuantParams:
    """The int8 type TF's MLIR converter gives a per-tensor FakeQuant output.

    ``GetQuantizedType`` (quantization_lib/quantization_utils.cc) expands tiny
    ranges, then ``fakeQuantAttrsToType`` (FakeQuantSupport.cc) runs in the
    UNSIGNED domain (the legalization in legalize_patterns.td passes
    ``is_signed=false``), so zero-point ties round upwards there; then
    ``ConvertUnsignedToSigned`` (quantization_utils.h) subtracts 128 from the zero
    point and storage bounds. The scale stays the double (rmax-rmin)/(qmax-qmin):
    it is not re-nudged.

    This can disagree with the float32 ``Nudge`` of the training kernel: for
    [-1, 1] the converter's zero point is 127.5 -> 128 (int8 0) while the kernel
    computes 127.49999 -> 127 (see :func:`fake_quant_float32`).
    """
    lo, hi = _expand_very_small_range(_as_f32_double(rmin), _as_f32_double(rmax))
    qmin, qmax = _storage_range(num_bits, narrow_range, signed=False)
    scale, zp = _nudged_scale_and_zero_point(qmin, qmax, lo, hi)
    return QuantParams(
        scale=(scale,), zero_point=(zp - 128,), axis=None, qmin=qmin - 128, qmax=qmax - 128, dtype="int8"
    )


def fake_quant_params_per_channel(
    mins: Sequence[float], maxs: Sequence[float], num_bits: int = 8, narrow_range: bool = False, axis: int = -1
) -> QuantParams:
    """Per-axis version of :func:`fake_quant_params` (FakeQuantWithMinMaxVarsPerChannel,
    quantized along ``axis``, which TF sets to the last dimension).

    Same sources: each channel's range is expanded and nudged on its own
    (per-axis ``fakeQuantAttrsToType`` in FakeQuantSupport.cc).
    """
    if len(mins) != len(maxs):
        raise ValueError(f"mismatched per-axis min and max size: {len(mins)} vs. {len(maxs)}")
    qmin, qmax = _storage_range(num_bits, narrow_range, signed=False)
    lo = np.asarray(mins, dtype=np.float32).astype(np.float64).reshape(-1)
    hi = np.asarray(maxs, dtype=np.float32).astype(np.float64).reshape(-1)
    narrow = ~(hi - lo > _NEAR_ZERO_TOLERANCE)  # _expand_very_small_range, per channel
    lo = np.where(narrow, np.minimum(lo, -_SMALLEST_HALF_RANGE), lo)
    hi = np.where(narrow, np.maximum(hi, _SMALLEST_HALF_RANGE), hi)
    scales, zps = _nudged_scale_and_zero_point_array(qmin, qmax, lo, hi)
    return QuantParams(
        scale=tuple(scales.tolist()), zero_point=tuple((zps - 128).tolist()), axis=axis,
        qmin=qmin - 128, qmax=qmax - 128, dtype="int8",
    )


def input_stats_params(mean: float, std: float) -> QuantParams:
    """The int8 type TF gives a graph input from ``quantized_input_stats=(mean, std)``.

    ``mean_value``/``std_value`` are ``float`` fields of ``InputArray``
    (compiler/mlir/lite/model_flags.proto), so Python's doubles are rounded to
    float32 there. ``InputStatsToMinMax`` (compiler/mlir/lite/python/
    tf_tfl_flatbuffer_helpers.cc) gives min=(-128-mean)/std, max=(127-mean)/std in
    double for QINT8, and ``SetInputNodesQuantizationParams``
    (lite/transforms/prepare_quantize.cc) builds the type SIGNED, 8 bits,
    narrow_range=false, through the same ``GetQuantizedType``.
    """
    mean_d = _as_f32_double(mean)
    std_d = _as_f32_double(std)
    lo = (-128.0 - mean_d) / std_d
    hi = (127.0 - mean_d) / std_d
    lo, hi = _expand_very_small_range(lo, hi)
    qmin, qmax = _storage_range(8, False, signed=True)
    scale, zp = _nudged_scale_and_zero_point(qmin, qmax, lo, hi)
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=qmin, qmax=qmax, dtype="int8")


def input_stats_for_range(lo: float, hi: float) -> tuple[float, float]:
    """The ``(mean, std)`` that maps int8 [-128, 127] onto float [lo, hi]."""
    if not hi > lo:
        raise ValueError(f"input range [{lo}, {hi}] is empty")
    std = 255.0 / (hi - lo)
    mean = -128.0 - lo * std
    return mean, std


def input_range_params(lo: float, hi: float) -> QuantParams:
    """The int8 type of a graph input whose float range is [lo, hi], passed to TF
    as ``quantized_input_stats`` with std=255/(hi-lo), mean=-128-lo*std
    (see :func:`input_stats_params`)."""
    mean, std = input_stats_for_range(lo, hi)
    return input_stats_params(mean, std)


# ---------------------------------------------------------------------------
# Training side: the TF FakeQuant CPU kernels in float32


def _nudge_f32(
    rmin: np.ndarray, rmax: np.ndarray, quant_min: int, quant_max: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``Nudge`` (core/kernels/fake_quant_ops_functor.h), every op in float32,
    element-wise over arrays of ranges (one per channel, or 0-d).

    Returns ``(nudged_min, nudged_max, scale, inv_scale)``. The inverse is
    recomputed as ``(qmax - qmin) / (max - min)``, not ``1 / scale``; the nudged
    zero point is a ``uint16``.
    """
    f = np.float32
    rmin, rmax = np.asarray(rmin, dtype=f), np.asarray(rmax, dtype=f)
    qmin_f, qmax_f = f(quant_min), f(quant_max)
    with np.errstate(all="ignore"):
        scale = ((rmax - rmin) / (qmax_f - qmin_f)).astype(f)
        inv_scale = ((qmax_f - qmin_f) / (rmax - rmin)).astype(f)
        zp_from_min = (qmin_f - (rmin / scale).astype(f)).astype(f)
        # a non-finite zp (min == max): the kernels return zeros before using it (Vars)
        # or produce NaN (Args); take quant_min
        inside = np.where(np.isfinite(zp_from_min), round_half_away_array(zp_from_min), qmin_f)
        nzp = np.where(zp_from_min < qmin_f, qmin_f, np.where(zp_from_min > qmax_f, qmax_f, inside)).astype(f)
        nudged_min = ((qmin_f - nzp).astype(f) * scale).astype(f)
        nudged_max = ((qmax_f - nzp).astype(f) * scale).astype(f)
    return nudged_min, nudged_max, scale, inv_scale


def fake_quant_float32(
    x: np.ndarray,
    rmin: float | Sequence[float] | np.ndarray,
    rmax: float | Sequence[float] | np.ndarray,
    num_bits: int = 8,
    narrow_range: bool = False,
    per_channel: bool = False,
    variant: str = "vars",
) -> np.ndarray:
    """TF's FakeQuantWithMinMax{Vars,VarsPerChannel,Args} CPU kernels, bit-exact.

    From core/kernels/fake_quant_ops_functor.h (quant_min = narrow ? 1 : 0,
    quant_max = 2**num_bits - 1 per core/kernels/fake_quant_ops.cc), each
    operation rounded to float32 as Eigen evaluates it::

        quant_zero = floor(-nudged_min * inv_scale + 0.5)
        shifted    = clamp(x, nudged_min, nudged_max) - nudged_min
        out        = floor(shifted / scale - quant_zero + 0.5) * scale     # "vars"
        out        = floor(shifted * inv_scale - quant_zero + 0.5) * scale # "args", per channel

    The result is ``(q - zero_point) * scale``, not ``q * scale + nudged_min``.
    Vars/PerChannel return zeros when min == max == 0. Per-channel ranges run
    along the last dimension (and always multiply by ``inv_scale``).
    """
    if variant not in ("vars", "args"):
        raise ValueError(f"variant must be 'vars' or 'args', not {variant!r}")
    if not 2 <= num_bits <= 16:
        raise ValueError(f"num_bits={num_bits}: TF accepts 2..16")
    f = np.float32
    x = np.asarray(x, dtype=np.float32)
    quant_min = 1 if narrow_range else 0
    quant_max = (1 << num_bits) - 1
    if per_channel:
        mins = np.asarray(rmin, dtype=np.float32).reshape(-1)
        maxs = np.asarray(rmax, dtype=np.float32).reshape(-1)
        if x.ndim == 0 or mins.shape != maxs.shape or mins.shape[0] != x.shape[-1]:
            raise ValueError(f"per-channel min/max of size {mins.size} do not match the last dimension of {x.shape}")
        lo, hi, sc, inv = _nudge_f32(mins, maxs, quant_min, quant_max)
        zero = (mins == 0) & (maxs == 0)
        use_inv = True
    else:
        lo, hi, sc, inv = _nudge_f32(f(rmin), f(rmax), quant_min, quant_max)
        zero = np.asarray(variant == "vars" and f(rmin) == 0 and f(rmax) == 0)
        use_inv = variant == "args"
    # every operand is float32 (NumPy keeps float32 op float32 in float32), so each
    # array op below rounds to float32 as Eigen's does; the big ones work in place
    with np.errstate(all="ignore"):
        quant_zero = np.floor((-lo) * inv + f(0.5))
        out = np.asarray(np.minimum(x, hi))  # a new array (0-d for a scalar x)
        np.maximum(out, lo, out=out)
        out -= lo
        if use_inv:
            out *= inv
        else:
            out /= sc
        out -= quant_zero
        out += f(0.5)
        np.floor(out, out=out)
        out *= sc
    if zero.any():
        out = np.where(zero, f(0.0), out)
    return out


# ---------------------------------------------------------------------------
# Converter side: constant quantization


def _axis_shape(x: np.ndarray, axis: int, n: int) -> tuple[int, ...]:
    ax = axis % x.ndim
    if x.shape[ax] != n:
        raise ValueError(f"{n} scales do not match dimension {ax} of shape {x.shape}")
    shape = [1] * x.ndim
    shape[ax] = n
    return tuple(shape)


def quantize_array(x: np.ndarray, params: QuantParams) -> np.ndarray:
    """Quantize a float32 constant as the converter folds ``tfl.quantize(const)``.

    8-bit: ``quantizeF32ToInt8`` (compiler/mlir/quantization/common/ir/
    UniformSupport.h): ``clamp(std::round(double(x) / scale + zp))`` with the zero
    point added BEFORE rounding. Wider storage takes the APFloat path of the same
    file: round ``x / scale`` ties-away, then add the zero point, then clamp.
    """
    xd = np.asarray(x, dtype=np.float32).astype(np.float64)
    n = len(params.scale)
    if params.axis is None:
        if n != 1:
            raise ValueError(f"per-tensor params with {n} scales")
        scale = np.float64(params.scale[0])
        zp = np.float64(params.zero_point[0])
    else:
        shape = _axis_shape(xd, params.axis, n)
        scale = np.asarray(params.scale, dtype=np.float64).reshape(shape)
        zp = np.asarray(params.zero_point, dtype=np.float64).reshape(shape)
    with np.errstate(all="ignore"):
        np.divide(xd, scale, out=xd)
        if params.dtype in ("int8", "uint8"):
            xd += zp
            # qmin/qmax are integers, so clamping before rounding gives the same result
            np.clip(xd, params.qmin, params.qmax, out=xd)
            q = round_half_away_array(xd)
        else:
            q = np.clip(round_half_away_array(xd) + zp, params.qmin, params.qmax)
    return q.astype(np.dtype(params.dtype))


def quantize_bias(b: np.ndarray, scales: Sequence[float] | float) -> np.ndarray:
    """Quantize a float32 bias to int32 with zero point 0: ``round_half_away(double(b)
    / scale)`` clamped to int32 (the APFloat path of ``quantizeFloatToInt``,
    compiler/mlir/quantization/common/ir/UniformSupport.h). A scale list runs along
    the last axis; a single scale covers everything."""
    bd = np.asarray(b, dtype=np.float32).astype(np.float64)
    s = np.atleast_1d(np.asarray(scales, dtype=np.float64))
    if s.size != 1 and (bd.ndim == 0 or bd.shape[-1] != s.size):
        raise ValueError(f"{s.size} bias scales do not match shape {bd.shape}")
    scale = s[0] if s.size == 1 else s
    with np.errstate(all="ignore"):
        q = round_half_away_array(bd / scale)
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int32)


def bias_params(input_params: QuantParams, weight_params: QuantParams, legacy_float_scale: bool = False) -> QuantParams:
    """The bias type ``GetUniformQuantizedTypeForBias`` builds
    (quantization_lib/quantization_utils.cc): scale[c] = in_scale * w_scale[c] as a
    product of the DOUBLE scales, zero point 0, signed int32 full range. Per-axis
    (axis 0 of the 1-D bias) only when the weight has more than one scale.
    With ``legacy_float_scale`` (post-training quantization) the scales are cast to
    float32 and multiplied in float32.
    """
    s_in = input_params.scale[0]
    if legacy_float_scale:
        f_in = np.float32(s_in)
        scales = tuple(float(f_in * np.float32(s_w)) for s_w in weight_params.scale)
    else:
        scales = tuple(1.0 * s_in * s_w for s_w in weight_params.scale)
    axis = 0 if len(scales) > 1 else None
    return QuantParams(
        scale=scales, zero_point=(0,) * len(scales), axis=axis, qmin=INT32_MIN, qmax=INT32_MAX, dtype="int32"
    )


# ---------------------------------------------------------------------------
# Runtime side: multipliers


def quantize_multiplier(m: float) -> tuple[int, int]:
    """``QuantizeMultiplier`` (lite/kernels/internal/quantization_util.cc), default
    (double-rounding) build: ``q, shift = frexp(m)``; ``q_fixed =
    round_half_away(q * 2**31)``; q_fixed == 2**31 becomes 2**30 with shift+1;
    shift < -31 flushes to (0, 0). Returns ``(quantized_multiplier, shift)``.
    """
    m = float(m)
    if m == 0.0:
        return 0, 0
    if math.isnan(m) or math.isinf(m):
        raise ValueError(f"cannot quantize multiplier {m}")
    q, shift = math.frexp(m)
    q_fixed = round_half_away(q * 2.0**31)
    if q_fixed > 2**31:
        raise ValueError(f"multiplier {m}: q_fixed {q_fixed} > 2**31")
    if q_fixed == 2**31:
        q_fixed //= 2
        shift += 1
    if q_fixed > INT32_MAX:
        raise ValueError(f"multiplier {m}: q_fixed {q_fixed} overflows int32")
    if shift < -31:
        shift, q_fixed = 0, 0
    return int(q_fixed), int(shift)


def quantize_multiplier_array(m: np.ndarray) -> list[tuple[int, int]]:
    """:func:`quantize_multiplier` element-wise over a float64 array (same steps:
    frexp, ties-away rounding of q * 2**31, the 2**31 carry, the flush below 2**-31)."""
    m = np.asarray(m, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(m)):
        raise ValueError(f"cannot quantize multiplier {m[~np.isfinite(m)][0]}")
    q, shift = np.frexp(m)
    q_fixed = round_half_away_array(q * 2.0**31).astype(np.int64)
    carry = q_fixed == 2**31
    q_fixed = np.where(carry, q_fixed // 2, q_fixed)
    shift = np.where(carry, shift + 1, shift).astype(np.int64)
    flush = (shift < -31) | (m == 0.0)
    q_fixed, shift = np.where(flush, 0, q_fixed), np.where(flush, 0, shift)
    return list(zip(q_fixed.tolist(), shift.tolist()))


def quantize_multiplier_smaller_than_one_exp(m: float) -> tuple[int, int]:
    """``QuantizeMultiplierSmallerThanOneExp`` (quantization_util.cc): requires
    0 < m < 1 (the kernel aborts otherwise); returns ``(multiplier, left_shift<=0)``."""
    if not 0.0 < m < 1.0:
        raise ValueError(f"QuantizeMultiplierSmallerThanOneExp needs 0 < m < 1, got {m!r}")
    q, shift = quantize_multiplier(m)
    if shift > 0:
        raise ValueError(f"multiplier {m!r} rounds to shift {shift} > 0")
    return q, shift


def quantize_multiplier_greater_than_one(m: float) -> tuple[int, int]:
    """``QuantizeMultiplierGreaterThanOne`` (quantization_util.cc): requires m > 1;
    returns ``(multiplier, left_shift>=0)``."""
    if not m > 1.0:
        raise ValueError(f"QuantizeMultiplierGreaterThanOne needs m > 1, got {m!r}")
    q, shift = quantize_multiplier(m)
    if shift < 0:
        raise ValueError(f"multiplier {m!r} rounds to shift {shift} < 0")
    return q, shift


def _f32(v: float) -> np.float32:
    return np.float32(v)


def conv_requant(
    input_scale: float, filter_scales: Sequence[float] | float, output_scale: float, num_channels: int | None = None
) -> list[tuple[int, int]]:
    """Per-channel ``(multiplier, shift)`` of CONV_2D / DEPTHWISE_CONV_2D int8
    (``PopulateConvolutionQuantizationParams``, lite/kernels/kernel_util.cc):
    ``double(in) * double(filter[c]) / double(out)``, each scale a float32 as
    stored; one filter scale is broadcast to ``num_channels``."""
    fs = np.atleast_1d(np.asarray(filter_scales, dtype=np.float32))
    if fs.size == 1 and num_channels is not None:
        fs = np.repeat(fs, num_channels)
    in_d, out_d = float(_f32(input_scale)), float(_f32(output_scale))
    return quantize_multiplier_array(in_d * fs.astype(np.float64) / out_d)


def fully_connected_requant(
    input_scale: float,
    filter_scales: Sequence[float] | float,
    output_scale: float,
    bias_scale: float | None = None,
) -> list[tuple[int, int]]:
    """``(multiplier, shift)`` list for FULLY_CONNECTED int8 (lite/kernels/fully_connected.cc).

    Per-tensor filter (one scale): ``GetQuantizedConvolutionMultipler``
    (kernel_util.cc) takes the FLOAT32 product ``in * filter``, widens it, then
    divides by ``double(out)``; with a bias it first checks
    ``|double(in)*double(filter) - double(bias)| / double(out) <= 0.02``
    (raises ValueError otherwise). Per-channel filter: the double product, as in
    :func:`conv_requant`. Returns one pair per filter scale.
    """
    fs = np.atleast_1d(np.asarray(filter_scales, dtype=np.float32))
    in_f, out_f = _f32(input_scale), _f32(output_scale)
    if fs.size > 1:
        return quantize_multiplier_array(float(in_f) * fs.astype(np.float64) / float(out_f))
    w_f = fs[0]
    if bias_scale is not None:
        diff = abs(float(in_f) * float(w_f) - float(_f32(bias_scale)))
        if not diff / float(out_f) <= 0.02:
            raise ValueError(f"bias scale {bias_scale} is not input_scale*filter_scale ({diff / float(out_f)} > 0.02)")
    product = float(np.float32(in_f * w_f))
    if product < 0:
        raise ValueError("input_scale * filter_scale < 0")
    return [quantize_multiplier(product / float(out_f))]


def add_sub_requant(in1_scale: float, in2_scale: float, out_scale: float, is_sub: bool = False) -> dict[str, object]:
    """ADD / SUB int8 Prepare parameters (lite/kernels/add.cc ``Prepare``,
    lite/kernels/sub.cc ``PrepareGeneralSubOp``).

    ``left_shift = 20``; ``twice_max = 2 * max(s1, s2)`` (float, exact);
    input multipliers ``double(s_i) / twice_max`` via SmallerThanOneExp; output
    ``twice_max / float((1 << 20) * s_out)``. ADD always uses SmallerThanOneExp for
    the output (aborts at >= 1: raised here); SUB switches to GreaterThanOne when
    the output multiplier exceeds 1 (tiny output ranges). Recent SUB keeps the
    input-2 multiplier positive and subtracts in the kernel; an older SUB
    negated it to reuse ADD, which can differ by one at exact ties because
    SaturatingRoundingDoublingHighMul is not symmetric. Returns ``left_shift``,
    ``input1``, ``input2``, ``output`` pairs.
    """
    s1, s2, so = _f32(in1_scale), _f32(in2_scale), _f32(out_scale)
    left_shift = 20
    twice_max = float(np.float32(np.float32(2.0) * max(s1, s2)))
    real1 = float(s1) / twice_max
    real2 = float(s2) / twice_max
    real_out = twice_max / float(np.float32(np.float32(1 << left_shift) * so))
    out = {
        "left_shift": left_shift,
        "input1": quantize_multiplier_smaller_than_one_exp(real1),
        "input2": quantize_multiplier_smaller_than_one_exp(real2),
    }
    if is_sub and real_out > 1.0:
        out["output"] = quantize_multiplier_greater_than_one(real_out)
    else:
        out["output"] = quantize_multiplier_smaller_than_one_exp(real_out)
    return out


def mul_requant(in1_scale: float, in2_scale: float, out_scale: float) -> tuple[int, int]:
    """MUL int8 ``(multiplier, shift)`` (lite/kernels/mul.cc ``Prepare``):
    ``in1 * in2 / out`` evaluated in FLOAT32 (the operands are the tensors' float
    scales), widened to double, then ``QuantizeMultiplier``."""
    real = np.float32(np.float32(_f32(in1_scale) * _f32(in2_scale)) / _f32(out_scale))
    return quantize_multiplier(float(real))


def quantize_requant(in_scale: float, out_scale: float) -> tuple[int, int]:
    """QUANTIZE int8->int8 (requantize) ``(multiplier, shift)`` (lite/kernels/quantize.cc
    ``Prepare``): ``double(in) / double(out)``. Eval: ``MBQM(x - in_zp) + out_zp``,
    clamped (reference/requantize.h)."""
    return quantize_multiplier(float(_f32(in_scale)) / float(_f32(out_scale)))


def fully_connected_effective_scales(input_scale: float, filter_scales: Sequence[float] | float,
                                     output_scale: float) -> list[int]:
    """The factor LiteRT's reference int8 FULLY_CONNECTED (2.3) multiplies its accumulator by,
    per output channel: ``(double(in) * double(w[c])) / double(out)``, as IEEE-754 binary64
    bit patterns (the kernel then rounds ``acc * factor`` half away from zero)."""
    w = np.atleast_1d(np.asarray(filter_scales, dtype=np.float32)).astype(np.float64)
    eff = (np.float64(_f32(input_scale)) * w) / np.float64(_f32(output_scale))
    return [int(b) for b in eff.astype("<f8").view("<u8")]


def relu_requant(in_scale: float, out_scale: float) -> tuple[int, int]:
    """Standalone RELU / RELU6 / RELU_N1_TO_1 int8 ``(multiplier, shift)``
    (lite/kernels/activations.cc ``ReluPrepare``): ``in / out`` divided in FLOAT32, then
    widened and ``QuantizeMultiplier``. Eval: ``clamp(out_zp + MBQM(x - in_zp))``."""
    return quantize_multiplier(float(np.float32(_f32(in_scale) / _f32(out_scale))))


SOFTMAX_SCALED_DIFF_INTEGER_BITS = 5


def softmax_requant(in_scale: float, beta: float = 1.0) -> tuple[int, int]:
    """SOFTMAX int8 reference-kernel ``(input_multiplier, input_left_shift)``
    (activations.cc ``SoftmaxPrepare``, quantization_util.cc ``PreprocessSoftmaxScaling``):
    ``min(double(beta) * double(in) * 2**26, 2**31 - 1)`` through
    ``QuantizeMultiplierGreaterThanOne`` (ValueError when that is not > 1). The kernel's
    ``diff_min`` follows from the shift: ``-floor(31 * 2**26 / 2**shift)``."""
    real = min(float(beta) * float(_f32(in_scale)) * float(1 << (31 - SOFTMAX_SCALED_DIFF_INTEGER_BITS)),
               float(2**31 - 1))
    if not real > 1.0:
        raise ValueError(f"softmax input scale {float(_f32(in_scale))} too small for the reference kernel")
    return quantize_multiplier(real)


def activation_table(kind: str, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> list[int]:
    """The 256-entry int8 table TFLite's reference LOGISTIC / TANH build (``LUTPopulate``,
    lite/kernels/internal/common.h), indexed by ``uint8(x)``: all in float32,
    ``deq = in_scale * float(x - in_zp)``, ``t = 1/(1 + exp(-deq))`` or ``tanh(deq)``,
    ``q = int(round_half_away(t * (1 / out_scale)) + float(out_zp))``, clamped to int8."""
    f = np.float32
    x = np.arange(-128, 128, dtype=np.int32)
    deq = f(in_scale) * (x - int(in_zp)).astype(f)
    with np.errstate(over="ignore"):
        if kind == "LOGISTIC":
            t = f(1) / (f(1) + np.exp(-deq))
        elif kind == "TANH":
            t = np.tanh(deq)
        else:
            raise ValueError(f"no table for {kind}")
    r = round_half_away_array((t * (f(1) / f(out_scale))).astype(f))
    q = np.clip((r + f(out_zp)).astype(np.int64), -128, 127)
    table = np.empty(256, dtype=np.int64)
    table[x.astype(np.uint8)] = q  # index = the input's bit pattern
    return [int(v) for v in table]


@dataclass(frozen=True)
class MeanRequant:
    """MEAN int8 parameters.

    ``multiplier``/``shift``: Prepare's ``QuantizeMultiplier(double(in)/double(out))``.
    ``folded_multiplier``/``folded_shift``: what reference ``QuantizedMeanOrSum``
    derives by folding 1/num_elements in; output = ``MBQM(sum - in_zp*n,
    folded_multiplier, folded_shift) + out_zp``, clamped.
    ``same_params``: input and output scale/zero point are equal, in which case
    the kernel takes the plain integer-mean path and no multiplier is used.
    """

    multiplier: int
    shift: int
    folded_multiplier: int
    folded_shift: int
    num_elements: int
    input_zero_point: int
    output_zero_point: int
    same_params: bool


def fold_mean_multiplier(multiplier: int, shift: int, num_elements: int) -> tuple[int, int]:
    """reference_ops::QuantizedMeanOrSum folds 1/n into Prepare's (multiplier, shift), in
    integers: ``k = min(floor(log2 n), 32, 31 + shift)``, ``(multiplier << k) // n`` (int64),
    ``shift - k``. (What ``qconvert run`` does at run time; no float involved.)"""
    n = int(num_elements)
    k = min(n.bit_length() - 1, 32, 31 + int(shift))  # 63 - CountLeadingZeros(n)
    return (int(multiplier) << k) // n, int(shift) - k  # k >= 0: QuantizeMultiplier never returns shift < -31


def mean_requant(in_scale: float, in_zp: int, out_scale: float, out_zp: int, num_elements: int) -> MeanRequant:
    """MEAN int8 parameters (lite/kernels/reduce.cc ``PrepareMeanOrSum``, and the
    folding in lite/kernels/internal/reference/reduce.h ``QuantizedMeanOrSum``).

    Prepare: ``QuantizeMultiplier(double(in)/double(out))``. Eval folds the
    division by n = ``num_elements`` into the multiplier:
    ``k = min(floor(log2 n), 32, 31 + shift)``,
    ``multiplier' = (multiplier << k) // n`` (int64), ``shift' = shift - k``.
    (Older TFLite reference kernels took a 4-D keep_dims mean over axes {1, 2} through
    reference/integer_ops/mean.h — see :func:`mean_hw_reference`; LiteRT 2.3's reference
    resolver takes every int8 MEAN through the folded path, measured by qconvert run's tests.)
    """
    n = int(num_elements)
    if n <= 0:
        raise ValueError(f"num_elements must be positive, got {n}")
    mult, shift = quantize_multiplier(float(_f32(in_scale)) / float(_f32(out_scale)))
    folded, folded_shift = fold_mean_multiplier(mult, shift, n)
    return MeanRequant(
        multiplier=mult,
        shift=shift,
        folded_multiplier=folded,
        folded_shift=folded_shift,
        num_elements=n,
        input_zero_point=int(in_zp),
        output_zero_point=int(out_zp),
        same_params=bool(_f32(in_scale) == _f32(out_scale) and int(in_zp) == int(out_zp)),
    )


_ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def activation_range(
    activation: str, scale: float, zero_point: int, qmin: int = -128, qmax: int = 127
) -> tuple[int, int]:
    """Clamp bounds of a fused activation (``CalculateActivationRangeQuantized``,
    lite/kernels/kernel_util.cc): ``quantize(f) = zp + int(TfLiteRound(f / scale))``
    with a FLOAT32 division and float rounding."""
    act = activation.upper()
    if act not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(_ACTIVATIONS)}")
    s = _f32(scale)

    def quantize(v: float) -> int:
        with np.errstate(all="ignore"):
            t = round_half_away_array(np.asarray(np.float32(v) / s, dtype=np.float32))
        if not (float(INT32_MIN) <= float(t) < 2.0**31):
            raise ValueError(f"activation bound {v} / scale {float(s)} overflows int32")
        return int(zero_point) + int(t)

    if act == "RELU":
        return max(qmin, quantize(0.0)), qmax
    if act == "RELU6":
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if act == "RELU_N1_TO_1":
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    return qmin, qmax


# ---------------------------------------------------------------------------
# Runtime side: fixed-point arithmetic (vectorised over int64)


def _i64(v: int | np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def _out(result: np.ndarray, *inputs: object) -> int | np.ndarray:
    if all(np.ndim(i) == 0 for i in inputs):
        return int(result)
    return result


def _wrap_i32(v: np.ndarray) -> np.ndarray:
    return ((v + 2**31) & 0xFFFFFFFF) - 2**31


def saturating_rounding_doubling_high_mul(a: int | np.ndarray, b: int | np.ndarray) -> int | np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` (int32): ``a*b / 2**31``
    rounded to nearest; a == b == INT32_MIN saturates to INT32_MAX.

    Ties round toward +infinity, not away from zero: the negative nudge is
    ``1 - 2**30`` and C++ division truncates, so -0.5 becomes 0 while 0.5
    becomes 1."""
    a64, b64 = np.broadcast_arrays(_i64(a), _i64(b))
    ab = a64 * b64
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    t = ab + nudge
    # C++ integer division truncates toward zero.
    q = np.where(t >= 0, t >> 31, -((-t) >> 31))
    q = np.where((a64 == INT32_MIN) & (b64 == INT32_MIN), np.int64(INT32_MAX), q)
    return _out(q.astype(np.int64), a, b)


def rounding_divide_by_pot(x: int | np.ndarray, exponent: int | np.ndarray) -> int | np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded half away from
    zero, 0 <= exponent <= 31."""
    x64, e64 = np.broadcast_arrays(_i64(x), _i64(exponent))
    if np.any((e64 < 0) | (e64 > 31)):
        raise ValueError("RoundingDivideByPOT exponent must be in [0, 31]")
    mask = (np.int64(1) << e64) - 1
    remainder = x64 & mask
    threshold = (mask >> 1) + (x64 < 0).astype(np.int64)
    q = (x64 >> e64) + (remainder > threshold).astype(np.int64)
    return _out(q, x, exponent)


def multiply_by_quantized_multiplier(
    x: int | np.ndarray, multiplier: int | np.ndarray, shift: int | np.ndarray
) -> int | np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier`` (lite/kernels/internal/common.h),
    default double-rounding build: ``RoundingDivideByPOT(SRDHM(x * 2**left,
    multiplier), right)`` with left = max(shift, 0), right = max(-shift, 0).
    The left shift wraps like int32 arithmetic."""
    s64 = _i64(shift)
    left = np.maximum(s64, 0)
    right = np.maximum(-s64, 0)
    shifted = _wrap_i32(_i64(x) * (np.int64(1) << left))
    r = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)
    return _out(np.asarray(r, dtype=np.int64), x, multiplier, shift)


def multiply_by_quantized_multiplier_single_rounding(
    x: int | np.ndarray, multiplier: int | np.ndarray, shift: int | np.ndarray
) -> int | np.ndarray:
    """The single-rounding variant (``TFLITE_SINGLE_ROUNDING`` in common.cc, and
    ruy's ``apply_multiplier.cc`` that the optimized int8 CONV/FC use on x86):
    ``(x * m + 2**(total-1)) >> total`` with ``total = 31 - shift``. Exact in
    Python ints (products can exceed int64 for extreme shifts)."""
    xs, ms, ss = np.broadcast_arrays(_i64(x), _i64(multiplier), _i64(shift))
    flat = [
        (int(a) * int(m) + (1 << (31 - int(s) - 1))) >> (31 - int(s))
        for a, m, s in zip(xs.reshape(-1), ms.reshape(-1), ss.reshape(-1))
    ]
    r = np.asarray(flat, dtype=np.int64).reshape(xs.shape)
    return _out(r, x, multiplier, shift)


def mean_hw_reference(acc: int | np.ndarray, multiplier: int, shift: int, num_elements: int) -> int | np.ndarray:
    """The 4-D keep_dims HW mean of reference/integer_ops/mean.h without the zero
    point: ``MBQM(acc, multiplier, shift)`` then divide by n rounding half away."""
    v = _i64(multiply_by_quantized_multiplier(acc, multiplier, shift))
    n = np.int64(num_elements)
    pos = (v + n // 2) // n
    neg = -((-(v - n // 2)) // n)  # C++ truncating division of a non-positive value
    r = np.where(v > 0, pos, neg)
    return _out(r, acc)


def value_range_params(
    rmin: float, rmax: float, narrow_range: bool = False, axis: int | None = None
) -> QuantParams:
    """Parameters for a constant with no FakeQuant, from its value range.

    ``GetUniformQuantizedTypeForWeight`` (quantization_lib/quantization_utils.cc)
    widens the range to include 0, then calls ``GetQuantizedType`` in the SIGNED
    domain (8 bits; narrow for weights of affine ops, which are also made
    symmetric by the caller). Per-tensor; see :func:`value_range_params_per_channel`.
    """
    lo, hi = min(float(rmin), 0.0), max(float(rmax), 0.0)
    lo, hi = _expand_very_small_range(lo, hi)
    qmin, qmax = _storage_range(8, narrow_range, signed=True)
    scale, zp = _nudged_scale_and_zero_point(qmin, qmax, lo, hi)
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=qmin, qmax=qmax, dtype="int8")


def value_range_params_per_channel(
    mins: Sequence[float], maxs: Sequence[float], narrow_range: bool = True, axis: int = 0
) -> QuantParams:
    """Per-axis :func:`value_range_params` (``GetUniformQuantizedPerAxisTypeForWeight``)."""
    per = [value_range_params(a, b, narrow_range) for a, b in zip(mins, maxs)]
    qmin, qmax = _storage_range(8, narrow_range, signed=True)
    return QuantParams(
        scale=tuple(p.scale[0] for p in per), zero_point=tuple(p.zero_point[0] for p in per),
        axis=axis, qmin=qmin, qmax=qmax, dtype="int8",
    )


def signed_range_params(rmin: float, rmax: float) -> QuantParams:
    """``fakeQuantAttrsToType(8 bits, rmin, rmax, narrow_range=false, is_signed=true)`` as
    TensorFlow's DefaultQuantParams pass applies ``default_ranges_stats`` (default_quant_params.cc)."""
    scale, zp = _nudged_scale_and_zero_point(-128, 127, float(rmin), float(rmax))
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")


def calibrated_range_params(rmin: float, rmax: float, legacy_float_scale: bool = True) -> QuantParams:
    """The int8 type TensorFlow gives a tensor from calibration statistics.

    ``ConvertStatsToQDQs`` (compiler/mlir/quantization/common/quantization_lib/
    quantization_utils.h): the calibrator's float32 min/max are widened to include 0,
    a range narrower than 1e-6 is widened by 1e-6 on each side (``TensorRangeSanityCheck``),
    then ``fakeQuantAttrsToType(8 bits, narrow_range=false, is_signed=true)`` nudges in
    the SIGNED domain (unlike a FakeQuant's, which nudges unsigned). TensorFlow's
    post-training quantizer runs with ``legacy_float_scale``: ``DownCastScale`` then
    recomputes the scale and zero point in float32 (the default here).
    """
    lo = min(_as_f32_double(rmin), 0.0)
    hi = max(_as_f32_double(rmax), 0.0)
    if abs(hi - lo) < _NEAR_ZERO_TOLERANCE:
        lo -= _NEAR_ZERO_TOLERANCE
        hi += _NEAR_ZERO_TOLERANCE
    if not legacy_float_scale:
        scale, zp = _nudged_scale_and_zero_point(-128, 127, lo, hi)
        return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")
    # DownCastScale (quantization_utils.cc): the scale again, in float32; the zero point
    # from the min, in double divided by that scale, rounded to float32, then rounded
    f32 = np.float32
    scale = float(f32(f32(hi) - f32(lo)) / f32(255.0))
    zp_from_min = float(f32(-128.0 - lo / scale))
    zp = -128 if zp_from_min < -128 else 127 if zp_from_min > 127 else round_half_away(zp_from_min)
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")
