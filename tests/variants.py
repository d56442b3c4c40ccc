"""Edge-case QAT graphs beyond the core corpus, each probing one converter rule.

Every ``v_*`` function is a GraphBuilder recipe (see corpus.py). The sets below say
what each must do: match TensorFlow bit for bit, be refused by qconvert because
TensorFlow would leave float ops behind, or differ from TensorFlow on purpose
(documented in the README).
"""

from __future__ import annotations

import numpy as np


def v_pad_sym(b):
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1, 1))
    y = tf.pad(x, [[0,0],[1,1],[1,1],[0,0]])
    y = b.act(tf.nn.relu(b.conv(y, 3, 3, 4, padding="VALID")), "c")
    b.output(y); return ""
def v_relu_after_concat(b):
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(b.conv(x, 1, 1, 4), "c")
    y = tf.concat([a, c], 3)
    y = b.act(y, "cat")
    y = b.act(tf.nn.relu(y), "r")
    b.output(y); return ""
def v_fq_after_reshape(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = b.act(tf.reshape(a, [1, -1]), "r")
    y = b.act(b.dense(y, 5), "d")
    b.output(y); return ""
def v_add_const(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = b.act(tf.nn.relu(a) + tf.constant(np.array([0.5, -0.25, 1.0, 0.1], np.float32)), "r")
    y = b.act(y * tf.constant(0.75), "m")
    b.output(y); return ""
def v_no_bias_conv(b):
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    y = b.act(b.conv(x, 3, 3, 4, bias=False), "a")
    y = b.act(b.conv(y, 3, 3, 4, stride=2, padding="VALID", bias=False), "b")
    b.output(y); return ""
def v_double_fq(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    y = b.act(b.conv(x, 3, 3, 4), "a")
    y = b.fixed(y, (-0.5, 0.5), "second")
    y = b.act(tf.nn.relu(b.conv(y, 1, 1, 4)), "b")
    b.output(y); return ""
def v_maxpool_fq(b):
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1, 1))
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 4)), "a")
    y = b.fixed(tf.nn.max_pool2d(y, 2, 2, "VALID"), (0.0, 1.0), "mp")
    y = b.act(b.conv(y, 1, 1, 4), "b")
    b.output(y); return ""
def v_softmax_noout(b):
    tf = b.tf
    x = b.input("input", [1, 16], (-1, 1))
    y = b.act(b.dense(x, 8), "a")
    y = tf.nn.softmax(y)
    b.output(y); return ""
def v_dilated(b):
    tf = b.tf
    x = b.input("input", [1, 12, 12, 3], (-1, 1))
    w = b.weight([3,3,3,4], per_channel=True)
    y = tf.nn.conv2d(x, w, strides=[1,1,1,1], padding="SAME", dilations=[1,2,2,1])
    y = b.act(tf.nn.relu(tf.nn.bias_add(y, b.bias(4))), "a")
    b.output(y); return ""
def v_matmul_tb(b):
    tf = b.tf
    x = b.input("input", [1, 16], (-1, 1))
    w = b.weight([8, 16])
    y = b.act(tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w, transpose_b=True), b.bias(8))), "a")
    b.output(y); return ""
def v_mean_keep(b):
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1, 1))
    y = b.act(tf.nn.relu6(b.conv(x, 3, 3, 4)), "a")
    y = b.act(tf.reduce_mean(y, axis=[1, 2], keepdims=True), "m")
    y = b.act(b.conv(y, 1, 1, 5), "c")
    y = tf.squeeze(y, [1, 2])
    b.output(y); return ""
def v_sub_const_first(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = b.act(tf.constant(1.0) - a, "s")
    b.output(y); return ""
def v_dw_perchannel(b):
    tf = b.tf
    x = b.input("input", [1, 8, 8, 4], (-1, 1))
    w = b.weight([3,3,4,1], per_channel=True)
    y = tf.nn.depthwise_conv2d(x, w, [1,1,1,1], "SAME")
    y = b.act(tf.nn.relu(tf.nn.bias_add(y, b.bias(4))), "a")
    b.output(y); return ""
def v_avgpool_same(b):
    tf = b.tf
    x = b.input("input", [1, 7, 7, 3], (-1, 1))
    y = b.act(b.conv(x, 1, 1, 4), "a")
    y = tf.nn.avg_pool2d(y, 3, 2, "SAME")
    y = tf.nn.max_pool2d(y, 3, 1, "SAME")
    b.output(y); return ""
def v_weights_nofq(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    w = tf.constant(b.rng.normal(0, 0.3, (3,3,3,4)).astype(np.float32))
    y = b.act(tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, [1,1,1,1], "SAME"), b.bias(4))), "a")
    b.output(y); return ""
