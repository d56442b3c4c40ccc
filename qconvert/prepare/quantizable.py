"""The ``prepare`` stage, last: every op on the path must be fully quantizable; say which are not.

With ``--allow-float`` the offending ops are put in ``ctx.float_ops`` instead, and reported.

Requires: after propagation, every float operand of a compute op comes from a
DEQUANTIZE and every result is read only by QUANTIZE nodes. Anything else would
leave a float op in the model, which TensorFlow's converter does silently and we
refuse to do. Every offending tensor is listed once, in one message, with the op
that produces it, the ops that read it, and where to add a FakeQuant.
"""

from __future__ import annotations

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize, is_quantize, params_in
from qconvert.ops import Rule, is_custom, row


def check_quantizable(graph: Graph, ctx: Context) -> bool:
    missing: dict[str, list[Node]] = {}  # tensor -> readers that need it quantized
    problems: list[str] = []
    culprits: list[Node] = []
    for node in graph.nodes:
        r = row(node.op)
        if is_custom(node.op):
            _custom_stays_float(ctx, node)
            continue
        if r is None:
            problems.append(f"node '{node.name}' has op {node.op}, which cannot be quantized")
            continue
        if ctx.activation_bits == 16 and not r.int16:
            problems.append(f"{node.op} '{node.name}' has no 16x8 form (TensorFlow 2.21 refuses it, or LiteRT has no "
                            f"int16 kernel for it): convert with --activations int8")
            culprits.append(node)
            continue
        if r.rule is Rule.QUANT:
            continue
        for name in node.inputs:
            if not name:  # an absent optional operand
                continue
            prod = graph.producer(name)
            if graph.tensors[name].dtype == "float32" and not is_dequantize(prod):
                missing.setdefault(name, []).append(node)
        # (the uint8 kernels take any weight zero point: --inference-type uint8)
        if r.symmetric_weights and len(node.inputs) > 1 and ctx.options.precision.inference_type != "uint8":
            params = params_in(graph, node.inputs[1])
            if params is not None and any(params[0].zero_point):
                culprits.append(node)
                problems.append(
                    f"the weights of {node.op} '{node.name}' get zero point {sorted(set(params[0].zero_point))} "
                    f"from their FakeQuant range, and TFLite's int8 convolution kernels only run zero point 0 "
                    f"(conv.cc); use narrow_range=True with a symmetric range [-m, m] on weight FakeQuants"
                )
        for name in node.outputs:
            readers = graph.consumers(name)
            if graph.tensors[name].dtype != "float32":  # ARG_MAX's index
                continue
            if not readers or not all(is_quantize(x) for x in readers) or name in graph.outputs:
                missing.setdefault(name, [])
    for name, readers in missing.items():
        prod = graph.producer(name)
        culprits += readers + ([prod] if prod is not None and not (is_quantize(prod) or is_dequantize(prod)) else [])
        read = ", ".join(f"{x.op} '{x.name}'" for x in readers)
        if graph.tensors[name].data is not None:
            problems.append(f"constant '{name}' (read by {read}) has no quantization range; add a FakeQuant on it")
            continue
        what = f"output of {prod.op} '{prod.name}'" if prod is not None else "a graph input"
        where = f"; read by {read}" if read else ""
        problems.append(
            f"tensor '{name}' ({what}{where}) has no quantization range; "
            f"add a FakeQuant after '{prod.name if prod is not None else name}'"
        )
    if problems and ctx.allow_float:
        return _leave_float(ctx, culprits, problems)
    if problems:
        more = f" ({len(problems)} problems)" if len(problems) > 1 else ""
        raise ConversionError("cannot quantize fully" + more + ": " + "; ".join(problems))
    return False


def _custom_stays_float(ctx: Context, node: Node) -> None:
    """A custom op (--allow-custom-ops) runs in float32: it reads DEQUANTIZE outputs or float
    constants and its float results go to QUANTIZE, to another float op or out of the model."""
    if node not in ctx.float_ops:
        ctx.float_ops.add(node)
        ctx.note(f"custom op {node.attrs['custom_code']} '{node.name}' stays float32 (--allow-custom-ops): "
                 f"DEQUANTIZE before it, float32 results")


def _leave_float(ctx: Context, culprits: list[Node], problems: list[str]) -> bool:
    """--allow-float: the ops around each problem stay float, with DEQUANTIZE/QUANTIZE at the
    boundaries (the quantize stage keeps those pairs as real ops). Each float op is reported."""
    for node in culprits:
        if node in ctx.float_ops:
            continue
        ctx.float_ops.add(node)
        ctx.note(f"{node.op} '{node.name}' stays float32 (--allow-float)")
    ctx.note("why: " + "; ".join(problems))
    return True
