"""The ``fuse`` stage: what goes into a convolution or FULLY_CONNECTED next to it.

0. ``op(x, w, b) ──▶ MUL(·, m)`` ⇒ ``op(x, w·m, b·m)`` (a BatchNorm's scale; see fold_mul_into_weights)
0'. ``ADD(x, c) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W, b + W·c)`` when b is not
   all zeros (TensorFlow's FuseAddAndFullyConnected, applied bottom-up: see fuse_add_into_fully_connected),
   and ``MUL(x, m) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W·m, b)`` for a 1-D m
0''. ``MUL|ADD|SUB(x, c) ──▶ op(·, w, b)`` with a scalar ``c`` ⇒ ``op(x, w·c, b)`` or
   ``op(x, w, b ± Σ w·c)`` (an input scale and offset; see fold_mul_into_following_weights)
1. ``CONV_2D | DEPTHWISE_CONV_2D | FULLY_CONNECTED (…, bias) ──▶ ADD(·, c)``
   ⇒ the op with ``bias + c``, when ``c`` is a constant of one value per output
   channel or a scalar and the op's output has no other reader (also ``SUB``: ``bias - c``).
2. ``op ──▶ RELU | RELU6 | RELU_N1_TO_1`` ⇒ ``op`` with ``fused_activation_function``
   set, for ops whose TFLite kernel clamps (conv, depthwise, FC, ADD, SUB, MUL).
3. ``PAD(x) ──▶ CONV_2D | DEPTHWISE_CONV_2D (VALID)`` ⇒ the op ``(SAME)`` on x, when the zero
   padding is exactly SAME's (see fuse_pad_into_conv).

Hard-swish and PReLU are in ``activation_patterns``, the RESHAPE rewrites in ``reshapes``.
All happen before quantization, as in TensorFlow's converter: a FakeQuant between
the two ops (a Q/DQ pair) blocks the fusion, since the range in between matters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import dequantized_from, insert_qdq_on_edge
from qconvert.ops import OpRow, Rule, row
from qconvert.ops.windows import window_padding

# A private node attribute (not written to the file): fuse_activation leaves this op's activation
# a separate op, before and after quantization (set by fold_mul_into_weights, see there).
ACTIVATION_APART = "_activation_apart"


def sole_reader(graph: Graph, node: Node) -> Node | None:
    """The one op reading ``node``'s output, when that output is not also a graph output."""
    out = node.outputs[0]
    readers = graph.consumers(out)
    if len(readers) != 1 or out in graph.outputs:
        return None
    return readers[0]


def _unfused_reader(graph: Graph, node: Node, wanted: Callable[[OpRow], bool]) -> Node | None:
    """The sole reader of a conv/depthwise/FC with no fused activation, if its row is
    ``wanted`` and it has no fused activation either."""
    r = row(node.op)
    if r is None or r.rule is not Rule.WEIGHTED or node.attrs.get("fused_activation_function") != "NONE":
        return None
    reader = sole_reader(graph, node)
    rr = row(reader.op) if reader is not None else None
    if rr is None or not wanted(rr) or reader.attrs.get("fused_activation_function") != "NONE":  # type: ignore[union-attr]
        return None
    return reader


def _bias(graph: Graph, node: Node) -> tuple[np.ndarray | None, int]:
    """A conv/depthwise/FC/transposed conv's float bias (zeros when it has none yet: TRANSPOSE_CONV)
    and its channel count; None when the bias is not a constant."""
    r = row(node.op)
    _, ws, bs = r.operand_slots  # type: ignore[union-attr]
    w = graph.tensors[node.inputs[ws]].shape
    channels = w[0 if r.weight_axis is None else r.weight_axis]  # type: ignore[union-attr]
    if bs >= len(node.inputs):
        return np.zeros(channels, np.float32), channels
    value = graph.const(node.inputs[bs])
    return (None if value is None else np.asarray(value)), channels


