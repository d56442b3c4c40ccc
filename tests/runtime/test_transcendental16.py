"""int16 LOGISTIC, TANH and SOFTMAX (qconvert.runtime.transcendental16) and their Prepare-time
parameters (qconvert.quant.int16_params), bit for bit against LiteRT's reference kernels.

Oracle: one-op float graphs converted by TensorFlow's own 16x8 mode (``oracle.tf_ptq_convert(...,
int16=True)``; calibrated on ±hi, so the input scale is ``float32(2·hi)/65534``), run in LiteRT
with ``OpResolverType.BUILTIN_REF``. The input scale and beta are read from TensorFlow's file, the
parameters computed by our Prepare functions, our kernel run, and every element compared.
Scales and betas TensorFlow does not write (an exact power of two, beta != 1: TensorFlow keeps a
MUL before SOFTMAX) are set in TensorFlow's file with ``oracle.repack``.

LOGISTIC and TANH see all 65536 int16 values; SOFTMAX random rows of several depths and edge
rows. The constant tables (``SIGMOID_TABLE``, ``EXP_LUT``, ``ONE_OVER_ONE_PLUS_X_LUT``) are
generated from their formulas; the coverage tests check that every entry takes part in some
bit-equal comparison.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest

from qconvert.quant.int16_params import checked_log2, logistic_tanh_int16_params, softmax_int16_params
from qconvert.quant.multipliers import quantize_multiplier
from qconvert.runtime import transcendental16 as t16
from qconvert.schema.reader import read_model

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16).reshape(1, 256, 256)
KERNELS = {"LOGISTIC": t16.logistic16, "TANH": t16.tanh16}
# ±hi calibration ranges: tiny, non-POT small, POT-ish 1/32767 (not shift 0/1: general path),
# 2**-12 within CheckedLog2's 1e-3 (POT, shift 0), just off it, 2**-11-ish (TANH POT shift 1,
# LOGISTIC general), and large ones that saturate most inputs
RANGES = (1 / 4096, 0.3, 1.0, 8.0, 8.01, 10.0, 16.0, 16.1, 40.0, 1000.0, 30000.0)


@pytest.fixture(scope="module")
def tf():  # type: ignore[no-untyped-def]
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's 16x8 converter writes the oracle's files")
    pytest.importorskip("ai_edge_litert", reason="LiteRT's reference kernels are the oracle")
    return tf


@functools.cache
def _converted(op: str, hi: float, shape: tuple[int, ...]) -> bytes:
    """TensorFlow's 16x8 file of one LOGISTIC / TANH / SOFTMAX, calibrated on [-hi, hi]."""
    import oracle
    import tensorflow as tf

    fn = {"LOGISTIC": tf.sigmoid, "TANH": tf.tanh, "SOFTMAX": tf.nn.softmax}[op]
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="input")
        tf.identity(fn(x), name="output")
    samples = {"input": np.stack([np.full(shape[1:], -hi, np.float32), np.full(shape[1:], hi, np.float32)])}
    model = oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["output"], {"input": list(shape)})
    tflite = oracle.tf_ptq_convert(model, samples, int16=True)
    assert [o.builtin for o in read_model(tflite).subgraphs[0].operators] == [op]
    return tflite


def _with(tflite: bytes, scale: float | None = None, beta: float | None = None) -> bytes:
    """TensorFlow's file with the op's input scale and/or SOFTMAX beta replaced."""
    import oracle

    def edit(m) -> None:  # type: ignore[no-untyped-def]
        sg = m.subgraphs[0]
        if scale is not None:
            sg.tensors[sg.inputs[0]].quantization.scale = [float(np.float32(scale))]
        if beta is not None:
            sg.operators[0].builtinOptions.beta = float(np.float32(beta))
    return oracle.repack(tflite, edit)


def _input_scale_and_beta(tflite: bytes) -> tuple[float, float]:
    sg = read_model(tflite).subgraphs[0]
    t_in, t_out = sg.tensors[sg.inputs[0]], sg.tensors[sg.outputs[0]]
    assert (t_in.dtype, t_in.zero_point, t_out.zero_point, t_out.scale) == ("int16", (0,), (0,), (2.0**-15,))
    return t_in.scale[0], sg.operators[0].options.get("beta", 1.0)


def _litert(tflite: bytes, x: np.ndarray) -> np.ndarray:
    import oracle

    return oracle.run_litert(tflite, {"input": x})[0]


