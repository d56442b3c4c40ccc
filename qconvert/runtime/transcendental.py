"""SOFTMAX, LOGISTIC and TANH int8 as TFLite's reference kernels compute them.

SOFTMAX (lite/kernels/internal/reference/softmax.h, int8 → int8): gemmlowp fixed point.
The record holds (input_multiplier, input_left_shift) — QuantizeMultiplierGreaterThanOne of
``beta * in_scale * 2**26`` — and the kernel derives ``diff_min`` from the shift alone:
``-floor(31 * 2**26 / 2**input_left_shift)``. Per row (last axis): ``d = x - max``; where
``d >= diff_min``, ``e = exp_on_negative_values(SRDHM(d << shift, multiplier))`` (Q5.26 in,
Q0.31 out); the sum of ``e`` rescaled to Q12.19 (wrapping add); its reciprocal by
``one_over_one_plus_x_for_x_in_0_1`` (3 Newton steps); each output
``RDPOT(SRDHM(reciprocal, e), 12 - clz(sum) + 23) - 128``; elsewhere -128. (The same kernel
with a uint8 output adds 0, and with an int16 one (int8 in, int16 out) shifts by 8 less and adds
-32768.)

LOGISTIC and TANH: TFLite's reference kernels look the output up in a 256-entry int8 table
built at Prepare time in float (``LUTPopulate``). A float-less runtime cannot build it, so
qconvert builds it at conversion time and stores it in the record; the kernel only indexes
it with ``uint8(x)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.errors import KernelError
from qconvert.runtime.int_math import (
    I64,
    INT32_MAX,
    count_leading_zeros32,
    multiply_by_pot,
    rdpot,
    srdhm,
    wrap32,
)

# gemmlowp fixedpoint.h constants (raw int32 values)
_EXP_MINUS_ONE_EIGHTH = 1895147668  # exp(-1/8), Q0.31
_ONE_THIRD = 715827883  # 1/3, Q0.31
_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
           (3, 720401), (4, 242))  # exp(-2**E), Q0.31
_FORTY_EIGHT_SEVENTEENTHS = 1515870810  # 48/17, Q2.29
_MINUS_THIRTY_TWO_SEVENTEENTHS = -1010580540  # -32/17, Q2.29
_SCALED_DIFF_INTEGER_BITS = 5
_ACCUM_INTEGER_BITS = 12


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    x = wrap32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdpot(x4, 2)
    t = rdpot(wrap32(srdhm(wrap32(x4_over_4 + x3), _ONE_THIRD) + x2), 1)
    return wrap32(_EXP_MINUS_ONE_EIGHTH + srdhm(_EXP_MINUS_ONE_EIGHTH, wrap32(x + t)))


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` for a Q(integer_bits).(31-integer_bits) input <= 0."""
    fractional_bits = 31 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    a_mod = wrap32((a & (quarter - 1)) - quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(multiply_by_pot(a_mod, integer_bits))
    remainder = wrap32(a_mod - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (fractional_bits + exponent)) & 1
            result = np.where(bit == 1, srdhm(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, I64(INT32_MAX), result)


def _rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    s = a + b
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))  # C division truncates


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    half_denominator = _rounding_half_sum(a, INT32_MAX)
    x = wrap32(_FORTY_EIGHT_SEVENTEENTHS + srdhm(half_denominator, _MINUS_THIRTY_TWO_SEVENTEENTHS))
    for _ in range(3):
        one_minus = wrap32((1 << 29) - srdhm(half_denominator, x))
        x = wrap32(x + multiply_by_pot(srdhm(x, one_minus), 2))
    return multiply_by_pot(x, 1)


def softmax(call: Any) -> np.ndarray:

    m, s = call.pairs(1)
    multiplier, left_shift = int(m[0]), int(s[0])
    if left_shift < 0:
        raise KernelError(f"operator {call.index} (SOFTMAX '{call.name}'): input left shift {left_shift} < 0")
    diff_min = -(((1 << _SCALED_DIFF_INTEGER_BITS) - 1) * (1 << (31 - _SCALED_DIFF_INTEGER_BITS)) >> left_shift)
    x = call.inputs[0].astype(I64)
    diff = x - x.max(axis=-1, keepdims=True)
    inside = diff >= diff_min
    scaled = srdhm(wrap32(diff << left_shift), multiplier)
    e = exp_on_negative_values(scaled, _SCALED_DIFF_INTEGER_BITS)
    terms = np.where(inside, rdpot(e, _ACCUM_INTEGER_BITS), 0)
    total = wrap32(terms.sum(axis=-1, keepdims=True))  # int32 wrap-around, as the kernel adds
    headroom = count_leading_zeros32(total)
    shifted_minus_one = wrap32(((total << headroom) & 0xFFFFFFFF) - (1 << 31))
    reciprocal = one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)
    out = np.iinfo(call.output_dtype)  # int8 (zero point -128), uint8 (0) or int16 (-32768) outputs
    exponent = (_ACCUM_INTEGER_BITS - headroom) + 31 - out.bits
    y = rdpot(srdhm(reciprocal, e), exponent) + int(out.min)
    return np.where(inside, np.clip(y, out.min, out.max), out.min).astype(call.output_dtype)


def _lookup(call: Any) -> np.ndarray:

    table = getattr(call.record, "table", None) if call.record is not None else None
    if table is None or len(table) != 256:
        raise KernelError(f"operator {call.index} ({call.builtin} '{call.name}') has no 256-entry lookup table "
                          "in the file's qconvert_requant metadata; `qconvert run` needs a file qconvert wrote")
    lut = np.asarray(table, dtype=np.int8)
    if call.output_dtype == "uint8":  # a uint8 kernel's table: entries are uint8 bit patterns
        lut = lut.view(np.uint8)
    return lut[call.inputs[0].astype(np.uint8)]


def lookup(call: Any) -> np.ndarray:
    """An op stored as its 256-entry int8 table (HARD_SWISH, GELU, RSQRT)."""
    return _lookup(call)


def logistic(call: Any) -> np.ndarray:
    return _lookup(call)


def tanh(call: Any) -> np.ndarray:
    return _lookup(call)
