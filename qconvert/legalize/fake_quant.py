"""Stage 2a: FakeQuant nodes become QUANTIZE → DEQUANTIZE pairs.

    x ──▶ FakeQuant*(min, max) ──▶ y    ⇒    x ──▶ FAKE_QUANT ──▶ Q(params) ──▶ DQ ──▶ y

The parameters are what TensorFlow's converter derives from min/max (unsigned
domain, nudged zero point, shifted to int8). The FAKE_QUANT node stays for now:
on a constant weight, constant folding evaluates it with TensorFlow's float32
kernel; on an activation, a later pass drops it. min/max must be constants.
"""

from __future__ import annotations

import numpy as np

from qconvert.converter.ir import ConversionError, Graph
from qconvert.converter.qdq import insert_qdq_after

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


def legalize_fake_quant(graph: Graph) -> Graph:
    from qconvert.converter.quant_math import fake_quant_params, fake_quant_params_per_channel

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
        if num_bits != 8:
            raise ConversionError(f"{where}: num_bits={num_bits}; only 8-bit FakeQuant is supported")
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
            params = fake_quant_params_per_channel(lo_a.tolist(), hi_a.tolist(), num_bits, narrow, len(shape) - 1)
        else:
            if lo_a.size != 1 or hi_a.size != 1:
                raise ConversionError(f"{where}: min and max must be scalars")
            params = fake_quant_params(float(lo_a[0]), float(hi_a[0]), num_bits, narrow)
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
        graph.touch()
        insert_qdq_after(graph, out, params, "fake_quant")
    return graph
