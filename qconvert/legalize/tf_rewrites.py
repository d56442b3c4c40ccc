"""The ``legalize`` stage: TensorFlow ops become TFLite-level ops (still float). ``legalize_ops``
rewrites each op whose row in the frontend's TF op table (``qconvert.frontend.tf_ops.TF_OPS``)
names a TFLite op, by its entry in ``REWRITES`` (a function here, or ``plain("OP", ...)`` when
only the name and options change):

1. ``Conv2D(x, w)``                ⇒ ``CONV_2D(x, TRANSPOSE(w, [3,0,1,2]), zeros[O])``  (HWIO → OHWI)
2. ``DepthwiseConv2dNative(x, w)`` ⇒ ``DEPTHWISE_CONV_2D(x, RESHAPE(w, [1,H,W,C·M]), zeros[C·M])``
3. ``MatMul(a, b)``                ⇒ ``FULLY_CONNECTED(a, TRANSPOSE(b, [1,0]), zeros[N])``
   ``Conv2DBackpropInput(size, w, x)`` ⇒ ``TRANSPOSE_CONV(size, TRANSPOSE(w, [2,0,1,3]), x)``
   (HWOI → OHWI; no bias: TensorFlow writes one only when a BiasAdd fuses into it)
4. ``BiasAdd``/``Add``/``AddV2``/``Sub``/``Mul`` ⇒ ``ADD``/``SUB``/``MUL``
5. ``FusedBatchNorm*(x)`` (inference)  ⇒ ``ADD(MUL(x, m), offset − mean·m)``, m = scale·rsqrt(var+ε);
   the ``fuse`` stage folds the MUL into a preceding convolution's weights and the ADD into its bias.
6. pools, ``Mean``, ``Reshape``, ``Squeeze``, ``ConcatV2``, ``Pad``, ``Softmax``, ``Sigmoid``,
   ``Tanh``, ``Relu``, ``Relu6`` ⇒ their TFLite namesakes, with options as TFLite writes them.

Zero biases are added as TensorFlow's converter adds them; a following BiasAdd
is fused into them later (the ``fuse`` stage). Weight layout ops are folded by the ``fold`` stage.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from qconvert.errors import ConversionError
from qconvert.frontend.tf_ops import MULTI_OUTPUT as ELSEWHERE
from qconvert.frontend.tf_ops import TF_OPS
from qconvert.ir import Graph, Node, Tensor
from qconvert.ir.passes import Context
from qconvert.legalize.einsum import Unsupported, plan, refusal
from qconvert.ops import Rule, row
from qconvert.ops.windows import STRIDED_SLICE_MASKS
from qconvert.quant.rounding import rsqrt_float32

Rewrite = Callable[[Graph, Node], None]


# on the MUL of a decomposed BatchNorm: TensorFlow's graph optimizer folds x * 0 of a Mul, never of a
# FusedBatchNorm whose scale is 0 (a zero-initialised γ): that MUL folds into the convolution before it
BATCH_NORM_PRODUCT = "_batch_norm_product"


def _emit(graph: Graph, before: Node, op: str, inputs: list[str], shape: tuple[int, ...], attrs: dict,
          suffix: str) -> str:
    """Insert ``op(inputs)`` (float32, of ``shape``) in front of ``before``; its output's name."""
    out = graph.unique_name(f"{before.name}/{suffix}")
    graph.add_tensor(Tensor(out, "float32", shape))
    graph.add_node(Node(op, inputs, [out], attrs, name=out), before=before)
    return out


def _layout(graph: Graph, node: Node, slot: int, op: str, arg: np.ndarray, shape: tuple[int, ...]) -> None:
    """Insert ``op(node.inputs[slot], arg)`` in front of ``node`` (a weight layout change)."""
    arg_name = graph.add_const(f"{node.name}/{op.lower()}_arg", arg.astype(np.int32))
    node.inputs[slot] = _emit(graph, node, op, [node.inputs[slot], arg_name], shape, {}, op.lower())


def _zero_bias(graph: Graph, node: Node, channels: int) -> str:
    return graph.add_const(f"{node.name}/bias", np.zeros(channels, np.float32))


def _strides(node: Node) -> dict:
    s = node.attrs.get("strides", [1, 1, 1, 1])
    return {"stride_w": int(s[2]), "stride_h": int(s[1])}


def _dilations(node: Node) -> dict:
    d = node.attrs.get("dilations") or [1, 1, 1, 1]
    return {"dilation_w_factor": int(d[2]), "dilation_h_factor": int(d[1])}


def conv2d(graph: Graph, node: Node) -> None:
    x, w = node.inputs[:2]
    h, wd, i, o = graph.tensors[w].shape
    _layout(graph, node, 1, "TRANSPOSE", np.array([3, 0, 1, 2]), (o, h, wd, i))
    node.inputs.append(_zero_bias(graph, node, o))
    node.attrs = {
        "padding": node.attrs.get("padding", "VALID"),
        **_strides(node),
        "fused_activation_function": "NONE",
        **_dilations(node),
    }
    node.op = "CONV_2D"


