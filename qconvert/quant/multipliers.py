"""Kernel side: what TFLite's int8 kernels derive in Prepare from the float32 scales stored
in the file: ``QuantizeMultiplier`` and each op's multipliers, shifts, tables and clamps.

Shift convention: every ``(multiplier, shift)`` pair uses TFLite's ``QuantizeMultiplier``
exponent convention, ``real ~= multiplier * 2**(shift - 31)`` (positive shift = left shift).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from qconvert.quant.fixed_point import multiply_by_quantized_multiplier, rounding_divide_by_pot
from qconvert.quant.fixed_point import saturating_rounding_doubling_high_mul as _srdhm
from qconvert.quant.params import INT32_MAX, INT32_MIN
from qconvert.quant.rounding import round_half_away, round_half_away_array


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


class IntPairs(list):  # type: ignore[type-arg]
    """``(multiplier, shift)`` pairs that are Python ints already (from ``tolist``): the requant
    record takes them as they are, without ``int()`` on each (RepViT_M09's 306 records: 17.3 against
    24.4 ms, MobileViT_XXS's 488: 22.0 against 24.8, measured)."""


def quantize_multiplier_array(m: np.ndarray) -> list[tuple[int, int]]:
    """:func:`quantize_multiplier` element-wise over a float64 array (same steps:
    frexp, ties-away rounding of q * 2**31, the 2**31 carry, the flush below 2**-31)."""
    m = np.asarray(m, dtype=np.float64).reshape(-1)
    if m.size:  # the common case in a third of the numpy calls (192 channels: 23 -> 12 us; EfficientViT_M0: ~0.5 ms)
        q, shift = np.frexp(m)  # all m > 0, so q * 2**31 lies in [2**30, 2**31) and adding 0.5 is exact
        q_fixed = np.floor(q * 2.0**31 + 0.5)  # ties away; no carry to 2**31, no flush below 2**-31
        if m.min() > 0.0 and shift.min() >= -31 and q_fixed.max() < 2.0**31:
            return IntPairs(zip(q_fixed.astype(np.int64).tolist(), shift.tolist()))
    if not np.all(np.isfinite(m)):
        raise ValueError(f"cannot quantize multiplier {m[~np.isfinite(m)][0]}")
    q, shift = np.frexp(m)
    q_fixed = round_half_away_array(q * 2.0**31).astype(np.int64)
    carry = q_fixed == 2**31
    q_fixed = np.where(carry, q_fixed // 2, q_fixed)
    shift = np.where(carry, shift + 1, shift).astype(np.int64)
    flush = (shift < -31) | (m == 0.0)
    q_fixed, shift = np.where(flush, 0, q_fixed), np.where(flush, 0, shift)
    return IntPairs(zip(q_fixed.tolist(), shift.tolist()))


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
    input_scale: float, filter_scales: Sequence[float] | float, output_scale: float, num_channels: int | None = None,
    legacy_uint8: bool = False,
) -> list[tuple[int, int]]:
    """Per-channel ``(multiplier, shift)`` of CONV_2D / DEPTHWISE_CONV_2D int8
    (``PopulateConvolutionQuantizationParams``, lite/kernels/kernel_util.cc):
    ``double(in) * double(filter[c]) / double(out)``, each scale a float32 as
    stored; one filter scale is broadcast to ``num_channels``. ``legacy_uint8``: a uint8
    conv's one multiplier (``GetQuantizedConvolutionMultipler``), whose ``in * filter`` is a
    FLOAT32 product widened to double (measured: on Coral's uint8 DeepLabv3 it moves a multiplier
    from 1848217932 to 1848217993, and 22 outputs of 209,088 by 1)."""
    fs = np.atleast_1d(np.asarray(filter_scales, dtype=np.float32))
    if fs.size == 1 and num_channels is not None:
        fs = np.repeat(fs, num_channels)
    in_d, out_d = float(_f32(input_scale)), float(_f32(output_scale))
    if legacy_uint8:
        return quantize_multiplier_array((np.float32(_f32(input_scale)) * fs).astype(np.float64) / out_d)
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


def add_sub_requant(in1_scale: float, in2_scale: float, out_scale: float, is_sub: bool = False,
                    left_shift: int = 20) -> dict[str, object]:
    """ADD / SUB int8 Prepare parameters (lite/kernels/add.cc ``Prepare``,
    lite/kernels/sub.cc ``PrepareGeneralSubOp``); int16 with general scales
    (``pot_scale_int16`` false) is the same with ``left_shift = 15``.

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


def div_requant(in1_scale: float, in2_scale: float, out_scale: float) -> tuple[int, int]:
    """DIV int8 / int16 ``(multiplier, shift)`` (lite/kernels/div.cc ``Prepare``): ``in1 / (in2 * out)``
    evaluated in FLOAT32 (the tensors' float scales), widened to double, then ``QuantizeMultiplier``.
    Eval divides ``x1 - zp1`` by ``x2 - zp2`` through a fixed-point reciprocal of the divisor (runtime)."""
    real = np.float32(_f32(in1_scale) / np.float32(_f32(in2_scale) * _f32(out_scale)))
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


def softmax_least_input_scale(options: Mapping[str, Any]) -> float:
    """The int8 input scale SOFTMAX's reference kernel must exceed: ``2**-26 / beta``
    (``PreprocessSoftmaxScaling`` needs its multiplier above 1)."""
    beta = options.get("beta")
    return 2.0 ** -(31 - SOFTMAX_SCALED_DIFF_INTEGER_BITS) / (1.0 if beta is None else float(beta))


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


@functools.cache
def _libm_float(name: str) -> Callable[[float], np.float32]:
    """The C library's float32 function ``name`` (``erfcf``, ``tanhf``): what ``std::erfc(float)``
    in TFLite's kernels calls on this machine. Loaded on first use (by glibc's soname, else
    where ``ctypes.util.find_library`` finds it: that runs ldconfig). Without a C math library, the
    double function rounded to float32 (the same value wherever the library is correctly rounded)."""
    fn = _libm_raw(name)
    return lambda v: np.float32(fn(float(v)))


@functools.cache
def _libm_raw(name: str) -> Callable[[float], float]:
    """:func:`_libm_float`'s function on Python floats (each an exact float32 value), returning the
    float32 result as a Python float: no numpy scalar on the way, for whole tables."""
    import ctypes

    try:
        try:  # glibc's soname first: find_library runs ldconfig in a subprocess, and ctypes.util pulls in
            lib = ctypes.CDLL("libm.so.6")  # subprocess, shutil and tempfile (together 25 ms, measured)
        except OSError:  # not glibc: ask where the C math library is
            import ctypes.util

            lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
        return fn  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # pragma: no cover - no C math library
        fallback = getattr(math, name[:-1])
        return lambda v: float(np.float32(fallback(v)))


# reference/gelu.h: float(-M_SQRT1_2), and sqrt(2/pi) = float(M_2_SQRTPI * M_SQRT1_2)
_MINUS_SQRT1_2 = np.float32(-math.sqrt(0.5))
_SQRT_2_OVER_PI = np.float32((2.0 / math.sqrt(math.pi)) * math.sqrt(0.5))


def _gelu_float32(x: np.float32) -> np.float32:
    """reference_ops::GeluTransform: ``0.5f * x * erfc(x * float(-1/sqrt(2)))`` in float32."""
    f = np.float32
    return f(f(f(0.5) * x) * _libm_float("erfcf")(f(x * _MINUS_SQRT1_2)))


def _gelu_approximate_float32(x: np.float32) -> np.float32:
    """reference_ops::GeluTransformApproximate:
    ``0.5f * x * (1.f + tanh(sqrt(2/pi) * (x + 0.044715f * x * x * x)))`` in float32."""
    f = np.float32
    cube = f(f(f(f(0.044715) * x) * x) * x)
    return f(f(f(0.5) * x) * f(f(1) + _libm_float("tanhf")(f(_SQRT_2_OVER_PI * f(x + cube)))))


# The float32 functions whose 256-entry int8 tables TFLite's kernels build (``LUTPopulate``). Each
# takes the dequantized inputs (a float32 array) and returns float32 values; the op table's rows
# name theirs (``OpRow.lut``), so nothing here knows which op uses which.


def logistic_float32(deq: np.ndarray) -> np.ndarray:
    """LOGISTIC's table: ``1 / (1 + exp(-x))`` in float32."""
    f = np.float32
    with np.errstate(over="ignore"):
        return f(1) / (f(1) + np.exp(-deq))


def tanh_float32(deq: np.ndarray) -> np.ndarray:
    """TANH's table: ``tanh(x)`` in float32."""
    return np.tanh(deq)


def exp_float32(deq: np.ndarray) -> np.ndarray:
    """EXP's table (exp.cc): ``std::exp(float)``, the C library's ``expf``."""
    fn = _libm_float("expf")
    return np.array([fn(v) for v in np.asarray(deq, np.float32)], dtype=np.float32)


def log_float32(output_min: float) -> Callable[[np.ndarray], np.ndarray]:
    """LOG's table (elementwise.cc LogLUTPrepare): the C library's ``logf``, and ``output_min`` (the
    float32 value of the output's lowest integer) for an input ``<= 0``."""
    fn = _libm_float("logf")
    low = np.float32(output_min)

    def log(deq: np.ndarray) -> np.ndarray:
        return np.array([fn(v) if v > 0 else low for v in np.asarray(deq, np.float32)], dtype=np.float32)
    return log


def sqrt_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> list[int]:
    """The 256 int8 outputs of TFLite's int8 SQRT (elementwise.cc SqrtEvalQuantized), indexed by
    ``uint8(x)``; the kernel computes each in float32, no table: ``d = in_scale * float(x - in_zp)``,
    ``int(sqrtf(d) / out_scale)`` (truncated toward zero) ``+ out_zp``, clamped. A ``d < 0`` aborts the
    kernel; its entry here is ``out_zp`` (``qconvert run`` refuses such inputs before the table)."""
    f = np.float32
    x = np.arange(-128, 128, dtype=np.int64)
    deq = (f(in_scale) * (x - int(in_zp)).astype(f)).astype(f)
    with np.errstate(invalid="ignore"):
        root = np.sqrt(np.maximum(deq, f(0))).astype(f)
    q = np.clip(np.trunc((root / f(out_scale)).astype(f)).astype(np.int64) + int(out_zp), -128, 127)
    table = np.empty(256, dtype=np.int64)
    table[x.astype(np.uint8)] = q
    return [int(v) for v in table.astype(np.uint8).view(np.int8)]


def _libm_array(name: str, x: np.ndarray) -> np.ndarray:
    """The C library's float32 function ``name`` on each element of the float32 array ``x``."""
    fn = _libm_raw(name)
    return np.array([fn(v) for v in x.tolist()], dtype=np.float32)


# The two GELU forms below are _gelu_float32 and _gelu_approximate_float32 on whole arrays: numpy's
# float32 ufuncs round each product and sum to float32 as the scalar steps do, so every element is
# the same bits; only the C library's function is called element by element (a 256-entry table:
# 0.06 against 0.34 ms, 0.06 against 0.61 for the tanh form, measured; 27 tables in RepViT_M09)


def gelu_float32(deq: np.ndarray) -> np.ndarray:
    """GELU's table (erfc form), the C library's ``erfcf``."""
    f = np.float32
    x = np.asarray(deq, f)
    return (f(0.5) * x).astype(f) * _libm_array("erfcf", (x * _MINUS_SQRT1_2).astype(f))


def gelu_approximate_float32(deq: np.ndarray) -> np.ndarray:
    """GELU's table with ``approximate`` (tanh form), the C library's ``tanhf``."""
    f = np.float32
    x = np.asarray(deq, f)
    cube = (((f(0.044715) * x).astype(f) * x).astype(f) * x).astype(f)
    inner = (_SQRT_2_OVER_PI * (x + cube).astype(f)).astype(f)
    return (f(0.5) * x).astype(f) * (f(1) + _libm_array("tanhf", inner)).astype(f)


def activation_table(transform: Callable[[np.ndarray], np.ndarray], in_scale: float, in_zp: int,
                     out_scale: float, out_zp: int, dtype: str = "int8") -> list[int]:
    """The 256-entry int8 table TFLite's reference kernels build for an element-wise function
    (``LUTPopulate``, lite/kernels/internal/common.h), indexed by ``uint8(x)``: all in float32,
    ``deq = in_scale * float(x - in_zp)``, ``t = transform(deq)`` (one of the ``*_float32``
    functions above: LOGISTIC, TANH, GELU and its tanh form), ``q = int(round_half_away(t * (1 /
    out_scale)) + float(out_zp))``, clamped to int8. ``dtype="uint8"`` (the uint8 kernel's table,
    TFLite's older files): x and the clamp over [0, 255], each entry stored as the int8 of its bit
    pattern (the requant record holds int8)."""
    f = np.float32
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    x = np.arange(lo, hi + 1, dtype=np.int32)
    deq = f(in_scale) * (x - int(in_zp)).astype(f)
    with np.errstate(over="ignore"):
        t = np.asarray(transform(deq), dtype=f)
    r = round_half_away_array((t * (f(1) / f(out_scale))).astype(f))
    q = np.clip((r + f(out_zp)).astype(np.int64), lo, hi)
    table = np.empty(256, dtype=np.int64)
    table[x.astype(np.uint8)] = q  # index = the input's bit pattern
    return [int(v) for v in table.astype(np.uint8).view(np.int8)]


def activation_table16(transform: Callable[[np.ndarray], np.ndarray], in_scale: float, in_zp: int,
                       out_scale: float, out_zp: int) -> list[int]:
    """The 513-entry int16 interpolation table LiteRT's int16 kernels build for an element-wise
    function (``LUTPopulate<int16_t>`` with a float transform: ``LUTPopulateInt16<float>``,
    lite/kernels/internal/common.h), all in float32: the input range ``in_scale·(±32767 - zp)``
    cut in 512 steps; each entry the sample ``round(f(x_i)·k)`` (``k = 65536 / (out_max -
    out_min)``) less half the rounded error of the linear interpolation at the step's midpoint;
    entry 512 the end point; clamped to int16. ``transform`` takes float32 arrays (GELU's
    ``gelu_float32``). Rounding is ``std::round`` on float (half away from zero)."""
    f = np.float32
    in_min = f(in_scale) * f(-32768 - int(in_zp))
    in_max = f(in_scale) * f(32767 - int(in_zp))
    out_min = f(out_scale) * f(-32768 - int(out_zp))
    out_max = f(out_scale) * f(32767 - int(out_zp))
    step = f((in_max - in_min) / f(512))
    half = f(step / f(2))
    k = f(f(65536) / f(out_max - out_min))
    i = np.arange(512, dtype=f)
    at = (in_min + (i * step).astype(f)).astype(f)
    with np.errstate(over="ignore", invalid="ignore"):
        val = np.asarray(transform(at), f)
        mid = np.asarray(transform((at + half).astype(f)), f)
        nxt = np.asarray(transform((in_min + ((i + f(1)) * step).astype(f)).astype(f)), f)
        end = np.asarray(transform(np.asarray([in_max], f)), f)
        rnd = lambda v: round_half_away_array(np.asarray(v, f))  # noqa: E731
        sample = rnd(val * k)
        interp = rnd(((nxt * k).astype(f) + sample).astype(f) / f(2))
        bias = rnd((interp - rnd(mid * k)).astype(f) / f(2))
        body = np.clip((sample - bias).astype(np.float64), -32768, 32767)
        last = np.clip(rnd(end * k).astype(np.float64), -32768, 32767)
    return [int(v) for v in np.concatenate([body, last])]


def _sat_shift_left(raw: int, exponent: int) -> int:
    """gemmlowp SaturatingRoundingMultiplyByPOT for exponent > 0: ``raw << exponent``, saturated."""
    threshold = (1 << (31 - exponent)) - 1
    if raw > threshold:
        return INT32_MAX
    if raw < -threshold:
        return INT32_MIN
    return raw << exponent


@functools.lru_cache(maxsize=1024)
def inv_sqrt_quantized_multiplier(value: int) -> tuple[int, int]:
    """``GetInvSqrtQuantizedMultiplierExp(value, kReverseShift)`` (lite/kernels/internal/common.h):
    ``1/sqrt(value)`` as ``(multiplier, shift)`` in QuantizeMultiplier's convention, by five
    Newton-Raphson steps in gemmlowp fixed point with 3 integer bits from the guess 1, then a
    multiplication by sqrt(2)/2. Values 0 and 1 give ``(INT32_MAX, 0)``."""
    v = int(value)
    if v < 0:
        raise ValueError(f"inverse square root of a negative value {v}")
    if v <= 1:
        return INT32_MAX, 0
    shift = 11
    while v >= (1 << 29):
        v //= 4
        shift += 1
    pairs = (32 - v.bit_length() - 1) // 2 - 1  # (CountLeadingZeros - 1) / 2 - 1
    shift -= pairs
    v <<= 2 * pairs

    def mul(a: int, b: int) -> int:
        return int(_srdhm(a, b))

    half_input = int(rounding_divide_by_pot(v >> 1, 1))  # F3 raw of value/2
    half_three = (1 << 28) + (1 << 27)  # 1.5 in F3
    x = 1 << 28  # 1.0 in F3
    for _ in range(5):
        x3 = _sat_shift_left(mul(mul(x, x), x), 6)  # F9 -> F3
        x = _sat_shift_left(mul(half_three, x) - mul(half_input, x3), 3)  # F6 -> F3
    x = mul(x, 1518500250)  # sqrt(2)/2 in F0
    if shift < 0:
        x <<= -shift
        shift = 0
    return x, -shift


def _sat_shift_left_array(raw: np.ndarray, exponent: int) -> np.ndarray:
    """:func:`_sat_shift_left` element-wise on int64."""
    threshold = (1 << (31 - exponent)) - 1
    return np.where(raw > threshold, INT32_MAX, np.where(raw < -threshold, INT32_MIN, raw << exponent))


def inv_sqrt_quantized_multiplier_array(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`inv_sqrt_quantized_multiplier` element-wise over non-negative int32 values, the same
    integer steps on int64 arrays: ``(multipliers, shifts)``."""
    v = np.asarray(values, dtype=np.int64).copy()
    if np.any(v < 0):
        raise ValueError(f"inverse square root of a negative value {int(v[v < 0][0])}")
    small = v <= 1
    v[small] = 2  # any value: their result is (INT32_MAX, 0)
    shift = np.full(v.shape, 11, dtype=np.int64)
    while np.any(big := v >= (1 << 29)):
        v = np.where(big, v // 4, v)
        shift += big
    bits = np.frexp(v.astype(np.float64))[1].astype(np.int64)  # v.bit_length(), exact below 2^53
    pairs = (32 - bits - 1) // 2 - 1
    shift -= pairs
    v <<= 2 * pairs
    half_input = (v >> 1 >> 1) + ((v >> 1) & 1)  # RoundingDivideByPOT(v >> 1, 1) of a positive value
    half_three = (1 << 28) + (1 << 27)
    x = np.full(v.shape, 1 << 28, dtype=np.int64)
    for _ in range(5):
        x3 = _sat_shift_left_array(_srdhm(_srdhm(x, x), x), 6)
        x = _sat_shift_left_array(_srdhm(half_three, x) - _srdhm(half_input, x3), 3)
    x = np.asarray(_srdhm(x, 1518500250))
    left = np.maximum(-shift, 0)
    x, shift = x << left, shift + left
    return np.where(small, INT32_MAX, x), np.where(small, 0, -shift)


def _rsqrt_first_step(values: np.ndarray) -> np.ndarray:
    """RSQRT's Eval before its output multiplier, ``MBQM(1, inv_sqrt(v) << 20)``, for each ``v``
    (0 where ``v`` is not positive: the table holds 127 there)."""
    multipliers, shifts = inv_sqrt_quantized_multiplier_array(np.maximum(values, 0))
    positive = values > 0
    return np.asarray(multiply_by_quantized_multiplier(np.ones_like(values), np.where(positive, multipliers, 0),
                                                       np.where(positive, shifts, 0) + 20))


@functools.lru_cache(maxsize=1)
def _rsqrt_first_step_of_bytes() -> np.ndarray:
    """:func:`_rsqrt_first_step` of 0..255, every ``x - zp`` of an int8 RSQRT: computed once, on arrays
    (MobileViT_XXS's 21 tables, a scalar Newton iteration and a look-up per entry: 8.5 -> 2.0 ms)."""
    return _rsqrt_first_step(np.arange(256, dtype=np.int64))


def rsqrt_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> list[int]:
    """The 256 int8 outputs of TFLite's int8 RSQRT (elementwise.cc), indexed by ``uint8(x)``.
    Prepare (``SetRsqrtOutputMultiplier``): ``QuantizeMultiplier(1 / double(sqrtf(in) * out))``,
    the square root and the product in float32. Eval, with ``v = x - in_zp``: 127 where v is 0;
    else ``MBQM(MBQM(1, inv_sqrt(v) << 20), M, S - 20) + out_zp``, clamped. A ``v < 0`` aborts
    the kernel; its entry here is 127 (``qconvert run`` refuses such inputs before the table)."""
    f = np.float32
    m, s = quantize_multiplier(1.0 / float(f(np.sqrt(f(in_scale)) * f(out_scale))))
    x = np.arange(-128, 128, dtype=np.int64)
    v = x - int(in_zp)
    at = np.maximum(v, 0)
    data = _rsqrt_first_step_of_bytes()[at] if at.max() <= 255 else _rsqrt_first_step(v)
    out = np.clip(np.asarray(multiply_by_quantized_multiplier(data, m, s - 20)) + int(out_zp), -128, 127)
    out = np.where(v <= 0, 127, out)
    table = np.empty(256, dtype=np.int64)
    table[x.astype(np.uint8)] = out
    return table.tolist()


def squared_difference_requant(in1_scale: float, in2_scale: float, out_scale: float) -> list[tuple[int, int]]:
    """SQUARED_DIFFERENCE int8 (squared_difference.cc Prepare), in double from the float32
    scales, with ``left_shift = 7`` and ``t = 2 * max(in1, in2)``: input multipliers ``in_i / t``
    and output multiplier ``t^2 / (2^14 * out)``, each by ``QuantizeMultiplierSmallerThanOneExp``.
    Eval: each ``(x_i - zp_i) << 7`` through its pair, the difference squared, through the output
    pair, plus ``out_zp``, clamped."""
    a, b, o = (float(_f32(v)) for v in (in1_scale, in2_scale, out_scale))
    twice = 2.0 * max(a, b)
    return [quantize_multiplier_smaller_than_one_exp(a / twice),
            quantize_multiplier_smaller_than_one_exp(b / twice),
            quantize_multiplier_smaller_than_one_exp(twice * twice / ((1 << 14) * o))]


def _int16(v: int) -> int:
    return ((int(v) + 2**15) & 0xFFFF) - 2**15


def _srdhm16(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16: round(a·b / 2^15), ties up."""
    if a == b == -(2**15):
        return 2**15 - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    q = ab + nudge
    return _int16(q // (1 << 15) if q >= 0 else -((-q) // (1 << 15)))  # C++ division truncates


def _sdhm16(a: int, b: int) -> int:
    """reference_ops::SaturatingDoublingHighMul (hard_swish.h): ``a·b / 2^15`` truncated."""
    if a == b == -(2**15):
        return 2**15 - 1
    ab = a * b
    return _int16(ab // (1 << 15) if ab >= 0 else -((-ab) // (1 << 15)))


def _rdpot16(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return _int16((x >> exponent) + (1 if remainder > threshold else 0))


def _saturating_left_shift16(v: int, amount: int) -> int:
    return max(-(2**15), min(2**15 - 1, v * (1 << amount)))


def downscale_multiplier_int16(m: int) -> int:
    """``DownScaleInt32ToInt16Multiplier`` (lite/kernels/internal/common.h): round to 16 bits."""
    if m >= 2**31 - 1 - (1 << 15):
        return 2**15 - 1
    return (m + (1 << 15)) >> 16


def hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> list[int]:
    """The 256 int8 outputs of TFLite's int8 HARD_SWISH, indexed by ``uint8(x)``.

    Prepare (activations.cc ``HardSwishPrepare``), in float32: ``hires = in_scale / 128``,
    output multiplier ``hires / out_scale`` and "reluish" multiplier ``hires / (3 / 32768)``,
    each through ``QuantizeMultiplier`` and ``DownScaleInt32ToInt16Multiplier`` (the output
    exponent must be ≤ 0). Eval: reference_ops::HardSwish (hard_swish.h) in int16 fixed point.
    """
    f = np.float32
    hires = f(f(1.0 / 128.0) * f(in_scale))
    out_m, out_e = quantize_multiplier(float(f(hires / f(out_scale))))
    if out_e > 0:
        raise ValueError(f"HARD_SWISH output multiplier exponent {out_e} > 0 (input scale too large for the output)")
    rel_m, rel_e = quantize_multiplier(float(f(hires / f(f(3.0) / f(32768.0)))))
    out_m16, rel_m16 = downscale_multiplier_int16(out_m), downscale_multiplier_int16(rel_m)
    table = [0] * 256
    for x in range(-128, 128):
        v = _int16(x - int(in_zp))
        hires_v = _int16(v * 128)
        preshift = _srdhm16(hires_v, out_m16)
        reluish = hires_v
        if rel_e > 0:
            reluish = _saturating_left_shift16(reluish, rel_e - 1)
        reluish = _srdhm16(reluish, rel_m16)
        if rel_e > 0:
            reluish = _saturating_left_shift16(reluish, 1)
        if rel_e < 0:
            reluish = _rdpot16(reluish, -rel_e)
        reluish = (reluish + (1 << 15)) >> 1
        out = _rdpot16(_sdhm16(reluish, preshift), -out_e)
        out = _int16(out + int(out_zp))
        table[x & 0xFF] = max(-128, min(127, out))
    return table


class MeanRequant:
    """MEAN int8 parameters.

    ``multiplier``/``shift``: Prepare's ``QuantizeMultiplier(double(in)/double(out))``.
    ``folded_multiplier``/``folded_shift``: what reference ``QuantizedMeanOrSum``
    derives by folding 1/num_elements in; output = ``MBQM(sum - in_zp*n,
    folded_multiplier, folded_shift) + out_zp``, clamped.
    ``same_params``: input and output scale/zero point are equal, in which case
    the kernel takes the plain integer-mean path and no multiplier is used.
    """

    # a plain class: as a frozen dataclass its generated methods cost 0.5 ms of every start-up
    __slots__ = ("folded_multiplier", "folded_shift", "input_zero_point", "multiplier", "num_elements",
                 "output_zero_point", "same_params", "shift")
    multiplier: int
    shift: int
    folded_multiplier: int
    folded_shift: int
    num_elements: int
    input_zero_point: int
    output_zero_point: int
    same_params: bool

    def __init__(self, multiplier: int, shift: int, folded_multiplier: int, folded_shift: int, num_elements: int,
                 input_zero_point: int, output_zero_point: int, same_params: bool) -> None:
        self.multiplier, self.shift = multiplier, shift
        self.folded_multiplier, self.folded_shift, self.num_elements = folded_multiplier, folded_shift, num_elements
        self.input_zero_point, self.output_zero_point, self.same_params = input_zero_point, output_zero_point, same_params


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
