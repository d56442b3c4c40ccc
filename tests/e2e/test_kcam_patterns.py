"""Patterns of keras-cv-attention-models' hybrid vision transformers, one small graph each, against
TensorFlow 2.21's post-training file given its recorded ranges (issue 35; the models themselves:
tests/e2e/test_kcam_zoo.py).

- layer scale: ``conv → BiasAdd → BatchNorm → MUL(γ per channel)`` (EfficientFormer's and
  FastViT's ``gamma``): TensorFlow folds the BatchNorm and then γ into the convolution; qconvert
  folded the BatchNorm's scale, then its shift, and left γ a MUL (EfficientFormerL1: 38 MUL where
  TensorFlow writes 24).
- twin BatchNormalizations: two BatchNormalization layers with equal statistics on one tensor
  (FastViT's identity branch and the one its block subtracts): TensorFlow merges the two MUL+ADD
  into one (its constants are equal, then its ops); qconvert compared constants by name and kept
  both (FastViT_T8: 35 MUL where TensorFlow writes 25).
- zero-initialised γ: a residual branch ``conv → ReLU → conv → BatchNorm(γ = 0)`` (EfficientViT_M's
  feed-forward blocks, as trained briefly): TensorFlow folds the BatchNorm's zero scale into the
  last convolution, which stays with zero weights; qconvert folded the BatchNorm's ``x · 0`` to a
  zero constant (its rule for a Mul by zero, which TensorFlow's graph optimizer folds) and dropped
  both convolutions (EfficientViT_M0: 42 CONV_2D where TensorFlow writes 74).
- a SUM over axes of size 1 with keep_dims (EfficientViT_B0's linear attention on a 1x1 map): TensorFlow
  drops it, as it drops such a MEAN; qconvert kept it (4 SUM where TensorFlow writes 2).
- division by an activation: ReLU linear attention's ``x / (Σx + ε)`` (EfficientViT_B0) and a plain
  ``a / b``: TensorFlow writes an int8 DIV (v1, its output's own range, the divisor's range as
  calibrated); qconvert refused any RealDiv but by a constant. ``qconvert run`` executes DIV as
  LiteRT's reference kernel on every pair of int8 operands.
- BatchNorm before a classifier: ``GAP → BatchNorm → Flatten → Dense`` (RepViT's head):
  TensorFlow folds the shift into the FULLY_CONNECTED's bias through its weights and then the
  scale into its weights' columns (FuseMulAndFullyConnected, a 1-D multiplier only); qconvert kept
  the MUL (RepViT_M09: 3 LSB apart). Siblings: on 2-D, before a Dense with ReLU, a MUL alone, a MUL
  read by another op too (it stays for that one), ``c · x``; and what TensorFlow leaves: a ``[1, C]``
  multiplier, a Dense without bias (the shift cannot fold, so the scale is not next to it), a
  Flatten of a 2x2 map (the RESHAPE stays between).
- an activation after a RESHAPE or TRANSPOSE read only by it (EfficientViT_B0's ``SPLIT → RESHAPE →
  RELU`` on a 1x1 map): TensorFlow's optimize pass moves the activation before it (then fuses it into a
  convolution); qconvert kept it after, and the ranges of dead ReLUs paired with other tensors.
- two ZeroPadding2D of one tensor (EfficientFormerV2's downsampling): TensorFlow's CSE makes them one
  PAD (equal integer constants are one), and a PAD goes into each convolution it pads as SAME;
  qconvert compared integer constants by name (EfficientFormerV2S0: 9 PAD where TensorFlow writes 8).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

SHAPE = [1, 8, 8, 4]


def _bn(rng: np.random.Generator, x: object, c: int, params: tuple | None = None) -> object:
    gamma, beta, mean, var = params or (rng.uniform(0.5, 1.5, c), rng.normal(0, 0.2, c), rng.normal(0, 0.2, c),
                                        rng.uniform(0.5, 2, c))
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, *(tf.constant(v.astype(np.float32)) for v in (gamma, beta, mean, var)),
                                               is_training=False, epsilon=1e-3)
    return y


def _layer_scale(rng: np.random.Generator, x: object, act: str) -> object:
    w = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 8)).astype(np.float32))
    h = tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), tf.constant(rng.normal(0, 0.1, 8).astype(np.float32)))
    h = _bn(rng, h, 8)
    h = h * tf.constant(rng.uniform(0.05, 1.0, 8).astype(np.float32))  # γ, per channel
    if act == "add":  # a residual after the scale, as the blocks write it
        return h + tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (1, 1, 4, 8)).astype(np.float32)), 1, "SAME")
    return tf.nn.relu(h) if act == "relu" else h


def _twin_batchnorms(rng: np.random.Generator, x: object, act: str) -> object:
    c = 4
    params = (rng.uniform(0.5, 1.5, c), rng.normal(0, 0.2, c), rng.normal(0, 0.2, c), rng.uniform(0.5, 2, c))
    a = _bn(rng, x, c, params)
    b = _bn(rng, x, c, tuple(np.copy(p) for p in params))  # another layer, the same values
    conv = tf.nn.depthwise_conv2d(x, tf.constant(rng.normal(0, 0.3, (3, 3, c, 1)).astype(np.float32)), [1, 1, 1, 1],
                                  "SAME")
    return (conv + a) - b if act == "sub" else tf.concat([a, b, conv], axis=-1)


def _zero_gamma(rng: np.random.Generator, x: object, act: str) -> object:
    c = SHAPE[-1]
    h = tf.nn.relu(tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (1, 1, c, 8)).astype(np.float32)), 1, "SAME"))
    h = tf.nn.conv2d(h, tf.constant(rng.normal(0, 0.3, (1, 1, 8, c)).astype(np.float32)), 1, "SAME")
    h = _bn(rng, h, c, (np.zeros(c), rng.normal(0, 0.2, c), rng.normal(0, 0.2, c), rng.uniform(0.5, 2, c)))
    return x + h


def _div_linear_attention(rng: np.random.Generator, x: object, act: str) -> object:
    r = tf.nn.relu(x)
    return r / (tf.reduce_sum(r, axis=-1, keepdims=True) + 0.5)


def _sum_over_size_one(rng: np.random.Generator, x: object, act: str) -> object:
    r = tf.nn.relu(x)
    return r / (tf.reduce_sum(r, axis=0, keepdims=True) + 0.5)  # over the batch of 1: the identity


def _div_activations(rng: np.random.Generator, x: object, act: str) -> object:
    a = tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (1, 1, SHAPE[-1], SHAPE[-1])).astype(np.float32)), 1, "SAME")
    return a / (tf.abs(x) + 0.5)


def _group_norm_moments(rng: np.random.Generator, x: object, act: str) -> object:
    """kcam's GroupNorm statistics: ``tf.nn.weighted_moments`` with unit frequency weights, whose
    ``div_no_nan`` divides by the weights' sum (a constant at a fixed input size, through
    ``zeros_like``); ``act == "5d"``: on the [B, H, W, G, C/G] view kcam takes."""
    c = SHAPE[-1]
    t = tf.reshape(x, [1, SHAPE[1], SHAPE[2], 2, c // 2]) if act == "5d" else x
    axes = [1, 2, 4] if act == "5d" else [1, 2]
    ones = tf.constant(np.ones([1] * len(t.shape), np.float32))
    mean, var = tf.nn.weighted_moments(t, axes, ones, keepdims=True)
    y = (t - mean) * tf.math.rsqrt(var + 1e-5)
    return tf.reshape(y, SHAPE) if act == "5d" else y


CASES = {
    "layer-scale": (_layer_scale, "none"),
    "layer-scale-relu": (_layer_scale, "relu"),
    "layer-scale-residual": (_layer_scale, "add"),
    "twin-batchnorms-sub": (_twin_batchnorms, "sub"),
    "twin-batchnorms-concat": (_twin_batchnorms, "concat"),
    "zero-gamma-batchnorm": (_zero_gamma, "none"),
    "div-linear-attention": (_div_linear_attention, "none"),
    "div-activations": (_div_activations, "none"),
    "div-sum-over-size-one": (_sum_over_size_one, "none"),
    "div-no-nan-group-norm-moments": (_group_norm_moments, "4d"),
}


def _graph(name: str) -> oracle.FloatGraph:
    build, act = CASES[name]
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")
        tf.identity(build(np.random.default_rng(0), x, act), name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["x"], ["out"], {"x": SHAPE})


def _ops(tflite: bytes) -> collections.Counter:
    return collections.Counter((o.builtin, o.version) for o in read_model(tflite).subgraphs[0].operators)


def _float_graph(build: Callable[[object], object], shape: list[int]) -> oracle.FloatGraph:
    """A one-input graph ``out = build(x)``, frozen."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        tf.identity(build(x), name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["x"], ["out"], {"x": shape})