def depthwise(graph: Graph, node: Node) -> None:
    h, wd, c, m = graph.tensors[node.inputs[1]].shape
    _layout(graph, node, 1, "RESHAPE", np.array([1, h, wd, c * m]), (1, h, wd, c * m))
    node.inputs.append(_zero_bias(graph, node, c * m))
    node.attrs = {
        "padding": node.attrs.get("padding", "VALID"),
        **_strides(node),
        "depth_multiplier": int(m),
        "fused_activation_function": "NONE",
        **_dilations(node),
    }
    node.op = "DEPTHWISE_CONV_2D"


def matmul(graph: Graph, node: Node) -> None:
    if node.attrs.get("transpose_a", False):
        raise ConversionError(f"node '{node.name}' (MatMul): transpose_a=True is not supported")
    k, n = graph.tensors[node.inputs[1]].shape
    if node.attrs.get("transpose_b", False):
        n = k
    else:
        _layout(graph, node, 1, "TRANSPOSE", np.array([1, 0]), (n, k))
    # no bias: TensorFlow writes none (-1) for a MatMul without BiasAdd, in int8, 16x8 and float files
    # alike (measured on TF 2.21); a following BiasAdd or ADD of a constant becomes its bias (fuse)
    node.attrs = {"fused_activation_function": "NONE", "weights_format": "DEFAULT", "keep_num_dims": False}
    node.op = "FULLY_CONNECTED"


def _weight(graph: Graph, tensor: str) -> bool:
    """``tensor`` is a constant, or a constant through a FakeQuant (FAKE_QUANT → Q → DQ: a QAT weight)."""
    node = graph.producer(tensor)
    while node is not None and (r := row(node.op)) is not None and r.rule is Rule.QUANT:
        tensor = node.inputs[0]
        node = graph.producer(tensor)
    return graph.is_const(tensor)


def batch_matmul(graph: Graph, node: Node) -> None:
    """``BatchMatMul[V2](x, y)`` as TensorFlow's converter writes it (measured on TF 2.21, QAT and
    post-training alike): with ``y`` a 2-D constant (a weight: a projection ``[B, T, D] x [D, N]``)
    ``FULLY_CONNECTED(x, TRANSPOSE(y, [1,0]), no bias)`` keeping x's leading dimensions (none on a 2-D x: no
    ``keep_num_dims``, version 4; a following
    BiasAdd becomes its bias; with ``adj_x``, a TRANSPOSE of x's last two dimensions before it);
    otherwise ``BATCH_MATMUL(x, y)`` with ``adj_x``/``adj_y``, a constant operand quantized like an
    activation (its own range, as TensorFlow writes it); an operand that is a TRANSPOSE of the last
    two dimensions is read untransposed with its adjoint flag flipped (the TRANSPOSE stays for its
    other readers), as TensorFlow fuses it."""
    x, y = node.inputs[:2]
    adj_x, adj_y = bool(node.attrs.get("adj_x", False)), bool(node.attrs.get("adj_y", False))
    ys = graph.tensors[y].shape
    if len(ys) == 2 and _weight(graph, y) and not _weight(graph, x):
        k, n = ys[::-1] if adj_y else ys
        if adj_x:  # x's last two dimensions swapped first: TRANSPOSE, then FULLY_CONNECTED (measured)
            xs = graph.tensors[x].shape
            perm = [*range(len(xs) - 2), len(xs) - 1, len(xs) - 2]
            node.inputs[0] = _emit(graph, node, "TRANSPOSE", [x, graph.add_const(f"{node.name}/perm", np.array(
                perm, np.int32))], tuple(xs[p] for p in perm), {}, "transpose_x")
        if not adj_y:
            _layout(graph, node, 1, "TRANSPOSE", np.array([1, 0]), (n, k))
        # keep_num_dims only where there are dimensions to keep (a 2-D x: v4 without it, measured)
        node.attrs = {"fused_activation_function": "NONE", "weights_format": "DEFAULT",
                      "keep_num_dims": len(graph.tensors[x].shape) != 2}
        node.op = "FULLY_CONNECTED"
        return
    adj = [adj_x, adj_y]
    for slot in (0, 1):  # a TRANSPOSE of the last two dimensions is the operand's adjoint flag (measured)
        source = _swapped_last_two(graph, node.inputs[slot])
        if source is not None:
            transposed, node.inputs[slot], adj[slot] = node.inputs[slot], source, not adj[slot]
            if not graph.consumers(transposed) and transposed not in graph.outputs:
                dead = graph.producer(transposed)
                assert dead is not None
                graph.remove_nodes([dead])
    node.attrs = {"adj_x": adj[0], "adj_y": adj[1], "asymmetric_quantize_inputs": False}
    node.op = "BATCH_MATMUL"


