"""Each tensor's ``type`` in ``qconvert dump``: the MLIR quant dialect's notation (the seed
documents' and TensorFlow's CHECK lines; the forms are listed in ``qconvert.tools.dump``'s
docstring). Scales print as the shortest decimal that gives back the file's float32, formatted
a tensor at a time: MobileNetV2 has 35,000 of them.

May import: numpy, the reader's dataclasses (duck-typed); ``qconvert.ops`` lazily (which
operands are symmetric weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# MLIR's names of TFLite's tensor types (storage types of quantized tensors for the integers)
_MLIR_ELEMENT = {"float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16", "int8": "i8",
                 "int4": "i4", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
                 "uint32": "u32", "uint64": "u64", "bool": "i1", "string": "!tf_type.string"}


def mlir_type(t: Any, sg: Any = None, weight: bool = False, keep: int | None = None) -> str:
    """``tensor<...>`` in the MLIR quant dialect's notation (see the module docstring). ``keep``:
    a list of more than ``keep + 1`` scales shows its first ``keep``, then ``,... N}`` (the
    text output; the same text as :func:`short_type` of the whole type, without formatting
    every scale)."""
    dims = "".join(f"{d}x" for d in t.shape)
    storage = _MLIR_ELEMENT.get(t.dtype, t.dtype)
    if t.blockwise is not None and sg is not None:
        full = f"tensor<{dims}{_blockwise_type(t, sg, storage)}>"
        return full if keep is None else short_type(full, keep)
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
        return f"tensor<{dims}!quant.uniform<{storage}:f32, {_params(t.scale, zps)[0]}>>"
    head = f"tensor<{dims}!quant.uniform<{storage}:f32:{t.quantized_dimension}, {{"
    n = min(len(t.scale), len(zps))  # pairs
    if keep is not None and n > keep + 1:
        return f"{head}{','.join(_params(t.scale[:keep], zps[:keep]))},... {n}}}>>"
    return f"{head}{','.join(_params(t.scale, zps))}}}>>"


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


def weight_operands(sg: Any) -> frozenset[int]:
    """Tensors read as the weights of an op whose kernel takes symmetric weights (only they
    can show a narrower storage range). The op table is imported only for a subgraph that
    holds a quantized int8/int4 constant."""
    if not any(t.scale and t.data is not None and t.dtype in ("int8", "int4") for t in sg.tensors):
        return frozenset()
    from qconvert.ops import row

    out = set()
    for op in sg.operators:
        r_ = row(op.builtin)
        if r_ is not None and (r_.symmetric_weights or r_.int4_version is not None):
            slot = r_.operand_slots[1]
            if slot < len(op.inputs) and op.inputs[slot] >= 0:
                out.add(op.inputs[slot])
    return frozenset(out)


def _nums(values: Sequence[float] | np.ndarray) -> list[str]:
    """Each float32 value as the shortest decimal that reads back as that float32 (numpy's
    ``str`` of a float32, exponents without a leading zero); "nan" for a non-finite one."""
    out = []
    for s in map(str, np.asarray(values, dtype=np.float32).reshape(-1)):
        if s[-1] in "nf":  # nan, inf, -inf
            s = "nan"
        elif "e" in s:
            s = s.replace("e-0", "e-").replace("e+0", "e+")
        out.append(s)
    return out


def _params(scales: Sequence[float], zps: Sequence[int]) -> list[str]:
    return [s + (f":{z}" if z else "") for s, z in zip(_nums(scales), zps)]


def _blockwise_type(t: Any, sg: Any, storage: str) -> str:
    """The sub-channel type: blocks of ``block_size`` along the last dimension (the input
    dimension of a FULLY_CONNECTED weight), scales from the details' scale tensor, row by row."""
    scales_at, _, block = t.blockwise
    axis = len(t.shape) - 1
    try:
        s = sg.tensors[scales_at].array().astype(np.float32)
        rows = s.reshape(s.shape[0], -1) if s.ndim else s.reshape(1, 1)
        params = "{" + ",".join(f"{{{','.join(_nums(r))}}}" for r in rows) + "}"
    except (AttributeError, IndexError, TypeError, ValueError):
        params = f"{{scales in tensor {scales_at}}}"
    return f"!quant.uniform<{storage}:f32:{{{axis}:{block}}}, {params}>"
