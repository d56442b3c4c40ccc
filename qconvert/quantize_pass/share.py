"""Equal constants stored once, as TensorFlow 2.21 stores them (measured):

    W ──▶ FULLY_CONNECTED ─▶ … ─▶ FULLY_CONNECTED ◀── W'        ⇒      one W read by both
    (W, W' separate Const nodes with equal float values)

TensorFlow merges constants that are equal *as float constants of the graph* (same dtype, shape
and bytes) before it quantizes them: the weights of an unrolled cell, MobileNetV3's hard-swish 1/6
read by every MUL, a LayerNorm's axes. Quantization then gives each reader the constant it
needs: a weight or operand that its readers quantize alike stays one tensor, readers quantizing
it differently get one tensor each, and every op gets its own int32/int64 bias, even where two
are equal (one float bias read by two FULLY_CONNECTEDs behind the same input scale: two int32
tensors with equal scales and bytes). Constants that differ as floats stay apart even where
they quantize to the same bytes (a weight and the same weight one ulp away: two int8 tensors
with equal contents).

- :func:`share_constants` at the end of the ``quantize`` stage: two constant tensors become one
  when they are equal as stored (dtype, shape, quantization parameters, bytes) and, if quantized,
  came from equal float constants (``Tensor.source``, the digest ``quantize_constants`` records
  for every quantized constant but biases that another one of its dtype, shape and parameters
  could equal; one alone has none, and is left as it is).
  Unquantized constants (int32 shapes and axes, float constants of float ops) merge when equal.
- At the start of the ``dynamic-range`` stage the same pass merges the equal float constants,
  before weights become int8 or float16, so a shared weight is quantized once and read through
  one DEQUANTIZE, as in TensorFlow's files.

The name that stays is the first reader's in graph order. Not merged: the op table's
``unshared_slots`` (a STRIDED_SLICE's begin, end and strides: TensorFlow rewrites them after its
last merge, and two equal ones may stay apart).
"""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph
from qconvert.ir.digest import value_digest
from qconvert.ir.passes import Context
from qconvert.ops import row


def share_constants(graph: Graph, ctx: Context) -> bool:
    groups: dict[tuple, list[str]] = {}  # (dtype, shape, parameters, source) → the tensors kept
    digests: dict[str, bytes] = {}  # their contents' digests, computed once a second one comes
    mapping: dict[str, str] = {}
    pinned = {*graph.inputs, *graph.outputs}
    pinned.update(t.blockwise[0] for t in graph.tensors.values() if t.blockwise is not None)
    # TensorFlow rewrites a STRIDED_SLICE's begin/end/strides late (padded to the input's rank) and
    # merges them only in part (measured: equal begin and end stay two tensors): left as they are
    for n in graph.nodes:
        r = row(n.op)
        if r is not None and r.unshared_slots:
            pinned.update(i for k, i in enumerate(n.inputs) if k in r.unshared_slots)

    def digest(name: str) -> bytes:
        if name not in digests:
            digests[name] = value_digest(np.asarray(graph.tensors[name].data))
        return digests[name]

    for node in graph.nodes:
        for name in node.inputs:
            if not name or name in mapping or name in pinned:
                continue
            t = graph.tensors[name]
            if t.data is None or t.blockwise is not None or (t.quant is not None and t.source is None):
                continue
            kept = groups.setdefault((t.dtype, t.shape, t.quant, t.source), [])
            if name in kept:
                continue
            twin = next((k for k in kept if digest(k) == digest(name)), None) if kept else None
            if twin is None:
                kept.append(name)
            else:
                mapping[name] = twin
    if not mapping:
        return False
    for node in graph.nodes:
        if any(i in mapping for i in node.inputs):
            node.inputs = [mapping.get(i, i) for i in node.inputs]
    for name in mapping:
        del graph.tensors[name]
    return True
