"""Tests for qconvert.quant.

Three layers: values worked out by hand (the derivation is in the comments),
hypothesis properties, and oracles that run TensorFlow 2.21 / LiteRT itself
(skipped when TensorFlow is not installed).
"""

from __future__ import annotations

import dataclasses
import math
import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qconvert import quant as qm
from qconvert.ir import QuantParams
from qconvert.quant import fake_quant

F32 = np.float32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# ---------------------------------------------------------------------------
# Hand-derived values: FakeQuant parameters (unsigned domain, then -128)


def test_fake_quant_symmetric_unit_range():
    # [-1, 1], qmin 0, qmax 255: scale = 2/255.
    # zp_from_min = 0 - (-1)/(2/255) = 127.5 (error 0 + 127.5)
    # zp_from_max = 255 - 1/(2/255) = 127.5 (error 255 + 127.5): min wins.
    # round(127.5) = 128 (ties away, in the unsigned domain) -> int8 zp 0.
    p = qm.fake_quant_params(-1.0, 1.0)
    assert p.scale == (2.0 / 255.0,)
    assert p.zero_point == (0,)
    assert (p.qmin, p.qmax, p.axis, p.dtype) == (-128, 127, None, "int8")


def test_fake_quant_narrow_weights():
    # narrow: qmin 1, qmax 255, 254 steps: scale = 1/254.
    # zp_from_min = 1 + 0.5*254 = 128 exactly -> int8 0, storage [-127, 127].
    p = qm.fake_quant_params(-0.5, 0.5, narrow_range=True)
    assert p.scale == (1.0 / 254.0,)
    assert p.zero_point == (0,)
    assert (p.qmin, p.qmax) == (-127, 127)


def test_fake_quant_relu6_range():
    # [0, 6]: scale 6/255, zp_from_min = 0 - 0 = 0 -> int8 -128.
    p = qm.fake_quant_params(0.0, 6.0)
    assert p.scale == (6.0 / 255.0,)
    assert p.zero_point == (-128,)


def test_fake_quant_negative_range():
    # [-6, 0]: zp_from_min = 0 + 255 = 255 (error 255), zp_from_max = 255 - 0
    # (error 255 + 0): errors tie, so the max candidate is used: 255 -> 127.
    p = qm.fake_quant_params(-6.0, 0.0)
    assert p.scale == (6.0 / 255.0,)
    assert p.zero_point == (127,)


def test_fake_quant_range_without_zero_is_shifted():
    # [1, 3]: scale 2/255; zp_from_min = 0 - 1/(2/255) = -127.5 < 0, zp_from_max
    # = 255 - 382.5 < 0: clamped to qmin = 0 -> int8 -128. The scale is kept, so
    # the representable range becomes [0, 2] (shifted to contain 0).
    p = qm.fake_quant_params(1.0, 3.0)
    assert p.scale == (2.0 / 255.0,)
    assert p.zero_point == (-128,)
    # [-3, -1]: zp candidates 382.5 and 255+127.5 > 255: clamped to 255 -> 127.
    q = qm.fake_quant_params(-3.0, -1.0)
    assert q.scale == (2.0 / 255.0,)
    assert q.zero_point == (127,)


def test_fake_quant_tiny_range_is_expanded():
    # width 1e-7 <= 1e-6: ExpandVerySmallRange gives [-5e-7, 5e-7]: scale 1e-6/255.
    # zp_from_min = 5e-7 / (1e-6/255) = 127.49999999999999 in double -> 127 -> -1
    # (TF agrees; see the converter oracle). The narrow version: 1 + 127 -> 0.
    p = qm.fake_quant_params(0.0, 1e-7)
    assert p.scale == ((5e-7 - -5e-7) / 255.0,)
    assert p.zero_point == (-1,)
    assert qm.fake_quant_params(0.0, 0.0).scale == p.scale
    assert qm.fake_quant_params(0.0, 1e-7, narrow_range=True).zero_point == (0,)


def test_fake_quant_reads_min_max_as_float32():
    # 0.1 is not a float32; the converter sees float32(0.1) widened to double.
    p = qm.fake_quant_params(-0.1, 0.1)
    assert p.scale == ((float(F32(0.1)) - float(F32(-0.1))) / 255.0,)


def test_fake_quant_num_bits_below_8_keep_their_grid():
    # TensorFlow's getDefaultStorageParams takes the storage type's range (7 bits onto 0..255,
    # 3 bits onto 0..15); qconvert keeps the grid the FakeQuant trained on. By hand, 7 bits
    # over [-3, 4]: scale 7/127, zp 0 - (-3)/(7/127) = 54.43 -> 54 unsigned -> 54 - 64 = -10.
    p = qm.fake_quant_params(-3.0, 4.0, num_bits=7)
    assert (p.scale, p.zero_point, p.qmin, p.qmax, p.dtype) == ((7.0 / 127.0,), (-10,), -64, 63, "int8")
    # 4 bits narrow over [-m, m]: scale 2m/14 = m/7, zp 1 + 7 = 8 -> 0, range [-7, 7], INT4 storage
    q = qm.fake_quant_params_per_channel([-0.875, -1.75], [0.875, 1.75], 4, True, 0)
    assert (q.scale, q.zero_point, q.qmin, q.qmax, q.dtype) == ((0.125, 0.25), (0, 0), -7, 7, "int4")
    # 2 bits narrow: {-m, 0, m}; stored int8
    r = qm.fake_quant_params(-0.5, 0.5, num_bits=2, narrow_range=True)
    assert (r.scale, r.zero_point, r.qmin, r.qmax, r.dtype) == ((0.5,), (0,), -1, 1, "int8")
    with pytest.raises(ValueError):
        qm.fake_quant_params(-1.0, 1.0, num_bits=1)


def test_fake_quant_per_channel():
    p = qm.fake_quant_params_per_channel([-1.0, -0.5, 0.0], [1.0, 0.5, 6.0], 8, True, 3)
    assert p.axis == 3
    assert p.scale == (2.0 / 254.0, 1.0 / 254.0, 6.0 / 254.0)
    # narrow: zp_from_min = 1 + 127 = 128 -> 0, twice, then 1 - 0 = 1 -> -127.
    assert p.zero_point == (0, 0, -127)
    assert (p.qmin, p.qmax) == (-127, 127)
    with pytest.raises(ValueError):
        qm.fake_quant_params_per_channel([-1.0], [1.0, 2.0])


# ---------------------------------------------------------------------------
# Hand-derived values: input ranges (signed domain)


