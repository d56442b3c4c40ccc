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
