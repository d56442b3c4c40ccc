"""Training side: TensorFlow's FakeQuant CPU kernels in float32, op for op. A frozen
graph's constant weights have already been through them, and constant folding of a
FakeQuant on a weight must give the same floats."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from qconvert.quant.blocks import row_blocks
from qconvert.quant.rounding import round_half_away_array


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
    # array op below rounds to float32 as Eigen's does; they run in place on blocks that
    # stay in the cache (quant/blocks.py)
    with np.errstate(all="ignore"):
        quant_zero = np.floor((-lo) * inv + f(0.5))
        out = np.empty(x.shape, np.float32)
        width = x.shape[-1] if x.ndim and per_channel else 1
        flat_x, flat_out = x.reshape(-1, width), out.reshape(-1, width)
        for rows in row_blocks(flat_x.shape[0], width):
            block = flat_out[rows]
            np.minimum(flat_x[rows], hi, out=block)
            np.maximum(block, lo, out=block)
            block -= lo
            if use_inv:
                block *= inv
            else:
                block /= sc
            block -= quant_zero
            block += f(0.5)
            np.floor(block, out=block)
            block *= sc
    if zero.any():
        out = np.where(zero, f(0.0), out)
    return out
