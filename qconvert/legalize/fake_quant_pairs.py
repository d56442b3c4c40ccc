"""The ``legalize`` stage: FakeQuant nodes become QUANTIZE → DEQUANTIZE pairs.

    x ──▶ FakeQuant*(min, max) ──▶ y    ⇒    x ──▶ FAKE_QUANT ──▶ Q(params) ──▶ DQ ──▶ y

The parameters are what TensorFlow's converter derives from min/max (unsigned
domain, nudged zero point, shifted to int8). A weight FakeQuant of 2..7 bits keeps
its grid (INT4 storage for 4 bits, int8 for the others); an activation FakeQuant below
8 bits is an error (TFLite's int8 kernels cannot clamp to a coarser grid) unless
``--low-bit-activations 8bit`` asks for its range at 8-bit resolution. A ConcatV2 whose inputs all come from
FakeQuants but that has none after it first gets one over the union of their
ranges, which is what TensorFlow's converter produces for it. The FAKE_QUANT node stays for now:
on a constant weight, constant folding evaluates it with TensorFlow's float32
kernel; on an activation, a later pass drops it. min/max must be constants.
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, Tensor
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after
from qconvert.quant import fake_quant_params, fake_quant_params_per_channel

# a private mark on the DEQUANTIZE of a FakeQuantWithMinMaxArgs (never written to a file)
FROM_FAKE_QUANT_ARGS = "_from_fake_quant_args"

_VARIANTS = {
    "FakeQuantWithMinMaxArgs": "args",
    "FakeQuantWithMinMaxVars": "vars",
    "FakeQuantWithMinMaxVarsPerChannel": "per_channel",
}


def _bounds(graph: Graph, node, slot: int, what: str) -> np.ndarray:
    if slot >= len(node.inputs) or not graph.is_const(node.inputs[slot]):
        raise ConversionError(
            f"node '{node.name}' ({node.op}): its {what} input is not a constant; freeze the graph "
            f"(convert_variables_to_constants) so FakeQuant ranges are constants"
        )
    return np.asarray(graph.const(node.inputs[slot]), dtype=np.float32)


def _range_of(graph: Graph, node) -> tuple[float, float] | None:
    """The (min, max) of a per-tensor FakeQuant node, if constant."""
    variant = _VARIANTS.get(node.op)
    if variant == "args":
        return float(node.attrs.get("min", -6.0)), float(node.attrs.get("max", 6.0))
    if variant == "vars" and all(graph.is_const(i) for i in node.inputs[1:3]):
        lo, hi = (np.asarray(graph.const(i), np.float32) for i in node.inputs[1:3])
        if lo.size == 1 and hi.size == 1:
            return float(lo.reshape(-1)[0]), float(hi.reshape(-1)[0])
    return None


def move_reshape_above_fake_quant(graph: Graph, ctx: Context) -> bool:
    """``FakeQuant(x) ──▶ Reshape`` ⇒ ``Reshape(x) ──▶ FakeQuant`` when the FakeQuant has no other
    reader, as TensorFlow's converter rewrites it before quantizing. On a graph input it depends on
    the FakeQuant's kind (measured on TF 2.21): after a ``FakeQuantWithMinMaxVars`` a Reshape or a
    Transpose moves above it, so ``--inputs-range`` sets the input's parameters and a QUANTIZE to the
    FakeQuant's follows the op (a Keras Conv1D's ExpandDims, a Dense on 3-D); after a
    ``FakeQuantWithMinMaxArgs`` nothing moves, and the input takes the FakeQuant's parameters."""
    moved = False
    for fq in graph:
        if fq.op not in ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs"):
            continue
        at_input = fq.inputs[0] in graph.inputs
        if at_input and fq.op != "FakeQuantWithMinMaxVars":
            continue
        readers = graph.consumers(fq.outputs[0])
        movable = ("Reshape", "Transpose") if at_input else ("Reshape",)
        if len(readers) != 1 or readers[0].op not in movable or fq.outputs[0] in graph.outputs:
            continue
        reshape = readers[0]
        if reshape.inputs[0] != fq.outputs[0]:
            continue
        x, fq_out, r_out = fq.inputs[0], fq.outputs[0], reshape.outputs[0]
        later = list(graph.consumers(r_out))
        reshape.inputs[0] = x
        fq.inputs[0] = r_out
        graph.tensors[fq_out].shape = graph.tensors[r_out].shape
        for r in later:
            r.inputs = [fq_out if i == r_out else i for i in r.inputs]
        graph.outputs = [fq_out if o == r_out else o for o in graph.outputs]
        graph.move_after(fq, reshape)
        moved = True
    return moved