def _samples(model: oracle.FloatGraph) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).uniform(-1, 1, (8, *model.shapes["x"][1:])).astype(np.float32)}


def _ours_given_tensorflows_ranges(model: oracle.FloatGraph, samples: dict[str, np.ndarray],
                                   monkeypatch: pytest.MonkeyPatch) -> bytes:
    """qconvert's file given TensorFlow's recorded ranges (and its rsqrt)."""
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, unpaired
    return convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples).model


def _assert_tensorflows_file(ours: bytes, theirs: bytes, samples: dict[str, np.ndarray]) -> None:
    """TensorFlow's op list, every scale, zero point and weight, outputs 0 LSB apart in LiteRT REF."""
    assert _ops(ours) == _ops(theirs)
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["x"])
    assert not report.unpaired and not report.weight_diffs and not report.zero_point_diffs, report
    assert report.max_rel_scale == 0 and report.max_lsb == 0, report


@pytest.mark.parametrize("name", list(CASES))
def test_pattern_as_tensorflow_writes_it(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _graph(name)
    samples = {"x": np.random.default_rng(1).uniform(-1, 1, (8, *SHAPE[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert _ops(ours) == _ops(theirs)
    if name.startswith("layer-scale"):
        assert "MUL" not in {b for b, _ in _ops(ours)}  # γ is in the convolution's weights
    elif name == "div-no-nan-group-norm-moments":
        assert "DIV" not in {b for b, _ in _ops(ours)}  # div_no_nan by the constant weight sum: a MUL
    elif name.startswith("div"):
        assert ("DIV", 1) in _ops(ours) and (name != "div-sum-over-size-one" or "SUM" not in {b for b, _ in _ops(ours)})
        if name == "div-activations":  # (LiteRT's int8 SUM, in the other, is not run's: a separate matter)
            oracle.assert_run_equals_litert(ours)
    elif name == "zero-gamma-batchnorm":
        assert sum(n for (b, _), n in _ops(ours).items() if b == "CONV_2D") == 2  # the last one with zero weights
    else:
        assert sum(n for (b, _), n in _ops(ours).items() if b == "MUL") == 1  # one BatchNorm for both
    _assert_tensorflows_file(ours, theirs, samples)


def test_div_runs_as_litert_on_every_pair_of_int8_operands() -> None:
    """``qconvert run``'s DIV against LiteRT REF on TensorFlow's own files: every numerator against
    every divisor but the zero point (LiteRT's kernel fails there, as run does), divisors of either
    sign, broadcast, and scales that make the kernel's last shift exceed 31 bits (a small numerator)."""
    from qconvert.runtime.interpreter import IntegerModel

    shape = [1, 256, 256]
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, shape, name="a")
        b = tf.compat.v1.placeholder(tf.float32, [1, 1, 256], name="b")
        tf.identity(a / b, name="out")
    model = oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["a", "b"], ["out"], {"a": shape, "b": [1, 1, 256]})
    i, j = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    for a_range, b_range in [((-1, 1), (0.5, 2)), ((-1, 1), (0.01, 2)), ((0, 3), (-2, -0.001)), ((-0.01, 0.01), (-3, 3))]:
        rng = np.random.default_rng(0)
        samples = {"a": rng.uniform(*a_range, (2, *shape[1:])).astype(np.float32),
                   "b": rng.uniform(*b_range, (2, 1, 256)).astype(np.float32)}
        theirs = oracle.tf_ptq_convert(model, samples)
        zp = {d["name"]: d["quant"][1] for d in oracle.io_details(theirs)["inputs"]}["b"]
        feeds = {"a": i.astype(np.int8)[None], "b": np.where(j[:1] == zp, zp + 1 if zp < 127 else zp - 1, j[:1])
                 .astype(np.int8)[None]}
        want = oracle.run_litert(theirs, feeds)[0]
        got = list(IntegerModel(theirs).run(feeds).values())[0]
        np.testing.assert_array_equal(got, want, err_msg=f"a in {a_range}, b in {b_range}")


def _fc_bn_params(rng: np.random.Generator, c: int) -> tuple[np.ndarray, np.ndarray]:
    """A BatchNormalization's ``x·m + s`` on 2-D (Keras' form once frozen), as float32 constants."""
    gamma, beta, mean, var = rng.uniform(0.5, 1.5, c), rng.normal(0, 0.2, c), rng.normal(0, 0.2, c), rng.uniform(0.5, 2, c)
    m = gamma / np.sqrt(var + 1e-3)
    return m.astype(np.float32), (beta - mean * m).astype(np.float32)


def _dense(rng: np.random.Generator, x: object, units: int, bias: bool = True) -> object:
    y = tf.matmul(x, tf.constant(rng.normal(0, 0.3, (x.shape[-1], units)).astype(np.float32)))
    return tf.nn.bias_add(y, tf.constant(rng.normal(0, 0.1, units).astype(np.float32))) if bias else y


def _pooled(rng: np.random.Generator, x: object, keepdims: bool = False) -> object:
    h = tf.nn.relu(tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (3, 3, 4, 16)).astype(np.float32)), 1, "SAME"))
    return tf.reduce_mean(h, [1, 2], keepdims=keepdims)


