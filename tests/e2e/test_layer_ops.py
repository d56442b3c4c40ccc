"""One small graph per TensorFlow op that Keras layers produce (issue 16), each against
TensorFlow's converter: the QAT form (FakeQuants around the op, ``from_frozen_graph`` with
int8 inference) must give the same ops, op versions, I/O parameters and int8 outputs in
LiteRT REF; the float form calibrated on the same samples must match TensorFlow's
post-training quantization; and ``qconvert run`` must equal LiteRT REF on every int8 input.

Adding an op to qconvert adds a builder here.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")

SHAPE = [1, 4, 4, 3]


def _leaky_relu(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.leaky_relu(x, alpha=0.2), -0.3, 1.0)


def _identity_n(x, fq):  # type: ignore[no-untyped-def]
    a, b = tf.identity_n([x, fq(tf.nn.relu(x), 0.0, 1.0)])
    return fq(a + b, -1.0, 2.0)


def _reduce_max(x, fq):  # type: ignore[no-untyped-def]
    return tf.reduce_max(fq(tf.nn.relu(x), 0.0, 1.0), axis=[1, 2])  # same scale: no FakeQuant after it


def _global_max_pool_keep(x, fq):  # type: ignore[no-untyped-def]
    return tf.reduce_max(x, axis=[1, 2], keepdims=True)


def _reduce_sum(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.reduce_sum(x, axis=[1, 2]), -8.0, 8.0)


def _slice(x, fq):  # type: ignore[no-untyped-def]
    return tf.slice(x, [0, 1, 1, 0], [1, 2, -1, 2])


def _expand_dims(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.relu(tf.expand_dims(x, 1)), 0.0, 1.0)


def _conv1d(x, fq):  # type: ignore[no-untyped-def]
    # per-tensor weight FakeQuant: TF 2.21 rejects a per-channel one through conv1d's ExpandDims
    w = np.random.default_rng(0).normal(0, 0.3, (3, 3, 4)).astype(np.float32)
    m = float(np.abs(w).max())
    wq = fq(tf.constant(w), -m, m) if isinstance(fq(x, 0.0, 1.0), tf.Tensor) and fq(x, 0.0, 1.0) is not x \
        else tf.constant(w)
    return fq(tf.nn.conv1d(tf.reshape(x, [1, 16, 3]), wq, 1, "SAME"), -3.0, 3.0)


def _hard_swish_keras(x, fq):  # type: ignore[no-untyped-def]
    h = tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME")
    h = fq(h, -4.0, 4.0)
    return fq(h * (tf.nn.relu6(h + 3.0) * (1.0 / 6.0)), -0.4, 4.0)  # keras.applications' hard_swish


def _hard_swish_product(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return fq(h * tf.nn.relu6(h + 3.0) * (1.0 / 6.0), -0.4, 4.0)


def _weights(fq):  # type: ignore[no-untyped-def]
    w = np.random.default_rng(4).normal(0, 0.8, (1, 1, 3, 8)).astype(np.float32)
    m = float(np.abs(w).max())
    return fq(tf.constant(w), -m, m) if fq(tf.constant(1.0), 0.0, 2.0).op.type.startswith("FakeQuant") else tf.constant(w)


def _real_div_folds(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME") / 6.0, -1.0, 1.0)


def _hard_sigmoid(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return fq(fq(tf.nn.relu6(h + 3.0), 0.0, 6.0) / 6.0, 0.0, 1.0)


def _upsampling_nearest(x, fq):  # type: ignore[no-untyped-def]
    return tf.image.resize(fq(tf.nn.relu(x), 0.0, 1.0), [8, 8], method="nearest")  # Keras UpSampling2D


def _resize_nearest_align_corners(x, fq):  # type: ignore[no-untyped-def]
    return tf.compat.v1.image.resize_nearest_neighbor(x, [7, 7], align_corners=True)


def _resize_nearest_plain(x, fq):  # type: ignore[no-untyped-def]
    return tf.compat.v1.image.resize_nearest_neighbor(x, [6, 10])


def _between_ranges(op):  # type: ignore[no-untyped-def]
    """conv → FakeQuant A → op → FakeQuant B: which range the op's input takes."""
    def build(x, fq):  # type: ignore[no-untyped-def]
        return fq(op(fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -3.0, 2.0)), -2.5, 2.5)
    return build


