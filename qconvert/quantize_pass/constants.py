"""The ``quantize`` stage: quantize constants.

    const (float) ──▶ Q(params)        ⇒        const (int8 / int32, params)

Weights round half away from zero after dividing by the double scale and adding the
zero point; biases are int32 with zero point 0 (TensorFlow's UniformSupport.h). Under
post-training quantization (``legacy_float_scale``) symmetric weights and biases are
multiplied by a float32 inverse scale instead, as TensorFlow's ``QuantizeLegacy`` does. A bias that
does not fit int32 at its scale is an error naming it (TensorFlow saturates it silently:
measured on 2.21 with a FakeQuant'd dead weight channel); weights without FakeQuant never
get there, propagation enlarges their scale as TensorFlow does.

4-bit weights (a ``num_bits=4`` FakeQuant) are stored INT4, two per byte, where every
reader's kernel takes INT4 weights (the op table's ``int4_version``: CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED), as TensorFlow 2.21 writes them; with
``--int4-storage int8``, or for any other reader, the same values [-7, 7] are stored int8.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, Tensor
from qconvert.ir.digest import value_digest
from qconvert.ir.graph import dtype_name
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.ops import Rule, pool_fill, row
from qconvert.quant import (
    INT32_MAX,
    INT32_MIN,
    QuantParams,
    quantize_array,
    quantize_array_legacy,
    quantize_bias,
    quantize_bias_legacy,
    quantize_weights_16x8,
    round_half_away_array,
)


def quantize_constants(graph: Graph, ctx: Context) -> bool:
    dead = []
    sharable: dict[tuple, list[tuple[Tensor, np.ndarray]]] = {}  # (dtype, shape, parameters) → its constants
    for node in graph:
        if not is_quantize(node) or not graph.is_const(node.inputs[0]):
            continue
        out = graph.tensors[node.outputs[0]]
        value = graph.const(node.inputs[0])
        finite = bool(np.isfinite(value).all())  # once: a pass over every weight
        if not finite and _pool_fill(graph, node):
            # a max (min) pool's -inf (+inf) padding: the lowest (highest) integer, as the clamp makes it
            value = np.nan_to_num(value, posinf=np.finfo(np.float32).max, neginf=-np.finfo(np.float32).max)
            finite = bool(np.isfinite(value).all())
        if not finite:
            raise ConversionError(
                f"constant '{node.inputs[0]}' contains NaN or infinite values; it cannot be quantized "
                f"(check the weights and BatchNorm statistics of the frozen graph)"
            )
        params = out.quant
        if params.dtype == "int4" and not _int4_storage(graph, ctx, node):
            params = out.quant = dataclasses.replace(params, dtype="int8")
        bits16 = _read_in_16x8(graph, ctx, node)
        if bits16 and params.dtype == "int8" and not _read_as_weight(graph, node):
            # 16x8: an element-wise op's operands are all int16; a FakeQuant'd int8 constant keeps its
            # grid in int16 storage (the int16 kernels take zero point 0)
            if set(params.zero_point) != {0}:
                raise ConversionError(f"constant '{node.inputs[0]}': its FakeQuant range gives zero point "
                                      f"{params.zero_point[0]}, and the int16 kernels reading it take 0: train it "
                                      f"with a symmetric range")
            params = out.quant = dataclasses.replace(params, dtype="int16")
        if params.dtype in ("int32", "int64"):
            if params.dtype == "int32":
                _check_bias_fits(graph, node.inputs[0], value, params)
            bias = quantize_bias_legacy if ctx.legacy_float_scale else quantize_bias
            out.data = bias(value, params.scale if params.axis is not None else params.scale[0], params.dtype)
        else:
            if ctx.legacy_float_scale and bits16 and params.dtype == "int8" \
                    and (params.qmin, params.qmax) == (-127, 127) and set(params.zero_point) == {0}:
                out.data = quantize_weights_16x8(value, params)  # 16x8: TOCO's 127 / max|w| per channel
            else:
                out.data = (quantize_array_legacy if ctx.legacy_float_scale else quantize_array)(value, params)
        out.dtype = params.dtype if params.dtype == "int4" else dtype_name(out.data.dtype)
        if params.dtype not in ("int32", "int64"):  # a bias stays one per reader, as in TF (share.py)
            sharable.setdefault((out.dtype, out.shape, out.quant), []).append((out, value))
        dead.append(node)
    # equal float constants quantized alike are stored once (share.py): a constant's source is the digest
    # of its float value where another one has its dtype, shape and parameters; one alone has no twin
    # to be stored with, and no source (share.py leaves it as it is)
    for group in sharable.values():
        if len(group) > 1:
            for twins in _maybe_equal(group):
                for out, value in twins:
                    out.source = value_digest(value)
    graph.remove_nodes(dead)
    return bool(dead)


def _maybe_equal(group: list[tuple[Tensor, np.ndarray]]) -> list[list[tuple[Tensor, np.ndarray]]]:
    """The constants of ``group`` split by their dtype and about 64 values spread over them: equal
    constants fall in one part, so one alone in its part has no twin, and needs no digest (the
    digests of EfficientViT_M0's 64 near-zero weights whose scales coincide: 4.9 ms, of their 6 MB)."""
    parts: dict[tuple, list[tuple[Tensor, np.ndarray]]] = {}
    for out, value in group:
        flat = value.reshape(-1)
        parts.setdefault((value.dtype, flat[::max(1, flat.size // 64)].tobytes()), []).append((out, value))
    return [part for part in parts.values() if len(part) > 1]


def _readers(graph: Graph, quantize: Node) -> list[tuple[Node, list[int]]]:
    """The ops reading a quantized constant (through its DEQUANTIZE), each with the slots it reads
    it in."""
    out = []
    for dq in graph.consumers(quantize.outputs[0]):
        for r in (graph.consumers(dq.outputs[0]) if is_dequantize(dq) else [dq]):
            out.append((r, [k for k, i in enumerate(r.inputs) if i == dq.outputs[0]]))
    return out


def _pool_fill(graph: Graph, quantize: Node) -> bool:
    """Every op reading this constant reads it as a fill of ±inf that pads a max or min pool (PADV2)."""
    value = graph.const(quantize.inputs[0])
    readers = _readers(graph, quantize)
    return bool(readers) and all(slots == [row(r.op).fill_slot] and pool_fill(r.op, value)  # type: ignore[union-attr]
                                 for r, slots in readers)


def _weight_slots(op: str) -> tuple[int, ...]:
    r_ = row(op)
    if r_ is None:
        return ()
    return (r_.operand_slots[1],) if r_.rule is Rule.WEIGHTED else r_.weight_slots


def _read_in_16x8(graph: Graph, ctx: Context, quantize: Node) -> bool:
    """Whether this constant is read by 16x8 ops (the whole model's mode, or a ``--int16`` island)."""
    if ctx.activation_bits == 16:
        return True
    # no --int16 island: no reader to look at (EfficientViT_M0's 262 constants: 0.8 ms)
    return bool(ctx.int16_ops) and any(r in ctx.int16_ops for r, _ in _readers(graph, quantize))


def _read_as_weight(graph: Graph, quantize: Node) -> bool:
    """Whether every op reading this constant reads it in its weight slot (int8 in 16x8)."""
    return all(slots and set(slots) <= set(_weight_slots(r.op)) for r, slots in _readers(graph, quantize))


def _int4_storage(graph: Graph, ctx: Context, quantize: Node) -> bool:
    """Whether a 4-bit weight is stored INT4: the user wants it packed (the default) and every
    op reading it takes INT4 in its weight slot; otherwise a note says where it stays int8."""
    if ctx.options.precision.int4_storage == "int8":
        return False
    for r, slots in _readers(graph, quantize):
        r_ = row(r.op)
        if r_ is None or r_.int4_version is None or slots != [r_.operand_slots[1]]:
            q = graph.tensors[quantize.outputs[0]].quant
            ctx.note(f"weight '{quantize.inputs[0]}': 4-bit values stored as int8 in [{q.qmin}, {q.qmax}]: "
                     f"{r.op} '{r.name}' takes no INT4 operand")
            return False
    return True


def _check_bias_fits(graph: Graph, name: str, value: np.ndarray, params: QuantParams) -> None:
    b = np.asarray(value, np.float32).reshape(-1).astype(np.float64)
    # the common case at once: max|b| / min(scale) bounds every |b / scale| (division rounds monotonically)
    # (RepViT_M09's 127 biases: 2.2 -> 0.8 ms)
    if b.size and len(params.scale) in (1, b.size) and min(params.scale) > 0 \
            and float(np.abs(b).max()) / min(params.scale) < INT32_MAX - 1:
        return
    scales = np.broadcast_to(np.asarray(params.scale, np.float64), b.shape)
    with np.errstate(all="ignore"):
        q = round_half_away_array(b / scales)
    bad = np.nonzero((q < INT32_MIN) | (q > INT32_MAX))[0]
    if not bad.size:
        return
    k = int(bad[0])
    users = [r for dq in graph.consumers(graph.consumers(name)[0].outputs[0]) for r in graph.consumers(dq.outputs[0])] \
        if graph.consumers(name) else []
    op = next((f"{u.op} '{u.name}'" for u in users), "its op")
    raise ConversionError(
        f"bias '{name}' of {op} does not fit int32: channel {k} is {b[k]:g} at scale input×weight "
        f"{scales[k]:.3g}, i.e. {q[k]:.3g} ({bad.size} channel(s) overflow; TensorFlow saturates them silently). "
        f"The weight FakeQuant range of that channel is too narrow for its bias (a dead channel?): widen it, "
        f"zero that bias, or prune the channel, and export again"
    )
