"""Stage 4a: fuse a bias add and a following activation into the op before them.

0. ``op(x, w, b) ──▶ MUL(·, m)`` ⇒ ``op(x, w·m, b·m)`` (a BatchNorm's scale; see fold_mul_into_weights)
0'. ``ADD(x, c) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W, b + W·c)`` when b is not
   all zeros (TensorFlow's FuseAddAndFullyConnected, applied bottom-up: see fuse_add_into_fully_connected)
1. ``CONV_2D | DEPTHWISE_CONV_2D | FULLY_CONNECTED (…, bias) ──▶ ADD(·, c)``
   ⇒ the op with ``bias + c``, when ``c`` is a constant of one value per output
   channel or a scalar and the op's output has no other reader (also ``SUB``: ``bias - c``).
2. ``op ──▶ RELU | RELU6 | RELU_N1_TO_1`` ⇒ ``op`` with ``fused_activation_function``
   set, for ops whose TFLite kernel clamps (conv, depthwise, FC, ADD, SUB, MUL).
3. ``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)`` (see fuse_hard_swish).
4. ``relu(x) + c · relu(-x)`` ⇒ ``PRELU(x, -c)`` (see fuse_prelu).
5. ``RESHAPE → FULLY_CONNECTED → RESHAPE`` on an N-D tensor ⇒ ``FULLY_CONNECTED(keep_num_dims)``
   (see fuse_reshapes_into_fully_connected), first of all, so the bias and ReLU fuse after it.
6. ``PAD(x) ──▶ CONV_2D | DEPTHWISE_CONV_2D (VALID)`` ⇒ the op ``(SAME)`` on x, when the zero
   padding is exactly SAME's (see fuse_pad_into_conv).
7. ``RESHAPE ──▶ ADD|SUB|MUL(·, c)`` ⇒ the op before the RESHAPE, when c broadcasts the same
   on both shapes (see move_binary_before_reshape), so a Conv1D's bias and BatchNorm fuse;
   then chains of RESHAPEs merge (see merge_reshapes), and a reduction whose RESHAPE only puts
   back the reduced dimensions keeps them (see keep_reduced_dims).

Both happen before quantization, as in TensorFlow's converter: a FakeQuant between
the two ops (a Q/DQ pair) blocks the fusion, since the range in between matters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import dequantized_from, insert_qdq_on_edge, is_dequantize, is_quantize
from qconvert.ops import HARD_SWISH_GATE, PRELU_GATE, OpRow, Rule, row
from qconvert.ops.windows import window_padding

# A private node attribute (not written to the file): fuse_activation leaves this op's activation
# a separate op, before and after quantization (set by fold_mul_into_weights, see there).
ACTIVATION_APART = "_activation_apart"


def _sole_reader(graph: Graph, node: Node) -> Node | None:
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
    reader = _sole_reader(graph, node)
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
    dead = []
    for node in graph:
        mul = _unfused_reader(graph, node, lambda r: r.scales_weights)
        if mul is None:
            continue
        op_row = row(node.op)
        other = mul.inputs[1] if mul.inputs[0] == node.outputs[0] else mul.inputs[0]
        m = graph.const(other)
        bias, channels = _bias(graph, node)
        ws = op_row.operand_slots[1]
        if m is None or m.dtype != np.float32 or bias is None:
            continue
        if m.size not in (1, channels) or (m.ndim > 0 and m.shape[-1] != m.size):
            continue
        m = np.broadcast_to(m.reshape(-1), (channels,)).astype(np.float32)
        axis = 0 if op_row.weight_axis is None else op_row.weight_axis
        pair = dequantized_from(graph, node.inputs[ws])
        source = pair[0].inputs[0] if pair is not None else node.inputs[ws]
        w = graph.const(source)
        if w is None:
            continue
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
        _absorb(graph, node, mul, (bias * m).astype(np.float32), dead)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def fuse_bias_add(graph: Graph, ctx: Context) -> bool:
    dead: list[Node] = []
    for node in graph:
        _fuse_following_bias(graph, node, dead)
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
        act = _sole_reader(graph, node)
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
    """``ADD(x, c) ──▶ FULLY_CONNECTED(·, W, b)`` ⇒ ``FULLY_CONNECTED(x, W, b + W·c)``.

    TensorFlow's optimize pass has both FuseFullyConnectedAndAdd (an add after an FC goes into
    its bias) and FuseAddAndFullyConnected (an add before an FC goes into the FC's bias through
    its weights). Its greedy driver visits ops last to first, so in ``FC0 → ADD(c) → FC1 → ADD(d)``
    the ADD(d) first becomes FC1's bias, and then ADD(c) folds into FC1 too: FC0 keeps no bias,
    and the tensor quantized after FC0 is the one before the ADD (measured on Arm's CNN keyword
    spotter). The pattern needs FC1 to have a bias (TensorFlow drops an all-zero bias first),
    default weights, a plain float32 constant W, an ADD without activation whose second operand
    is a 1-D float32 constant. The new bias is TensorFlow's FC constant folding: per output,
    ``b[o] + Σ c[j]·W[o, j]`` in float32 with Neumaier compensation, in j order.
    """
    changed = False
    dead: list[Node] = []
    for node in reversed(graph.nodes):
        r = row(node.op)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None:  # FULLY_CONNECTED
            continue
        changed |= _fuse_following_bias(graph, node, dead)  # first its own bias add, as TensorFlow does
        if node.attrs.get("weights_format", "DEFAULT") != "DEFAULT" or len(node.inputs) < 3:
            continue
        add = graph.producer(node.inputs[0])
        ar = row(add.op) if add is not None else None
        if ar is None or ar.bias_sign <= 0 or add.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        c, w, b = graph.const(add.inputs[1]), graph.const(node.inputs[1]), graph.const(node.inputs[2])
        if c is None or w is None or b is None or graph.is_const(add.inputs[0]):
            continue
        if c.dtype != np.float32 or w.dtype != np.float32 or c.ndim != 1 or w.ndim != 2 or c.size != w.shape[1]:
            continue
        if not np.any(b):
            continue
        node.inputs[2] = graph.add_const(f"{node.name}/bias", _fold_fc_bias(c, w, b.astype(np.float32)))
        node.inputs[0] = add.inputs[0]
        changed = True
    graph.remove_nodes(dead)
    graph.prune()
    return changed


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


def _arith(graph: Graph, name: str, kind: str) -> Node | None:
    """The producer of ``name`` if it is a ``kind`` op ("add", "mul") read only there, without
    a fused activation unless the caller checks it."""
    node = graph.producer(name)
    r = row(node.op) if node is not None else None
    if r is None or r.arith != kind or len(graph.consumers(name)) != 1 or name in graph.outputs:
        return None
    return node


def _split(graph: Graph, node: Node, value: float) -> str | None:
    """The operand of a binary ``node`` whose other operand is exactly the scalar constant ``value``."""
    return graph.scalar_operand(node, value)


def _add3_relu6(graph: Graph, name: str) -> str | None:
    """``x`` where ``name`` is ``ADD(x, 3)`` with a fused RELU6, read only once."""
    add = _arith(graph, name, "add")
    if add is None or add.attrs.get("fused_activation_function") != HARD_SWISH_GATE:
        return None
    return _split(graph, add, 3.0)


def fuse_hard_swish(graph: Graph, ctx: Context) -> bool:
    """``x · relu6(x + 3) · (1/6)`` ⇒ ``HARD_SWISH(x)``, as TensorFlow's optimize pass fuses it
    (measured on TF 2.21: one HARD_SWISH v1 in post-training quantization, for Keras'
    ``x * (relu6(x + 3) * (1/6))`` and for ``(x * relu6(x + 3)) * (1/6)``). The constants are
    float32 scalars 3 and 1/6; the RELU6 is the ADD's fused activation (rule 2 ran first);
    every intermediate has one reader. A FakeQuant in between (a Q/DQ pair) blocks it."""
    dead: list[Node] = []
    for outer in graph:
        r = row(outer.op)
        if r is None or r.arith != "mul" or outer.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        x = None
        for slot in (0, 1):  # x · (relu6(x + 3) · 1/6)
            inner = _arith(graph, outer.inputs[1 - slot], "mul")
            if inner is None or inner.attrs.get("fused_activation_function", "NONE") != "NONE":
                continue
            gate = _split(graph, inner, 1.0 / 6.0)
            if gate is not None and _add3_relu6(graph, gate) == outer.inputs[slot]:
                x, parts = outer.inputs[slot], [inner, graph.producer(gate)]
                break
        if x is None:  # (x · relu6(x + 3)) · 1/6
            product = _split(graph, outer, 1.0 / 6.0)
            inner = _arith(graph, product, "mul") if product is not None else None
            if inner is not None and inner.attrs.get("fused_activation_function", "NONE") == "NONE":
                for slot in (0, 1):
                    if _add3_relu6(graph, inner.inputs[1 - slot]) == inner.inputs[slot]:
                        x, parts = inner.inputs[slot], [inner, graph.producer(inner.inputs[1 - slot])]
                        break
        if x is None:
            continue
        outer.op, outer.inputs, outer.attrs = "HARD_SWISH", [x], {}
        dead += parts  # type: ignore[arg-type]
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _negated(graph: Graph, name: str, activation: str = "NONE") -> tuple[str, Node] | None:
    """``(x, node)`` where ``name`` is ``MUL(x, -1)`` (a legalized Neg) with that fused
    activation, read only once."""
    node = _arith(graph, name, "mul")
    if node is None or node.attrs.get("fused_activation_function", "NONE") != activation:
        return None
    x = _split(graph, node, -1.0)
    return (x, node) if x is not None else None


def _activation(node: Node) -> str | None:
    r = row(node.op)
    return r.activation if r is not None else None


def fuse_prelu(graph: Graph, ctx: Context) -> bool:
    """``relu(x) + c · relu(-x)`` ⇒ ``PRELU(x, -c)``: Keras' PReLU (``-alpha`` times ``relu(-x)``),
    as TensorFlow's optimize pass fuses it (measured on TF 2.21: one PRELU v1 in post-training
    quantization). ``-x`` is a legalized Neg, ``MUL(x, -1)``, whose RELU rule 2 fused; ``c`` is a
    constant (its negation is alpha, exact in float32) or a negated value (alpha behind a
    FakeQuant: ``MUL(DQ(alpha), -1)``). Every intermediate has one reader."""
    dead: list[Node] = []
    for add in graph:
        r = row(add.op)
        if r is None or r.arith != "add" or add.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        found = next((m for m in (_prelu_halves(graph, add, slot) for slot in (0, 1)) if m is not None), None)
        if found is None:
            continue
        x, alpha, parts = found
        add.op, add.inputs, add.attrs = "PRELU", [x, alpha], {}
        dead += parts
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _prelu_halves(graph: Graph, add: Node, slot: int) -> tuple[str, str, list[Node]] | None:
    """``(x, alpha, nodes to remove)`` when ``add``'s operand ``slot`` is ``relu(x)`` and the other
    is ``c · relu(-x)``."""
    pos = graph.producer(add.inputs[slot])
    scaled = _arith(graph, add.inputs[1 - slot], "mul")
    if pos is None or _activation(pos) != PRELU_GATE or len(graph.consumers(pos.outputs[0])) != 1 \
            or scaled is None or scaled.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    x = pos.inputs[0]
    for k in (0, 1):
        neg = _negated(graph, scaled.inputs[k], PRELU_GATE)
        if neg is None or neg[0] != x:
            continue
        c = scaled.inputs[1 - k]
        value = graph.const(c)
        if value is not None and value.dtype == np.float32:
            return x, graph.add_const(f"{add.name}/alpha", np.negative(value)), [pos, scaled, neg[1]]
        minus = _negated(graph, c)
        if minus is not None:
            return x, minus[0], [pos, scaled, neg[1], minus[1]]
    return None


def fuse_reshapes_into_fully_connected(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE([..., K] → [N, K]) → FULLY_CONNECTED → RESHAPE([N, O] → [..., O])`` ⇒
    ``FULLY_CONNECTED(keep_num_dims=True)`` on the N-D tensor: a Keras Dense on a 3-D or 4-D
    input (``tensordot``), as TensorFlow fuses it (measured on TF 2.21: one FULLY_CONNECTED v5
    with keep_num_dims, its bias and ReLU fused). The leading dimensions must come back
    unchanged; every intermediate has one reader."""
    dead: list[Node] = []
    for fc in graph:
        r = row(fc.op)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None or fc.attrs.get("keep_num_dims"):
            continue
        before = graph.producer(fc.inputs[0])
        qdq: list[Node] = []
        if is_dequantize(before) and len(graph.consumers(fc.inputs[0])) == 1:
            # the FakeQuant of the flattened input (a Q/DQ pair between the RESHAPE and the FC)
            q = graph.producer(before.inputs[0])
            if is_quantize(q) and len(graph.consumers(q.outputs[0])) == 1 and not graph.is_const(q.inputs[0]):
                qdq, before = [q, before], graph.producer(q.inputs[0])
        after = _sole_reader(graph, fc)
        if before is None or after is None or not (row(before.op) and row(before.op).reshapes) \
                or not (row(after.op) and row(after.op).reshapes) or len(graph.consumers(before.outputs[0])) != 1 \
                or before.outputs[0] in graph.outputs:
            continue
        x_shape = graph.tensors[before.inputs[0]].shape
        y_shape = graph.tensors[after.outputs[0]].shape
        fc_shape = graph.tensors[fc.outputs[0]].shape
        if x_shape is None or y_shape is None or len(x_shape) < 3 or len(y_shape) != len(x_shape) \
                or tuple(y_shape[:-1]) != tuple(x_shape[:-1]) or y_shape[-1] != fc_shape[-1]:
            continue
        if qdq:  # the pair moves above the RESHAPE: it quantizes the N-D tensor
            qdq[0].inputs[0] = before.inputs[0]
            for n in qdq:
                graph.tensors[n.outputs[0]].shape = tuple(x_shape)
        else:
            fc.inputs[0] = before.inputs[0]
        fc.outputs = list(after.outputs)
        fc.attrs["keep_num_dims"] = True
        dead += [before, after]
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def fuse_pad_into_conv(graph: Graph, ctx: Context) -> bool:
    """``PAD(x, p) ──▶ CONV_2D | DEPTHWISE_CONV_2D (padding VALID)`` ⇒ the op with padding SAME
    on ``x``, when ``p`` pads only height and width, by exactly what SAME pads for that kernel,
    stride and dilation, and the op is the PAD's only reader (Keras' ZeroPadding2D before a
    stride-1 convolution, ResNet50V2, MobileNetV3, EfficientNet). Measured on TensorFlow 2.21:
    [1, 1] pads before a 3x3 stride-1 convolution fuse, [1, 1] before a stride-2 one on an even
    size stay a PAD (SAME pads [0, 1] there), [0, 1] before it fuse; pooling ops keep their PAD."""
    dead = []
    for pad in graph:
        r = row(pad.op)
        if r is None or not r.zero_pads or len(pad.inputs) != 2 or not graph.is_const(pad.inputs[1]):
            continue
        conv = _sole_reader(graph, pad)
        rc = row(conv.op) if conv is not None else None
        if rc is None or not rc.takes_same_padding or conv.inputs[0] != pad.outputs[0] \
                or conv.attrs.get("padding") != "VALID":
            continue
        shape, w_shape = graph.tensors[pad.inputs[0]].shape, graph.tensors[conv.inputs[1]].shape
        pads = np.asarray(graph.const(pad.inputs[1])).reshape(-1, 2)
        if shape is None or len(shape) != 4 or w_shape is None or len(w_shape) != 4 or pads.shape != (4, 2) \
                or pads[0].any() or pads[3].any():
            continue
        kh, kw = w_shape[1:3]  # [O, H, W, I] and [1, H, W, C*M]
        same = [window_padding(int(shape[1 + a]), int(k), int(conv.attrs.get(f"stride_{hw}", 1)),
                               int(conv.attrs.get(f"dilation_{hw}_factor", 1)), "SAME")[1:]
                for a, (k, hw) in enumerate(((kh, "h"), (kw, "w")))]
        if [tuple(int(v) for v in pads[1]), tuple(int(v) for v in pads[2])] != same:
            continue
        conv.inputs[0] = pad.inputs[0]
        conv.attrs["padding"] = "SAME"
        dead.append(pad)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _is_tail(tail: Sequence[int], full: Sequence[int]) -> bool:
    return len(tail) <= len(full) and tuple(tail) == tuple(full[len(full) - len(tail):])


