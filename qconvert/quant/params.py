"""Converter side: the scale and zero point TensorFlow's MLIR converter gives a tensor
(from a FakeQuant's min/max, an input range, calibration statistics or a constant's
values) and how it quantizes constants (weights, biases). Arithmetic in double, as the
C++ does. ``QuantParams`` is the quantized type every layer of qconvert shares.

Every function names the upstream file its formula comes from (paths in
``tensorflow/tensorflow`` unless noted). Formulas are re-implemented, not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from qconvert.quant.blocks import row_blocks
from qconvert.quant.rounding import round_half_away, round_half_away_array

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# quantization_utils.cc: kNearZeroTolerance and kSmallestHalfRange.
_NEAR_ZERO_TOLERANCE = 1.0e-6
_SMALLEST_HALF_RANGE = _NEAR_ZERO_TOLERANCE / 2
_DBL_EPSILON = 2.220446049250313e-16


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: ``real = (q - zero_point) * scale``.

    Scales are kept as Python floats (doubles): TensorFlow's converter computes
    bias scales from the double-precision scales and only rounds to float32 when
    it writes the file. ``axis`` is None for per-tensor parameters.
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None
    qmin: int = -128
    qmax: int = 127
    dtype: str = "int8"
    # 16x8 weights from their values (:func:`weight_params_16x8`): the float32 half range each
    # scale was divided from, which the int8 values are quantized with (127 / half range)
    half_range: tuple[float, ...] | None = field(default=None, compare=False)

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def same_as(self, other: QuantParams | None) -> bool:
        """Equal as TensorFlow compares quantized types (scale, zero point, axis, storage)."""
        return (
            other is not None
            and self.dtype == other.dtype
            and self.axis == other.axis
            and self.zero_point == other.zero_point
            and self.scale == other.scale
            and (self.qmin, self.qmax) == (other.qmin, other.qmax)
        )

    def __str__(self) -> str:
        if self.axis is None:
            return f"{self.dtype}<{self.scale[0]:.6g}:{self.zero_point[0]}>"
        return (
            f"{self.dtype}<axis={self.axis}, {len(self.scale)} scales "
            f"{min(self.scale):.6g}..{max(self.scale):.6g}>"
        )



def _storage_range(num_bits: int, narrow_range: bool, signed: bool) -> tuple[int, int]:
    """The integer range of a ``num_bits`` grid (``narrow_range`` drops the lowest value).

    TensorFlow's ``getDefaultStorageParams`` (FakeQuantSupport.cc) takes the range from the
    storage type instead: 5..7 bits quantize onto the 8-bit range and 2..3 bits onto the
    4-bit one, a finer grid than training used (measured on TF 2.21: a 6-bit weight gets
    scale max|w|/127). qconvert keeps the trained grid.
    """
    if not (2 <= num_bits <= 8 or num_bits == 16):
        raise ValueError(f"num_bits={num_bits}: only 2..8-bit grids (int8/int4 storage) and 16 bits (int16)")
    qmin, qmax = (-(1 << (num_bits - 1)), (1 << (num_bits - 1)) - 1) if signed else (0, (1 << num_bits) - 1)
    if narrow_range:
        qmin += 1
    return qmin, qmax


def storage_dtype(num_bits: int) -> str:
    """The storage of a ``num_bits`` grid: INT4 for 4 bits (as TensorFlow writes a ``num_bits=4``
    FakeQuant's weights), int16 for 16-bit activations, int8 for every other width up to 8."""
    return "int4" if num_bits == 4 else "int16" if num_bits == 16 else "int8"


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
    it is not re-nudged. ``num_bits`` below 8 gives that grid (2^(num_bits-1) subtracted),
    stored as INT4 for 4 bits and int8 otherwise (see :func:`_storage_range`).

    This can disagree with the float32 ``Nudge`` of the training kernel: for
    [-1, 1] the converter's zero point is 127.5 -> 128 (int8 0) while the kernel
    computes 127.49999 -> 127 (see :func:`fake_quant_float32`).
    """
    lo, hi = _expand_very_small_range(_as_f32_double(rmin), _as_f32_double(rmax))
    qmin, qmax = _storage_range(num_bits, narrow_range, signed=False)
    scale, zp = _nudged_scale_and_zero_point(qmin, qmax, lo, hi)
    half = 1 << (num_bits - 1)
    return QuantParams(
        scale=(scale,), zero_point=(zp - half,), axis=None, qmin=qmin - half, qmax=qmax - half,
        dtype=storage_dtype(num_bits),
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
    half = 1 << (num_bits - 1)
    return QuantParams(
        scale=tuple(scales.tolist()), zero_point=tuple((zps - half).tolist()), axis=axis,
        qmin=qmin - half, qmax=qmax - half, dtype=storage_dtype(num_bits),
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


def input_range_params_uint8(lo: float, hi: float) -> QuantParams:
    """The type of a graph input of a whole-uint8 model (``inference_type=tf.uint8``) whose float
    range is [lo, hi], given to TF as ``quantized_input_stats`` in the UNSIGNED domain:
    std=255/(hi-lo), mean=-lo*std (float32), min=(0-mean)/std, max=(255-mean)/std, nudged on
    [0, 255]. Returned in int8 storage (zero point - 128), as the pipeline carries it until the
    uint8 shift: the zero point can differ by one from :func:`input_range_params`' + 128 where the
    signed and unsigned means round differently (for [-1, 1]: 128 here, -1 + 128 there)."""
    if not hi > lo:
        raise ValueError(f"input range [{lo}, {hi}] is empty")
    std_d = _as_f32_double(255.0 / (hi - lo))
    mean_d = _as_f32_double(-lo * (255.0 / (hi - lo)))
    rmin, rmax = _expand_very_small_range((0.0 - mean_d) / std_d, (255.0 - mean_d) / std_d)
    scale, zp = _nudged_scale_and_zero_point(0, 255, rmin, rmax)
    return QuantParams(scale=(scale,), zero_point=(zp - 128,), axis=None, qmin=-128, qmax=127, dtype="int8")



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

    Large arrays go in blocks of rows along axis 0 that stay in the cache (a ResNet50's
    23.5 M weights: 8 passes of float64 over 188 MB otherwise; 2.7× faster in blocks).
    """
    x = np.asarray(x, dtype=np.float32)
    shape_in = x.shape
    n = len(params.scale)
    if params.axis is None:
        if n != 1:
            raise ValueError(f"per-tensor params with {n} scales")
        scale = np.float64(params.scale[0])
        zp = np.float64(params.zero_point[0])
        x = x.reshape(-1)
    else:
        shape = _axis_shape(x, params.axis, n)
        scale = np.asarray(params.scale, dtype=np.float64).reshape(shape)
        zp = np.asarray(params.zero_point, dtype=np.float64).reshape(shape)
    out = np.empty(x.shape, np.dtype(_VALUE_DTYPES.get(params.dtype, params.dtype)))
    per_row = params.axis is not None and params.axis % x.ndim == 0
    for rows in row_blocks(x.shape[0], x[:1].size):
        out[rows] = _quantize_block(x[rows], scale[rows] if per_row else scale, zp[rows] if per_row else zp, params)
    return out.reshape(shape_in)


def _quantize_block(x: np.ndarray, scale: Any, zp: Any, params: QuantParams) -> np.ndarray:
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        np.divide(xd, scale, out=xd)
        if params.dtype in ("int8", "uint8"):
            xd += zp
            # qmin/qmax are integers, so clamping before rounding gives the same result
            np.clip(xd, params.qmin, params.qmax, out=xd)
            return round_half_away_array(xd)
        return np.clip(round_half_away_array(xd) + zp, params.qmin, params.qmax)


# storage types numpy lacks: the numpy type their values are held in until the writer packs them
_VALUE_DTYPES = {"int4": "int8"}


def quantize_bias(b: np.ndarray, scales: Sequence[float] | float, dtype: str = "int32") -> np.ndarray:
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
    if dtype == "int64":
        return np.clip(q, -(2.0**63), 2.0**63 - 1024).astype(np.int64)
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int32)


