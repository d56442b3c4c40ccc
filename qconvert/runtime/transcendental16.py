"""LOGISTIC, TANH and SOFTMAX int16 (16x8) as LiteRT's reference kernels compute them.

Parameters come from ``qconvert.quant.int16_params`` (LiteRT's Prepare); the kernels below use
integers only. Their constant tables are built here at import from their formulas, in double.

LOGISTIC / TANH (reference_integer_ops ``Logistic`` / ``Tanh``, int16): a multiplier of 0 means
the power-of-two case, multiplier ``3 << shift`` and no shift. ``v = (x*m + r) >> shift`` (int32,
``r`` half of ``2**shift``, arithmetic shift) is the input in units of 1/12288 (so ``3·x`` in
Q3.12); ``a = |v|`` indexes the 256-entry uint16 table ``SIGMOID_TABLE``: LOGISTIC by
``a >> 9`` with a 9-bit fraction, TANH (``tanh(x) = 2·sigmoid(2x) - 1``) by ``a >> 8`` with an
8-bit one, interpolating linearly between entries ``i`` and ``i + 1``; index >= 255 saturates.
LOGISTIC, ``t`` the interpolation in units of 2**-25: ``(t + 512) >> 10`` for ``v >= 0``,
``(2**25 - t + 511) >> 10`` otherwise (saturated: 32767 and 1). TANH, ``t`` in 2**-24:
``(t - 2**23 + 128) >> 8`` for ``v >= 0``, ``(-t + 2**23 + 127) >> 8`` otherwise (saturated:
±32767).

``SIGMOID_TABLE[i]`` for i < 255 is ``sigmoid(i/24)·65536`` plus half the midpoint error of the
linear interpolation on ``[i/24, (i+1)/24]``, rounded half up:
``round(65536·(σ(x_i) + (σ(x_i + 1/48) - (σ(x_i) + σ(x_i + 1/24))/2)/2))``; entry 255 is 65535
(it is only ever the right end of interval 254). That is LiteRT's ``sigmoid_table_uint16``
entry for entry (established against the published table, and by the exhaustive tests).

SOFTMAX (reference_ops ``SoftmaxInt16``), per row of the last axis: ``d = x - max`` mapped to
[-10, 0] by ``MultiplyByQuantizedMultiplier(d, m, shift)`` (int32, default double-rounding
build), plus 32767, saturated to int16; ``e = lookup(EXP_LUT, ·)`` (Q0.15); ``S = sum(e)`` in
int32; ``h = clz32(S)``; ``u = ((S << (h-1)) + 2**13) >> 14`` (S normalised to [1, 2) in
Q1.16) minus 98304 (``x = S' - 1`` recentred to int16), saturated; ``q = lookup(ONE_OVER_LUT, u)``
(``1/(1+x)`` in Q0.15); each output ``(e·q + 2**(30-h)) >> (31-h)`` clamped to [0, 32767].
``lookup(lut, v)``: ``lut[256 + (v >> 7)]`` plus ``(slope·(v & 127) + 64) >> 7``, slope the
int16 difference to the next entry, all wrapping as int16.

The 513-entry LUTs (``LUTPopulate<int16_t>`` in double, common.h): input scale ``10/65535``
with zero point 32767 for exp (inputs [-10, 0]), ``1/65535`` with zero point -32768 for
``1/(1+x)`` (inputs [0, 1]); output scale ``2/65535``, zero point 0, so the output factor is
``65536 / (out_max - out_min)`` (about 32768). With ``step`` one 512th of the input range,
entry i < 512 is ``round(f(x_i)·k) - round((round((f(x_i+1)·k + round(f(x_i)·k)) / 2)
- round(f(x_i + step/2)·k)) / 2)`` (rounding half away from zero; the second term biases the
sample by half the midpoint error of the interpolation), clamped to int16; entry 512 is
``round(f(x_max)·k)`` clamped. ``f`` is the C library's double ``exp``.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from qconvert import quant as qm
from qconvert.quant import round_half_away_array
from qconvert.runtime.int_math import I64, count_leading_zeros32, mbqm, wrap16, wrap32

# ---------------------------------------------------------------------------
# Tables (float at import only)


def _sigmoid_table() -> np.ndarray:
    sig = lambda t: 1.0 / (1.0 + math.exp(-t))  # noqa: E731
    out = []
    for i in range(255):
        lo, mid, hi = sig(i / 24.0), sig(i / 24.0 + 1.0 / 48.0), sig((i + 1) / 24.0)
        out.append(math.floor(65536.0 * (lo + (mid - (lo + hi) / 2.0) / 2.0) + 0.5))
    out.append(65535)
    return np.asarray(out, dtype=I64)


def _lut_int16(f: Callable[[float], float], in_scale: float, in_zero_point: int,
               out_scale: float, out_zero_point: int) -> np.ndarray:
    """The 513 entries of an int16 → int16 interpolation table (``LUTPopulate<int16_t>``
    with double arithmetic): 512 biased samples and the end point."""
    x_min = in_scale * float(-32768 - in_zero_point)
    x_max = in_scale * float(32767 - in_zero_point)
    y_min = out_scale * float(-32768 - out_zero_point)
    y_max = out_scale * float(32767 - out_zero_point)
    n = 512
    step = (x_max - x_min) / n
    half = step / 2.0
    k = 65536.0 / (y_max - y_min)
    i = np.arange(n, dtype=np.float64)
    at = x_min + i * step
    val = np.array([f(v) for v in at.tolist()])
    mid = np.array([f(v) for v in (at + half).tolist()])
    nxt = np.array([f(v) for v in (x_min + (i + 1.0) * step).tolist()])
    sample = round_half_away_array(val * k)
    interp = round_half_away_array((nxt * k + sample) / 2.0)
    bias = round_half_away_array((interp - round_half_away_array(mid * k)) / 2.0)
    body = np.clip(sample - bias, -32768.0, 32767.0)
    end = np.clip(round_half_away_array(np.array([f(x_max) * k])), -32768.0, 32767.0)
    return np.concatenate([body, end]).astype(I64)


SIGMOID_TABLE = _sigmoid_table()  # uint16 values, held as int64
_RANGE = 65535  # int16 max - int16 min
EXP_LUT = _lut_int16(math.exp, 10.0 / _RANGE, 32767, 2.0 / _RANGE, 0)
ONE_OVER_ONE_PLUS_X_LUT = _lut_int16(lambda v: 1.0 / (1.0 + v), 1.0 / _RANGE, -32768, 2.0 / _RANGE, 0)

# ---------------------------------------------------------------------------
# Integer helpers


def lut_lookup(value: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """int16 → int16 through a 513-entry table: 9 bits index, 7 bits interpolate (``LUTLookup``)."""
    v = np.asarray(value, I64)
    index = 256 + (v >> 7)
    base = lut[index]
    slope = wrap16(lut[index + 1] - base)
    return wrap16(base + ((slope * (v & 0x7F) + 64) >> 7))


def _scaled_input(x: np.ndarray, input_multiplier: int, input_left_shift: int) -> np.ndarray:
    """``(x*m + round) >> shift`` in int32 (the power-of-two case first turned into m = 3 << shift)."""
    m, s = int(input_multiplier), int(input_left_shift)
    if s < 0:
        raise ValueError(f"input_left_shift must be >= 0, got {s}")
    if m == 0:
        m, s = 3 << s, 0
    rounding = (1 << (s - 1)) if s > 0 else 0
    return wrap32(np.asarray(x, I64) * m + rounding) >> s


def _interpolate(a: np.ndarray, fraction_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Table interpolation at ``|v| = a``: ``(t, saturated)`` with ``t = (ua << b) + frac·(ub - ua)``."""
    index = a >> fraction_bits
    saturated = index >= 255
    i = np.minimum(index, 254)
    ua, ub = SIGMOID_TABLE[i], SIGMOID_TABLE[i + 1]
    t = (ua << fraction_bits) + (a & ((1 << fraction_bits) - 1)) * (ub - ua)
    return t, saturated


