"""Kernel side at Eval: gemmlowp / TFLite fixed-point arithmetic, vectorised over int64
(scalars in, int out). What ``qconvert run`` computes with."""

from __future__ import annotations

import numpy as np

from qconvert.quant.params import INT32_MAX, INT32_MIN


def _i64(v: int | np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def _out(result: np.ndarray, *inputs: object) -> int | np.ndarray:
    if all(np.ndim(i) == 0 for i in inputs):
        return int(result)
    return result


def wrap_i32(v: np.ndarray) -> np.ndarray:
    return ((v + 2**31) & 0xFFFFFFFF) - 2**31


def saturating_rounding_doubling_high_mul(a: int | np.ndarray, b: int | np.ndarray) -> int | np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` (int32): ``a*b / 2**31``
    rounded to nearest; a == b == INT32_MIN saturates to INT32_MAX.

    Ties round toward +infinity, not away from zero: the negative nudge is
    ``1 - 2**30`` and C++ division truncates, so -0.5 becomes 0 while 0.5
    becomes 1."""
    if type(a) is int and type(b) is int and INT32_MIN <= a <= INT32_MAX and INT32_MIN <= b <= INT32_MAX:
        # two int32 scalars (Prepare-time arithmetic, GetInvSqrtQuantizedMultiplierExp's Newton steps):
        # the same steps on Python ints, exact as int64 is here (|a*b| <= 2**62), 30x faster than numpy's
        if a == b == INT32_MIN:
            return INT32_MAX
        t = a * b + ((1 << 30) if a * b >= 0 else 1 - (1 << 30))
        return t >> 31 if t >= 0 else -((-t) >> 31)
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
    shifted = wrap_i32(_i64(x) * (np.int64(1) << left))
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
