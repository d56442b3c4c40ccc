"""The ``fuse`` stage: RESHAPEs out of the way of the fusions, as TensorFlow's optimize pass
and canonicalizer move them.

1. Chains of RESHAPEs merge first of all (see merge_reshapes), then ``RESHAPE → FULLY_CONNECTED →
   RESHAPE`` on an N-D tensor ⇒ ``FULLY_CONNECTED(keep_num_dims)`` (see
   fuse_reshapes_into_fully_connected), so the bias and ReLU fuse after it; last, a FULLY_CONNECTED on
   an N-D input read by a RESHAPE keeps its dimensions (see keep_fully_connected_dims_before_reshape).
2. ``RESHAPE ──▶ ADD|SUB|MUL(·, c)`` ⇒ the op before the RESHAPE, when c broadcasts the same
   on both shapes (see move_binary_before_reshape), so a Conv1D's bias and BatchNorm fuse;
   then chains of RESHAPEs merge (see merge_reshapes), and a reduction whose RESHAPE only puts
   back the reduced dimensions keeps them (see keep_reduced_dims).
   An activation after a RESHAPE or TRANSPOSE moves before it (see move_activation_before_reshape),
   so it fuses into the op before.
3. ``RESHAPE(s: [1, C] → [1, 1, 1, C]) ──▶ MUL|ADD|SUB(x, ·)`` ⇒ the op on ``s``, which broadcasts
   the same (see drop_reshape_before_broadcast): a squeeze-and-excite scale.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from qconvert.fuse.into_op import sole_reader
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.legalize.fake_quant_pairs import FROM_FAKE_QUANT_ARGS
from qconvert.ops import Rule, row


def fuse_reshapes_into_fully_connected(graph: Graph, ctx: Context) -> bool:
    """The RESHAPEs around a Dense on N-D (see _fuse_reshapes_around_fc), where its input's leading
    dimensions come back unchanged."""
    return _fuse_reshapes_around_fc(graph, retarget=False)


def retarget_reshape_before_fully_connected(graph: Graph, ctx: Context) -> bool:
    """The RESHAPEs around a Dense on N-D (see _fuse_reshapes_around_fc), also where they do not."""
    return _fuse_reshapes_around_fc(graph, retarget=True)


def _fuse_reshapes_around_fc(graph: Graph, retarget: bool) -> bool:
    """``RESHAPE([..., K] → [N, K]) → FULLY_CONNECTED → RESHAPE([N, O] → [..., O])`` ⇒
    ``FULLY_CONNECTED(keep_num_dims=True)`` on the N-D tensor: a Keras Dense on a 3-D or 4-D
    input (``tensordot``), as TensorFlow fuses it (measured on TF 2.21: one FULLY_CONNECTED v5
    with keep_num_dims, its bias and ReLU fused). Every intermediate has one reader.

    When the leading dimensions do not come back (``x: [16, 4, 1, 32] → [16, 128] → FC →
    [1, 4, 4, 128]``: TinyViT's window attention, whose output projection reads the windows and
    whose result is the window-reversed map), the first RESHAPE goes straight to the second's
    leading dimensions (``x → [1, 4, 4, 128]``) and the FULLY_CONNECTED keeps them: one RESHAPE
    where there were two, as TensorFlow writes it (measured on TF 2.21, also with O ≠ K and an
    FC that already keeps its dimensions; a second RESHAPE that changes the last dimension stays).
    That form (``retarget``) runs after the bias adds have fused, which sit between the FC and such
    a RESHAPE, after RESHAPE chains merged and after a RESHAPE that only puts leading 1s before a
    broadcasting ADD went (TensorFlow: ``[1, 320] → [1, 1, 1, 320]`` before a residual ADD leaves an
    FC on ``[1, 320]``; before a convolution it becomes the FC's ``[1, 1, 1, 320]``)."""
    dead: list[Node] = []
    changed = False
    for fc in graph:
        r = row(fc.op)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None:
            continue
        before = graph.producer(fc.inputs[0])
        qdq: list[Node] = []
        if is_dequantize(before) and len(graph.consumers(fc.inputs[0])) == 1:
            # the FakeQuant of the flattened input (a Q/DQ pair between the RESHAPE and the FC)
            q = graph.producer(before.inputs[0])
            if is_quantize(q) and len(graph.consumers(q.outputs[0])) == 1 and not graph.is_const(q.inputs[0]):
                qdq, before = [q, before], graph.producer(q.inputs[0])
        after = sole_reader(graph, fc)
        if before is None or after is None or not (row(before.op) and row(before.op).reshapes) \
                or not (row(after.op) and row(after.op).reshapes) or len(graph.consumers(before.outputs[0])) != 1 \
                or before.outputs[0] in graph.outputs:
            continue
        x_shape = graph.tensors[before.inputs[0]].shape
        y_shape = graph.tensors[after.outputs[0]].shape
        fc_shape = graph.tensors[fc.outputs[0]].shape
        mid_shape = graph.tensors[before.outputs[0]].shape
        if x_shape is None or y_shape is None or fc_shape is None or mid_shape is None or not x_shape \
                or len(y_shape) < 3 or y_shape[-1] != fc_shape[-1] or after.outputs[0] in graph.outputs:
            continue
        if tuple(y_shape[:-1]) != tuple(x_shape[:-1]):
            if not retarget or qdq or not _is_reshape(before) or not _is_reshape(after):
                continue
            # the first RESHAPE goes to the second's leading dimensions, the FC keeps them
            target = (*y_shape[:-1], mid_shape[-1])
            before.inputs[1] = graph.add_const(f"{before.name}/shape", np.asarray(target, np.int32))
            graph.tensors[before.outputs[0]].shape = target
            fc.outputs = list(after.outputs)
            fc.attrs["keep_num_dims"] = True
            dead.append(after)
            changed = True
            continue
        if len(x_shape) < 3 or fc.attrs.get("keep_num_dims"):
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
    return bool(dead) or changed


def keep_fully_connected_dims_before_reshape(graph: Graph, ctx: Context) -> bool:
    """``FULLY_CONNECTED(x: [..., K]) → [N, O] ──▶ RESHAPE`` ⇒ ``FULLY_CONNECTED(keep_num_dims) →
    [..., O] ──▶ RESHAPE`` when ``x`` has more than 2 dimensions and the RESHAPE is the result's only
    reader; the RESHAPE goes where it then keeps its input's shape. TensorFlow writes it so (measured
    on TF 2.21, post-training and QAT: ``x [1, 4, 4, 3] → RESHAPE [16, 3] → MatMul → RESHAPE [1, 16,
    5]`` is FULLY_CONNECTED ``[1, 4, 4, 3] → [1, 4, 4, 5]`` then RESHAPE ``[1, 16, 5]``, a Keras Dense
    on a flattened map; to ``[1, 4, 4, 5]`` no RESHAPE stays; a RESHAPE that only puts leading 1s
    before a broadcasting ADD went before, and the FULLY_CONNECTED keeps ``[16, 5]`` then). Runs
    after the bias and activation fused, once the RESHAPE before the FULLY_CONNECTED went
    (drop_reshape_before_fully_connected)."""
    dead: list[Node] = []
    changed = False
    for fc in graph:
        r = row(fc.op)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None or fc.attrs.get("keep_num_dims") \
                or fc.outputs[0] in graph.outputs:
            continue
        x_shape, out = graph.tensors[fc.inputs[0]].shape, graph.tensors[fc.outputs[0]].shape
        after = sole_reader(graph, fc)
        if x_shape is None or out is None or len(x_shape) < 3 or len(out) != 2 or after is None \
                or not _is_reshape(after):
            continue
        kept = (*x_shape[:-1], out[-1])
        fc.attrs["keep_num_dims"] = True
        changed = True
        y = after.outputs[0]
        if tuple(graph.tensors[y].shape or ()) == kept:
            fc.outputs = [y]
            dead.append(after)
        else:
            graph.tensors[fc.outputs[0]].shape = kept
    graph.remove_nodes(dead)
    graph.prune()
    return changed


def drop_reshape_before_fully_connected(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE(x) → FULLY_CONNECTED`` ⇒ ``FULLY_CONNECTED(x)`` when the RESHAPE keeps x's last
    dimension and the FULLY_CONNECTED (without keep_num_dims) gives a 2-D result: it flattens its
    input to [-1, K] anyway. TensorFlow's optimize pass does this in QAT, post-training and float
    files alike (measured on TF 2.21: Arm's DS-CNN, AVERAGE_POOL_2D [1,1,1,64] → Squeeze → FC is
    AVERAGE_POOL_2D → FC); a FakeQuant between them (a Q/DQ pair) keeps the RESHAPE, as in TF."""
    changed = False
    for fc in graph:
        r = row(fc.op)  # the weighted op that flattens its input (FULLY_CONNECTED)
        if r is None or r.rule is not Rule.WEIGHTED or r.weight_axis is not None or fc.attrs.get("keep_num_dims"):
            continue
        before = graph.producer(fc.inputs[0])
        if before is None or not _is_reshape(before):
            continue
        x, y = graph.tensors[before.inputs[0]].shape, graph.tensors[fc.inputs[0]].shape
        out = graph.tensors[fc.outputs[0]].shape
        if not x or not y or out is None or len(out) != 2 or x[-1] != y[-1]:
            continue
        fc.inputs[0] = before.inputs[0]
        changed = True
    if changed:
        graph.prune()
    return changed


def _is_tail(tail: Sequence[int], full: Sequence[int]) -> bool:
    return len(tail) <= len(full) and tuple(tail) == tuple(full[len(full) - len(tail):])


def _without_leading_ones(shape: Sequence[int]) -> tuple[int, ...]:
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def _after_fully_connected(graph: Graph, tensor: str) -> bool:
    """``tensor`` is a FULLY_CONNECTED's output (a weighted op without a channel axis)."""
    node = graph.producer(tensor)
    r = None if node is None else row(node.op)
    return r is not None and r.rule is Rule.WEIGHTED and r.weight_axis is None


def move_binary_before_reshape(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE(x) ──▶ ADD|SUB|MUL(·, c)`` ⇒ ``ADD|SUB|MUL(x, c) ──▶ RESHAPE`` (ranks ≤ 4, the
    RESHAPE read only by that op), as TensorFlow moves it (measured on TF 2.21):

    1. when the constant's shape is a tail of both shapes (a scalar always is). A Keras Conv1D's
       bias (and a BatchNorm after it) follows the Squeeze of the 2-D convolution it is written
       as; moved before it, it fuses into the convolution (Conv1D + bias + BatchNorm is RESHAPE,
       CONV_2D, RESHAPE); MultiHeadAttention's query scale 1/√d follows the RESHAPE to heads.
    2. when ``x`` is a FULLY_CONNECTED's output, the constant without its leading ones a tail of
       the RESHAPE's shape and as many values as ``x``'s last dimension: the constant flattened to
       1-D. An EinsumDense bias [H, D] after the RESHAPE [B, T, H·D] → [B, T, H, D] of its
       product, which then fuses into the FULLY_CONNECTED's bias (a constant of another size,
       or after another op, stays after the RESHAPE)."""
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
                or max(len(x_shape), len(mid_shape), c.ndim) > 4:
            continue
        if not (_is_tail(c.shape, mid_shape) and _is_tail(c.shape, x_shape)):
            if not (_after_fully_connected(graph, x) and _is_tail(_without_leading_ones(c.shape), mid_shape)
                    and len(x_shape) and x_shape[-1] == c.size):
                continue
            binary.inputs[1] = graph.add_const(f"{binary.inputs[1]}/flat", c.reshape(-1))
        _swap(graph, reshape, binary, x, mid, binary.outputs[0], x_shape)
        moved = True
    return moved


def move_activation_before_reshape(graph: Graph, ctx: Context) -> bool:
    """``MOVE(x) ──▶ ACT`` ⇒ ``ACT(x) ──▶ MOVE``, where MOVE only moves elements (RESHAPE, SQUEEZE,
    EXPAND_DIMS, TRANSPOSE, DEPTH_TO_SPACE: ``moves_elements``), ACT is element-wise on one operand
    (RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH: ``hoists``), the MOVE's output is read by the ACT only
    and is no graph output, and both are float. TensorFlow's optimize pass reorders them so (measured
    on TF 2.21, post-training: ``conv → RESHAPE|TRANSPOSE|DEPTH_TO_SPACE → RELU`` is ``CONV_2D(RELU) →
    RESHAPE``; ``SPLIT → RESHAPE → RELU`` is ``SPLIT → RELU → RESHAPE`` (EfficientViT_B0's linear
    attention on a 1x1 map); ``MEAN(keep_dims=False) → RESHAPE → RELU`` keeps the RESHAPE after the RELU,
    so the MEAN does not keep its dimensions; LOGISTIC and TANH too; LEAKY_RELU stays, and so does
    an ACT after a RESHAPE that has another reader; and a MOVE reading a ``FakeQuantWithMinMaxArgs``
    (QAT: on a graph input TF keeps ``FQ(args) → RESHAPE → RELU`` and moves the RELU after
    ``FQ(vars)``; after a conv, an ADD or a RELU6 the RESHAPE has moved above the FakeQuant already,
    legalize/fake_quant_pairs.py). Moved again across chains of such ops."""
    moved = False
    changed = True
    while changed:
        changed = False
        for act in list(graph):
            r = row(act.op)
            if r is None or not r.hoists or len(act.inputs) != 1:
                continue
            move = graph.producer(act.inputs[0])
            m = None if move is None else row(move.op)
            if m is None or not m.moves_elements or move.outputs[0] in graph.outputs \
                    or len(graph.consumers(move.outputs[0])) != 1 or len(move.outputs) != 1:
                continue
            x, mid, out = move.inputs[0], move.outputs[0], act.outputs[0]
            x_shape = graph.tensors[x].shape
            if x_shape is None or graph.tensors[x].dtype != graph.tensors[out].dtype:
                continue
            dq = graph.producer(x)
            if is_dequantize(dq) and dq.attrs.get(FROM_FAKE_QUANT_ARGS):  # type: ignore[union-attr]
                continue  # TF leaves FakeQuantWithMinMaxArgs → MOVE → ACT as it is
            _swap(graph, move, act, x, mid, out, x_shape)
            changed = moved = True
    return moved


def _swap(graph: Graph, move: Node, op: Node, x: str, mid: str, out: str, x_shape: Sequence[int]) -> None:
    """``MOVE(x) → mid → OP → out`` becomes ``OP(x) → mid → MOVE → out``: ``mid`` takes x's shape."""
    op.inputs[0] = x
    op.outputs = [mid]
    graph.tensors[mid].shape = tuple(x_shape)
    move.inputs[0] = mid
    move.outputs = [out]
    graph.move_after(move, op)


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


def drop_reshape_before_broadcast(graph: Graph, ctx: Context) -> bool:
    """``RESHAPE(s) ──▶ ADD|SUB|MUL(x, ·)`` ⇒ ``ADD|SUB|MUL(x, s)`` when the RESHAPE only puts
    leading 1s before ``s``'s shape (``[1, C] → [1, 1, 1, C]``), so that broadcasting ``s`` gives the
    op the same result, and every reader of the RESHAPE is such an op on two activations. TensorFlow
    drops it (measured on TF 2.21, post-training: a squeeze-and-excite ``x * reshape(sigmoid(·),
    [1, 1, 1, C])`` is LOGISTIC → MUL, on either side of the MUL, for ADD and SUB too, with two
    readers too; a RESHAPE that is also a graph output stays, and one before a MAXIMUM stays)."""
    dead = []
    for node in graph:
        if not _is_reshape(node) or node.outputs[0] in graph.outputs or graph.is_const(node.inputs[0]):
            continue
        s, y = node.inputs[0], node.outputs[0]
        s_shape, y_shape = graph.tensors[s].shape, graph.tensors[y].shape
        readers = graph.consumers(y)
        if s_shape is None or y_shape is None or len(y_shape) <= len(s_shape) or not readers \
                or not _is_tail(s_shape, y_shape) or any(d != 1 for d in y_shape[:len(y_shape) - len(s_shape)]):
            continue
        if all(_broadcasts_without(graph, reader, y, s_shape) for reader in readers):
            graph.replace_all_uses(y, s)
            dead.append(node)
    graph.remove_nodes(dead)
    graph.prune()
    return bool(dead)


def _broadcasts_without(graph: Graph, binary: Node, operand: str, shape: Sequence[int]) -> bool:
    """Whether ``binary`` is an ADD, SUB or MUL of two activations whose output keeps its shape when
    ``operand`` has ``shape`` instead."""
    r = row(binary.op)
    if r is None or r.arith is None or len(binary.inputs) != 2 or any(graph.is_const(t) for t in binary.inputs):
        return False
    shapes = [tuple(shape) if t == operand else graph.tensors[t].shape for t in binary.inputs]
    out = graph.tensors[binary.outputs[0]].shape
    if any(sh is None for sh in shapes) or out is None:
        return False
    try:
        return tuple(np.broadcast_shapes(*shapes)) == tuple(out)
    except ValueError:
        return False