def _absorb(graph: Graph, node: Node, reader: Node, bias: np.ndarray, dead: list[Node]) -> None:
    """``node`` takes over ``reader``'s output with the new ``bias``; ``reader`` goes."""
    bs = row(node.op).operand_slots[2]  # type: ignore[union-attr]
    name = graph.add_const(f"{node.name}/bias", bias)
    if bs < len(node.inputs):
        node.inputs[bs] = name
    else:
        node.inputs.append(name)
    node.outputs = list(reader.outputs)
    dead.append(reader)


def fold_mul_into_weights(graph: Graph, ctx: Context) -> bool:
    """``op(x, w, b) ──▶ MUL(·, m)`` ⇒ ``op(x, w·m, b·m)`` for a per-channel (or scalar) constant m.

    This is how a BatchNorm after a convolution ends up in its weights. A weight with
    a FakeQuant keeps its integer grid: its float values are multiplied by m and its
    scales by |m| per output channel, which is what TensorFlow's converter writes
    (measured: the int8 weights equal the FakeQuant's integers; scales agree with
    scale·|m| to within the 1-3 ulps of TF's approximate rsqrt). A weight without a
    FakeQuant is just multiplied; it gets parameters from its values later.
    """
    dead: list[Node] = []
    for node in graph:
        _fold_following_mul(graph, ctx, node, dead)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def fold_mul_into_conv(graph: Graph, ctx: Context) -> bool:
    """fold_mul_into_weights for CONV_2D alone, before the FULLY_CONNECTED fusions: TensorFlow folds a
    MUL after a Conv2D (a BatchNormalization's scale) in its TF-dialect optimize pass (FuseMulAndConv2D),
    before the TFLite patterns run. It matters when the BatchNormalization's output also feeds a Dense:
    ``CONV → MUL → ADD(shift) → FULLY_CONNECTED`` then becomes ``CONV' → FULLY_CONNECTED'`` (the shift into
    the Dense's bias) beside ``CONV' → ADD(shift)`` for the other readers, and the shift cannot go into the
    conv's bias (measured on TF 2.21: LeViT128S's stem, tests/e2e/test_kcam_zoo.py)."""
    dead: list[Node] = []
    for node in graph:
        r = row(node.op)
        if r is not None and r.folds_mul_first:
            _fold_following_mul(graph, ctx, node, dead)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _fold_following_mul(graph: Graph, ctx: Context, node: Node, dead: list[Node]) -> bool:
    """fold_mul_into_weights on one op: its sole reader ``MUL(·, m)`` goes into its weights and bias."""
    mul = _unfused_reader(graph, node, lambda r: r.scales_weights)
    if mul is None or mul in dead:
        return False
    op_row = row(node.op)
    other = mul.inputs[1] if mul.inputs[0] == node.outputs[0] else mul.inputs[0]
    m = graph.const(other)
    bias, channels = _bias(graph, node)
    ws = op_row.operand_slots[1]
    if m is None or m.dtype != np.float32 or bias is None:
        return False
    if m.size not in (1, channels) or (m.ndim > 0 and m.shape[-1] != m.size):
        return False
    m = np.broadcast_to(m.reshape(-1), (channels,)).astype(np.float32)
    axis = 0 if op_row.weight_axis is None else op_row.weight_axis
    pair = dequantized_from(graph, node.inputs[ws])
    source = pair[0].inputs[0] if pair is not None else node.inputs[ws]
    w = graph.const(source)
    if w is None:
        return False
    params = graph.tensors[pair[0].outputs[0]].quant if pair is not None else None
    per_channel = op_row.weight_axis is not None
    if params is not None and not per_channel and m.size > 1 and len(set(m.tolist())) > 1:
        # A BatchNorm after a Dense with a per-tensor FakeQuant (tfmot): the folded weights
        # are the FakeQuant's integers at one scale per output channel. TensorFlow leaves
        # this FULLY_CONNECTED in float32; we write it per channel, exact, and keep the
        # activation after it separate as TensorFlow's float one is (error against the
        # training graph: see tests/e2e/test_tfmot.py).
        per_channel = True
        node.attrs[ACTIVATION_APART] = True
        ctx.note(f"{node.op} '{node.name}': the BatchNorm after it makes its weights per-channel "
                 f"(FakeQuant scale × BatchNorm scale); written per-channel int8, which TensorFlow "
                 f"leaves float32")
    shape = [1] * w.ndim
    shape[axis] = channels
    folded = graph.add_const(f"{source}/folded", w.astype(np.float32, copy=False) * m.reshape(shape).astype(np.float32, copy=False))
    node.inputs[ws] = folded
    if params is not None:
        scales = np.broadcast_to(np.asarray(params.scale, np.float64), (channels,))
        zps = np.broadcast_to(np.asarray(params.zero_point, np.int64), (channels,))
        new = replace(params, scale=tuple((scales * np.abs(m.astype(np.float64))).tolist()),
                      zero_point=tuple(int(z) for z in zps), axis=axis if per_channel else None)
        if new.axis is None:
            new = replace(new, scale=new.scale[:1], zero_point=new.zero_point[:1])
        insert_qdq_on_edge(graph, node, ws, new, Origin.WEIGHT)
    if op_row.weight_axis is None and op_row.operand_slots[2] >= len(node.inputs):  # FULLY_CONNECTED
        # a Dense without a bias keeps none (TensorFlow's FuseFullyConnectedAndMul; measured on 2.21)
        node.outputs = list(mul.outputs)
        dead.append(mul)
    else:
        _absorb(graph, node, mul, (bias * m).astype(np.float32), dead)
    return True