def _table_indices(x: np.ndarray, m: int, s: int, op: str) -> np.ndarray:
    """The sigmoid-table entries an input reads (``i`` and ``i + 1``, or 255 when saturated)."""
    if m == 0:
        m, s = 3 << s, 0
    v = (x.astype(np.int64) * m + ((1 << s) >> 1)) >> s
    i = np.abs(v) >> (9 if op == "LOGISTIC" else 8)
    return np.unique(np.concatenate([np.minimum(i, 255), np.minimum(i + 1, 255)]))


# ---------------------------------------------------------------------------
# Prepare parameters, by hand


def test_checked_log2_tolerates_a_thousandth_of_an_octave() -> None:
    assert checked_log2(2.0**-12) == (True, -12)
    assert checked_log2(16 / 65534) == (True, -12)  # TensorFlow's ±8 scale, 3e-5 above 2**-12
    assert checked_log2(2.0**-12 * 2 ** 0.0009) == (True, -12)
    assert checked_log2(2.0**-12 * 2 ** 0.0011) == (False, -12)
    assert checked_log2(2.0**-12 * 2 ** -0.0011) == (False, -12)
    assert checked_log2(1 / 32767) == (True, -15)
    assert checked_log2(0.3) == (False, -2)


def test_logistic_tanh_params_by_hand() -> None:
    for op in ("LOGISTIC", "TANH"):
        assert logistic_tanh_int16_params(2.0**-12, op) == (0, 0)  # POT: 3 << 0 in the kernel
        assert logistic_tanh_int16_params(16 / 65534, op) == (0, 0)  # within CheckedLog2's tolerance
        # 2**-13: 1.5 doubled 14 times to 24576 > 16383.5
        assert logistic_tanh_int16_params(2.0**-13, op) == (24576, 14)
        # 2**-10: 12 doubled 11 times to 24576
        assert logistic_tanh_int16_params(2.0**-10, op) == (24576, 11)
        # 0.3 * 12288 = 3686.4, doubled twice: 14745.6 <= 16383.5, so thrice: 29491.2
        assert logistic_tanh_int16_params(np.float32(0.3), op) == (int(float(np.float32(0.3)) * 12288 * 8), 3)
        # the shift stops at 31
        assert logistic_tanh_int16_params(1e-12, op) == (int(float(np.float32(1e-12)) * 12288 * 2**31), 31)
        # 5.3: 65126.4, no doubling
        assert logistic_tanh_int16_params(5.3, op) == (int(float(np.float32(5.3)) * 12288), 0)
    # 2**-11: TanhPrepare's POT case allows shift 1, SigmoidPrepare's only 0 (same products: 6x)
    assert logistic_tanh_int16_params(2.0**-11, "TANH") == (0, 1)
    assert logistic_tanh_int16_params(2.0**-11, "LOGISTIC") == (24576, 12)
    assert logistic_tanh_int16_params(2.0**-11) == (24576, 12)  # op defaults to LOGISTIC
    # 1e-4 below 2**-11: still POT for TANH; LOGISTIC truncates 24573.5
    assert logistic_tanh_int16_params(2.0**-11 * (1 - 1e-4), "TANH") == (0, 1)
    assert logistic_tanh_int16_params(2.0**-11 * (1 - 1e-4), "LOGISTIC") == (24573, 12)


@pytest.mark.parametrize("scale, match", [(0.0, "finite positive"), (-1e-3, "finite positive"),
                                          (float("nan"), "finite positive"), (float("inf"), "finite positive"),
                                          (1e-50, "finite positive"),  # 0 as a float32
                                          (5.4, "too large.*overflow")])
def test_logistic_tanh_params_reject(scale: float, match: str) -> None:
    for op in ("LOGISTIC", "TANH"):
        with pytest.raises(ValueError, match=match):
            logistic_tanh_int16_params(scale, op)
    with pytest.raises(ValueError, match="op must be"):
        logistic_tanh_int16_params(1e-3, "RELU")


def test_softmax_params_by_hand() -> None:
    # 2**-12 * 65535 / 10 = 65535/40960 = 2 * 65535/81920; q = round(65535/81920 * 2**31), shift 1
    q = Fraction(65535 * 2**31, 81920)
    assert softmax_int16_params(2.0**-12, 1.0) == (math.floor(q + Fraction(1, 2)), 1)
    # beta 0.5 halves the multiplier's exponent only
    assert softmax_int16_params(2.0**-12, 0.5) == (math.floor(q + Fraction(1, 2)), 0)
    # the product scale * beta is a float32 (the C++ multiplies two floats): here the double
    # product would give a multiplier 29 larger
    s, b = 0.005123097915202379, 2.856344699859619
    f32 = float(np.float32(np.float32(s) * np.float32(b)))
    assert softmax_int16_params(s, b) == quantize_multiplier(f32 * 65535 / 10) == (1608927462, 7)
    assert quantize_multiplier(s * b / (10 / 65535)) == (1608927491, 7)


