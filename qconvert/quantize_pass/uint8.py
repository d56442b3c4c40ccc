"""``--inference-type uint8``: the finished int8 model moved to uint8, as TensorFlow's
``inference_type=tf.uint8`` (QUANTIZED_UINT8) frozen-graph path writes it.

    int8 x (s, z) ──▶ CONV_2D ◀── int8 w (s_w, z_w), int32 b   ⇒   uint8 x (s, z+128), uint8 w (s_w, z_w+128), int32 b

Every int8 tensor, constants included, keeps its scale and takes its zero point + 128 and
values + 128: TensorFlow nudges a FakeQuant's range on [0, 255] and its int8 path subtracts 128
from that (``ConvertUnsignedToSigned``), so the shift gives back its uint8 types and bytes
(measured on TF 2.21, tests/e2e/test_uint8_model.py). int32 biases and shapes do not change.
Inputs with ``--inputs-range`` took the unsigned-domain parameters in the ``inputs`` stage.
Op versions are then the ones TensorFlow writes for uint8 (``ops.uint8_version``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from qconvert.ir import Graph
from qconvert.ir.passes import Context


def to_uint8(graph: Graph, ctx: Context) -> bool:
    if ctx.options.precision.inference_type != "uint8":
        return False
    for t in graph.tensors.values():
        if t.dtype != "int8":
            continue
        t.dtype = "uint8"
        if t.quant is not None:
            q = t.quant
            t.quant = dataclasses.replace(q, zero_point=tuple(z + 128 for z in q.zero_point), qmin=q.qmin + 128,
                                          qmax=q.qmax + 128, dtype="uint8")
        if t.data is not None:
            t.data = (np.asarray(t.data).astype(np.int16) + 128).astype(np.uint8)
    return True