def fuse_bias_add(graph: Graph, ctx: Context) -> bool:
    """Each op's chain of ``ADD/SUB(·, c)`` readers into its bias, one after another (a BiasAdd, then
    a BatchNorm's shift, then a hand-written ``+ c``: TensorFlow folds them all)."""
    dead: list[Node] = []
    for node in graph:
        while _fuse_following_bias(graph, node, dead):
            pass
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _fuse_following_bias(graph: Graph, node: Node, dead: list[Node]) -> bool:
    """Rule 1 for one op: its sole reader ``ADD/SUB(·, c)`` goes into its bias."""
    add = _unfused_reader(graph, node, lambda r: r.bias_sign != 0)
    if add is None or add in dead:
        return False
    if add.inputs[0] != node.outputs[0] or not graph.is_const(add.inputs[1]):
        return False
    bias, channels = _bias(graph, node)
    c = np.asarray(graph.const(add.inputs[1]), dtype=np.float32)
    if bias is None or c.dtype != np.float32 or not (c.size == 1 or (c.size == channels and c.shape[-1] == channels)):
        return False
    c = np.broadcast_to(c.reshape(-1), (channels,))  # a scalar adds to every channel's bias
    new = bias + c if row(add.op).bias_sign > 0 else bias - c  # type: ignore[union-attr]
    _absorb(graph, node, add, new.astype(np.float32), dead)
    return True