def quantize_array_legacy(x: np.ndarray, params: QuantParams) -> np.ndarray:
    """Quantize a constant as TensorFlow's post-training quantizer does (``QuantizeLegacy``,
    quantization_lib/quantization_utils.cc, taken when ``legacy_float_scale`` is set).

    Symmetric int8 weights (storage [-127, 127]) are multiplied in float32 by a float32
    inverse scale and rounded ties-away (TOCO's ``SymmetricPerChannelQuantizeValues``):
    per channel the inverse is ``float(1.0 / scale)``; per tensor ``SymmetricQuantizeFloats``
    recomputes ``127 / max|x|`` from the values and uses it unless its own scale
    ``max|x| / 127`` is more than 1e-3 from the type's. Anything else (asymmetric int8;
    int16, which TensorFlow multiplies by ``float(1.0 / scale)`` too, comes with int16
    support) takes the double path of :func:`quantize_array`. The float32 product can round
    differently from the double division: measured on VGG16, 1 to 8 weights of a layer
    move by one step.
    """
    if params.dtype == "int16" and params.axis is None and params.zero_point == (0,):
        # a 16x8 constant operand (ADD/MUL): the float32 product with float32(1 / scale), as TF 2.21
        # writes them (measured: all 124 of DenseNet121's; dividing in double misses 28)
        inv = np.float32(1.0 / float(np.float32(params.scale[0])))
        with np.errstate(all="ignore"):
            q = round_half_away_array(np.multiply(np.asarray(x, dtype=np.float32), inv, dtype=np.float32))
        return np.clip(q, params.qmin, params.qmax).astype(np.int16)
    if params.dtype == "int8" and params.qmin == -127 and params.qmax == 127:
        xf = np.asarray(x, dtype=np.float32)
        if params.axis is None:
            rng = np.float32(np.max(np.abs(xf))) if xf.size else np.float32(0)
            if rng == 0 or abs(float(rng / np.float32(127)) - params.scale[0]) > 1e-3:
                return quantize_array(x, params)
            inv = np.float32(127) / rng
        else:
            shape = _axis_shape(xf, params.axis, len(params.scale))
            # float(1.0 / float32(scale)) for all channels at once, not in a loop over them (RepViT_M09's
            # constants: 5.8 against 10.9 ms, measured); a scale of float32 0 takes the loop, to fail as it did
            s32 = np.asarray(params.scale, np.float64).astype(np.float32).astype(np.float64)
            if s32.all():
                with np.errstate(over="ignore"):
                    inv = (1.0 / s32).astype(np.float32).reshape(shape)
            else:
                inv = np.asarray([1.0 / float(np.float32(s)) for s in params.scale], np.float32).reshape(shape)
        with np.errstate(all="ignore"):
            q = round_half_away_array(np.multiply(xf, inv, dtype=np.float32))
        return np.clip(q, -127, 127).astype(np.int8)
    return quantize_array(x, params)


