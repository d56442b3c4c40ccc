"""Rounding as TensorFlow's C++ rounds: ``std::round`` (ties away from zero) on doubles
and floats, scalar and element-wise."""

from __future__ import annotations

import math

import numpy as np


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


def rsqrt_float32(x: np.ndarray) -> np.ndarray:
    """``1/sqrt(x)`` in float32, rounded once from double (correctly rounded for float32 input).

    TensorFlow folds Rsqrt (BatchNorm's ``rsqrt(variance + epsilon)``) with its CPU kernel: an
    approximation (``rsqrtps``) refined by one Newton step on each 8-wide packet, and
    ``1.0f/sqrtf(x)`` on the rest, so its bits depend on the CPU and the tensor's length
    (measured on an AMD EPYC: 136 of 576 values 1 ulp off this). qconvert uses the value
    that does not depend on the machine."""
    return (1.0 / np.sqrt(np.asarray(x, np.float32).astype(np.float64))).astype(np.float32)