def concat_union_ranges(graph: Graph) -> bool:
    """A ConcatV2 of FakeQuant outputs with no FakeQuant after it gets one over the
    union of its inputs' ranges, as TensorFlow's converter does (measured on TF 2.21)."""
    added = False
    for node in graph:
        if node.op != "ConcatV2":
            continue
        out = node.outputs[0]
        if any(r.op in _VARIANTS for r in graph.consumers(out)):
            continue
        ranges = []
        for name in node.inputs[:-1]:
            prod = graph.producer(name)
            ranges.append(_range_of(graph, prod) if prod is not None else None)
        if not ranges or any(r is None for r in ranges):
            continue
        lo = min(r[0] for r in ranges)  # type: ignore[index]
        hi = max(r[1] for r in ranges)  # type: ignore[index]
        producers = [graph.producer(name) for name in node.inputs[:-1]]
        bits = max(int(p.attrs.get("num_bits", 8)) for p in producers if p is not None)
        if bits == 16:  # 16x8: symmetric and narrow, as the inputs' FakeQuants
            hi = max(abs(lo), abs(hi))
            lo = -hi
        fq_out = graph.unique_name(f"{out}/union_fq")
        readers = list(graph.consumers(out))
        graph.add_tensor(Tensor(fq_out, "float32", graph.tensors[out].shape))
        mn = graph.add_const(f"{fq_out}/min", np.float32(lo))
        mx = graph.add_const(f"{fq_out}/max", np.float32(hi))
        fq = Node("FakeQuantWithMinMaxVars", [out, mn, mx], [fq_out],
                  {"num_bits": bits, "narrow_range": bits == 16}, name=fq_out)
        graph.add_node(fq, after=node)
        for r in readers:
            r.inputs = [fq_out if i == out else i for i in r.inputs]
        graph.outputs = [fq_out if o == out else o for o in graph.outputs]
        added = True
    return added


def _constant_tensors(graph: Graph) -> set[str]:
    """Tensors computed from constants only (a weight, or a weight's BatchNorm folding)."""
    known: set[str] = set()
    for node in graph:
        if node.inputs and all(graph.is_const(i) or i in known for i in node.inputs if i):
            known.update(node.outputs)
    return known


def _grid_bits(graph: Graph, ctx: Context, node: Node, num_bits: int, where: str, constants: set[str]) -> int:
    """The grid a FakeQuant's parameters describe: its own ``num_bits`` (2..8) on a weight; on an
    activation 8 or 16 bits (16x8 QAT), and 8 for a narrower one only when the user accepts the
    finer grid. Everything else is a one-line error."""
    if not 2 <= num_bits <= 16:
        raise ConversionError(f"{where}: num_bits={num_bits}; TensorFlow's FakeQuant takes 2..16 bits")
    weight = graph.is_const(node.inputs[0]) or node.inputs[0] in constants
    if num_bits == 16:
        if weight:
            raise ConversionError(f"{where}: a 16-bit weight FakeQuant; 16x8 models keep int8 weights: train the "
                                  f"weights with 8-bit FakeQuants (num_bits=8, narrow_range)")
        return 16
    if num_bits > 8:
        raise ConversionError(f"{where}: num_bits={num_bits}; TFLite stores activations in 8 or 16 bits: use "
                              f"num_bits=8 or 16")
    if ctx.qat16 and not weight:
        raise ConversionError(f"{where}: an {num_bits}-bit activation FakeQuant in a graph whose other activation "
                              f"FakeQuants are 16-bit; a 16x8 model has int16 activations throughout: make them "
                              f"all 16-bit")
    if num_bits == 8 or weight:
        return num_bits
    if ctx.options.precision.low_bit_activations != "8bit":
        raise ConversionError(
            f"{where}: a {num_bits}-bit activation FakeQuant (num_bits={num_bits}); TFLite's int8 kernels cannot "
            f"clamp to a {num_bits}-bit grid, so the file would not compute what training simulated. "
            f"Retrain with 8-bit activations, or pass --low-bit-activations 8bit to quantize this range at "
            f"8-bit resolution"
        )
    ctx.note(f"tensor '{node.outputs[0]}': {num_bits}-bit activation FakeQuant quantized at 8-bit resolution "
             f"(--low-bit-activations 8bit): finer than training's grid, so outputs differ from the training graph")
    return 8