def weight_params_16x8(value: np.ndarray, axis: int | None) -> QuantParams:
    """Symmetric int8 weights as TensorFlow 2.21's 16x8 post-training quantizer (TOCO's
    ``GetSymmetricScalesFromMaxMin`` / ``SymmetricPerChannelQuantization``) gives them: per
    channel the float32 half range max|w|, scale = half range / 127 in float32, and no widening
    of a tiny range (an all-zero channel gets scale 0; measured: a channel with max|w| 6e-10 gets
    4.74e-12 where the int8 quantizer widens it to 5e-7 / 127). One scale (``axis`` None): a
    zero tensor gets scale 1 (``SymmetricQuantizeFloats``)."""
    v = np.asarray(value, dtype=np.float32)
    if axis is None:
        halves = np.asarray([np.abs(v).max() if v.size else 0.0], np.float32)
    else:
        moved = np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1)
        halves = np.abs(moved).max(axis=1) if moved.size else np.zeros(v.shape[axis], np.float32)
    scales = (halves / np.float32(127)).astype(np.float32)
    if axis is None and halves[0] == 0:
        scales = np.ones(1, np.float32)
    n = len(scales)
    return QuantParams(scale=tuple(float(x) for x in scales), zero_point=(0,) * n, axis=axis, qmin=-127, qmax=127,
                       dtype="int8", half_range=tuple(float(x) for x in halves))


_TOCO_BIAS_LIMIT = 2147483647  # AdjustWeightsForBiasScale's kScale (INT32_MAX, even for 16x8's int64 biases)