def test_input_range_unit_range_rounds_in_signed_domain():
    # [-1, 1]: std = 255/2 = 127.5, mean = -128 + 127.5 = -0.5 (both exact in
    # float32). min = (-128 + 0.5)/127.5 = -1, max = (127 + 0.5)/127.5 = 1.
    # Signed: zp_from_min = -128 + 127.5 = -0.5 (error 255.5), zp_from_max
    # = 127 - 127.5 = -0.5 (error 254.5) -> -0.5 rounds away to -1.
    # (The same range as a FakeQuant gives 0: the tie is broken upwards there.)
    p = qm.input_range_params(-1.0, 1.0)
    assert p.scale == (2.0 / 255.0,)
    assert p.zero_point == (-1,)
    assert (p.qmin, p.qmax) == (-128, 127)


def test_input_range_zero_to_one():
    # std = 255, mean = -128: min = 0, max = 1, zp_from_min = -128 exactly.
    assert qm.input_stats_for_range(0.0, 1.0) == (-128.0, 255.0)
    p = qm.input_range_params(0.0, 1.0)
    assert p.scale == (1.0 / 255.0,)
    assert p.zero_point == (-128,)


def test_input_stats_are_float32():
    # std = 255/3 = 85 exactly; mean = -128 - 0.1*85 = -136.5 in double, and
    # float32(-136.5) is exact; lo = 0.1 though: the min the converter sees is
    # (-128 - mean)/std = 0.1 computed from float32 values.
    mean, std = qm.input_stats_for_range(0.1, 3.1)
    p = qm.input_stats_params(mean, std)
    lo = (-128.0 - float(F32(mean))) / float(F32(std))
    hi = (127.0 - float(F32(mean))) / float(F32(std))
    assert p.scale == ((hi - lo) / 255.0,)
    with pytest.raises(ValueError):
        qm.input_stats_for_range(1.0, 1.0)


# ---------------------------------------------------------------------------
# Hand-derived values: constants, biases


def test_quantize_array_adds_zero_point_before_rounding():
    p = QuantParams(scale=(0.5,), zero_point=(3,))
    # -0.25/0.5 + 3 = 2.5 -> 3 (round(-0.5) + 3 would give 2).
    # 0.25/0.5 = 0.5 + 3 = 3.5 -> 4; 100 saturates at 127; -100 at -128.
    x = np.array([-0.25, 0.25, 100.0, -100.0], dtype=np.float32)
    assert qm.quantize_array(x, p).tolist() == [3, 4, 127, -128]
    assert qm.quantize_array(x, p).dtype == np.int8


def test_quantize_array_per_axis_narrow():
    p = QuantParams(scale=(0.1, 0.25), zero_point=(0, 0), axis=0, qmin=-127, qmax=127)
    x = np.array([[0.3, -20.0], [0.3, -0.375]], dtype=np.float32)
    # row 0 (scale 0.1): float32(0.3) = 0.30000001192... / 0.1 = 3.0000001 -> 3;
    #   -20 / 0.1 = -200 -> -127 (narrow storage).
    # row 1 (scale 0.25): 0.3 / 0.25 = 1.2 -> 1; -0.375 / 0.25 = -1.5 exactly -> -2.
    assert qm.quantize_array(x, p).tolist() == [[3, -127], [1, -2]]
    # float32(-0.015) = -0.01499999966...: / 0.01 = -1.4999999 -> -1, not -2.
    assert qm.quantize_array(np.float32(-0.015), QuantParams(scale=(0.01,), zero_point=(0,))) == -1


def test_quantize_bias():
    # round half away from zero of b/scale, clamped to int32.
    b = np.array([0.5, -0.5, 1.49, 1e12, -1e12], dtype=np.float32)
    assert qm.quantize_bias(b, 1.0).tolist() == [1, -1, 1, INT32_MAX, INT32_MIN]
    # per channel along the last axis
    assert qm.quantize_bias(np.array([1.0, 1.0], np.float32), [0.5, 0.25]).tolist() == [2, 4]


def test_bias_params():
    pin = QuantParams(scale=(0.02,), zero_point=(5,))
    pw = QuantParams(scale=(0.001,), zero_point=(0,), qmin=-127)
    b = qm.bias_params(pin, pw)
    assert b.scale == (0.02 * 0.001,)
    assert (b.zero_point, b.axis, b.qmin, b.qmax, b.dtype) == ((0,), None, INT32_MIN, INT32_MAX, "int32")
    pwc = QuantParams(scale=(0.001, 0.003), zero_point=(0, 0), axis=3, qmin=-127)
    bc = qm.bias_params(pin, pwc)
    assert bc.scale == (0.02 * 0.001, 0.02 * 0.003)
    assert (bc.zero_point, bc.axis) == ((0, 0), 0)


# ---------------------------------------------------------------------------
# Hand-derived values: QuantizeMultiplier


@pytest.mark.parametrize(
    ("m", "expected"),
    [
        (0.0, (0, 0)),
        (0.5, (2**30, 0)),  # frexp(0.5) = (0.5, 0); 0.5 * 2^31 = 2^30
        (1.0, (2**30, 1)),  # frexp(1) = (0.5, 1)
        (0.75, (3 * 2**29, 0)),  # 0.75 * 2^31 = 1610612736
        (3.0, (3 * 2**29, 2)),  # frexp(3) = (0.75, 2)
        (1 - 2**-40, (2**30, 1)),  # q*2^31 = 2^31 - 2^-9 rounds to 2^31: halve, shift+1
        (0.5 + 2**-32, (2**30 + 1, 0)),  # q*2^31 = 2^30 + 0.5: tie rounds away
        (2**-32, (2**30, -31)),  # frexp = (0.5, -31): kept
        (2**-33, (0, 0)),  # shift -32 < -31: flushed to zero
        (2**-40, (0, 0)),
    ],
)
def test_quantize_multiplier(m: float, expected: tuple[int, int]):
    assert qm.quantize_multiplier(m) == expected


def test_quantize_multiplier_range_checks():
    assert qm.quantize_multiplier_smaller_than_one_exp(0.25) == (2**30, -1)
    assert qm.quantize_multiplier_greater_than_one(3.0) == (3 * 2**29, 2)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError):
            qm.quantize_multiplier_smaller_than_one_exp(bad)
    with pytest.raises(ValueError):
        qm.quantize_multiplier_greater_than_one(1.0)


# ---------------------------------------------------------------------------
# Hand-derived values: kernel Prepare parameters