@pytest.mark.parametrize("scale, beta", [(0.0, 1.0), (float("nan"), 1.0), (1e-3, 0.0), (1e-3, -1.0),
                                         (1e-3, float("inf")), (1e-30, 1e-30)])
def test_softmax_params_reject(scale: float, beta: float) -> None:
    with pytest.raises(ValueError, match="SOFTMAX"):
        softmax_int16_params(scale, beta)


# ---------------------------------------------------------------------------
# Tables


def test_sigmoid_table_shape() -> None:
    t = t16.SIGMOID_TABLE
    assert len(t) == 256 and t[0] == 32768 and t[255] == 65535 and np.all(np.diff(t) >= 0)
    exact = 65536 / (1 + np.exp(-np.arange(256) / 24))
    assert np.all(np.abs(t[:255] - exact[:255]) < 1.2)  # biased up by half the interpolation error


def test_softmax_luts_shape() -> None:
    e, r = t16.EXP_LUT, t16.ONE_OVER_ONE_PLUS_X_LUT
    assert len(e) == len(r) == 513
    assert e[512] == 32767 and e[0] == 2 and np.all(np.diff(e) >= 0)  # exp(0) saturates; exp(-10)·32768 = 1.5
    assert r[0] == 32767 and r[512] == 16384 and np.all(np.diff(r) <= 0)  # 1/(1+0), 1/(1+1)


def test_lut_lookup_interpolates() -> None:
    lut = np.arange(513, dtype=np.int64) * 128 - 32768
    v = np.arange(-32768, 32768, dtype=np.int64)
    assert np.array_equal(t16.lut_lookup(v, lut), v)  # a linear table gives back its input


# ---------------------------------------------------------------------------
# LOGISTIC / TANH against LiteRT, every int16 value


@pytest.mark.parametrize("hi", RANGES)
@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_every_int16_equals_litert(tf, op: str, hi: float) -> None:  # type: ignore[no-untyped-def]
    tflite = _converted(op, hi, (1, 256, 256))
    scale, _ = _input_scale_and_beta(tflite)
    m, s = logistic_tanh_int16_params(scale, op)
    ours = KERNELS[op](ALL_INT16, m, s)
    assert ours.dtype == np.int16 and ours.shape == ALL_INT16.shape
    theirs = _litert(tflite, ALL_INT16)
    assert np.array_equal(ours, theirs), f"{op} ±{hi} (scale {scale}, params {(m, s)}): " \
        f"{int((ours != theirs).sum())} of 65536 differ"


@pytest.mark.parametrize("scale", [2.0**-12, 2.0**-11, 2.0**-11 * (1 - 1e-4), 2.0**-11 * (1 + 5e-4), 1 / 12288,
                                   2.0**-13, 5.3, 2.0**-12 * 2**0.0009, 2.0**-12 * 2**-0.0009,
                                   2.0**-12 * 2**0.0011, 2.0**-12 * 2**-0.0011, 2.0**-11 * 2**0.0009])
@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_scales_tensorflow_does_not_write(tf, op: str, scale: float) -> None:  # type: ignore[no-untyped-def]
    """Exact powers of two, the window where TANH's and LOGISTIC's Prepare part (a POT-ish
    2**-11), 1/12288 (one input step per 1/12288: every entry hit at its own knot), 5.3 (the
    largest multiplier: 65126, no shift), and either side of CheckedLog2's 1e-3 tolerance (the
    POT case takes 3·x inside it; just outside, 2**0.0011 off, the general case takes
    (x·24594 + 4096) >> 13)."""
    tflite = _with(_converted(op, 1.0, (1, 256, 256)), scale=scale)
    m, s = logistic_tanh_int16_params(scale, op)
    assert np.array_equal(KERNELS[op](ALL_INT16, m, s), _litert(tflite, ALL_INT16)), (op, scale, m, s)