def fold_constant_adds(graph: Graph, ctx: Context) -> bool:
    """``ADD(ADD(x, c1), c2)`` ⇒ ``ADD(x, c1 + c2)`` (float32), when the inner ADD has no fused
    activation and no other reader, and the folded constant broadcasts to the same result: TensorFlow
    folds chains of constant additions (measured on TF 2.21: ``x + c1 + c2`` and ``x + 1 + c`` are
    one ADD, ``((x + a) + b) + d`` adds ``(a + b) + d``; ``x + c1 - c2`` and ``x · c1 · c2`` stay two
    ops). Runs after fuse_bias_add, which takes such chains into a convolution's bias one by one."""
    dead: list[Node] = []
    for outer in graph:
        r = row(outer.op)
        if r is None or r.bias_sign <= 0 or len(outer.inputs) != 2:
            continue
        k = 1 if graph.is_const(outer.inputs[1]) else 0 if graph.is_const(outer.inputs[0]) else None
        inner = None if k is None else graph.producer(outer.inputs[1 - k])
        if inner is None or inner in dead or inner.op != outer.op or len(inner.inputs) != 2 \
                or inner.attrs.get("fused_activation_function", "NONE") != "NONE" or sole_reader(graph, inner) is not outer:
            continue
        j = 1 if graph.is_const(inner.inputs[1]) else 0 if graph.is_const(inner.inputs[0]) else None
        if j is None or graph.is_const(inner.inputs[1 - j]):
            continue
        c1 = np.asarray(graph.const(inner.inputs[j]))
        c2 = np.asarray(graph.const(outer.inputs[k]))
        if c1.dtype != np.float32 or c2.dtype != np.float32:
            continue
        folded = (c1 + c2).astype(np.float32)
        x = inner.inputs[1 - j]
        out_shape = graph.tensors[outer.outputs[0]].shape
        try:
            if tuple(np.broadcast_shapes(graph.tensors[x].shape, folded.shape)) != tuple(out_shape):
                continue
        except ValueError:
            continue
        outer.inputs = [x, graph.add_const(f"{outer.name}/folded", folded)]
        dead.append(inner)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def fuse_activation(graph: Graph, ctx: Context) -> bool:
    dead = []
    for node in graph:
        r = row(node.op)
        if r is None or not r.fuses_activation or node.attrs.get("fused_activation_function") != "NONE" \
                or node.attrs.get(ACTIVATION_APART):
            continue
        if (r.fuses_activation_only_with_bias and r.operand_slots[2] >= len(node.inputs)
                and ctx.calibration is not None):
            # TensorFlow fuses no activation into a TRANSPOSE_CONV without a bias (measured on 2.21):
            # after calibration both are int8 ops. A QAT graph has no range between the two (TensorFlow
            # then leaves the conv in float32); there we fuse, and the conv is int8 too.
            continue
        act = sole_reader(graph, node)
        act_row = row(act.op) if act is not None else None
        if act_row is None or act_row.activation is None:
            continue
        node.attrs["fused_activation_function"] = act_row.activation
        node.outputs = list(act.outputs)
        dead.append(act)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def fuse_add_into_fully_connected(graph: Graph, ctx: Context) -> bool:
    """``ADD(x, c) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W, b + W·c)`` and
    ``MUL(x, m) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W·m, b)``.

    TensorFlow's optimize pass has both FuseFullyConnectedAndAdd (an add after an FC goes into
    its bias) and FuseAddAndFullyConnected (an add before an FC goes into the FC's bias through
    its weights). Its greedy driver visits ops last to first, so in ``FC0 → ADD(c) → FC1 → ADD(d)``
    the ADD(d) first becomes FC1's bias, and then ADD(c) folds into FC1 too: FC0 keeps no bias,
    and the tensor quantized after FC0 is the one before the ADD (measured on Arm's CNN keyword
    spotter). The pattern needs FC1 to have a bias (TensorFlow drops an all-zero bias first),
    default weights, a plain float32 constant W, an ADD without activation whose second operand
    is a 1-D float32 constant. The new bias is TensorFlow's FC constant folding: per output,
    ``b[o] + Σ c[j]·W[o, j]`` in float32 with Neumaier compensation, in j order.

    Its FuseMulAndFullyConnected scales W's input columns by a MUL's 1-D float32 constant (one
    float32 product each; bias or none, any activation): a BatchNormalization before a classifier
    (``x·m + s``, RepViT's after global pooling) goes entirely into the FC, its shift first, then its
    scale. The MUL stays for its other readers, if any (measured on TF 2.21: a ``[16]`` multiplier
    folds, a ``[1, 16]`` one stays a MUL; tests/e2e/test_kcam_patterns.py). Both are tried on each
    FC until neither applies (TensorFlow's driver repeats its patterns too).
    """
    changed = False
    dead: list[Node] = []
    for node in reversed(graph.nodes):
        r = row(node.op)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None:  # FULLY_CONNECTED
            continue
        # TensorFlow's greedy driver visits ops last to first, and an op it rewrites before that op's readers:
        # the reader after the FC folds first (a bias add, a BatchNormalization's scale), then the new FC takes
        # what it can from before it, then its next reader folds, and so on. CNN_S (Arm): FC → ADD(b) → MUL(m) →
        # ADD(s) after an ADD(c) gives ((b + W·c)·m) + s; LeViT: a Dense without bias → MUL → ADD(s) after an
        # ADD(c) gives W·m and s + (W·m)·c (measured on TF 2.21)
        while True:
            after = _fuse_following_bias(graph, node, dead) or _fold_following_mul(graph, ctx, node, dead)
            while node.attrs.get("weights_format", "DEFAULT") == "DEFAULT" and (
                    _fold_add_before_fc(graph, node) or _fold_mul_before_fc(graph, node)):
                changed = True
            if not after:
                break
            changed = True
    graph.remove_nodes(dead)
    graph.prune()
    return changed