def v_relu_standalone(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = b.act(tf.nn.relu(a), "r")
    y = b.act(tf.nn.relu6(y * 3.0), "r6")
    b.output(y); return ""
def v_tanh_sig_out(b):
    tf = b.tf
    x = b.input("input", [1, 16], (-1, 1))
    a = b.act(b.dense(x, 8), "a")
    y = b.act(tf.sigmoid(a), "s")
    z = b.act(tf.tanh(a), "t")
    b.output(y * z); return ""

def v_double_fq_input(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    x = b.fixed(x, (-0.5, 0.7), "second")
    y = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "b")
    b.output(y); return ""
def v_double_fq_concat(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(b.conv(x, 1, 1, 4), "c")
    y = b.act(tf.concat([a, c], 3), "cat")
    y = b.fixed(y, (-0.5, 0.7), "second")
    y = b.act(tf.nn.relu(b.conv(y, 1, 1, 4)), "b")
    b.output(y); return ""
def v_double_fq_branch(b):
    tf = b.tf
    x = b.input("input", [1, 6, 6, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    s = b.fixed(a, (-0.5, 0.7), "second")
    y = b.act(tf.nn.relu(b.conv(s, 1, 1, 4)), "b")
    z = b.act(tf.nn.relu(b.conv(a, 1, 1, 4)), "z")
    b.output(b.act(y + z, "sum")); return ""
def v_add_const_fq(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = b.act(a + tf.constant(np.array([0.5, -0.25, 1.0, 0.1], np.float32)), "r")
    y = b.act(y * tf.constant(np.array([0.5, 2.0, -1.0, 0.1], np.float32)), "m")
    b.output(y); return ""
def v_relu1(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.conv(x, 1, 1, 4)
    y = b.act(tf.minimum(tf.maximum(a, -1.0), 1.0), "r")
    b.output(y); return ""
def v_relu1_standalone(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(tf.concat([a, a], 3), "c")
    y = b.act(tf.minimum(tf.maximum(c, -1.0), 1.0), "r")
    b.output(y); return ""
def v_max_min_general(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    y = tf.minimum(tf.maximum(a, -0.5), 0.25)
    y = b.act(tf.maximum(a, 0.0) + y, "s")
    b.output(y); return ""
def v_relu6_clip(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.conv(x, 1, 1, 4)
    y = b.act(tf.clip_by_value(a * 1.0, 0.0, 6.0), "r")
    b.output(y); return ""


BIT_EXACT = [
    "v_pad_sym", "v_relu_after_concat", "v_fq_after_reshape", "v_add_const_fq", "v_no_bias_conv",
    "v_maxpool_fq", "v_softmax_noout", "v_dilated", "v_matmul_tb", "v_mean_keep", "v_sub_const_first",
    "v_dw_perchannel", "v_avgpool_same", "v_weights_nofq", "v_relu_standalone", "v_relu1",
    "v_relu1_standalone", "v_relu6_clip", "v_self_ops", "v_matmul_two_activations", "v_transpose_ops",
    "v_shape_arith_flatten", "v_concat_no_output_fq", "v_mid_output", "v_cat2", "v_cat_pool", "v_cat_out",
]
# TensorFlow converts these "successfully" with float ops left in; qconvert refuses, naming the tensor.
TF_LEAVES_FLOAT = {"v_add_const": "'Relu'", "v_max_min_general": "'Maximum_1'", "v_tanh_sig_out": "'mul'"}
# Back-to-back FakeQuants: TF keeps the first range for the tensor and uses the second only for the
# next op's bias; we match it bit for bit and print a note (README, "Two FakeQuants in a row").
DOUBLE_FAKE_QUANT = ["v_double_fq", "v_double_fq_input", "v_double_fq_concat", "v_double_fq_branch"]


def v_self_ops(b):
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    s = b.act(a + a, "s")
    m = b.act(s * s, "m")
    b.output(b.act(m - a, "d")); return ""


def v_matmul_two_activations(b):
    tf = b.tf
    x = b.input("input", [1, 8], (-1, 1))
    a = b.act(b.dense(x, 8), "a")
    c = b.act(b.dense(x, 8), "c")
    b.output(b.act(tf.matmul(a, c, transpose_b=True), "m")); return ""


def v_transpose_ops(b):
    tf = b.tf
    x = b.input("input", [1, 8], (-1, 1))
    a = b.act(b.dense(x, 8), "a")
    c = b.act(b.dense(x, 8), "c")
    b.output(b.act(tf.matmul(a, tf.transpose(c)), "m"), "output_matmul")
    t = tf.transpose(tf.reshape(a, [-1, 2, 4, 1]), [0, 2, 1, 3])
    b.output(b.act(tf.nn.relu(b.conv(t, 1, 1, 2)), "o")); return ""


def v_shape_arith_flatten(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "a")
    flat = tf.reshape(a, tf.stack([tf.shape(a)[0], tf.reduce_prod(tf.shape(a)[1:])]))
    b.output(b.act(b.dense(flat, 5), "d")); return ""


def v_concat_no_output_fq(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "c")
    y = tf.concat([a, c, x], 3)
    b.output(b.act(b.conv(y, 1, 1, 4), "o")); return ""


def v_mid_output(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "a")
    b.output(a, "output_mid")
    p = tf.nn.max_pool2d(a, 2, 2, "VALID")
    b.output(p, "output_pool")
    b.output(b.act(b.conv(a, 1, 1, 4), "o")); return ""


def v_cat2(b):
    """Concat of two FakeQuant'ed branches, no FakeQuant after: TF uses the union of the ranges."""
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "c")
    y = tf.concat([a, c], 3)
    b.output(b.act(b.conv(y, 1, 1, 4), "o")); return ""


def v_cat_pool(b):
    """Concat of two pools (propagated parameters): TF's work-list order picks the last branch."""
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "c")
    y = tf.concat([tf.nn.max_pool2d(a, 2, 2, "VALID"), tf.nn.max_pool2d(c, 2, 2, "VALID")], 3)
    b.output(b.act(b.conv(y, 1, 1, 4), "o")); return ""


def v_cat_out(b):
    tf = b.tf
    x = b.input("input", [1, 4, 4, 3], (-1, 1))
    a = b.act(b.conv(x, 1, 1, 4), "a")
    c = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "c")
    b.output(tf.concat([c, a], 3)); return ""