def _bn_before_classifier(rng: np.random.Generator, x: object, form: str) -> object:
    if form == "4d-flatten":  # RepViT: Mean(keepdims) → FusedBatchNormV3 → Flatten → Dense
        return _dense(rng, tf.reshape(_bn(rng, _pooled(rng, x, keepdims=True), 16), [1, 16]), 10)
    if form == "2x2-flatten":  # the Flatten changes the last dimension: its RESHAPE stays, so does the BN
        h = tf.nn.max_pool2d(tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (3, 3, 4, 16)).astype(np.float32)), 1,
                                          "SAME"), 4, 4, "VALID")
        return _dense(rng, tf.reshape(_bn(rng, h, 16), [1, 64]), 10)
    h = _pooled(rng, x)
    m, s = _fc_bn_params(rng, 16)
    if form == "mul-only":
        return _dense(rng, h * tf.constant(m), 10)
    if form == "const-first":
        return _dense(rng, tf.constant(m) * h, 10)
    if form == "mul-2d":  # not a 1-D multiplier: TensorFlow keeps the MUL
        return _dense(rng, h * tf.constant(m.reshape(1, -1)), 10)
    if form == "two-readers":  # folded into the FC, kept for the concatenation
        g = h * tf.constant(m)
        return tf.concat([_dense(rng, g, 10), g], axis=-1)
    g = h * tf.constant(m) + tf.constant(s)
    if form == "no-bias":  # the shift has no bias to go into: both stay
        return _dense(rng, g, 10, bias=False)
    return tf.nn.relu(_dense(rng, g, 10)) if form == "relu" else _dense(rng, g, 10)


# name: (form, MULs TensorFlow writes)
FC_CASES = {
    "bn-flatten-fc": ("4d-flatten", 0),
    "bn-fc": ("2d", 0),
    "bn-fc-relu": ("relu", 0),
    "mul-fc": ("mul-only", 0),
    "mul-fc-const-first": ("const-first", 0),
    "mul-fc-two-readers": ("two-readers", 1),
    "mul-2d-fc": ("mul-2d", 1),
    "bn-fc-no-bias": ("no-bias", 1),
    "bn-flatten-2x2-fc": ("2x2-flatten", 1),
}


