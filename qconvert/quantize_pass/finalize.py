"""The ``quantize`` stage, last: op versions, tidy tensor names, and the requantization records.

1. Each op gets the version TensorFlow writes for its int8 form (the op table's; MUL is
   version 3 when its rescale factor in1·in2/out is at least 1), or its uint8 form under
   ``--inference-type uint8``.
2. Quantized tensors named ``x/q`` take back the name ``x`` where it is free.
3. For every op that rescales, the integer multiplier(s) and shift(s) TFLite's kernels
   compute in Prepare, with the activation clamp (``qconvert.ops.requant``), go to
   ``ctx.requant``; the converter stores them in the ``qconvert_requant`` metadata entry.
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.ops import int8_version, requant, row, uint8_version
from qconvert.quant.requant import Operand, operand
from qconvert.quantize_pass.graph_io import rename_tensors


def _operand(graph: Graph, name: str) -> Operand | None:
    """A tensor as the kernels' Prepare sees it: the float32 scales stored in the file."""
    if not name:
        return None
    t = graph.tensors[name]
    q = t.quant
    if q is None:
        return operand(name, (), (), t.shape or (), t.dtype)
    # operand()'s conversions where they cost: the scales are Python floats already (tolist), and zero points
    # all 0 (per-channel weights and biases) need no int() each (RepViT_M09, median of 7: assign_versions
    # 5.2 -> 3.2 ms, requant_records 17.1 -> 14.8)
    zps = tuple(q.zero_point)
    zps = (0,) * len(zps) if zps.count(0) == len(zps) else tuple(map(int, zps))
    return Operand(name, tuple(np.asarray(q.scale, dtype=np.float32).tolist()), zps, tuple(map(int, t.shape or ())),
                   t.dtype)


def _operands(graph: Graph, node: Node) -> tuple[list[Operand | None], Operand]:
    # an LSTM's intermediates follow its inputs, as the runtime reads them from the file
    names = [*node.inputs, *node.attrs.get("_intermediates", ())]
    return [_operand(graph, i) for i in names], _operand(graph, node.outputs[0])  # type: ignore[return-value]


def _is_float(graph: Graph, ctx: Context, node: Node) -> bool:
    return node in ctx.float_ops or any(t and graph.tensors[t].dtype == "float32" for t in node.inputs + node.outputs)


def assign_versions(graph: Graph, ctx: Context) -> bool:
    for node in graph.nodes:
        if is_quantize(node) or is_dequantize(node):
            node.attrs = {}  # bookkeeping (who set the parameters) is not a TFLite option
        if node in ctx.float_ops:
            node.version = 1
            continue
        if ctx.options.precision.inference_type == "uint8":
            node.version = uint8_version(node.op, node.attrs, [bool(t) for t in node.inputs])
            continue
        node.version = int8_version(node.op, lambda: _operands(graph, node), node.attrs)  # noqa: B023
    return True


def int16_options(graph: Graph, ctx: Context) -> bool:
    """16x8: the options TensorFlow sets where int16 changes what the kernel does (the op table's
    ``int16_options``: INT64 biases, ADD/SUB with general scales instead of powers of two)."""
    if ctx.activation_bits != 16 and not ctx.int16_ops:
        return False
    changed = False
    for node in graph.nodes:
        r = row(node.op)
        if r is not None and r.int16_options and node not in ctx.float_ops and ctx.bits(node) == 16:
            node.attrs.update(dict(r.int16_options))
            changed = True
    return changed


def tidy_names(graph: Graph, ctx: Context) -> bool:
    mapping: dict[str, str] = {}
    taken = set(graph.tensors)
    for name in graph.tensors:
        for suffix in ("/q", "/dq"):
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                if base not in taken:
                    mapping[name] = base
                    taken.add(base)
                break
    rename_tensors(graph, mapping)
    return bool(mapping)


def _borders_float(graph: Graph, ctx: Context, n: Node) -> bool:
    """A DEQUANTIZE into float ops only, or a QUANTIZE of a float op's result (a custom op's)."""
    if is_dequantize(n):
        readers = graph.consumers(n.outputs[0])
        return bool(readers) and all(r in ctx.float_ops for r in readers)
    return is_quantize(n) and graph.producer(n.inputs[0]) in ctx.float_ops


def _float_boundary(graph: Graph, node: Node, tensor: str) -> bool:
    """A float32 model input read by a QUANTIZE, or a float32 model output a DEQUANTIZE gives
    (``--input-type float32`` / ``--output-type float32``)."""
    return (is_quantize(node) and tensor in graph.inputs) or (is_dequantize(node) and tensor in graph.outputs)


def check_int8(graph: Graph, ctx: Context) -> bool:
    floats = [
        f"{n.op} '{n.name}' tensor '{t}'"
        for n in graph.nodes
        if not (n in ctx.float_ops or ctx.allow_float and (is_quantize(n) or is_dequantize(n))
                or _borders_float(graph, ctx, n))
        for t in n.inputs + n.outputs
        if t and graph.tensors[t].dtype == "float32" and not _float_boundary(graph, n, t)
    ]
    if floats:
        raise ConversionError(f"float tensors left after quantization: {'; '.join(floats[:10])}")
    return False


def requant_records(graph: Graph, ctx: Context) -> bool:
    records = []
    for index, node in enumerate(graph.nodes):
        if _is_float(graph, ctx, node):
            continue
        try:
            rec = requant(node.op, *_operands(graph, node), node.attrs, index)
        except ValueError as exc:  # TFLite's Prepare would reject these scales too
            raise ConversionError(
                f"{node.op} '{node.name}': its quantization parameters are outside what TFLite's kernels "
                f"accept ({exc}); check the FakeQuant ranges around it"
            ) from None
        if rec is not None:
            records.append(rec)
    ctx.requant = records
    return False


def write_absent_bias(graph: Graph, ctx: Context) -> bool:
    """An op whose row writes an absent bias (FULLY_CONNECTED from a MatMul without BiasAdd) gets the
    empty operand the writer stores as -1: TensorFlow's file has three operands, the bias -1, in
    int8, 16x8, uint8 and float files alike (measured on TF 2.21)."""
    changed = False
    for node in graph:
        r = row(node.op)
        if r is not None and r.absent_bias_written and len(node.inputs) == r.operand_slots[2]:
            node.inputs.append("")
            changed = True
    return changed