def _swapped_last_two(graph: Graph, tensor: str) -> str | None:
    """The input of the TRANSPOSE writing ``tensor`` when it swaps only the last two dimensions."""
    node = graph.producer(tensor)
    if node is None or node.op not in ("Transpose", "TRANSPOSE") or len(node.inputs) != 2:
        return None
    perm = graph.const(node.inputs[1])
    if perm is None:
        return None
    perm = np.asarray(perm).reshape(-1).tolist()
    n = len(perm)
    return node.inputs[0] if n >= 2 and perm == [*range(n - 2), n - 1, n - 2] else None


def _tf_step(graph: Graph, node: Node, op: str, inputs: list[str], attrs: dict, shape: tuple[int, ...] | None,
             suffix: str) -> str:
    """A TensorFlow ``op`` in front of ``node``, legalized at once by its rewrite; its output. With
    ``shape`` None, ``node`` itself becomes it (the last step: its output is the graph's tensor)."""
    if shape is None:
        step = node
        node.inputs, node.attrs, node.op = inputs, attrs, op
    else:
        out = _emit(graph, node, op, inputs, shape, attrs, suffix)
        step = graph.producer(out)
        assert step is not None
    REWRITES[op](graph, step)
    return step.outputs[0]


def _einsum_operand(graph: Graph, node: Node, tensor: str, perm: tuple[int, ...] | None,
                    shape: tuple[int, ...] | None, which: str) -> str:
    """An Einsum operand transposed by ``perm`` and reshaped to ``shape``: a constant at once (TensorFlow
    folds it), an activation by TRANSPOSE and RESHAPE."""
    value = graph.const(tensor)
    if value is not None:
        value = np.asarray(value)
        value = value if perm is None else np.transpose(value, perm)
        value = value if shape is None else value.reshape(shape)
        return graph.add_const(f"{node.name}/{which}", np.ascontiguousarray(value))
    if perm is not None:
        dims = tuple(graph.tensors[tensor].shape[p] for p in perm)
        tensor = _tf_step(graph, node, "Transpose", [tensor, graph.add_const(
            f"{node.name}/{which}_perm", np.array(perm, np.int32))], {}, dims, f"transpose_{which}")
    if shape is not None:
        tensor = _tf_step(graph, node, "Reshape", [tensor, graph.add_const(
            f"{node.name}/{which}_shape", np.array(shape, np.int32))], {}, shape, f"reshape_{which}")
    return tensor


def einsum(graph: Graph, node: Node) -> None:
    """``Einsum(x, y)`` ⇒ TRANSPOSE/RESHAPE of each operand, BATCH_MATMUL (FULLY_CONNECTED with a 2-D
    constant right operand), RESHAPE and TRANSPOSE of the product, as TensorFlow lowers it
    (``qconvert.legalize.einsum``: the rule; an identity step writes nothing)."""
    equation = str(node.attrs.get("equation", ""))
    x, y = node.inputs[:2]
    try:
        p = plan(equation, graph.tensors[x].shape, graph.tensors[y].shape)
    except Unsupported as e:
        raise refusal(node.name, equation, str(e)) from None
    x = _einsum_operand(graph, node, x, p.x_perm, p.x_shape, "x")
    y = _einsum_operand(graph, node, y, p.y_perm, p.y_shape, "y")
    last = "transpose" if p.out_perm is not None else "reshape" if p.out_shape is not None else "matmul"
    h = _tf_step(graph, node, "BatchMatMulV2", [x, y], {"adj_x": False, "adj_y": False},
                 None if last == "matmul" else p.product, "matmul")
    if p.out_shape is not None:
        h = _tf_step(graph, node, "Reshape", [h, graph.add_const(f"{node.name}/out_shape", np.array(
            p.out_shape, np.int32))], {}, None if last == "reshape" else p.out_shape, "reshape_out")
    if p.out_perm is not None:
        _tf_step(graph, node, "Transpose", [h, graph.add_const(f"{node.name}/out_perm", np.array(
            p.out_perm, np.int32))], {}, None, "transpose_out")


def transpose_conv(graph: Graph, node: Node) -> None:
    h, wd, o, i = graph.tensors[node.inputs[1]].shape
    _int32_const(graph, node, 0)
    _layout(graph, node, 1, "TRANSPOSE", np.array([2, 0, 1, 3]), (o, h, wd, i))
    node.attrs = {"padding": node.attrs.get("padding", "VALID"), **_strides(node), "fused_activation_function": "NONE"}
    node.op = "TRANSPOSE_CONV"


def plain(op: str, **attrs) -> Rewrite:
    def rewrite(graph: Graph, node: Node) -> None:
        node.op = op
        node.attrs = dict(attrs)

    return rewrite


def pool(op: str) -> Rewrite:
    def rewrite(graph: Graph, node: Node) -> None:
        k = node.attrs.get("ksize", [1, 1, 1, 1])
        node.attrs = {
            "padding": node.attrs.get("padding", "VALID"),
            **_strides(node),
            "filter_width": int(k[2]),
            "filter_height": int(k[1]),
            "fused_activation_function": "NONE",
        }
        node.op = op

    return rewrite