@pytest.mark.parametrize("name", list(FC_CASES))
def test_mul_before_fully_connected_as_tensorflow_folds_it(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    form, muls = FC_CASES[name]
    _assert_both_files(lambda x: _bn_before_classifier(np.random.default_rng(0), x, form), muls, monkeypatch)


def _assert_both_files(build: Callable[[object], object], muls: int, monkeypatch: pytest.MonkeyPatch
                       ) -> tuple[bytes, bytes]:
    """TensorFlow's file of ``out = build(x)`` has ``muls`` MULs (its behaviour, re-measured) and qconvert's,
    given its ranges, is that file (_assert_tensorflows_file); both files."""
    model = _float_graph(build, SHAPE)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    assert sum(n for (b, _), n in _ops(theirs).items() if b == "MUL") == muls
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    _assert_tensorflows_file(ours, theirs, samples)
    return ours, theirs


def _window_attention(rng: np.random.Generator, x: object, form: str) -> object:
    """TinyViT's window attention at a 4x4 map of one-pixel windows: the values ``[16, 4, 1, 32]``
    (16 windows, 4 heads), attention by BATCH_MATMUL, then the output projection as Keras writes a
    Dense on the windows (``tensordot``: RESHAPE [16, 128], MatMul, RESHAPE, BiasAdd) and the window
    reverse (RESHAPE, TRANSPOSE of size-1 dimensions, RESHAPE) to the map, added to a residual."""
    def conv(t: object, co: int) -> object:
        return tf.nn.conv2d(t, tf.constant(rng.normal(0, 0.3, (1, 1, t.shape[-1], co)).astype(np.float32)), 1, "SAME")

    side = x.shape[1]
    windows = side * side
    v = tf.reshape(conv(x, 128), [windows, 4, 1, 32])
    o = tf.matmul(tf.nn.softmax(tf.matmul(v, v, transpose_b=True)), v)  # [windows, 4, 1, 32]
    units = 64 if form == "narrower" else 128
    w = tf.constant(rng.normal(0, 0.3, (128, units)).astype(np.float32))
    b = tf.constant(rng.normal(0, 0.1, units).astype(np.float32))
    if form == "flat":  # the second RESHAPE changes the last dimension: both stay
        y = tf.reshape(tf.nn.bias_add(tf.matmul(tf.reshape(o, [windows, 128]), w), b), [1, windows * units])
        return tf.reshape(conv(x, units), [1, windows * units]) + y
    h = tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [windows, 1, 1, 128])
    h = tf.reshape(tf.matmul(tf.reshape(h, [windows, 128]), w), [windows, 1, 1, units]) + b
    h = tf.reshape(tf.transpose(tf.reshape(h, [1, side, side, 1, 1, units]), [0, 1, 3, 2, 4, 5]), [1, side, side, units])
    if form == "conv":  # not a broadcasting reader: the FC keeps [1, 1, 1, C] too
        return conv(h, 8)
    return conv(x, units) + h


# name: (input shape, form, RESHAPEs TensorFlow writes)
WINDOW_CASES = {
    "window-attention": ([1, 4, 4, 4], "residual", 2),
    "window-attention-narrower": ([1, 4, 4, 4], "narrower", 2),
    "window-attention-flat": ([1, 4, 4, 4], "flat", 4),
    # TensorFlow's FC stays [1, C] and the ADD broadcasts (TinyViT_5M's last stage: the RESHAPE chains
    # merge first, so the RESHAPE after the FC only puts leading 1s before the ADD, and goes)
    "window-attention-1x1-residual": ([1, 1, 1, 4], "residual", 2),
    "window-attention-1x1-conv": ([1, 1, 1, 4], "conv", 2),
}


@pytest.mark.parametrize("name", list(WINDOW_CASES))
def test_reshapes_around_window_projection_as_tensorflow_writes_them(name: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    shape, form, reshapes = WINDOW_CASES[name]
    model = _float_graph(lambda x: _window_attention(np.random.default_rng(0), x, form), shape)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    assert sum(n for (b, _), n in _ops(theirs).items() if b == "RESHAPE") == reshapes  # re-measured
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert _ops(ours) == _ops(theirs)

    def fc_shapes(tflite: bytes) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        sg = read_model(tflite).subgraphs[0]
        return [(tuple(sg.tensors[o.inputs[0]].shape), tuple(sg.tensors[o.outputs[0]].shape))
                for o in sg.operators if o.builtin == "FULLY_CONNECTED"]

    assert fc_shapes(ours) == fc_shapes(theirs)
    _assert_tensorflows_file(ours, theirs, samples)


def _conv(rng: np.random.Generator, x: object, co: int) -> object:
    return tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.3, (1, 1, x.shape[-1], co)).astype(np.float32)), 1, "SAME")