def test_conv_requant_per_channel_double_product():
    # 0.5 * 0.25 / 0.125 = 1 -> (2^30, 1); 0.5 * 0.125 / 0.125 = 0.5 -> (2^30, 0)
    assert qm.conv_requant(0.5, [0.25, 0.125], 0.125) == [(2**30, 1), (2**30, 0)]
    assert qm.conv_requant(0.5, 0.25, 0.125, num_channels=3) == [(2**30, 1)] * 3


def test_fully_connected_per_tensor_uses_float_product():
    # GetQuantizedConvolutionMultipler rounds in*w to float32 before dividing:
    # for these scales the multiplier differs from the double-product one.
    a, w, o = F32(0.06406), F32(0.003428), F32(0.01778)
    fc = qm.fully_connected_requant(a, w, o)
    assert fc == [qm.quantize_multiplier(float(F32(a * w)) / float(o))]
    assert fc == [(1697484557, -6)]
    assert qm.conv_requant(a, w, o) == [(1697484599, -6)]
    # per-channel FC takes the double product, like conv
    assert qm.fully_connected_requant(a, [w, w], o) == [(1697484599, -6)] * 2
    # the bias-scale sanity check (<= 0.02 of an output step)
    qm.fully_connected_requant(a, w, o, bias_scale=float(a) * float(w))
    with pytest.raises(ValueError):  # 0.05 of an output step off
        qm.fully_connected_requant(a, w, o, bias_scale=float(a) * float(w) + 0.05 * float(o))


def test_mul_requant_uses_float_arithmetic():
    assert qm.mul_requant(0.5, 0.5, 0.25) == (2**30, 1)
    a, b, c = F32(0.00429), F32(0.163), F32(0.183)
    assert qm.mul_requant(a, b, c) == (2100698240, -8)
    assert qm.quantize_multiplier(float(a) * float(b) / float(c)) == (2100698162, -8)


def test_add_sub_requant():
    # twice_max = 2 * 0.1f = 0.2f exactly; input1: 0.1f/0.2f = 0.5 -> (2^30, 0).
    # input2: 0.05f/0.2f ~ 0.25 -> shift -1. output: 0.2f / (2^20 * 0.2f) = 2^-20
    # exactly -> frexp = (0.5, -19) -> (2^30, -19).
    p = qm.add_sub_requant(0.1, 0.05, 0.2)
    assert p["left_shift"] == 20
    assert p["input1"] == (2**30, 0)
    assert p["input2"][1] == -1
    assert p["output"] == (2**30, -19)
    # output scale so small the output multiplier exceeds 1:
    # 2 / (2^20 * 7.84e-9) ~ 243. SUB switches to GreaterThanOne; ADD aborts.
    tiny = 2e-6 / 255
    s = qm.add_sub_requant(1.0, 1.0, tiny, is_sub=True)
    assert s["output"][1] == 8  # 243 = 0.95 * 2^8
    with pytest.raises(ValueError):
        qm.add_sub_requant(1.0, 1.0, tiny)


def test_quantize_requant():
    assert qm.quantize_requant(0.5, 0.25) == (2**30, 2)
    assert qm.quantize_requant(0.25, 0.5) == (2**30, 0)


def test_mean_requant():
    # in/out = 1 -> (2^30, 1). n = 4: k = min(2, 32, 32) = 2,
    # folded = (2^30 << 2) / 4 = 2^30, shift 1 - 2 = -1: 2^30 * 2^-32 = 1/4.
    p = qm.mean_requant(0.1, 3, 0.1, 3, 4)
    assert (p.multiplier, p.shift, p.folded_multiplier, p.folded_shift) == (2**30, 1, 2**30, -1)
    assert p.same_params
    # n = 49: k = 5 (32 <= 49 < 64); folded = (2^30 * 32) // 49
    q = qm.mean_requant(0.1, 3, 0.05, -2, 49)
    assert (q.multiplier, q.shift) == (2**30, 2)
    assert (q.folded_multiplier, q.folded_shift) == ((2**30 * 32) // 49, -3)
    assert not q.same_params


@pytest.mark.parametrize(
    ("act", "scale", "zp", "expected"),
    [
        ("NONE", 0.1, 0, (-128, 127)),
        ("RELU", 0.1, 5, (5, 127)),
        ("RELU", 0.1, -130, (-128, 127)),  # quantize(0) = -130 clamps to qmin
        # 6 / (6/255 as float32) = 255 -> -128 + 255 = 127
        ("RELU6", 6.0 / 255.0, -128, (-128, 127)),
        # 6 / 0.1f = 59.999999 -> 60
        ("RELU6", 0.1, 0, (0, 60)),
        ("RELU6", 0.01, 0, (0, 127)),  # 600 clamps to qmax
        ("RELU_N1_TO_1", 1.0 / 64, 10, (-54, 74)),
        # -1/2 = -0.5 rounds away to -1, 1/2 to 1
        ("RELU_N1_TO_1", 2.0, 0, (-1, 1)),
    ],
)
def test_activation_range(act: str, scale: float, zp: int, expected: tuple[int, int]):
    assert qm.activation_range(act, scale, zp) == expected


def test_activation_range_rejects_unknown():
    with pytest.raises(ValueError):
        qm.activation_range("TANH", 0.1, 0)


# ---------------------------------------------------------------------------
# Hand-derived values: fixed point


def test_fixed_point_examples():
    srdhm = qm.saturating_rounding_doubling_high_mul
    assert srdhm(2**30, 2**30) == 2**29  # 2^60 / 2^31
    assert srdhm(INT32_MIN, INT32_MIN) == INT32_MAX  # the one overflow
    assert srdhm(1, 2**30) == 1  # 0.5 rounds up
    assert srdhm(-1, 2**30) == 0  # -0.5 also rounds up (toward +inf)
    assert srdhm(3, 2**30) == 2 and srdhm(-3, 2**30) == -1
    rdbpot = qm.rounding_divide_by_pot
    assert [rdbpot(v, 1) for v in (5, -5, 3, -3, 1, -1)] == [3, -3, 2, -2, 1, -1]  # ties away
    assert rdbpot(-7, 0) == -7
    assert rdbpot(INT32_MIN, 31) == -1
    mbqm = qm.multiply_by_quantized_multiplier
    assert mbqm(100, 2**30, 0) == 50
    assert mbqm(100, 2**30, 1) == 100
    assert mbqm(100, 2**30, -2) == 13  # 100 / 8 = 12.5 -> 13
    assert mbqm(-100, 2**30, -2) == -13
    v = mbqm(np.array([100, -100, 7]), np.array([2**30, 2**30, 2**30]), np.array([-2, -2, 3]))
    assert v.tolist() == [13, -13, 28]
    assert qm.multiply_by_quantized_multiplier_single_rounding(-100, 2**30, -2) == -12  # ties up


def test_mean_hw_reference_rounds_division_away():
    # MBQM(acc, 2^30, 1) = acc, then (acc +- n/2) / n truncated.
    assert qm.mean_hw_reference(np.array([10, -10, 6, -6]), 2**30, 1, 4).tolist() == [3, -3, 2, -2]


def test_round_half_away():
    assert [qm.round_half_away(v) for v in (0.5, -0.5, 1.5, -2.5, 0.49999999999999994)] == [1, -1, 2, -3, 0]
    x = np.array([0.5, -0.5, 2.5, 0.49999997], dtype=np.float32)
    assert qm.round_half_away_array(x).tolist() == [1.0, -1.0, 3.0, 0.0]


def test_fake_quant_float32_examples():
    # [-1, 1], 8 bits, all float32: scale = float32(2/255) = 0.007843138 is a
    # hair above 2/255, so zero_point_from_min = 1/scale = 127.49999 rounds to
    # 127 (the converter, in double, gets exactly 127.5 -> 128). Nudged range:
    # [-127, 128] * scale. Outputs are (q - zp) * scale: 0 stays 0, 10 clamps
    # to 128 steps, -10 to -127 steps, and half a step above 0 rounds up
    # (floor(v + 0.5)) while half a step below rounds up to 0.
    s = F32(F32(2.0) / F32(255.0))
    x = np.array([0.0, 10.0, -10.0, s / 2, -s / 2], dtype=np.float32)
    out = qm.fake_quant_float32(x, -1.0, 1.0)
    assert out.tolist() == [0.0, F32(128 * s), F32(-127 * s), s, 0.0]
    assert np.all(qm.fake_quant_float32(x, 0.0, 0.0) == 0.0)  # Vars: min == max == 0
    per = qm.fake_quant_float32(np.ones((2, 2), np.float32), [-1.0, 0.0], [1.0, 0.0], per_channel=True)
    assert per[:, 1].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError):
        qm.fake_quant_float32(x, -1.0, 1.0, variant="nope")


