"""Choosing a tensor's range from its calibration histogram (``--calibration-method``).

Every method but ``minmax`` sees a histogram of the tensor's values over all samples:
``BINS`` equal bins over [min, max] (the first pass gives min and max, a second pass
fills the counts). Each returns the float range the tensor is then quantized over
(the int8 parameters include 0 and are nudged as for ``minmax``).

* ``minmax``: [min, max], TensorFlow's calibration.
* ``percentile``: the ``p``-th and ``(100 - p)``-th percentiles of the values
  (``--percentile``, default 99.99), each side clipped on its own.
* ``entropy``: TensorRT's KL-divergence calibration, as in ONNX Runtime: on the
  histogram of |x| (values of one sign: of x), the threshold t whose clipped
  distribution, merged into the int8 levels of that side (128, or 256 for one sign),
  loses least information (smallest KL divergence from the reference); range [-t, t]
  or [0, t].
* ``mse``: the range [a*min, a*max] (a in (0, 1]) whose quantization, over the
  histogram's bin centres weighted by their counts, has the smallest mean squared
  error; 200 values of a are tried.
"""

from __future__ import annotations

import numpy as np

BINS = 2048


def percentile(counts: np.ndarray, edges: np.ndarray, p: float) -> tuple[float, float]:
    total = counts.sum()
    if total == 0:
        return float(edges[0]), float(edges[-1])
    cdf = np.cumsum(counts) / total
    tail = (100.0 - p) / 100.0
    lo_bin = int(np.searchsorted(cdf, tail, side="right"))  # first bin holding more than the lower tail
    hi_bin = int(np.searchsorted(cdf, 1.0 - tail, side="left"))  # bin where the upper tail starts
    lo = float(edges[min(lo_bin, len(counts) - 1)])
    hi = float(edges[min(hi_bin, len(counts) - 1) + 1])
    return min(lo, float(edges[-1])), max(hi, lo)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def entropy(counts: np.ndarray, edges: np.ndarray) -> tuple[float, float]:
    lo, hi = float(edges[0]), float(edges[-1])
    if counts.sum() == 0 or hi <= lo:
        return lo, hi
    one_sided = lo >= 0.0 or hi <= 0.0
    levels = 256 if one_sided else 128
    # histogram of the magnitudes over [0, max|x|], BINS bins
    amax = max(abs(lo), abs(hi))
    centres = (edges[:-1] + edges[1:]) / 2
    mag, mag_edges = np.histogram(np.abs(centres), bins=BINS, range=(0.0, amax), weights=counts)
    best, best_i = np.inf, BINS
    for i in range(levels, BINS + 1, 8):
        ref = mag[:i].astype(np.float64).copy()
        ref[i - 1] += mag[i:].sum()  # what falls beyond the threshold is clipped onto it
        # merge the i bins into `levels` groups, spread each group's mass over its non-empty bins
        groups = np.array_split(np.arange(i), levels)
        cand = np.zeros(i)
        for g in groups:
            nonzero = mag[g] > 0
            if nonzero.any():
                cand[g[nonzero]] = mag[g].sum() / nonzero.sum()
        if ref.sum() == 0 or cand.sum() == 0:
            continue
        pr, qr = ref / ref.sum(), cand / cand.sum()
        qr = np.where((pr > 0) & (qr == 0), 1e-12, qr)
        d = _kl(pr, qr)
        if d < best:
            best, best_i = d, i
    t = float(mag_edges[best_i])
    if lo >= 0.0:
        return 0.0, t
    if hi <= 0.0:
        return -t, 0.0
    return -t, t


def mse(counts: np.ndarray, edges: np.ndarray) -> tuple[float, float]:
    lo, hi = float(edges[0]), float(edges[-1])
    if counts.sum() == 0 or hi <= lo:
        return lo, hi
    centres = (edges[:-1] + edges[1:]) / 2
    weights = counts.astype(np.float64)
    best, best_range = np.inf, (lo, hi)
    for a in np.linspace(1.0, 0.005, 200):
        l, h = min(lo * a, 0.0), max(hi * a, 0.0)
        scale = (h - l) / 255.0
        if scale <= 0:
            continue
        zp = np.round(-128 - l / scale)
        q = np.clip(np.round(centres / scale + zp), -128, 127)
        err = float(np.sum(weights * (centres - (q - zp) * scale) ** 2))
        if err < best:
            best, best_range = err, (lo * a, hi * a)
    return best_range