def _moved_activation(rng: np.random.Generator, x: object, form: str) -> object:
    h = _conv(rng, x, 8)
    if form == "split-reshape-relu":  # EfficientViT_B0's linear attention on a 1x1 map: q, k = relu(q), relu(k)
        q, k, v = tf.split(tf.reshape(tf.concat([h, _conv(rng, x, 4)], -1), [1, 4, 4, 12]), 3, axis=-1)
        q, k = tf.nn.relu(tf.reshape(q, [1, 16, 4])), tf.nn.relu(tf.reshape(k, [1, 16, 4]))
        return tf.matmul(tf.reshape(v, [1, 16, 4]), tf.matmul(q, k, transpose_a=True))
    if form == "transpose-relu":  # fuses into the convolution once before the TRANSPOSE
        return tf.nn.relu(tf.transpose(h, [0, 2, 1, 3]))
    if form == "reshape-relu6-reshape":
        return tf.reshape(tf.nn.relu6(tf.reshape(h, [1, 16, 8])), [1, 128])
    if form == "depth-to-space-relu":
        return tf.nn.relu(tf.nn.depth_to_space(h, 2))
    if form == "transpose-sigmoid":
        return tf.sigmoid(tf.transpose(h, [0, 2, 1, 3]))
    if form == "reshape-tanh":
        return tf.tanh(tf.reshape(h, [1, 16, 8]))
    if form == "mean-reshape-relu":  # the RESHAPE stays after the RELU: the MEAN does not keep its dimensions
        return _conv(rng, tf.nn.relu(tf.reshape(tf.reduce_mean(h, [1, 2]), [1, 1, 1, 8])), 4)
    if form == "reshape-relu-two-readers":  # the RESHAPE has another reader: the RELU stays after it
        r = tf.reshape(h, [1, 16, 8])
        return tf.concat([tf.nn.relu(r), r * 2.0], -1)
    assert form == "reshape-leaky-relu"  # not one of the element-wise ops TensorFlow moves
    return tf.nn.leaky_relu(tf.reshape(h, [1, 16, 8]))


# name: (what reads the activation's input in TensorFlow's file, by activation), re-measured below
MOVED_CASES = {
    "split-reshape-relu": {"RELU": ["SPLIT", "SPLIT"]},
    "transpose-relu": {},
    "reshape-relu6-reshape": {},
    "depth-to-space-relu": {},
    "transpose-sigmoid": {"LOGISTIC": ["CONV_2D"]},
    "reshape-tanh": {"TANH": ["CONV_2D"]},
    "mean-reshape-relu": {"RELU": ["MEAN"]},
    "reshape-relu-two-readers": {"RELU": ["RESHAPE"]},
    "reshape-leaky-relu": {"LEAKY_RELU": ["RESHAPE"]},
}


def _activation_inputs(tflite: bytes) -> dict[str, list[str]]:
    """For each RELU, RELU6, LOGISTIC, TANH and LEAKY_RELU op: the op that writes its input."""
    sg = read_model(tflite).subgraphs[0]
    writer = {t: o.builtin for o in sg.operators for t in o.outputs}
    out: dict[str, list[str]] = {}
    for o in sg.operators:
        if o.builtin in ("RELU", "RELU6", "LOGISTIC", "TANH", "LEAKY_RELU"):
            out.setdefault(o.builtin, []).append(writer.get(o.inputs[0], "input"))
    return out


