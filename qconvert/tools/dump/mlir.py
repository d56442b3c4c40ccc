"""Each tensor's ``type`` in ``qconvert dump``: the MLIR quant dialect's notation (the seed
documents' and TensorFlow's CHECK lines; the forms are listed in ``qconvert.tools.dump``'s
docstring).

May import: numpy, ``qconvert.ops`` (which operands are symmetric weights).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from qconvert.ops import row

# MLIR's names of TFLite's tensor types (storage types of quantized tensors for the integers)
_MLIR_ELEMENT = {"float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16", "int8": "i8",
                 "int4": "i4", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
                 "uint32": "u32", "uint64": "u64", "bool": "i1", "string": "!tf_type.string"}


def _num(v: float | None) -> str:
    """A float32 scale as the shortest decimal that reads back as that float32."""
    return "nan" if v is None or not math.isfinite(v) else str(np.float32(v)).replace("e-0", "e-").replace("e+0", "e+")


def _param(scale: float | None, zp: int) -> str:
    return _num(scale) + (f":{zp}" if zp else "")


def weight_operands(sg: Any) -> frozenset[int]:
    """Tensors read as the weights of an op whose kernel takes symmetric weights."""
    out = set()
    for op in sg.operators:
        r_ = row(op.builtin)
        if r_ is not None and (r_.symmetric_weights or r_.int4_version is not None):
            slot = r_.operand_slots[1]
            if slot < len(op.inputs) and op.inputs[slot] >= 0:
                out.add(op.inputs[slot])
    return frozenset(out)


def mlir_type(t: Any, sg: Any = None, weight: bool = False, limit: int | None = None) -> str:
    """``tensor<...>`` in the MLIR quant dialect's notation (see the module docstring); ``limit``
    shortens a scale list to that many entries."""
    dims = "".join(f"{d}x" for d in t.shape)
    storage = _MLIR_ELEMENT.get(t.dtype, t.dtype)
    if t.blockwise is not None and sg is not None:
        return f"tensor<{dims}{_blockwise_type(t, sg, storage, limit)}>"
    if not t.scale:
        return f"tensor<{dims}{storage}>"
    if weight and t.data is not None and t.dtype in ("int8", "int4"):
        lo = -7 if t.dtype == "int4" else -127
        try:
            if int(t.array().min(initial=0)) >= lo:
                storage += f"<{lo}:{-lo}>"
        except (TypeError, ValueError):
            pass
    zps = list(t.zero_point) or [0] * len(t.scale)
    if len(t.scale) == 1 and not (t.quantized_dimension and len(t.shape) > 1):
        return f"tensor<{dims}!quant.uniform<{storage}:f32, {_param(t.scale[0], zps[0])}>>"
    pairs = [_param(s, z) for s, z in zip(t.scale, zps)]
    if limit is not None and len(pairs) > limit:
        pairs = [*pairs[:limit], f"... {len(t.scale)} scales"]
    return f"tensor<{dims}!quant.uniform<{storage}:f32:{t.quantized_dimension}, {{{','.join(pairs)}}}>>"


def _blockwise_type(t: Any, sg: Any, storage: str, limit: int | None) -> str:
    """The sub-channel type: blocks of ``block_size`` along the last dimension (the input
    dimension of a FULLY_CONNECTED weight), scales from the details' scale tensor, row by row."""
    scales_at, zps_at, block = t.blockwise
    axis = len(t.shape) - 1
    try:
        s = sg.tensors[scales_at].array().astype(np.float32)
        rows = s.reshape(s.shape[0], -1) if s.ndim else s.reshape(1, 1)
        text_rows = [",".join(_num(float(v)) for v in (r if limit is None else r[:limit])) +
                     (",..." if limit is not None and len(r) > limit else "") for r in
                     (rows if limit is None else rows[:limit])]
        more = f",... {rows.shape[0]} rows" if limit is not None and rows.shape[0] > limit else ""
        params = "{" + ",".join(f"{{{r}}}" for r in text_rows) + more + "}"
    except (AttributeError, IndexError, TypeError, ValueError):
        params = f"{{scales in tensor {scales_at}}}"
    return f"!quant.uniform<{storage}:f32:{{{axis}:{block}}}, {params}>"


def short_type(text: str, keep: int = 3) -> str:
    """An MLIR type with a long ``{...}`` scale list cut to ``keep`` entries (text output)."""
    start = text.find(", {")
    if start < 0:
        return text
    body = text[start + 3:text.rfind("}")]
    parts = body.split(",")
    if len(parts) <= keep + 1:
        return text
    return f"{text[:start + 3]}{','.join(parts[:keep])},... {len(parts)}}}>>"