def _fold_add_before_fc(graph: Graph, node: Node) -> bool:
    """FuseAddAndFullyConnected on one FULLY_CONNECTED (see fuse_add_into_fully_connected)."""
    if len(node.inputs) < 3:
        return False
    add = graph.producer(node.inputs[0])
    ar = row(add.op) if add is not None else None
    if ar is None or ar.bias_sign <= 0 or add.attrs.get("fused_activation_function", "NONE") != "NONE":
        return False
    c, w, b = graph.const(add.inputs[1]), graph.const(node.inputs[1]), graph.const(node.inputs[2])
    if c is None or w is None or b is None or graph.is_const(add.inputs[0]):
        return False
    if c.dtype != np.float32 or w.dtype != np.float32 or c.ndim != 1 or w.ndim != 2 or c.size != w.shape[1]:
        return False
    if not np.any(b):
        return False
    node.inputs[2] = graph.add_const(f"{node.name}/bias", _fold_fc_bias(c, w, b.astype(np.float32)))
    node.inputs[0] = add.inputs[0]
    return True


def _fold_mul_before_fc(graph: Graph, node: Node) -> bool:
    """FuseMulAndFullyConnected on one FULLY_CONNECTED: ``MUL(x, m)`` with a 1-D float32
    constant ``m`` (either operand: MUL commutes) and ``x`` of the product's shape ⇒ weights
    ``W[o, j]·m[j]`` in float32 (``m`` of one element scales every weight)."""
    mul = graph.producer(node.inputs[0])
    mr = row(mul.op) if mul is not None else None
    if mr is None or mr.arith != "mul" or len(mul.inputs) != 2 \
            or mul.attrs.get("fused_activation_function", "NONE") != "NONE":
        return False
    k = 1 if graph.is_const(mul.inputs[1]) else 0 if graph.is_const(mul.inputs[0]) else None
    w = graph.const(node.inputs[1])
    if k is None or w is None or graph.is_const(mul.inputs[1 - k]):
        return False
    m, x = np.asarray(graph.const(mul.inputs[k])), mul.inputs[1 - k]
    if m.dtype != np.float32 or w.dtype != np.float32 or m.ndim != 1 or w.ndim != 2 or m.size not in (1, w.shape[1]):
        return False
    shape = graph.tensors[x].shape
    if shape is None or tuple(shape) != tuple(graph.tensors[mul.outputs[0]].shape or ()):
        return False
    node.inputs[1] = graph.add_const(f"{node.inputs[1]}/scaled", (w * m.reshape(1, -1)).astype(np.float32))
    node.inputs[0] = x
    return True