@pytest.mark.parametrize("name", list(MOVED_CASES))
def test_activation_moves_before_reshape_as_tensorflow_writes_it(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An element-wise activation after an op that only moves elements (RESHAPE, TRANSPOSE, DEPTH_TO_SPACE)
    read by it alone goes before that op, as TensorFlow's optimize pass reorders them (then fuses into
    the convolution); EfficientViT_B0: ``SPLIT → RELU → RESHAPE``, where the scales of dead ReLUs paired
    with other tensors."""
    shape = [1, 4, 4, 4]
    model = _float_graph(lambda x: _moved_activation(np.random.default_rng(0), x, name), shape)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    assert _activation_inputs(theirs) == MOVED_CASES[name]  # TensorFlow's behaviour, re-measured
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert _ops(ours) == _ops(theirs)
    assert _activation_inputs(ours) == _activation_inputs(theirs)
    _assert_tensorflows_file(ours, theirs, samples)


def _twin_pads(rng: np.random.Generator, x: object, form: str) -> object:
    """Two ZeroPadding2D of one tensor (EfficientFormerV2's downsampling: one before the attention's
    3x3 stride-2 depthwise convolution, one before the block's 3x3 stride-2 convolution)."""
    def pad(t: object, dtype: object = tf.int32) -> object:
        return tf.pad(t, tf.constant([[0, 0], [1, 1], [1, 1], [0, 0]], dtype))

    def conv(t: object, stride: int, co: int = 8) -> object:
        w = tf.constant(rng.normal(0, 0.3, (3, 3, t.shape[-1], co)).astype(np.float32))
        return tf.nn.conv2d(t, w, stride, "VALID")

    def dw(t: object, stride: int) -> object:
        w = tf.constant(rng.normal(0, 0.3, (3, 3, t.shape[-1], 1)).astype(np.float32))
        return tf.nn.depthwise_conv2d(t, w, [1, stride, stride, 1], "VALID")

    if form == "stride-2":  # SAME would pad [0, 1]: both PADs stay, and are one
        return tf.concat([dw(pad(x), 2), conv(pad(x), 2, 4)], -1)
    if form == "int64-paddings":  # equal values of another width: one PAD too
        return tf.concat([conv(pad(x), 2), conv(pad(x, tf.int64), 2)], -1)
    if form == "pools":
        return tf.concat([tf.nn.max_pool2d(pad(x), 3, 1, "VALID"), tf.nn.avg_pool2d(pad(x), 3, 1, "VALID")], -1)
    if form == "stride-1-and-2":  # the stride-1 one goes into its convolution (SAME), the other stays
        return tf.concat([tf.nn.avg_pool2d(conv(pad(x), 1), 2, 2, "VALID"), conv(pad(x), 2)], -1)
    if form == "one-pad-two-convs":  # one PAD read by two stride-1 convolutions: into both
        p = pad(x)
        return tf.concat([conv(p, 1), conv(p, 1)], -1)
    assert form == "twin-means"  # two MEANs over equal axes constants: one MEAN
    m = [tf.reduce_mean(x, tf.constant([1, 2]), keepdims=True) for _ in range(2)]
    return tf.concat([conv(pad(m[0]), 1), conv(pad(m[1]), 2)], -1)


# name: (PADs, MEANs, convolutions with SAME padding) in TensorFlow's file, re-measured below
PAD_CASES = {
    "stride-2": (1, 0, 0),
    "int64-paddings": (1, 0, 0),
    "pools": (1, 0, 0),
    "stride-1-and-2": (1, 0, 1),
    "one-pad-two-convs": (0, 0, 2),
    "twin-means": (0, 1, 2),
}


@pytest.mark.parametrize("name", list(PAD_CASES))
def test_equal_pads_are_one_as_tensorflow_writes_them(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ops on one tensor with equal integer constants (paddings, axes) are one op, as TensorFlow's
    CSE makes them (EfficientFormerV2S0: 8 PAD where qconvert wrote 9), and a PAD goes into each
    convolution it pads as SAME, whatever its other readers."""
    shape = [1, 4, 4, 4]
    model = _float_graph(lambda x: _twin_pads(np.random.default_rng(0), x, name), shape)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)

    def counts(tflite: bytes) -> tuple[int, int, int]:
        ops = read_model(tflite).subgraphs[0].operators
        return (sum(o.builtin == "PAD" for o in ops), sum(o.builtin == "MEAN" for o in ops),
                sum(o.builtin in ("CONV_2D", "DEPTHWISE_CONV_2D") and o.options.get("padding") == "SAME" for o in ops))

    assert counts(theirs) == PAD_CASES[name]  # TensorFlow's behaviour, re-measured
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert _ops(ours) == _ops(theirs)
    assert counts(ours) == counts(theirs)
    _assert_tensorflows_file(ours, theirs, samples)


def _flat_dense(rng: np.random.Generator, x: object, form: str) -> object:
    """A MatMul on ``x`` flattened to 2-D, its result reshaped (a Dense on a map or a sequence)."""
    def mm(t: object, k: int, o: int) -> object:
        return tf.matmul(t, tf.constant(rng.normal(0, 0.3, (k, o)).astype(np.float32)))

    if form == "map-to-sequence":  # FC keeps [1, 4, 4, 5], then RESHAPE [1, 16, 5]
        return tf.nn.relu(tf.reshape(mm(tf.reshape(x, [16, 4]), 4, 5), [1, 16, 5]))
    if form == "map-to-map":  # FC keeps [1, 4, 4, 5], no RESHAPE
        return tf.reshape(mm(tf.reshape(x, [16, 4]), 4, 5), [1, 4, 4, 5]) * 2.0
    if form == "sequence-to-map":
        return tf.reshape(mm(tf.reshape(tf.reshape(x, [1, 16, 4]), [16, 4]), 4, 5), [1, 4, 4, 5]) * 2.0
    assert form == "before-broadcast"  # the RESHAPE only puts a leading 1 before an ADD: it goes, FC stays 2-D
    return tf.reshape(mm(tf.reshape(x, [16, 4]), 4, 5), [1, 16, 5]) + tf.reshape(_conv(rng, x, 5), [1, 16, 5])


@pytest.mark.parametrize("name", ["map-to-sequence", "map-to-map", "sequence-to-map", "before-broadcast"])
def test_fully_connected_keeps_dimensions_before_reshape_as_tensorflow_writes_it(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FULLY_CONNECTED on an N-D input whose result a RESHAPE reads keeps its input's leading
    dimensions (keep_num_dims) and the RESHAPE follows, as TensorFlow writes it (measured on TF 2.21;
    RESHAPE chains merge first, as for TinyViT's last stage above)."""
    shape = [1, 4, 4, 4]
    model = _float_graph(lambda x: _flat_dense(np.random.default_rng(0), x, name), shape)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert _ops(ours) == _ops(theirs)

    def fc(tflite: bytes) -> list[tuple]:
        sg = read_model(tflite).subgraphs[0]
        return [(tuple(sg.tensors[o.inputs[0]].shape), tuple(sg.tensors[o.outputs[0]].shape),
                 o.options.get("keep_num_dims")) for o in sg.operators if o.builtin == "FULLY_CONNECTED"]

    assert fc(ours) == fc(theirs)
    _assert_tensorflows_file(ours, theirs, samples)


def test_group_norm_moments_on_a_5d_view_fully_int8_where_tensorflow_leaves_square_float(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On kcam's 5-D [B, H, W, G, C/G] view (MobileViT_V2's GroupNorm), TensorFlow 2.21 writes the
    moments' SquaredDifference as SUB + a float SQUARE between DEQUANTIZE and QUANTIZE (measured
    on MobileViT_V2_050 too: 21 float SQUAREs); qconvert writes one int8 SQUARED_DIFFERENCE. Given
    TensorFlow's ranges the outputs are 0 LSB apart; with our own calibration the error against the
    float graph is no worse than TensorFlow's file's."""
    model = _graph_of(_group_norm_moments, "5d")
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    assert ("SQUARE", 1) in _ops(theirs) and oracle.float_tensors(theirs)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch)
    assert not oracle.float_tensors(ours) and "SQUARED_DIFFERENCE" in {b for b, _ in _ops(ours)}
    report = oracle.compare_ptq(ours, theirs, samples, ["x"])
    assert report.max_lsb == 0 and not report.weight_diffs, report
    monkeypatch.undo()
    own = convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples).model
    held = {"x": np.random.default_rng(9).uniform(-1, 1, (16, *SHAPE[1:])).astype(np.float32)}
    want = _float_outputs(model, held["x"])
    err = {k: _rms_error(f, held["x"], want) for k, f in (("ours", own), ("tf", theirs))}
    assert err["ours"] <= err["tf"] * 1.01, err


def _graph_of(build: Callable, act: str) -> oracle.FloatGraph:
    return _float_graph(lambda x: build(np.random.default_rng(0), x, act), SHAPE)


def _float_outputs(model: oracle.FloatGraph, xs: np.ndarray) -> np.ndarray:
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(model.graph_def), name="")
    with tf.compat.v1.Session(graph=g) as sess:
        return np.stack([sess.run("out:0", {"x:0": xs[i:i + 1]}) for i in range(len(xs))]).astype(np.float64)


def _rms_error(tflite: bytes, xs: np.ndarray, want: np.ndarray) -> float:
    """RMS of the dequantized output's error in LiteRT REF over the RMS of the float output."""
    it = oracle._interpreter(tflite)
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    (si, zi), (so, zo) = i["quantization"], o["quantization"]
    got = []
    for x in xs:
        it.set_tensor(i["index"], np.clip(np.round(x[None] / si) + zi, -128, 127).astype(np.int8))
        it.invoke()
        got.append((it.get_tensor(o["index"]).astype(np.float64) - zo) * so)
    return float(np.sqrt(np.mean((np.stack(got) - want) ** 2)) / np.sqrt(np.mean(want ** 2)))


def test_div_no_nan_by_a_constant_with_zeros_and_by_an_activation() -> None:
    """``div_no_nan(x, c)``: 0 where ``c`` is 0 (hand-derived: the channel of the zero divisor is
    0, the others x/c within an LSB); by an activation: one line naming the node."""
    c = np.array([2.0, 0.0, 0.5, 4.0], np.float32)
    model = _float_graph(lambda x: tf.math.divide_no_nan(x, tf.constant(c)), SHAPE)
    samples = _samples(model)
    out = convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples).model
    x = samples["x"][:1]
    it = oracle._interpreter(out)
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    (si, zi), (so, zo) = i["quantization"], o["quantization"]
    q = np.clip(np.round(x / si) + zi, -128, 127).astype(np.int8)
    it.set_tensor(i["index"], q)
    it.invoke()
    got = (it.get_tensor(o["index"]).astype(np.float64) - zo) * so
    xq = (q.astype(np.float64) - zi) * si
    want = np.where(c == 0, 0.0, xq / np.where(c == 0, 1, c))
    assert np.all(got[..., 1] == 0.0)
    assert np.max(np.abs(got - want)) <= so
    bad = _float_graph(lambda x: tf.math.divide_no_nan(x, tf.nn.relu(x) + 1.0), SHAPE)
    with pytest.raises(ConversionError, match=r"DivNoNan.*not a constant"):
        convert_graph(bad.graph_def, inputs=["x"], outputs=["out"], calibration_data=_samples(bad))


