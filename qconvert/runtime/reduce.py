"""MEAN int8 as TFLite's reference kernel computes it (lite/kernels/reduce.cc ``EvalQuantizedMean``
→ reference_ops::QuantizedMeanOrSum; under the reference resolver every int8 MEAN takes this
path, whatever its axes and keep_dims).

The record holds (multiplier, shift) = QuantizeMultiplier(in_scale / out_scale). The kernel
folds 1/n in (n = elements reduced per output): ``k = min(floor(log2 n), 32, 31 + shift)``,
``multiplier' = (multiplier << k) // n``, ``shift' = shift - k``; then
``out = MBQM(Σx - in_zp * n, multiplier', shift') + out_zp``, clamped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.quant import fold_mean_multiplier
from qconvert.runtime.int_math import I64, mbqm, wrap32


def mean(call: Any) -> np.ndarray:
    return _mean_or_sum(call, fold=True)


def sum_(call: Any) -> np.ndarray:
    """SUM int8: the same path without the 1/n fold (``compute_sum``)."""
    return _mean_or_sum(call, fold=False)


def _mean_or_sum(call: Any, fold: bool) -> np.ndarray:
    x = call.inputs[0].astype(I64)
    axes = sorted({int(a) % x.ndim for a in np.asarray(call.inputs[1]).reshape(-1)})
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    m, s = call.pairs(1)
    m, s = int(m[0]), int(s[0])
    sums = x.sum(axis=tuple(axes)) if axes else x
    if n == 0:
        return np.zeros(call.output_shape, I64)
    folded, folded_shift = fold_mean_multiplier(m, s, n) if fold else (m, s)
    y = mbqm(wrap32(sums - call.input_zps[0] * n), folded, folded_shift) + call.output_zp
    return y.reshape(call.output_shape)