# ---------------------------------------------------------------------------
# Kernels


def logistic16(x: np.ndarray, input_multiplier: int, input_left_shift: int) -> np.ndarray:
    """int16 LOGISTIC, output scale 1/32768: see the module docstring."""
    v = _scaled_input(x, input_multiplier, input_left_shift)
    t, saturated = _interpolate(np.abs(v), 9)
    t = np.where(saturated, 0x7FFF << 10, t)
    t = np.where(v >= 0, t + (1 << 9), (1 << 25) - t + (1 << 9) - 1)
    return wrap16((t & 0xFFFFFFFF) >> 10).astype(np.int16)


def tanh16(x: np.ndarray, input_multiplier: int, input_left_shift: int) -> np.ndarray:
    """int16 TANH, output scale 1/32768: see the module docstring."""
    v = _scaled_input(x, input_multiplier, input_left_shift)
    t, saturated = _interpolate(np.abs(v), 8)
    t = np.where(saturated, 0xFFFF << 8, t)
    t = np.where(v >= 0, t - (1 << 23) + (1 << 7), -t + (1 << 23) + (1 << 7) - 1)
    return wrap16(wrap32(t) >> 8).astype(np.int16)


def softmax16(x: np.ndarray, input_multiplier: int, input_left_shift: int) -> np.ndarray:
    """int16 SOFTMAX over the last axis, output scale 1/32768: see the module docstring."""
    x64 = np.asarray(x, I64)
    if x64.ndim == 0 or x64.shape[-1] == 0:
        raise ValueError(f"softmax16 needs rows of at least one element, got shape {x64.shape}")
    diff = x64 - x64.max(axis=-1, keepdims=True)
    scaled = mbqm(diff, int(input_multiplier), int(input_left_shift))
    e = lut_lookup(np.clip(scaled + 32767, -32768, 32767), EXP_LUT)
    total = wrap32(e.sum(axis=-1, keepdims=True))
    if np.any(total <= 0):
        raise ValueError("softmax16: a row's sum of exponentials is not a positive int32 (row too long)")
    headroom = count_leading_zeros32(total)  # clz; the row maximum alone gives e of about 32767
    normalised = ((total << (headroom - 1)) + (1 << 13)) >> 14
    u = np.clip(normalised - ((1 << 15) + (1 << 16)), -32768, 32767)
    reciprocal = lut_lookup(u, ONE_OVER_ONE_PLUS_X_LUT)
    right = 31 - headroom
    y = (e * reciprocal + (I64(1) << (right - 1))) >> right
    return np.clip(y, 0, 32767).astype(np.int16)


