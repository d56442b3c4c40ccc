"""Kernel side, 16x8: what LiteRT's Prepare derives from the float32 input scale for the int16
LOGISTIC, TANH and SOFTMAX kernels (lite/kernels/activations.cc ``SigmoidPrepare``,
``TanhPrepare``, ``SoftmaxPrepare``), computed the way the C++ computes it; the integer kernels
are in ``qconvert.runtime.transcendental16``.

LOGISTIC / TANH (:func:`logistic_tanh_int16_params`). The kernels look ``|x|`` up in a table of
``sigmoid(i/24)``, so they want the input in units of 1/(3·4096) (``x * 3`` in Q3.12). Prepare:

* POT case: ``CheckedLog2(scale)`` (float32: ``logf(s) * (1.0f / logf(2.0f))``, rounded half
  away from zero; "a power of two" when the fraction is below 1e-3 in magnitude, so any scale
  within 0.07 % of 2**k counts) gives ``k``; ``input_left_shift = 12 + k``. SigmoidPrepare
  keeps the POT case when that shift is 0, TanhPrepare when it is 0 or 1; ``input_multiplier``
  stays 0, and the kernel then uses ``3 << input_left_shift`` with no shift: the scale is
  taken as exactly ``2**k``, its 0.07 % of slack ignored.
* general case: ``m = double(scale) * 4096.0 * 3.0``, doubled (counting the shift up) while
  ``m <= 32767.0 / 2.0`` and the shift is ``<= 30``; ``input_multiplier = int(m)`` (truncated).

The two Prepares differ for a scale ``2**-11 * (1 + d)`` with ``|d|`` below 0.07 % (a ±16 range):
TANH takes the POT case (exactly ``6·x``), LOGISTIC the general one (``(x·M + 2048) >> 12`` with
``M = int(24576·(1 + d))``), which is ``6·x`` only for ``0 <= d < 1/24576``; hence ``op``.

SOFTMAX (:func:`softmax_int16_params`): ``QuantizeMultiplier(float(scale * beta) / (10/65535))``;
the product of the two float32 values is rounded to float32 before the division, as the C++
evaluates ``input->params.scale * params->beta`` in float. The kernel's input difference
``x - max`` (in [-65535, 0]) is then mapped to [-10, 0] in steps of 10/65535.

The output scale must be 1/32768 (LOGISTIC/TANH exactly; SOFTMAX within 0.1 %) with zero point
0, and the input zero point 0: Prepare checks those on the tensors, not here.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from qconvert.quant.multipliers import quantize_multiplier
from qconvert.quant.rounding import round_half_away

LOGISTIC_TANH_INPUT_INTEGER_BITS = 3  # Q3.12 before the ×3 (the table spans [-10.7, 10.7])
_POT_SHIFTS = {"LOGISTIC": (0,), "TANH": (0, 1)}
_MAX_INPUT_MULTIPLIER = 65535  # 32768 * m must fit the kernel's int32 product
SOFTMAX_DIFF_STEP = 10.0 / 65535.0  # the exp table covers [-10, 0] with 65535 steps


@functools.cache
def _logf():  # type: ignore[no-untyped-def]
    """The C library's ``logf`` (what ``std::log(float)`` calls); numpy's float32 log without one.
    ctypes is imported here: ``ctypes.util`` pulls in subprocess and tempfile, 4 ms of every
    start that imports the op table (``qconvert dump``), for the few int16 ops that call this."""
    import ctypes
    import ctypes.util

    try:
        fn = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").logf
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
        return lambda v: np.float32(fn(float(v)))
    except (OSError, AttributeError):  # pragma: no cover - no C math library
        return lambda v: np.log(np.float32(v))


def checked_log2(scale: float) -> tuple[bool, int]:
    """``CheckedLog2`` (quantization_util.cc) on the float32 ``scale``: ``(is_pot, rounded log2)``.
    All in float32: ``l = logf(s) * (1.0f / logf(2.0f))``, ``r = roundf(l)``; POT when
    ``|l - r| < 1e-3f``."""
    f = np.float32
    log = _logf()
    with np.errstate(all="ignore"):
        l2 = f(log(f(scale)) * f(f(1.0) / log(f(2.0))))
    if not np.isfinite(l2):
        return False, 0
    r = f(round_half_away(float(l2)))
    return bool(abs(f(l2 - r)) < f(1e-3)), int(r)


def _check_scale(what: str, scale: float) -> float:
    s = float(np.float32(scale))
    if not (math.isfinite(s) and s > 0.0):
        raise ValueError(f"{what}: the input scale must be a finite positive float32, got {scale!r}")
    return s


def logistic_tanh_int16_params(input_scale: float, op: str = "LOGISTIC") -> tuple[int, int]:
    """``(input_multiplier, input_left_shift)`` of LiteRT's int16 LOGISTIC (``op="LOGISTIC"``,
    SigmoidPrepare) or TANH (``op="TANH"``, TanhPrepare) for the float32 ``input_scale``.

    Convention: LiteRT's own. The power-of-two case returns ``(0, shift)`` with shift 0 (1 also
    for TANH), which :func:`qconvert.runtime.transcendental16.logistic16` / ``tanh16`` read as
    the multiplier ``3 << shift`` with no shift, as the kernels do; otherwise ``(int(m), shift)``
    with ``m`` in (16383.5, 32767] unless the shift hit its cap of 31.

    ValueError: a scale that is not a finite positive float32; a scale above about 5.33
    (multiplier above 65535), which LiteRT's Prepare accepts but whose ``x * multiplier``
    overflows the kernel's int32 (undefined behaviour in the C++; every input but 0 and ±1
    saturates there anyway)."""
    if op not in _POT_SHIFTS:
        raise ValueError(f"op must be 'LOGISTIC' or 'TANH', got {op!r}")
    s = _check_scale(f"int16 {op}", input_scale)
    is_pot, log2 = checked_log2(s)
    shift = (15 - LOGISTIC_TANH_INPUT_INTEGER_BITS) + log2
    if is_pot and shift in _POT_SHIFTS[op]:
        return 0, shift
    m = s * 4096.0 * 3.0
    shift = 0
    while m <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        m *= 2.0
    if m >= _MAX_INPUT_MULTIPLIER + 1:
        raise ValueError(f"int16 {op}: input scale {s!r} is too large: LiteRT's kernel would multiply the int16 "
                         f"input by {int(m)} in int32 and overflow (the scale must be below 65536/12288 = 5.33)")
    return int(m), shift


def softmax_int16_params(input_scale: float, beta: float) -> tuple[int, int]:
    """``(input_multiplier, input_left_shift)`` of LiteRT's int16 SOFTMAX (SoftmaxPrepare):
    ``QuantizeMultiplier(double(float32(scale) * float32(beta)) / (10.0 / 65535.0))``, the
    shift in QuantizeMultiplier's convention (positive = left), as the kernel's
    ``MultiplyByQuantizedMultiplier`` takes it.

    ValueError: a scale that is not a finite positive float32, or a beta that is not finite
    and positive (LiteRT accepts any beta; with beta <= 0 the kernel's premise that the
    scaled differences are <= 0 fails)."""
    s = _check_scale("int16 SOFTMAX", input_scale)
    b = np.float32(beta)
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"int16 SOFTMAX: beta must be finite and positive, got {beta!r}")
    product = float(np.float32(np.float32(s) * b))
    if product == 0.0:
        raise ValueError(f"int16 SOFTMAX: input scale {s!r} times beta {float(b)!r} underflows float32")
    return quantize_multiplier(product / SOFTMAX_DIFF_STEP)
