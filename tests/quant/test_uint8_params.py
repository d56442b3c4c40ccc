"""``input_range_params_uint8``: TensorFlow's uint8 ``quantized_input_stats`` (unsigned domain),
and the uint8 LOGISTIC table, against hand-derived values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qconvert import quant as qm


@pytest.mark.parametrize("lo, hi, zp_uint8", [
    (-1.0, 1.0, 128),  # mean 127.5 rounds up in the unsigned domain (the int8 path: -0.5 -> -1)
    (0.0, 1.0, 0),
    (-0.5, 1.5, 64),  # mean 63.75
    (-2.0, 0.0, 255),
])
def test_input_range_params_uint8(lo: float, hi: float, zp_uint8: int) -> None:
    p = qm.input_range_params_uint8(lo, hi)
    assert p.zero_point == (zp_uint8 - 128,) and p.dtype == "int8"  # int8 storage until the uint8 shift
    assert math.isclose(p.scale[0], (hi - lo) / 255.0, rel_tol=1e-6)


def test_uint8_logistic_table_is_the_int8_table_shifted() -> None:
    """In float32 the uint8 table of (s, z + 128) -> (1/256, 0) is the int8 table of (s, z) -> (1/256, -128)
    plus 128, index x + 128 (the same real inputs and outputs); stored as int8 bit patterns."""
    s, z = 0.0274776, -6
    t8 = np.array(qm.activation_table(qm.logistic_float32, s, z, 1 / 256, -128), np.int64)
    tu = np.array(qm.activation_table(qm.logistic_float32, s, z + 128, 1 / 256, 0, "uint8"), np.int8).view(np.uint8)
    x8 = np.arange(-128, 128)
    assert np.array_equal(tu[(x8 + 128).astype(np.uint8)].astype(np.int64), t8[x8.astype(np.uint8)] + 128)
    assert tu[255] > tu[0]  # uint8 order: 0 is the smallest input
