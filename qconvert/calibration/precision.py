"""Per-layer precision (docs/converting.md, "Per-layer precision"): which ops a ``--keep-float`` or
``--int16`` PATTERN takes, and the ``--int16`` islands, built while calibrating (their tensors get
16-bit parameters from the same calibrated ranges as TensorFlow's 16x8 mode gives them).

The rule. A pattern (a Python regex, ``re.search``) matches an op when it is found in one of the
op's output tensor names (TensorFlow's node names, as ``qconvert dump`` and ``compare`` show them)
or in its op type (``TANH``). Precision belongs to a tensor: a name match takes that tensor's
producer AND every op reading it (an int8 reader would quantize the wide tensor again); an op-type
match takes that op alone. A pattern that matches no op is a usage error naming it.

``--int16``: the chosen ops are the 16x8 form of the op (``ctx.int16_ops``; the prepare and quantize
stages ask ``ctx.bits(node)``). Where an island meets the int8 model, the reader's edge gets a
requantize (a QUANTIZE int8 → int16 into the island, int16 → int8 out of it) at the parameters the
tensor has on that side: its calibrated range in 16 bits (symmetric, zero point 0) or 8 bits, or a
fixed-output op's fixed int8 parameters (TANH: 1/128) for an int8 reader of an int16 TANH.
"""

from __future__ import annotations

import re
from typing import Mapping

from qconvert.errors import ConversionError, UsageError
from qconvert.ir import Graph, Node
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after, insert_qdq_on_edge, is_dequantize, is_quantize, origin_of, source_of
from qconvert.ops import Rule, float_operands, row
from qconvert.quant import QuantParams, calibrated_range_params


def compute(node: Node) -> bool:
    r = row(node.op)
    return r is not None and r.rule is not Rule.QUANT


def readers(graph: Graph, tensor: str) -> list[Node]:
    """The compute ops reading ``tensor``, directly or through Q → DQ pairs (requantizes too)."""
    out: list[Node] = []
    for node in graph.consumers(tensor):
        if is_quantize(node) or is_dequantize(node):
            out += [n for n in readers(graph, node.outputs[0]) if n not in out]
        elif node not in out:
            out.append(node)
    return out


def choose_ops(graph: Graph, patterns: tuple[str, ...], flag: str, keeps: str) -> dict[Node, str]:
    """The ops the patterns of ``flag`` take, in graph order, each with why (one clause); ``keeps``
    says what the flag does to a tensor ("keeps float", "makes int16")."""
    chosen: dict[Node, str] = {}
    unused = list(patterns)
    for p in patterns:
        rx = re.compile(p)
        for node in graph.nodes:
            if not compute(node):
                continue
            if rx.search(node.op):
                chosen.setdefault(node, f"{flag} '{p}' matches its op type")
                unused = [u for u in unused if u != p]
            for out in node.outputs:
                if out and rx.search(out):
                    chosen.setdefault(node, f"{flag} '{p}' matches its output '{out}'")
                    unused = [u for u in unused if u != p]
                    for reader in readers(graph, out):
                        chosen.setdefault(reader, f"it reads '{out}', which {flag} '{p}' {keeps}")
    if unused:
        raise UsageError(f"{flag} '{unused[0]}' matches no op: a pattern is searched (re.search) in each op's "
                         f"output tensor names and its op type (e.g. FULLY_CONNECTED); `qconvert dump` lists them")
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return dict(sorted(chosen.items(), key=lambda kv: order[id(kv[0])]))


def choose_int16_ops(graph: Graph, ctx: Context) -> None:
    """``--int16``: fill ``ctx.int16_ops`` (before the calibrated parameters are inserted), one note each."""
    patterns = ctx.options.precision.int16
    if not patterns:
        return
    for node, why in choose_ops(graph, patterns, "--int16", "makes int16").items():
        r = row(node.op)
        if not r.int16:  # type: ignore[union-attr]
            raise ConversionError(f"{node.op} '{node.name}' has no 16x8 form in LiteRT (TensorFlow's 16x8 mode "
                                  f"refuses it too): drop it from --int16 ({why}), or keep it float with "
                                  f"--keep-float")
        fake = _fake_quant_tensor(graph, node)
        if fake is not None:
            raise UsageError(f"--int16: {node.op} '{node.name}' ({why}) reads or writes '{fake}', whose range a "
                             f"FakeQuant gives in 8 bits (a QAT graph): --int16 takes calibrated tensors only; "
                             f"keep it float with --keep-float, or drop it from --int16")
        ctx.int16_ops.add(node)
        ctx.note(f"{node.op} '{node.name}' is 16x8: int16 activations, int8 weights ({why})")
    keep = ctx.options.precision.keep_float
    floats = choose_ops(graph, keep, "--keep-float", "keeps float") if keep else {}
    both = [n for n in floats if n in ctx.int16_ops]
    if both:  # said here, before the samples run, as well as in prepare (a graph calibrate does not see)
        raise UsageError(f"{both[0].op} '{both[0].name}' is taken by --keep-float ({floats[both[0]]}) and by --int16: "
                         f"one precision per op; narrow one of the patterns")


