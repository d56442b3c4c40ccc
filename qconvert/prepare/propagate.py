"""The ``prepare`` stage: give every float value on the quantized path its int8 parameters.

After the ``legalize`` stage the parameters sit in Q → DQ pairs from FakeQuants and input ranges.
This pass adds the pairs TensorFlow's quantization driver adds, op by op, by the
op table's rule, until nothing changes:

1. WEIGHTED (conv, depthwise, FC): ``bias ──▶ op`` ⇒ ``bias ──▶ Q(in×w) ──▶ DQ ──▶ op``
   (scale = input scale × weight scale, as doubles; zero point 0; int32).
   A weight with no FakeQuant gets symmetric narrow-range parameters from its values (per output
   channel; one scale under --per-tensor-weights).
2. FIXED (softmax, logistic, tanh): ``op ──▶ y`` ⇒ ``op ──▶ Q(fixed) ──▶ DQ ──▶ y``;
   a FakeQuant after it with another range becomes a requantize.
3. SAME_SCALE (pools, concat, reshape, squeeze, pad): one set of parameters for all
   operands and the result, chosen as TensorFlow's driver chooses it (an immutable
   lone operand, where integer operands such as RESIZE's size count, else an
   immutable lone result, else the first immutable state, else a propagated one).
   Operands or results that disagree get a requantize pair.
4. FREE (add, sub, mul, mean, relu, prelu): a constant operand with no FakeQuant gets
   asymmetric parameters from its values; one the row lists as a weight (PRELU's alpha)
   symmetric narrow-range ones.
5. A recurrent op with state operands (UNIDIRECTIONAL_SEQUENCE_LSTM): once its input and output
   have parameters, its row's ``state_params`` gives its weights and biases (Q → DQ pairs), its
   VARIABLE states (their type and parameters, set on the tensors) and its intermediates (new
   tensors, ``attrs["_intermediates"]``), from the ranges calibration recorded for the states.

Immutable parameters are those from FakeQuants, input ranges and fixed-output ops.
The order of the work list follows TensorFlow's driver (see propagate_quant_params).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qconvert import quant as qm
from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, QuantParams, Tensor
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import (
    dequantized_from,
    insert_qdq_after,
    insert_qdq_on_edge,
    origin_of,
    params_in,
    params_out,
)
from qconvert.ops import Rule, float_operands, row
from qconvert.ops.recipes_seq import LSTM_INTERMEDIATE_NAMES
from qconvert.quant import bias_params


def _signed_params(lo: float, hi: float, narrow: bool, axis: int | None = None) -> QuantParams:
    return qm.value_range_params(lo, hi, narrow_range=narrow, axis=axis)


def weight_params(value: np.ndarray, axis: int | None, num_bits: int = 8) -> QuantParams:
    """Symmetric parameters for a weight without FakeQuant (per channel along ``axis``): int8
    [-127, 127], or INT4 [-7, 7] with ``num_bits=4`` (scale max|w|/7)."""
    # max|w| in the weight's own float type, exact, widened after the reduction, over the other axes in
    # place (a float64 copy, then a moved copy of a depthwise weight: RepViT_M09's 127 weights 12.2 -> 10.1 ms)
    v = np.asarray(value)
    if v.dtype.kind != "f":
        v = v.astype(np.float64)
    if axis is None:
        m = float(np.abs(v).max()) if v.size else 0.0
        return qm.value_range_params(-m, m, narrow_range=True, num_bits=num_bits)
    others = tuple(a for a in range(v.ndim) if a != axis % v.ndim)
    ms = np.abs(v).max(axis=others).astype(np.float64) if v.size else np.zeros(v.shape[axis])
    return qm.symmetric_params_per_channel(ms, axis=axis, num_bits=num_bits)


def _toco_16x8(ctx: Context, node: Node) -> bool:
    """TensorFlow 2.21 quantizes the weights of a 16x8 post-training conversion with its older
    quantizer (TOCO's ``quantize_model``), whose scales and bias adjustment differ from the int8
    quantizer's on tiny and dead channels."""
    return ctx.bits(node) == 16 and ctx.legacy_float_scale


def _weight_bits(node: Node, ctx: Context) -> int:
    """4 for ``--weights int4`` on an op whose INT4 version LiteRT's reference kernels run (CONV_2D,
    FULLY_CONNECTED; DEPTHWISE_CONV_2D v7 only in its default kernels, so depthwise stays int8)."""
    if ctx.options.precision.weights != "int4":
        return 8
    r = row(node.op)
    if r is not None and r.int4_in_reference:
        return 4
    ctx.note(f"{node.op} '{node.name}': int8 weights under --weights int4 (LiteRT's reference kernels have no "
             f"INT4-weight {node.op})")
    return 8


def _weight_axis(node: Node, ctx: Context) -> int | None:
    """The axis of a weight's scales when they come from its values: per output channel,
    FULLY_CONNECTED too (TF 2.21 does so for weights without FakeQuant); None (one scale) under
    ``--per-tensor-weights`` (TensorFlow's ``_experimental_disable_per_channel``)."""
    r = row(node.op)
    if not ctx.options.precision.per_tensor_weights:
        return 0 if r.weight_axis is None else r.weight_axis  # type: ignore[union-attr]
    if ctx.bits(node) == 16 and not r.per_tensor16:  # type: ignore[union-attr]
        raise ConversionError(
            f"{node.op} '{node.name}': --per-tensor-weights with int16 activations: TensorFlow 2.21's 16x8 quantizer "
            f"fails on per-tensor {node.op} weights (it takes them per channel only), so there is no file to match; "
            f"drop --per-tensor-weights or use int8 activations")
    return None


def _refuse_per_channel(graph: Graph, node: Node, w: str, why: str, fix: str) -> None:
    """A weight whose parameters are per channel (a per-channel FakeQuant, or a BatchNorm folded
    into a per-tensor one) where the file must have one scale: its integers are the trained grid,
    one scale per channel, so this is an error that says ``why`` and ``fix``."""
    pair = dequantized_from(graph, w)
    if pair is None or not graph.tensors[pair[0].outputs[0]].quant.per_channel:
        return
    raise ConversionError(
        f"{node.op} '{node.name}': weight '{pair[0].inputs[0]}' is quantized per channel by its FakeQuant (a "
        f"per-channel FakeQuant, or a BatchNorm folded into a per-tensor one), {why}; train with per-tensor weight "
        f"FakeQuants (tfmot: per_axis=False, TF1: fake_quant_with_min_max_vars) or {fix}")


def _uint8_weights(graph: Graph, node: Node, w: str) -> None:
    """``--inference-type uint8``: weights without FakeQuant get TensorFlow's uint8 parameters,
    per tensor over [min(w, 0), max(w, 0)] on the narrow grid [1, 255], asymmetric, whatever
    ``--per-tensor-weights`` says (measured on TF 2.21); per-channel weight FakeQuants are an
    error: LiteRT's uint8 CONV_2D refuses per-channel weights at Prepare (TensorFlow 2.21 writes
    them anyway)."""
    if dequantized_from(graph, w) is None and graph.is_const(w):
        v = graph.const(w)
        lo = min(0.0, float(v.min())) if v.size else 0.0
        hi = max(0.0, float(v.max())) if v.size else 0.0
        insert_qdq_on_edge(graph, node, row(node.op).operand_slots[1],  # type: ignore[union-attr]
                           qm.fake_quant_params(lo, hi, 8, narrow_range=True), Origin.WEIGHT_VALUES)
        return
    _refuse_per_channel(graph, node, w, f"and LiteRT cannot run a uint8 {node.op} with per-channel weights "
                        f"(TensorFlow writes it; LiteRT refuses it at Prepare)", "use --inference-type int8")


Touched = list[Node]


def _producers(graph: Graph, tensor: str) -> Touched:
    p = graph.producer(tensor)
    return [p] if p is not None else []


def _const_operand(graph: Graph, node: Node, slot: int, legacy_float_scale: bool = False, bits: int = 8) -> bool:
    name = node.inputs[slot]
    if not graph.is_const(name) or graph.tensors[name].dtype != "float32":
        return False
    value = graph.const(name)
    lo = min(0.0, float(value.min())) if value.size else 0.0
    hi = max(0.0, float(value.max())) if value.size else 0.0
    if bits == 16:  # an operand of an int16 op is int16 too, symmetric
        insert_qdq_on_edge(graph, node, slot, qm.calibrated_range_params(lo, hi, legacy_float_scale, 16),
                           Origin.WEIGHT)
        return True
    # post-training quantization: GetUniformQuantizedTypeForWeight with DownCastScale (float32 scale)
    params = qm.value_range_params_legacy(lo, hi) if legacy_float_scale else _signed_params(lo, hi, False)
    insert_qdq_on_edge(graph, node, slot, params, Origin.WEIGHT)
    return True


def _weighted(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    r = row(node.op)
    xs, ws, bs = r.operand_slots  # type: ignore[union-attr]
    w = node.inputs[ws]
    if ctx.options.precision.inference_type == "uint8":
        _uint8_weights(graph, node, w)
        w = node.inputs[ws]
    if params_in(graph, w) is None and graph.is_const(w):
        bits, axis = _weight_bits(node, ctx), _weight_axis(node, ctx)
        params = qm.weight_params_16x8(graph.const(w), axis) if bits == 8 and _toco_16x8(ctx, node) else \
            weight_params(graph.const(w), axis, bits)
        insert_qdq_on_edge(graph, node, ws, params, Origin.WEIGHT_VALUES)
    elif ctx.options.precision.per_tensor_weights:
        _refuse_per_channel(graph, node, w, "which --per-tensor-weights cannot change without leaving the trained "
                            "grid (TensorFlow ignores the option on QAT graphs)", "drop --per-tensor-weights")
    b = node.inputs[bs] if bs < len(node.inputs) else None  # TRANSPOSE_CONV may have none
    if b is None or params_in(graph, b) is not None or not graph.is_const(b):
        return []
    px, pw = params_in(graph, node.inputs[xs]), params_in(graph, node.inputs[ws])
    if px is None or pw is None:
        return None  # the input's parameters are not known yet: retry when they are
    bias = bias_params(px[0], pw[0], ctx.legacy_float_scale)
    wq = dequantized_from(graph, node.inputs[ws])
    if wq is not None and graph.is_const(wq[0].inputs[0]):
        from_values = origin_of(wq[0]) is Origin.WEIGHT_VALUES
        # a FakeQuant'd kernel keeps its grid: only an all-zero channel may change scale (its
        # integers stay 0), which TensorFlow does not do (it saturates the bias silently)
        free = None if from_values else _zero_channels(graph.const(wq[0].inputs[0]), pw[0])
        if bias.dtype == "int64":  # 16x8: TOCO's rule, on weights whose scales are TOCO's
            new_w = qm.adjust_weights_for_bias_16x8(graph.const(b), px[0].scale[0], pw[0]) if from_values else None
            adjusted = None if new_w is None else (bias_params(px[0], new_w, ctx.legacy_float_scale), new_w)
        else:
            adjusted = _bias_fit(graph.const(b), bias, px[0], pw[0], ctx.legacy_float_scale, free)
        if adjusted is not None:
            bias, new_w = adjusted
            graph.tensors[wq[0].outputs[0]].quant = new_w
            n = sum(a != c for a, c in zip(new_w.scale, pw[0].scale))
            limit = "reach 2^30 (TensorFlow's 16x8 limit)" if bias.dtype == "int64" else "overflow int32"
            ctx.note(f"{node.op} '{node.name}': bias '{b}' would {limit} at scale input×weight; the weight "
                     f"scale of {n} channel(s) is enlarged so it fits, as TensorFlow does" if from_values else
                     f"{node.op} '{node.name}': {n} weight channel(s) are all zero and their bias overflows int32 at "
                     f"the FakeQuant's scale: their weight scale is enlarged so the bias is exact (the integer "
                     f"weights stay 0). TensorFlow saturates such a bias silently; the result differs from its "
                     f"file and follows the training graph")
    insert_qdq_on_edge(graph, node, bs, bias, Origin.BIAS)
    return []


def _zero_channels(w: np.ndarray, params: QuantParams) -> list[bool]:
    """Per channel of ``params`` (one entry per-tensor): are all the weights zero?"""
    v = np.asarray(w)
    if params.axis is None:
        return [not np.any(v)]
    moved = np.moveaxis(v, params.axis, 0).reshape(v.shape[params.axis], -1)
    return (~np.any(moved, axis=1)).tolist()


BIAS_MAX = (2**31 - 1) // 2  # TensorFlow keeps |bias| / scale within INT32_MAX / 2 (room for the accumulator)


def _bias_fit(value: np.ndarray, bias: QuantParams, x: QuantParams, w: QuantParams,
              legacy_float_scale: bool, free: list[bool] | None = None) -> tuple[QuantParams, QuantParams] | None:
    """TensorFlow's quantization driver (``SetBiasParamsWithAdjustments``) for weights whose
    parameters come from their values: where ``|bias| / (in×w scale)`` exceeds INT32_MAX / 2,
    the bias scale becomes ``|bias| / (INT32_MAX / 2)`` and the weight scale that over the input
    scale. Per channel: each channel whose ratio is > the limit; per tensor: all, when the
    largest |bias| reaches it. Returns (bias, weight) parameters, or None when nothing changes.
    Post-training quantization keeps scales in float32 (``legacy_float_scale``). ``free``: the
    channels that may change (None: all)."""
    mags = np.abs(np.asarray(value, np.float32).reshape(-1)).astype(np.float64)
    in_scale = x.scale[0]
    rounded = (lambda s: float(np.float32(s))) if legacy_float_scale else (lambda s: s)
    if bias.axis is None:
        half = float(mags.max()) if mags.size else 0.0
        if half / bias.scale[0] < BIAS_MAX or (free is not None and not all(free)):
            return None
        new_b = half / BIAS_MAX
        return (replace(bias, scale=(rounded(new_b),)),
                replace(w, scale=(rounded(new_b / in_scale),) * len(w.scale)))
    b_scales, w_scales = list(bias.scale), list(w.scale)
    changed = False
    over = range(len(mags))
    if len(mags) == len(b_scales):  # the channels to look at, found at once (a Python loop over every
        over = np.flatnonzero(mags / np.asarray(b_scales) > BIAS_MAX).tolist()  # channel: 6.0 against 0.9 ms, RepViT_M09)
    for i in over:
        m = mags[i]
        if m / b_scales[i] > BIAS_MAX and (free is None or (free[i] if len(free) > 1 else free[0])):
            b_scales[i] = m / BIAS_MAX
            w_scales[i] = rounded(b_scales[i] / in_scale)
            b_scales[i] = rounded(b_scales[i])
            changed = True
    if not changed:
        return None
    return replace(bias, scale=tuple(b_scales)), replace(w, scale=tuple(w_scales))


def _fixed(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    r = row(node.op)
    if ctx.bits(node) == 16:
        scale, zp = r.fixed16  # type: ignore[union-attr,misc]
        fixed = QuantParams((scale,), (zp,), qmin=-32768, qmax=32767, dtype="int16")
    else:
        scale, zp = r.fixed  # type: ignore[union-attr,misc]
        fixed = QuantParams((scale,), (zp,))
    out = node.outputs[0]
    current = params_out(graph, out)
    if current is not None and current[0].same_as(fixed):
        return []
    readers = list(graph.consumers(out))
    insert_qdq_after(graph, out, fixed, Origin.FIXED)
    return readers if current is None else []


def _choose_same_scale(operands: list, results: list) -> QuantParams | None:
    """TensorFlow's choice of shared parameters for a same-scale op (quantization_driver.cc)."""
    imm_ops = [s[0] for s in operands if s is not None and s[1]]
    mut_ops = [s[0] for s in operands if s is not None and not s[1]]
    if len(operands) == 1 and imm_ops:
        return imm_ops[0]
    imm_res = [s[0] for s in results if s is not None and s[1]]
    mut_res = [s[0] for s in results if s is not None and not s[1]]
    if len(results) == 1 and imm_res:
        return imm_res[0]
    if imm_ops or imm_res:
        return (imm_ops + imm_res)[0]
    if len(operands) == 1 and mut_ops:
        return mut_ops[0]
    if len(results) == 1 and mut_res:
        return mut_res[0]
    if mut_ops or mut_res:
        return (mut_ops + mut_res)[0]
    return None


def _split_parts(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    """A slice of a Split / SplitV / Unpack (the importer's ``_group``; the quantize stage regroups
    them) decided as TensorFlow's driver decides the one SPLIT / SPLIT_V / UNPACK op: once, from its
    data operand, its other (integer) operands and all its results together, every result given
    the chosen parameters. A reader that wants other parameters later requantizes on its own edge,
    so each piece is requantized on its own, after the SPLIT (measured on TF 2.21: a piece read
    by a convolution and by a concatenation with a wider range is one SPLIT, then a QUANTIZE read
    by the concatenation only; the whole input requantized before slicing was ours)."""
    group = node.attrs["_group"]
    parts = [n for n in graph.consumers(node.inputs[0]) if n.attrs.get("_group") == group]
    x = node.inputs[0]
    operand = params_in(graph, x)
    results = [params_out(graph, p.outputs[0]) for p in parts]
    results += [None] * (len(node.attrs["_sizes"]) - len(parts))  # outputs nobody reads
    chosen = _choose_same_scale([operand] + [None] * (len(node.attrs["_operands"]) - 1), results)
    if chosen is None:
        return None
    touched: Touched = []
    if operand is None:
        touched += _producers(graph, x)
        insert_qdq_after(graph, x, chosen, Origin.PROPAGATED)
    elif not operand[0].same_as(chosen):
        for part in parts:
            insert_qdq_on_edge(graph, part, 0, chosen, Origin.REQUANTIZE)
    for part, result in zip(parts, results):
        if result is None or not result[0].same_as(chosen):
            touched += _readers(graph, part.outputs[0])
            insert_qdq_after(graph, part.outputs[0], chosen, Origin.PROPAGATED)
    return touched


def _same_scale(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    if "_group" in node.attrs and ctx.bits(node) == 8:
        return _split_parts(graph, node, ctx)
    slots = float_operands(node.op, node.inputs)
    operands = [params_in(graph, node.inputs[i]) for i in slots]
    out = node.outputs[0]
    result = params_out(graph, out)
    # The driver counts every operand, the integer ones too (RESIZE's size, PAD's
    # paddings, RESHAPE's shape): for those ops "a lone immutable operand" never
    # applies and an immutable result wins (measured: conv → FakeQuant A → resize →
    # FakeQuant B gives conv → B → resize in TF, where a max pool keeps A + requantize).
    padded = operands + [None] * (len(node.inputs) - len(slots))
    chosen = _choose_same_scale(padded, [result])
    if ctx.bits(node) == 16 and result is not None and result[1] and len(slots) > 1:
        # 16x8: a concat keeps its inputs' ranges and requantizes each that differs to its own
        # (measured on TF 2.21: one QUANTIZE per differing input, read by the concat only). An
        # input whose range is still to come (a pool's, from its own input) is waited for, not
        # given the concat's: its other readers read it at its own scale (DenseNet121)
        if any(state is None and not graph.is_const(node.inputs[i]) for i, state in zip(slots, operands)):
            return None
        chosen = result[0]
    if ctx.options.precision.inference_type == "uint8" and row(node.op).uint8_rescales_inputs \
            and result is not None and result[1] and len(slots) > 1:  # type: ignore[union-attr]
        # uint8: TensorFlow's CONCATENATION keeps each input's parameters (its uint8 kernel rescales
        # them) and takes its own FakeQuant's; an input still to come is waited for
        if any(state is None and not graph.is_const(node.inputs[i]) for i, state in zip(slots, operands)):
            return None
        for slot, state in zip(slots, operands):
            if state is None:
                insert_qdq_on_edge(graph, node, slot, result[0], Origin.PROPAGATED)
        return []
    if chosen is None:
        return None
    touched: Touched = []
    for slot, state in zip(slots, operands):
        name = node.inputs[slot]
        if state is None:
            if graph.is_const(name):
                insert_qdq_on_edge(graph, node, slot, chosen, Origin.PROPAGATED)
            else:
                touched += _producers(graph, name)
                insert_qdq_after(graph, name, chosen, Origin.PROPAGATED)
        elif not state[0].same_as(chosen):
            insert_qdq_on_edge(graph, node, slot, chosen, Origin.REQUANTIZE)
    if result is None or not result[0].same_as(chosen):
        # readers retry (an affine one waiting for its input's parameters; TensorFlow's driver
        # does not revisit them after a requantize and leaves them in float32)
        touched += _readers(graph, out)
        insert_qdq_after(graph, out, chosen, Origin.PROPAGATED)
    return touched


def _readers(graph: Graph, tensor: str) -> Touched:
    """The ops reading ``tensor``, directly or through the Q → DQ pairs on it."""
    out: Touched = []
    for node in graph.consumers(tensor):
        if origin_of(node) is None:
            out.append(node)
            continue
        for dq in graph.consumers(node.outputs[0]):
            out += graph.consumers(dq.outputs[0])
    return out


def _free(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    weights = row(node.op).weight_slots  # type: ignore[union-attr]
    for slot in float_operands(node.op, node.inputs):
        name = node.inputs[slot]
        if params_in(graph, name) is not None:
            continue
        if slot in weights and graph.is_const(name):  # PRELU's alpha: symmetric, per tensor
            insert_qdq_on_edge(graph, node, slot, weight_params(graph.const(name), None), Origin.WEIGHT)
        else:
            _const_operand(graph, node, slot, ctx.legacy_float_scale, ctx.bits(node))
    return []


def _stateful(graph: Graph, node: Node, ctx: Context) -> Touched | None:
    r = row(node.op)
    px, py = params_in(graph, node.inputs[0]), params_out(graph, node.outputs[0])
    if px is None or py is None:
        return None  # retried when a neighbour gets parameters
    ranges = node.attrs.get("_state_ranges", {})
    if any(s not in ranges for s in r.state_slots) or "output" not in ranges:  # type: ignore[union-attr]
        raise ConversionError(f"{node.op} '{node.name}': its states have no recorded range; an LSTM is "
                              "quantized after calibration (--calibration-data)")
    weights = {s: graph.const(n) for s, n in enumerate(node.inputs) if n and s > 0 and graph.is_const(n)}
    consts, states, intermediates = r.state_params(  # type: ignore[union-attr]
        px[0], py[0], weights, ranges, ctx.legacy_float_scale)
    for slot, params in consts.items():
        insert_qdq_on_edge(graph, node, slot, params, Origin.BIAS if params.dtype == "int32" else Origin.WEIGHT_VALUES)
    for slot, params in states.items():
        t = graph.tensors[node.inputs[slot]]
        t.dtype, t.quant = params.dtype, params
        if params.dtype == "int16" and params.scale[0] < 2.0 ** -15:
            ctx.note(f"{node.op} '{node.name}': cell state scale 2^{int(np.log2(params.scale[0]))} (its calibrated "
                     f"range stays within ±0.5), as TensorFlow writes it; LiteRT's integer LSTM computes wrong "
                     f"values below 2^-15 (TFLite Micro's does not): see `qconvert check`")
    names = []
    for base, params in zip(LSTM_INTERMEDIATE_NAMES, intermediates):
        name = graph.unique_name(base)
        graph.add_tensor(Tensor(name, "float32" if params is None else params.dtype, (0,), None, params))
        names.append(name)
    node.attrs["_intermediates"] = names
    node.attrs.pop("_state_ranges", None)
    return []


_HANDLERS = {Rule.WEIGHTED: _weighted, Rule.FIXED: _fixed, Rule.SAME_SCALE: _same_scale, Rule.FREE: _free}


def propagate_quant_params(graph: Graph, ctx: Context) -> bool:
    """Run the rules over a work list the way TensorFlow's driver does.

    The list starts with every op in program order and is consumed from the end
    (last op first). An op whose rule cannot decide yet (no parameters around it)
    is retried when a neighbour gets parameters; an op that has decided is not
    revisited. Where several choices are possible (a concat of two pools without
    a FakeQuant after it) the order decides, so we keep TensorFlow's order.
    """
    def handler(node: Node):  # type: ignore[no-untyped-def]
        r = row(node.op)
        if r is not None and r.state_params is not None:
            return _stateful
        return _HANDLERS.get(r.rule) if r is not None else None

    before = len(graph.tensors)
    work = [n for n in graph.nodes if handler(n) is not None]
    done: set[int] = set()
    while work:
        node = work.pop()
        if id(node) in done:
            continue
        touched = handler(node)(graph, node, ctx)
        if touched is None:
            continue
        done.add(id(node))
        work.extend(n for n in touched if handler(n) is not None)
    return len(graph.tensors) != before  # every added Q/DQ pair adds tensors


def bypass_requantize_for_weighted(graph: Graph, ctx: Context) -> bool:
    """``x ─Q(a)→DQ─▶ Q(b)→DQ ─▶ conv`` ⇒ ``x ─Q(a)→DQ─▶ conv`` when ``b`` was only propagated
    there (not a FakeQuant's, not calibrated), and the conv's bias takes input ``a`` × weight.

    The case: a max pool read by an average pool whose FakeQuant range differs and by
    convolutions (InceptionV3's mixed blocks). The average pool needs its own range on its
    input, so the driver requantizes the pool's output to it, and every reader of that value
    then sees the requantized copy. TensorFlow's driver does the same and leaves those
    convolutions in float32 (measured on TF 2.21, tfmot InceptionV3: 3 convolutions and a
    DEQUANTIZE): their bias was given the requantized scale, their input is not. The training
    graph has no FakeQuant there: the convolutions read the pool's own values. So an affine
    reader reads them at ``a``, int8, without the second rounding."""
    changed = False
    for node in list(graph.nodes):
        r = row(node.op)
        if r is None or r.rule is not Rule.WEIGHTED:
            continue
        xs, _, bs = r.operand_slots
        pair = dequantized_from(graph, node.inputs[xs])
        if pair is None or origin_of(pair[0]) not in (Origin.PROPAGATED, Origin.REQUANTIZE):
            continue
        upstream = params_in(graph, pair[0].inputs[0])
        if upstream is None or bs >= len(node.inputs):
            continue
        bias_pair = dequantized_from(graph, node.inputs[bs])
        if bias_pair is None or origin_of(bias_pair[0]) is not Origin.BIAS:
            continue
        node.inputs[xs] = pair[0].inputs[0]
        node.inputs[bs] = bias_pair[0].inputs[0]
        _weighted(graph, node, ctx)
        changed = True
    if changed:
        graph.prune()
    return changed