def test_a_divisor_that_quantizes_to_zero_is_said_and_keep_float_is_the_fix() -> None:
    """``x / sqrt(x² + ε)`` (dp_net's normalisation): the divisor's calibrated values come within
    half an int8 step of 0, so some quantize to its zero point, and LiteRT's int8 DIV stops on them
    (an input of zeros here). qconvert says so naming the tensor; the pattern it names keeps the
    divisor and the DIV float, and LiteRT then runs that input. ``tf.square`` is an int8 MUL x·x
    (TensorFlow leaves SQUARE float: LiteRT has no integer SQUARE)."""
    model = _float_graph(lambda x: x / tf.sqrt(tf.square(x) + 1e-6), SHAPE)
    samples = _samples(model)
    result = convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples)
    note = next(n for n in result.notes if "divisor 'Sqrt'" in n)
    pattern = note.split("--keep-float '")[1].split("'")[0]
    assert pattern == "^Sqrt$"
    assert "SQUARE" not in {b for b, _ in _ops(result.model)} and not oracle.float_tensors(result.model)
    with pytest.raises(RuntimeError, match=r"DIV\) failed to invoke"):  # LiteRT's int8 DIV fails on a zero divisor
        oracle.run_litert(result.model, {"x": np.full(SHAPE, _zero_point(result.model), np.int8)})
    fixed = convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples,
                          keep_float=[pattern]).model
    assert "DIV" in {b for b, _ in _ops(fixed)} and oracle.float_tensors(fixed)
    oracle.run_litert(fixed, {"x": np.full(SHAPE, _zero_point(fixed), np.int8)})