def _fold_fc_bias(c: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TensorFlow's FullyConnectedOp::fold on a constant input ``c``: for each output row,
    ``sum = b``, then ``sum += c[j]·W[:, j]`` in float32 with Neumaier's compensation."""
    total = b.astype(np.float32).copy()
    comp = np.zeros_like(total)
    for j in range(c.size):
        addend = (np.float32(c[j]) * w[:, j]).astype(np.float32)
        new = (total + addend).astype(np.float32)
        big = np.abs(total) >= np.abs(addend)
        comp += np.where(big, (total - new) + addend, (addend - new) + total).astype(np.float32)
        total = new
    return (total + comp).astype(np.float32)


def fuse_pad_into_conv(graph: Graph, ctx: Context) -> bool:
    """``PAD(x, p) ──▶ CONV_2D | DEPTHWISE_CONV_2D (padding VALID)`` ⇒ the op with padding SAME
    on ``x``, when ``p`` pads only height and width, by exactly what SAME pads for that kernel,
    stride and dilation (Keras' ZeroPadding2D before a stride-1 convolution, ResNet50V2,
    MobileNetV3, EfficientNet). Measured on TensorFlow 2.21: [1, 1] pads before a 3x3 stride-1
    convolution fuse, [1, 1] before a stride-2 one on an even size stay a PAD (SAME pads [0, 1]
    there), [0, 1] before it fuse; pooling ops keep their PAD. Each reader on its own: a PAD read
    by two such convolutions goes into both; one read by a stride-2 convolution too stays for it
    (measured on TF 2.21; with fold's merging of equal PADs, EfficientFormerV2's and YOLOv8's
    ZeroPadding2D twins)."""
    changed = False
    for pad in list(graph):
        r = row(pad.op)
        if r is None or not r.zero_pads or len(pad.inputs) != 2 or not graph.is_const(pad.inputs[1]):
            continue
        shape, pads = graph.tensors[pad.inputs[0]].shape, np.asarray(graph.const(pad.inputs[1])).reshape(-1, 2)
        if shape is None or len(shape) != 4 or pads.shape != (4, 2) or pads[0].any() or pads[3].any():
            continue
        for conv in graph.consumers(pad.outputs[0]):
            rc = row(conv.op)
            if rc is None or not rc.takes_same_padding or conv.inputs[0] != pad.outputs[0] \
                    or conv.attrs.get("padding") != "VALID":
                continue
            w_shape = graph.tensors[conv.inputs[1]].shape
            if w_shape is None or len(w_shape) != 4:
                continue
            kh, kw = w_shape[1:3]  # [O, H, W, I] and [1, H, W, C*M]
            same = [window_padding(int(shape[1 + a]), int(k), int(conv.attrs.get(f"stride_{hw}", 1)),
                                   int(conv.attrs.get(f"dilation_{hw}_factor", 1)), "SAME")[1:]
                    for a, (k, hw) in enumerate(((kh, "h"), (kw, "w")))]
            if [tuple(int(v) for v in pads[1]), tuple(int(v) for v in pads[2])] != same:
                continue
            conv.inputs[0] = pad.inputs[0]
            conv.attrs["padding"] = "SAME"
            changed = True
    if changed:
        graph.prune()
    return changed


def scalarize_splat_after_affine(graph: Graph, ctx: Context) -> bool:
    """``ADD|SUB|MUL|DIV(op(...), c)`` with ``c`` a float32 constant of more than one element, all equal,
    after a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED: ``c`` becomes a 0-d constant, as TensorFlow's
    ScalarizeSplatConstantForBroadcastableOps writes it (a fact of its optimize pass: the constant is the
    second operand, the first has the result's static shape of rank 4 at most, the op's bias is a constant
    or none and, for MUL and DIV, its weights a constant). What the fusions could not take stays a binary op
    with a scalar: the same int8 value, one element in the file (measured on TF 2.21: a BatchNormalization
    whose variances are all equal after a Dense read twice, LeViT128S at 32 px; tests/fuse/)."""
    changed = False
    for node in graph:
        r = row(node.op)
        if r is None or r.splat_scalar is None or len(node.inputs) != 2:
            continue
        c = graph.const(node.inputs[1])
        affine = graph.producer(node.inputs[0])
        ra = row(affine.op) if affine is not None else None
        if c is None or c.dtype != np.float32 or c.size <= 1 or np.any(c != c.reshape(-1)[0]) \
                or ra is None or not ra.absorbs_input_scale:  # CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED
            continue
        x, out = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
        if x is None or out is None or tuple(x) != tuple(out) or len(x) > 4:
            continue
        _, ws, bs = ra.operand_slots
        if (bs < len(affine.inputs) and not graph.is_const(affine.inputs[bs])) \
                or (r.splat_scalar == "scale" and not graph.is_const(affine.inputs[ws])):
            continue
        node.inputs[1] = graph.add_const(f"{node.inputs[1]}/scalar", np.float32(c.reshape(-1)[0]).reshape(()))
        changed = True
    if changed:
        graph.prune()
    return changed


def fold_mul_into_following_weights(graph: Graph, ctx: Context) -> bool:
    """A scalar MUL, ADD or SUB before a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED whose
    weights are a plain constant goes into it, as TensorFlow's FuseBinaryOpToFollowingAffineOp
    does (after ScalarizeSplatConstant*: a constant whose values are all equal counts as one):

        MUL(x, c) ──▶ op(·, w, b)      ⇒   op(x, w·c, b)
        ADD(x, c) ──▶ op(·, w, b)      ⇒   op(x, w, b + Σ w·c)       (VALID padding only; SUB: −c)

    The sum runs over each output channel's weights in their TFLite order, one float32 product and
    one float32 add at a time. Each reader folds on its own: the binary op stays for any other
    reader. Only one element: a per-channel MUL stays (Keras' Normalization before EfficientNetV2's
    stem); TRANSPOSE_CONV has no such pattern. Repeated per op until its input is no such binary
    op, so both halves of Keras' Rescaling(scale, offset) go into a VALID convolution (measured on
    TF 2.21; EfficientNet's Rescaling(1/255) before its SAME stem leaves the weights w × 1/255
    after the BatchNorm's factor, and no MUL)."""
    changed = False
    for op in list(graph):
        ro = row(op.op)
        if ro is None or not ro.absorbs_input_scale:
            continue
        xs, ws, bs = ro.operand_slots
        while True:
            binary = graph.producer(op.inputs[xs])
            rb = row(binary.op) if binary is not None else None
            w = graph.const(op.inputs[ws])
            if rb is None or w is None or w.dtype != np.float32 \
                    or binary.attrs.get("fused_activation_function", "NONE") != "NONE":
                break
            operand = _scalar_operand(graph, binary, commutes=rb.arith in ("mul", "add"))
            if operand is None:
                break
            x, c = operand
            if rb.arith == "mul":
                op.inputs[ws] = graph.add_const(f"{op.inputs[ws]}/scaled", w * c)
            elif rb.bias_sign and op.attrs.get("padding", "VALID") == "VALID":
                bias, channels = _bias(graph, op)
                if bias is None or bias.size not in (1, channels):
                    break
                added = _bias_through_weights(w, np.float32(c if rb.bias_sign > 0 else -c), channels,
                                              ro.weight_axis, np.broadcast_to(bias, (channels,)))
                name = graph.add_const(f"{op.name}/bias", added)
                if bs < len(op.inputs):
                    op.inputs[bs] = name
                else:
                    op.inputs.append(name)
            else:
                break
            op.inputs[xs] = x
            changed = True
    graph.prune()  # a binary op no other op reads
    return changed


def _scalar_operand(graph: Graph, node: Node, commutes: bool) -> tuple[str, np.float32] | None:
    """``(x, c)`` for a two-operand element-wise ``node`` of a non-constant ``x`` of the output's
    shape and a constant holding one value ``c`` (or all its values equal); the constant on the
    left only when the op commutes. (``Graph.scalar_operand`` looks for one given value.)"""
    if len(node.inputs) != 2 or graph.is_const(node.inputs[0]) == graph.is_const(node.inputs[1]):
        return None
    slot = 0 if graph.is_const(node.inputs[0]) else 1
    if slot == 0 and not commutes:
        return None
    x, c = node.inputs[1 - slot], np.asarray(graph.const(node.inputs[slot]))
    if c.dtype != np.float32 or c.size == 0 or np.any(c != c.reshape(-1)[0]) or graph.tensors[x].shape is None \
            or tuple(graph.tensors[x].shape) != tuple(graph.tensors[node.outputs[0]].shape or ()):
        return None
    return x, np.float32(c.reshape(-1)[0])


def _bias_through_weights(w: np.ndarray, c: np.float32, channels: int, axis: int | None,
                          bias: np.ndarray) -> np.ndarray:
    """``b[o] + Σ w·c`` over output channel ``o``'s weights, in the order TensorFlow's pattern
    walks the flattened filter (channel axis first for CONV_2D/FULLY_CONNECTED, last for
    DEPTHWISE_CONV_2D), rounding to float32 after each product and each add."""
    per_channel = (w.reshape(channels, -1) if axis in (None, 0) else w.reshape(-1, channels).T).astype(np.float32)
    total = bias.astype(np.float32).copy()
    for k in range(per_channel.shape[1]):
        total = (total + (per_channel[:, k] * c).astype(np.float32)).astype(np.float32)
    return total
