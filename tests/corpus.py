"""A corpus of small TF1-style quantization-aware-training (QAT) graphs.

Each graph is built in code with ``tf.compat.v1`` graph mode from a fixed seed.
Weights carry symmetric FakeQuant ranges ([-m, m], m = max|w| per tensor or per
output channel). Activation FakeQuant ranges are "learned" the way QAT would learn
them: the graph is built once without activation FakeQuants, run on random inputs
(fixed seed), and the observed min/max (always including 0) become the ranges of
the second, final build. Ranges are rounded to 5 significant digits so that tiny
float differences between machines cannot change the bytes of the GraphDef.

The corpus is the input side of the end-to-end tests: every model is converted by
qconvert and by TensorFlow's own converter (``tests/oracle.py``) and the two
results must agree bit for bit.

Patterns TensorFlow 2.21's converter rejects or leaves in float are avoided on
purpose (see ``tests/oracle.py`` and the notes on each builder):

* no FakeQuant directly after MaxPool / AvgPool / Reshape / Squeeze / Pad: these
  are same-scale ops and their output inherits the input's parameters (TF 2.21
  accepts a differing FakeQuant after a pool, with a requantizing QUANTIZE op;
  only the ``requantize`` model does that on purpose; a FakeQuant right after a
  Reshape is hoisted above it and stacks on the previous one, so none of that);
* Concat inputs keep their own (different) ranges and the Concat output carries
  its own FakeQuant;
* Softmax / Sigmoid / Tanh outputs carry no FakeQuant: TFLite fixes their output
  parameters (1/256, -128) and (1/128, 0) (again, ``requantize`` is the exception);
* every op output that needs one has a FakeQuant: with one missing, TF converts
  "successfully" but leaves the ops around it in float32 between DEQUANTIZE and
  QUANTIZE (``oracle.float_tensors`` catches that).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Samples used to "learn" activation ranges; the placeholders get this batch size
# during calibration and batch 1 in the final graph.
_CALIB_BATCH = 32

# TF ops the corpus as a whole must contain (checked by tests/test_e2e.py).
REQUIRED_OPS: frozenset[str] = frozenset(
    {
        "Placeholder", "Const", "Identity", "NoOp", "Conv2D", "DepthwiseConv2dNative",
        "MatMul", "BiasAdd", "Add", "AddV2", "Sub", "Mul", "Relu", "Relu6", "AvgPool",
        "MaxPool", "Mean", "Reshape", "Squeeze", "ConcatV2", "Pad", "Softmax", "Sigmoid",
        "Tanh", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
        "FakeQuantWithMinMaxArgs",
    }
)


@dataclass
class CorpusModel:
    """One frozen QAT graph plus everything needed to convert it."""

    name: str
    graph_def: bytes  # serialized frozen GraphDef
    inputs: list[str]  # placeholder names
    outputs: list[str]  # output node names
    shapes: dict[str, list[int]]  # input shapes
    input_ranges: dict[str, tuple[float, float]]  # range to pass on the command line per input
    description: str = ""
    ops: frozenset[str] = field(default_factory=frozenset)  # TF op types in the graph


def _round_range(lo: float, hi: float) -> tuple[float, float]:
    """Include 0 and round to 5 significant digits (stable across machines)."""
    lo, hi = min(0.0, float(lo)), max(0.0, float(hi))
    lo = float(f"{lo:.5g}") if lo != 0.0 else 0.0
    hi = float(f"{hi:.5g}") if hi != 0.0 else 0.0
    if hi - lo < 1e-3:  # a dead activation: give it a small but sane range
        hi = lo + 1e-3
    return lo, hi


class GraphBuilder:
    """Builds one graph; used twice per model (calibration pass, then final pass).

    In the calibration pass (``ranges is None``) ``act`` records its tensor and
    returns it unchanged; in the final pass it inserts a FakeQuant with the range
    measured in the calibration pass. Weights are drawn from a fresh
    ``default_rng(seed)`` in both passes, so both passes see identical weights.
    """

    def __init__(self, tf: Any, seed: int, ranges: dict[str, tuple[float, float]] | None,
                 float_graph: bool = False):
        self.tf = tf
        self.float_graph = float_graph  # no FakeQuant at all: a graph for post-training calibration
        self.rng = np.random.default_rng(seed)
        self.ranges = ranges
        self.probes: dict[str, Any] = {}
        self.inputs: list[tuple[str, list[int], tuple[float, float]]] = []
        self.placeholders: dict[str, Any] = {}
        self.outputs: list[str] = []
        self._n = 0

    @property
    def calibrating(self) -> bool:
        return self.ranges is None and not self.float_graph

    def _uid(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    # -- inputs and outputs -------------------------------------------------

    def input(
        self,
        name: str,
        shape: list[int],
        rng_range: tuple[float, float],
        *,
        fake_quant: str | None = "vars",
    ) -> Any:
        """A float placeholder, optionally followed by a FakeQuant over ``rng_range``.

        ``fake_quant`` is "vars", "vars_identity", "args" or None (no FakeQuant:
        the range comes from the command line only).
        """
        tf = self.tf
        run_shape = [_CALIB_BATCH, *shape[1:]] if self.calibrating else list(shape)
        x = tf.compat.v1.placeholder(tf.float32, run_shape, name=name)
        self.inputs.append((name, list(shape), rng_range))
        self.placeholders[name] = x
        if fake_quant is None or self.float_graph:
            return x
        return self._fake_quant(x, rng_range, style=fake_quant, narrow=False, name=f"{name}/fq")

    def output(self, x: Any, name: str = "output") -> Any:
        y = self.tf.identity(x, name=name)
        self.outputs.append(name)
        return y

    # -- FakeQuant ----------------------------------------------------------

    def _minmax(self, lo: Any, hi: Any, style: str, name: str) -> tuple[Any, Any]:
        tf = self.tf
        mn = tf.constant(lo, dtype=tf.float32, name=f"{name}/min")
        mx = tf.constant(hi, dtype=tf.float32, name=f"{name}/max")
        if style == "vars_identity":
            mn = tf.identity(mn, name=f"{name}/min_read")
            mx = tf.identity(mx, name=f"{name}/max_read")
        return mn, mx

    def _fake_quant(
        self, x: Any, rng_range: tuple[float, float], *, style: str, narrow: bool, name: str
    ) -> Any:
        tf = self.tf
        lo, hi = rng_range
        if style == "args":
            return tf.quantization.fake_quant_with_min_max_args(
                x, min=lo, max=hi, num_bits=8, narrow_range=narrow, name=name
            )
        mn, mx = self._minmax(np.float32(lo), np.float32(hi), style, name)
        return tf.quantization.fake_quant_with_min_max_vars(
            x, mn, mx, num_bits=8, narrow_range=narrow, name=name
        )

    def fixed(self, x: Any, rng_range: tuple[float, float], name: str) -> Any:
        """A FakeQuant with a hand-picked range (not learned); a no-op while calibrating."""
        if self.calibrating or self.float_graph:
            return x
        return self._fake_quant(x, rng_range, style="vars", narrow=False, name=name)

    def act(self, x: Any, tag: str, *, narrow: bool = False, style: str = "vars") -> Any:
        """FakeQuant an activation with its learned range (or record it while calibrating)."""
        if self.calibrating or self.float_graph:
            assert tag not in self.probes, f"duplicate activation tag {tag}"
            self.probes[tag] = x
            return x
        assert self.ranges is not None
        return self._fake_quant(x, self.ranges[tag], style=style, narrow=narrow, name=f"{tag}/fq")

    # -- weights --------------------------------------------------------------

    def weight(
        self,
        shape: list[int],
        *,
        per_channel: bool = False,
        narrow: bool = True,
        style: str = "vars",
        fan_in: int | None = None,
        values: np.ndarray | None = None,
        max_abs: Any = None,
    ) -> Any:
        """A float constant followed by a symmetric FakeQuant ([-m, m]).

        Per-channel quantizes along the last dimension (HWIO conv kernels: O).
        ``max_abs`` rescales the weights so that m (per channel, or per tensor) is
        exactly that value.
        """
        tf = self.tf
        if values is None:
            fan = fan_in if fan_in is not None else int(np.prod(shape[:-1]))
            values = self.rng.normal(0.0, np.sqrt(2.0 / fan), size=shape)
        w64 = np.asarray(values, dtype=np.float64)
        if max_abs is not None:
            if per_channel:
                cur = np.abs(w64).reshape(-1, w64.shape[-1]).max(axis=0)
            else:
                cur = np.abs(w64).max()
            w64 = w64 / cur * np.asarray(max_abs, dtype=np.float64)
        w = w64.astype(np.float32)
        name = self._uid("weights")
        wt = tf.constant(w, name=name)
        if self.float_graph:
            return wt
        if per_channel:
            m = np.abs(w).reshape(-1, w.shape[-1]).max(axis=0).astype(np.float32)
            mn, mx = self._minmax(-m, m, style, name)
            return tf.quantization.fake_quant_with_min_max_vars_per_channel(
                wt, mn, mx, num_bits=8, narrow_range=narrow, name=f"{name}/fq"
            )
        m = np.float32(np.abs(w).max())
        mn, mx = self._minmax(-m, m, style, name)
        return tf.quantization.fake_quant_with_min_max_vars(
            wt, mn, mx, num_bits=8, narrow_range=narrow, name=f"{name}/fq"
        )

    def bias(self, n: int, scale: float = 0.1) -> Any:
        b = self.rng.normal(0.0, scale, size=[n]).astype(np.float32)
        return self.tf.constant(b, name=self._uid("bias"))

    # -- layers ---------------------------------------------------------------

    def conv(
        self,
        x: Any,
        kh: int,
        kw: int,
        cout: int,
        *,
        stride: int = 1,
        padding: str = "SAME",
        per_channel: bool = True,
        narrow: bool = True,
        bias: bool = True,
        max_abs: Any = None,
    ) -> Any:
        cin = int(x.shape[-1])
        w = self.weight(
            [kh, kw, cin, cout], per_channel=per_channel, narrow=narrow, max_abs=max_abs
        )
        y = self.tf.nn.conv2d(x, w, strides=[1, stride, stride, 1], padding=padding)
        return self.tf.nn.bias_add(y, self.bias(cout)) if bias else y

    def depthwise(
        self, x: Any, k: int, multiplier: int, *, stride: int = 1, padding: str = "SAME"
    ) -> Any:
        """DepthwiseConv2dNative with a per-tensor FakeQuant on the [H,W,C,M] kernel."""
        tf = self.tf
        cin = int(x.shape[-1])
        w = self.weight([k, k, cin, multiplier], per_channel=False, fan_in=k * k)
        y = tf.nn.depthwise_conv2d(x, w, strides=[1, stride, stride, 1], padding=padding)
        return tf.nn.bias_add(y, self.bias(cin * multiplier))

    def dense(
        self, x: Any, units: int, *, narrow: bool = True, bias: bool = True, max_abs: Any = None
    ) -> Any:
        w = self.weight([int(x.shape[-1]), units], per_channel=False, narrow=narrow, max_abs=max_abs)
        y = self.tf.matmul(x, w)
        return self.tf.nn.bias_add(y, self.bias(units)) if bias else y


# ---------------------------------------------------------------------------
# The graphs. Each builder gets a GraphBuilder and returns a one-line description.
# ---------------------------------------------------------------------------


def _conv_relu_perchannel(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 16, 16, 3], (-1.0, 1.0))
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 8, stride=1, padding="SAME")), "conv1")
    y = b.act(tf.nn.relu6(b.conv(y, 3, 3, 8, stride=2, padding="VALID")), "conv2")
    y = b.act(b.conv(y, 1, 1, 4, stride=1, padding="SAME"), "conv3")  # signed, no activation
    b.output(y)
    return "Conv2D SAME/VALID, stride 1/2, per-channel weights, BiasAdd, Relu, Relu6, signed output"


def _classifier_cli_input(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 16, 16, 3], (-0.5, 1.5), fake_quant=None)
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 8, stride=2, per_channel=False)), "conv1")
    y = tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
    y = b.act(b.conv(y, 1, 1, 16, per_channel=False, padding="VALID"), "conv2")
    y = b.act(tf.reduce_mean(y, axis=[1, 2], keepdims=False), "mean")
    y = b.act(b.dense(y, 10), "logits")
    b.output(tf.nn.softmax(y))
    return ("input WITHOUT FakeQuant (range from the command line), per-tensor conv weights, "
            "MaxPool, Mean keep_dims=false, MatMul+BiasAdd, Softmax")


def _depthwise(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 16, 16, 4], (-1.0, 1.0), fake_quant="args")
    y = b.act(tf.nn.relu6(b.depthwise(x, 3, 1)), "dw1")
    y = b.act(tf.nn.relu(b.depthwise(y, 3, 2, stride=2)), "dw2")
    y = tf.nn.avg_pool2d(y, ksize=2, strides=2, padding="VALID")
    b.output(y)
    return ("DepthwiseConv2dNative multiplier 1 and 2 (stride 2), per-tensor FakeQuant on depthwise "
            "weights, AvgPool as output, FakeQuantWithMinMaxArgs on the input")


def _residual(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 12, 12, 8], (-0.8, 1.3))
    h = b.act(tf.nn.relu(b.conv(x, 1, 1, 8)), "stem")
    f = b.act(b.conv(h, 3, 3, 8), "branch1")
    y = b.act(tf.math.add(h, f), "add1")  # AddV2
    g = b.act(tf.nn.relu(b.conv(y, 3, 3, 8)), "branch2")
    z = b.act(tf.nn.relu(tf.raw_ops.Add(x=y, y=g)), "add2")  # Add + Relu
    b.output(z)
    return "residual adds x + f(x): AddV2, Add followed by Relu"


def _two_inputs_arith(b: GraphBuilder) -> str:
    tf = b.tf
    a = b.input("input_a", [1, 8, 8, 4], (-1.0, 1.0))
    c = b.input("input_b", [1, 8, 8, 4], (-1.7, 2.3))
    m = b.act(tf.multiply(a, c), "mul")
    s = b.act(tf.subtract(m, a), "sub")
    k = b.weight([4], values=np.array([0.5, -1.25, 0.75, 2.0], np.float32))
    t = b.act(tf.multiply(s, k), "mul_const")
    o = b.act(tf.math.add(t, c), "add")
    b.output(o)
    return "two inputs; Mul of two activations, Sub, Mul by a FakeQuant'ed constant (broadcast), AddV2"


def _concat_branches(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 16, 16, 3], (0.0, 1.0))
    b1 = b.act(tf.nn.relu(b.conv(x, 1, 1, 4)), "branch1")
    b2 = b.act(tf.nn.relu6(b.conv(x, 3, 3, 6)), "branch2")
    b3 = b.act(b.conv(x, 3, 3, 2, stride=1), "branch3")  # signed range
    y = b.act(tf.concat([b1, b2, b3], axis=3), "concat")
    y = b.act(b.conv(y, 1, 1, 8), "head")
    b.output(y)
    return "ConcatV2 along channels of three branches with different ranges, FakeQuant on the concat"


def _pad_squeeze_reshape(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 10, 10, 3], (-1.0, 1.0))
    y = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    y = b.act(tf.nn.relu(b.conv(y, 3, 3, 8, padding="VALID")), "conv1")
    # TF folds a symmetric 1-pixel Pad + 3x3 VALID conv into a SAME conv; this
    # asymmetric one stays a PAD op.
    y = tf.pad(y, [[0, 0], [2, 1], [0, 2], [0, 0]])
    y = b.act(tf.nn.relu6(b.conv(y, 3, 3, 8, stride=2, padding="VALID")), "conv2")
    y = b.act(tf.reduce_mean(y, axis=[1, 2], keepdims=True), "mean")
    y = tf.squeeze(y, axis=[1, 2])
    y = b.act(b.dense(y, 12), "dense")
    b.output(tf.reshape(y, [-1, 3, 4]))
    return ("Pad then VALID conv (symmetric: TF folds it; asymmetric: stays PAD), Mean keep_dims=true, "
            "Squeeze, MatMul, Reshape with -1 as output")


def _sigmoid_tanh_two_outputs(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1.0, 1.0))
    c = b.act(b.conv(x, 3, 3, 4), "conv1")
    b.output(tf.sigmoid(c), "output_sigmoid")
    d = b.act(b.conv(c, 3, 3, 4, stride=2), "conv2")
    b.output(tf.tanh(d), "output_tanh")
    return "two outputs: Sigmoid and Tanh (fixed output parameters)"


def _narrow_ranges(b: GraphBuilder) -> str:
    """narrow_range=False weights, narrow_range=True activations.

    With narrow_range=False a symmetric range [-m, m] has its unsigned zero point
    at m / (2m/255) = 127.5 in double, which rounds to 128 (int8 zero point 0) or,
    for about one m in eight, evaluates to 127.49999999999999 and rounds to 127
    (int8 zero point -1). TF 2.21 writes that -1 into per-channel conv weights and
    LiteRT's CONV_2D then refuses the model ("zero_point ... != 0"), so the conv
    weights here get power-of-two per-channel maxima (zero point exactly 0; the
    int8 weights stay within [-127, 127] since -m sits above the nudged minimum
    -128/127.5 m). FULLY_CONNECTED accepts a weight zero point of
    -1, so the dense layer keeps an m (0.6219053) that gives exactly that.
    """
    tf = b.tf
    x = b.input("input", [1, 16, 16, 3], (-1.0, 1.0))
    pow2 = [0.5, 0.25, 1.0, 0.5, 0.125, 0.5, 0.25, 0.5]
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 8, stride=2, narrow=False, max_abs=pow2)), "conv1",
              narrow=True)
    y = b.act(b.conv(y, 3, 3, 8, narrow=False, max_abs=pow2[::-1]), "conv2", narrow=True)
    y = b.act(tf.reduce_mean(y, axis=[1, 2], keepdims=False), "mean", narrow=True)
    y = b.act(b.dense(y, 6, narrow=False, bias=False, max_abs=0.6219053), "dense", narrow=True)
    b.output(y)
    return ("weights with narrow_range=False (per-channel conv; MatMul without bias whose weight "
            "zero point is -1), activations with narrow_range=True, Mean")


def _fq_args_identity_noop(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 8, 8, 2], (-1.0, 1.0), fake_quant="vars_identity")
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 4, stride=2, padding="VALID")), "conv1", style="args")
    y = tf.reshape(y, [-1, 3 * 3 * 4])
    y = b.act(tf.nn.relu(b.dense(y, 16)), "dense1", style="args")
    y = b.act(b.dense(y, 6), "dense2", style="vars_identity")
    b.output(y)
    tf.no_op(name="stray_noop")
    return ("FakeQuantWithMinMaxArgs (attrs), min/max through Identity, Reshape(-1) flatten before "
            "MatMul, MatMul+Relu, a stray NoOp off the path")


def _small_classifier(b: GraphBuilder) -> str:
    tf = b.tf
    x = b.input("input", [1, 16, 16, 3], (-1.0, 1.0))
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 8, stride=2)), "conv1")
    y = b.act(tf.nn.relu6(b.depthwise(y, 3, 1)), "dw1")
    y = b.act(tf.nn.relu(b.conv(y, 1, 1, 16)), "pw1")
    y = tf.nn.avg_pool2d(y, ksize=2, strides=2, padding="VALID")
    y = tf.reshape(y, [-1, 4 * 4 * 16])
    y = b.act(b.dense(y, 10), "logits")
    b.output(tf.nn.softmax(y))
    return "conv -> depthwise -> pointwise -> AvgPool -> Reshape -> MatMul -> Softmax classifier"


def _mean_keepdims_mul(b: GraphBuilder) -> str:
    """Squeeze-and-excitation style: Mean(keep_dims) -> 1x1 convs -> Sigmoid -> Mul."""
    tf = b.tf
    x = b.input("input", [1, 8, 8, 8], (-1.0, 1.0))
    h = b.act(tf.nn.relu(b.conv(x, 3, 3, 8)), "conv1")
    s = b.act(tf.reduce_mean(h, axis=[1, 2], keepdims=True), "squeeze")
    s = b.act(tf.nn.relu(b.conv(s, 1, 1, 4)), "reduce")
    s = tf.sigmoid(b.act(b.conv(s, 1, 1, 8), "expand"))
    y = b.act(tf.multiply(h, s), "excite")
    b.output(y)
    return "squeeze-excitation: Mean keep_dims=true, 1x1 convs, Sigmoid inside the graph, broadcast Mul"


def _requantize(b: GraphBuilder) -> str:
    """Scale conflicts TF 2.21 resolves with a requantizing QUANTIZE op (it does not refuse them).

    * AvgPool followed by its own (learned, narrower) FakeQuant;
    * Concat of a branch with the raw (FakeQuant'ed) input, so the input needs
      requantizing to the concat's scale;
    * Sigmoid followed by a FakeQuant [0, 1] (scale 1/255 against LOGISTIC's fixed 1/256).
    """
    tf = b.tf
    x = b.input("input", [1, 8, 8, 3], (-1.0, 1.0))
    y = b.act(tf.nn.relu(b.conv(x, 3, 3, 4)), "conv1")
    y = b.act(tf.concat([y, x], axis=3), "concat")
    y = b.act(tf.nn.avg_pool2d(y, ksize=2, strides=2, padding="VALID"), "pool")
    y = b.act(b.conv(y, 3, 3, 4), "conv2")
    y = b.fixed(tf.sigmoid(y), (0.0, 1.0), name="sigmoid/fq")
    b.output(y)
    return ("requantize (QUANTIZE) where scales conflict: AvgPool + FakeQuant, Concat with the raw "
            "input, Sigmoid + FakeQuant[0,1] as output")


_BUILDERS: dict[str, tuple[int, Callable[[GraphBuilder], str]]] = {
    "conv_relu_perchannel": (101, _conv_relu_perchannel),
    "classifier_cli_input": (102, _classifier_cli_input),
    "depthwise": (103, _depthwise),
    "residual": (104, _residual),
    "two_inputs_arith": (105, _two_inputs_arith),
    "concat_branches": (106, _concat_branches),
    "pad_squeeze_reshape": (107, _pad_squeeze_reshape),
    "sigmoid_tanh_two_outputs": (108, _sigmoid_tanh_two_outputs),
    "narrow_ranges": (109, _narrow_ranges),
    "fq_args_identity_noop": (110, _fq_args_identity_noop),
    "small_classifier": (111, _small_classifier),
    "mean_keepdims_mul": (112, _mean_keepdims_mul),
    "requantize": (113, _requantize),
}

MODEL_NAMES: list[str] = list(_BUILDERS)


def _calibrate(tf: Any, seed: int, fn: Callable[[GraphBuilder], str]) -> dict[str, tuple[float, float]]:
    """Run the float graph on random inputs and return each activation's range."""
    graph = tf.Graph()
    with graph.as_default():
        b = GraphBuilder(tf, seed, None)
        fn(b)
        data_rng = np.random.default_rng(seed + 10_000)
        feeds = {}
        for name, shape, (lo, hi) in b.inputs:
            feeds[b.placeholders[name]] = data_rng.uniform(
                lo, hi, size=[_CALIB_BATCH, *shape[1:]]
            ).astype(np.float32)
        with tf.compat.v1.Session(graph=graph) as sess:
            values = sess.run(b.probes, feed_dict=feeds)
    return {tag: _round_range(v.min(), v.max()) for tag, v in sorted(values.items())}


def build_qat_graph(
    name: str, seed: int, fn: Callable[[GraphBuilder], str],
    override: dict[str, tuple[float, float]] | None = None,
) -> CorpusModel:
    """Build a QAT graph from a builder function: calibrate in float, then add FakeQuants.

    ``fn`` declares the graph through a GraphBuilder (inputs, layers, ``act`` for
    every activation FakeQuant, outputs) and returns a one-line description.
    ``override`` replaces the calibrated range of some activation tags (a badly ranged model).
    Used for the corpus and for models/build_models.py.
    """
    import tensorflow as tf

    ranges = _calibrate(tf, seed, fn)
    if override:
        unknown = set(override) - set(ranges)
        assert not unknown, f"no activation tags {sorted(unknown)}; known: {sorted(ranges)}"
        ranges = {**ranges, **override}
    graph = tf.Graph()
    with graph.as_default():
        b = GraphBuilder(tf, seed, ranges)
        description = fn(b)
    gd = graph.as_graph_def()
    return CorpusModel(
        name=name,
        graph_def=gd.SerializeToString(deterministic=True),
        inputs=[n for n, _, _ in b.inputs],
        outputs=list(b.outputs),
        shapes={n: list(s) for n, s, _ in b.inputs},
        input_ranges={n: (float(r[0]), float(r[1])) for n, _, r in b.inputs},
        description=description,
        ops=frozenset(node.op for node in gd.node),
    )


def build_float_graph(name: str) -> CorpusModel:
    """The float twin of a corpus model: same weights, no FakeQuant anywhere (for PTQ)."""
    import tensorflow as tf

    if name not in _BUILDERS:
        raise KeyError(f"unknown corpus model {name!r}; known: {', '.join(MODEL_NAMES)}")
    seed, fn = _BUILDERS[name]
    graph = tf.Graph()
    with graph.as_default():
        b = GraphBuilder(tf, seed, None, float_graph=True)
        description = fn(b)
    gd = graph.as_graph_def()
    return CorpusModel(
        name=f"{name}_float", graph_def=gd.SerializeToString(deterministic=True),
        inputs=[n for n, _, _ in b.inputs], outputs=list(b.outputs),
        shapes={n: list(s) for n, s, _ in b.inputs},
        input_ranges={n: (float(r[0]), float(r[1])) for n, _, r in b.inputs},
        description=f"float: {description}", ops=frozenset(node.op for node in gd.node),
    )


@functools.lru_cache(maxsize=None)
def build_model(name: str) -> CorpusModel:
    """Build one corpus model (deterministic bytes; cached per process)."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown corpus model {name!r}; known: {', '.join(MODEL_NAMES)}")
    seed, fn = _BUILDERS[name]
    return build_qat_graph(name, seed, fn)


def build_corpus() -> list[CorpusModel]:
    """All corpus models, in MODEL_NAMES order."""
    return [build_model(n) for n in MODEL_NAMES]


if __name__ == "__main__":  # python tests/corpus.py: list the corpus
    import time

    t0 = time.perf_counter()
    corpus = build_corpus()
    print(f"built {len(corpus)} models in {time.perf_counter() - t0:.2f}s")
    for m in corpus:
        print(f"{m.name:28s} {len(m.graph_def):7d} B  in={m.inputs} out={m.outputs}  {m.description}")
    missing = REQUIRED_OPS - frozenset().union(*(m.ops for m in corpus))
    print("missing ops:", sorted(missing) or "none")