def _int32_const(graph: Graph, node: Node, slot: int) -> None:
    value = graph.const(node.inputs[slot])
    if value is None:
        raise ConversionError(f"node '{node.name}' ({node.op}): operand {slot} must be a constant")
    node.inputs[slot] = graph.add_const(f"{node.name}/{slot}", np.asarray(value).astype(np.int32))


def int32_operands(op: str, *slots: int) -> Rewrite:
    """An op without options whose operands ``slots`` (permutation, paddings, begin/size)
    are constants, written as int32."""
    def rewrite(graph: Graph, node: Node) -> None:
        for slot in slots:
            _int32_const(graph, node, slot)
        node.attrs = {}
        node.op = op

    return rewrite


def reducer(op: str) -> Rewrite:
    """Mean, Max, ... over constant axes: ``op(x, axes)`` with ``keep_dims``."""
    def rewrite(graph: Graph, node: Node) -> None:
        _int32_const(graph, node, 1)
        node.attrs = {"keep_dims": bool(node.attrs.get("keep_dims", False))}
        node.op = op

    return rewrite


mean = reducer("MEAN")


def strided_slice(graph: Graph, node: Node) -> None:
    for slot in (1, 2, 3):
        _int32_const(graph, node, slot)
    group = {k: v for k, v in node.attrs.items() if k.startswith("_")}  # a part of a Split (importer)
    node.attrs = {m: int(node.attrs.get(m, 0) or 0) for m in STRIDED_SLICE_MASKS} | group
    node.op = "STRIDED_SLICE"


def as_reshape(graph: Graph, node: Node) -> None:
    """A RESHAPE to the output's shape, as TensorFlow writes an ExpandDims on an activation and a
    Transpose that moves only dimensions of size 1."""
    shape = graph.tensors[node.outputs[0]].shape
    node.inputs = [node.inputs[0], graph.add_const(f"{node.name}/shape", np.asarray(shape, np.int32))]
    node.attrs = {"new_shape": [int(d) for d in shape]}
    node.op = "RESHAPE"