def legalize_fake_quant(graph: Graph, ctx: Context) -> bool:
    if ctx.options.precision.dynamic_range:
        fq = next((n for n in graph if n.op in _VARIANTS), None)
        if fq is not None:
            flag = ctx.options.precision.dynamic_range_flag
            raise ConversionError(f"node '{fq.name}' ({fq.op}): {flag} quantizes the weights of float graphs "
                                  f"(activations stay float); this graph was trained with FakeQuant: convert it "
                                  f"without {'--block-size' if ctx.options.precision.block_size else flag}")
    changed = concat_union_ranges(graph)
    constants = _constant_tensors(graph)
    if ctx.options.precision.activations == "int16" and not ctx.qat16:
        act = next((n for n in graph if n.op in _VARIANTS and not (graph.is_const(n.inputs[0])
                                                                    or n.inputs[0] in constants)), None)
        if act is not None:
            raise ConversionError(f"node '{act.name}' ({act.op}) on tensor '{act.inputs[0]}': --activations int16 "
                                  f"quantizes float graphs from calibration (or 16-bit QAT graphs); this graph's "
                                  f"activations were trained with 8-bit FakeQuants: convert it without "
                                  f"--activations int16")
    if ctx.options.precision.weights == "int4":
        trained = [n for n in graph if n.op in _VARIANTS and (graph.is_const(n.inputs[0]) or n.inputs[0] in constants)]
        if trained:
            ctx.note(f"--weights int4 applies to weights without FakeQuant; {len(trained)} weight(s) with one (e.g. "
                     f"'{trained[0].inputs[0]}') keep the grid training used")
    for node in graph:
        variant = _VARIANTS.get(node.op)
        if variant is None:
            continue
        num_bits = int(node.attrs.get("num_bits", 8))
        narrow = bool(node.attrs.get("narrow_range", False))
        if variant == "args":
            lo = np.float32(node.attrs.get("min", -6.0))
            hi = np.float32(node.attrs.get("max", 6.0))
        else:
            lo = _bounds(graph, node, 1, "min")
            hi = _bounds(graph, node, 2, "max")
        out = node.outputs[0]
        shape = graph.tensors[out].shape or ()
        per_channel = variant == "per_channel"
        where = f"node '{node.name}' ({node.op}) on tensor '{node.inputs[0]}'"
        grid = _grid_bits(graph, ctx, node, num_bits, where, constants)
        lo_a, hi_a = np.atleast_1d(lo), np.atleast_1d(hi)
        if not (np.isfinite(lo_a).all() and np.isfinite(hi_a).all()):
            raise ConversionError(f"{where}: min/max are not finite ({lo_a.tolist()}, {hi_a.tolist()})")
        if (lo_a > hi_a).any():
            raise ConversionError(f"{where}: min > max ({lo_a.tolist()} > {hi_a.tolist()})")
        if per_channel:
            if lo_a.shape != hi_a.shape or lo_a.ndim != 1 or not shape or lo_a.shape[0] != shape[-1]:
                raise ConversionError(
                    f"{where}: per-channel min/max of size {lo_a.size} do not match the last dimension of {list(shape)}"
                )
            params = fake_quant_params_per_channel(lo_a.tolist(), hi_a.tolist(), grid, narrow, len(shape) - 1)
        else:
            if lo_a.size != 1 or hi_a.size != 1:
                raise ConversionError(f"{where}: min and max must be scalars")
            params = fake_quant_params(float(lo_a[0]), float(hi_a[0]), grid, narrow)
            if grid == 16 and params.zero_point != (0,):
                raise ConversionError(
                    f"{where}: the 16-bit range [{lo_a[0]:g}, {hi_a[0]:g}] gives zero point {params.zero_point[0]}; "
                    f"TFLite's int16 kernels take zero point 0: train this FakeQuant with a symmetric range [-m, m]")
        node.op = "FAKE_QUANT"
        node.inputs = node.inputs[:1]
        node.attrs = {
            "min": lo_a if per_channel else lo_a[0],
            "max": hi_a if per_channel else hi_a[0],
            "num_bits": num_bits,
            "narrow_range": narrow,
            "per_channel": per_channel,
            "variant": "args" if variant == "args" else "vars",
        }
        dq_out = insert_qdq_after(graph, out, params, Origin.FAKE_QUANT)
        if variant == "args":  # TF moves no activation above a MOVE reading it (fuse/reshapes.py)
            graph.producer(dq_out).attrs[FROM_FAKE_QUANT_ARGS] = True  # type: ignore[union-attr]
        changed = True
    return changed
