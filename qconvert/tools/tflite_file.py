"""A .tflite file as the tools read it (``dump``, ``check``, ``targets``): loading with a
one-line error, and what the file asks of a runtime beyond the int8 builtins.

Light on purpose: the reader's dataclasses and nothing else at import time; the op table
only when a file has INT4 tensors.

May import: ``qconvert.schema.reader``, ``qconvert.io``, ``qconvert.errors``; ``qconvert.ops`` lazily.
"""

from __future__ import annotations

import os
from typing import Any

from qconvert.errors import ConversionError
from qconvert.io import read_bytes
from qconvert.schema.reader import read_model


def load_tflite(path: str | os.PathLike) -> tuple[Any, int]:
    """(the model, its size in bytes); one-line ConversionError for an empty or damaged file."""
    data = read_bytes(path, "a .tflite file")
    if not data:
        raise ConversionError(f"{os.fspath(path)}: the file is empty, not a TFLite file")
    try:
        return read_model(data), len(data)
    except ValueError as exc:
        raise ConversionError(f"{os.fspath(path)}: {exc}") from None


def quantization_problems(t: Any) -> list[str]:
    """What LiteRT's model loader rejects in a tensor's quantization (measured with ai-edge-litert
    2.3: "quantized_dimension must be in range [0, rank)", and per-axis scales that do not
    match the dimension). TFLite Micro does not check these."""
    problems = []
    rank, dim, n = len(t.shape), int(t.quantized_dimension), len(t.scale)
    if rank and not 0 <= dim < rank:
        problems.append(f"quantized_dimension {dim} is outside the tensor's {rank} dimension(s): LiteRT rejects "
                        f"the file ({'per-tensor' if n == 1 else f'{n} scales'})")
    elif n > 1 and rank and t.shape[dim] != n:
        problems.append(f"{n} scales along dimension {dim} of size {t.shape[dim]}: LiteRT rejects the file")
    if t.zero_point and len(t.zero_point) != n:
        problems.append(f"{len(t.zero_point)} zero points for {n} scales")
    return problems


def runtime_warnings(sg: Any) -> list[str]:
    """What a subgraph needs of a runtime beyond the int8 builtins (measured in issue 17 with
    LiteRT 2.3, TFLite Micro and Vela 5.2)."""
    out = []
    int4 = [t for t in sg.tensors if t.dtype == "int4"]
    if int4:
        from qconvert.ops import row

        no_ref = sorted({o.builtin for o in sg.operators
                         if (r := row(o.builtin)) is not None and r.int4_version is not None
                         and not r.int4_in_reference and o.version >= r.int4_version})
        out.append(f"INT4 tensors ({len(int4)}, e.g. '{int4[0].name}'): Vela 5.2 (Ethos-U) crashes on them; "
                   f"convert with --int4-storage int8 for an NPU"
                   + "".join(f"; LiteRT's reference kernels lack {op} v{row(op).int4_version} "  # type: ignore[union-attr]
                             f"(its default kernels run it)" for op in no_ref))
    blocks = [t for t in sg.tensors if t.blockwise is not None]
    if blocks:
        out.append(f"blockwise-quantized weights ({len(blocks)}, e.g. '{blocks[0].name}'): only LiteRT's XNNPACK "
                   f"delegate computes them (its reference kernels read the weights as zero; TFLite Micro rejects "
                   f"the file; Vela 5.2 crashes)")
    from qconvert.runtime.interpreter import float_kind

    kind = float_kind(sg)
    if kind is not None and kind[0] == "hybrid":
        out.append(f"dynamic range: {kind[1]}; LiteRT runs hybrid kernels (they quantize the activations at run "
                   f"time), TFLite Micro and Vela have none")
    elif kind is not None:
        out.append(f"float16 weights: {kind[1]}; a float model (LiteRT, GPU delegates), not for TFLite Micro or "
                   f"Vela")
    return out