# ---------------------------------------------------------------------------
# Hypothesis properties


def _rha(f: Fraction) -> int:
    """Exact round-half-away of a rational."""
    a = abs(f)
    r = math.floor(a + Fraction(1, 2))
    return -r if f < 0 else r


def _ref_srdhm(a: int, b: int) -> int:
    """Exact round-to-nearest of a*b/2^31 with ties toward +inf (gemmlowp)."""
    if a == b == INT32_MIN:
        return INT32_MAX
    return math.floor(Fraction(a * b, 2**31) + Fraction(1, 2))


def _ref_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return _rha(Fraction(_ref_srdhm(x * 2**left, m), 2**right))


int32s = st.integers(INT32_MIN, INT32_MAX)
multipliers = st.integers(2**30, INT32_MAX)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=2.0**-31, max_value=2.0**30, allow_nan=False))
def test_quantize_multiplier_reconstructs(m: float):
    q, shift = qm.quantize_multiplier(m)
    assert 2**30 <= q <= INT32_MAX
    approx = Fraction(q) * Fraction(2) ** (shift - 31)
    assert abs(approx - Fraction(m)) <= Fraction(m) * Fraction(1, 2**31)


@settings(max_examples=300, deadline=None)
@given(int32s, int32s)
def test_srdhm_matches_exact_rounding(a: int, b: int):
    want = _ref_srdhm(a, b)
    srdhm = qm.saturating_rounding_doubling_high_mul
    assert srdhm(a, b) == want  # Python ints: the scalar path
    assert srdhm(np.int64(a), np.int64(b)) == want  # numpy scalars and arrays: the vector path
    assert srdhm(np.array([a, b]), np.array([b, a])).tolist() == [want, want]


@settings(max_examples=300, deadline=None)
@given(int32s, st.integers(0, 31))
def test_rounding_divide_by_pot_matches_exact_rounding(x: int, e: int):
    assert qm.rounding_divide_by_pot(x, e) == _rha(Fraction(x, 2**e))


@settings(max_examples=500, deadline=None)
@given(int32s, multipliers, st.integers(-31, 30))
def test_mbqm_matches_rational_reference(x: int, m: int, shift: int):
    assume(INT32_MIN <= x * 2 ** max(shift, 0) <= INT32_MAX)
    assert qm.multiply_by_quantized_multiplier(x, m, shift) == _ref_mbqm(x, m, shift)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**20), 2**20), multipliers, st.integers(-31, 10)), min_size=1, max_size=20))
def test_mbqm_vectorised_equals_scalar(rows: list[tuple[int, int, int]]):
    xs, ms, ss = (np.array(c, dtype=np.int64) for c in zip(*rows))
    vec = qm.multiply_by_quantized_multiplier(xs, ms, ss)
    assert vec.tolist() == [qm.multiply_by_quantized_multiplier(int(a), int(b), int(c)) for a, b, c in rows]


finite_bounds = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)


# The vectorised per-channel paths against the per-tensor (scalar) ones, which the
# hand-derived and TensorFlow-oracle tests above pin down.
tiny_or_finite = st.one_of(finite_bounds, st.floats(-1e-6, 1e-6).map(lambda v: float(np.float32(v))), st.just(0.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(tiny_or_finite, tiny_or_finite), min_size=1, max_size=16), st.booleans())
def test_per_channel_params_equal_per_tensor_params(ranges: list[tuple[float, float]], narrow: bool):
    ranges = [(min(a, b), max(a, b)) for a, b in ranges]
    p = qm.fake_quant_params_per_channel([r[0] for r in ranges], [r[1] for r in ranges], 8, narrow, 3)
    singles = [qm.fake_quant_params(lo, hi, narrow_range=narrow) for lo, hi in ranges]
    assert p.scale == tuple(q.scale[0] for q in singles)
    assert p.zero_point == tuple(q.zero_point[0] for q in singles)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(min_value=2.0**-40, max_value=2.0**30), st.just(0.0)), min_size=1, max_size=16))
def test_quantize_multiplier_array_equals_scalar(ms: list[float]):
    assert qm.quantize_multiplier_array(np.array(ms)) == [qm.quantize_multiplier(m) for m in ms]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(tiny_or_finite, tiny_or_finite), min_size=1, max_size=8), st.integers(2, 16), st.booleans(),
       st.lists(st.floats(min_value=-2e4, max_value=2e4, width=32), min_size=8, max_size=8))