def test_tanh_needs_its_own_prepare(tf) -> None:  # type: ignore[no-untyped-def]
    """At 2**-11·(1 - 1e-4) LOGISTIC's parameters (24573, 12) would be wrong for TANH."""
    scale = 2.0**-11 * (1 - 1e-4)
    theirs = _litert(_with(_converted("TANH", 1.0, (1, 256, 256)), scale=scale), ALL_INT16)
    wrong = t16.tanh16(ALL_INT16, *logistic_tanh_int16_params(scale, "LOGISTIC"))
    assert int((wrong != theirs).sum()) > 1000
    assert np.array_equal(t16.tanh16(ALL_INT16, *logistic_tanh_int16_params(scale, "TANH")), theirs)


def test_every_sigmoid_table_entry_is_used(tf) -> None:  # type: ignore[no-untyped-def]
    """The bit-equal runs above read all 256 entries, for each op."""
    for op in ("LOGISTIC", "TANH"):
        used: set[int] = set()
        for hi in RANGES:
            scale, _ = _input_scale_and_beta(_converted(op, hi, (1, 256, 256)))
            used |= set(_table_indices(ALL_INT16, *logistic_tanh_int16_params(scale, op), op).tolist())
        assert used == set(range(256)), (op, sorted(set(range(256)) - used)[:10])


def test_kernels_saturate_and_are_odd() -> None:
    m, s = logistic_tanh_int16_params(2.0**-8, "TANH")  # ±128: most inputs saturate
    x = np.array([-32768, -1, 0, 1, 32767], np.int16)
    assert t16.tanh16(x, m, s).tolist()[0] == -32767 and t16.tanh16(x, m, s).tolist()[-1] == 32767
    assert t16.logistic16(x, m, s).tolist()[0] == 1 and t16.logistic16(x, m, s).tolist()[-1] == 32767
    assert t16.logistic16(np.zeros(1, np.int16), 0, 0).tolist() == [16384]
    assert t16.tanh16(np.zeros(1, np.int16), 0, 0).tolist() == [0]
    with pytest.raises(ValueError, match="input_left_shift"):
        t16.logistic16(x, 1, -1)


# ---------------------------------------------------------------------------
# SOFTMAX against LiteRT


def _softmax_rows(depth: int, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-32768, 32768, (rows, depth))
    edge = [np.zeros(depth), np.full(depth, -32768), np.full(depth, 32767),
            np.r_[32767, np.full(depth - 1, -32768)], np.r_[np.full(depth - 1, -32768), 32767],
            np.resize([-32768, 32767], depth), np.linspace(-32768, 32767, depth).round(),
            32767 - np.arange(depth) % 3, rng.integers(-300, 300, depth), rng.integers(32000, 32768, depth),
            rng.integers(-32768, -32000, depth)]
    x[:len(edge)] = np.stack(edge)
    return x.astype(np.int16)


@pytest.mark.parametrize("hi", [0.01, 1.0, 5.0, 10.0, 40.0, 1000.0])
@pytest.mark.parametrize("depth", [1, 2, 10, 100, 1000])
def test_softmax_equals_litert(tf, depth: int, hi: float) -> None:  # type: ignore[no-untyped-def]
    tflite = _converted("SOFTMAX", hi, (64, depth))
    scale, beta = _input_scale_and_beta(tflite)
    m, s = softmax_int16_params(scale, beta)
    x = _softmax_rows(depth, 64, seed=depth)
    ours, theirs = t16.softmax16(x, m, s), _litert(tflite, x)
    assert ours.dtype == np.int16
    assert np.array_equal(ours, theirs), f"depth {depth} ±{hi}: {int((ours != theirs).sum())} differ"


@pytest.mark.parametrize("beta", [0.5, 2.0, 0.3, 2.856344699859619, 1e-3])
def test_softmax_beta_equals_litert(tf, beta: float) -> None:  # type: ignore[no-untyped-def]
    tflite = _with(_converted("SOFTMAX", 5.0, (64, 100)), beta=beta)
    scale, file_beta = _input_scale_and_beta(tflite)
    assert file_beta == float(np.float32(beta))
    x = _softmax_rows(100, 64, seed=7)
    assert np.array_equal(t16.softmax16(x, *softmax_int16_params(scale, file_beta)), _litert(tflite, x))


def test_softmax_beta_times_scale_is_a_float32_product(tf) -> None:  # type: ignore[no-untyped-def]
    """At this scale and beta the double product would give a multiplier 43 larger (1122246880), and
    15 of the 131072 outputs over all input differences would differ from LiteRT's."""
    scale, beta = 0.0001594444183865562, 1.000243902206421
    tflite = _with(_converted("SOFTMAX", 10.0, (65536, 2)), scale=scale, beta=beta)
    x = np.stack([np.full(65536, 32767), 32767 - np.arange(65536)], axis=1).astype(np.int16)
    assert softmax_int16_params(scale, beta) == (1122246837, 1)
    theirs = _litert(tflite, x)
    assert np.array_equal(t16.softmax16(x, 1122246837, 1), theirs)
    assert int((t16.softmax16(x, 1122246880, 1) != theirs).sum()) == 15