def _abs(x, fq):  # type: ignore[no-untyped-def]
    # tf.abs of a convolution: ABS takes its own range and rescales |x - zp| (int8 ABS v2)
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -3.0, 2.0)
    return fq(tf.abs(h), 0.0, 3.0)


def _abs_same_scale(x, fq):  # type: ignore[no-untyped-def]
    # ranges of equal width: the same scale on both sides, where the kernel adds no multiplier
    return fq(tf.abs(fq(x * 2.0, -1.0, 1.0)), 0.0, 2.0)


def _maximum_constant(x, fq):  # type: ignore[no-untyped-def]
    """MAXIMUM of an activation and a constant: TensorFlow gives its operands the result's range
    (the conv's output takes MAXIMUM's; measured under PTQ: scale 0.01078/zp -100, not its own)."""
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -3.0, 2.0)
    return fq(tf.maximum(h, -0.4), -0.4, 2.0)


def _minimum_constant_on_input(x, fq):  # type: ignore[no-untyped-def]
    """MINIMUM of the graph input and a per-channel constant: under PTQ the input itself is quantized
    with MINIMUM's range."""
    return fq(tf.nn.relu(fq(tf.minimum(x, tf.constant([0.6, 0.2, -0.1])), -1.0, 0.6)), 0.0, 0.6)


def _cropping(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.relu(x[:, 1:-1, 1:, :]), 0.0, 1.0)  # Keras Cropping2D((1, 1), (1, 0))


def _strided_slice_steps(x, fq):  # type: ignore[no-untyped-def]
    return x[:, ::2, 3:0:-2, 1:]


def _strided_slice_shrink(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.relu(x[:, 2, :, :]), 0.0, 1.0)