def test_fake_quant_float32_per_channel_equals_per_tensor_args(ranges, bits, narrow, values):
    """Per channel, TF's kernel is the Args kernel (multiply by inv_scale) applied channel by channel."""
    lo = np.array([min(a, b) for a, b in ranges], np.float32)
    hi = np.array([max(a, b) for a, b in ranges], np.float32)
    x = np.array(values, np.float32)[: len(ranges)].reshape(1, -1)
    x = np.resize(x, (3, len(ranges)))
    got = qm.fake_quant_float32(x, lo, hi, bits, narrow, per_channel=True)
    for c in range(len(ranges)):
        if lo[c] == 0 and hi[c] == 0:
            assert not got[:, c].any()
            continue
        want = qm.fake_quant_float32(x[:, c], lo[c], hi[c], bits, narrow, variant="args")
        np.testing.assert_array_equal(got[:, c], want)


@settings(max_examples=400, deadline=None)
@given(finite_bounds, finite_bounds, st.booleans())
def test_fake_quant_params_properties(a: float, b: float, narrow: bool):
    lo, hi = min(a, b), max(a, b)
    p = qm.fake_quant_params(lo, hi, narrow_range=narrow)
    (scale,), (zp,) = p.scale, p.zero_point
    assert scale > 0
    assert p.qmin <= zp <= p.qmax
    assert (p.qmin, p.qmax) == ((-127 if narrow else -128), 127)
    # 0.0 is exactly representable: it quantizes to the zero point.
    assert int(qm.quantize_array(np.float32(0.0), p)) == zp
    if lo <= 0 <= hi and hi - lo > 1e-6:
        # nudging moves the range by at most half a step
        assert abs((p.qmin - zp) * scale - lo) <= scale / 2 * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(finite_bounds, finite_bounds)
def test_input_range_params_properties(a: float, b: float):
    assume(abs(a - b) > 1e-3)
    lo, hi = min(a, b), max(a, b)
    p = qm.input_range_params(lo, hi)
    assert -128 <= p.zero_point[0] <= 127
    assert math.isclose(p.scale[0], (hi - lo) / 255.0, rel_tol=1e-6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=1, max_size=30),
    st.floats(1e-3, 10, allow_nan=False),
    st.integers(-128, 127),
)
def test_quantize_array_error_bound(values: list[float], scale: float, zp: int):
    p = QuantParams(scale=(scale,), zero_point=(zp,))
    x = np.array(values, dtype=np.float32)
    q = qm.quantize_array(x, p).astype(np.int64)
    assert q.min() >= -128 and q.max() <= 127
    real = (q - zp) * scale
    inside = (x >= (-128 - zp) * scale) & (x <= (127 - zp) * scale)
    assert np.all(np.abs(real[inside] - x[inside]) <= scale / 2 * (1 + 1e-6))


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1e-4, 1.0, allow_nan=False),
    st.floats(1e-4, 1.0, allow_nan=False),
    st.integers(1, 4096),
)
def test_mean_requant_folds_one_over_n(s_in: float, s_out: float, n: int):
    p = qm.mean_requant(s_in, 0, s_out, 0, n)
    assert 0 <= p.folded_multiplier <= INT32_MAX
    exact = Fraction(p.multiplier) * Fraction(2) ** (p.shift - 31) / n
    folded = Fraction(p.folded_multiplier) * Fraction(2) ** (p.folded_shift - 31)
    if p.multiplier:
        assert abs(folded - exact) <= exact * Fraction(1, 2**29)


@settings(max_examples=200, deadline=None)
@given(finite_bounds, finite_bounds, st.integers(2, 8), st.booleans())
def test_fake_quant_float32_lands_on_grid(a: float, b: float, bits: int, narrow: bool):
    lo, hi = min(a, 0.0, b), max(a, 0.0, b)
    assume(hi - lo > 1e-3)
    x = np.linspace(lo * 1.5 - 1, hi * 1.5 + 1, 101, dtype=np.float32)
    out = qm.fake_quant_float32(x, lo, hi, bits, narrow)
    nlo, nhi, sc, _ = fake_quant._nudge_f32(F32(lo), F32(hi), int(narrow), (1 << bits) - 1)
    k = np.round(out.astype(np.float64) / float(sc))
    assert np.array_equal(out, (k * sc).astype(np.float32))  # (q - zp) * scale
    assert k.min() >= round(float(nlo) / float(sc)) and k.max() <= round(float(nhi) / float(sc))
    assert np.all(np.diff(out) >= 0)  # monotone


# ---------------------------------------------------------------------------
# Oracles: TensorFlow 2.21 and LiteRT


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def litert():
    return pytest.importorskip("ai_edge_litert.interpreter")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.int32)


def _random_range(rng: np.random.Generator, kind: int) -> tuple[float, float]:
    if kind == 1:  # excludes 0 (above)
        lo = float(rng.uniform(0.05, 2))
        return lo, lo + float(rng.uniform(0.1, 3))
    if kind == 2:  # excludes 0 (below)
        hi = -float(rng.uniform(0.05, 2))
        return hi - float(rng.uniform(0.1, 3)), hi
    if kind == 3:
        return 0.0, float(np.exp(rng.uniform(-6, 3)))
    return -float(np.exp(rng.uniform(-8, 4))), float(np.exp(rng.uniform(-8, 4)))


def test_oracle_fake_quant_per_tensor(tf):
    rng = np.random.default_rng(1234)
    for case in range(300):
        bits = int(rng.choice([8, 8, 8, 8, 7, 4, 2, 12, 16]))
        narrow = bool(rng.integers(2))
        lo, hi = (F32(v) for v in _random_range(rng, case % 5))
        x = (rng.standard_normal(257) * max(abs(lo), abs(hi)) * 1.3).astype(np.float32)
        # exact grid points and half-steps exercise the ties
        nlo, _, sc, _ = fake_quant._nudge_f32(lo, hi, int(narrow), (1 << bits) - 1)
        k = np.arange(-3, 40, dtype=np.float32)
        x[: k.size] = (nlo + k * sc).astype(np.float32)
        x[k.size : 2 * k.size] = (nlo + (k + F32(0.5)) * sc).astype(np.float32)
        got_vars = qm.fake_quant_float32(x, lo, hi, bits, narrow, variant="vars")
        ref_vars = tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=bits, narrow_range=narrow)
        assert np.array_equal(_bits(got_vars), _bits(ref_vars.numpy())), (case, bits, narrow, lo, hi)
        got_args = qm.fake_quant_float32(x, lo, hi, bits, narrow, variant="args")
        ref_args = tf.quantization.fake_quant_with_min_max_args(
            x, min=float(lo), max=float(hi), num_bits=bits, narrow_range=narrow
        )
        assert np.array_equal(_bits(got_args), _bits(ref_args.numpy())), (case, bits, narrow, lo, hi)


