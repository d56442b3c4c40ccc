"""The ``prepare`` stage, after the quantizability check: ``--keep-float PATTERN`` float islands
inside an int8 model (docs/converting.md, "Per-layer precision").

Which ops: a pattern (a Python regex, ``re.search``) matches an op when it is found in one of
the op's output tensor names (TensorFlow's node names, as ``qconvert dump`` and ``compare``
show them) or in its op type (``TANH``). Precision belongs to a tensor: a name match keeps that
tensor float from end to end, so its producer AND every op reading it stay float32 (an int8
reader would quantize the wide tensor again). An op-type match keeps that op alone float, as
TensorFlow's ``denylisted_ops`` does. The set of float ops is what TensorFlow's
``QuantizationDebugOptions(denylisted_nodes=...)`` takes to write the same file.

How: the float ops read constants as float (``float_op_constants`` in the quantize stage) and
keep the DEQUANTIZE before them and the QUANTIZE after them (with the parameters propagation
gave: a float TANH's result is quantized at TANH's fixed 1/128, as TensorFlow writes it).
Between two float ops the Q → DQ pair goes: the tensor stays float (measured on TF 2.21).
In a QAT graph that pair is the FakeQuant's, so its rounding goes too (reported). Every float
op and every boundary tensor is reported in one line; a pattern that matches no op is a
usage error naming it (a typo must not give a silent all-int8 model).
"""

from __future__ import annotations

from qconvert.calibration.precision import choose_ops, readers
from qconvert.errors import UsageError
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import is_dequantize, is_quantize, origin_of, source_of




def keep_float(graph: Graph, ctx: Context) -> bool:
    patterns = ctx.options.precision.keep_float
    if not patterns:
        return False
    chosen = choose_ops(graph, patterns, "--keep-float", "keeps float")
    both = [n for n in chosen if n in ctx.int16_ops]
    if both:
        raise UsageError(f"{both[0].op} '{both[0].name}' is taken by --keep-float ({chosen[both[0]]}) and by --int16: "
                         f"one precision per op; narrow one of the patterns")
    for node, why in chosen.items():
        ctx.float_ops.add(node)
        ctx.note(f"{node.op} '{node.name}' stays float32 ({why})")
    # a tensor between two float ops stays float: the Q → DQ pair between them goes
    for node in chosen:
        for slot, name in enumerate(node.inputs):
            if not name:
                continue
            src, _, passed = source_of(graph, name)
            qs = [n for n in passed if is_quantize(n)]
            if src == name or graph.producer(src) not in ctx.float_ops:
                continue
            node.inputs[slot] = src
            dropped = [q for q in qs if origin_of(q) is Origin.FAKE_QUANT]
            if dropped:
                ctx.note(f"tensor '{src}' stays float32 between float ops: the FakeQuant range on it "
                         f"({_params(graph, dropped[0].outputs[0])}) is not applied")
    for node in chosen:  # a float result an int16 op reads: QUANTIZE to int16 directly, no int8 hop
        for out in node.outputs:
            for q in [c for c in graph.consumers(out) if is_quantize(c)]:
                for reader_q in _int16_requantizes(graph, q.outputs[0]):
                    reader_q.inputs[0] = out
    graph.prune()
    _report_boundaries(graph, ctx, list(chosen))
    return True


def _int16_requantizes(graph: Graph, tensor: str) -> list[Node]:
    """The QUANTIZE nodes to int16 reached from ``tensor`` (a float result's int8 QUANTIZE output)
    through one DEQUANTIZE: an int16 reader's requantize."""
    out = []
    for dq in graph.consumers(tensor):
        if is_dequantize(dq):
            out += [q for q in graph.consumers(dq.outputs[0])
                    if is_quantize(q) and graph.tensors[q.outputs[0]].dtype == "int16"]
    return out


def _params(graph: Graph, tensor: str) -> str:
    q = graph.tensors[tensor].quant
    if q is None:
        return graph.tensors[tensor].dtype
    scale = f"scale {q.scale[0]:.6g}" if len(q.scale) == 1 else f"{len(q.scale)} scales"
    zp = f" zero point {q.zero_point[0]}" if len(q.zero_point) == 1 else ""
    return f"{graph.tensors[tensor].dtype} {scale}{zp}"


def _report_boundaries(graph: Graph, ctx: Context, floats: list[Node]) -> None:
    """One line per boundary tensor of the float islands: where int8 becomes float32 and back."""
    seen: set[str] = set()
    for node in floats:
        for name in node.inputs:
            prod = graph.producer(name) if name else None
            if not is_dequantize(prod) or graph.is_const(source_of(graph, name)[0]) or name in seen:
                continue
            seen.add(name)
            src = prod.inputs[0]  # type: ignore[union-attr]
            ctx.note(f"boundary: '{source_of(graph, name)[0]}' {_params(graph, src)} → float32 (DEQUANTIZE) into the "
                     f"float {node.op} '{node.name}'")
        for out in node.outputs:
            qs = [q for q in graph.consumers(out) if is_quantize(q)]
            if not qs or out in seen:
                continue
            seen.add(out)
            rs = [r for q in qs for r in readers(graph, q.outputs[0])]
            to = [f"{r.op} '{r.name}'" for r in rs[:3]] + (["..."] if len(rs) > 3 else [])
            if any(dq.outputs[0] in graph.outputs for q in qs for dq in graph.consumers(q.outputs[0])):
                to.append("the model output")
            to = ", ".join(to)
            ctx.note(f"boundary: '{out}' float32 → {_params(graph, qs[0].outputs[0])} (QUANTIZE) for {to}")