def _fake_quant_tensor(graph: Graph, node: Node) -> str | None:
    """An activation ``node`` reads or writes whose QUANTIZE → DEQUANTIZE pair is a FakeQuant's, if any
    (a weight's FakeQuant says int8, which 16x8 keeps)."""
    for slot in float_operands(node.op, node.inputs):
        name = node.inputs[slot]
        prod = graph.producer(name) if name else None
        if is_dequantize(prod) and origin_of(graph.producer(prod.inputs[0])) is Origin.FAKE_QUANT:  # type: ignore[union-attr]
            return name
    for out in node.outputs:
        if any(is_quantize(q) and origin_of(q) is Origin.FAKE_QUANT for q in graph.consumers(out)):
            return out
    return None


def _params(lo: float, hi: float, bits: int) -> QuantParams:
    return calibrated_range_params(lo, hi, num_bits=bits)


def _fixed(fixed: tuple[float, int], bits: int) -> QuantParams:
    if bits == 16:
        return QuantParams((fixed[0],), (fixed[1],), qmin=-32768, qmax=32767, dtype="int16")
    return QuantParams((fixed[0],), (fixed[1],))


def _text(p: QuantParams) -> str:
    return f"{p.dtype} scale {p.scale[0]:.6g} zero point {p.zero_point[0]}"


def int16_boundaries(graph: Graph, ctx: Context, ranges: Mapping[str, tuple[float, float]]) -> None:
    """After the calibrated Q → DQ pairs are in (each in its producer's bits): every edge where an
    island meets the int8 model reads through a requantize to the reader's bits, reported once."""
    if not ctx.int16_ops:
        return
    keep = ctx.options.precision.keep_float
    floats = set(choose_ops(graph, keep, "--keep-float", "keeps float")) if keep else set()
    said: set[tuple[str, int]] = set()
    for node in list(graph.nodes):
        if not compute(node) or node in floats:  # a float reader dequantizes the int16 result itself
            continue
        mine = ctx.bits(node)
        for slot in float_operands(node.op, node.inputs):
            name = node.inputs[slot]
            if not name or graph.is_const(name):
                continue
            src, producer, _ = source_of(graph, name)
            if producer is not None and not compute(producer) or ctx.bits(producer) == mine:
                continue
            r = row(producer.op) if producer is not None else None
            fixed = None if r is None or r.rule is not Rule.FIXED else r.fixed16 if mine == 16 else r.fixed
            if fixed is not None:  # a fixed-output op's parameters in the reader's bits (TANH: 1/128, 1/32768)
                params, origin = _fixed(fixed, mine), Origin.FIXED
            elif src in ranges:
                params, origin = _params(*ranges[src], bits=mine), Origin.CALIBRATION
            else:
                raise ConversionError(f"--int16: tensor '{src}' between {producer.op if producer else 'the input'} and "
                                      f"{node.op} '{node.name}' has no calibrated range to requantize it with")
            insert_qdq_on_edge(graph, node, slot, params, origin)
            if producer in floats:  # the float island's QUANTIZE goes straight to int16 (said there)
                continue
            if (src, mine) not in said:
                said.add((src, mine))
                into = f"into the 16x8 {node.op} '{node.name}'" if mine == 16 else f"for the int8 {node.op} '{node.name}'"
                ctx.note(f"boundary: '{src}' requantized to {_text(params)} (QUANTIZE) {into}")


    for out in list(graph.outputs):  # the model's outputs are int8 (a QUANTIZE int16 → int8 before them)
        src, producer, _ = source_of(graph, out)
        if producer is None or ctx.bits(producer) == 8:
            continue
        r = row(producer.op)
        if r is not None and r.rule is Rule.FIXED and r.fixed is not None:
            params, origin = _fixed(r.fixed, 8), Origin.FIXED
        elif src in ranges:
            params, origin = _params(*ranges[src], bits=8), Origin.CALIBRATION
        else:
            raise ConversionError(f"--int16: the model output '{src}' has no calibrated range to requantize it with")
        insert_qdq_after(graph, out, params, origin)
        ctx.note(f"boundary: '{src}' requantized to {_text(params)} (QUANTIZE) for the model output")