def _zero_point(tflite: bytes) -> int:
    sub = read_model(tflite).subgraphs[0]
    return int(sub.tensors[sub.inputs[0]].zero_point[0])


def _shared_batchnorm(rng: np.random.Generator, x: object, form: str) -> object:
    """LeViT's blocks: a BatchNormalization read by a Dense (a Tensordot, no bias, its own BatchNormalization
    after it) and by a residual ADD."""
    def weights(*shape: int) -> object:
        return tf.constant(rng.normal(0, 0.3, shape).astype(np.float32))

    if form == "conv":  # the stem: conv (no bias) → BatchNorm → {Dense → BatchNorm, residual}
        y = _bn(rng, tf.nn.conv2d(x, weights(3, 3, 4, 16), 2, "SAME"), 16)
        return y + _bn(rng, tf.tensordot(y, weights(16, 16), axes=1), 16)
    h = _pooled(rng, x, keepdims=True)
    if form == "bias-add-between":  # Arm's CNN_S: Dense → +b → Dense → +b2 → BatchNorm (x·m + s) → ReLU
        m, s = _fc_bn_params(rng, 16)
        y = tf.tensordot(h, weights(16, 16), axes=1) + tf.constant(rng.normal(0, 0.5, 16).astype(np.float32))
        y = tf.tensordot(y, weights(16, 16), axes=1) + tf.constant(rng.normal(0, 0.5, 16).astype(np.float32))
        return tf.nn.relu(y * tf.constant(m) + tf.constant(s))
    if form == "no-bias-mul":  # a Dense without a bias, then a multiplier: it keeps no bias
        return tf.tensordot(h, weights(16, 16), axes=1) * tf.constant(rng.uniform(0.5, 1.5, 16).astype(np.float32))
    # the downsampling MLP: Dense (no bias) → BatchNorm → {Dense → BatchNorm, residual}; "splat": the first
    # BatchNorm's variances and γ all equal, so its multiplier is one value (LeViT at 32 px, as trained briefly)
    params = (np.ones(16), rng.normal(0, 0.2, 16), rng.normal(0, 0.2, 16), np.full(16, 0.7)) if form == "splat" else None
    y = _bn(rng, tf.tensordot(h, weights(16, 16), axes=1), 16, params)
    return y + _bn(rng, tf.tensordot(y, weights(16, 16), axes=1), 16)


# name: (form, MULs TensorFlow writes)
SHARED_BN_CASES = {"conv-bn-read-by-dense-and-residual": ("conv", 0),
                   "dense-bn-read-by-dense-and-residual": ("dense", 1),
                   "dense-splat-bn-read-by-dense-and-residual": ("splat", 1),
                   "dense-without-bias-then-mul": ("no-bias-mul", 0),
                   "dense-bias-batchnorm-after-an-add": ("bias-add-between", 0)}


@pytest.mark.parametrize("name", list(SHARED_BN_CASES))
def test_batchnorm_read_by_a_dense_and_a_residual_as_tensorflow_folds_it(name: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow folds what follows a Dense first (its BatchNormalization: the Dense gets a bias), then the
    ADD before it (FuseAddAndFullyConnected), and a MUL after a Conv2D earlier still (its TF-dialect
    FuseMulAndConv2D); the shift stays an ADD for the residual. A multiplier of one value left after an
    affine op is written as a scalar (ScalarizeSplatConstantForBroadcastableOps). qconvert folded the conv's
    BatchNorm whole, so the Dense read its output (LeViT128S: 20 ADD and 12 MUL where TensorFlow writes 22
    and 13), wrote the splat as 16 values, and gave a Dense without a bias a zero one under a MUL."""
    form, muls = SHARED_BN_CASES[name]
    ours, theirs = _assert_both_files(lambda x: _shared_batchnorm(np.random.default_rng(0), x, form), muls, monkeypatch)
    assert _operand_shapes(ours) == _operand_shapes(theirs)  # a scalar where TensorFlow has one; no zero bias


def _operand_shapes(tflite: bytes) -> collections.Counter:
    model = read_model(tflite)
    return collections.Counter((o.builtin, tuple(tuple(model.tensors[i].shape) if i >= 0 else None for i in o.inputs))
                               for o in model.operators)


def test_dense_bias_batchnorm_after_an_add_folds_in_tensorflows_order_16x8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of the folds shows in the bias's last bits: TensorFlow's ((b + W·c)·m) + s, not (b·m + s) +
    (W·m)·c (Arm's CNN_S). 16x8's int64 bias is fine enough to tell them apart (int8's int32 one is not): given
    TensorFlow's ranges, every int64 bias and int8 weight equals its file's."""
    from collections import Counter

    model = _float_graph(lambda x: _shared_batchnorm(np.random.default_rng(0), x, "bias-add-between"), SHAPE)
    samples = _samples(model)
    theirs = oracle.tf_ptq_convert(model, samples, int16=True)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(model.graph_def, inputs=["x"], outputs=["out"], calibration_data=samples,
                         activations="int16").model
    consts = [Counter((t.dtype, t.shape, t.data) for t in read_model(f).tensors
                      if t.data is not None and t.dtype in ("int8", "int64")) for f in (ours, theirs)]
    assert consts[0] == consts[1]