def _swish(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return fq(h * fq(tf.sigmoid(h), 0.0, 1.0), -0.3, 4.0)  # Keras' swish, as in EfficientNet


def _silu(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return fq(tf.nn.silu(h), -0.3, 4.0)  # tf.nn.silu: IdentityN around x·sigmoid(x)


def _prelu_of(x, alpha):  # type: ignore[no-untyped-def]
    return tf.nn.relu(x) + -alpha * tf.nn.relu(-x)  # Keras' PReLU


def _alpha(channels: int = 3) -> np.ndarray:
    return np.random.default_rng(2).uniform(-0.1, 0.4, (1, 1, channels)).astype(np.float32)


def _prelu(x, fq):  # type: ignore[no-untyped-def]
    return fq(_prelu_of(x, tf.constant(_alpha())), -0.5, 1.0)


def _prelu_quantized_alpha(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return fq(_prelu_of(h, fq(tf.constant(_alpha(8)), -0.1, 0.5)), -1.0, 4.0)


def _upsampling_bilinear(x, fq):  # type: ignore[no-untyped-def]
    return tf.image.resize(fq(tf.nn.relu(x), 0.0, 1.0), [8, 8], method="bilinear")  # half_pixel_centers


def _resize_bilinear_align_corners(x, fq):  # type: ignore[no-untyped-def]
    return tf.compat.v1.image.resize_bilinear(x, [7, 9], align_corners=True)


def _resize_bilinear_plain(x, fq):  # type: ignore[no-untyped-def]
    return tf.compat.v1.image.resize_bilinear(x, [6, 10])


def _resize_bilinear_down(x, fq):  # type: ignore[no-untyped-def]
    return tf.image.resize(x, [3, 2], method="bilinear")


def _pack(x, fq):  # type: ignore[no-untyped-def]
    a = fq(tf.nn.relu(x), 0.0, 1.0)
    return tf.stack([a, a[:, ::-1]], axis=3)


def _pack_two_ranges(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.stack([fq(tf.nn.relu(x), 0.0, 1.0), fq(x * 2.0, -2.0, 2.0)], axis=0), -2.0, 2.0)


def _split(x, fq):  # type: ignore[no-untyped-def]
    a, b = tf.split(fq(tf.nn.relu(x), 0.0, 1.0), 2, axis=1)
    return fq(a + b, 0.0, 2.0)


def _split_v(x, fq):  # type: ignore[no-untyped-def]
    a, b, c = tf.split(x, [1, -1, 1], axis=3)
    return fq(fq(c * b, -1.0, 1.0) + a, -1.5, 1.5)


def _unpack(x, fq):  # type: ignore[no-untyped-def]
    rows = tf.unstack(x, axis=1)  # an unrolled RNN's time steps
    return fq(rows[0] + rows[3], -2.0, 2.0)


def _space_to_depth(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.relu(tf.nn.space_to_depth(x, 2)), 0.0, 1.0)


def _depth_to_space(x, fq):  # type: ignore[no-untyped-def]
    # data movement only: its run is checked on LiteRT's optimized kernels (see OPTIMIZED_ORACLE)
    h = tf.concat([x, x[:, ::-1], x[:, :, ::-1], x[:, ::-1, ::-1]], axis=3)
    return tf.nn.depth_to_space(h, 2)  # sub-pixel upsampling


def _gather(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.nn.relu(tf.gather(x, [2, 0, 0], axis=3)), 0.0, 1.0)


def _arg_max(x, fq):  # type: ignore[no-untyped-def]
    h = fq(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME"), -4.0, 4.0)
    return tf.argmax(h, axis=3)  # a segmentation head


def _dense_3d(x, fq):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(6)
    w = rng.normal(0, 0.5, (3, 5)).astype(np.float32)
    m = float(np.abs(w).max())
    wq = fq(tf.constant(w), -m, m) if fq(tf.constant(1.0), 0.0, 2.0).op.type.startswith("FakeQuant") else tf.constant(w)
    h = tf.tensordot(tf.reshape(x, [1, 16, 3]), wq, axes=1)  # Keras Dense on a sequence
    return fq(tf.nn.relu(h + rng.normal(0, 0.2, 5).astype(np.float32)), 0.0, 2.0)


def _dense_4d(x, fq):  # type: ignore[no-untyped-def]
    w = np.random.default_rng(8).normal(0, 0.5, (3, 4)).astype(np.float32)
    m = float(np.abs(w).max())
    wq = fq(tf.constant(w), -m, m) if fq(tf.constant(1.0), 0.0, 2.0).op.type.startswith("FakeQuant") else tf.constant(w)
    h = fq(tf.nn.relu(x), 0.0, 1.0)
    return fq(tf.tensordot(h, wq, axes=1) + np.float32(0.1), -2.0, 2.0)  # Keras Dense on an image


def _normalization(x, fq):  # type: ignore[no-untyped-def]
    # Keras' Normalization layer (EfficientNet's stem): (x - mean) / sqrt(variance), constants
    mean = tf.constant(np.array([0.1, -0.2, 0.05], np.float32))
    var = tf.constant(np.array([0.7, 1.9, 0.33], np.float32))
    return fq(fq(x - mean, -1.5, 1.5) / tf.maximum(tf.sqrt(var), 1e-7), -3.0, 3.0)


def _split_constant(x, fq):  # type: ignore[no-untyped-def]
    c = np.random.default_rng(9).normal(0, 0.5, (1, 4, 4, 6)).astype(np.float32)
    _, b = tf.split(tf.constant(c), 2, axis=3)  # folds at import
    return fq(x + b, -2.5, 2.5)


def _concat_after_pool(x, fq):  # type: ignore[no-untyped-def]
    # DenseNet's stem and first block: the concat's range reaches back through MaxPool and Pad
    # to the ReLU of the convolution (no requantize before the pool)
    h = fq(tf.nn.relu(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME")), 0.0, 2.0)
    p = tf.nn.max_pool2d(tf.pad(h, [[0, 0], [1, 1], [1, 1], [0, 0]]), 2, 1, "VALID")
    w = np.random.default_rng(9).normal(0, 0.5, (1, 1, 8, 4)).astype(np.float32)
    m = float(np.abs(w).max())
    wq = fq(tf.constant(w), -m, m) if fq(tf.constant(1.0), 0.0, 2.0).op.type.startswith("FakeQuant") else w
    c = fq(tf.nn.conv2d(p, wq, [1, 1, 1, 1], "SAME"), -2.0, 2.0)
    return fq(tf.concat([p, c], axis=3), -2.0, 2.0)


def _pool_branches(x, fq):  # type: ignore[no-untyped-def]
    # InceptionV3's mixed block: a max pool (no FakeQuant) read by a convolution and by an
    # average pool with its own range; the convolution reads the pool's values, not the copy
    # requantized for the average pool (TensorFlow leaves it float32 there)
    h = fq(tf.nn.relu(tf.nn.conv2d(x, _weights(fq), [1, 1, 1, 1], "SAME")), 0.0, 2.0)
    p = tf.nn.max_pool2d(h, 2, 1, "SAME")
    a = fq(tf.nn.avg_pool2d(p, 3, 1, "SAME"), 0.0, 2.2)  # wider than the pool: no clamp before it
    w = np.random.default_rng(13).normal(0, 0.5, (1, 1, 8, 4)).astype(np.float32)
    c = fq(tf.nn.relu(tf.nn.conv2d(p, _fq_weight(fq, w), [1, 1, 1, 1], "SAME")), 0.0, 2.5)
    return fq(tf.concat([a, c], axis=3), 0.0, 2.5)


def _zero_pad_conv(pads, stride, depthwise=False):  # type: ignore[no-untyped-def]
    # ZeroPadding2D before a VALID convolution: TensorFlow folds the PAD when it is SAME's padding
    def build(x, fq):  # type: ignore[no-untyped-def]
        p = tf.pad(x, [[0, 0], list(pads), list(pads), [0, 0]])
        if depthwise:
            w = np.random.default_rng(11).normal(0, 0.5, (3, 3, 3, 2)).astype(np.float32)
            y = tf.nn.depthwise_conv2d(p, _fq_weight(fq, w), [1, stride, stride, 1], "VALID")
        else:
            w = np.random.default_rng(12).normal(0, 0.5, (3, 3, 3, 4)).astype(np.float32)
            y = tf.nn.conv2d(p, _fq_weight(fq, w), stride, "VALID")
        return fq(tf.nn.relu(y), 0.0, 3.0)
    return build


def _conv2d_transpose(stride, padding, k, bias=True, act=None):  # type: ignore[no-untyped-def]
    # Conv2DTranspose: Conv2DBackpropInput, then BiasAdd and the activation TensorFlow fuses into it
    def build(x, fq):  # type: ignore[no-untyped-def]
        w = np.random.default_rng(13).normal(0, 0.5, (k, k, 5, 3)).astype(np.float32)  # [H, W, out, in]
        side = 4 * stride if padding == "SAME" else 3 * stride + k
        y = tf.nn.conv2d_transpose(x, _fq_weight(fq, w), [1, side, side, 5], stride, padding)
        if bias:
            y = tf.nn.bias_add(y, np.linspace(-0.5, 0.5, 5).astype(np.float32))
        if act is not None:
            y = act(y)
        return fq(y, 0.0 if act is not None else -3.0, 3.0)
    return build


def _grouped_conv(groups, out, pre=0):  # type: ignore[no-untyped-def]
    # a grouped conv (Keras Conv2D(groups=G)): the filter has C / G input channels; pre > 0 first
    # widens the 3 input channels with a 1x1 conv
    def build(x, fq):  # type: ignore[no-untyped-def]
        if pre:
            w0 = np.random.default_rng(14).normal(0, 0.6, (1, 1, 3, pre)).astype(np.float32)
            x = fq(tf.nn.conv2d(x, _fq_weight(fq, w0), 1, "SAME"), -2.0, 2.0)
        channels = pre or 3
        w = np.random.default_rng(15).normal(0, 0.5, (3, 3, channels // groups, out)).astype(np.float32)
        bias = np.linspace(-0.3, 0.3, out).astype(np.float32)
        y = tf.nn.bias_add(tf.nn.conv2d(x, _fq_weight(fq, w), 1, "SAME"), bias)
        return fq(tf.nn.relu(y), 0.0, 3.0)
    return build


def _gelu(approximate):  # type: ignore[no-untyped-def]
    # Keras' "gelu" activation is tf.nn.gelu: 0.5·x·erfc(-x/√2), or its tanh form; TF fuses either into GELU
    def build(x, fq):  # type: ignore[no-untyped-def]
        h = fq(x * 2.0, -2.0, 2.0)
        return fq(tf.nn.gelu(h, approximate=approximate), -0.2, 2.0)
    return build


def _layer_norm(x, fq):  # type: ignore[no-untyped-def]
    # Keras' LayerNormalization as tf-keras writes it (moments, then batch_normalization's
    # rsqrt): MEAN, SQUARED_DIFFERENCE, MEAN, ADD eps, RSQRT, MUL gamma, MUL, MUL, SUB beta, ADD
    gamma = np.array([0.8, 1.2, 1.0], np.float32)
    beta = np.array([0.1, -0.2, 0.05], np.float32)
    mean = fq(tf.reduce_mean(x, axis=-1, keepdims=True), -1.0, 1.0)
    var = fq(tf.reduce_mean(fq(tf.math.squared_difference(x, tf.stop_gradient(mean)), 0.0, 4.0), axis=-1,
                            keepdims=True), 0.0, 1.5)
    inv = fq(tf.math.rsqrt(fq(var + 0.01, 0.0, 1.5)), 0.0, 10.0)
    scale = fq(inv * gamma, 0.0, 12.0)
    scaled = fq(x * scale, -6.0, 6.0)
    shift = fq(beta - fq(mean * scale, -6.0, 6.0), -6.0, 6.0)
    return fq(scaled + shift, -6.0, 6.0)


def _layer_norm_fused(rows):  # type: ignore[no-untyped-def]
    # Keras' LayerNormalization with its default epsilon: x reshaped to NCHW [1, rows, features, 1],
    # FusedBatchNormV3 in training mode (batch statistics) with scale 1 and offset 0, reshaped back,
    # then gamma and beta. rows=1: over all axes (LayerNormalization(axis=[1, 2, 3]))
    def build(x, fq):  # type: ignore[no-untyped-def]
        gamma = np.array([0.8, 1.2, 1.0], np.float32)
        beta = np.array([0.1, -0.2, 0.05], np.float32)
        features = int(np.prod(SHAPE)) // rows
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(tf.reshape(x, [1, rows, features, 1]), tf.ones([rows]),
                                                   tf.zeros([rows]), epsilon=0.001, data_format="NCHW",
                                                   is_training=True)
        return fq(tf.reshape(y, SHAPE) * gamma + beta, -4.0, 4.0)
    return build


def _exp(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.exp(x), 0.0, 2.8)  # EXP int8 v2: the table of expf (issue 36, dp_net's softplus)


def _log(x, fq):  # type: ignore[no-untyped-def]
    # LOG int8 v2: the table of logf; |x| = 0 gives the output's lowest value (log(0) = -inf)
    return fq(tf.math.log(fq(tf.abs(x), 0.0, 1.0)), -4.0, 0.0)


def _sqrt(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.sqrt(fq(tf.abs(x), 0.0, 1.0)), 0.0, 1.0)  # SQRT int8 v2: float32 per element, truncated


def _pow_half(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.pow(fq(tf.abs(x), 0.0, 1.0), 0.5), 0.0, 1.0)  # TF writes SQRT


def _pow_square(x, fq):  # type: ignore[no-untyped-def]
    return fq(tf.pow(x, 2.0), 0.0, 1.0)  # TF writes MUL(x, x)


def _fq_weight(fq, w):  # type: ignore[no-untyped-def]
    m = float(np.abs(w).max())
    return fq(tf.constant(w), -m, m) if fq(tf.constant(1.0), 0.0, 2.0).op.type.startswith("FakeQuant") else w


BUILDERS: dict[str, Callable] = {"upsampling_nearest": _upsampling_nearest,
                                 "resize_nearest_align_corners": _resize_nearest_align_corners,
                                 "resize_nearest_plain": _resize_nearest_plain, "real_div_folds": _real_div_folds,
    # TF's driver counts integer operands: RESIZE (size) and PAD (paddings) take B, MAX_POOL keeps A
    "gelu": _gelu(False), "gelu_approximate": _gelu(True), "layer_norm": _layer_norm,
    "abs": _abs, "abs_same_scale": _abs_same_scale,
    "exp": _exp, "log": _log, "sqrt": _sqrt, "pow_half": _pow_half, "pow_square": _pow_square,
    "layer_norm_fused": _layer_norm_fused(16), "layer_norm_fused_all_axes": _layer_norm_fused(1),
    "grouped_conv_depthwise_like": _grouped_conv(3, 6),  # one input channel per group
    "grouped_conv_two_groups": _grouped_conv(2, 6, pre=4),
    "resize_between_ranges": _between_ranges(lambda h: tf.compat.v1.image.resize_nearest_neighbor(h, [8, 8])),
    "pad_between_ranges": _between_ranges(lambda h: tf.pad(h, [[0, 0], [1, 1], [1, 1], [0, 0]])),
    "max_pool_between_ranges": _between_ranges(lambda h: tf.nn.max_pool2d(h, 2, 2, "VALID")), "hard_sigmoid": _hard_sigmoid,
                                 "hard_swish_keras": _hard_swish_keras, "hard_swish_product": _hard_swish_product,
                                 "leaky_relu": _leaky_relu, "identity_n": _identity_n,
                                 "reduce_max": _reduce_max, "global_max_pool_keep": _global_max_pool_keep,
                                 "reduce_sum": _reduce_sum, "slice": _slice, "expand_dims": _expand_dims,
                                 "conv1d": _conv1d, "cropping": _cropping, "maximum_constant": _maximum_constant,
                                 "minimum_constant_on_input": _minimum_constant_on_input,
                                 "strided_slice_steps": _strided_slice_steps,
                                 "strided_slice_shrink": _strided_slice_shrink, "swish": _swish, "silu": _silu,
                                 "prelu": _prelu, "prelu_quantized_alpha": _prelu_quantized_alpha,
                                 "upsampling_bilinear": _upsampling_bilinear,
                                 "resize_bilinear_align_corners": _resize_bilinear_align_corners,
                                 "resize_bilinear_plain": _resize_bilinear_plain,
                                 "resize_bilinear_down": _resize_bilinear_down, "pack": _pack, "space_to_depth": _space_to_depth, "depth_to_space": _depth_to_space,
                                 "gather": _gather, "arg_max": _arg_max, "dense_3d": _dense_3d, "normalization": _normalization, "dense_4d": _dense_4d, "split": _split, "split_constant": _split_constant, "split_v": _split_v, "unpack": _unpack,
                                 "pack_two_ranges": _pack_two_ranges, "concat_after_pool": _concat_after_pool,
                                 "pool_branches": _pool_branches,
                                 "reverse_time": lambda h, fq: fq(tf.reverse(h, [1]), -1.0, 1.0),
                                 "reverse_two_axes": lambda h, fq: fq(tf.reverse(fq(tf.nn.relu(h), 0.0, 1.0), [1, 2]), 0.0, 1.0),
                                 "zero_pad_conv_same": _zero_pad_conv((1, 1), 1),
                                 "zero_pad_conv_stride2_kept": _zero_pad_conv((1, 1), 2),
                                 "zero_pad_depthwise_stride2": _zero_pad_conv((0, 1), 2, depthwise=True),
                                 "conv2d_transpose_relu": _conv2d_transpose(2, "SAME", 3, act=tf.nn.relu),
                                 "conv2d_transpose_valid": _conv2d_transpose(1, "VALID", 2),
                                 "conv2d_transpose_stride3_relu6": _conv2d_transpose(3, "VALID", 2, act=tf.nn.relu6),
                                 "conv2d_transpose_no_bias": _conv2d_transpose(2, "SAME", 4, bias=False),
                                 "conv2d_transpose_no_bias_relu": _conv2d_transpose(2, "SAME", 3, bias=False,
                                                                                    act=tf.nn.relu)}


# (and LiteRT 2.3's reference resolver has no DEPTH_TO_SPACE v2, the version TensorFlow writes)
OPTIMIZED_ORACLE = {"reduce_sum", "depth_to_space"}
# TensorFlow 2.21 folds a division after a conv with a FakeQuant'd kernel into the kernel and then
# leaves the conv in float32 between DEQUANTIZE and QUANTIZE (measured)
# and leaves PRELU in float32 when its alpha has a FakeQuant (measured: DEQUANTIZE, PRELU, QUANTIZE)
# and a TRANSPOSE_CONV without bias before a RELU (it fuses no activation into it, so its output has no
# range; after calibration it writes TRANSPOSE_CONV and RELU, both int8, which the PTQ test compares)
# and a convolution reading a max pool whose value is requantized for an average pool (pool_branches)
TF_LEAVES_FLOAT = {"real_div_folds", "prelu_quantized_alpha", "conv2d_transpose_no_bias_relu", "pool_branches"}
# TensorFlow 2.21 leaves UNPACK in float32 in about half of its runs on the same graph and
# quantizes it in the others (measured: 2 of 4 runs): whichever it did is the comparison
TF_SOMETIMES_FLOAT = {"unpack"}
SHAPE_ONLY = {"RESHAPE", "SQUEEZE"}
# graphs with a FakeQuant only at the end: the QAT form has no ranges inside (we refuse it, as
# we must); they are compared under post-training quantization, and run on that file
PTQ_ONLY = {"layer_norm_fused", "layer_norm_fused_all_axes"}


def _graph(name: str, qat: bool) -> bytes:
    tf1 = tf.compat.v1

    def fq(t, lo, hi):  # type: ignore[no-untyped-def]
        return tf.quantization.fake_quant_with_min_max_vars(t, lo, hi) if qat else t

    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, SHAPE, name="input")
        tf.identity(BUILDERS[name](fq(x, -1.0, 1.0), fq), name="out")
    return g.as_graph_def().SerializeToString()


def _tf_qat(pb: bytes) -> bytes:
    import oracle

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pb")
        with open(path, "wb") as f:
            f.write(pb)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, ["input"], ["out"], {"input": SHAPE})
        c.inference_type = tf.int8
        c.quantized_input_stats = {"input": oracle.input_stats(-1.0, 1.0)}
        return c.convert()


def _ops(tflite: bytes) -> list[tuple[str, int]]:
    from qconvert.schema.reader import read_model

    return [(op.builtin, op.version) for op in read_model(tflite).subgraphs[0].operators]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_qat_graph_matches_tensorflow(name: str) -> None:
    import oracle

    from qconvert.api import convert_graph

    if name in PTQ_ONLY:
        pytest.skip("no FakeQuant inside the graph: compared under post-training quantization")
    pb = _graph(name, qat=True)
    theirs = _tf_qat(pb)
    ours = convert_graph(pb, {"input": (-1.0, 1.0)}, inputs=["input"], outputs=["out"]).model
    if name in TF_LEAVES_FLOAT or (name in TF_SOMETIMES_FLOAT and oracle.float_tensors(theirs)):
        # TensorFlow leaves the op in float: the training graph is the oracle
        assert oracle.float_tensors(theirs), "TensorFlow quantizes it fully now: compare with it"
        assert not oracle.float_tensors(ours)
        _assert_close_to_training_graph(pb, ours)
        return
    # the same compute ops and versions; shape-only ops may differ (TensorFlow writes a Squeeze as
    # RESHAPE, merges RESHAPE chains and may move a unary op across one: docs/differences.md)
    assert sorted(o for o in _ops(ours) if o[0] not in SHAPE_ONLY) == \
        sorted(o for o in _ops(theirs) if o[0] not in SHAPE_ONLY)
    oracle.compare_models(ours, theirs, n_inputs=32, seed=3)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_float_graph_matches_tensorflows_ptq(name: str) -> None:
    import oracle

    from qconvert.api import convert_graph

    pb = _graph(name, qat=False)
    samples = {"input": np.random.default_rng(7).uniform(-1, 1, (32, *SHAPE[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(oracle.FloatGraph(pb, ["input"], ["out"], {"input": SHAPE}), samples)
    # qconvert's numpy engine adds as TFLite's kernels do: its ranges are TensorFlow's to the last bit here
    # (the default LiteRT engine differs in the last bits: layer_norm_fused is 1 LSB off with it)
    ours = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples,
                         calibration_engine="numpy").model
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    # tensors after shape-only ops may be calibrated differently where TensorFlow reorders them
    shape_op_diffs = [d for d in report.zero_point_diffs if d.split()[0] in SHAPE_ONLY]
    assert report.tensors > 0 and report.zero_point_diffs == shape_op_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.within_1 == report.outputs, report


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_run_equals_litert_on_every_int8_input(name: str) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from qconvert.api import convert_graph
    from qconvert.runtime.interpreter import IntegerModel

    if name in PTQ_ONLY:
        samples = {"input": np.random.default_rng(7).uniform(-1, 1, (32, *SHAPE[1:])).astype(np.float32)}
        model = convert_graph(_graph(name, qat=False), inputs=["input"], outputs=["out"],
                              calibration_data=samples).model
    else:
        model = convert_graph(_graph(name, qat=True), {"input": (-1.0, 1.0)}, inputs=["input"],
                              outputs=["out"]).model
    # LiteRT's reference SUM reads int8 data as uint8 (reduce.cc passes GetTensorData<uint8_t> to
    # reference_ops::QuantizedMeanOrSum for every 8-bit type): there the optimized kernel is the oracle
    resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if name in OPTIMIZED_ORACLE else OpResolverType.BUILTIN_REF
    it = Interpreter(model_content=model, experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    ours = IntegerModel(model)
    values = np.resize(np.arange(-128, 128, dtype=np.int8), (6, *SHAPE)).astype(np.int8)  # every value, 6 times
    for x in values:
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        expected = it.get_tensor(it.get_output_details()[0]["index"])
        got = ours.run({"input": x})
        np.testing.assert_array_equal(np.asarray(next(iter(got.values()))), expected)


def _assert_close_to_training_graph(pb: bytes, model: bytes) -> None:
    """int8 outputs within 1 LSB of the training graph (FakeQuants applied) on random inputs."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(pb), name="")
    it = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    (si, zi), (so, zo) = i["quantization"], o["quantization"]
    rng = np.random.default_rng(9)
    with tf.compat.v1.Session(graph=g) as s:
        for _ in range(8):
            q = rng.integers(-128, 128, SHAPE).astype(np.int8)
            it.set_tensor(i["index"], q)
            it.invoke()
            got = it.get_tensor(o["index"]).astype(np.float64)
            want = s.run("out:0", {"input:0": ((q.astype(np.float32) - zi) * si)}) / so + zo
            assert np.abs(got - np.round(want)).max() <= 1


def test_int64_and_constant_outputs_run_as_in_litert() -> None:
    """ARG_MAX's int64 index and a constant graph output (a dangling FakeQuant on a constant,
    which output auto-detection picks up) come out of ``run`` as LiteRT gives them."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from qconvert.api import convert_graph
    from qconvert.runtime.interpreter import IntegerModel

    model = convert_graph(_graph("arg_max", qat=True), {"input": (-1.0, 1.0)}).model
    it = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    x = np.random.default_rng(5).integers(-128, 128, SHAPE).astype(np.int8)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = IntegerModel(model).run({"input": x})
    assert len(got) == len(it.get_output_details()) == 2
    for d in it.get_output_details():
        np.testing.assert_array_equal(got[d["name"]], it.get_tensor(d["index"]))
        assert got[d["name"]].dtype == it.get_tensor(d["index"]).dtype


def _refused_graph(kind: str) -> bytes:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
        if kind == "erfc":  # erfc, but not GELU's pattern
            y = tf.math.erfc(x) * 2.0
        elif kind == "pow_cube":  # a power TensorFlow leaves float (DEQUANTIZE, POW, QUANTIZE)
            y = tf.pow(x, 3.0)
        else:  # a BatchNormalization frozen in training mode (NHWC): batch statistics, not a LayerNorm
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]), is_training=True)
        tf.identity(y, name="out")
    return g.as_graph_def().SerializeToString()


@pytest.mark.parametrize("kind, words", [("erfc", ["'Erfc'", "GELU", "tf.nn.gelu"]),
                                         ("batch_norm_training", ["FusedBatchNorm", "training=False"]),
                                         ("pow_cube", ["(Pow, exponent 3)", "x**0.5 (SQRT)"])])
def test_refused_with_one_line(tmp_path, capsys, kind: str, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    from qconvert.cli import main

    pb, cal, out = tmp_path / "m.pb", tmp_path / "cal.npz", tmp_path / "m.tflite"
    pb.write_bytes(_refused_graph(kind))
    np.savez(cal, input=np.random.default_rng(0).uniform(-1, 1, (4, *SHAPE[1:])).astype(np.float32))
    assert main([str(pb), "--calibration-data", str(cal), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("qconvert: error:"), err
    assert all(w in err[0] for w in words), err[0]
    assert sorted(os.listdir(tmp_path)) == ["cal.npz", "m.pb"]  # no output, no temporary file
