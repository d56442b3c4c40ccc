"""``qconvert dump``: what is in a .tflite model, for people (text) and scripts (JSON).

Works on any valid TFLite file (qconvert's, TensorFlow's, float or int8) and never
imports TensorFlow. For qconvert files the ``qconvert_requant`` metadata is decoded
and each record is checked against what TFLite's Prepare step computes from the
float32 scales in the file (``qconvert.quant``); a record that
disagrees is flagged (text: ``!! REQUANT MISMATCH``; JSON: ``"requant_ok": false``).

Selectors (``--ops``, ``--tensors``, ``--metadata``, ``--tensor NAME_OR_INDEX``)
restrict the output to those sections, in text and in JSON; with none, everything
but ``--tensor`` is shown.

JSON shape (``--json``), schema_version 1. Keys are stable; new keys may be added
without a version bump, existing ones are not renamed or removed. A section that
was not selected is absent::

    {
      "schema_version": 1,
      "file": {"name": str, "bytes": int},
      "model": {"description": str, "version": int,             # --metadata
                "min_runtime_version": str | null},
      "metadata": [                                              # --metadata
        {"name": str, "bytes": int,
         "text": str | null,           # printable entries (min_runtime_version)
         "requant": null | {"format_version": int, "records": int, "error": str | null}}
      ],
      "subgraphs": [                                             # --ops / --tensors
        {"index": int, "name": str, "inputs": [int], "outputs": [int],
         "operators": [                                          # --ops
           {"index": int, "op": str,   # BuiltinOperator name, or "CUSTOM"
            "custom_code": str | null, "version": int,
            "inputs": [int], "outputs": [int],   # tensor indices, -1 = optional absent
            "options_type": str, "options": {snake_case: value},
            "requant": null | {
              "per_channel": bool, "act_min": int, "act_max": int, "left_shift": int,
              "multipliers": [int], "shifts": [int],
              "table": null | [int],   # LOGISTIC / TANH: 256 int8 entries by uint8(x)
              "wide": null | [int],    # FULLY_CONNECTED: binary64 bits of in*w/out per pair
              "expected": null | {same 8 keys},   # TFLite's Prepare on the file's scales
              "problems": [str]},
            "requant_ok": bool | null}],     # null: no record for this op
         "tensors": [                                            # --tensors
           {"index": int, "name": str, "dtype": str,  # numpy-style, e.g. "int8"
            "shape": [int], "buffer": int, "buffer_bytes": int,  # 0 for activations
            "quantization": null | {"scale": [float], "zero_point": [int],
                                    "quantized_dimension": int},
            "type": str}]}      # MLIR notation: tensor<8x3x!quant.uniform<i8<-127:127>:f32:0, {...}>>
      ],
      "totals": {                                                # always (unless --tensor)
        "operators": int, "tensors": int, "ops": {op: count},
        "parameter_bytes": int,                 # constant buffers, each counted once
        "buffer_bytes_by_dtype": {dtype: int},
        "int8_buffer_bytes": int, "int32_buffer_bytes": int, "float32_buffer_bytes": int,
        "float_ops": int,                       # ops with a float32/float16 input or output
        "float_op_list": [{"subgraph": int, "index": int, "op": str}],
        "requant_records": int, "requant_flagged": int,
        "runtime_warnings": [str]},             # what the file needs of a runtime (INT4, blockwise)
      "requant_problems": [str],   # records naming no operator, corrupt metadata
      "tensor": {                                                # --tensor only
        "subgraph": int, ...the tensor's entry as in "tensors"...,
        "values": null | [float],         # dequantized, flattened; null for activations
        "stats": null | {"count", "min", "max", "mean", "std"},
        "histogram": null | {"edges": [float], "counts": [int]}}
    }

Scales are the file's float32 values widened exactly to double. Non-finite floats
are written as null. Shapes are the stored shapes (not shape_signature).

Each tensor's ``type`` is written in the MLIR quant dialect's notation (the seed documents'
and TensorFlow's CHECK lines): ``!quant.uniform<i8:f32, 0.0078431377:-1>`` per tensor,
``!quant.uniform<i8<-127:127>:f32:0, {0.1,0.2}>`` per axis (a zero point of 0 is omitted, a
storage range is shown where it is narrower than the type's: the symmetric weights of
convolutions and FULLY_CONNECTED), ``!quant.uniform<i4:f32:{1:32}, {{...}}>`` for blockwise
(sub-channel) weights, blocks of 32 along dimension 1. Scales print as the shortest decimal
that gives back the file's float32. The text output shortens long scale lists.

Modules: ``describe`` (the file as this document), ``mlir`` (the ``type`` strings),
``requant`` (the records and their check), ``render`` (text and JSON); loading and the checks
other tools share are in ``qconvert.tools.tflite_file``.

May import: ``qconvert.tools.tflite_file``, ``qconvert.tools.jsonable``, ``qconvert.tools.text``,
``qconvert.schema``, numpy; ``qconvert.ops`` and ``qconvert.quant`` only where used (see ``describe``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from qconvert.tools.dump.describe import SCHEMA_VERSION, SECTIONS, describe
from qconvert.tools.dump.mlir import mlir_type, short_type
from qconvert.tools.dump.render import TYPE_SCALES, render_json, render_text
from qconvert.tools.tflite_file import load_tflite, quantization_problems, runtime_warnings

__all__ = ["SCHEMA_VERSION", "SECTIONS", "describe", "dump_model", "load_tflite", "mlir_type", "quantization_problems",
           "render_json", "render_text", "runtime_warnings", "short_type"]


def dump_model(path: str | os.PathLike, as_json: bool = False, sections: Iterable[str] | None = None,
               tensor: str | None = None) -> str:
    """``qconvert dump``: the text (or JSON) description of a .tflite file."""
    if as_json:
        return render_json(describe(path, sections, tensor))
    return render_text(describe(path, sections, tensor, type_scales=TYPE_SCALES))
