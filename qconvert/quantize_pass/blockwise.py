"""Dynamic-range blockwise weights (``--weights int4 --block-size N``), the sub-channel
layout of the MLIR RFC as ai-edge-quantizer writes it and LiteRT's XNNPACK delegate runs it:

    FULLY_CONNECTED(x: f32, w: f32[O, I])   ⇒   FULLY_CONNECTED(x: f32, w: i4[O, I] {blocks of N along I})
                                                 + w_scales: f16[O, I / N]  (named by the weight's
                                                   BlockwiseQuantization details, read by no op)

Each block of N input weights of an output row gets the scale max|w_block| / 7, rounded to
FLOAT16, and its values clip(round(w / scale), -7, 7) with the stored FLOAT16 scale (ties away
from zero); no zero points. Activations and every other op stay float32: the runtime quantizes
the input row by row when it multiplies. A FULLY_CONNECTED whose input dimension is not a
multiple of N keeps float weights, with a note.
"""

from __future__ import annotations

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Tensor
from qconvert.ir.passes import Context
from qconvert.options import BLOCK_SIZES
from qconvert.ops import row
from qconvert.quant import round_half_away_array

INT4_MAX = 7


def blockwise_scales_and_values(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(FLOAT16 scales [O, I / block], int8 values in [-7, 7] of shape [O, I]) for weights [O, I]."""
    rows, cols = w.shape
    blocks = np.asarray(w, np.float32).astype(np.float64).reshape(rows, cols // block, block)
    scales = (np.abs(blocks).max(axis=2) / INT4_MAX).astype(np.float16)
    wide = scales.astype(np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(wide > 0, round_half_away_array(blocks / np.where(wide > 0, wide, 1.0)), 0.0)
    return scales, np.clip(q, -INT4_MAX, INT4_MAX).astype(np.int8).reshape(rows, cols)


def blockwise_weights(graph: Graph, ctx: Context) -> bool:
    block = ctx.options.precision.block_size
    if block is None:
        return False
    changed = False
    for node in graph:
        r = row(node.op)
        if r is None or not r.blockwise_weights or len(node.inputs) < 2 or not graph.is_const(node.inputs[1]):
            continue
        name = node.inputs[1]
        t = graph.tensors[name]
        if t.dtype != "float32":
            continue  # shared with an FC already done
        if any(c.op != node.op or c.inputs.index(name) != 1 for c in graph.consumers(name)):
            ctx.note(f"FULLY_CONNECTED '{node.name}': weight '{name}' is also read by other ops; it stays float32")
            continue
        w = np.asarray(graph.const(name))
        if w.ndim != 2 or w.shape[1] % block:
            fits = [b for b in BLOCK_SIZES if w.ndim == 2 and w.shape[1] % b == 0]
            hint = f"--block-size {fits[-1]} fits it" if fits else "no block size of " \
                f"{', '.join(map(str, BLOCK_SIZES))} divides its input dimension"
            ctx.note(f"{node.op} '{node.name}': weights {list(w.shape)} are not a whole number of blocks of "
                     f"{block} along the input dimension; they stay float32 ({hint})")
            continue
        if not np.isfinite(w).all() or np.abs(w).max(initial=0.0) / INT4_MAX > np.finfo(np.float16).max:
            raise ConversionError(f"FULLY_CONNECTED '{node.name}': weight '{name}' has values FLOAT16 block scales "
                                  f"cannot hold (non-finite, or above {np.finfo(np.float16).max * INT4_MAX:g})")
        scales, values = blockwise_scales_and_values(w, block)
        scale_name = graph.unique_name(f"{name}_scales")
        graph.add_tensor(Tensor(scale_name, "float16", scales.shape, scales))
        t.dtype, t.data, t.quant, t.blockwise = "int4", values, None, (scale_name, block)
        changed = True
    return changed