def test_oracle_fake_quant_per_channel(tf):
    rng = np.random.default_rng(99)
    for case in range(120):
        bits = int(rng.choice([8, 8, 7, 4]))
        narrow = bool(rng.integers(2))
        c = int(rng.integers(1, 9))
        bounds = [_random_range(rng, int(rng.integers(5))) for _ in range(c)]
        if case % 10 == 0:
            bounds[0] = (0.0, 0.0)
        lo = np.array([b[0] for b in bounds], np.float32)
        hi = np.array([b[1] for b in bounds], np.float32)
        shape = [(c,), (4, c), (2, 3, c), (1, 2, 2, c)][case % 4]
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        got = qm.fake_quant_float32(x, lo, hi, bits, narrow, per_channel=True)
        ref = tf.quantization.fake_quant_with_min_max_vars_per_channel(x, lo, hi, num_bits=bits, narrow_range=narrow)
        assert np.array_equal(_bits(got), _bits(ref.numpy())), (case, bits, narrow)


def test_oracle_fake_quant_on_arrays_of_several_blocks(tf):
    """The kernel works on blocks of 32 K elements (rows of whole channels): sizes that are not
    a multiple of a block, a channel count that does not divide one, a channel with min = max = 0."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(100_003) * 2).astype(np.float32)
    for variant, ref in (("vars", tf.quantization.fake_quant_with_min_max_vars(x, -1.5, 2.25)),
                         ("args", tf.quantization.fake_quant_with_min_max_args(x, min=-1.5, max=2.25))):
        assert np.array_equal(_bits(qm.fake_quant_float32(x, -1.5, 2.25, variant=variant)), _bits(ref.numpy()))
    w = (rng.standard_normal((3, 3, 70, 129)) * 0.3).astype(np.float32)
    hi = np.abs(rng.standard_normal(129)).astype(np.float32) * 0.5
    hi[7] = 0.0
    got = qm.fake_quant_float32(w, -hi, hi, 8, True, per_channel=True)
    ref = tf.quantization.fake_quant_with_min_max_vars_per_channel(w, -hi, hi, narrow_range=True)
    assert np.array_equal(_bits(got), _bits(ref.numpy())) and not got[..., 7].any()


def _convert(tf, graph_def, inputs: list[str], outputs: list[str], stats: dict[str, tuple[float, float]], tmp_path):
    path = os.path.join(str(tmp_path), "graph.pb")
    with open(path, "wb") as f:
        f.write(graph_def.SerializeToString())
    conv = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, inputs, outputs)
    conv.inference_type = tf.int8
    conv.quantized_input_stats = stats
    return conv.convert()


def test_oracle_converter_fake_quant_and_input_params(tf, litert, tmp_path):
    """x_i (stats from [a, b]) -> ADD(x_i, x_i) -> FakeQuant(lo, hi) -> out_i.

    The ADD keeps the input from taking the FakeQuant's params, so both the
    input tensor (quantized_input_stats) and the output tensor (FakeQuant) can
    be compared with what TF writes."""
    rng = np.random.default_rng(2024)
    fixed = [((-1.0, 1.0, False), (-1.0, 1.0)), ((-1.0, 1.0, True), (0.0, 1.0)), ((0.0, 6.0, False), (-6.0, 6.0)),
             ((-6.0, 0.0, True), (0.1, 3.1)), ((0.0, 1e-7, False), (-0.5, 0.5)), ((0.0, 1e-7, True), (-3.0, 1.0)),
             ((1.0, 3.0, False), (-2.0, 2.0)), ((-3.0, -1.0, False), (-1.0, 1.0)), ((0.0, 0.0, False), (0.0, 1.0))]
    cases = list(fixed)
    for i in range(40):
        lo, hi = _random_range(rng, i % 5)
        a, b = -float(np.exp(rng.uniform(-4, 3))), float(np.exp(rng.uniform(-4, 3)))
        cases.append(((lo, hi, bool(i % 3 == 0)), (a, b)))
    g = tf.Graph()
    with g.as_default():
        for i, ((lo, hi, narrow), _) in enumerate(cases):
            x = tf.compat.v1.placeholder(tf.float32, [1, 4], name=f"in{i}")
            y = tf.quantization.fake_quant_with_min_max_vars(
                tf.add(x, x), tf.constant(lo, tf.float32), tf.constant(hi, tf.float32), narrow_range=narrow
            )
            tf.identity(y, name=f"out{i}")
    names = range(len(cases))
    stats = {f"in{i}": qm.input_stats_for_range(*cases[i][1]) for i in names}
    model = _convert(tf, g.as_graph_def(), [f"in{i}" for i in names], [f"out{i}" for i in names], stats, tmp_path)
    it = litert.Interpreter(model_content=model)
    seen = 0
    for d in it.get_input_details() + it.get_output_details():
        name = d["name"]
        if name.startswith("in"):
            i = int(name[2:])
            p = qm.input_range_params(*cases[i][1])
        else:
            i = int(name[3:])
            lo, hi, narrow = cases[i][0]
            p = qm.fake_quant_params(lo, hi, 8, narrow)
        scale, zp = d["quantization"]
        assert (F32(scale), zp) == (F32(p.scale[0]), p.zero_point[0]), (name, cases[i])
        seen += 1
    assert seen == 2 * len(cases)


def test_oracle_converter_conv_weights_and_bias(tf, litert, tmp_path):
    """Per-channel FakeQuant weights, bias, and a 7-bit output FakeQuant (which TensorFlow quantizes
    onto 255 steps, qconvert only with --low-bit-activations 8bit)."""
    rng = np.random.default_rng(7)
    c = 6
    w = (rng.standard_normal((3, 3, 3, c)) * 0.3).astype(np.float32)
    wmax = (np.abs(w).max(axis=(0, 1, 2)) * 0.9).astype(np.float32)
    b = (rng.standard_normal(c) * 0.5).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 5, 5, 3], name="x")
        xq = tf.quantization.fake_quant_with_min_max_vars(x, tf.constant(-1.3), tf.constant(2.1))
        wq = tf.quantization.fake_quant_with_min_max_vars_per_channel(
            tf.constant(w), tf.constant(-wmax), tf.constant(wmax), narrow_range=True
        )
        y = tf.nn.bias_add(tf.nn.conv2d(xq, wq, strides=1, padding="SAME"), tf.constant(b))
        y = tf.quantization.fake_quant_with_min_max_vars(y, tf.constant(-3.0), tf.constant(4.0), num_bits=7)
        tf.identity(y, name="out")
    model = _convert(tf, g.as_graph_def(), ["x"], ["out"], {"x": (0.0, 1.0)}, tmp_path)
    it = litert.Interpreter(model_content=model)
    details = it.get_tensor_details()

    p_in = qm.fake_quant_params(-1.3, 2.1)  # the input takes the FakeQuant's params
    p_w = qm.fake_quant_params_per_channel((-wmax).tolist(), wmax.tolist(), 8, True, 3)
    p_out = qm.fake_quant_params(-3.0, 4.0, num_bits=8)  # TF takes the 7-bit activation at 8-bit resolution
    w_fq = qm.fake_quant_float32(w, -wmax, wmax, 8, True, per_channel=True)  # folded by TF first
    w_expect = qm.quantize_array(np.transpose(w_fq, (3, 0, 1, 2)), dataclasses.replace(p_w, axis=0))
    p_b = qm.bias_params(p_in, p_w)
    b_expect = qm.quantize_bias(b, p_b.scale)

    by_role = {}
    for d in details:
        if d["dtype"] == np.int8 and len(d["shape"]) == 4 and d["shape"][0] == c:
            by_role["w"] = d
        elif d["dtype"] == np.int32 and len(d["shape"]) == 1:
            by_role["b"] = d
        elif d["name"] == "x":
            by_role["x"] = d
        elif d["name"] == "out":
            by_role["out"] = d
    assert set(by_role) == {"w", "b", "x", "out"}

    def check(d, p: QuantParams) -> None:
        q = d["quantization_parameters"]
        assert np.array_equal(q["scales"], np.asarray(p.scale, np.float32)), d["name"]
        assert q["zero_points"].tolist() == list(p.zero_point), d["name"]

    check(by_role["x"], p_in)
    check(by_role["out"], p_out)
    check(by_role["w"], p_w)
    check(by_role["b"], p_b)
    assert by_role["w"]["quantization_parameters"]["quantized_dimension"] == 0
    assert np.array_equal(it.get_tensor(by_role["w"]["index"]), w_expect)
    assert np.array_equal(it.get_tensor(by_role["b"]["index"]), b_expect)

    # Run the reference CONV_2D and compare with conv_requant + double rounding.
    ref = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    ref.allocate_tensors()
    sx, zx = by_role["x"]["quantization"]
    so, zo = by_role["out"]["quantization"]
    mults = qm.conv_requant(sx, by_role["w"]["quantization_parameters"]["scales"], so)
    mult = np.array([m for m, _ in mults])
    shift = np.array([s for _, s in mults])
    w_i = w_expect.astype(np.int64)
    for _ in range(20):
        xq = rng.integers(-128, 128, (1, 5, 5, 3)).astype(np.int8)
        ref.set_tensor(by_role["x"]["index"], xq)
        ref.invoke()
        padded = np.pad(xq.astype(np.int64) - zx, ((0, 0), (1, 1), (1, 1), (0, 0)))  # SAME, 3x3
        acc = b_expect.astype(np.int64) + sum(
            np.einsum("bhwc,oc->bhwo", padded[:, i : i + 5, j : j + 5, :], w_i[:, i, j, :])
            for i in range(3)
            for j in range(3)
        )
        expect = np.clip(qm.multiply_by_quantized_multiplier(acc, mult, shift) + zo, -128, 127)
        assert np.array_equal(ref.get_tensor(by_role["out"]["index"]), expect)


def test_oracle_runtime_requant(tf, litert, tmp_path):
    """Int8 ADD / SUB (+fused RELU6) / MUL / MEAN / FULLY_CONNECTED on LiteRT's
    reference kernels equal an emulation built from the *_requant helpers."""
    rng = np.random.default_rng(11)
    shape = (1, 4, 6)
    fq = {"add": (-2.0, 3.5), "sub": (-2.5, 2.0), "mul": (-0.9, 1.7), "mean": (-0.8, 1.4),
          "relu6sub": (-0.2, 6.0), "fc": (-3.0, 2.0)}
    w = (rng.standard_normal((6, 5)) * 0.4).astype(np.float32)
    wmax = float(np.abs(w).max())
    bias = (rng.standard_normal(5) * 0.3).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, shape, name="a")
        b = tf.compat.v1.placeholder(tf.float32, shape, name="b")

        def out(v, k):
            lo, hi = fq[k]
            y = tf.quantization.fake_quant_with_min_max_vars(v, tf.constant(lo), tf.constant(hi))
            tf.identity(y, name="o_" + k)

        out(a + b, "add")
        out(a - b, "sub")
        out(a * b, "mul")
        out(tf.reduce_mean(a, axis=[2]), "mean")
        out(tf.nn.relu6(b - a), "relu6sub")
        wq = tf.quantization.fake_quant_with_min_max_vars(tf.constant(w), tf.constant(-wmax), tf.constant(wmax),
                                                          narrow_range=True)
        out(tf.matmul(tf.reshape(a, [4, 6]), wq) + bias, "fc")
    stats = {"a": qm.input_stats_for_range(-1.7, 2.3), "b": qm.input_stats_for_range(-0.6, 0.9)}
    model = _convert(tf, g.as_graph_def(), ["a", "b"], ["o_" + k for k in fq], stats, tmp_path)
    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    td = {d["name"]: d for d in it.get_tensor_details()}
    ops = {o["op_name"] for o in it._get_ops_details()}
    assert {"ADD", "SUB", "MUL", "MEAN", "FULLY_CONNECTED"} <= ops

    def qp(name):
        return td[name]["quantization"]

    mbqm = qm.multiply_by_quantized_multiplier
    (sa, za), (sb, zb) = qp("a"), qp("b")

    def addsub(x1, z1, s1, x2, z2, s2, k, sign, act):
        so, zo = qp("o_" + k)
        p = qm.add_sub_requant(s1, s2, so, is_sub=sign < 0)
        v1 = mbqm((x1 - z1) * (1 << p["left_shift"]), *p["input1"])
        v2 = mbqm((x2 - z2) * (1 << p["left_shift"]), *p["input2"])
        lo, hi = qm.activation_range(act, so, zo)
        return np.clip(mbqm(v1 + sign * v2, *p["output"]) + zo, lo, hi)

    fc_w = [d for d in td.values() if d["dtype"] == np.int8 and tuple(d["shape"]) == (5, 6)][0]
    fc_b = [d for d in td.values() if d["dtype"] == np.int32 and tuple(d["shape"]) == (5,)][0]
    w_q = it.get_tensor(fc_w["index"]).astype(np.int64)
    b_q = it.get_tensor(fc_b["index"]).astype(np.int64)
    for _ in range(40):
        xa = rng.integers(-128, 128, shape).astype(np.int8)
        xb = rng.integers(-128, 128, shape).astype(np.int8)
        it.set_tensor(td["a"]["index"], xa)
        it.set_tensor(td["b"]["index"], xb)
        it.invoke()
        A, B = xa.astype(np.int64), xb.astype(np.int64)
        expect = {
            "add": addsub(A, za, sa, B, zb, sb, "add", 1, "NONE"),
            "sub": addsub(A, za, sa, B, zb, sb, "sub", -1, "NONE"),
            "relu6sub": addsub(B, zb, sb, A, za, sa, "relu6sub", -1, "RELU6"),
        }
        so, zo = qp("o_mul")
        expect["mul"] = np.clip(mbqm((A - za) * (B - zb), *qm.mul_requant(sa, sb, so)) + zo, -128, 127)
        so, zo = qp("o_mean")
        mp = qm.mean_requant(sa, za, so, zo, 6)
        expect["mean"] = np.clip(mbqm(A.sum(axis=2) - za * 6, mp.folded_multiplier, mp.folded_shift) + zo, -128, 127)
        so, zo = qp("o_fc")
        ((m, s),) = qm.fully_connected_requant(sa, fc_w["quantization"][0], so, bias_scale=fc_b["quantization"][0])
        acc = (A.reshape(4, 6) - za) @ w_q.T + b_q
        # LiteRT's FULLY_CONNECTED rounds once even on BUILTIN_REF (measured:
        # double rounding misses ~0.5% of outputs); MUL / MEAN / ADD round twice.
        expect["fc"] = np.clip(qm.multiply_by_quantized_multiplier_single_rounding(acc, m, s) + zo, -128, 127)
        for k, v in expect.items():
            got = it.get_tensor(td["o_" + k]["index"])
            assert np.array_equal(got, v.reshape(got.shape)), k


@pytest.mark.parametrize("value", [2, 3, 7, 100, 255, 1 << 20, (1 << 29) + 12345, 2**31 - 1])
def test_inv_sqrt_multiplier_is_one_over_sqrt(value: int) -> None:
    """GetInvSqrtQuantizedMultiplierExp's Newton-Raphson result against 1/sqrt(v) in double:
    five fixed-point steps from 1 get within 2e-6 (relative)."""
    from qconvert.quant.multipliers import inv_sqrt_quantized_multiplier

    m, shift = inv_sqrt_quantized_multiplier(value)
    assert abs(m * 2.0 ** (shift - 31) * np.sqrt(value) - 1.0) < 2e-6


def test_inv_sqrt_multiplier_array_is_the_scalar_steps() -> None:
    """The array form (RSQRT's tables) gives the scalar Newton iteration's pairs, bit for bit, on
    every value up to 2^16, the normalisation's edges and random int32 values."""
    from qconvert.quant.multipliers import inv_sqrt_quantized_multiplier, inv_sqrt_quantized_multiplier_array

    rng = np.random.default_rng(0)
    values = np.concatenate([np.arange(1 << 16), rng.integers(0, 2**31, 20000),
                             [(1 << 29) - 1, 1 << 29, (1 << 29) + 12345, 1 << 30, 2**31 - 1]])
    multipliers, shifts = inv_sqrt_quantized_multiplier_array(values)
    assert list(zip(multipliers.tolist(), shifts.tolist())) == [inv_sqrt_quantized_multiplier(int(v)) for v in values]


@pytest.mark.parametrize("in_zp", [-128, -3, 0, 57, 127, 300, -400])
def test_rsqrt_table_is_the_kernel_per_entry(in_zp: int) -> None:
    """RSQRT's array table against its Eval written per entry with our scalar functions: a consistency check of
    the vectorised form (the oracle is LiteRT: tests/runtime/test_interpreter.py::test_int8_rsqrt_table_is_litert_on_every_input_byte; zero points
    outside int8 included: the cached first step covers [0, 255] only)."""
    from qconvert.quant.multipliers import inv_sqrt_quantized_multiplier, rsqrt_table

    in_scale, out_scale, out_zp = 0.0123, 0.0456, -7
    f = np.float32
    m, s = qm.quantize_multiplier(1.0 / float(f(np.sqrt(f(in_scale)) * f(out_scale))))
    expect = []
    for x in range(256):
        v = (x - 256 if x > 127 else x) - in_zp
        if v <= 0:
            expect.append(127)
            continue
        im, ish = inv_sqrt_quantized_multiplier(v)
        data = qm.multiply_by_quantized_multiplier(1, im, ish + 20)
        expect.append(int(np.clip(qm.multiply_by_quantized_multiplier(data, m, s - 20) + out_zp, -128, 127)))
    assert rsqrt_table(in_scale, in_zp, out_scale, out_zp) == expect


def test_value_range_params_legacy_expands_a_tiny_constant_as_tensorflow() -> None:
    """LayerNormalization's epsilon 1e-6 as TensorFlow 2.21's post-training quantizer wrote it in
    keras.applications.ConvNeXtTiny: scale 5.8823533e-09, zero point -43 (ExpandVerySmallRange
    to [-5e-7, 1e-6], then DownCastScale)."""
    p = qm.value_range_params_legacy(0.0, 1e-6)
    assert np.float32(p.scale[0]) == np.float32(5.8823533e-09) and p.zero_point == (-43,)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(min_value=0.0, max_value=1e30), st.sampled_from([0.0, 1e-45, 1e-38, 1e-9, 1.0])),
                min_size=1, max_size=16), st.sampled_from([4, 8, 16]))
def test_symmetric_weight_params_equal_the_general_range_params(halves: list[float], bits: int):
    """symmetric_params_per_channel (the short path of a weight's [-max|w|, max|w|]) against the general
    per-channel nudging of the same range, whose arithmetic the tests above tie to TensorFlow's: the same
    scales and zero points, bit for bit (a consistency check of the short path)."""
    from qconvert.quant.params import _range_params_per_channel, symmetric_params_per_channel

    h = np.array(halves, np.float64)
    fast = symmetric_params_per_channel(h, axis=0, num_bits=bits)
    general = _range_params_per_channel(-h, h, True, 0, bits)
    assert (fast.scale, fast.zero_point, fast.qmin, fast.qmax, fast.dtype) == (
        general.scale, general.zero_point, general.qmin, general.qmax, general.dtype)