def test_softmax_4d_equals_litert(tf) -> None:  # type: ignore[no-untyped-def]
    tflite = _converted("SOFTMAX", 3.0, (2, 3, 4, 50))
    scale, beta = _input_scale_and_beta(tflite)
    x = np.random.default_rng(3).integers(-32768, 32768, (2, 3, 4, 50)).astype(np.int16)
    assert np.array_equal(t16.softmax16(x, *softmax_int16_params(scale, beta)), _litert(tflite, x))


def test_every_softmax_lut_entry_is_used(tf) -> None:  # type: ignore[no-untyped-def]
    """Pairs ``[32767, 32767 - k]`` for every k: every input difference, hence (at ±10, where
    the difference is scaled by about 2) every interval of the exp table, and sums ``32767 +
    e(k)`` sweeping the reciprocal table's whole input range. Bit-equal, and every entry of both
    tables is read."""
    tflite = _converted("SOFTMAX", 10.0, (65536, 2))
    scale, beta = _input_scale_and_beta(tflite)
    m, s = softmax_int16_params(scale, beta)
    k = np.arange(65536)
    x = np.stack([np.full(65536, 32767), 32767 - k], axis=1).astype(np.int16)
    assert np.array_equal(t16.softmax16(x, m, s), _litert(tflite, x))

    from qconvert.runtime.int_math import mbqm
    sym = np.clip(mbqm(x.astype(np.int64) - 32767, m, s) + 32767, -32768, 32767)
    exp_entries = set((256 + (sym >> 7)).ravel().tolist()) | set((257 + (sym >> 7)).ravel().tolist())
    assert exp_entries == set(range(513))
    e = t16.lut_lookup(sym, t16.EXP_LUT)
    total = e.sum(axis=1)
    headroom = np.array([32 - int(v).bit_length() for v in total])
    u = np.clip((((total << (headroom - 1)) + (1 << 13)) >> 14) - 98304, -32768, 32767)
    reciprocal_entries = set((256 + (u >> 7)).tolist()) | set((257 + (u >> 7)).tolist())
    assert reciprocal_entries == set(range(513))


def test_softmax_edge_cases() -> None:
    m, s = softmax_int16_params(2.0**-12, 1.0)
    assert t16.softmax16(np.array([[5]], np.int16), m, s).tolist() == [[32767]]  # one element: 1.0
    assert t16.softmax16(np.array([[7, 7]], np.int16), m, s).tolist() == [[16384, 16384]]
    with pytest.raises(ValueError, match="at least one"):
        t16.softmax16(np.zeros((2, 0), np.int16), m, s)


# ---------------------------------------------------------------------------
# GELU int16 (LUTPopulate<int16_t> over the float32 transform) against LiteRT, every int16 value


@functools.cache
def _gelu_file(hi: float, approximate: bool) -> bytes:
    """TensorFlow's 16x8 file of one GELU, calibrated on [-hi, hi]."""
    import oracle
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 256, 256), name="input")
        tf.identity(tf.nn.gelu(x, approximate=approximate), name="output")
    samples = {"input": np.stack([np.full((256, 256), -hi, np.float32), np.full((256, 256), hi, np.float32)])}
    model = oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["output"], {"input": [1, 256, 256]})
    tflite = oracle.tf_ptq_convert(model, samples, int16=True)
    assert [o.builtin for o in read_model(tflite).subgraphs[0].operators] == ["GELU"]
    return tflite


@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("hi", [0.05, 1.0, 3.0, 8.0, 100.0])
def test_gelu_every_int16_equals_litert(tf, hi: float, approximate: bool) -> None:  # type: ignore[no-untyped-def]
    tflite = _gelu_file(hi, approximate)
    sg = read_model(tflite).subgraphs[0]
    s_in, s_out = sg.tensors[sg.inputs[0]].scale[0], sg.tensors[sg.outputs[0]].scale[0]
    ours = t16.gelu16(ALL_INT16, s_in, s_out, approximate)
    theirs = _litert(tflite, ALL_INT16)
    assert ours.dtype == np.int16
    assert np.array_equal(ours, theirs), f"±{hi}: {int((ours != theirs).sum())} of 65536 differ"
