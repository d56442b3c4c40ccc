"""Integer arithmetic of TFLite's reference kernels, vectorised over int64 numpy arrays.

Every function takes and returns int64 arrays holding int32 values, and does what the C++
does on int32, including wrap-around where the C++ wraps. Nothing here touches a float.

Primitives (gemmlowp fixedpoint.h, tflite kernels/internal/common.h) — array-returning
names for the converter's own implementations in ``quant_math``, which its tests pin down:
  srdhm(a, b)                SaturatingRoundingDoublingHighMul: round(a*b / 2**31), ties up
  rdpot(x, e)                RoundingDivideByPOT: x / 2**e, ties away from zero
  mbqm(x, m, shift)          MultiplyByQuantizedMultiplier, double rounding (default build), or
                             the rounding ``rounding(mode)`` selects (single / upward / tonearest)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

from qconvert import quant as qm

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

I64 = np.int64


def wrap32(v: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap of int64 values."""
    return qm.wrap_i32(np.asarray(v, I64))


def wrap16(v: np.ndarray | int) -> np.ndarray:
    """Two's-complement int16 wrap of int64 values (a C conversion to int16)."""
    return ((np.asarray(v, I64) + 32768) & 0xFFFF) - 32768


def count_leading_zeros32(x: np.ndarray) -> np.ndarray:
    """CountLeadingZeros of the values as uint32 (32 for 0), by halving."""
    u = np.asarray(x, I64) & 0xFFFFFFFF
    bits = np.zeros(u.shape, I64)
    v = u.copy()
    for step in (16, 8, 4, 2, 1):
        big = v >= (I64(1) << step)
        bits = np.where(big, bits + step, bits)
        v = np.where(big, v >> step, v)
    return np.where(u == 0, 32, 31 - bits)


def srdhm(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return np.asarray(qm.saturating_rounding_doubling_high_mul(a, b), I64)


def rdpot(x: np.ndarray | int, exponent: np.ndarray | int) -> np.ndarray:
    return np.asarray(qm.rounding_divide_by_pot(x, exponent), I64)


# How MultiplyByQuantizedMultiplier rounds (``qconvert run --rounding``):
#   double     TFLite's default build: SRDHM, then RoundingDivideByPOT (two roundings; TVM QNN "TFLITE")
#   single     TFLITE_SINGLE_ROUNDING builds, CMSIS-NN's single-rounding requantization:
#              (x·m + 2^(t-1)) >> t with t = 31 - shift, ties towards +inf (TVM QNN "UPWARD")
#   upward     the same arithmetic as single, by TVM's name
#   tonearest  one rounding of x·m / 2^t, ties away from zero (TVM QNN "TONEAREST")
ROUNDINGS = ("double", "single", "upward", "tonearest")
_ROUNDING: contextvars.ContextVar[str] = contextvars.ContextVar("qconvert_rounding", default="double")


@contextlib.contextmanager
def rounding(mode: str) -> Iterator[None]:
    """Run the kernels with ``mode`` (one of :data:`ROUNDINGS`) as MultiplyByQuantizedMultiplier's rounding."""
    if mode not in ROUNDINGS:
        raise ValueError(f"rounding {mode!r}: choose {', '.join(ROUNDINGS)}")
    token = _ROUNDING.set(mode)
    try:
        yield
    finally:
        _ROUNDING.reset(token)


def current_rounding() -> str:
    return _ROUNDING.get()


def mbqm_single(x: np.ndarray | int, multiplier: np.ndarray | int, shift: np.ndarray | int,
                ties_away: bool = False) -> np.ndarray:
    """One rounding of ``x·m / 2**(31 - shift)``: ties towards +inf, or away from zero. Exact in
    int64 for int32 ``x`` and ``m`` (the product is below 2**62, the shift at most 62)."""
    p = np.asarray(x, I64) * np.asarray(multiplier, I64)
    total = 31 - np.asarray(shift, I64)
    half = np.left_shift(I64(1), total - 1)
    if not ties_away:
        return (p + half) >> total
    return np.where(p >= 0, (p + half) >> total, -((-p + half) >> total))


def mbqm(x: np.ndarray | int, multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    mode = _ROUNDING.get()
    if mode == "double":
        return np.asarray(qm.multiply_by_quantized_multiplier(x, multiplier, shift), I64)
    return mbqm_single(x, multiplier, shift, ties_away=mode == "tonearest")


def saturating_left_shift(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT`` with a positive exponent: x * 2**e, saturated."""
    return np.clip(np.asarray(x, I64) << exponent, INT32_MIN, INT32_MAX)


def multiply_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>``: a left shift saturates, a
    right shift rounds (RoundingDivideByPOT)."""
    if exponent >= 0:
        return saturating_left_shift(x, exponent)
    return rdpot(x, -exponent)


def _scale_by_binary64(acc: int, bits: int) -> int:
    """``round_half_away(acc * d)`` for the IEEE-754 double ``d`` with bit pattern ``bits``,
    the product rounded to a double first (round to nearest, ties to even) as the FPU does —
    in integers only."""
    exponent = (bits >> 52) & 0x7FF
    if bits >> 63 or exponent == 0x7FF:
        raise ValueError("the scale must be a finite non-negative double")
    mantissa = bits & ((1 << 52) - 1)
    if exponent:
        mantissa |= 1 << 52
        power = exponent - 1075
    else:  # subnormal
        power = -1074
    n = abs(acc) * mantissa  # exact product = n * 2**power
    if n == 0:
        return 0
    extra = n.bit_length() - 53
    if extra > 0:  # round to 53 significant bits, ties to even (the double product)
        q, r = divmod(n, 1 << extra)
        half = 1 << (extra - 1)
        n = q + (1 if r > half or (r == half and q & 1) else 0)
        power += extra
    if power >= 0:
        value = n << power
    else:  # round half away from zero (std::round) on the magnitude
        value = (n + (1 << (-power - 1))) >> -power
    return -value if acc < 0 else value


def scale_by_binary64(acc: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Element-wise :func:`_scale_by_binary64`; ``bits`` broadcasts along the last axis."""
    a, b = np.broadcast_arrays(np.asarray(acc, I64), np.asarray(bits, np.uint64))
    out = [_scale_by_binary64(int(x), int(y)) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())]
    return np.asarray(out, dtype=I64).reshape(a.shape)


def mbqm_int64(x: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` on an int64 accumulator (common.h), what the 16x8
    kernels (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV with int16 inputs)
    rescale with: the multiplier rounded to 16 bits, ``(m + 2**15) >> 16`` (0x7FFF from
    0x7FFF0000 up), then ``(x * m16 + 2**(14 - shift)) >> (15 - shift)``. |x| < 2**47."""
    m = np.asarray(multiplier, I64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - np.asarray(shift, I64)
    return (np.asarray(x, I64) * reduced + np.left_shift(I64(1), total - 1)) >> total