def adjust_weights_for_bias_16x8(bias: np.ndarray, input_scale: float, w: QuantParams) -> QuantParams | None:
    """TOCO's ``AdjustWeightsForBiasScale`` (tensorflow/lite/tools/optimize/quantization_utils.cc),
    which TensorFlow 2.21's 16x8 quantizer runs before it quantizes a weight: where
    ``|bias| ≥ 0.5 · input scale · weight scale · INT32_MAX`` (in double) the channel's half range
    becomes ``2·|bias| / INT32_MAX · (127 / input scale)`` (the last factor in float32), stored in
    float32; per tensor, the largest |bias| decides (its ratio to INT32_MAX taken in float32).
    Measured on TF 2.21: a dead channel (weights 0, bias 0.01, input scale 3.05e-5) gets weight
    scale 3.05e-7 and the int64 bias 2^30. Returns the new weight parameters, or None."""
    if w.half_range is None:
        return None
    b = np.abs(np.asarray(bias, np.float32).reshape(-1))
    f_in = np.float32(input_scale)
    factor = float(np.float32(127) / f_in)  # int8 127 / float input scale: a float division
    halves, scales = list(w.half_range), list(w.scale)
    if w.axis is None:
        top = np.float32(b.max()) if b.size else np.float32(0)
        if float(top / np.float32(_TOCO_BIAS_LIMIT)) < 0.5 * float(f_in) * scales[0]:
            return None
        halves[0] = float(np.float32(2.0 * float(top) / _TOCO_BIAS_LIMIT * factor))
        scales[0] = float(np.float32(halves[0]) / np.float32(127))
        return QuantParams(scale=tuple(scales), zero_point=w.zero_point, axis=None, qmin=w.qmin, qmax=w.qmax,
                           dtype=w.dtype, half_range=tuple(halves))
    if b.size != len(scales):
        return None
    changed = False
    for i, m in enumerate(b.astype(np.float64)):
        if m >= 0.5 * float(f_in) * scales[i] * _TOCO_BIAS_LIMIT:
            halves[i] = float(np.float32(2.0 * m / _TOCO_BIAS_LIMIT * factor))
            scales[i] = float(np.float32(halves[i]) / np.float32(127))
            changed = True
    if not changed:
        return None
    return QuantParams(scale=tuple(scales), zero_point=w.zero_point, axis=w.axis, qmin=w.qmin, qmax=w.qmax,
                       dtype=w.dtype, half_range=tuple(halves))


def quantize_weights_16x8(x: np.ndarray, params: QuantParams) -> np.ndarray:
    """Symmetric int8 weights as TensorFlow's 16x8 post-training quantizer writes them: per
    channel (or per tensor) the float32 factor ``127 / max|w|``, the float32 product, rounded
    half away from zero (TOCO's ``SymmetricPerChannelQuantization``). Measured on TF 2.21: all
    52 weight tensors of MobileNetV2 (the int8 quantizer's ``1 / scale`` differs on one value,
    x/s = 94.49999: 95 there, 94 here)."""
    xf = np.asarray(x, dtype=np.float32)
    axis = params.axis
    moved = np.moveaxis(xf, axis, 0).reshape(xf.shape[axis], -1) if axis is not None else xf.reshape(1, -1)
    m = np.abs(moved).max(axis=1) if moved.size else np.zeros(moved.shape[0], np.float32)
    if params.half_range is not None and len(params.half_range) == len(m):  # adjusted for the bias
        m = np.asarray(params.half_range, np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(m > 0, np.float32(params.qmax) / np.where(m > 0, m, np.float32(1)), np.float32(0))
    inv = inv.astype(np.float32)
    inv = inv.reshape(_axis_shape(xf, axis, len(inv))) if axis is not None else inv[0]
    with np.errstate(all="ignore"):
        q = round_half_away_array(np.multiply(xf, inv, dtype=np.float32))
    return np.clip(q, params.qmin, params.qmax).astype(np.int8)


def quantize_bias_legacy(b: np.ndarray, scales: Sequence[float] | float, dtype: str = "int32") -> np.ndarray:
    """:func:`quantize_bias` as TensorFlow's post-training quantizer does it
    (``SymmetricBiasQuantize<int32_t>``, TOCO's quantization_utils): the float32 bias times
    the float32 ``1.0 / scale``, rounded ties-away in float32, clamped to +-(2^31 - 1)."""
    bf = np.asarray(b, dtype=np.float32)
    s = np.atleast_1d(np.asarray(scales, dtype=np.float32)).astype(np.float64)
    if s.size != 1 and (bf.ndim == 0 or bf.shape[-1] != s.size):
        raise ValueError(f"{s.size} bias scales do not match shape {bf.shape}")
    with np.errstate(all="ignore"):
        inv = np.where(s == 0, 0.0, 1.0 / np.where(s == 0, 1.0, s)).astype(np.float32)
        q = round_half_away_array(np.multiply(bf, inv[0] if s.size == 1 else inv, dtype=np.float32))
    if dtype == "int64":  # 16x8 biases: the same product, clamped to int64
        return np.clip(q.astype(np.float64), -(2.0**63), 2.0**63 - 1024).astype(np.int64)
    return np.clip(q.astype(np.float64), -INT32_MAX, INT32_MAX).astype(np.int32)


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
        # float32 products, element by element as numpy scalars would give them
        scales = tuple((np.float32(s_in) * np.asarray(weight_params.scale, np.float32)).tolist())
    else:
        scales = tuple(1.0 * s_in * s_w for s_w in weight_params.scale)
    axis = 0 if len(scales) > 1 else None
    if input_params.dtype == "int16":  # 16x8: INT64 biases (the op's quantized_bias_type)
        return QuantParams(scale=scales, zero_point=(0,) * len(scales), axis=axis, qmin=-(2**63), qmax=2**63 - 1,
                           dtype="int64")
    return QuantParams(
        scale=scales, zero_point=(0,) * len(scales), axis=axis, qmin=INT32_MIN, qmax=INT32_MAX, dtype="int32"
    )



def value_range_params(
    rmin: float, rmax: float, narrow_range: bool = False, axis: int | None = None, num_bits: int = 8
) -> QuantParams:
    """Parameters for a constant with no FakeQuant, from its value range.

    ``GetUniformQuantizedTypeForWeight`` (quantization_lib/quantization_utils.cc)
    widens the range to include 0, then calls ``GetQuantizedType`` in the SIGNED
    domain (8 bits; narrow for weights of affine ops, which are also made
    symmetric by the caller). Per-tensor; see :func:`value_range_params_per_channel`.
    ``num_bits=4`` gives the same on the 4-bit grid, INT4 storage (``--weights int4``:
    a symmetric narrow range [-m, m] has scale m/7).
    """
    lo, hi = min(float(rmin), 0.0), max(float(rmax), 0.0)
    lo, hi = _expand_very_small_range(lo, hi)
    qmin, qmax = _storage_range(num_bits, narrow_range, signed=True)
    scale, zp = _nudged_scale_and_zero_point(qmin, qmax, lo, hi)
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=qmin, qmax=qmax,
                       dtype=storage_dtype(num_bits))


