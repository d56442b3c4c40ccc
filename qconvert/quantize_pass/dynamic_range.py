"""Dynamic-range files (``--activations float``): the weights quantized, the activations left
float32, as TensorFlow 2.21 writes them with ``optimizations=[DEFAULT]`` and no representative
dataset (measured; docs/converting.md):

    CONV_2D(x: f32, w: f32[≥1024], b: f32)   ⇒   CONV_2D v5(x: f32, w: i8 per channel, b: f32)     (hybrid)
    FULLY_CONNECTED(x, w: f32[≥1024], b)     ⇒   FULLY_CONNECTED v12(x, w: i8 per channel, b),
                                                  asymmetric_quantize_inputs

1. A weight of an op whose row has a ``hybrid`` form (CONV_2D, DEPTHWISE_CONV_2D,
   TRANSPOSE_CONV, FULLY_CONNECTED) with 1024 elements or more becomes int8, symmetric per
   channel along the row's hybrid axis: scale max|w|/127 (a zero channel 1e-6/254), values
   round-half-away(w / scale) in [-127, 127]. Smaller weights, biases and every other constant
   stay float32; the op takes the row's hybrid version and options. A FULLY_CONNECTED's
   all-zero bias goes, as TensorFlow drops it (the legalized MatMul's zero bias among them).
2. ``--weights float16``: every float32 constant becomes FLOAT16 and is read through a
   DEQUANTIZE (version 3), the file says ``reduced_precision_support: fp16accfp32``.
3. Every other op takes the version TensorFlow writes for its float form (``float_version``).
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, Tensor
from qconvert.ir.passes import Context
from qconvert.ir.qdq import is_dequantize
from qconvert.ops import float_version, row
from qconvert.prepare.propagate import weight_params
from qconvert.quant import quantize_array

# TF's dynamic-range quantizer leaves weights with fewer elements float (min_elements_for_weights)
MIN_ELEMENTS = 1024
FLOAT16_DEQUANTIZE_VERSION = 3  # DEQUANTIZE of a FLOAT16 constant (TF 2.21)
REDUCED_PRECISION = ("reduced_precision_support", b"fp16accfp32")  # metadata of TF's float16 files


def _hybrid_weight(graph: Graph, node: Node) -> str | None:
    """The weight tensor of ``node`` that becomes int8 (None: the op stays float)."""
    r = row(node.op)
    if r is None or r.hybrid is None:
        return None
    slot = r.operand_slots[1]
    if slot >= len(node.inputs) or not graph.is_const(node.inputs[slot]):
        return None
    t = graph.tensors[node.inputs[slot]]
    if t.dtype not in ("float32", "int8") or t.data is None or t.data.size < MIN_ELEMENTS:
        return None
    return t.name


def drop_zero_bias(graph: Graph, ctx: Context) -> bool:
    """A FULLY_CONNECTED's all-zero float bias goes (TensorFlow writes none, float or hybrid)."""
    if ctx.options.precision.activations != "float":
        return False
    changed = False
    for node in graph:
        r = row(node.op)
        if r is None or not r.float_drops_zero_bias:
            continue
        slot = r.operand_slots[2]
        if slot < len(node.inputs) and graph.is_const(node.inputs[slot]) \
                and graph.tensors[node.inputs[slot]].dtype == "float32" and not np.any(graph.const(node.inputs[slot])):
            node.inputs[slot] = ""
            changed = True
    if changed:
        graph.prune()
    return changed


def hybrid_weights(graph: Graph, ctx: Context) -> bool:
    p = ctx.options.precision
    if p.activations != "float" or p.weights != "int8":
        return False
    changed = False
    for node in graph:
        name = _hybrid_weight(graph, node)
        if name is None:
            continue
        t = graph.tensors[name]
        r = row(node.op)
        assert r is not None and r.hybrid is not None
        version, axis = r.hybrid
        readers = graph.consumers(name)
        if any(_hybrid_weight(graph, c) != name or row(c.op).hybrid != r.hybrid for c in readers):  # type: ignore[union-attr]
            ctx.note(f"{node.op} '{node.name}': weight '{name}' is also read by other ops; it stays float32")
            continue
        if t.dtype == "float32":
            w = np.asarray(t.data, np.float32)
            if not np.isfinite(w).all():
                raise ConversionError(f"{node.op} '{node.name}': weight '{name}' contains NaN or infinite values; "
                                      f"it cannot be quantized")
            params = weight_params(w, axis)
            t.data, t.dtype, t.quant = quantize_array(w, params), "int8", params
        node.attrs.update(dict(r.hybrid_options))
        node.version = max(version, _float_version(graph, node))
        changed = True
    return changed


def float16_constants(graph: Graph, ctx: Context) -> bool:
    p = ctx.options.precision
    if p.activations != "float" or p.weights != "float16":
        return False
    made: dict[str, str] = {}
    for node in list(graph):
        for k, name in enumerate(node.inputs):
            if not name or not graph.is_const(name) or graph.tensors[name].dtype != "float32":
                continue
            if name not in made:
                t = graph.tensors[name]
                value = np.asarray(t.data, np.float32)
                big = np.abs(value[np.isfinite(value)]).max(initial=0.0) > np.finfo(np.float16).max
                if big:
                    raise ConversionError(f"constant '{name}' has values beyond FLOAT16's range "
                                          f"(±{np.finfo(np.float16).max:g}): --weights float16 cannot hold them")
                half = graph.unique_name(f"{name}_fp16")
                graph.add_tensor(Tensor(half, "float16", t.shape, value.astype(np.float16)))
                out = graph.unique_name(f"{name}_dequantized")
                graph.add_tensor(Tensor(out, "float32", t.shape))
                graph.add_node(Node("DEQUANTIZE", [half], [out], name=out, version=FLOAT16_DEQUANTIZE_VERSION),
                               at_start=True)
                made[name] = out
            node.inputs[k] = made[name]
    if made:
        graph.metadata.setdefault(*REDUCED_PRECISION)
        graph.prune()
    return bool(made)


def float_versions(graph: Graph, ctx: Context) -> bool:
    """Ops still float take the version TensorFlow writes for their float form."""
    for node in graph:
        r = row(node.op)
        hybrid = r is not None and r.hybrid is not None and _is_hybrid(graph, node)
        if not hybrid and not (is_dequantize(node) and graph.tensors[node.inputs[0]].dtype == "float16"):
            node.version = _float_version(graph, node)
    return False


def _float_version(graph: Graph, node: Node) -> int:
    """The float form's version; a grouped convolution (filter input channels < input channels, as
    Keras' ``Conv2D(groups=...)`` gives) takes the row's ``grouped_version``, float, hybrid or float16
    alike (measured on TF 2.21: RegNetX002 and ConvNeXtTiny's CONV_2D v6)."""
    version = float_version(node.op, node.attrs, [bool(i) for i in node.inputs])
    r = row(node.op)
    if r is not None and r.grouped_version is not None and len(node.inputs) > 1:
        x, w = graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape
        if x is not None and w is not None and len(x) == 4 and len(w) == 4 and w[3] != x[3]:
            version = max(version, r.grouped_version)
    return version


def _is_hybrid(graph: Graph, node: Node) -> bool:
    r = row(node.op)
    slot = r.operand_slots[1] if r is not None else 1
    return slot < len(node.inputs) and bool(node.inputs[slot]) and graph.tensors[node.inputs[slot]].dtype == "int8"