@functools.lru_cache(maxsize=64)
def _gelu_lut(in_scale: float, out_scale: float, approximate: bool) -> np.ndarray:
    transform = qm.gelu_approximate_float32 if approximate else qm.gelu_float32
    return np.asarray(qm.activation_table16(transform, in_scale, 0, out_scale, 0), I64)


def gelu16(x: np.ndarray, in_scale: float, out_scale: float, approximate: bool) -> np.ndarray:
    """int16 GELU (LiteRT's activations.cc): the 513-entry table of ``LUTPopulate<int16_t>`` over the
    float32 GeluTransform (``qm.activation_table16``), read by ``lut_lookup``; zero points 0."""
    return lut_lookup(x, _gelu_lut(float(in_scale), float(out_scale), approximate)).astype(np.int16)




@functools.lru_cache(maxsize=64)
def _exp_lut(in_scale: float, out_scale: float) -> np.ndarray:
    return np.asarray(qm.activation_table16(qm.exp_float32, in_scale, 0, out_scale, 0), I64)


@functools.lru_cache(maxsize=64)
def _log_lut(in_scale: float, out_scale: float) -> np.ndarray:
    low = float(np.float32(np.float32(-32768) * np.float32(out_scale)))  # an input <= 0 (zero point 0)
    return np.asarray(qm.activation_table16(qm.log_float32(low), in_scale, 0, out_scale, 0), I64)


def exp16(x: np.ndarray, in_scale: float, out_scale: float) -> np.ndarray:
    """int16 EXP (exp.cc): the 513-entry table of ``LUTPopulate<int16_t>`` over ``expf``, built from the
    two scales in Prepare, read by ``lut_lookup``; zero points 0."""
    return lut_lookup(x, _exp_lut(float(in_scale), float(out_scale))).astype(np.int16)


def log16(x: np.ndarray, in_scale: float, out_scale: float) -> np.ndarray:
    """int16 LOG (elementwise.cc LogLUTPrepare): the same table over ``logf``, an input ``<= 0`` giving
    the output's lowest value; zero points 0."""
    return lut_lookup(x, _log_lut(float(in_scale), float(out_scale))).astype(np.int16)