def value_range_params_per_channel(
    mins: Sequence[float], maxs: Sequence[float], narrow_range: bool = True, axis: int = 0, num_bits: int = 8
) -> QuantParams:
    """Per-axis :func:`value_range_params` (``GetUniformQuantizedPerAxisTypeForWeight``)."""
    lo = np.minimum(np.asarray(mins, dtype=np.float64), 0.0)
    hi = np.maximum(np.asarray(maxs, dtype=np.float64), 0.0)
    if narrow_range and np.isfinite(hi).all() and np.array_equal(lo, -hi):  # a weight's [-max|w|, max|w|]
        return symmetric_params_per_channel(hi, axis=axis, num_bits=num_bits)
    return _range_params_per_channel(lo, hi, narrow_range, axis, num_bits)


def _range_params_per_channel(lo: np.ndarray, hi: np.ndarray, narrow_range: bool, axis: int, num_bits: int
                              ) -> QuantParams:
    """The scalar function's double operations, element by element (a channel loop in Python took a
    tenth of a small transformer's conversion), on ranges already widened to include 0."""
    qmin, qmax = _storage_range(num_bits, narrow_range, signed=True)
    small = ~(hi - lo > _NEAR_ZERO_TOLERANCE)
    lo = np.where(small, np.minimum(lo, -_SMALLEST_HALF_RANGE), lo)
    hi = np.where(small, np.maximum(hi, _SMALLEST_HALF_RANGE), hi)
    scales, zps = _nudged_scale_and_zero_point_array(qmin, qmax, lo, hi)
    return QuantParams(
        scale=tuple(scales.tolist()), zero_point=tuple(zps.tolist()),
        axis=axis, qmin=qmin, qmax=qmax, dtype=storage_dtype(num_bits),
    )


def symmetric_params_per_channel(half: np.ndarray, axis: int = 0, num_bits: int = 8) -> QuantParams:
    """:func:`value_range_params_per_channel` of ``[-half, half]`` on the narrow grid, for ``half``
    the float64 max|w| of each channel (>= 0): a weight without FakeQuant. The same double
    operations in fewer numpy calls (EfficientViT_M0's 117 weights: 5.1 -> 2.4 ms): expanded, the
    range is [-h, h] with h = max(half, 5e-7) (2·half > 1e-6 is half > 5e-7), the scale
    (h - -h) / (qmax - qmin), and both zero-point candidates -qmax + h/scale within 1e-13 of 0, so
    the zero points round to 0. A NaN or infinite half takes the general path."""
    half = np.asarray(half, dtype=np.float64)
    if not np.isfinite(half).all():
        return _range_params_per_channel(-half, half, True, axis, num_bits)
    qmin, qmax = _storage_range(num_bits, True, signed=True)
    h = np.maximum(half, _SMALLEST_HALF_RANGE)
    scales = (h + h) / float(qmax - qmin)
    return QuantParams(scale=tuple(scales.tolist()), zero_point=(0,) * len(scales), axis=axis, qmin=qmin,
                       qmax=qmax, dtype=storage_dtype(num_bits))