def move_binary_before_reshape(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE(x) ──▶ ADD|SUB|MUL(·, c)`` ⇒ ``ADD|SUB|MUL(x, c) ──▶ RESHAPE``, when the
    constant's shape is a tail of both shapes and the reshape's output shape a tail of its
    input's (ranks ≤ 4, the RESHAPE read only by that op): TensorFlow's
    MoveBinaryOperatorBeforeReshape. A Keras Conv1D's bias (and a BatchNorm after it) follows
    the Squeeze of the 2-D convolution it is written as; moved before it, it fuses into the
    convolution (measured on TF 2.21: Conv1D + bias + BatchNorm is RESHAPE, CONV_2D, RESHAPE)."""
    moved = False
    for binary in list(graph):
        r = row(binary.op)
        if r is None or r.arith is None or binary.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        reshape = graph.producer(binary.inputs[0])
        c = graph.const(binary.inputs[1])
        if reshape is None or c is None or not (row(reshape.op) and row(reshape.op).reshapes) \
                or len(graph.consumers(reshape.outputs[0])) != 1 or reshape.outputs[0] in graph.outputs:
            continue
        x, mid = reshape.inputs[0], reshape.outputs[0]
        x_shape, mid_shape = graph.tensors[x].shape, graph.tensors[mid].shape
        if x_shape is None or mid_shape is None or graph.tensors[x].dtype != c.dtype.name \
                or max(len(x_shape), len(mid_shape), c.ndim) > 4 \
                or not (_is_tail(c.shape, mid_shape) and _is_tail(mid_shape, x_shape) and _is_tail(c.shape, x_shape)):
            continue
        out = binary.outputs[0]
        binary.inputs[0] = x
        binary.outputs = [mid]
        graph.tensors[mid].shape = tuple(x_shape)
        reshape.inputs[0] = mid
        reshape.outputs = [out]
        graph.move_after(reshape, binary)
        moved = True
    return moved


def _is_reshape(node: Node) -> bool:
    """A shape-only op whose target is its operand 1 (RESHAPE; not SQUEEZE, whose dims index its input)."""
    r = row(node.op)
    return r is not None and r.reshapes and len(node.inputs) == 2


def merge_reshapes(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE(RESHAPE(x))`` ⇒ ``RESHAPE(x)``; a RESHAPE that keeps its input's shape goes
    (TensorFlow's canonicalization: a Conv1D's Squeeze and the next Conv1D's ExpandDims are
    one RESHAPE in its file)."""
    changed = False
    dead = []
    for node in graph:
        r = row(node.op)
        if r is None or not r.reshapes:
            continue
        inner = graph.producer(node.inputs[0])
        if inner is not None and _is_reshape(inner) and _is_reshape(node):
            node.inputs[0] = inner.inputs[0]
            changed = True
        x, y = node.inputs[0], node.outputs[0]
        if y not in graph.outputs and graph.tensors[x].shape == graph.tensors[y].shape:
            graph.replace_all_uses(y, x)
            dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return changed or bool(dead)


def keep_reduced_dims(graph: Graph, ctx: Context) -> bool:
    """``MEAN|SUM|REDUCE_MAX(x, axes, keep_dims=False) ──▶ RESHAPE`` back to the kept-dims shape ⇒
    the reduction with ``keep_dims=True`` (a MEAN that then keeps its input's shape, over 1×1, is
    removed by fold's remove_identity_arith, which the fuse stage runs after this). TensorFlow
    canonicalizes both (measured on EfficientNetB0 at 32 px, whose squeeze-and-
    excite blocks are GlobalAveragePooling2D, Reshape: TF writes 12 MEAN and no RESHAPE where we
    wrote 17 and 16)."""
    dead = []
    for node in graph:
        if not _is_reshape(node):
            continue
        reduce = graph.producer(node.inputs[0])
        if reduce is None or reduce.attrs.get("keep_dims") is not False or len(reduce.inputs) != 2 \
                or len(graph.consumers(reduce.outputs[0])) != 1 or reduce.outputs[0] in graph.outputs:
            continue
        shape, axes = graph.tensors[reduce.inputs[0]].shape, graph.const(reduce.inputs[1])
        if shape is None or axes is None:
            continue
        reduced = {int(a) % len(shape) for a in np.asarray(axes).reshape(-1)}
        kept = tuple(1 if i in reduced else d for i, d in enumerate(shape))
        if tuple(graph.tensors[node.outputs[0]].shape or ()) != kept:
            continue
        reduce.attrs["keep_dims"] = True
        reduce.outputs = list(node.outputs)
        dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


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