def moves_only_unit_dims(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether transposing ``shape`` by ``perm`` keeps the order of every dimension above 1."""
    kept = [int(p) for p in perm if shape[int(p)] != 1]
    return kept == sorted(kept)


def transpose(graph: Graph, node: Node) -> None:
    """A TRANSPOSE with a constant permutation; one that only moves dimensions of size 1 is a
    RESHAPE, as TensorFlow writes it (an unrolled RNN's [1, T, F] → [T, 1, F])."""
    _int32_const(graph, node, 1)
    node.attrs = {}
    node.op = "TRANSPOSE"
    shape = graph.tensors[node.inputs[0]].shape
    if shape is not None and moves_only_unit_dims(shape, graph.const(node.inputs[1]).reshape(-1).tolist()):
        as_reshape(graph, node)


def neg(graph: Graph, node: Node) -> None:
    """``-x`` ⇒ ``MUL(x, -1)``: how Keras' PReLU writes ``relu(-x)`` (fused into PRELU later)."""
    node.inputs = [node.inputs[0], graph.add_const(f"{node.name}/minus_one", np.float32(-1))]
    node.attrs = {"fused_activation_function": "NONE"}
    node.op = "MUL"


def pattern_only(pattern: str, fix: str) -> Rewrite:
    """A TF op qconvert converts only as part of a fused pattern: reaching it here means the
    pattern did not match."""
    def rewrite(graph: Graph, node: Node) -> None:
        raise ConversionError(
            f"node '{node.name}' ({node.op}) is supported only inside {pattern}, which TensorFlow's "
            f"converter fuses into one op; this graph computes it differently ({fix}, or cut the graph "
            f"before it with --outputs)")
    return rewrite


def pow_(graph: Graph, node: Node) -> None:
    """``x ** c`` with a constant scalar ``c`` as TensorFlow 2.21 writes it (measured): ``c = 2`` ⇒
    ``MUL(x, x)``, ``c = 0.5`` ⇒ SQRT, both int8; any other power it leaves float (DEQUANTIZE, POW,
    QUANTIZE), which qconvert refuses. GELU's x³ is fused earlier in the stage."""
    c = graph.const(node.inputs[1]) if len(node.inputs) == 2 else None
    value = float(np.asarray(c).reshape(-1)[0]) if c is not None and np.asarray(c).size >= 1 \
        and np.all(np.asarray(c) == np.asarray(c).reshape(-1)[0]) else None
    shape_kept = value is not None and graph.tensors[node.outputs[0]].shape == graph.tensors[node.inputs[0]].shape
    if shape_kept and value == 2.0:
        node.inputs, node.op = [node.inputs[0], node.inputs[0]], "MUL"
        node.attrs = {"fused_activation_function": "NONE"}
        return
    if shape_kept and value == 0.5:
        node.inputs, node.op, node.attrs = [node.inputs[0]], "SQRT", {}
        return
    what = "an activation" if value is None and c is None else ("a non-uniform constant" if value is None else f"{value:g}")
    raise ConversionError(
        f"node '{node.name}' (Pow, exponent {what}): TensorFlow 2.21 leaves this power float (no int8 kernel) "
        "and qconvert cannot quantize it; only x**2 (MUL x·x) and x**0.5 (SQRT) convert, as TensorFlow writes "
        "them: rewrite the power, or cut the graph before it with --outputs")


def square(graph: Graph, node: Node) -> None:
    """``tf.square(x)`` ⇒ int8 ``MUL(x, x)``, as TensorFlow writes ``x ** 2``. TensorFlow 2.21 itself
    leaves a SQUARE float (DEQUANTIZE, SQUARE, QUANTIZE: LiteRT has no integer SQUARE; measured)."""
    node.inputs, node.op = [node.inputs[0], node.inputs[0]], "MUL"
    node.attrs = {"fused_activation_function": "NONE"}


def real_div(graph: Graph, node: Node) -> None:
    """``x / c`` with a constant ``c`` ⇒ ``MUL(x, 1/c)`` (the reciprocal in float32), as
    TensorFlow rewrites it; a MUL after a convolution then folds into its weights. A divisor that
    is an activation ⇒ DIV (int8 in TensorFlow 2.21's post-training file too)."""
    c = graph.const(node.inputs[1])
    node.attrs = {"fused_activation_function": "NONE"}
    if c is None or graph.is_const(node.inputs[0]):
        node.op = "DIV"
        return
    node.inputs[1] = graph.add_const(f"{node.name}/reciprocal", (np.float32(1) / np.asarray(c, np.float32)))
    node.op = "MUL"


def div_no_nan(graph: Graph, node: Node) -> None:
    """``div_no_nan(x, c)`` with a constant ``c`` (GroupNorm's ``weighted_moments``: x over the sum
    of the weights, a constant at a fixed input size) ⇒ ``MUL(x, r)``, ``r = 1/c`` in float32 and
    0 where ``c`` is 0, as TensorFlow 2.21 writes it (one MUL, measured on MobileViT_V2_050). An
    activation divisor has no TFLite op that returns 0 for it: one line."""
    c = graph.const(node.inputs[1])
    if c is None or graph.is_const(node.inputs[0]):
        raise ConversionError(f"node '{node.name}' (DivNoNan): its divisor '{node.inputs[1]}' is not a constant; "
                              f"only x / constant converts (TFLite has no division that gives 0 for a zero divisor)")
    c = np.asarray(c, np.float32)
    with np.errstate(divide="ignore"):
        r = np.where(c == 0, np.float32(0), np.float32(1) / c).astype(np.float32)
    node.inputs[1] = graph.add_const(f"{node.name}/reciprocal", r)
    node.attrs = {"fused_activation_function": "NONE"}
    node.op = "MUL"


def resize(op: str) -> Rewrite:
    """ResizeNearestNeighbor / ResizeBilinear ``(x, size)`` with their two flags."""
    def rewrite(graph: Graph, node: Node) -> None:
        _int32_const(graph, node, 1)
        node.attrs = {"align_corners": bool(node.attrs.get("align_corners", False)),
                      "half_pixel_centers": bool(node.attrs.get("half_pixel_centers", False))}
        node.op = op

    return rewrite


def leaky_relu(graph: Graph, node: Node) -> None:
    node.attrs = {"alpha": float(np.float32(node.attrs.get("alpha", 0.2)))}
    node.op = "LEAKY_RELU"


def reshape(graph: Graph, node: Node) -> None:
    """RESHAPE with the graph's own shape constant, ``-1`` kept, as TensorFlow writes it (measured on
    TF 2.21, QAT, post-training and float files alike: a Flatten's ``[-1, 256]``); the resolved shape
    where the graph's is not a plain vector."""
    shape = graph.tensors[node.outputs[0]].shape
    given = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
    target = None if given is None else np.asarray(given).reshape(-1)
    if target is not None and np.asarray(given).ndim == 1 and len(target) == len(shape) and \
            np.sum(target == -1) <= 1 and all(int(t) in (int(d), -1) for t, d in zip(target, shape)):
        node.inputs[1] = graph.add_const(f"{node.name}/shape", target.astype(np.int32))
    else:
        _resolved_reshape(graph, node)
    node.attrs = {}
    node.op = "RESHAPE"


def _resolved_reshape(graph: Graph, node: Node) -> None:
    shape = graph.tensors[node.outputs[0]].shape
    node.inputs = [node.inputs[0], graph.add_const(f"{node.name}/shape", np.array(shape, np.int32))]


def squeeze(graph: Graph, node: Node) -> None:
    """A RESHAPE to the squeezed shape, as TensorFlow writes every Squeeze of a static shape."""
    _resolved_reshape(graph, node)
    node.attrs = {}
    node.op = "RESHAPE"


def concat(graph: Graph, node: Node) -> None:
    rank = len(graph.tensors[node.outputs[0]].shape)
    axis = int(np.asarray(graph.const(node.inputs[-1])).reshape(-1)[0]) % rank
    node.inputs = node.inputs[:-1]
    node.attrs = {"axis": axis, "fused_activation_function": "NONE"}
    node.op = "CONCATENATION"


def pack(graph: Graph, node: Node) -> None:
    rank = len(graph.tensors[node.outputs[0]].shape)
    node.attrs = {"values_count": len(node.inputs), "axis": int(node.attrs.get("axis", 0)) % rank}
    node.op = "PACK"


def block_size(op: str) -> Rewrite:
    def rewrite(graph: Graph, node: Node) -> None:
        node.attrs = {"block_size": int(node.attrs["block_size"])}
        node.op = op

    return rewrite


def gather(graph: Graph, node: Node) -> None:
    """GatherV2 ``(x, indices, axis)`` ⇒ GATHER ``(x, indices)`` with ``axis`` an option."""
    rank = len(graph.tensors[node.inputs[0]].shape)
    axis = int(np.asarray(graph.const(node.inputs[2])).reshape(-1)[0]) % rank
    _int32_const(graph, node, 1)
    node.inputs = node.inputs[:2]
    node.attrs = {"axis": axis, "batch_dims": 0}
    node.op = "GATHER"


def arg_max(graph: Graph, node: Node) -> None:
    _int32_const(graph, node, 1)
    node.attrs = {"output_type": graph.tensors[node.outputs[0]].dtype.upper()}
    node.op = "ARG_MAX"


def fused_batch_norm(graph: Graph, node: Node) -> None:
    """``y = x·m + (offset − mean·m)`` with ``m = scale·rsqrt(variance + ε)``, in float32, as
    TensorFlow's converter decomposes an inference-mode FusedBatchNorm before folding it."""
    if node.attrs.get("is_training", False):
        _batch_statistics_norm(graph, node)
        return
    consts = [graph.const(i) for i in node.inputs[1:5]]
    if any(c is None for c in consts):
        raise ConversionError(f"node '{node.name}' ({node.op}): scale, offset, mean and variance must be constants")
    scale, offset, mean, variance = (np.asarray(c, np.float32) for c in consts)
    eps = np.float32(node.attrs.get("epsilon", 1e-3))
    rsqrt = rsqrt_float32(variance + eps)  # TensorFlow's kernel: within an ulp of this, CPU-dependent
    multiplier = scale * rsqrt
    shift = offset - mean * multiplier
    x = node.inputs[0]
    scaled = _emit(graph, node, "MUL", [x, graph.add_const(f"{node.name}/multiplier", multiplier)],
                   graph.tensors[x].shape, {"fused_activation_function": "NONE", BATCH_NORM_PRODUCT: True}, "scaled")
    node.inputs = [scaled, graph.add_const(f"{node.name}/shift", shift)]
    node.attrs = {"fused_activation_function": "NONE"}
    node.op = "ADD"


def _batch_statistics_norm(graph: Graph, node: Node) -> None:
    """A FusedBatchNorm in training mode normalizes by the statistics of its own input: how
    Keras' LayerNormalization runs (it reshapes x to NCHW ``[1, rows, features, 1]``; with
    ``epsilon < 1.001e-5`` it writes the moments out instead, which need no rewrite). Only that
    NCHW form is taken (an NHWC one is a BatchNormalization frozen in training mode by mistake:
    ``tf_ops.shape_batch_norm`` refuses it). As TensorFlow's converter lowers it (measured on
    TF 2.21), with x in NHWC (a TRANSPOSE each way) and ``m = scale·rsqrt(var + ε)``::

        mean = MEAN(x, [0,1,2]); var = MEAN(SQUARED_DIFFERENCE(x, mean), [0,1,2])
        y = x·m + (offset − mean·m)

    A scale of ones and ``offset − 0`` then go as identities (``fold``); TensorFlow keeps
    ``SUB(zeros, mean·m)`` too. Only ``y`` may be read: the batch mean and variance outputs are
    training-only."""
    x = node.inputs[0]
    shape = graph.tensors[x].shape
    consts = [graph.const(i) for i in node.inputs[1:3]]  # NCHW (tf_ops.shape_batch_norm refuses NHWC)
    if len(shape) != 4 or any(c is None for c in consts):
        raise ConversionError(
            f"node '{node.name}' ({node.op}) normalizes by batch statistics (training mode): supported for a 4-D "
            f"NCHW input with constant scale and offset, as Keras' LayerNormalization writes it; "
            f"freeze the model for inference (training=False) otherwise")
    if any(graph.consumers(o) or o in graph.outputs for o in node.outputs[1:]):
        raise ConversionError(f"node '{node.name}' ({node.op}): its batch mean/variance outputs are read; only the "
                              "normalized output of a training-mode FusedBatchNorm can be converted")
    scale, offset = (np.asarray(c, np.float32) for c in consts)
    eps = np.float32(node.attrs.get("epsilon", 1e-3))
    none = {"fused_activation_function": "NONE"}
    nhwc = (shape[0], shape[2], shape[3], shape[1])
    channels = (nhwc[3],)
    # NCHW ⇄ NHWC; where only unit dimensions move (one row: LayerNormalization over all axes)
    # that is a RESHAPE, as TensorFlow writes it
    as_reshape = moves_only_unit_dims(shape, [0, 2, 3, 1])

    def relayout(src: str, perm: list[int], to: tuple[int, ...], suffix: str) -> tuple[str, list[str], dict]:
        if as_reshape:
            return "RESHAPE", [src, graph.add_const(f"{node.name}/{suffix}", np.array(to, np.int32))], \
                {"new_shape": [int(d) for d in to]}
        return "TRANSPOSE", [src, graph.add_const(f"{node.name}/{suffix}", np.array(perm, np.int32))], {}

    op, ins, attrs = relayout(x, [0, 2, 3, 1], nhwc, "to_nhwc")
    x = _emit(graph, node, op, ins, nhwc, attrs, "to_nhwc")
    axes = graph.add_const(f"{node.name}/axes", np.array([0, 1, 2], np.int32))
    mean = _emit(graph, node, "MEAN", [x, axes], channels, {"keep_dims": False}, "mean")
    sq = _emit(graph, node, "SQUARED_DIFFERENCE", [x, mean], nhwc, {}, "squared_difference")
    var = _emit(graph, node, "MEAN", [sq, axes], channels, {"keep_dims": False}, "variance")
    shifted = _emit(graph, node, "ADD", [var, graph.add_const(f"{node.name}/epsilon", eps)], channels, none, "add")
    rs = _emit(graph, node, "RSQRT", [shifted], channels, {}, "rsqrt")
    m = _emit(graph, node, "MUL", [rs, graph.add_const(f"{node.name}/scale", scale)], channels, none, "multiplier")
    xm = _emit(graph, node, "MUL", [x, m], nhwc, none, "scaled")
    mm = _emit(graph, node, "MUL", [mean, m], channels, none, "mean_scaled")
    sh = _emit(graph, node, "SUB", [graph.add_const(f"{node.name}/offset", offset), mm], channels, none, "shift")
    node.outputs = node.outputs[:1]
    y = _emit(graph, node, "ADD", [xm, sh], nhwc, none, "normalized")
    node.op, node.inputs, node.attrs = relayout(y, [0, 3, 1, 2], shape, "to_nchw")


def block_op(op: str) -> Rewrite:
    def rewrite(graph: Graph, node: Node) -> None:
        _int32_const(graph, node, 1)
        _int32_const(graph, node, 2)
        node.attrs = {}
        node.op = op

    return rewrite


_GELU_FIX = "export the model with Keras' 'gelu' activation or tf.nn.gelu"

# The rewrite of every TensorFlow op whose TF_OPS row names a TFLite op and that is more than a
# rename (a new name, no options: the default, ``plain(row's TFLite op)``), but for FakeQuant*
# (legalize_fake_quant, earlier in the stage) and Split/SplitV/Unpack (the importer's slices).
_LSTM_GATES = ("input", "forget", "cell", "output")  # Keras' order of the four gates along the kernel's columns


def keras_lstm(graph: Graph, node: Node) -> None:
    """``KerasLSTM(x, h0, c0, kernel [F, 4U], recurrent_kernel [U, 4U], bias [4U])`` (a Keras LSTM
    layer's function, ``frontend.graphdef._keras_lstm``) ⇒ ``UNIDIRECTIONAL_SEQUENCE_LSTM`` with its
    24 operands as TensorFlow's converter writes them (measured on TF 2.21): x; the input-to-gate
    weights ``kernel[:, gU:(g+1)U]ᵀ`` and recurrent ones, gates input, forget, cell, output; no
    peepholes; the four gate biases; no projection; the output and cell states as VARIABLE
    tensors (zero at start); no layer norm. Options: TANH, cell_clip 10, proj_clip 0, batch-major."""
    x, h0, c0, kernel, recurrent, bias = node.inputs
    layer = node.name.rsplit("/", 1)[0]
    values = {}
    for name, what in ((kernel, "kernel"), (recurrent, "recurrent kernel"), (bias, "bias")):
        v = graph.const(name)
        if v is None:
            raise ConversionError(f"Keras LSTM '{layer}': its {what} '{name}' is not a constant; freeze the "
                                  "model's variables (a SavedModel or Keras file is frozen by qconvert)")
        values[what] = np.asarray(v, np.float32)
    for name, what in ((h0, "output"), (c0, "cell")):
        v = graph.const(name)
        if v is None or np.any(v != 0):
            raise ConversionError(f"Keras LSTM '{layer}': its initial {what} state '{name}' is not zero; TFLite's "
                                  "LSTM keeps its state in a VARIABLE tensor that starts at zero: call the layer "
                                  "without initial_state")
    units = values["recurrent kernel"].shape[0]
    gate = [slice(g * units, (g + 1) * units) for g in range(4)]
    w_in = [graph.add_const(f"{layer}/input_to_{n}_weights", values["kernel"][:, s].T.copy())
            for n, s in zip(_LSTM_GATES, gate)]
    w_rec = [graph.add_const(f"{layer}/recurrent_to_{n}_weights", values["recurrent kernel"][:, s].T.copy())
             for n, s in zip(_LSTM_GATES, gate)]
    b = [graph.add_const(f"{layer}/{n}_gate_bias", values["bias"][s].copy()) for n, s in zip(_LSTM_GATES, gate)]
    batch = graph.tensors[x].shape[0]
    states = []
    for what in ("output_state", "cell_state"):
        name = graph.unique_name(f"{layer}/{what}")
        graph.add_tensor(Tensor(name, "float32", (batch, units), variable=True))
        states.append(name)
    node.inputs = [x, *w_in, *w_rec, "", "", "", *b, "", "", *states, "", "", "", ""]
    node.attrs = {"fused_activation_function": "TANH", "cell_clip": 10.0, "proj_clip": 0.0, "time_major": False,
                  "asymmetric_quantize_inputs": False, "diagonal_recurrent_tensors": False}
    node.op = "UNIDIRECTIONAL_SEQUENCE_LSTM"


def reverse_v2(graph: Graph, node: Node) -> None:
    """``ReverseV2(x, axis)`` ⇒ ``REVERSE_V2(x, axis)`` with the axes an int32 constant (TFLite's kernel
    reads int32 only; TensorFlow may hold them as int64)."""
    axis = graph.const(node.inputs[1])
    if axis is None:
        raise ConversionError(f"node '{node.name}' (ReverseV2): its axes '{node.inputs[1]}' are not a constant")
    if axis.dtype != np.int32:
        node.inputs[1] = graph.add_const(f"{node.name}/axis", np.asarray(axis).astype(np.int32).reshape(-1))
    node.attrs = {}
    node.op = "REVERSE_V2"


REWRITES: dict[str, Rewrite] = {
    "ReverseV2": reverse_v2,
    "KerasLSTM": keras_lstm,
    "Conv2D": conv2d,
    "DepthwiseConv2dNative": depthwise,
    "MatMul": matmul,
    "BatchMatMul": batch_matmul,
    "BatchMatMulV2": batch_matmul,
    "Einsum": einsum,
    "Conv2DBackpropInput": transpose_conv,
    "BiasAdd": plain("ADD", fused_activation_function="NONE"),
    "Add": plain("ADD", fused_activation_function="NONE"),
    "AddV2": plain("ADD", fused_activation_function="NONE"),
    "Sub": plain("SUB", fused_activation_function="NONE"),
    "Mul": plain("MUL", fused_activation_function="NONE"),
    "RealDiv": real_div,
    "Square": square,
    "DivNoNan": div_no_nan,
    "Neg": neg,
    # parts of GELU's patterns (fuse_gelu, earlier in the stage, takes them): refused anywhere else
    "Erfc": pattern_only("GELU's 0.5·x·erfc(-x/√2)", _GELU_FIX),
    "Pow": pow_,  # GELU's x³ (fuse_gelu, earlier in the stage) takes its own
    "ResizeNearestNeighbor": resize("RESIZE_NEAREST_NEIGHBOR"),
    "ResizeBilinear": resize("RESIZE_BILINEAR"),
    "FusedBatchNorm": fused_batch_norm,
    "FusedBatchNormV2": fused_batch_norm,
    "FusedBatchNormV3": fused_batch_norm,
    "LeakyRelu": leaky_relu,
    "Max": reducer("REDUCE_MAX"),
    "Sum": reducer("SUM"),
    "Slice": int32_operands("SLICE", 1, 2),
    "StridedSlice": strided_slice,
    "ExpandDims": as_reshape,
    "AvgPool": pool("AVERAGE_POOL_2D"),
    "MaxPool": pool("MAX_POOL_2D"),
    "Mean": mean,
    "Reshape": reshape,
    "Transpose": transpose,
    "SpaceToBatchND": block_op("SPACE_TO_BATCH_ND"),
    "BatchToSpaceND": block_op("BATCH_TO_SPACE_ND"),
    "Squeeze": squeeze,
    "ConcatV2": concat,
    "Pack": pack,
    "SpaceToDepth": block_size("SPACE_TO_DEPTH"),
    "DepthToSpace": block_size("DEPTH_TO_SPACE"),
    "GatherV2": gather,
    "ArgMax": arg_max,
    "Pad": int32_operands("PAD", 1),
    "PadV2": int32_operands("PADV2", 1),
    "Softmax": plain("SOFTMAX", beta=1.0),
}


def legalize_ops(graph: Graph, ctx: Context) -> bool:
    """Every op whose TF_OPS row names a TFLite op becomes it, by its ``REWRITES`` entry, or,
    with none, by its new name alone (``plain``)."""
    changed = False
    for node in graph:
        spec = TF_OPS.get(node.op)
        if spec is None or spec.tfl is None:
            continue
        rewrite = REWRITES.get(node.op)
        if rewrite is None:
            if node.op in ELSEWHERE or node.op.startswith("FakeQuant"):  # legalized before this pass
                raise ConversionError(f"node '{node.name}': no legalization for {node.op}")
            rewrite = plain(spec.tfl)  # a rename: the TFLite op, no options
        rewrite(graph, node)
        changed = True
    return changed