def signed_range_params(rmin: float, rmax: float) -> QuantParams:
    """``fakeQuantAttrsToType(8 bits, rmin, rmax, narrow_range=false, is_signed=true)`` as
    TensorFlow's DefaultQuantParams pass applies ``default_ranges_stats`` (default_quant_params.cc)."""
    scale, zp = _nudged_scale_and_zero_point(-128, 127, float(rmin), float(rmax))
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")


def calibrated_range_params(rmin: float, rmax: float, legacy_float_scale: bool = True,
                            num_bits: int = 8) -> QuantParams:
    """The int8 type TensorFlow gives a tensor from calibration statistics (int16 with
    ``num_bits=16``: the range made symmetric, max(|min|, |max|), see :func:`int16_range_params`).

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
    if num_bits == 16:  # symmetric: the int16 kernels assume zero point 0
        hi = max(abs(lo), abs(hi))
        lo = -hi
    if abs(hi - lo) < _NEAR_ZERO_TOLERANCE:
        lo -= _NEAR_ZERO_TOLERANCE
        hi += _NEAR_ZERO_TOLERANCE
    if num_bits == 16:
        return int16_range_params(lo, hi, legacy_float_scale)
    if not legacy_float_scale:
        scale, zp = _nudged_scale_and_zero_point(-128, 127, lo, hi)
        return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")
    return _down_cast_scale(lo, hi)


INT16_QMAX = 32767


def int16_range_params(lo: float, hi: float, legacy_float_scale: bool = True) -> QuantParams:
    """The int16 type of TensorFlow's 16x8 quantizer for a symmetric range [lo, hi] = [-m, m]:
    ``fakeQuantAttrsToType(16 bits, narrow_range, signed)``, so storage [-32767, 32767], zero
    point 0 and scale 2m / 65534, recomputed in float32 by ``DownCastScale`` under
    post-training quantization (measured on TF 2.21: every calibrated scale of the corpus
    twins equals float32(float32(2m) / 65534), i.e. m / 32767)."""
    f32 = np.float32
    if legacy_float_scale:
        scale = float(f32(f32(hi) - f32(lo)) / f32(2 * INT16_QMAX))
    else:
        scale = (hi - lo) / (2 * INT16_QMAX)
    return QuantParams(scale=(scale,), zero_point=(0,), axis=None, qmin=-INT16_QMAX, qmax=INT16_QMAX, dtype="int16")


def value_range_params_legacy(rmin: float, rmax: float) -> QuantParams:
    """A constant operand's int8 type under post-training quantization:
    ``GetUniformQuantizedTypeForWeight`` (not symmetric, not narrow) with ``legacy_float_scale``:
    the value range widened to include 0, ``ExpandVerySmallRange`` (a range of width ≤ 1e-6
    reaches at least ±5e-7; measured: LayerNormalization's epsilon 1e-6 gets [-5e-7, 1e-6],
    scale 5.88e-9, zero point -43), then ``DownCastScale``."""
    lo, hi = min(_as_f32_double(rmin), 0.0), max(_as_f32_double(rmax), 0.0)
    return _down_cast_scale(*_expand_very_small_range(lo, hi))


def _down_cast_scale(lo: float, hi: float) -> QuantParams:
    """``DownCastScale`` (quantization_utils.cc): the scale again, in float32; the zero point
    from the min, in double divided by that scale, rounded to float32, then rounded."""
    f32 = np.float32
    scale = float(f32(f32(hi) - f32(lo)) / f32(255.0))
    zp_from_min = float(f32(-128.0 - lo / scale))
    zp = -128 if zp_from_min < -128 else 127 if zp_from_min > 127 else round_half_away(zp_from_min)
    return QuantParams(scale=(scale,), zero_point=(zp,), axis=None, qmin=-128, qmax=127, dtype="int8")
